//! The election on MySQL and MariaDB: one lease row per lease name (N slot rows with
//! `--max-holders` N: `slots.rs`), as on PostgreSQL, on the rules every row store shares
//! ([`rows`](super::rows)).
//!
//! `--endpoints mysql://…` (or `mariadb://`) opens it (`target.rs`, the store's `Door`). The tests
//! of this folder (`tests/`) drive its statements one by one against a MariaDB the test harness
//! starts; the store list's tests drive it through the command line. docs/mysql.md is the
//! operator's page.
//!
//! Tables (made on first use by `CREATE TABLE IF NOT EXISTS`, in the URL's database), named from
//! `--prefix` as on PostgreSQL (`/leader-exec/` gives `leader_exec_leases`,
//! `leader_exec_tokens`, `leader_exec_records`, `leader_exec_fences`, `leader_exec_waiters`),
//! each marked as leader-exec's by its table comment:
//!
//! - `<p>_leases (name, holder, token, renewals, expires_at, ttl_ms, max_holders)`: one row per
//!   lease name (with `--max-holders` N above 1, one per slot: `slots.rs`). `holder` is the leader's identity (bytes), NULL when free; `renewals` grows
//!   with every acquisition and renewal; `expires_at` is `NOW(6)` plus the TTL on the server's
//!   clock: a hint and a display, never what decides a takeover.
//! - `<p>_records (key, value, expires_at, lease_name, lease_token)`: occurrence records (kept
//!   until `expires_at`), handover requests, and the leader's state (kept while the lease row
//!   holds `lease_token`), each written fenced (`records.rs`).
//! - `<p>_fences (name, holder, token)`: the fence a job locks (`LOCK IN SHARE MODE`) in its own
//!   transaction. Written only where the claim changes hands (an acquisition, a release, a
//!   removal), never by a renewal: InnoDB has no lock like PostgreSQL's `FOR KEY SHARE`, so a
//!   job's shared lock on the lease row would hold up every renewal (an UPDATE of that row)
//!   until the job commits. A takeover or removal waits for it, as a fence must.
//! - `<p>_waiters (name, id, identity, renewals, ttl_ms, expires_at, max_holders)`: the line
//!   (`line.rs`), each waiter with its owner's N.
//! - `<p>_tokens (name, top)`: the highest token each name was ever given. Not AUTO_INCREMENT,
//!   whose counter goes back after a restart in several versions; a row of its own that only
//!   leader-exec's acquisitions write, raised in the same transaction as the token it records.
//!   A token is above `top`, the lease row's own token and the fence row's (which the last
//!   acquisition set to its token), so it exceeds every earlier token of the name while any one
//!   of the three rows is left: after a deleted lease row or a dropped leases table, a deleted
//!   tokens row or a truncated tokens table, a deleted fence row (the generative fault test does
//!   each by hand, at random, among the rest).
//!
//! A table, view or trigger of those names that leader-exec did not make is refused, with one
//! line saying what was found (`session.rs`).
//!
//! # One round trip a decision
//!
//! An acquisition is one batch of statements sent at once (`START TRANSACTION` … `COMMIT`): the
//! server runs it to its end without waiting for the client, so no transaction of leader-exec's
//! holds a lock across a round trip, and a waiter paused (or cut off) in the middle of its
//! attempt cannot hold up the leader's renewals. So is every other request that writes: a
//! renewal is one statement, a release, a removal, a fenced record write one batch each. Values in a batch are literals leader-exec writes itself: names and identities as hex
//! (`X'…'`, bytes whatever the character set), numbers as digits; nothing the user wrote is
//! ever spliced in as text.
//!
//! Every request runs under a client-side timer (`--retry-period`; InnoDB's
//! `innodb_lock_wait_timeout`, set to its least, 1 s, counts whole seconds only): a request the
//! timer ends drops its connection, which the server then rolls back.
//!
//! # Sessions
//!
//! Each session is set up by leader-exec before its first statement, so that a server's defaults
//! cannot change what the statements mean: `sql_mode` (strict, no backslash escapes), `READ
//! COMMITTED`, `time_zone = '+00:00'`, the character set, `autocommit`. A server with
//! `read_only` on (a replica, or an old primary after a failover; MySQL's `super_read_only`
//! turns `read_only` on with it) is skipped for the next host of the URL, or refused when none
//! is writable. A statement-based binary log is refused (InnoDB refuses READ COMMITTED writes
//! to it). The connection is opened with `CLIENT_FOUND_ROWS`: MySQL otherwise reports the rows
//! an UPDATE changed, not those it matched, and a renewal that changed nothing would read as
//! lost.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::Conn;

