//! The store against a real MariaDB (the test harness's, [`testdb`](super::testdb)): acquire,
//! renew, release and take over with N = 1, tokens that never go back, a read-only server
//! skipped, objects leader-exec did not make refused, the session's own settings, and the
//! client-side timer.

use std::time::{Duration, Instant};

use super::super::flags::tests::flags;
use super::super::{Campaign, Handover, Keeper, Leader, Read, Records, Renewal, Turn};
use super::testdb::*;
use super::*;

const TTL: Duration = Duration::from_secs(2);

fn url(port: u16) -> String {
    format!("mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{port}/{MARIADB_DATABASE}")
}

fn target_of(url: &str) -> Target {
    let flags = flags(&["--endpoints", url]);
    target::parse(flags.endpoints.clone(), flags).expect("a valid URL")
}

fn candidate(url: &str, identity: &str, ttl: Duration) -> MySql {
    candidate_for(url, "jobs", identity, ttl)
}

fn candidate_for(url: &str, name: &str, identity: &str, ttl: Duration) -> MySql {
    let timing = MySqlTiming {
        ttl,
        retry_period: Duration::from_millis(500),
        connect_timeout: Duration::from_secs(5),
    };
    let target = target_of(url);
    MySql::new(target, "/leader-exec/", name, identity.into(), timing, 1).unwrap()
}

/// Waits behind the row until this candidate leads; its token, and how long that took.
async fn wait_to_lead(m: &MySql, limit: Duration) -> (i64, Duration) {
    let started = Instant::now();
    let candidacy = m.campaign().await.unwrap();
    loop {
        match m.check_turn(&candidacy).await.unwrap() {
            Turn::Leading { token } => return (token, started.elapsed()),
            Turn::Behind(ahead) => {
                assert!(started.elapsed() < limit, "never took the row");
                let wait = ahead.expires_in.unwrap();
                tokio::time::sleep(wait.min(Duration::from_millis(100))).await;
            }
            other => panic!("{other:?}"),
        }
    }
}

async fn leads(m: &MySql) -> Option<i64> {
    let candidacy = m.campaign().await.expect("campaign");
    match m.check_turn(&candidacy).await.expect("check_turn") {
        Turn::Leading { token } => Some(token),
        Turn::Behind(_) => None,
        other => panic!("{other:?}"),
    }
}

fn leading(token: i64) -> Candidacy {
    Candidacy {
        lease_id: None,
        key: "leader_exec_leases/jobs".into(),
        place: 0,
        token,
    }
}

/// One leads, the other waits behind it (named); renewals answer alive, also many within one
/// millisecond; a release lets the other in with a greater token; a row taken away (another
/// holder written by hand) is a renewal answering "expired".
#[tokio::test]
async fn one_leads_renews_and_hands_over_with_a_greater_token() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.expect("a leads a new name");
    assert!(first >= 1);
    let candidacy = b.campaign().await.unwrap();
    match b.check_turn(&candidacy).await.unwrap() {
        Turn::Behind(ahead) => assert_eq!(ahead.key, b"a"),
        other => panic!("{other:?}"),
    }
    let mut keeper = a.keeper(&leading(first));
    for _ in 0..5 {
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    }
    a.release_claim(&leading(first)).await.unwrap();
    let second = leads(&b).await.expect("b leads once a released");
    assert!(second > first, "{second} after {first}");
    let mut keeper = b.keeper(&leading(second));
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    db.sql("UPDATE leader_exec.leader_exec_leases SET holder = 'x', token = token + 1");
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Expired);
}

/// A holder that stops renewing is taken over only once the taker has seen its row unchanged
/// for a full TTL on its own clock: not at once when `expires_at` on the server's clock says
/// the row ran out long ago (a step of that clock is such a write), and not before.
#[tokio::test]
async fn a_silent_holder_is_taken_over_after_a_full_ttl_seen_not_by_the_servers_clock() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.unwrap();
    // The server's clock says the row ran out a day ago.
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    let seen = Instant::now();
    assert_eq!(leads(&b).await, None, "taken by the server's clock");
    let candidacy = b.candidacy();
    let token = loop {
        match b.check_turn(&candidacy).await.unwrap() {
            Turn::Leading { token } => break token,
            Turn::Behind(ahead) => {
                assert!(seen.elapsed() < TTL * 3, "never taken over");
                tokio::time::sleep(ahead.expires_in.unwrap().min(Duration::from_millis(100))).await;
            }
            other => panic!("{other:?}"),
        }
    };
    assert!(
        seen.elapsed() >= TTL,
        "taken over after {:?}",
        seen.elapsed()
    );
    assert!(token > first);
    let mut keeper = a.keeper(&leading(first));
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Expired);
}

