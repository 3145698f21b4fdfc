//! What each store adds to the nemesis's schedule: how its server starts, which request marks a
//! claim on the wire, and the manipulations by hand that only it has.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::harness::{
    Etcd, MARIADB_DATABASE, MARIADB_OPEN_USER, MariaDb, Postgres, Store, ZooKeeper, ZooKeeperTree,
};

/// What a store adds to the schedule.
pub trait Nemesis: Store {
    /// Starts the server the schedule runs against, and the libfaketime offset file that steps
    /// its clock when it runs under libfaketime (PostgreSQL). None where a step cannot be
    /// injected that way: etcd is a Go program, which reads the clock without libc, and its
    /// lessor counts on Go's monotonic clock; ZooKeeper expires sessions by the JVM's elapsed
    /// time (`Time.currentElapsedTime`, a monotonic clock), which a wall-clock step leaves alone.
    fn start_nemesis() -> (Self, Option<tempfile::NamedTempFile>) {
        (Self::start(), None)
    }

    /// Restarts the server on its data with `cfg` as its session bounds (zoo.cfg lines; "" for
    /// the harness's own), where the server negotiates each session's timeout: false (nothing
    /// done) where it does not.
    fn restart_with_session_bounds(&mut self, _cfg: &str) -> bool {
        false
    }

    /// Bytes that an instance's request to claim its place carries, as it travels.
    fn needle(lease: &str) -> Vec<u8>;

    /// One manipulation of the store's own, by hand: what was done, and whether it may have
    /// deleted a holder's claim behind its back.
    fn by_hand(&mut self, rng: &mut fastrand::Rng, lease: &str) -> Option<(String, bool)>;
}

impl Nemesis for Etcd {
    fn needle(lease: &str) -> Vec<u8> {
        format!("/leader-exec/{lease}/").into_bytes()
    }

    fn by_hand(&mut self, rng: &mut fastrand::Rng, lease: &str) -> Option<(String, bool)> {
        let keys = self.keys(&format!("/leader-exec/{lease}/"));
        let key = keys.get(rng.usize(..keys.len().max(1)))?;
        self.ctl(&["del", key]);
        Some((format!("etcd: key {key} deleted by hand"), true))
    }
}

impl Nemesis for ZooKeeper {
    fn needle(_lease: &str) -> Vec<u8> {
        b"latch-".to_vec()
    }

    fn restart_with_session_bounds(&mut self, cfg: &str) -> bool {
        self.restart_with(cfg);
        true
    }

    fn by_hand(&mut self, rng: &mut fastrand::Rng, lease: &str) -> Option<(String, bool)> {
        let election = format!("/leader-exec/{lease}");
        let nodes = catch_unwind(AssertUnwindSafe(|| self.children(&election))).ok()?;
        let node = nodes.get(rng.usize(..nodes.len().max(1)))?;
        let path = format!("{election}/{node}");
        catch_unwind(AssertUnwindSafe(|| self.delete(&path))).ok()?;
        Some((format!("zookeeper: node {path} deleted by hand"), true))
    }
}

impl Nemesis for Postgres {
    /// Under libfaketime, as scenario p11's server: the schedule steps its clock.
    fn start_nemesis() -> (Self, Option<tempfile::NamedTempFile>) {
        let (pg, clock) = Postgres::start_with_faketime();
        (pg, Some(clock))
    }

    fn needle(_lease: &str) -> Vec<u8> {
        b"nextval".to_vec()
    }

    fn by_hand(&mut self, rng: &mut fastrand::Rng, lease: &str) -> Option<(String, bool)> {
        // The lease rows refuse DELETE (a row keeps its token); the sequence and the line do not.
        let (what, sql) = if rng.u8(..10) < 6 {
            (
                "postgres: token sequence set back (ALTER SEQUENCE … RESTART)",
                "ALTER SEQUENCE leader_exec_tokens RESTART".to_owned(),
            )
        } else {
            (
                "postgres: waiter rows deleted by hand",
                format!("DELETE FROM leader_exec_waiters WHERE name = '{lease}'"),
            )
        };
        self.try_psql(&sql)
            .status
            .success()
            .then(|| (what.to_owned(), false))
    }
}

impl Nemesis for MariaDb {
    /// Under libfaketime: the schedule steps the server's clock, which must decide no takeover.
    /// leader-exec's account writes through `read_only` (READ ONLY ADMIN, as `GRANT ALL ON *.*`
    /// gives), so that only leader-exec's own check keeps it off a read-only server.
    fn start_nemesis() -> (Self, Option<tempfile::NamedTempFile>) {
        let (db, clock) = MariaDb::start_with_faketime();
        db.sql(&format!(
            "GRANT READ_ONLY ADMIN ON *.* TO '{MARIADB_OPEN_USER}'@'%'"
        ));
        (db, Some(clock))
    }

