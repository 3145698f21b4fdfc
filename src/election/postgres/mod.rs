//! The election on PostgreSQL: one lease row per lease name.
//!
//! Tables (created on first use, `CREATE TABLE IF NOT EXISTS` in one transaction, ordered
//! against concurrent first runs by an advisory lock tried briefly, never waited for, and
//! tried again after a lost catalog race; brought up to date the same way when made by an
//! earlier version), in the first session's `current_schema()` (every table name qualified with
//! it, every session's `search_path` pinned to it; a schema another role owns or may create in
//! is refused, and so are objects there of the prefix's names that another role owns:
//! `look_at_tables`, `refuse_foreign_objects`), named from
//! `--prefix` (`/leader-exec/` gives `leader_exec_leases`, `leader_exec_records`,
//! `leader_exec_tokens`, `leader_exec_guard`, `leader_exec_waiters`; every session is on a
//! primary, never a standby: `check_session`):
//!
//! - `<p>_leases (name text primary key, holder text, token bigint, expires_at timestamptz,
//!   ttl_ms bigint, renewals bigint, max_holders bigint, top_token bigint)`: one row per lease
//!   name (and slot, `slots.rs`). `holder` is the leader's identity, NULL when free; `token` is
//!   taken per acquisition, above both `nextval` of `<p>_tokens` and the name's highest token
//!   (`top_token` on the row `NAME`: see `slots.rs`); `renewals` grows with every acquisition
//!   and renewal; `expires_at` is `now() + ttl` as the server's wall clock says: a hint for
//!   waiters and a display, never what decides a takeover.
//! - `<p>_fence`, a unique index on `<p>_leases (name, holder, token)`: it makes `holder` and
//!   `token` key columns, so that a job's `FOR KEY SHARE` fence holds up whatever changes them
//!   (an acquisition, a takeover, a release) and nothing else (a renewal; another slot's
//!   acquisition, `FOR NO KEY UPDATE` on `NAME`). See `Postgres::fence_index`.
//! - `<p>_tokens`: a sequence the tables do not own (dropping them keeps it), kept above every
//!   token the table holds, so a token never resets: not after a deleted row, a truncated table,
//!   or tables dropped and made again; and the rows outdo it when it is set back.
//! - `<p>_guard()` and its trigger `<p>_guard` on `<p>_leases`: DELETE and TRUNCATE refused.
//! - `<p>_waiters (name, id, identity, renewals, ttl_ms, expires_at)`, key (name, id): the line
//!   of waiters, one row each, `id` from its sequence (its order; never a clock), `renewals`
//!   bumped by its owner every `--retry-period`, `expires_at` for `status` only.
//! - `<p>_records (key text primary key, value bytea, expires_at timestamptz, lease_name text,
//!   lease_token bigint)`: occurrence records (kept until `expires_at`) and the leader's state
//!   for `status` (kept while the lease row holds `lease_token`), written fenced.
//!
//! Acquire: a conditional UPDATE, then for a new name an INSERT … ON CONFLICT DO NOTHING. A
//! released row (holder NULL) is taken at once; a held row only once the taker has itself seen it
//! unchanged — holder, token, renewals and expires_at — for a full TTL on its boot clock, and only
//! by an UPDATE conditional on exactly that: the takeover rule of every row store, with the proof
//! that no wall clock decides it, in [`rows`](super::rows) (`Sighting`). Renew: UPDATE … WHERE
//! name, holder and token match (no clock in the condition), bumping `renewals`; no row, or no
//! table, is a certain loss. Release: holder NULL, expires_at = now(), and in the same statement a
//! NOTIFY to the first waiter in line (and one on the table's channel).
//!
//! Waiters stand in line: each joins with a waiter row; the first few (`LISTENING_PLACES`) LISTEN
//! on a channel of their own (`w<id>_<p>`), from before their first attempt in line (an instance
//! joins the line only once an attempt found the row held) or from when they moved up that far. A
//! release notifies only the first waiter (lowest id), which tries at once; the others sleep on, so
//! a handover costs the same few statements with any number of waiters (measured in
//! `tests/postgres/mod.rs`). Every waiter looks at the line every `--retry-period` (one statement:
//! renews its own row, reads the one just ahead and the lease row). One that has seen the row ahead
//! unchanged for a full TTL on its boot clock deletes it as dead (see [`AheadSighting`]); the first
//! waiter takes a released row it finds, and a crashed holder's row once seen unchanged for a full
//! TTL (see `Sighting`). The line's policy and the wait for a turn are `rows/line.rs`'s
//! ([`line::wait_turn`](super::rows::line::wait_turn)); the statements, LISTEN and NOTIFY are this
//! folder's. A withdrawn waiter deletes its row (and wakes the next one if the lease row is free);
//! a winner's acquisition deletes it. The table's own channel carries `free`/`taken` for `watch`
//! (and waiters of older versions).
//!
//! Every statement runs under `statement_timeout` and `lock_timeout` shorter than
//! `--retry-period` (startup `options`, which pgbouncer drops), and every request under a
//! client-side timer as well. Statements are sent unnamed ([`unnamed`]): nothing is prepared by
//! name, so a pooler in transaction mode (pgbouncer 1.18) can carry every one of them.
//!
//! # SQL
//!
//! Every statement names every operator `OPERATOR(pg_catalog.x)`, every function
//! `pg_catalog.f(…)` and every type that is not an SQL keyword `pg_catalog.t`, and gives every
//! literal a type; `IN`, `NOT IN`, `CASE x WHEN`, `IS DISTINCT FROM` (which look `=` up by name)
//! are not used. Why: PostgreSQL resolves an unqualified operator or function among the
//! overloads of every schema on `search_path`, and takes one whose argument types match exactly
//! over pg_catalog's that needs a coercion, wherever it sits (`bigint * interval`, `text ||
//! integer`, `nextval('…')`, whose unknown literal prefers `nextval(text)`): with pg_catalog
//! first, a role that owns such an overload in a schema on the path still gets its code run by
//! whoever sends the statement (CVE-2018-1058). A qualified name is looked up in pg_catalog
//! alone. The pin of `search_path` to leader-exec's schema does not make this moot: that schema
//! may hold another role's objects (made before `REVOKE CREATE … FROM PUBLIC`), the first
//! statement of a session runs before the pin, and behind a pooler the pin may be lost. The
//! `postgres_hostile` entry of the tests' store list runs every store-independent test where
//! another role owns such overloads of every name these statements use, and fails a test whose
//! statements ran one (`tests/pg_hostile.sql`).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::poll_fn;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, SimpleQueryMessage};