/// Tokens only grow: not reset by a deleted row, a truncated or dropped leases table, or a
/// deleted tokens row (the lease row remembers), nor by a server restart.
#[tokio::test]
async fn tokens_never_go_back() {
    let mut db = MariaDb::start();
    let url = url(db.port);
    let mut last = 0;
    let mut step = async |what: &str, db: &MariaDb| {
        if !what.is_empty() {
            db.sql(what);
        }
        let m = candidate(&url, "a", TTL);
        let token = leads(&m)
            .await
            .unwrap_or_else(|| panic!("after {what}: not free"));
        assert!(token > last, "after {what}: {token} not above {last}");
        m.release_claim(&leading(token)).await.unwrap();
        last = token;
    };
    step("", &db).await;
    step("", &db).await;
    step("DELETE FROM leader_exec.leader_exec_leases", &db).await;
    step("TRUNCATE TABLE leader_exec.leader_exec_leases", &db).await;
    step("DROP TABLE leader_exec.leader_exec_leases", &db).await;
    step("DELETE FROM leader_exec.leader_exec_tokens", &db).await;
    db.restart();
    step("", &db).await;
}

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

/// What `status` reads: the holder with its identity, key and token, and its time left; every
/// name in the table, sorted; nothing once released.
#[tokio::test]
async fn readers_see_the_holder_its_time_and_every_name() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let reader = MySql::reader(
        target_of(&url),
        "/leader-exec/",
        "jobs",
        Duration::from_secs(5),
    )
    .unwrap();
    let seen = reader.read_election().await.unwrap();
    let leader = seen.leader().expect("a holder").clone();
    assert_eq!(
        (
            leader.key.as_slice(),
            leader.identity.as_slice(),
            leader.token
        ),
        (&b"leader_exec_leases/jobs"[..], &b"a"[..], token)
    );
    assert_eq!((seen.candidates, seen.max_holders), (1, 1));
    let time = reader
        .lease_time(&leader)
        .await
        .unwrap()
        .expect("time left");
    assert_eq!(time.granted, TTL);
    assert!(
        time.remaining <= TTL && time.remaining > TTL / 2,
        "{time:?}"
    );
    let b = candidate_for(&url, "backup", "b", TTL);
    leads(&b).await.unwrap();
    let all = reader.list_elections("/leader-exec/").await.unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|e| (e.name.clone(), e.leader().map(|l| l.identity.clone())))
        .collect();
    assert_eq!(
        names,
        [
            (b"backup".to_vec(), Some(b"b".to_vec())),
            (b"jobs".to_vec(), Some(b"a".to_vec()))
        ]
    );
    a.release_claim(&leading(token)).await.unwrap();
    assert!(reader.read_election().await.unwrap().holders.is_empty());
    assert_eq!(reader.lease_time(&leader).await.unwrap(), None);
}

/// A held claim (`leader-exec hold`) stays with its token and nobody renewing it, for its
/// bound as `status` shows it; a waiter takes it over only once it has seen it unchanged for
/// that bound (longer than its own TTL), with a greater token.
#[tokio::test]
async fn a_held_claim_stays_for_its_bound() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let bound = Duration::from_secs(3);
    let held = a.hold_claim(&leading(token), bound).await.unwrap();
    assert_eq!(held, Some(leading(token)));
    let seen = a.read_election().await.unwrap();
    let leader = seen.leader().expect("still held");
    assert_eq!(leader.token, token);
    assert_eq!(a.lease_time(leader).await.unwrap().unwrap().granted, bound);
    let (taken, took) = wait_to_lead(&candidate(&url, "b", TTL), bound * 3).await;
    assert!(took >= bound, "taken over after {took:?}");
    assert!(taken > token);
    // A claim no longer there is not held.
    assert_eq!(a.hold_claim(&leading(token), bound).await.unwrap(), None);
}

