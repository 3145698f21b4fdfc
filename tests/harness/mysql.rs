//! MariaDB as the store list's `mysql` entry: the harness's [`MariaDb`] as a [`Store`], reached
//! as the password-less user [`MARIADB_OPEN_USER`]. (The server itself is `mariadb.rs`, which
//! the store's unit tests include on their own, without this trait.)

use std::net::SocketAddr;

use super::{MARIADB_DATABASE, MARIADB_OPEN_USER, MariaDb, Proxy, Store};

/// The lease row of `lease` and its slot rows (`lease/k`, with --max-holders above 1), as SQL
/// over the leases table's `name` (bytes: compared as such).
fn rows_of(lease: &str) -> String {
    format!(
        "(name = '{lease}' OR LEFT(name, {len}) = '{lease}/')",
        len = lease.len() + 1
    )
}

impl MariaDb {
    /// `mysql://jobs@127.0.0.1:PORT/leader_exec`.
    pub fn open_url(&self, port: u16) -> String {
        format!("mysql://{MARIADB_OPEN_USER}@127.0.0.1:{port}/{MARIADB_DATABASE}")
    }

    /// One number from SQL, 0 where the statement fails (no table yet: nobody has run).
    fn count(&self, sql: &str) -> usize {
        match self.try_sql(sql) {
            out if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// Statements leader-exec's sessions ran so far (the harness's own run without a default
    /// database), of those whose digest `filter` takes.
    fn statements(&self, filter: &str) -> Option<f64> {
        let out = self.try_sql(&format!(
            "SELECT COALESCE(SUM(COUNT_STAR), 0) FROM performance_schema.events_statements_summary_by_digest \
             WHERE SCHEMA_NAME = '{MARIADB_DATABASE}' AND {filter}"
        ));
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

/// The digest of a waiter's look (`poll_line` in src/election/mysql/line.rs): its renewal of
/// its own row, the count it keeps, and the read of the row ahead and the lease row.
const LOOK: &str = "(DIGEST_TEXT LIKE 'UPDATE `leader_exec_waiters` SET `renewals`%' OR DIGEST_TEXT LIKE '%leader_exec_mine%')";

impl Store for MariaDb {
    const NAME: &'static str = "mysql";

    fn start() -> Self {
        MariaDb::start()
    }

    fn endpoint(&self) -> String {
        self.open_url(self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.open_url(proxy.port)
    }

    fn restart(&mut self) {
        MariaDb::restart(self)
    }

    /// The holders' rows while unexpired by the server's clock, and the waiter rows in line
    /// whose TTL has not run out (a waiter renews its row every --retry-period).
    fn claims(&self, lease: &str) -> usize {
        self.count(&format!(
            "SELECT (SELECT COUNT(*) FROM {MARIADB_DATABASE}.leader_exec_leases WHERE {rows} AND holder IS NOT NULL AND expires_at > NOW(6)) \
             + (SELECT COUNT(*) FROM {MARIADB_DATABASE}.leader_exec_waiters WHERE name = '{lease}' AND expires_at > NOW(6))",
            rows = rows_of(lease)
        ))
    }

    fn held(&self) -> Vec<String> {
        let out = self.try_sql(&format!(
            "SELECT CONCAT(name, ' ', holder) FROM {MARIADB_DATABASE}.leader_exec_leases WHERE holder IS NOT NULL AND expires_at > NOW(6) \
             UNION ALL SELECT CONCAT('waiter ', name, ' ', identity) FROM {MARIADB_DATABASE}.leader_exec_waiters WHERE expires_at > NOW(6)"
        ));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn freeze(&self) {
        MariaDb::freeze(self)
    }

    fn thaw(&self) {
        MariaDb::thaw(self)
    }

    /// With the performance schema, whose digests count the statements the server runs.
    fn start_measured() -> Self {
        MariaDb::start_with(&[
            "--performance-schema=ON",
            "--performance-schema-consumer-statements-digest=ON",
        ])
    }

    fn version(&self) -> String {
        MariaDb::version(self)
    }

    /// The waiter rows of the lease and its holders: one per instance in line (or holding).
    fn in_line(&self, lease: &str) -> usize {
        self.count(&format!(
            "SELECT (SELECT COUNT(*) FROM {MARIADB_DATABASE}.leader_exec_waiters WHERE name = '{lease}') \
             + (SELECT COUNT(*) FROM {MARIADB_DATABASE}.leader_exec_leases WHERE {rows} AND holder IS NOT NULL)",
            rows = rows_of(lease)
        ))
    }

    /// Statements leader-exec ran, less the waiters' periodic looks (`periodic_requests`).
    fn requests(&self) -> Option<f64> {
        self.statements(&format!("NOT {LOOK}"))
    }

    /// The waiters' looks at the line (three statements per waiter per retry period).
    fn periodic_requests(&self) -> Option<f64> {
        self.statements(LOOK)
    }
}
