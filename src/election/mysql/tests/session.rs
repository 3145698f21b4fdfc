//! The sessions against MariaDB: hosts, read-only servers, objects leader-exec did not make, the
//! session's own settings, the client-side timer, TLS.

use super::*;

/// A read-only server (a replica, an old primary) is never used: alone it is refused as
/// read-only, worth trying again; named first in the URL it is passed over for the writable one.
#[tokio::test]
async fn a_read_only_server_is_skipped_or_refused() {
    let replica = MariaDb::start_read_only();
    let m = candidate(&url(replica.port), "a", TTL);
    match m.campaign().await {
        Err(e) => {
            assert!(e.is_transient(), "{e}");
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        Ok(c) => panic!("a read-only server used: {c:?}"),
    }
    let primary = MariaDb::start();
    let both = format!(
        "mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{},127.0.0.1:{}/{MARIADB_DATABASE}",
        replica.port, primary.port
    );
    let m = candidate(&both, "a", TTL);
    assert!(leads(&m).await.is_some());
    assert_eq!(
        primary
            .sql("SELECT holder FROM leader_exec.leader_exec_leases")
            .trim(),
        "a"
    );
}

/// A view, a table without leader-exec's marker, or a trigger where its tables go are refused
/// with one line saying what was found.
#[tokio::test]
async fn objects_leader_exec_did_not_make_are_refused() {
    let db = MariaDb::start();
    let url = url(db.port);
    let refused = async |setup: &str, says: &str| {
        db.sql(setup);
        let m = candidate(&url, "a", TTL);
        let e = m.campaign().await.expect_err(setup);
        assert!(!e.is_transient(), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(says) && !text.contains('\n'),
            "{setup}: {text}"
        );
    };
    refused(
        "CREATE VIEW leader_exec.leader_exec_leases AS SELECT 1 AS name",
        "leader_exec.leader_exec_leases is a view",
    )
    .await;
    refused(
        "DROP VIEW leader_exec.leader_exec_leases;
         CREATE TABLE leader_exec.leader_exec_leases (name VARBINARY(512) PRIMARY KEY)",
        "leader_exec.leader_exec_leases is a table leader-exec did not make",
    )
    .await;
    db.sql("DROP TABLE leader_exec.leader_exec_leases");
    assert!(leads(&candidate(&url, "a", TTL)).await.is_some());
    refused(
        "CREATE TRIGGER leader_exec.planted BEFORE UPDATE ON leader_exec.leader_exec_leases
             FOR EACH ROW SET NEW.token = 1",
        "a trigger planted on leader_exec.leader_exec_leases",
    )
    .await;
}

/// A wrong password is refused for good, naming the server and never the password.
#[tokio::test]
async fn a_wrong_password_is_refused_for_good() {
    let db = MariaDb::start();
    let bad = format!(
        "mysql://{MARIADB_USER}:wrong-one@127.0.0.1:{}/{MARIADB_DATABASE}",
        db.port
    );
    let e = candidate(&bad, "a", TTL).campaign().await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("Access denied") && !text.contains("wrong-one"),
        "{text}"
    );
}

/// The server's defaults do not change what the statements mean: with ANSI_QUOTES and
/// without strict mode, in another time zone, with latin1, the row is written as everywhere
/// (`expires_at` in UTC, the identity's bytes as given).
#[tokio::test]
async fn the_servers_defaults_do_not_change_the_statements() {
    let db = MariaDb::start_with(&[
        "--sql-mode=ANSI_QUOTES,PIPES_AS_CONCAT",
        "--default-time-zone=+05:00",
        "--character-set-server=latin1",
        "--collation-server=latin1_swedish_ci",
    ]);
    let url = url(db.port);
    let m = candidate(&url, "höst-ä", Duration::from_secs(600));
    assert!(leads(&m).await.is_some());
    let out = db.sql(
        "SELECT HEX(holder), ABS(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), expires_at)) < 660 \
         AND TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), expires_at) > 540 \
         FROM leader_exec.leader_exec_leases",
    );
    assert_eq!(
        out.trim(),
        format!("{}\t1", hex_digits("höst-ä".as_bytes()))
    );
}

/// A server whose binary log is statement-based cannot take READ COMMITTED writes: refused
/// for good at the start, with one line saying why; a row-based one is used.
#[tokio::test]
async fn a_statement_based_binary_log_is_refused_at_the_start() {
    let db = MariaDb::start_with(&[
        "--log-bin=binlog",
        "--binlog-format=STATEMENT",
        "--server-id=1",
    ]);
    let e = candidate(&url(db.port), "a", TTL)
        .campaign()
        .await
        .expect_err("a statement-based binary log");
    assert!(
        !e.is_transient() && e.to_string().contains("binlog_format is STATEMENT"),
        "{e}"
    );
    let db = MariaDb::start_with(&["--log-bin=binlog", "--binlog-format=ROW", "--server-id=1"]);
    assert!(leads(&candidate(&url(db.port), "a", TTL)).await.is_some());
}

