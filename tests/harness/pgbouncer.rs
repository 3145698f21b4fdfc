//! pgbouncer in transaction mode in front of a [`Postgres`] ([`PgBouncer`]), and its [`Store`]
//! impl.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Postgres, Proxy, Store, first_line_of, free_port, wait_for};

/// pgbouncer (Debian's, 1.18) in transaction mode in front of a [`Postgres`], on free loopback
/// ports: every transaction may run on another server connection, named prepared statements
/// collide across clients, session state (`SET`, `LISTEN`) does not stay with a client. The
/// `options` startup parameter (leader-exec's `statement_timeout` and `lock_timeout`) is ignored,
/// as a fleet's pgbouncer must be configured to accept libpq-style clients. `server_login_retry`
/// is 1 s (default 15 s: after PostgreSQL restarts, pgbouncer would hold every client that long
/// before it tries to log in again). Stopped by pid when dropped, before its PostgreSQL.
pub struct PgBouncer {
    pub port: u16,
    /// The server behind it (`psql` and `claims` go to it directly).
    pub pg: Postgres,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PgBouncer {
    pub fn start() -> PgBouncer {
        PgBouncer::start_in_front_of(Postgres::start())
    }

    /// Starts in front of `pg` (already running).
    pub fn start_in_front_of(pg: Postgres) -> PgBouncer {
        // pgbouncer refuses to run as root: `-u postgres`, from a directory only it can read.
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pgbouncer")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let mut bouncer = PgBouncer {
            port: 0,
            pg,
            dir,
            child: None,
        };
        for _ in 0..5 {
            bouncer.port = free_port();
            if bouncer.spawn() {
                return bouncer;
            }
        }
        panic!("pgbouncer did not start: {}", bouncer.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    fn spawn(&mut self) -> bool {
        let ini = self.dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={pg} user=postgres\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = transaction\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 max_client_conn = 2000\n\
                 default_pool_size = 100\n\
                 server_login_retry = 1\n\
                 logfile = {log}\n\
                 pidfile = {pid}\n",
                pg = self.pg.port,
                port = self.port,
                log = self.dir.path().join("log").display(),
                pid = self.dir.path().join("pid").display(),
            ),
        )
        .unwrap();
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&ini)
            .status();
        let child = Command::new("pgbouncer")
            .args(["-q", "-u", "postgres"])
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer is installed (apt-get install pgbouncer)");
        self.child = Some(child);
        let url = self.pg.url(self.port);
        let ready = wait_for(Duration::from_secs(10), || {
            if self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some())
            {
                return true;
            }
            Command::new("psql")
                .args(["-X", "-q", "-At", "-d", &url, "-c", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let exited = self
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some());
        if !ready || exited {
            self.stop();
            return false;
        }
        true
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Store for PgBouncer {
    const NAME: &'static str = "pgbouncer";

    fn start() -> Self {
        PgBouncer::start()
    }

    fn endpoint(&self) -> String {
        self.pg.url(self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.pg.url(proxy.port)
    }

    /// PostgreSQL restarts behind a running pgbouncer, which reconnects to it.
    fn restart(&mut self) {
        self.pg.restart()
    }

    fn claims(&self, lease: &str) -> usize {
        self.pg.claims(lease)
    }

    fn in_line(&self, lease: &str) -> usize {
        self.pg.in_line(lease)
    }

    fn held(&self) -> Vec<String> {
        self.pg.held()
    }

    /// The server hangs; pgbouncer still accepts connections and queues their transactions.
    fn freeze(&self) {
        self.pg.freeze()
    }

    fn thaw(&self) {
        self.pg.thaw()
    }

    /// In front of a PostgreSQL with pg_stat_statements, which counts the statements that
    /// reach the server through pgbouncer.
    fn start_measured() -> Self {
        PgBouncer::start_in_front_of(Postgres::start_measured())
    }

    fn version(&self) -> String {
        format!(
            "{} in front of {}",
            first_line_of("pgbouncer", &["--version"]),
            self.pg.version()
        )
    }

    fn requests(&self) -> Option<f64> {
        self.pg.requests()
    }

    fn periodic_requests(&self) -> Option<f64> {
        self.pg.periodic_requests()
    }
}