use crate::clock::{BootClock, Clock};

use super::rows::line::{AheadSighting, Line, Look, Waiter, wait_turn};
use super::rows::slots::{clamp_n, lease_of_row};
use super::rows::{Row, Sightings, reader_timing};

mod auth;
mod connect;
mod line;
mod session;
mod slots;
mod start;
mod store;
pub mod target;
mod tls;

use tls::CLEARTEXT_WARNED;
pub use tls::{Verify, rustls_connector};

use super::{
    Ahead, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    Observation, Open, RawRecord, Read, Records, Renewal, StoreError, Turn,
};
pub(crate) mod unnamed;

/// How a PostgreSQL server is reached: the parsed URL, TLS, and the timing its statements get.
#[derive(Clone)]
pub struct Target {
    pub config: Config,
    /// `None`: plain TCP (`sslmode=disable`, or `prefer` without a server that offers TLS).
    pub tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// The server's certificate is checked (`sslmode=verify-ca`/`verify-full`, or `require`
    /// with a CA): only then is the server known to be the one meant.
    pub verified: bool,
    /// `sslmode` as the URL gave it (`prefer` if it did not), for messages.
    pub sslmode: String,
    /// The authentication methods a server may ask for (`auth.rs`).
    pub allowed: auth::Allowed,
    /// The URL with any password removed, for messages.
    pub shown: String,
    /// Whether waiters LISTEN (`leader_exec_listen=off` in the URL: never; they poll).
    pub listen: bool,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("tls", &self.tls.is_some())
            .field("verified", &self.verified)
            .field("allowed", &self.allowed)
            .field("listen", &self.listen)
            .finish()
    }
}

