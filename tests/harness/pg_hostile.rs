//! PostgreSQL under a hostile schema ([`PgHostile`], tests/pg_hostile.sql), and its [`Store`]
//! impl: every test run on it asserts that none of another role's overloads ran.

use std::net::SocketAddr;
use std::process::Command;

use super::{Postgres, Proxy, Store};

/// PostgreSQL under a hostile schema (`tests/pg_hostile.sql`): a role `hostile` owns, in
/// `public` (leader-exec's schema), overloads of every operator and function name leader-exec's
/// SQL uses and more, over every combination of a set of argument types, each of which records
/// that it ran in `hostile_log.ran`; and the connecting role's `search_path` is
/// `public, pg_catalog`, so that before leader-exec pins its schema even an overload of exactly
/// pg_catalog's types wins. The schema passes leader-exec's secure-schema check (the hostile role
/// can create nothing there). Every store-independent test runs on it (`postgres_hostile::NAME`),
/// and when it ends the record must be empty: a statement of leader-exec's that leaves an
/// operator, a function or a type name to `search_path` fails the test that sends it.
pub struct PgHostile {
    pub pg: Postgres,
}

impl PgHostile {
    pub fn start() -> PgHostile {
        let mut pg = Postgres::start();
        // The harness's own statements find pg_catalog's names first.
        pg.psql_search_path = Some("pg_catalog,public");
        let out = Command::new("psql")
            .env_remove("PGPASSWORD")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(pg.url(pg.port))
            .args([
                "-f",
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pg_hostile.sql"),
            ])
            .output()
            .expect("psql is installed");
        assert!(
            out.status.success(),
            "tests/pg_hostile.sql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PgHostile { pg }
    }

    /// What of the hostile role's ran, and in which statement (a run whose statement was
    /// rolled back shows only in the sequence the overloads bump).
    pub fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = self
            .pg
            .psql(
                "SELECT what || ' in: ' || regexp_replace(query, '\\s+', ' ', 'g') \
                 FROM hostile_log.ran ORDER BY at",
            )
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if ran.is_empty() && self.pg.psql("SELECT is_called FROM hostile_log.runs") == "t\n" {
            ran.push("an overload, in a statement that was rolled back".into());
        }
        ran
    }
}

impl Drop for PgHostile {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let ran = self.ran();
        assert!(
            ran.is_empty(),
            "the hostile role's overloads ran {} times, first: {}",
            ran.len(),
            ran.iter().take(5).cloned().collect::<Vec<_>>().join(" | ")
        );
    }
}

impl Store for PgHostile {
    const NAME: &'static str = "postgres_hostile";

    fn start() -> Self {
        PgHostile::start()
    }

    fn endpoint(&self) -> String {
        self.pg.endpoint()
    }

    fn addr(&self) -> SocketAddr {
        self.pg.addr()
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.pg.endpoint_via(proxy)
    }

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

    fn freeze(&self) {
        self.pg.freeze()
    }

    fn thaw(&self) {
        self.pg.thaw()
    }

    fn version(&self) -> String {
        format!("{} with a hostile schema", self.pg.version())
    }
}