use crate::clock::{BootClock, Clock};

use super::rows::line::Line;
use super::rows::{Row, Sightings};
use super::{Candidacy, Open, StoreError};

mod line;
mod read;
mod records;
mod session;
mod slots;
mod store;
pub mod target;
#[cfg(test)]
mod testdb;
#[cfg(test)]
mod tests;
mod waits;

pub use target::Target;

/// The table names `--prefix` maps to ([`rows::table_stem`](super::rows::table_stem), the same as
/// PostgreSQL's), then `_leases`, `_tokens`, `_records`, `_fences`, `_waiters`. MySQL refuses
/// identifiers over 64 characters.
pub fn tables(prefix: &str) -> Result<Tables, StoreError> {
    let base = super::rows::table_stem(prefix, "MySQL", 64)?;
    Ok(Tables {
        leases: format!("{base}_leases"),
        tokens: format!("{base}_tokens"),
        records: format!("{base}_records"),
        fences: format!("{base}_fences"),
        waiters: format!("{base}_waiters"),
    })
}

/// The tables of one `--prefix`, unquoted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    pub leases: String,
    pub tokens: String,
    pub records: String,
    pub fences: String,
    pub waiters: String,
}

/// Bytes as an SQL literal: `X'…'`, the same bytes whatever the session's character set.
fn hex(bytes: &[u8]) -> String {
    format!("X'{}'", hex_digits(bytes))
}

/// Bytes as hex digits, two a byte, upper case.
fn hex_digits(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// How far a token jumps when this server issues the first token of a name whose tokens another
/// server issued last (a promoted replica: the name's tokens row, or the table-wide row for a
/// name without one, names another server): the new token is this much above the highest the
/// server knows, so that it stays above the tokens the old primary issued in writes that never
/// reached this one, unless more than this many acquisitions of one name were lost at once.
/// docs/mysql.md, "Failover".
const FOREIGN_JUMP: i64 = 1 << 20;

/// Three statements every acquisition (and a place taken in line) begins with, `{name}` the
/// name's literal: the name's tokens row made if missing — stamped, as a new lease row is, with
/// the table-wide row's server — and locked; then `@leader_exec_jump`, whether the name's last
/// token was issued by another server (read under that lock, so no other acquisition of the
/// name changes it before this one commits): the token this acquisition issues then jumps by
/// [`FOREIGN_JUMP`], and a won acquisition stamps the tokens row with this server.
const TOKENS_ROW: &str = "SET @leader_exec_table_server = (SELECT server_id FROM {tokens} WHERE name = X'');
             INSERT INTO {tokens} (name, top, server_id) VALUES ({name}, 0, @leader_exec_table_server)
                 ON DUPLICATE KEY UPDATE top = top;
             SET @leader_exec_jump = (SELECT NOT (server_id <=> @leader_exec_server)
                 FROM {tokens} WHERE name = {name})";

/// The key of the table-wide row in the tokens table (lease names are never empty): its
/// `server_id` is the server trusted with this table's rows that are missing or free (the one
/// that made the table, or that took one of its rows over after a failover), its `top` the
/// longest TTL any holder of the table wrote.
const TABLE_ROW: &str = "X''";

/// The first statement of every request: fails (error 1242, "Subquery returns more than 1
/// row") on a server with `read_only` on, and does nothing otherwise. The session check refuses
/// a read-only server when a session opens, but an account with READ ONLY ADMIN (MariaDB) or
/// SUPER/CONNECTION_ADMIN (MySQL) writes through `read_only`, and a server turned read-only
/// while a session is open (a planned switchover) would go on answering it: a leader renewing
/// on the old primary would never notice, and its copy of the row is not the one the new
/// primary's waiters see. So every request checks first, and one on a read-only server fails
/// like an unreachable one (the session is dropped and the next opens on a writable host).
/// `SET GLOBAL read_only = ON` waits for transactions in progress, so a batch that passed this
/// statement inside its transaction commits before the server turns read-only.
const WRITABLE: &str = "SET @leader_exec_writable = \
    (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE @@global.read_only <> 0)";

/// One attempt to acquire.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Won(i64),
    Held {
        holder: Option<Vec<u8>>,
        /// How long until this instance may take the row over (see `rows::Sighting`).
        wait: Duration,
    },
    /// Instances with another `--max-holders` (this one, theirs) hold or wait for the name
    /// (`slots.rs`): the caller exits as on PostgreSQL.
    Mismatch(u32),
}

