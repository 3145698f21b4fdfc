//! MariaDB (Debian's 10.11, [`MariaDb`]): a private server on a temporary directory and a free
//! loopback port, run as the `mysql` user when the tests run as root, with a database and a
//! password user for leader-exec; and a read-only one beside it for the primary-only tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{first_line_of, free_port, share_machine};

const MARIADBD: &str = "/usr/sbin/mariadbd";

/// The user leader-exec connects as, its password (given to leader-exec in
/// `LEADER_EXEC_PASSWORD`, never in the URL) and its database.
pub const MARIADB_USER: &str = "leader";
pub const MARIADB_PASSWORD: &str = "lease-pass-1";
pub const MARIADB_DATABASE: &str = "leader_exec";
/// A user without a password for the same database, as the PostgreSQL harness's trust
/// authentication: the store list's tests (tests/harness/mysql.rs) connect as it, so that every
/// instance a test starts reaches the server without a secret in its environment.
pub const MARIADB_OPEN_USER: &str = "jobs";
/// An account with every privilege on every database (`GRANT ALL ON *.*`, READ ONLY ADMIN
/// among them: it writes through `read_only`), as many shops give their tools; no password.
/// Made by [`MariaDb::add_admin`].
pub const MARIADB_ADMIN_USER: &str = "boss";

/// A MariaDB server on a free loopback port (and a Unix socket in its directory, which only the
/// harness's own `mariadb` client uses, as the server's root); killed when dropped.
pub struct MariaDb {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// More server options (`--name=value`).
    extra: Vec<String>,
    /// More environment for the server (libfaketime's).
    env: Vec<(String, String)>,
}

