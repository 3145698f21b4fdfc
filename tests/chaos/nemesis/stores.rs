//! What each store adds to the nemesis's schedule: how its server starts, which request marks a
//! claim on the wire, the manipulations by hand that only it has, and a failover where it keeps a
//! standby.

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

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

    /// Whether the store keeps a standby to fail over to (`failover`): the schedule then fails
    /// over now and then.
    const STANDBY: bool = false;

    /// A failover, where the store keeps a standby (PostgreSQL): the server every route leads to
    /// dies, a standby that has every committed transaction becomes the primary, and the store is
    /// that server from then on (`addr`, `endpoint`). The store calls `move_route` with the new
    /// primary's address when the route moves there: the schedule points every instance's
    /// proxies at it, as a virtual IP moved or a pooler re-pointed in a real failover. What was
    /// done; None (nothing done) where the store has no standby, the default.
    fn failover(
        &mut self,
        _rng: &mut fastrand::Rng,
        _move_route: &mut dyn FnMut(SocketAddr),
    ) -> Option<String> {
        None
    }
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
    const STANDBY: bool = true;

    /// Under libfaketime, as scenario p11's server, with a synchronous standby under the same
    /// offset file: the schedule steps both clocks at once, and once the standby is promoted its
    /// clock is the one that must decide nothing.
    fn start_nemesis() -> (Self, Option<tempfile::NamedTempFile>) {
        let (mut pg, clock) = Postgres::start_with_faketime();
        pg.add_synchronous_standby();
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

    fn failover(
        &mut self,
        rng: &mut fastrand::Rng,
        move_route: &mut dyn FnMut(SocketAddr),
    ) -> Option<String> {
        self.failover_to_the_synchronous_standby(rng, move_route)
    }
}

/// How long a new standby may take to stream as the synchronous one (a base backup and a start
/// on a loaded machine).
const STANDBY_SYNCHRONOUS: Duration = Duration::from_secs(60);

impl Postgres {
    /// A standby made from this server (`pg_basebackup`, this server's options and libfaketime's
    /// offset file), kept with it, and every commit here made to wait until the standby has
    /// flushed it (`synchronous_standby_names = '*'`): the configuration docs/postgresql.md
    /// requires for a failover. The restarts and pauses of the schedule stay the primary's: a
    /// restart holds commits up until the standby has reconnected (about half a second), and a
    /// pause stops everything anyway. Panics when the standby does not become synchronous in time: a failover
    /// to it would then be the one the documentation warns against.
    fn add_synchronous_standby(&mut self) {
        let standby = self.start_standby();
        self.keep_standby(standby);
        assert!(
            self.replicate_synchronously(STANDBY_SYNCHRONOUS),
            "the standby never became synchronous"
        );
    }

    /// A failover as an HA manager makes it when the primary dies: the primary is killed
    /// (`pg_ctl stop -m immediate`: a crash, its sessions cut mid-transaction), the synchronous
    /// standby — which has flushed every transaction the primary answered committed — is
    /// promoted and becomes the store, and every route is moved to it: after the promotion (a
    /// virtual IP that moves once the new primary takes writes) or, half the time, up to a second
    /// before it (a pooler re-pointed at once: sessions meet a server still in recovery, which
    /// leader-exec must not use). The new primary then gets a synchronous standby of its own for
    /// the next failover; until it streams, the new primary runs alone (its commits wait for
    /// nobody, and no failover comes before that).
    ///
    /// Nothing is excused: every claim the old primary answered is on the new one, so none goes
    /// behind its holder's back, and a holder that cannot renew on the new primary in time steps
    /// down at its deadline, as through any outage. A promoted server without a committed write
    /// (an asynchronous standby that lags) shows here as a token given twice or two commands at
    /// once, and so would leader-exec taking a row there sooner than its rules allow, or reading
    /// one from the server still in recovery.
    fn failover_to_the_synchronous_standby(
        &mut self,
        rng: &mut fastrand::Rng,
        move_route: &mut dyn FnMut(SocketAddr),
    ) -> Option<String> {
        let standby = self.take_standby()?;
        let began = std::time::Instant::now();
        let early = rng.bool().then(|| Duration::from_millis(rng.u64(..1000)));
        self.kill();
        // The old primary's data goes with it.
        drop(std::mem::replace(self, standby));
        if let Some(wait) = early {
            move_route(self.addr());
            std::thread::sleep(wait);
        }
        self.promote();
        if early.is_none() {
            move_route(self.addr());
        }
        self.add_synchronous_standby();
        Some(format!(
            "postgres: the synchronous standby promoted (the primary killed, every route moved to \
             the standby {}), a new synchronous standby of it streaming, in {:?}",
            match early {
                Some(wait) => format!("{wait:?} before its promotion"),
                None => "once promoted".to_owned(),
            },
            began.elapsed()
        ))
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
            return self.failover_to_a_lagging_replica(lease);
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
    ///
    /// The replica stops only once it has the current server's last token of `lease` (the
    /// name's tokens row names this server): a replica that lacks every token the current
    /// primary issued since its own promotion would, promoted in turn, issue them again, and no
    /// binary can know they were issued (docs/mysql.md, "What no binary can know": a second
    /// failover to a server without the first new primary's writes). Before the first failover,
    /// that is the first token issued at all.
    fn failover_to_a_lagging_replica(&mut self, lease: &str) -> Option<(String, bool)> {
        let db = MARIADB_DATABASE;
        if !self.lagging_copy_kept() {
            let has_this_servers_token = self
                .try_sql(&format!(
                    "SELECT COUNT(*) FROM {db}.leader_exec_tokens
                     WHERE name = '{lease}' AND server_id = @@global.server_id"
                ))
                .stdout
                .starts_with(b"1");
            if !has_this_servers_token {
                return None;
            }
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