struct Shared {
    target: Target,
    /// The table names, unquoted.
    leases: String,
    tokens: String,
    records: String,
    fences: String,
    waiters: String,
    name: String,
    identity: String,
    /// `--max-holders`: above 1, the slot rows of `slots.rs`.
    max_holders: u32,
    /// The name of the row this instance holds or last held: `NAME`, or a slot row `NAME/k`.
    held_row: Mutex<String>,
    ttl_ms: i64,
    /// Each request's own timer.
    request_timeout: Duration,
    /// How long a first connection may take.
    connect_timeout: Duration,
    /// How often a waiter near the front of the line looks at it (`--retry-period`).
    poll: Duration,
    /// How long this waiter goes between looks (ns): `poll`, or longer far back in the line
    /// ([`super::rows::line::look_spacing`], from its last look).
    look_every: AtomicU64,
    /// The session for requests other than renewals.
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// Whether the tables were made (or found) and checked by this process.
    tables_ready: AtomicBool,
    /// When this process last found the tables to be leader-exec's (`BootClock`), and the
    /// refusal of a check that did not (which every renewal then answers with).
    checked: Mutex<(Option<Duration>, Option<String>)>,
    /// Whether a look at what holds up a renewal is under way (`waits.rs`).
    looking_at_waits: AtomicBool,
    /// The token this instance holds, 0 while it holds none (shared with its keeper).
    held: AtomicI64,
    /// The held row as this instance last saw it, and since when: the takeover rule.
    sightings: Sightings,
    /// This candidacy's waiter row id (from the name's `top` in the tokens table), 0 while it
    /// has none.
    waiter: AtomicI64,
    /// The waiter row just ahead of this one as last seen, and since when.
    line: Line,
}

/// An election on MySQL or MariaDB, for one lease name.
#[derive(Clone)]
pub struct MySql {
    shared: Arc<Shared>,
}

impl MySql {
    /// A candidate; with `max_holders` above 1 it takes one of that many slot rows
    /// (`slots.rs`).
    pub fn new(target: Target, open: Open) -> Result<MySql, StoreError> {
        let Tables {
            leases,
            tokens,
            records,
            fences,
            waiters,
        } = tables(&open.scope.prefix)?;
        let (name, timing) = (open.scope.lease, open.timing);
        let poll = timing.retry_period.max(Duration::from_millis(100));
        Ok(MySql {
            shared: Arc::new(Shared {
                target,
                leases,
                tokens,
                records,
                fences,
                waiters,
                held_row: Mutex::new(name.clone()),
                name,
                identity: open.identity,
                max_holders: open.max_holders.max(1),
                ttl_ms: i64::try_from(timing.ttl.as_millis()).unwrap_or(i64::MAX),
                request_timeout: poll,
                connect_timeout: open.connect_timeout,
                poll,
                look_every: AtomicU64::new(u64::try_from(poll.as_nanos()).unwrap_or(u64::MAX)),
                conn: tokio::sync::Mutex::new(None),
                tables_ready: AtomicBool::new(false),
                checked: Mutex::new((None, None)),
                looking_at_waits: AtomicBool::new(false),
                held: AtomicI64::new(0),
                sightings: Sightings::new(timing.ttl),
                waiter: AtomicI64::new(0),
                line: Line::new(timing.ttl),
            }),
        })
    }

    /// The row as `LEADER_KEY` shows it: `TABLE/NAME`.
    fn row_key(&self) -> String {
        format!("{}/{}", self.shared.leases, self.shared.name)
    }

    /// The name of the row this instance holds (`NAME`, or a slot row `NAME/k`).
    fn held_row(&self) -> String {
        self.shared.held_row.lock().expect("not poisoned").clone()
    }

