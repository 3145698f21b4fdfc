//! What only the MySQL store has, on MariaDB (`mysql_only::…`). The store-independent list runs on
//! it as `mysql::…`; the store's statements are tested one by one, against a server the same
//! harness starts, in the binary's unit tests (src/election/mysql/tests/).

mod auth;
mod conn;
mod failover;
mod waits;

use crate::harness::*;

/// The harness's server answers its root over the socket and leader-exec's user over TCP with
/// the password only, on 127.0.0.1; the read-only one refuses that user's writes; each is gone
/// once dropped.
#[test]
fn the_harness_starts_a_primary_and_a_read_only_server() {
    let db = MariaDb::start();
    let pid = db.pid().expect("running");
    assert_eq!(
        db.sql("SELECT @@read_only, @@bind_address").trim(),
        "0\t127.0.0.1"
    );
    let over_tcp = |db: &MariaDb, password: Option<&str>, sql: &str| {
        let mut command = std::process::Command::new("mariadb");
        command
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "-h",
                "127.0.0.1",
                "-N",
                "-B",
            ])
            .arg(format!("--port={}", db.port))
            .args(["-u", MARIADB_USER, "-D", MARIADB_DATABASE, "-e", sql])
            .env_remove("MYSQL_PWD");
        if let Some(password) = password {
            command.env("MYSQL_PWD", password);
        }
        command.output().unwrap()
    };
    let out = over_tcp(&db, Some(MARIADB_PASSWORD), "SELECT CURRENT_USER()");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "leader@%");
    let out = over_tcp(&db, None, "SELECT 1");
    assert!(!out.status.success(), "no password, yet let in");
    let out = over_tcp(&db, Some(MARIADB_PASSWORD), "CREATE TABLE t (a INT)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let replica = MariaDb::start_read_only();
    assert_eq!(replica.sql("SELECT @@read_only").trim(), "1");
    let out = over_tcp(&replica, Some(MARIADB_PASSWORD), "CREATE TABLE t (a INT)");
    assert!(!out.status.success(), "a read-only server took a write");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("read-only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(db);
    assert!(!alive(pid), "mariadbd {pid} outlived its harness");
}