/// The table names `--prefix` maps to ([`rows::table_stem`](super::rows::table_stem), then
/// `_leases` / `_records`). PostgreSQL cuts identifiers at 63 bytes: two prefixes would silently
/// share a table.
pub fn tables(prefix: &str) -> Result<(String, String), StoreError> {
    let stem = super::rows::table_stem(prefix, "PostgreSQL", 63)?;
    Ok((format!("{stem}_leases"), format!("{stem}_records")))
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Sorts tokio-postgres errors into "try again" and "give up".
pub fn classify(error: tokio_postgres::Error) -> StoreError {
    let message = error_text(&error);
    if let Some(code) = error.code() {
        let class = &code.code()[..2];
        let transient = matches!(class, "08" | "40" | "53" | "57" | "58" | "55")
            || *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::DUPLICATE_TABLE
            || *code == SqlState::DUPLICATE_OBJECT;
        return if transient {
            StoreError::Transient(format!("PostgreSQL: {message}"))
        } else {
            StoreError::Fatal(format!("PostgreSQL: {message}"))
        };
    }
    let lower = message.to_lowercase();
    if lower.contains("certificate") || lower.contains("received fatal alert") {
        return StoreError::Fatal(format!("PostgreSQL: TLS: {message}"));
    }
    if lower.contains("does not allow writes") {
        // read-write passed over every host: standbys (or read-only servers). Worth retrying:
        // a failover may be promoting one of them.
        return StoreError::Transient(
            "PostgreSQL: no primary among the hosts (each is a standby or read-only); only a primary is used"
                .into(),
        );
    }
    if lower.contains("server does not support tls") || lower.contains("password missing") {
        return StoreError::Fatal(format!("PostgreSQL: {message}"));
    }
    StoreError::Transient(format!("PostgreSQL unreachable: {message}"))
}

/// [`classify`] for a failed connect, with what a first run needs to fix a credential: where a
/// password goes when the server asks for one and none was given, and which server refused the
/// one given (`shown` holds no password).
fn classify_connect(error: tokio_postgres::Error, shown: &str) -> StoreError {
    let refused = error.code().is_some_and(|code| {
        *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    });
    let missing = error_text(&error).contains("password missing");
    match classify(error) {
        StoreError::Fatal(message) if missing => StoreError::Fatal(format!(
            "{message}: the server at {shown} asks for a password; give it with --password-file FILE, LEADER_EXEC_PASSWORD or PGPASSWORD"
        )),
        StoreError::Fatal(message) if refused => {
            StoreError::Fatal(format!("{message} (server {shown})"))
        }
        other => other,
    }
}

/// The error with its causes, one line.
fn error_text(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.message().to_owned();
    }
    let mut parts = vec![error.to_string()];
    let mut current = std::error::Error::source(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// How many waiters at the front of the line LISTEN; those behind only look every
/// --retry-period, and start listening once they have moved up this far. PostgreSQL wakes every
/// session listening in the database on each NOTIFY, whatever its channel (each checks its own
/// and sleeps again): a line of hundreds that all listened would make each handover wake
/// hundreds of server processes. A few listening places cover a few handovers within one
/// retry period; a faster succession reaches the waiters behind at their next look.
const LISTENING_PLACES: i64 = 4;

/// One attempt to acquire.
enum Attempt {
    Won(i64),
    Held {
        holder: Option<String>,
        /// How long until this waiter may take the row over (see `Sighting`).
        wait: Duration,
    },
    /// Live holders or waiters of the name use another `--max-holders` (theirs): nothing was
    /// taken (see `slots.rs`).
    Mismatch(u32),
}

/// What the listening session has heard about this lease name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Heard {
    /// Releases heard (and listener restarts, after which anything may have been missed).
    free: i64,
    /// Acquisitions heard.
    taken: i64,
    /// The TTL the last acquisition announced.
    taken_ttl_ms: i64,
    /// This process's own probes heard back (the check that notifications arrive).
    probes: i64,
}

/// What a listening session's driver reports to, and the probe it recognises as its own.
struct Ears {
    heard: watch::Sender<Heard>,
    name: String,
    probe: String,
}

struct Listening {
    client: Client,
    /// The one channel it LISTENs on: this waiter's own, or the table's (`watch`); none yet for
    /// a waiter behind the listening places.
    channel: Option<String>,
}

struct Shared {
    target: Target,
    leases: String,
    records: String,
    /// The NOTIFY channel: the leases table's name.
    channel: String,
    name: String,
    identity: String,
    ttl_ms: i64,
    /// Each request's own timer (besides the server's statement_timeout).
    request_timeout: Duration,
    /// `--connect-timeout`: what a first run's wait for a lock is held within.
    connect_timeout: Duration,
    /// The waiters table, `<p>_waiters`, and the text its waiters' channels end with.
    waiters: String,
    base: String,
    /// This candidacy's waiter row id (from the token sequence), 0 while it has none.
    waiter: AtomicI64,
    /// Whether this waiter stands behind the listening places (it does not LISTEN yet).
    far_back: AtomicBool,
    /// The waiter row just ahead of this one as last seen, and since when (see [`AheadSighting`]).
    line: Line,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    listener: tokio::sync::Mutex<Option<Listening>>,
    heard: watch::Sender<Heard>,
    /// Whether waiters listen: off by `leader_exec_listen=off`, or when the probe sent after
    /// the first LISTEN never came back (pgbouncer in transaction mode). Without it they poll.
    listening: AtomicBool,
    /// Whether the probe has been made (once per process).
    probed: AtomicBool,
    /// The payload of this process's probe (`probe`, the identity and the pid).
    probe: String,
    /// How often a waiter that does not listen reads the row.
    poll: Duration,
    /// The token this instance holds, 0 while it holds none (shared with its keeper).
    held: AtomicI64,
    /// A token the campaign's first session won in the round trip of its checks
    /// (`Postgres::check_and_try`), for the candidacy's first `check_turn`; 0: none.
    early: AtomicI64,
    schema_ready: Mutex<bool>,
    /// A start without any check (no session check, no look at the tables, no read-write
    /// round trip): the floor the checks are measured against. Only in a build with the
    /// `bench-unchecked` feature, and only under LEADER_EXEC_BENCH_UNCHECKED (docs/development.md).
    unchecked: bool,
    /// Whether the session check also asks `transaction_read_only` (one host: libpq's
    /// read-write round trip is folded into it).
    read_write_in_check: bool,
    /// The schema of the tables: the first session's `current_schema()`, kept for every later
    /// session of this process (each pins its `search_path` to it, and the table names are
    /// qualified with it once it is known).
    schema: OnceLock<String>,
    /// The token sequence, the guard function and its trigger: `<p>_tokens`, `<p>_guard`.
    tokens: String,
    guard: String,
    /// The held row (with `--max-holders` above 1, each held slot row) as this waiter last saw
    /// it, and since when (see `Sighting`); this instance's own TTL is the least it waits.
    sightings: Sightings,
    /// `--max-holders` (1 for a reader, which holds nothing).
    max_holders: u32,
    /// The row this instance holds (with `--max-holders` above 1 a slot row, `NAME/k`; the
    /// lease row `NAME` otherwise), valid while `held` is not 0: what its renewals, fenced
    /// writes and release name.
    held_row: Mutex<String>,
}

/// The columns `Row` is read from, in its order.
const ROW_COLUMNS: &str = "holder, token, renewals,
    (EXTRACT(EPOCH FROM expires_at) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.int8,
    ttl_ms";

/// Milliseconds until `expires_at` on the server's clock, never below 0: SQL (a `bigint`).
const LEFT_MS: &str = "GREATEST(0::pg_catalog.numeric,
    pg_catalog.ceil(EXTRACT(EPOCH FROM (expires_at OPERATOR(pg_catalog.-) pg_catalog.now()))
        OPERATOR(pg_catalog.*) 1000::pg_catalog.numeric))::pg_catalog.int8";

/// The text a release's NOTIFY payload starts with (`free` and a newline): SQL.
const FREE: &str = "('free'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.chr(10))";

/// An acquisition's NOTIFY payload (`taken`, the TTL `$3`, the row `$1`, each on a line): SQL.
const TAKEN: &str = "('taken'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.chr(10)
    OPERATOR(pg_catalog.||) $3::pg_catalog.int8::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.chr(10)
    OPERATOR(pg_catalog.||) $1)";