    /// Whether the column `col` names a row of this lease name, `NAME` or a slot row `NAME/…`:
    /// SQL. Names are bytes compared as bytes, and every name that starts with `NAME/` lies
    /// between `NAME/` and `NAME0` (`0` follows `/`), so this is a range of the primary key
    /// (no `LIKE`, whose `%` and `_` a name may hold).
    fn rows_of_name(&self, col: &str) -> String {
        let name = self.shared.name.as_bytes();
        let with = |c: u8| {
            let mut v = name.to_vec();
            v.push(c);
            hex(&v)
        };
        format!(
            "({col} = {} OR ({col} >= {} AND {col} < {}))",
            hex(name),
            with(b'/'),
            with(b'0')
        )
    }

    fn leases(&self) -> String {
        quote_ident(&self.shared.leases)
    }

    /// The longest TTL a holder of this table wrote (the table-wide row's `top`): SQL.
    fn table_ttl_sql(&self) -> String {
        format!(
            "(SELECT COALESCE(MAX(top), 0) FROM {} WHERE name = {TABLE_ROW})",
            self.tokens()
        )
    }

    /// The columns [`Row`] is read from, of the lease row `l`, in its order: `expires_at` as
    /// microseconds since the epoch (the session's time zone is UTC), compared only; then the
    /// server that answers.
    ///
    /// A row another server wrote last (its `server_id` is not this server's: a replica
    /// promoted, which may lack that server's last writes) is never free: a released one reads
    /// as held by the empty holder, and its TTL as the longest any holder of the table wrote,
    /// so that a taker takes it only once it has seen it unchanged for that long on its own
    /// clock, as a crashed holder's row (`rows::Sightings`). Every holder the old server had
    /// stopped its command within its TTL of its last renewal there, which came before this
    /// server answered the taker's first look.
    fn row_columns(&self, l: &str) -> String {
        format!(
            "IF({l}.server_id <=> @leader_exec_server, {l}.holder, COALESCE({l}.holder, X'')),
             {l}.token, {l}.renewals,
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {l}.expires_at),
             IF({l}.server_id <=> @leader_exec_server, {l}.ttl_ms,
                GREATEST({l}.ttl_ms, {table_ttl})),
             @leader_exec_server",
            table_ttl = self.table_ttl_sql(),
        )
    }

    fn tokens(&self) -> String {
        quote_ident(&self.shared.tokens)
    }

    fn records(&self) -> String {
        quote_ident(&self.shared.records)
    }

    fn fences(&self) -> String {
        quote_ident(&self.shared.fences)
    }

    fn waiters(&self) -> String {
        quote_ident(&self.shared.waiters)
    }

    /// One attempt to acquire, in one batch (see [`self`]): the tokens row and the lease row made
    /// if the name is new, the lease row taken if it is free — or, held, only if this instance
    /// has seen it unchanged for a full TTL and it is still exactly that (the takeover rule:
    /// `rows::Sightings`) — with a token above the row's own and the name's `top`, `top` raised
    /// to it, the fence row given the new holder and token, and the row read back, all in one
    /// transaction. Locks are taken in one order, tokens row, lease row, fence row, by every
    /// batch that takes more than one.
    ///
    /// With N above 1 this is [`attempt_slots`](Self::attempt_slots). With N = 1 the row is
    /// taken only while it says `max_holders = 1`: instances with N above 1 set it to theirs,
    /// under the same lock, before they take any of their rows, so this attempt, which waits
    /// for that lock, never takes `NAME` beside slot rows they hold. A row that says another N
    /// sends this instance to the reconciling attempt (`attempt_slots(1)`), which refuses it
    /// while any of them is there and sets the row back to 1 once none is. The token is above
    /// every token any row of the name had (slot rows and their fence rows included), read
    /// under the tokens row's lock.
    ///
    /// The fence row is made with `INSERT IGNORE`, whose lock on a row already there is a
    /// shared one: it does not wait for a job's `LOCK IN SHARE MODE` on it, so an attempt that
    /// does not win never waits for a job. (`ON DUPLICATE KEY UPDATE` would take it exclusively.
    /// IGNORE turns other errors into warnings too; the name, the only value that could fail,
    /// was written to the lease row, strictly, one statement before.) Only a winning attempt
    /// updates the fence row, and that waits for the job, as a fence must.
    async fn attempt(&self) -> Result<Attempt, StoreError> {
        let s = &self.shared;
        if s.max_holders > 1 {
            return self.attempt_slots(s.max_holders).await;
        }
        let name = hex(s.name.as_bytes());
        let me = hex(s.identity.as_bytes());
        let ripe = s.sightings.ripe(BootClock.now());
        let takeover = match &ripe {
            None => String::new(),
            // `COALESCE`: a released row another server wrote last is sighted as held by the
            // empty holder (`row_columns`).
            Some(seen) => format!(
                " OR (COALESCE(l.holder, X'') = X'{}' AND l.token = {} AND l.renewals = {} AND \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at) = {} AND \
                 @leader_exec_server = {})",
                seen.holder, seen.token, seen.renewals, seen.expires_us, seen.server
            ),
        };
        let ttl_ms = s.ttl_ms;
        // First in line (`rows/line.rs`): no live waiter row ahead; for an instance not in line,
        // none at all. A waiter row counts as live until its `expires_at` on the server's clock,
        // which decides only the order of the line, never who may take a held row.
        let waiter = s.waiter.load(Ordering::SeqCst);
        let ahead = match waiter {
            0 => String::new(),
            id => format!(" AND w.id < {id}"),
        };
        // A new lease row is stamped with the table-wide row's server: made on a server that
        // is not the one trusted with the table (a promoted replica that has not yet taken a
        // row over), it is another server's row, taken only as `row_columns` says. A row is
        // free at once only if this server wrote it last. Taking another server's row makes
        // this server the table's (the taker waited the longest TTL of the table on its own
        // clock since this server first answered it, so every holder the old server had is
        // gone); the table-wide row's `top` keeps the longest TTL a holder wrote. The token
        // jumps where the name's last token was another server's (`TOKENS_ROW`): a holder
        // whose own row this server has may renew and release it here, and the next token
        // must still be above those the old server issued to other rows of the name since.
        let batch = format!(
            "START TRANSACTION;
             {tokens_row};
             INSERT INTO {leases}
                     (name, holder, token, renewals, expires_at, ttl_ms, max_holders, server_id)
                 VALUES ({name}, NULL, 0, 0, NOW(6), 0, 1, @leader_exec_table_server)
                 ON DUPLICATE KEY UPDATE name = name;
             INSERT IGNORE INTO {fences} (name, holder, token) VALUES ({name}, NULL, 0);
             {high};
             SET @leader_exec_foreign = (SELECT COUNT(*) FROM {leases}
                 WHERE name = {name} AND NOT (server_id <=> @leader_exec_server));
             UPDATE {leases} l JOIN {tokens} t ON t.name = l.name JOIN {fences} f ON f.name = l.name
                 SET l.holder = {me},
                     l.token = GREATEST(l.token, t.top, f.token, @leader_exec_high) + 1
                         + IF(@leader_exec_jump, {FOREIGN_JUMP}, 0),
                     l.renewals = l.renewals + 1,
                     l.expires_at = TIMESTAMPADD(MICROSECOND, {ttl_us}, NOW(6)),
                     l.ttl_ms = {ttl_ms}, l.max_holders = 1,
                     l.server_id = @leader_exec_server
                 WHERE l.name = {name} AND l.max_holders = 1 AND @@global.read_only = 0
                   AND ((l.holder IS NULL AND l.server_id <=> @leader_exec_server
                         AND NOT EXISTS (
                     SELECT 1 FROM {waiters} w
                     WHERE w.name = {name}{ahead} AND w.expires_at > NOW(6))){takeover});
             SET @leader_exec_won = ROW_COUNT();
             DELETE FROM {waiters} WHERE name = {name} AND id = {waiter} AND @leader_exec_won > 0;
             UPDATE {tokens} t JOIN {leases} l ON l.name = t.name
                 SET t.top = GREATEST(t.top, l.token),
                     t.server_id = IF(@leader_exec_won > 0, @leader_exec_server, t.server_id)
                 WHERE t.name = {name};
             UPDATE {fences} SET holder = {me},
                     token = (SELECT token FROM {leases} WHERE name = {name})
                 WHERE name = {name} AND @leader_exec_won > 0;
             {table};
             SELECT @leader_exec_won, {columns}, l.max_holders FROM {leases} l
                 WHERE l.name = {name};
             COMMIT",
            high = self.high_sql(),
            tokens_row = self.tokens_row_sql(),
            table = self.table_row_sql(ttl_ms),
            columns = self.row_columns("l"),
            tokens = self.tokens(),
            leases = self.leases(),
            fences = self.fences(),
            waiters = self.waiters(),
            ttl_us = ttl_ms.saturating_mul(1000),
        );
        let mut rows = self.query(batch).await?;
        let received = BootClock.now();
        let Some(mut row) = rows.pop() else {
            return Err(StoreError::Transient(
                "MySQL: the lease row was not read back".into(),
            ));
        };
        let won: i64 = take(&mut row, 0)?;
        let (seen, holder) = lease_row(&mut row, 1)?;
        // Rows the multi-table UPDATE matched: one lease row, counted once here; any count
        // above 0 is the win, whatever a server counts for the joined tokens row.
        if won > 0 {
            s.sightings.forget_one();
            // Its waiter row went in the same transaction.
            s.waiter.store(0, Ordering::SeqCst);
            *s.held_row.lock().expect("not poisoned") = s.name.clone();
            s.held.store(seen.token, Ordering::SeqCst);
            return Ok(Attempt::Won(seen.token));
        }
        // Left by instances with another --max-holders: whether any of them is still there,
        // and if none is, the row back to 1 and an attempt, under the lock.
        let theirs: i64 = take(&mut row, 7)?;
        if theirs != 1 {
            return self.attempt_slots(1).await;
        }
        let wait = s.sightings.sight(&seen, received, BootClock.now());
        Ok(Attempt::Held { holder, wait })
    }

    /// [`TOKENS_ROW`] for this name.
    fn tokens_row_sql(&self) -> String {
        TOKENS_ROW
            .replace("{tokens}", &self.tokens())
            .replace("{name}", &hex(self.shared.name.as_bytes()))
    }

    /// After a won acquisition (`@leader_exec_won`), the table-wide row's upkeep: its `top`
    /// raised to this holder's TTL, and its server made this one if the row taken was another
    /// server's (`@leader_exec_foreign`). Written only when either changes, so that
    /// acquisitions of different names do not queue on it.
    fn table_row_sql(&self, ttl_ms: i64) -> String {
        format!(
            "UPDATE {tokens} SET top = GREATEST(top, {ttl_ms}),
                     server_id = IF(@leader_exec_foreign > 0, @leader_exec_server, server_id)
                 WHERE name = {TABLE_ROW} AND @leader_exec_won > 0
                   AND (top < {ttl_ms} OR (@leader_exec_foreign > 0
                        AND NOT (server_id <=> @leader_exec_server)))",
            tokens = self.tokens(),
        )
    }

    /// Frees the row if this instance still holds it with `token`: holder NULL, `renewals`
    /// raised, `expires_at` now, and its fence row with it, in one transaction; a row another
    /// instance holds is left alone.
    async fn release_row(&self, token: i64) -> Result<(), StoreError> {
        let s = &self.shared;
        self.query(self.freeing_sql(
            &format!(
                "holder = {} AND token = {token}",
                hex(s.identity.as_bytes())
            ),
            self.held_row().as_bytes(),
            token,
        ))
        .await?;
        Ok(())
    }

    /// One transaction that frees the lease row `name` where `condition` (on its columns) holds,
    /// and clears its fence row if it did (which waits for a job's `LOCK IN SHARE MODE` on it:
    /// the job's transaction commits before the claim it was fenced by is gone); then
    /// `SELECT` whether it did (1) or not (0).
    fn freeing_sql(&self, condition: &str, name: &[u8], token: i64) -> String {
        let name = hex(name);
        format!(
            "START TRANSACTION;
             UPDATE {leases} SET holder = NULL, expires_at = NOW(6), renewals = renewals + 1,
                     server_id = @leader_exec_server
                 WHERE name = {name} AND {condition} AND @@global.read_only = 0;
             SET @leader_exec_freed = ROW_COUNT();
             UPDATE {fences} SET holder = NULL
                 WHERE name = {name} AND token = {token} AND @leader_exec_freed > 0;
             SELECT @leader_exec_freed;
             COMMIT",
            leases = self.leases(),
            fences = self.fences(),
        )
    }

    /// The statement of a renewal (`ttl_ms` this instance's TTL) and of a hold (`ttl_ms` the
    /// hold's bound): the row extended by `ttl_ms` from `NOW(6)`, `ttl_ms` written and
    /// `renewals` raised, where it still holds this identity and `token`. No clock in the
    /// condition: the row is ours while it holds our identity and token, since no waiter takes
    /// a held row over before it has seen it unchanged for a full TTL, and this changes it.
    /// It stamps the row with this server: the row held our identity and token here, so this
    /// server has our acquisition and every later write of the row (a takeover changes the
    /// token). Never on a read-only server (`WRITABLE`; and here too, in the statement itself).
    fn extension_sql(&self, token: i64, ttl_ms: i64) -> String {
        let s = &self.shared;
        format!(
            "UPDATE {} SET expires_at = TIMESTAMPADD(MICROSECOND, {}, NOW(6)), ttl_ms = {ttl_ms},
                 renewals = renewals + 1, server_id = @leader_exec_server
             WHERE name = {} AND holder = {} AND token = {token} AND @@global.read_only = 0",
            self.leases(),
            ttl_ms.saturating_mul(1000),
            hex(self.held_row().as_bytes()),
            hex(s.identity.as_bytes()),
        )
    }

    /// The candidacy this instance campaigns with: the lease row's key, no token yet.
    fn candidacy(&self) -> Candidacy {
        Candidacy {
            lease_id: None,
            key: self.row_key(),
            place: 0,
            token: 0,
        }
    }
}

fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Column `at` of a row, converted; a value of another type is the server's error, not a panic.
fn take<T: mysql_async::prelude::FromValue>(
    row: &mut mysql_async::Row,
    at: usize,
) -> Result<T, StoreError> {
    match row.take_opt::<T, usize>(at) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(StoreError::Fatal(format!(
            "MySQL: column {at} of an answer: {e}"
        ))),
        None => Err(StoreError::Fatal(format!(
            "MySQL: an answer has no column {at}"
        ))),
    }
}

/// The lease row read from the columns [`MySql::row_columns`] put at `at` and after, and its
/// holder's bytes (none for a released row, also for one another server wrote last, which is
/// sighted as held by the empty holder). The row's `holder` is those bytes in hex digits: compared only (the sighting), and
/// written back as they were (`X'…'`) by a takeover conditional on it, whatever the bytes are.
fn lease_row(row: &mut mysql_async::Row, at: usize) -> Result<(Row, Option<Vec<u8>>), StoreError> {
    let holder: Option<Vec<u8>> = take(row, at)?;
    let seen = Row {
        holder: holder.as_deref().map(hex_digits),
        token: take(row, at + 1)?,
        renewals: take(row, at + 2)?,
        expires_us: take(row, at + 3)?,
        ttl_ms: take(row, at + 4)?,
        server: take(row, at + 5)?,
    };
    Ok((seen, holder.filter(|h| !h.is_empty())))
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn prefixes_map_to_table_names() {
        assert_eq!(
            tables("/leader-exec/").unwrap(),
            Tables {
                leases: "leader_exec_leases".into(),
                tokens: "leader_exec_tokens".into(),
                records: "leader_exec_records".into(),
                fences: "leader_exec_fences".into(),
                waiters: "leader_exec_waiters".into(),
            }
        );
        assert_eq!(tables("/Ops.Jobs/").unwrap().leases, "ops_jobs_leases");
        assert_eq!(tables("/").unwrap().leases, "leader_exec_leases");
        assert!(tables(&format!("/{}/", "x".repeat(56))).is_ok());
        assert!(tables(&format!("/{}/", "x".repeat(57))).is_err());
    }

    #[test]
    fn literals_are_hex_and_identifiers_quoted() {
        assert_eq!(hex(b""), "X''");
        assert_eq!(hex(b"a'\\\x00\xff"), "X'61275C00FF'");
        assert_eq!(quote_ident("a`b"), "`a``b`");
    }
}