/// A lock someone else holds on the lease row ends a renewal by the client's timer (the
/// retry period, 500 ms), not by InnoDB's lock wait (1 s at least) or the other's transaction.
#[tokio::test]
async fn a_lock_held_by_another_session_ends_a_renewal_by_the_clients_timer() {
    let db = MariaDb::start();
    let url = url(db.port);
    let m = candidate(&url, "a", TTL);
    let token = leads(&m).await.unwrap();
    let mut keeper = m.keeper(&leading(token));
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    let mut locker = db.sql_in_background(
        "BEGIN; SELECT token FROM leader_exec.leader_exec_leases FOR UPDATE; SELECT SLEEP(5); COMMIT",
    );
    // The locker has the row once its session shows the sleep.
    let until = Instant::now() + Duration::from_secs(10);
    while !db.sql("SHOW PROCESSLIST").contains("SLEEP(5)") {
        assert!(Instant::now() < until, "the locker did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    let e = keeper.renew().await.expect_err("a renewal behind a lock");
    let took = sent.elapsed();
    assert!(e.is_transient(), "{e}");
    assert!(took < Duration::from_millis(900), "{took:?}: {e}");
    keeper.reset();
    let _ = locker.kill();
    let _ = locker.wait();
}

/// A CA, and a server certificate for 127.0.0.1 signed by it, in `dir` (made readable by the
/// server's user).
fn certificates(dir: &std::path::Path, ca_name: &str) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl is installed");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let subject = format!("/CN={ca_name}");
    let mut ca = vec!["req", "-x509", "-days", "1", "-subj", &subject];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(&ca);
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let mut req = vec!["req", "-subj", "/CN=server"];
    req.extend(ec);
    req.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(&req);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext",
        "-out",
        "server.crt",
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in ["ca.crt", "server.crt", "server.key"] {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// TLS as the mysql client's ssl-mode says: REQUIRED encrypts, VERIFY_CA and VERIFY_IDENTITY
/// check the certificate (a CA that did not sign it is refused for good); PREFERRED goes on in
/// plain TCP where the server offers no TLS, REQUIRED does not.
#[tokio::test]
async fn ssl_modes_encrypt_and_check_as_the_mysql_client_does() {
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path(), "leader-exec-test-ca");
    let other = tempfile::tempdir().unwrap();
    certificates(other.path(), "another-ca");
    let file = |name: &str| certs.path().join(name).display().to_string();
    let db = MariaDb::start_with(&[
        &format!("--ssl-cert={}", file("server.crt")),
        &format!("--ssl-key={}", file("server.key")),
        &format!("--ssl-ca={}", file("ca.crt")),
    ]);
    let base = url(db.port);
    let cipher = async |m: &MySql| {
        let mut rows = m
            .query("SHOW SESSION STATUS LIKE 'Ssl_cipher'".to_owned())
            .await
            .unwrap();
        let value: String = take(&mut rows.pop().unwrap(), 1).unwrap();
        value
    };
    for query in [
        "ssl-mode=REQUIRED".to_owned(),
        format!("ssl-mode=VERIFY_CA&ssl-ca={}", file("ca.crt")),
        format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", file("ca.crt")),
        "ssl-mode=PREFERRED".to_owned(),
    ] {
        let m = candidate(&format!("{base}?{query}"), "a", TTL);
        m.campaign()
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(!cipher(&m).await.is_empty(), "{query}: not encrypted");
    }
    let wrong_ca = other.path().join("ca.crt");
    let m = candidate(
        &format!("{base}?ssl-mode=VERIFY_CA&ssl-ca={}", wrong_ca.display()),
        "a",
        TTL,
    );
    let e = m.campaign().await.expect_err("a certificate of another CA");
    assert!(!e.is_transient() && e.to_string().contains("TLS"), "{e}");

    let plain = MariaDb::start();
    let m = candidate(&url(plain.port), "a", TTL);
    m.campaign().await.unwrap();
    assert_eq!(cipher(&m).await, "", "PREFERRED without TLS on offer");
    let m = candidate(&format!("{}?ssl-mode=REQUIRED", url(plain.port)), "a", TTL);
    let e = m
        .campaign()
        .await
        .expect_err("REQUIRED without TLS on offer");
    assert!(!e.is_transient() && e.to_string().contains("TLS"), "{e}");
}

/// A host of the URL where nothing listens is passed over for the next one.
#[tokio::test]
async fn a_host_that_refuses_is_passed_over() {
    let db = MariaDb::start();
    let closed = free_port();
    let both = format!(
        "mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{closed},127.0.0.1:{}/{MARIADB_DATABASE}",
        db.port
    );
    let started = Instant::now();
    assert!(leads(&candidate(&both, "a", TTL)).await.is_some());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// A request does not wait for the shared session while another request keeps it (one in
/// flight, or a future set aside unpolled): it runs on a session of its own. A release after a
/// lost lease thus never gives up unanswered behind a look nobody polls.
#[tokio::test]
async fn a_request_never_waits_for_the_session_another_one_keeps() {
    let db = MariaDb::start();
    let a = candidate(&url(db.port), "a", TTL);
    let token = leads(&a).await.expect("leads");
    let kept = a.shared.conn.lock().await;
    let released =
        tokio::time::timeout(Duration::from_secs(5), a.release_claim(&leading(token))).await;
    assert!(
        matches!(released, Ok(Ok(()))),
        "the release waited for the kept session: {released:?}"
    );
    drop(kept);
    assert_eq!(
        db.sql("SELECT holder IS NULL FROM leader_exec.leader_exec_leases")
            .trim(),
        "1"
    );
}

/// A batch whose later statement fails is an error, not an answer with fewer rows: the server
/// stops at the failing statement, and the driver keeps its error in the rest of the answer
/// (before, a release or a fenced write whose UPDATE failed answered "done").
#[tokio::test]
async fn an_error_after_the_first_statement_of_a_batch_fails_the_request() {
    let db = MariaDb::start();
    let m = candidate(&url(db.port), "a", TTL);
    assert!(leads(&m).await.is_some());
    let e = m
        .query("START TRANSACTION; UPDATE no_such_table SET x = 1; SELECT 1; COMMIT".to_owned())
        .await
        .expect_err("a batch with a failing statement");
    assert!(e.to_string().contains("(1146)"), "{e}");
    // The session it failed on was dropped (the transaction with it); the next request opens
    // another and goes through.
    let rows = m.query("SELECT 1".to_owned()).await.unwrap();
    assert_eq!(rows.len(), 1);
}