/// `now()` plus the milliseconds the `bigint` expression `ms` says: SQL.
fn expiry_sql(ms: &str) -> String {
    format!(
        "(pg_catalog.now() OPERATOR(pg_catalog.+)
            ({ms}::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval))"
    )
}

/// The lease row read from the columns [`ROW_COLUMNS`] put at `at` and after.
fn lease_row(row: &tokio_postgres::Row, at: usize) -> Row {
    Row {
        holder: row.get(at),
        token: row.get(at + 1),
        renewals: row.get(at + 2),
        expires_us: row.get(at + 3),
        ttl_ms: row.get(at + 4),
        // One server answers for a PostgreSQL URL's rows (docs/postgresql.md, "Failover").
        server: 0,
    }
}

/// An election on PostgreSQL, for one lease name.
#[derive(Clone)]
pub struct Postgres {
    shared: Arc<Shared>,
}

impl Postgres {
    /// A candidate of `open.scope`'s election. Its statements get `statement_timeout` and
    /// `lock_timeout` below `--retry-period`.
    pub fn new(mut target: Target, open: Open) -> Result<Postgres, StoreError> {
        let (leases, records) = tables(&open.scope.prefix)?;
        let (name, identity, timing) = (open.scope.lease, open.identity, open.timing);
        let base = leases.strip_suffix("_leases").unwrap_or(&leases).to_owned();
        let (tokens, guard) = (format!("{base}_tokens"), format!("{base}_guard"));
        let statement = (timing.retry_period * 3 / 4).max(Duration::from_millis(50));
        let lock = (timing.retry_period / 2).max(Duration::from_millis(20));
        let mut options = target.config.get_options().unwrap_or_default().to_owned();
        if !options.is_empty() {
            options.push(' ');
        }
        options.push_str(&format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            statement.as_millis(),
            lock.as_millis(),
            (timing.retry_period * 4).as_millis().max(1000)
        ));
        target.config.options(options);
        target
            .config
            .connect_timeout(open.connect_timeout.min(Duration::from_secs(3)));
        if target.config.get_application_name().is_none() {
            target.config.application_name("leader-exec");
        }
        #[cfg(feature = "bench-unchecked")]
        let unchecked = std::env::var_os("LEADER_EXEC_BENCH_UNCHECKED").is_some();
        #[cfg(not(feature = "bench-unchecked"))]
        let unchecked = false;
        // Never a standby: it answers from the past (a deposed leader's row, a stale token).
        // libpq's read-write: each host of the URL in turn, the first that accepts writes;
        // `open` checks pg_is_in_recovery() as well. target.rs refuses a URL asking otherwise.
        // With one host there is no other to pass on to: its answer to read-write
        // (`SHOW transaction_read_only`, a round trip of its own after the connection) rides
        // in the session check's statement instead, which refuses a read-only server the same
        // way (a transient error: a failover may make it writable), before anything is written.
        // One host is one address: an IP address or a Unix socket, not a name (a name may
        // resolve to several servers, which read-write tries in turn).
        let config = &target.config;
        let one_address = match (config.get_hostaddrs(), config.get_hosts()) {
            ([_], _) => true,
            ([], [Host::Unix(_)]) => true,
            ([], [Host::Tcp(host)]) => host.parse::<std::net::IpAddr>().is_ok(),
            _ => false,
        };
        let read_write_in_check = !unchecked && one_address && config.get_ports().len() <= 1;
        if !read_write_in_check && !unchecked {
            target
                .config
                .target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        let (heard, _) = watch::channel(Heard::default());
        let probe = format!("probe\n{}\n{}", identity, std::process::id());
        let listen = target.listen;
        Ok(Postgres {
            shared: Arc::new(Shared {
                target,
                channel: leases.clone(),
                leases,
                records,
                name: name.clone(),
                identity,
                ttl_ms: i64::try_from(timing.ttl.as_millis()).unwrap_or(i64::MAX),
                request_timeout: timing.retry_period.max(Duration::from_millis(100)),
                connect_timeout: open.connect_timeout,
                waiters: format!("{base}_waiters"),
                base,
                waiter: AtomicI64::new(0),
                far_back: AtomicBool::new(false),
                line: Line::new(timing.ttl),
                client: tokio::sync::Mutex::new(None),
                listener: tokio::sync::Mutex::new(None),
                heard,
                listening: AtomicBool::new(listen),
                probed: AtomicBool::new(false),
                probe,
                poll: timing.retry_period.max(Duration::from_millis(100)),
                held: AtomicI64::new(0),
                early: AtomicI64::new(0),
                schema_ready: Mutex::new(unchecked),
                unchecked,
                read_write_in_check,
                schema: OnceLock::new(),
                tokens,
                guard,
                sightings: Sightings::new(timing.ttl),
                held_row: Mutex::new(name),
                max_holders: open.max_holders,
            }),
        })
    }