/// Fenced writes pass while the writer holds its token and write nothing once it does not; a
/// record on the lease goes with it; a handover request and a removal reach only the token
/// they name. The store has every capability the run form and the subcommands use.
#[tokio::test]
async fn records_are_fenced_by_the_lease_row() {
    fn is_a_store<S: super::super::Store>(_: &S) {}
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    is_a_store(&a);
    let first = leads(&a).await.unwrap();
    let hour = Duration::from_secs(3600);
    assert!(
        a.write_fenced(&leading(first), "occ/1", b"one".to_vec(), hour)
            .await
            .unwrap()
    );
    assert!(
        a.put_on_lease_fenced(&leading(first), "state/jobs", b"s".to_vec())
            .await
            .unwrap()
    );
    assert_eq!(
        a.read_record("occ/1").await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        a.read_record("state/jobs").await.unwrap().as_deref(),
        Some(&b"s"[..])
    );
    let listed = b.list_records("occ/").await.unwrap();
    assert_eq!(listed, [(b"1".to_vec(), b"one".to_vec())]);
    let leader = b.read_election().await.unwrap().leader().unwrap().clone();
    assert!(
        b.request_handover(&leader, ".resign/jobs", hour)
            .await
            .unwrap()
    );
    let request = b.read_record(".resign/jobs").await.unwrap().unwrap();
    assert!(super::super::is_request_for(&request, first));

    // Removed by its token (`resign --force`): the record on the lease goes with it, and no
    // fenced write of the old holder's passes.
    let stale = Leader {
        token: first - 1,
        ..leader.clone()
    };
    assert!(!b.remove_claim(&stale).await.unwrap());
    assert!(b.remove_claim(&leader).await.unwrap());
    assert_eq!(a.read_record("state/jobs").await.unwrap(), None);
    assert!(
        !a.write_fenced(&leading(first), "occ/1", b"two".to_vec(), hour)
            .await
            .unwrap()
    );
    assert_eq!(
        a.read_record("occ/1").await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    let second = leads(&b).await.unwrap();
    assert!(second > first);
    // A request for the old token reaches nobody.
    assert!(
        !a.request_handover(&leader, ".resign/jobs", hour)
            .await
            .unwrap()
    );
    assert!(!b.remove_claim(&leader).await.unwrap());
}

/// A job that fences itself in the same database (its transaction reads the fence row `LOCK IN
/// SHARE MODE`) holds up a removal of the claim until it commits, and does not hold up the
/// leader's renewals.
#[tokio::test]
async fn a_jobs_fence_holds_up_a_removal_not_the_renewals() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let token = leads(&a).await.unwrap();
    let fence = db.sql("SELECT holder, token FROM leader_exec.leader_exec_fences");
    assert_eq!(fence.trim(), format!("a\t{token}"));
    let mut job = db.sql_in_background(&format!(
        "BEGIN; SELECT token FROM leader_exec.leader_exec_fences
             WHERE name = 'jobs' AND token = {token} LOCK IN SHARE MODE;
         SELECT SLEEP(4); COMMIT"
    ));
    let until = Instant::now() + Duration::from_secs(10);
    while !db.sql("SHOW PROCESSLIST").contains("SLEEP(4)") {
        assert!(Instant::now() < until, "the job did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut keeper = a.keeper(&leading(token));
    for _ in 0..3 {
        let sent = Instant::now();
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        assert!(
            sent.elapsed() < Duration::from_millis(400),
            "{:?}",
            sent.elapsed()
        );
    }
    let leader = b.read_election().await.unwrap().leader().unwrap().clone();
    let e = b
        .remove_claim(&leader)
        .await
        .expect_err("removed under the job's fence");
    assert!(e.is_transient(), "{e}");
    assert_eq!(
        db.sql("SELECT holder FROM leader_exec.leader_exec_leases")
            .trim(),
        "a"
    );
    assert!(job.wait().unwrap().success());
    // Renewed since (the job outlasted the TTL), then removed.
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    assert!(b.remove_claim(&leader).await.unwrap());
    let fence = db.sql("SELECT holder IS NULL, token FROM leader_exec.leader_exec_fences");
    assert_eq!(fence.trim(), format!("1\t{token}"));
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

/// The server's clock stepped an hour ahead, then back, while one leads and renews and another
/// waits: neither step hands the row to the waiter or takes it from the leader (no clock is in
/// a renewal's condition, and a takeover waits for a row seen unchanged for a full TTL).
#[tokio::test]
async fn a_server_clock_step_neither_hands_over_nor_ends_the_lease() {
    let (db, clock) = MariaDb::start_with_faketime();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let token = leads(&a).await.unwrap();
    let mut keeper = a.keeper(&leading(token));
    let candidacy = b.campaign().await.unwrap();
    let started = Instant::now();
    let mut stepped = (false, false);
    // The server's clock less this test's, in seconds.
    let offset = || {
        let server: i64 = db.sql("SELECT UNIX_TIMESTAMP()").trim().parse().unwrap();
        let here = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        server - here
    };
    while started.elapsed() < TTL * 3 {
        if !stepped.0 && started.elapsed() > TTL / 2 {
            std::fs::write(clock.path(), "+1h\n").unwrap();
            assert!((offset() - 3600).abs() < 60, "the clock was not stepped");
            stepped.0 = true;
        }
        if !stepped.1 && started.elapsed() > TTL * 2 {
            std::fs::write(clock.path(), "+0\n").unwrap();
            stepped.1 = true;
        }
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        match b.check_turn(&candidacy).await.unwrap() {
            Turn::Behind(_) => {}
            other => panic!("the waiter got {other:?} after {:?}", started.elapsed()),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(offset().abs() < 60, "the clock was not stepped back");
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
}

/// Waiters stand in line: a released row goes to the first in line, not to a later waiter that
/// happens to try first; a waiter that stops looking is skipped by the one behind it once seen
/// unchanged for a full TTL, and that one then takes the free row.
#[tokio::test]
async fn a_released_row_goes_to_the_first_in_line_and_a_dead_waiter_is_skipped() {
    let db = MariaDb::start();
    let url = url(db.port);
    let [a, b, c] = ["a", "b", "c"].map(|id| candidate(&url, id, TTL));
    let first = leads(&a).await.unwrap();
    assert_eq!(leads(&b).await, None);
    assert_eq!(leads(&c).await, None);
    let line = db.sql("SELECT identity FROM leader_exec.leader_exec_waiters ORDER BY id");
    assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["b", "c"]);
    a.release_claim(&leading(first)).await.unwrap();
    // c tries first, yet b is ahead of it, alive.
    let c_candidacy = c.candidacy();
    let ahead = match c.check_turn(&c_candidacy).await.unwrap() {
        Turn::Behind(ahead) => ahead,
        other => panic!("c jumped the line: {other:?}"),
    };
    // b never looks again (dead, say): c skips it after a TTL and then takes the free row.
    let started = Instant::now();
    c.predecessor_gone(&c_candidacy, &ahead).await.unwrap();
    let token = match c.check_turn(&c_candidacy).await.unwrap() {
        Turn::Leading { token } => token,
        other => panic!("{other:?}"),
    };
    assert!(
        started.elapsed() >= TTL - Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    assert!(token > first);
    assert_eq!(
        db.sql("SELECT COUNT(*) FROM leader_exec.leader_exec_waiters")
            .trim(),
        "0",
        "b's dead row and c's own are gone"
    );
}

/// The hint for deleting a record is a client command that deletes exactly that record.
#[tokio::test]
async fn the_delete_hint_deletes_the_record() {
    use super::super::Describe;
    let db = MariaDb::start();
    let a = candidate(&url(db.port), "a", TTL);
    let token = leads(&a).await.unwrap();
    let hour = Duration::from_secs(3600);
    for key in ["occ/it's", "occ/other"] {
        assert!(
            a.write_fenced(&leading(token), key, b"x".to_vec(), hour)
                .await
                .unwrap()
        );
    }
    let hint = a.delete_record_hint("occ/it's");
    assert!(hint.starts_with("mariadb -h '127.0.0.1' -P "), "{hint}");
    // The hint with the password given as the client reads it from the environment.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(hint.replace(" -p ", " --protocol=TCP "))
        .env("MYSQL_PWD", MARIADB_PASSWORD)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.read_record("occ/it's").await.unwrap(), None);
    assert!(a.read_record("occ/other").await.unwrap().is_some());
}

/// A holder whose identity is not UTF-8 (written by another tool) that stops renewing is taken
/// over like any other, a full TTL after it was first seen: its bytes are compared as they are.
#[tokio::test]
async fn a_holder_that_is_not_utf8_is_taken_over_too() {
    let db = MariaDb::start();
    let url = url(db.port);
    let first = leads(&candidate(&url, "a", TTL)).await.unwrap();
    db.sql("UPDATE leader_exec.leader_exec_leases SET holder = X'FF00FE', token = token + 1");
    let (token, took) = wait_to_lead(&candidate(&url, "b", TTL), TTL * 3).await;
    assert!(
        took >= TTL - Duration::from_millis(200),
        "taken over after {took:?}"
    );
    assert!(token > first + 1);
}

/// Eight first runs at once on an empty database (tables made by all of them, a new name):
/// exactly one leads; every other stands behind it, after transient errors at most.
#[tokio::test]
async fn of_eight_first_runs_at_once_exactly_one_leads() {
    let db = MariaDb::start();
    let url = url(db.port);
    let candidates: Vec<MySql> = (0..8)
        .map(|i| candidate(&url, &format!("c{i}"), TTL))
        .collect();
    let turns = futures_util::future::join_all(candidates.iter().map(async |m| {
        for _ in 0..20 {
            let turn = async {
                let candidacy = m.campaign().await?;
                m.check_turn(&candidacy).await
            };
            match turn.await {
                Ok(turn) => return turn,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no answer in 20 tries");
    }))
    .await;
    let leading: Vec<_> = turns
        .iter()
        .filter(|t| matches!(t, Turn::Leading { .. }))
        .collect();
    assert_eq!(leading.len(), 1, "{turns:?}");
    assert!(
        turns
            .iter()
            .all(|t| matches!(t, Turn::Leading { .. } | Turn::Behind(_)))
    );
    let waiting = db.sql("SELECT COUNT(*) FROM leader_exec.leader_exec_waiters");
    assert_eq!(waiting.trim(), "7");
}

/// Nothing tells a waiter of a release: the first in line finds the released row at its next
/// look, within one --retry-period (500 ms here) and a round trip or two.
#[tokio::test]
async fn a_waiter_takes_a_released_row_within_a_retry_period() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.unwrap();
    let candidacy = b.campaign().await.unwrap();
    let Turn::Behind(ahead) = b.check_turn(&candidacy).await.unwrap() else {
        panic!("b leads beside a");
    };
    let waiting = async {
        b.predecessor_gone(&candidacy, &ahead).await.unwrap();
        let turn = b.check_turn(&candidacy).await.unwrap();
        (turn, Instant::now())
    };
    let releasing = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        a.release_claim(&leading(first)).await.unwrap();
        Instant::now()
    };
    let ((turn, won), released) = tokio::join!(waiting, releasing);
    assert!(
        matches!(turn, Turn::Leading { token } if token > first),
        "{turn:?}"
    );
    let took = won.duration_since(released);
    assert!(took < Duration::from_millis(900), "handed over in {took:?}");
}

/// A held slot whose state record says `held_for_ms` counts as held past its `expires_at`, as
/// on PostgreSQL: `status` shows it and `release` (a removal by its token) reaches it; the same
/// row without that record counts as held only until its `expires_at`.
#[tokio::test]
async fn a_held_slot_is_shown_and_removable_past_its_expiry() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let state = br#"{"held_for_ms":60000}"#.to_vec();
    assert!(
        a.put_on_lease_fenced(&leading(token), "state/jobs", state)
            .await
            .unwrap()
    );
    assert!(
        a.hold_claim(&leading(token), Duration::from_secs(60))
            .await
            .unwrap()
            .is_some()
    );
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    let reader = MySql::reader(
        target_of(&url),
        "/leader-exec/",
        "jobs",
        Duration::from_secs(5),
    )
    .unwrap();
    let seen = reader.read_election().await.unwrap();
    let leader = seen.leader().expect("a held slot is shown").clone();
    assert_eq!(leader.token, token);
    assert!(reader.read_record("state/jobs").await.unwrap().is_some());
    assert!(reader.remove_claim(&leader).await.unwrap());
    assert!(reader.read_election().await.unwrap().holders.is_empty());

    // Without the record: held only until expires_at.
    let b = candidate(&url, "b", TTL);
    let token = leads(&b).await.unwrap();
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    assert!(reader.read_election().await.unwrap().holders.is_empty());
    let gone = Leader { token, ..leader };
    assert!(!reader.remove_claim(&gone).await.unwrap());
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
