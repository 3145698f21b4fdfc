//! PostgreSQL 15 ([`Postgres`]), run as the `postgres` user on a temporary directory, a hot
//! standby of it (made synchronous, kept with it, promoted), and its [`Store`] impl.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{
    Proxy, Store, children_of, cmdline_of, first_line_of, free_port, path_str, share_machine,
    wait_for,
};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server on a free loopback port, run as the `postgres` user (initdb refuses root)
/// on a temporary directory it owns; stopped (immediate mode) when dropped.
pub struct Postgres {
    pub port: u16,
    dir: tempfile::TempDir,
    running: bool,
    /// More server options (`-c name=value …`).
    extra: String,
    /// More environment for the server (e.g. libfaketime's).
    env: Vec<(String, String)>,
    /// `search_path` for the harness's own psql sessions, when the role's own must not be used
    /// (`PgHostile`: there it finds the hostile role's overloads before pg_catalog's).
    pub(super) psql_search_path: Option<&'static str>,
    /// A standby kept with this server (`keep_standby`) until a failover takes it
    /// (`take_standby`); stopped after this server when dropped.
    standby: Option<Box<Postgres>>,
}

fn as_postgres(program: &str) -> Command {
    let mut command = Command::new("runuser");
    command.args(["-u", "postgres", "--", &format!("{PG_BIN}/{program}")]);
    command
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with("")
    }

    /// Starts with more server options, e.g. `-c shared_preload_libraries=pg_stat_statements`.
    pub fn start_with(extra: &str) -> Postgres {
        Postgres::start_with_env(extra, &[])
    }

    /// Starts under libfaketime (Debian's `faketime`): the server's clock is offset by what the
    /// returned file says (`+0` at first; write `+30s`, say, to step it while the server runs).
    pub fn start_with_faketime() -> (Postgres, tempfile::NamedTempFile) {
        const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        let clock = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(clock.path(), "+0\n").unwrap();
        // The server runs as the `postgres` user and reads the file the test writes.
        std::fs::set_permissions(
            clock.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let file = path_str(clock.path());
        let pg = Postgres::start_with_env(
            "",
            &[
                ("LD_PRELOAD", FAKETIME),
                ("FAKETIME_TIMESTAMP_FILE", &file),
                ("FAKETIME_NO_CACHE", "1"),
            ],
        );
        (pg, clock)
    }

    /// Starts with more environment for the server, e.g. `LD_PRELOAD` of libfaketime.
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Postgres {
        share_machine();
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pg")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        let out = as_postgres("initdb")
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .output()
            .expect("PostgreSQL is installed (apt-get install postgresql)");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            port: 0,
            dir,
            running: false,
            psql_search_path: None,
            standby: None,
            extra: extra.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        // A free port can be taken between the probe and the server's bind: try a few times.
        for _ in 0..5 {
            pg.port = free_port();
            if pg.spawn() {
                return pg;
            }
        }
        panic!("PostgreSQL did not start");
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the server on its data. A standby that lost its primary tries it again after half a
    /// second (5 s by default), so that a restart of a primary with a synchronous standby holds
    /// its commits up briefly.
    fn spawn(&mut self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c max_connections=600 \
             -c wal_retrieve_retry_interval=500ms {}",
            self.port,
            self.data_dir().display(),
            self.extra
        );
        let status = as_postgres("pg_ctl")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("-D")
            .arg(self.data_dir())
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "30", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        self.running = status.success();
        self.running
    }

    /// `pg_ctl stop -m immediate`: like a crash, nothing is flushed or said goodbye.
    pub fn kill(&mut self) {
        if self.running {
            self.thaw();
            let _ = as_postgres("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            self.running = false;
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "PostgreSQL did not come back");
    }

    /// Restarts with TLS on, serving `cert` and `key` (PEM files the test made).
    pub fn enable_tls(&mut self, cert: &Path, key: &Path) {
        for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
            let target = self.data_dir().join(to);
            std::fs::copy(from, &target).unwrap();
            let ok = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&target)
                .status()
                .unwrap()
                .success();
            assert!(ok);
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        self.extra.push_str(" -c ssl=on");
        self.restart();
    }

    /// The postmaster and every backend (SIGSTOP of the postmaster alone leaves established
    /// sessions serving).
    fn pids(&self) -> Vec<i32> {
        let Ok(text) = std::fs::read_to_string(self.data_dir().join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(main) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![main];
        pids.extend(children_of(main));
        pids
    }

    pub fn freeze(&self) {
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
    }

    pub fn thaw(&self) {
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }

    pub fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    /// Runs SQL with psql; returns stdout (unaligned, tuples only). Panics on failure.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.try_psql(sql);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_psql(&self, sql: &str) -> Output {
        let mut command = Command::new("psql");
        if let Some(path) = self.psql_search_path {
            command.env("PGOPTIONS", format!("-c search_path={path}"));
        }
        command
            .env_remove("PGPASSWORD")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url(self.port))
            .args(["-c", sql])
            .output()
            .expect("psql is installed (apt-get install postgresql)")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Store for Postgres {
    const NAME: &'static str = "postgres";

    fn start() -> Self {
        Postgres::start()
    }

    fn endpoint(&self) -> String {
        self.url(self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.url(proxy.port)
    }

    fn restart(&mut self) {
        Postgres::restart(self)
    }

    /// The holders' rows (`NAME`, and with --max-holders above 1 its slot rows `NAME/k`) and
    /// the waiters in line (`leader_exec_waiters`, whose rows a waiter renews every
    /// --retry-period: one whose TTL ran out by the server's clock is a dead waiter's, as an
    /// etcd key goes with its lease).
    fn claims(&self, lease: &str) -> usize {
        let holder = format!(
            "SELECT count(*) FROM leader_exec_leases WHERE (name = '{lease}' OR starts_with(name, '{lease}/')) AND holder IS NOT NULL AND expires_at > now()"
        );
        let sql = format!(
            "SELECT ({holder}) + (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}' AND expires_at > now())"
        );
        match self.try_psql(&sql) {
            out if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(0),
            // No table yet: nobody has run.
            _ => 0,
        }
    }

    fn held(&self) -> Vec<String> {
        let out = self.try_psql(
            "SELECT name || ' ' || holder FROM leader_exec_leases WHERE holder IS NOT NULL AND expires_at > now() \
             UNION ALL SELECT 'waiter ' || name || ' ' || identity FROM leader_exec_waiters WHERE expires_at > now()",
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn freeze(&self) {
        Postgres::freeze(self)
    }

    fn thaw(&self) {
        Postgres::thaw(self)
    }

    /// With pg_stat_statements, which counts the statements the server runs.
    fn start_measured() -> Self {
        let pg = Postgres::start_with("-c shared_preload_libraries=pg_stat_statements");
        pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        pg
    }

    fn version(&self) -> String {
        first_line_of(&format!("{PG_BIN}/postgres"), &["--version"])
    }

    /// The waiter rows of the lease and its holders (the lease row and, with --max-holders
    /// above 1, the slot rows `NAME/k`): one per instance in line (or holding).
    fn in_line(&self, lease: &str) -> usize {
        let out = self.try_psql(&format!(
            "SELECT (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}') + \
             (SELECT count(*) FROM leader_exec_leases WHERE (name = '{lease}' OR starts_with(name, '{lease}/')) AND holder IS NOT NULL)"
        ));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// Statements run so far (pg_stat_statements), less the harness's own (each of which reads a
    /// pg_stat_ view) and the waiters' periodic looks at the line (`periodic_requests`), as
    /// etcd's counts leave out lease renewals.
    fn requests(&self) -> Option<f64> {
        self.statements("query NOT LIKE '%pg_stat%' AND query NOT LIKE 'WITH mine AS%'")
    }

    /// The waiters' looks at the line (one per waiter per retry period).
    fn periodic_requests(&self) -> Option<f64> {
        self.statements("query LIKE 'WITH mine AS%'")
    }
}

impl Postgres {
    fn statements(&self, filter: &str) -> Option<f64> {
        let out = self.try_psql(&format!(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE {filter}"
        ));
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

impl Postgres {
    /// A hot standby of this server: `pg_basebackup -R` (streaming from this one), started on
    /// a free port of its own with this server's options and environment (under libfaketime,
    /// the same offset file: one clock for both); stopped when dropped.
    pub fn start_standby(&self) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pg-standby")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        let out = as_postgres("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(dir.path().join("data"))
            // A fast checkpoint: a spread one takes seconds on a server under load.
            .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut standby = Postgres {
            port: 0,
            dir,
            running: false,
            extra: self.extra.clone(),
            env: self.env.clone(),
            psql_search_path: None,
            standby: None,
        };
        for _ in 0..5 {
            standby.port = free_port();
            if standby.spawn() {
                return standby;
            }
        }
        panic!("the standby did not start");
    }

    /// Stops a standby's WAL replay (SIGSTOP of its startup process): it lags, yet still
    /// answers reads. Dropping the standby lets it go on (`kill` thaws every process first).
    pub fn pause_replay(&self) {
        let startup = self
            .pids()
            .into_iter()
            .find(|&pid| cmdline_of(pid).contains("startup"))
            .expect("a standby has a startup process");
        kill(Pid::from_raw(startup), Signal::SIGSTOP).unwrap();
    }

    /// Makes this server's standbys synchronous (`synchronous_standby_names = '*'`: a commit
    /// returns once a standby has flushed it, and waits while none answers) and waits, at most
    /// `timeout`, until one streams as the synchronous standby: false if none did.
    pub fn replicate_synchronously(&self, timeout: Duration) -> bool {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.psql("SELECT pg_reload_conf()");
        wait_for(timeout, || {
            self.try_psql(
                "SELECT count(*) FROM pg_stat_replication \
                 WHERE state = 'streaming' AND sync_state = 'sync'",
            )
            .stdout
            .starts_with(b"1")
        })
    }

    /// Keeps `standby` with this server, until `take_standby`.
    pub fn keep_standby(&mut self, standby: Postgres) {
        self.standby = Some(Box::new(standby));
    }

    /// The standby kept with this server, if any.
    pub fn take_standby(&mut self) -> Option<Postgres> {
        self.standby.take().map(|standby| *standby)
    }

    /// Promotes a standby (`pg_promote()`, which returns once it accepts writes).
    pub fn promote(&self) {
        let promoted = self.psql("SELECT pg_promote()");
        assert_eq!(promoted.trim(), "t", "the standby was not promoted");
    }
}