    /// PostgreSQL for reading and administration (`status`, `watch`, `check`, `resign`): its
    /// statements are bounded by the connect timeout ([`reader_timing`]). It holds no lease: it
    /// never joins the line, acquires or renews the row (the only statements that write or
    /// compare a lease duration), so it has none.
    pub fn reader(target: Target, open: Open) -> Result<Postgres, StoreError> {
        let timing = reader_timing(open.connect_timeout);
        Postgres::new(target, open.for_reader(timing))
    }

    /// The row as `LEADER_KEY` and `status` show it: `TABLE/NAME`.
    fn row_key(&self) -> String {
        format!("{}/{}", self.shared.leases, self.shared.name)
    }

    /// The name of the row this instance holds (`NAME`, or a slot row `NAME/k`).
    fn held_row(&self) -> String {
        self.shared.held_row.lock().expect("not poisoned").clone()
    }

    /// The row a holder's key (`TABLE/ROW`, as `status` shows it) names, if it is one of
    /// this lease name's rows (`NAME` or a slot row `NAME/k`).
    fn row_of(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let row = key.strip_prefix(&format!("{}/", self.shared.leases))?;
        (lease_of_row(row) == self.shared.name).then(|| row.to_owned())
    }
}

impl Postgres {
    fn leases(&self) -> String {
        self.qualified(&self.shared.leases)
    }