    /// An attempt to acquire and a place taken in line both begin by making the name's tokens
    /// row.
    fn needle(_lease: &str) -> Vec<u8> {
        b"INSERT INTO `leader_exec_tokens`".to_vec()
    }

    /// What a hand at the server, a restore or a cleanup script does to the tables, one at a
    /// time: each of the three rows that remember a token (the tokens row, the lease row, the
    /// fence row) is gone in turn, and the line with it; the token must still rise, since the
    /// other rows remember it. A deleted lease row takes a holder's claim from under it.
    fn by_hand(&mut self, rng: &mut fastrand::Rng, lease: &str) -> Option<(String, bool)> {
        let db = MARIADB_DATABASE;
        // The failover's two steps (the replica stops, then is promoted) take the first of these
        // manipulations and every other one after it, so that a 50-step run usually has both.
        if !self.lagging_copy_kept() || rng.bool() {
            return self.failover_to_a_lagging_replica();
        }
        let (what, sql, claim) = match rng.u8(..10) {
            0..=2 => (
                "mysql: tokens row deleted by hand",
                format!("DELETE FROM {db}.leader_exec_tokens WHERE name = '{lease}'"),
                false,
            ),
            3 => (
                "mysql: tokens table truncated",
                format!("TRUNCATE TABLE {db}.leader_exec_tokens"),
                false,
            ),
            4..=5 => (
                "mysql: lease row deleted by hand",
                format!("DELETE FROM {db}.leader_exec_leases WHERE name = '{lease}'"),
                true,
            ),
            6 => (
                "mysql: fence row deleted by hand",
                format!("DELETE FROM {db}.leader_exec_fences WHERE name = '{lease}'"),
                false,
            ),
            _ => (
                "mysql: waiter rows deleted by hand",
                format!("DELETE FROM {db}.leader_exec_waiters WHERE name = '{lease}'"),
                false,
            ),
        };
        self.try_sql(&sql)
            .status
            .success()
            .then(|| (what.to_owned(), claim))
    }
}

/// The tables a lagging replica has older copies of.
const REPLICATED: [&str; 4] = [
    "leader_exec_leases",
    "leader_exec_tokens",
    "leader_exec_fences",
    "leader_exec_waiters",
];

impl MariaDb {
    /// Whether the "replica" has stopped replicating: a copy of the tables is kept.
    fn lagging_copy_kept(&self) -> bool {
        self.try_sql(&format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{MARIADB_DATABASE}'
             AND table_name = 'lagging_leader_exec_leases'"
        ))
        .stdout
        .starts_with(b"1")
    }

    /// A failover to an asynchronous replica that lags, on the one server: the first time, the
    /// "replica" stops replicating (a copy of the tables is kept); the next time it is promoted
    /// in a planned switchover: the server turns read-only (which leader-exec's account could
    /// write through), every session of leader-exec's is killed, the tables are set back to the
    /// copy — the rows as the replica had them, without every write since — and the server gets
    /// another `server_id`, then turns writable. No claim is deleted behind a holder's back in a
    /// way the checker excuses: a holder whose row went back loses it at its next renewal, and
    /// nobody may take a row the new server did not write before that holder's command is gone.
    fn failover_to_a_lagging_replica(&mut self) -> Option<(String, bool)> {
        let db = MARIADB_DATABASE;
        if !self.lagging_copy_kept() {
            let copy = REPLICATED
                .iter()
                .map(|t| format!("CREATE TABLE {db}.lagging_{t} AS SELECT * FROM {db}.{t}"))
                .collect::<Vec<_>>()
                .join("; ");
            return self.try_sql(&copy).status.success().then(|| {
                (
                    "mysql: the replica stops replicating (lags from here)".to_owned(),
                    false,
                )
            });
        }
        let kill_sessions = |db: &MariaDb| {
            let ids = db.sql(&format!(
                "SELECT id FROM information_schema.processlist WHERE user = '{MARIADB_OPEN_USER}'"
            ));
            for id in ids.split_whitespace() {
                let _ = db.try_sql(&format!("KILL {id}"));
            }
        };
        self.sql("SET GLOBAL read_only = ON");
        kill_sessions(self);
        let restore = REPLICATED
            .iter()
            .map(|t| {
                format!(
                    "DELETE FROM {db}.{t}; INSERT INTO {db}.{t} SELECT * FROM {db}.lagging_{t}; \
                     DROP TABLE {db}.lagging_{t}"
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let ok = self.try_sql(&restore).status.success();
        if ok {
            // Another server's identity, kept through the restarts the schedule makes.
            let id: u64 = self
                .sql("SELECT @@global.server_id")
                .trim()
                .parse()
                .unwrap_or(1);
            self.set_server_id(id + 1);
        }
        kill_sessions(self);
        self.sql("SET GLOBAL read_only = OFF");
        ok.then(|| {
            (
                "mysql: failover to the lagging replica (tables set back, another server_id)"
                    .to_owned(),
                false,
            )
        })
    }
}