/// Whether the tests run as root (then the server runs as `mysql`, as mariadbd insists): the
/// owner of /proc/self is this process's effective user.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl MariaDb {
    /// A writable server with leader-exec's database and user.
    pub fn start() -> MariaDb {
        MariaDb::start_with(&[])
    }

    /// A server that refuses writes from leader-exec's user (`read_only=ON`, as a replica or an
    /// old primary after a failover is): its database and user are there, its tables not.
    pub fn start_read_only() -> MariaDb {
        let db = MariaDb::start();
        db.sql("SET GLOBAL read_only = ON");
        db
    }

    /// A primary with a binary log (`server_id` 1) and an asynchronous replica of it
    /// (`server_id` 2, `read_only` on), replicating from the primary's position after both made
    /// leader-exec's database and users: what leader-exec writes on the primary reaches the
    /// replica, until [`stop_replication`](Self::stop_replication) makes it lag.
    pub fn start_primary_and_replica() -> (MariaDb, MariaDb) {
        let primary = MariaDb::start_with(&["--log-bin=binlog", "--server-id=1"]);
        let replica = MariaDb::start_with(&["--server-id=2"]);
        primary.sql(
            "CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-pass-1';
             GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'",
        );
        let status = primary.sql("SHOW MASTER STATUS");
        let mut fields = status.split_whitespace();
        let (file, position) = (fields.next().unwrap(), fields.next().unwrap());
        replica.sql(&format!(
            "SET GLOBAL read_only = ON;
             CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = 'repl',
                 MASTER_PASSWORD = 'repl-pass-1', MASTER_LOG_FILE = '{file}',
                 MASTER_LOG_POS = {position}, MASTER_CONNECT_RETRY = 1;
             START SLAVE",
            primary.port
        ));
        (primary, replica)
    }

    /// Replication stopped: the replica keeps what it has and lags from here.
    pub fn stop_replication(&self) {
        self.sql("STOP SLAVE");
    }

    /// A replica promoted, as a failover tool does: replication stopped and forgotten,
    /// `read_only` off.
    pub fn promote(&self) {
        self.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF");
    }

    /// Gives the server another `server_id`, now and at every restart after (as a replica
    /// promoted keeps its own).
    pub fn set_server_id(&mut self, id: u64) {
        self.sql(&format!("SET GLOBAL server_id = {id}"));
        self.extra.retain(|a| !a.starts_with("--server-id="));
        self.extra.push(format!("--server-id={id}"));
    }

    /// Makes [`MARIADB_ADMIN_USER`]; its URL.
    pub fn add_admin(&self) -> String {
        self.sql(&format!(
            "CREATE USER '{MARIADB_ADMIN_USER}'@'%';
             GRANT ALL ON *.* TO '{MARIADB_ADMIN_USER}'@'%' WITH GRANT OPTION"
        ));
        format!(
            "mysql://{MARIADB_ADMIN_USER}@127.0.0.1:{}/{MARIADB_DATABASE}",
            self.port
        )
    }

    /// Starts under libfaketime (Debian's `faketime`): the server's clock is offset by what the
    /// returned file says (`+0` at first; write `+1h`, say, to step it while the server runs).
    pub fn start_with_faketime() -> (MariaDb, tempfile::NamedTempFile) {
        const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        let clock = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(clock.path(), "+0\n").unwrap();
        // The server runs as the `mysql` user and reads the file the test writes.
        std::fs::set_permissions(
            clock.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let file = clock.path().display().to_string();
        let env = [
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
        ];
        (MariaDb::start_with_env(&[], &env), clock)
    }

    /// Starts with more server options, e.g. `--default-time-zone=+05:00`.
    pub fn start_with(extra: &[&str]) -> MariaDb {
        MariaDb::start_with_env(extra, &[])
    }

    /// Starts with more server options and more environment for the server.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> MariaDb {
        share_machine();
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-mariadb")
            .tempdir()
            .unwrap();
        // Its own directory for temporary tables (information_schema queries make some): in a
        // shared /tmp they were seen removed under a running server by whatever else runs there.
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        if is_root() {
            let chown = Command::new("chown")
                .arg("-R")
                .arg("mysql:mysql")
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(chown.success());
        }
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args(["--skip-test-db", "--auth-root-authentication-method=normal"])
            .env("TMPDIR", dir.path().join("tmp"));
        if is_root() {
            install.arg("--user=mysql");
        }
        let out = install
            .output()
            .expect("MariaDB is installed (apt-get install mariadb-server mariadb-client)");
        assert!(
            out.status.success(),
            "mariadb-install-db: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = MariaDb {
            port: 0,
            dir,
            child: None,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        // A free port can be taken between the probe and the server's bind: try a few times.
        for _ in 0..5 {
            db.port = free_port();
            if db.spawn() {
                db.sql(&format!(
                    "CREATE DATABASE {MARIADB_DATABASE};
                     CREATE USER '{MARIADB_USER}'@'%' IDENTIFIED BY '{MARIADB_PASSWORD}';
                     GRANT ALL ON {MARIADB_DATABASE}.* TO '{MARIADB_USER}'@'%';
                     CREATE USER '{MARIADB_OPEN_USER}'@'%';
                     GRANT ALL ON {MARIADB_DATABASE}.* TO '{MARIADB_OPEN_USER}'@'%'"
                ));
                return db;
            }
        }
        panic!("MariaDB did not start: {}", db.log());
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The server's error log, for a message when it does not start.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("err.log")).unwrap_or_default()
    }

    /// Starts mariadbd on `self.port` and waits until it answers; false if it exits first (its
    /// port was taken) or does not answer within 60 s.
    fn spawn(&mut self) -> bool {
        let dir = self.dir.path();
        let mut command = Command::new(MARIADBD);
        // --no-defaults first: nothing of /etc/mysql applies. No fsync (as the PostgreSQL
        // harness's fsync=off), small buffers, no binary log, no performance schema.
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--log-error={}", dir.join("err.log").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .env("TMPDIR", dir.join("tmp"))
            .args([
                "--skip-log-bin",
                "--skip-name-resolve",
                "--performance-schema=OFF",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-doublewrite=0",
                "--max-connections=600",
            ])
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if is_root() {
            command.arg("--user=mysql");
        }
        let mut child = command.spawn().expect("mariadbd");
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if self.try_sql("SELECT 1").status.success() {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// SIGKILL, like a crash: nothing is flushed or said goodbye.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port and data; returns once it answers.
    pub fn restart(&mut self) {
        self.kill();
        // The port was just ours: the kernel lets a listener bind it again at once.
        let until = Instant::now() + Duration::from_secs(30);
        while !self.spawn() {
            assert!(
                Instant::now() < until,
                "MariaDB did not come back: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGSTOP: one process, every connection's thread with it.
    pub fn freeze(&self) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
    }

    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }

    /// `mysql://leader@127.0.0.1:PORT/leader_exec`: the password is given apart.
    pub fn url(&self, port: u16) -> String {
        format!("mysql://{MARIADB_USER}@127.0.0.1:{port}/{MARIADB_DATABASE}")
    }

    /// Runs SQL as the server's root over its socket (no database chosen: name it,
    /// `leader_exec.TABLE`); returns stdout (tab-separated, no column names). Panics on failure.
    pub fn sql(&self, sql: &str) -> String {
        let out = self.try_sql(sql);
        assert!(
            out.status.success(),
            "mariadb {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_sql(&self, sql: &str) -> Output {
        mariadb_client(&self.socket())
            .args(["-e", sql])
            .output()
            .expect("the mariadb client is installed (apt-get install mariadb-client)")
    }

    /// Runs SQL as the server's root in a client left running (a session that holds a lock,
    /// say); the caller kills it.
    pub fn sql_in_background(&self, sql: &str) -> Child {
        mariadb_client(&self.socket())
            .args(["-e", sql])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the mariadb client is installed (apt-get install mariadb-client)")
    }

    pub fn version(&self) -> String {
        first_line_of(MARIADBD, &["--version"])
    }
}

/// The `mariadb` client as the server's root over `socket`: no option files, batch output
/// without column names.
fn mariadb_client(socket: &Path) -> Command {
    let mut command = Command::new("mariadb");
    command
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["-u", "root", "-N", "-B"])
        .env_remove("MYSQL_PWD")
        .env_remove("MYSQL_HOST");
    command
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}