    fn records(&self) -> String {
        self.qualified(&self.shared.records)
    }

    /// `"schema"."name"` once the first session has said which schema; before that (only in a
    /// statement built before its session was opened) the bare name, which resolves to the
    /// same table: the session that runs it has pinned `search_path` to that one schema, and
    /// `ensure_schema` has made or found the table there before any statement uses it.
    fn qualified(&self, name: &str) -> String {
        match self.shared.schema.get() {
            Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(name)),
            None => quote_ident(name),
        }
    }
}

/// SQL for the channel of the waiter row whose id is `id` (an expression): [`Postgres::waiter_channel`].
fn waiter_channel_sql(id: &str, base: &str) -> String {
    format!(
        "pg_catalog.left('w'::pg_catalog.text OPERATOR(pg_catalog.||) ({id})::pg_catalog.text
             OPERATOR(pg_catalog.||) '_'::pg_catalog.text OPERATOR(pg_catalog.||) {}, 63)",
        text_literal(base)
    )
}

fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A string as a literal of type `pg_catalog.text` (see [`SQL`](self#sql)).
fn text_literal(text: &str) -> String {
    format!("{}::pg_catalog.text", quote_literal(text))
}

/// A number as a literal of type `pg_catalog.int8` (quoted: a minus sign would be an operator).
fn int8(n: i64) -> String {
    format!("'{n}'::pg_catalog.int8")
}

/// Drives a session; with `heard`, counts the releases and acquisitions of one lease name.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>, ears: Option<Ears>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                let Some(Ears { heard, name, probe }) = &ears else {
                    continue;
                };
                if n.payload() == probe {
                    heard.send_modify(|h| h.probes += 1);
                    continue;
                }
                let mut parts = n.payload().splitn(3, '\n');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("free"), Some(n), None) if n == name => {
                        heard.send_modify(|h| h.free += 1);
                    }
                    (Some("taken"), Some(ttl), Some(n)) if n == name => {
                        let ttl = ttl.parse().unwrap_or(0);
                        heard.send_modify(|h| {
                            h.taken += 1;
                            h.taken_ttl_ms = ttl;
                        });
                    }
                    _ => {}
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "PostgreSQL session ended");
                break;
            }
            None => break,
        }
    }
    // Whatever was announced while nobody listened is unknown: wake the waiters.
    if let Some(Ears { heard, .. }) = ears {
        heard.send_modify(|h| h.free += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_bounds_hold_every_name_with_the_prefix_and_no_other() {
        let (low, high) = session::name_bounds("leader_exec_");
        let high = high.expect("an ASCII last byte is raised");
        assert_eq!(
            (low.as_str(), high.as_str()),
            ("leader_exec_", "leader_exec`")
        );
        // Byte order, as `name` compares: in for every name with the prefix, out for others.
        let inside =
            |name: &str| name.as_bytes() >= low.as_bytes() && name.as_bytes() < high.as_bytes();
        for name in [
            "leader_exec_",
            "leader_exec_leases",
            "leader_exec_\u{7f}",
            "leader_exec_é",
        ] {
            assert!(inside(name), "{name}");
        }
        for name in [
            "leader_exec",
            "leader_exea_x",
            "leader_exec`",
            "leader_exec~",
            "leader_exe",
        ] {
            assert!(!inside(name), "{name}");
        }
        // A last byte that cannot be raised into valid text: no upper bound.
        assert_eq!(session::name_bounds("jobs_é").1, None);
        assert_eq!(session::name_bounds("").1, None);
    }

    #[test]
    fn prefixes_map_to_table_names() {
        assert_eq!(
            tables("/leader-exec/").unwrap(),
            ("leader_exec_leases".into(), "leader_exec_records".into())
        );
        assert_eq!(
            tables("/Ops.Jobs/").unwrap(),
            ("ops_jobs_leases".into(), "ops_jobs_records".into())
        );
        assert_eq!(tables("/").unwrap().0, "leader_exec_leases");
        assert!(tables(&format!("/{}/", "x".repeat(56))).is_err());
    }

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
