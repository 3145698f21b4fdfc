//! The election on PostgreSQL: one lease row per lease name.
//!
//! Tables (created on first use, `CREATE TABLE IF NOT EXISTS` under a transaction-scoped
//! advisory lock so that concurrent first runs do not race in the catalog; brought up to date
//! under the same lock when made by an earlier version), in the first session's
//! `current_schema()` (every name qualified with it, every session's `search_path` pinned to it;
//! objects there that another role owns are refused, `refuse_foreign_objects`), named from
//! `--prefix` (`/leader-exec/` gives `leader_exec_leases`, `leader_exec_records`,
//! `leader_exec_tokens`, `leader_exec_guard`, `leader_exec_waiters`; every session is on a
//! primary, never a standby: `check_session`):
//!
//! - `<p>_leases (name text primary key, holder text, token bigint, expires_at timestamptz,
//!   ttl_ms bigint, renewals bigint)`: one row per lease name. `holder` is the leader's
//!   identity, NULL when free; `token` is taken from `<p>_tokens` per acquisition; `renewals`
//!   grows with every acquisition and renewal; `expires_at` is `now() + ttl` as the server's
//!   wall clock says: a hint for waiters and a display, never what decides a takeover.
//! - `<p>_tokens`: a sequence the tables do not own (dropping them keeps it), kept above every
//!   token the table holds, so a token never resets: not after a deleted row, a truncated table,
//!   or tables dropped and made again.
//! - `<p>_guard()` and its trigger `<p>_guard` on `<p>_leases`: DELETE and TRUNCATE refused.
//! - `<p>_waiters (name, id, identity, renewals, ttl_ms, expires_at)`, key (name, id): the line
//!   of waiters, one row each, `id` from its sequence (its order; never a clock), `renewals`
//!   bumped by its owner every `--retry-period`, `expires_at` for `status` only.
//! - `<p>_records (key text primary key, value bytea, expires_at timestamptz, lease_name text,
//!   lease_token bigint)`: occurrence records (kept until `expires_at`) and the leader's state
//!   for `status` (kept while the lease row holds `lease_token`), written fenced.
//!
//! Acquire: a conditional UPDATE, then for a new name an INSERT … ON CONFLICT DO NOTHING. A
//! released row (holder NULL) is taken at once; a held row only once the taker has itself seen
//! it unchanged — holder, token, renewals and expires_at — for a full TTL on its boot clock, and
//! only by an UPDATE conditional on exactly that (see [`Sighting`]). Renew: UPDATE … WHERE name,
//! holder and token match (no clock in the condition), bumping `renewals`; no row, or no table,
//! is a certain loss. Release: holder NULL, expires_at = now(), and in the same statement a
//! NOTIFY to the first waiter in line (and one on the table's channel).
//!
//! Waiters stand in line: each joins with a waiter row; the first few (`LISTENING_PLACES`) LISTEN
//! on a channel of their own (`w<id>_<p>`), from before their first attempt or from when they
//! moved up that far. A release notifies only the first waiter (lowest id), which tries at once;
//! the others sleep on, so a handover costs the same few statements with any
//! number of waiters (measured in `tests/postgres_only.rs`). Every waiter looks at the line every
//! `--retry-period` (one statement: renews its own row, reads the one just ahead and the lease
//! row). One that has seen the row ahead unchanged for a full TTL on its boot clock deletes it as
//! dead (see [`AheadSighting`]); the first waiter takes a released row it finds, and a crashed
//! holder's row once seen unchanged for a full TTL (see [`Sighting`]). A withdrawn waiter deletes
//! its row (and wakes the next one if the lease row is free); a winner's acquisition deletes it.
//! The table's own channel carries `free`/`taken` for `watch` (and waiters of older versions).
//!
//! Every statement runs under `statement_timeout` and `lock_timeout` shorter than
//! `--retry-period` (startup `options`, which pgbouncer drops), and every request under a
//! client-side timer as well. Statements are sent unnamed ([`unnamed`]): nothing is prepared by
//! name, so a pooler in transaction mode (pgbouncer 1.18) can carry every one of them.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::poll_fn;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, SimpleQueryMessage, Socket};

use crate::clock::{BootClock, Clock};

pub mod target;

use super::{
    Ahead, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    Observation, RawRecord, Read, Records, Renewal, StoreError, Turn,
};

/// How every statement with parameters is sent: unnamed (Parse, Bind, Describe, Execute, Sync
/// in one message, `query_typed`), never prepared by name. A pooler in transaction mode
/// (pgbouncer before 1.21) hands each transaction any server connection: a named statement
/// prepared on one is missing on the next, or collides with another client's of the same name
/// (`prepared statement "s1" already exists`, and the pool stays poisoned). An unnamed one lives
/// only until the next Parse on the same connection, all inside one Sync. It also saves the
/// round trip of a separate prepare. Statements without parameters may use the simple-query
/// protocol (`simple_query`, `batch_execute`), which binds nothing either.
///
/// Use `unnamed::query(&client, sql, &[&a, &b])` and its siblings wherever `client.query`
/// would be used; each parameter says its own PostgreSQL type ([`unnamed::Param`]).
pub(crate) mod unnamed {
    use tokio_postgres::types::{ToSql, Type};
    use tokio_postgres::{Client, Error, Row};

    /// A statement parameter and the type it is sent as (the server infers none: the type of
    /// every parameter of an unnamed statement sent in one go is given).
    pub trait Param: ToSql + Sync {
        fn pg_type(&self) -> Type;
    }

    macro_rules! param {
        ($($rust:ty => $pg:ident),* $(,)?) => {
            $(
                impl Param for $rust {
                    fn pg_type(&self) -> Type {
                        Type::$pg
                    }
                }
                impl Param for Option<$rust> {
                    fn pg_type(&self) -> Type {
                        Type::$pg
                    }
                }
            )*
        };
    }
    param!(String => TEXT, &str => TEXT, i64 => INT8, Vec<u8> => BYTEA, bool => BOOL);

    fn typed<'a>(params: &'a [&'a dyn Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
        params.iter().map(|p| (*p as _, p.pg_type())).collect()
    }

    pub async fn query(
        client: &Client,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Vec<Row>, Error> {
        client.query_typed(sql, &typed(params)).await
    }

    pub async fn query_opt(
        client: &Client,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Option<Row>, Error> {
        client.query_typed_opt(sql, &typed(params)).await
    }

    pub async fn query_one(
        client: &Client,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Row, Error> {
        client.query_typed_one(sql, &typed(params)).await
    }

    /// The number of rows the statement wrote.
    pub async fn execute(client: &Client, sql: &str, params: &[&dyn Param]) -> Result<u64, Error> {
        client.execute_typed(sql, &typed(params)).await
    }
}

/// How a PostgreSQL server is reached: the parsed URL, TLS, and the timing its statements get.
#[derive(Clone)]
pub struct Target {
    pub config: Config,
    /// `None`: plain TCP (`sslmode=disable`, or `prefer` without a server that offers TLS).
    pub tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
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
            .field("listen", &self.listen)
            .finish()
    }
}

/// The table names `--prefix` maps to: its text between the slashes, every character other than
/// ASCII letters, digits and `_` replaced by `_`, lower-cased, then `_leases` / `_records`.
pub fn tables(prefix: &str) -> Result<(String, String), StoreError> {
    let base: String = prefix
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let base = if base.is_empty() {
        "leader_exec".to_owned()
    } else {
        base
    };
    // PostgreSQL cuts identifiers at 63 bytes: two prefixes would silently share a table.
    if base.len() + "_records".len() > 63 {
        return Err(StoreError::Fatal(format!(
            "--prefix {prefix}: too long for a PostgreSQL table name (at most 55 characters)"
        )));
    }
    Ok((format!("{base}_leases"), format!("{base}_records")))
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
        /// How long until this waiter may take the row over (see [`Sighting`]).
        wait: Duration,
    },
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
    /// The waiters table, `<p>_waiters`, and the text its waiters' channels end with.
    waiters: String,
    base: String,
    /// This candidacy's waiter row id (from the token sequence), 0 while it has none.
    waiter: AtomicI64,
    /// Whether this waiter stands behind the listening places (it does not LISTEN yet).
    far_back: AtomicBool,
    /// The waiter row just ahead of this one as last seen, and since when (see [`AheadSighting`]).
    ahead: Mutex<Option<(AheadSighting, Duration)>>,
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
    schema_ready: Mutex<bool>,
    /// The schema of the tables: the first session's `current_schema()`, kept for every later
    /// session of this process (each pins its `search_path` to it, and the table names are
    /// qualified with it once it is known).
    schema: OnceLock<String>,
    /// The token sequence, the guard function and its trigger: `<p>_tokens`, `<p>_guard`.
    tokens: String,
    guard: String,
    /// This instance's own TTL: a taker waits at least this long (and at least the holder's).
    ttl: Duration,
    /// The held row as this waiter last saw it, and since when (see [`Sighting`]).
    sighting: Mutex<Option<(Sighting, Duration)>>,
}

/// An unreleased lease row as a waiter saw it. The row is taken over only when the taker has
/// seen exactly this for a full TTL on its own boot clock, and only by an UPDATE conditional on
/// exactly this: the server's wall clock (`expires_at <= now()`) decides nothing, so a step of
/// it can neither hand the row to a waiter nor take it from its leader.
///
/// Why that is safe: every successful renewal bumps `renewals`, and each acquisition takes a
/// new, greater `token`; neither ever goes back, so a row that shows the same sighting at two
/// instants showed it all along in between. The holder's last renewal that wrote this sighting
/// was sent before the server ran our read, so before we had its answer: counting the TTL from
/// the arrival of that answer (the conservative instant, later than our send instant by one
/// round trip) counts from after the holder's send instant. The holder stops its command within
/// `--renew-deadline` + `--kill-after` < TTL of that send instant unless a later renewal
/// succeeded, and a later renewal changes the sighting, which defeats our conditional UPDATE.
/// `expires_at` is part of the sighting so that a renewal by an older leader-exec (which does not
/// bump `renewals`) also counts as a change.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sighting {
    holder: String,
    token: i64,
    renewals: i64,
    /// `expires_at` in microseconds since the epoch (compared, never used as a time).
    expires_us: i64,
    /// The TTL the holder wrote (its own): the taker waits the longer of it and its own.
    ttl: Duration,
}

/// The waiter row just ahead of this waiter's, as this waiter saw it. Seen unchanged for a full
/// TTL on this waiter's boot clock (its owner bumps `renewals` every --retry-period), it is dead:
/// this waiter deletes it (only if still exactly that) and moves up. Waiter rows decide only the
/// order of attempts, never who may take the lease row: a live waiter wrongly skipped (paused for
/// a TTL) loses its place, not safety, and joins again at the back at its next look.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AheadSighting {
    id: i64,
    renewals: i64,
    /// The longer of its owner's TTL and this waiter's.
    ttl: Duration,
}

/// The lease row as a waiter reads it.
struct Row {
    holder: Option<String>,
    token: i64,
    renewals: i64,
    expires_us: i64,
    ttl_ms: i64,
}

/// The columns `Row` is read from, in its order.
const ROW_COLUMNS: &str = "holder, token, renewals,
    (EXTRACT(EPOCH FROM expires_at) * 1000000)::bigint, ttl_ms";

impl Row {
    fn from(row: &tokio_postgres::Row, at: usize) -> Row {
        Row {
            holder: row.get(at),
            token: row.get(at + 1),
            renewals: row.get(at + 2),
            expires_us: row.get(at + 3),
            ttl_ms: row.get(at + 4),
        }
    }
}

/// An election on PostgreSQL, for one lease name.
#[derive(Clone)]
pub struct Postgres {
    shared: Arc<Shared>,
}

/// Timing for the statements: `statement_timeout` and `lock_timeout` below `--retry-period`.
#[derive(Clone, Copy, Debug)]
pub struct PgTiming {
    pub ttl: Duration,
    pub retry_period: Duration,
    pub connect_timeout: Duration,
}

impl Postgres {
    pub fn new(
        mut target: Target,
        prefix: &str,
        name: &str,
        identity: String,
        timing: PgTiming,
    ) -> Result<Postgres, StoreError> {
        let (leases, records) = tables(prefix)?;
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
            .connect_timeout(timing.connect_timeout.min(Duration::from_secs(3)));
        if target.config.get_application_name().is_none() {
            target.config.application_name("leader-exec");
        }
        // Never a standby: it answers from the past (a deposed leader's row, a stale token).
        // libpq's read-write: each host of the URL in turn, the first that accepts writes;
        // `open` checks pg_is_in_recovery() as well. target.rs refuses a URL asking otherwise.
        target
            .config
            .target_session_attrs(TargetSessionAttrs::ReadWrite);
        let (heard, _) = watch::channel(Heard::default());
        let probe = format!("probe\n{}\n{}", identity, std::process::id());
        let listen = target.listen;
        Ok(Postgres {
            shared: Arc::new(Shared {
                target,
                channel: leases.clone(),
                leases,
                records,
                name: name.to_owned(),
                identity,
                ttl_ms: i64::try_from(timing.ttl.as_millis()).unwrap_or(i64::MAX),
                request_timeout: timing.retry_period.max(Duration::from_millis(100)),
                waiters: format!("{base}_waiters"),
                base,
                waiter: AtomicI64::new(0),
                far_back: AtomicBool::new(false),
                ahead: Mutex::new(None),
                client: tokio::sync::Mutex::new(None),
                listener: tokio::sync::Mutex::new(None),
                heard,
                listening: AtomicBool::new(listen),
                probed: AtomicBool::new(false),
                probe,
                poll: timing.retry_period.max(Duration::from_millis(100)),
                held: AtomicI64::new(0),
                schema_ready: Mutex::new(false),
                schema: OnceLock::new(),
                tokens,
                guard,
                ttl: timing.ttl,
                sighting: Mutex::new(None),
            }),
        })
    }

    /// PostgreSQL for reading and administration (`status`, `watch`, `check`, `resign`): its
    /// statements are bounded by the connect timeout (at most 2 s each). It never joins the
    /// line, so the lease duration it is built with is never written or compared anywhere.
    pub fn reader(
        target: Target,
        prefix: &str,
        name: &str,
        connect_timeout: Duration,
    ) -> Result<Postgres, StoreError> {
        let timing = PgTiming {
            ttl: Duration::from_secs(15),
            retry_period: connect_timeout.min(Duration::from_secs(2)),
            connect_timeout,
        };
        Postgres::new(target, prefix, name, String::new(), timing)
    }

    /// The row as `LEADER_KEY` and `status` show it: `TABLE/NAME`.
    fn row_key(&self) -> String {
        format!("{}/{}", self.shared.leases, self.shared.name)
    }

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

    /// Opens a session; notifications (when `heard` is given) go to the waiters.
    async fn open(&self, listen: bool) -> Result<Client, StoreError> {
        let (client, encrypted) = self.open_unchecked(listen).await?;
        self.checked(&client, encrypted).await?;
        Ok(client)
    }

    /// [`check_session`](Self::check_session) under the same bound as a connect.
    async fn checked(&self, client: &Client, encrypted: bool) -> Result<(), StoreError> {
        let limit = self.shared.request_timeout * 4 + Duration::from_secs(1);
        match tokio::time::timeout(limit, self.check_session(client, encrypted)).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Transient(format!(
                "PostgreSQL at {} did not answer",
                self.shared.target.shown
            ))),
        }
    }

    /// Connects, and says whether the session got TLS; the session is not checked yet.
    async fn open_unchecked(&self, listen: bool) -> Result<(Client, bool), StoreError> {
        let shared = &self.shared;
        let heard = listen.then(|| Ears {
            heard: shared.heard.clone(),
            name: shared.name.clone(),
            probe: shared.probe.clone(),
        });
        let attempt = async {
            let (client, encrypted) = match &shared.target.tls {
                None => {
                    let (client, connection) = shared
                        .target
                        .config
                        .connect(tokio_postgres::NoTls)
                        .await
                        .map_err(|e| classify_connect(e, &shared.target.shown))?;
                    tokio::spawn(drive(connection, heard));
                    (client, false)
                }
                Some(tls) => {
                    let noted = Noted {
                        inner: tls.clone(),
                        encrypted: Arc::new(AtomicBool::new(false)),
                    };
                    let encrypted = noted.encrypted.clone();
                    let (client, connection) = shared
                        .target
                        .config
                        .connect(noted)
                        .await
                        .map_err(|e| classify_connect(e, &shared.target.shown))?;
                    tokio::spawn(drive(connection, heard));
                    (client, encrypted.load(Ordering::SeqCst))
                }
            };
            Ok((client, encrypted))
        };
        let limit = shared.request_timeout * 4 + Duration::from_secs(1);
        match tokio::time::timeout(limit, attempt).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Transient(format!(
                "PostgreSQL at {} did not answer",
                shared.target.shown
            ))),
        }
    }

    /// The shared session, opened (and the tables made) when needed.
    async fn client(&self) -> Result<Arc<Client>, StoreError> {
        let mut slot = self.shared.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        *slot = None;
        let client = Arc::new(self.open(false).await?);
        self.ensure_schema(&client).await?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs one request on the shared session under the request timer; a session that timed
    /// out or failed is dropped, so that no later request queues behind a lost one.
    async fn request<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let client = self.client().await?;
        let outcome = tokio::time::timeout(self.shared.request_timeout, f(client.clone())).await;
        let result = match outcome {
            Ok(Ok(value)) => return Ok(value),
            // The tables (or the token sequence) were dropped under us: make them again on the
            // next request. The sequence, if it survived, keeps tokens growing.
            Ok(Err(e)) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                *self.shared.schema_ready.lock().expect("not poisoned") = false;
                StoreError::Transient(format!("PostgreSQL: {}", error_text(&e)))
            }
            Ok(Err(e)) => classify(e),
            Err(_) => StoreError::Transient("PostgreSQL did not answer in time".into()),
        };
        if result.is_transient() {
            let mut slot = self.shared.client.lock().await;
            if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                *slot = None;
            }
        }
        Err(result)
    }

    /// What every new session is checked for before it is used: a primary, with `search_path`
    /// pinned to leader-exec's schema; and, once per process, a warning when a password goes
    /// out without TLS.
    async fn check_session(&self, client: &Client, encrypted: bool) -> Result<(), StoreError> {
        let shared = &self.shared;
        // One round trip (the simple-query protocol runs both statements in order): whether
        // this is a primary, the first schema of search_path, where tables of this prefix are
        // found through it (read before the second statement pins search_path), and the pin:
        // to the schema this process already uses, or (first session) to that first schema.
        // A session that fails a check below is dropped, its pin with it.
        let pin = match shared.schema.get() {
            Some(schema) => format!("SET search_path = {}", quote_ident(schema)),
            None => "SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident(s), false)
                     FROM (SELECT pg_catalog.current_schema()::text AS s) AS first
                     WHERE s IS NOT NULL"
                .to_owned(),
        };
        let messages = client
            .simple_query(&format!(
                "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_schema()::text,
                        (SELECT n.nspname::text FROM pg_catalog.pg_class c
                         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                         WHERE c.oid = pg_catalog.to_regclass({table}));
                 {pin}",
                table = quote_literal(&quote_ident(&shared.leases)),
            ))
            .await
            .map_err(classify)?;
        let Some(row) = messages.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        }) else {
            return Err(StoreError::Transient(
                "PostgreSQL: no answer to pg_is_in_recovery()".into(),
            ));
        };
        // read-write (in `new`) already passed over every standby: `transaction_read_only` is
        // on there. This is the check for what that misses (a pooler in front of a standby
        // that reports otherwise). A session found on a primary stays on one: a server goes
        // into recovery only by being restarted as a standby (PostgreSQL has no demotion of a
        // running primary), and that restart ends every session; a standby promoted under a
        // session only turns it into a session on a primary. Behind a pooler in transaction
        // mode the server may change under a session: every write there is refused by a
        // standby (read-only), so only reads could be stale (docs/postgresql.md).
        if row.get(0) != Some("f") {
            return Err(StoreError::Transient(format!(
                "PostgreSQL at {}: the server is in recovery (a standby); only a primary is used",
                shared.target.shown
            )));
        }
        match shared.schema.get() {
            Some(_) => {}
            None => {
                let current = row.get(1).ok_or_else(|| {
                    StoreError::Fatal(
                        "PostgreSQL: no schema to use: no schema named in search_path exists \
                         (ALTER ROLE … SET search_path = a schema the role owns)"
                            .into(),
                    )
                })?;
                // Tables an earlier version found further down search_path (a schema made
                // ahead of theirs since) would be made again here, their tokens from 1: never.
                if let Some(found) = row.get(2).filter(|found| *found != current) {
                    use crate::escape::escape_str;
                    return Err(StoreError::Fatal(format!(
                        "PostgreSQL: {table} is in schema {found}, but the first schema of \
                         search_path is {current}, where leader-exec would make new tables (tokens \
                         from 1 again): put {found} first in search_path \
                         (?options=-csearch_path%3D{found}) or move the tables",
                        table = escape_str(&shared.leases),
                        found = escape_str(found),
                        current = escape_str(current),
                    )));
                }
                shared.schema.get_or_init(|| current.to_owned());
            }
        }
        // Names resolved through search_path (the pin above): only this schema, and pg_catalog
        // (implicitly first, so a built-in function always beats one of the same name
        // elsewhere). Table names are qualified as well (`qualified`): a pooler in transaction
        // mode does not keep a session's SET.
        let config = &shared.target.config;
        let on_network = !config.get_hostaddrs().is_empty()
            || config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)));
        if !encrypted
            && on_network
            && shared.target.config.get_password().is_some()
            && !CLEARTEXT_WARNED.swap(true, Ordering::SeqCst)
        {
            tracing::warn!(
                event = "cleartext-password",
                "the PostgreSQL password is sent without TLS to {} (sslmode=disable, or prefer \
                 and the server offers no TLS); use sslmode=require or verify-full",
                shared.target.shown
            );
        }
        Ok(())
    }

    async fn ensure_schema(&self, client: &Client) -> Result<(), StoreError> {
        if *self.shared.schema_ready.lock().expect("not poisoned") {
            return Ok(());
        }
        let leases = self.leases();
        let records = self.records();
        let tokens = self.qualified(&self.shared.tokens);
        let waiters = self.qualified(&self.shared.waiters);
        // A trigger's name is not schema-qualified; its function's is.
        let guard = quote_ident(&self.shared.guard);
        let guard_fn = self.qualified(&self.shared.guard);
        // Everything the current layout needs, so that tables made by an earlier version are
        // brought up to date (the `renewals` column, the token sequence, the guard trigger, the
        // waiters table).
        // The ownership check is sent with the look at the tables, in the same round trip
        // (pipelined); its answer counts only when the tables are complete, else the DDL below
        // runs it again inside its transaction.
        let params: [&dyn unnamed::Param; 5] =
            [&leases, &records, &tokens, &self.shared.guard, &waiters];
        let (exists, foreign) = tokio::join!(
            unnamed::query_one(
                client,
                "SELECT pg_catalog.to_regclass($1) IS NOT NULL AND pg_catalog.to_regclass($2) IS NOT NULL
                    AND pg_catalog.to_regclass($3) IS NOT NULL
                    AND pg_catalog.to_regclass($5) IS NOT NULL
                    AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass($1)
                                AND attname = 'renewals' AND NOT attisdropped)
                    AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = pg_catalog.to_regclass($1)
                                AND tgname = $4)",
                &params,
            ),
            self.refuse_foreign_objects(client),
        );
        let exists = exists.map_err(classify)?;
        if exists.get::<_, bool>(0) {
            foreign?;
        } else {
            // Serialised by a transaction-scoped advisory lock: two first runs at once would
            // otherwise race in the catalog (a unique violation on pg_type). The lock only
            // orders the DDL; leadership never depends on it.
            //
            // Tokens come from a sequence the tables do not own: dropping and recreating the
            // tables keeps it, and it is set above every token the table holds whenever it is
            // (re)made. The guard refuses DELETE and TRUNCATE of lease rows (a lease is freed by
            // releasing it: `leader-exec resign`); a superuser who drops the trigger or the
            // tables still gets greater tokens from the sequence.
            // The ownership check runs before the COMMIT: a refusal leaves nothing behind.
            let ddl = format!(
                "BEGIN;
                 SET LOCAL statement_timeout = '30s';
                 SET LOCAL lock_timeout = '30s';
                 SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('leader-exec schema ' || pg_catalog.current_schema() || {channel}));
                 CREATE TABLE IF NOT EXISTS {leases} (
                     name text PRIMARY KEY,
                     holder text,
                     token bigint NOT NULL,
                     expires_at timestamptz NOT NULL,
                     ttl_ms bigint NOT NULL DEFAULT 0,
                     renewals bigint NOT NULL DEFAULT 0
                 );
                 ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS renewals bigint NOT NULL DEFAULT 0;
                 CREATE TABLE IF NOT EXISTS {records} (
                     key text PRIMARY KEY,
                     value bytea NOT NULL,
                     expires_at timestamptz,
                     lease_name text,
                     lease_token bigint
                 );
                 CREATE TABLE IF NOT EXISTS {waiters} (
                     name text NOT NULL,
                     id bigserial NOT NULL,
                     identity text NOT NULL,
                     renewals bigint NOT NULL DEFAULT 0,
                     ttl_ms bigint NOT NULL,
                     expires_at timestamptz NOT NULL,
                     PRIMARY KEY (name, id)
                 );
                 CREATE SEQUENCE IF NOT EXISTS {tokens};
                 SELECT CASE WHEN t.m >= s.last_value THEN setval({tokens_literal}, t.m) END
                 FROM (SELECT COALESCE(max(token), 0) AS m FROM {leases}) t, {tokens} s;
                 CREATE OR REPLACE FUNCTION {guard_fn}() RETURNS trigger LANGUAGE plpgsql AS $guard$
                 BEGIN
                     RAISE EXCEPTION 'leader-exec: % of %.% refused: a lease row keeps its fencing token; free a lease with leader-exec resign', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
                         USING ERRCODE = 'restrict_violation';
                 END $guard$;
                 DO $do$ BEGIN
                     IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                                    WHERE tgrelid = {leases_literal}::regclass AND tgname = {guard_literal}) THEN
                         CREATE TRIGGER {guard} BEFORE DELETE OR TRUNCATE ON {leases}
                             FOR EACH STATEMENT EXECUTE FUNCTION {guard_fn}();
                     END IF;
                 END $do$;",
                channel = quote_literal(&self.shared.channel),
                tokens_literal = quote_literal(&tokens),
                leases_literal = quote_literal(&leases),
                guard_literal = quote_literal(&self.shared.guard),
            );
            let done = tokio::time::timeout(Duration::from_secs(35), async {
                client.batch_execute(&ddl).await.map_err(classify)?;
                self.refuse_foreign_objects(client).await?;
                client.batch_execute("COMMIT").await.map_err(classify)
            })
            .await
            .map_err(|_| StoreError::Transient("creating the tables took too long".into()))?;
            if let Err(e) = done {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
        *self.shared.schema_ready.lock().expect("not poisoned") = true;
        Ok(())
    }

    /// Refuses objects leader-exec relies on that another role owns: every relation and
    /// function in the schema whose name starts with the table prefix (`<p>_`: the tables,
    /// their indexes, any sequence or function named for them), and the function of every
    /// trigger on those relations. Their owner could rewrite `token` (fencing gone) or run
    /// code with the privileges of the connecting role (a trigger runs as whoever writes the
    /// row: a superuser, say). Owned by the connecting role, or by a role it is explicitly a
    /// member of, is fine; a superuser's implicit power over every role does not count.
    async fn refuse_foreign_objects(&self, client: &Client) -> Result<(), StoreError> {
        let schema = self.shared.schema.get().cloned().unwrap_or_default();
        let prefix = self
            .shared
            .leases
            .strip_suffix("leases")
            .unwrap_or(&self.shared.leases)
            .to_owned();
        let sql = "WITH RECURSIVE mine(oid) AS (
                 SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER
                 UNION
                 SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN mine ON m.member = mine.oid
             ),
             ns AS (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
             ours AS (
                 SELECT c.oid, c.relname, c.relkind, c.relowner FROM pg_catalog.pg_class c
                 WHERE c.relnamespace = (SELECT oid FROM ns)
                   AND pg_catalog.starts_with(c.relname::text, $2)
             ),
             objects(rank, what, owner) AS (
                 SELECT CASE WHEN o.relkind IN ('r', 'p') THEN 0 ELSE 1 END,
                        CASE o.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table'
                            WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' WHEN 'I' THEN 'index'
                            WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                            ELSE 'relation' END || ' ' || $1 || '.' || o.relname::text,
                        o.relowner
                 FROM ours o
                 UNION ALL
                 SELECT 2, 'function ' || $1 || '.' || p.proname::text || '('
                            || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')',
                        p.proowner
                 FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = (SELECT oid FROM ns)
                   AND pg_catalog.starts_with(p.proname::text, $2)
                 UNION ALL
                 SELECT 3, 'function ' || n.nspname::text || '.' || p.proname::text || '('
                            || pg_catalog.pg_get_function_identity_arguments(p.oid)
                            || ') of trigger ' || t.tgname::text || ' on ' || $1 || '.'
                            || o.relname::text,
                        p.proowner
                 FROM pg_catalog.pg_trigger t
                 JOIN ours o ON o.oid = t.tgrelid
                 JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                 JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                 WHERE NOT t.tgisinternal
             )
             SELECT what, pg_catalog.pg_get_userbyid(owner)::text, CURRENT_USER::text
             FROM objects WHERE owner NOT IN (SELECT oid FROM mine)
             ORDER BY rank, what";
        let rows = unnamed::query(client, sql, &[&schema, &prefix])
            .await
            .map_err(classify)?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let (what, owner, user): (String, String, String) =
            (first.get(0), first.get(1), first.get(2));
        let more = match rows.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more)"),
        };
        use crate::escape::escape_str;
        Err(StoreError::Fatal(format!(
            "PostgreSQL: {what} is owned by role {owner}, not by {user} or a role it is a member \
             of{more}: not used (its owner could rewrite tokens or run code as {user}); drop it \
             or change its owner (docs/postgresql.md: Schema, Ownership)",
            what = escape_str(&what),
            owner = escape_str(&owner),
            user = escape_str(&user),
        )))
    }

    /// Makes sure the listening session is up; a new one counts as a release heard (anything
    /// may have happened while none listened).
    async fn ensure_listener(&self) -> Result<(), StoreError> {
        if !self.shared.listening.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Behind the listening places: the session is opened now (its setup is the costly part,
        // kept away from handovers), the LISTEN comes once this waiter has moved up.
        let far_back = self.shared.waiter.load(Ordering::SeqCst) != 0
            && self.shared.far_back.load(Ordering::SeqCst);
        let channel = self.listen_channel();
        let wanted = (!far_back).then_some(channel.clone());
        let mut slot = self.shared.listener.lock().await;
        if let Some(listening) = slot.as_ref()
            && !listening.client.is_closed()
            && listening.channel == wanted
        {
            return Ok(());
        }
        let client = match slot.take() {
            // Open and listening on nothing yet: LISTEN there.
            Some(listening) if !listening.client.is_closed() && listening.channel.is_none() => {
                listening.client
            }
            _ => {
                // The tables first: LISTEN is fine without them, but the first read is not.
                self.client().await?;
                self.open(true).await?
            }
        };
        if far_back {
            *slot = Some(Listening {
                client,
                channel: None,
            });
            return Ok(());
        }
        let listen = format!("LISTEN {}", quote_ident(&channel));
        tokio::time::timeout(self.shared.request_timeout, client.batch_execute(&listen))
            .await
            .map_err(|_| StoreError::Transient("LISTEN got no answer".into()))?
            .map_err(classify)?;
        if !self.shared.probed.load(Ordering::SeqCst) {
            let arrived = self.probe(&channel).await?;
            self.shared.probed.store(true, Ordering::SeqCst);
            if !arrived {
                tracing::warn!(
                    "PostgreSQL: a NOTIFY sent after LISTEN did not arrive (pgbouncer in transaction mode?): \
                     waiters read the lease row every {:?} and at its expiry instead; \
                     add leader_exec_listen=off to the URL to skip this check",
                    self.shared.poll
                );
                self.shared.listening.store(false, Ordering::SeqCst);
                return Ok(());
            }
        }
        self.shared.heard.send_modify(|h| h.free += 1);
        *slot = Some(Listening {
            client,
            channel: Some(channel),
        });
        Ok(())
    }

    /// Whether notifications reach the listening session: a NOTIFY on the channel, sent from
    /// the shared session (another one), must come back within min(--retry-period, 1 s).
    /// Other listeners on the channel ignore it.
    async fn probe(&self, channel: &str) -> Result<bool, StoreError> {
        let shared = &self.shared;
        let mut rx = shared.heard.subscribe();
        let before = rx.borrow_and_update().probes;
        let wait = shared.request_timeout.min(Duration::from_secs(1));
        let sql = "SELECT pg_notify($1, $2)::text";
        let a = (channel.to_owned(), shared.probe.clone());
        self.request(|c| async move { unnamed::query(&c, sql, &[&a.0, &a.1]).await })
            .await?;
        let until = tokio::time::Instant::now() + wait;
        loop {
            if rx.borrow_and_update().probes > before {
                return Ok(true);
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Ok(false);
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    return Ok(rx.borrow().probes > before);
                }
            }
        }
    }

    /// The latest instant a waiter may look next: now + `left`, or sooner when it does not
    /// listen (then a release announces nothing to it).
    fn look_by(&self, left: Duration) -> tokio::time::Instant {
        let left = if self.shared.listening.load(Ordering::SeqCst) {
            left
        } else {
            left.min(self.shared.poll)
        };
        tokio::time::Instant::now() + left
    }

    /// The channel a waiter row's owner LISTENs on: `w<id>_<p>`, cut to PostgreSQL's 63 bytes
    /// (as [`waiter_channel_sql`] builds it). Two prefixes whose names share their first 50-odd
    /// characters may share a channel for the same id: the cost is a wake-up that looks once.
    fn waiter_channel(&self, id: i64) -> String {
        let mut channel = format!("w{id}_{}", self.shared.base);
        channel.truncate(63);
        channel
    }

    /// The channel the listening session should be on: this waiter's own while it waits in
    /// line (a release wakes only the first waiter), the table's otherwise (`watch`).
    fn listen_channel(&self) -> String {
        match self.shared.waiter.load(Ordering::SeqCst) {
            0 => self.shared.channel.clone(),
            id => self.waiter_channel(id),
        }
    }

    /// The waiters in line whose last renewal was within their TTL as the server's clock says
    /// (a display: a dead row stays in line until the waiter behind it skips it).
    async fn waiting(&self) -> Result<i64, StoreError> {
        let sql = format!(
            "SELECT count(*) FROM {} WHERE name = $1 AND expires_at > now()",
            self.qualified(&self.shared.waiters)
        );
        let name = self.shared.name.clone();
        let row = self
            .request(|c| async move { unnamed::query_one(&c, &sql, &[&name]).await })
            .await?;
        Ok(row.get(0))
    }

    /// The row: (holder, token, milliseconds left, whether it has not expired).
    async fn read_row(&self) -> Result<Option<(Option<String>, i64, i64, bool)>, StoreError> {
        let sql = format!(
            "SELECT holder, token,
                    GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint,
                    expires_at > now()
             FROM {} WHERE name = $1",
            self.leases()
        );
        let name = self.shared.name.clone();
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&name]).await })
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))))
    }

    /// One attempt to acquire, in one statement: the conditional UPDATE, and the row as it was
    /// (when the attempt failed). `Ok(None)`: no row yet. A released row (holder NULL) is taken
    /// at once; a held one only as [`Sighting`] says: when this waiter has seen it unchanged for
    /// a full TTL, and only if it is still exactly that.
    async fn acquire(&self) -> Result<Option<Attempt>, StoreError> {
        let shared = &self.shared;
        let taken = "'taken' || chr(10) || $3::bigint || chr(10) || $1";
        let update = format!(
            "WITH won AS (
                 UPDATE {leases}
                 SET holder = $2, token = GREATEST(token + 1, nextval({tokens})),
                     renewals = renewals + 1,
                     expires_at = now() + $3::bigint * interval '1 millisecond', ttl_ms = $3
                 WHERE name = $1 AND (holder IS NULL
                     OR (holder = $6 AND token = $7 AND renewals = $8
                         AND (EXTRACT(EPOCH FROM expires_at) * 1000000)::bigint = $9))
                 RETURNING token),
             told AS (SELECT pg_notify($4, {taken}) FROM won),
             left_line AS (DELETE FROM {waiters} WHERE name = $1 AND id = $5
                           AND EXISTS (SELECT 1 FROM won))
             SELECT (SELECT token FROM won), (SELECT count(*) FROM told),
                    {ROW_COLUMNS}
             FROM {leases} WHERE name = $1",
            leases = self.leases(),
            waiters = self.qualified(&shared.waiters),
            tokens = quote_literal(&self.qualified(&shared.tokens)),
        );
        // What may be taken over: the sighting, once seen for its full TTL (NULLs match nothing).
        let ripe = self.ripe();
        let a = (
            shared.name.clone(),
            shared.identity.clone(),
            shared.ttl_ms,
            shared.channel.clone(),
            shared.waiter.load(Ordering::SeqCst),
            ripe.as_ref().map(|s| s.holder.clone()),
            ripe.as_ref().map(|s| s.token),
            ripe.as_ref().map(|s| s.renewals),
            ripe.as_ref().map(|s| s.expires_us),
        );
        let row = self
            .request(|c| async move {
                unnamed::query_opt(
                    &c,
                    &update,
                    &[&a.0, &a.1, &a.2, &a.3, &a.4, &a.5, &a.6, &a.7, &a.8],
                )
                .await
            })
            .await?;
        let received = BootClock.now();
        Ok(row.map(|row| match row.get::<_, Option<i64>>(0) {
            Some(token) => {
                *shared.sighting.lock().expect("not poisoned") = None;
                // Its waiter row went in the same statement.
                shared.waiter.store(0, Ordering::SeqCst);
                Attempt::Won(token)
            }
            None => {
                let seen = Row::from(&row, 2);
                Attempt::Held {
                    holder: seen.holder.clone(),
                    wait: self.sight(&seen, received),
                }
            }
        }))
    }

    /// The sighting this waiter may take over now: seen unchanged for its full TTL.
    fn ripe(&self) -> Option<Sighting> {
        let sighting = self.shared.sighting.lock().expect("not poisoned");
        let (seen, since) = sighting.as_ref()?;
        (BootClock.now() >= *since + seen.ttl).then(|| seen.clone())
    }

    /// Notes the row as read by a request whose answer arrived at `received` (boot clock), and
    /// returns how long until it may be taken: zero when it is free or has been seen unchanged
    /// for its full TTL.
    fn sight(&self, row: &Row, received: Duration) -> Duration {
        let mut sighting = self.shared.sighting.lock().expect("not poisoned");
        let Some(holder) = row.holder.clone() else {
            *sighting = None;
            return Duration::ZERO;
        };
        let seen = Sighting {
            holder,
            token: row.token,
            renewals: row.renewals,
            expires_us: row.expires_us,
            ttl: self
                .shared
                .ttl
                .max(Duration::from_millis(row.ttl_ms.max(0) as u64)),
        };
        // A sighting first made now counts from now; one seen before keeps its first instant.
        let since = match sighting.as_ref() {
            Some((before, since)) if *before == seen => *since,
            _ => received,
        };
        let ripe_at = since + seen.ttl;
        *sighting = Some((seen, since));
        ripe_at.saturating_sub(BootClock.now())
    }

    /// The row, for a waiter: read (no lock), noted as a sighting; how long until it may be
    /// taken (zero: free, gone, or seen unchanged for a full TTL).
    async fn look(&self) -> Result<Duration, StoreError> {
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM {} WHERE name = $1",
            self.leases()
        );
        let name = self.shared.name.clone();
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&name]).await })
            .await?;
        let received = BootClock.now();
        Ok(match row {
            Some(row) => self.sight(&Row::from(&row, 0), received),
            None => Duration::ZERO,
        })
    }

    async fn insert_new(&self) -> Result<Option<i64>, StoreError> {
        let shared = &self.shared;
        let taken = "'taken' || chr(10) || $3::bigint || chr(10) || $1";
        let insert = format!(
            "WITH won AS (
                 INSERT INTO {leases} (name, holder, token, expires_at, ttl_ms)
                 VALUES ($1, $2, nextval({tokens}), now() + $3::bigint * interval '1 millisecond', $3)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING token),
             left_line AS (DELETE FROM {waiters} WHERE name = $1 AND id = $5
                           AND EXISTS (SELECT 1 FROM won))
             SELECT token, pg_notify($4, {taken})::text FROM won",
            leases = self.leases(),
            waiters = self.qualified(&shared.waiters),
            tokens = quote_literal(&self.qualified(&shared.tokens)),
        );
        let a = (
            shared.name.clone(),
            shared.identity.clone(),
            shared.ttl_ms,
            shared.channel.clone(),
            shared.waiter.load(Ordering::SeqCst),
        );
        let row = self
            .request(|c| async move {
                unnamed::query_opt(&c, &insert, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await
            })
            .await?;
        let token = row.map(|r| r.get(0));
        if token.is_some() {
            shared.waiter.store(0, Ordering::SeqCst);
        }
        Ok(token)
    }

    fn leader_of(&self, holder: Option<String>, token: i64, live: bool) -> Option<Leader> {
        let holder = holder.filter(|_| live)?;
        Some(Leader {
            key: self.row_key().into_bytes(),
            identity: holder.into_bytes(),
            token,
            lease_id: None,
        })
    }

    /// The fence shared by every fenced write: the lease row still holds this candidacy's token,
    /// locked FOR SHARE so that a takeover's UPDATE waits until the write has committed.
    fn fence(&self) -> String {
        format!(
            "FROM {} WHERE name = $4 AND holder = $5 AND token = $6 AND expires_at > now() FOR SHARE",
            self.leases()
        )
    }

    /// Joins the line: a waiter row at its back, its id from the table's own sequence
    /// (`<p>_waiters_id_seq`: strictly increasing; never a clock).
    async fn join_line(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        if shared.waiter.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO {waiters} (name, identity, ttl_ms, expires_at)
             VALUES ($1, $2, $3, now() + $3::bigint * interval '1 millisecond')
             RETURNING id, (SELECT count(*) FROM (SELECT 1 FROM {waiters} WHERE name = $1
                                                   LIMIT {LISTENING_PLACES}) ahead)",
            waiters = self.qualified(&shared.waiters),
        );
        let a = (shared.name.clone(), shared.identity.clone(), shared.ttl_ms);
        let row = self
            .request(|c| async move { unnamed::query_one(&c, &sql, &[&a.0, &a.1, &a.2]).await })
            .await?;
        // The rows there before this one, all ahead of it (ids only grow).
        shared
            .far_back
            .store(row.get::<_, i64>(1) >= LISTENING_PLACES, Ordering::SeqCst);
        shared.waiter.store(row.get(0), Ordering::SeqCst);
        *shared.ahead.lock().expect("not poisoned") = None;
        Ok(())
    }

    /// A waiter's look, once per --retry-period, in one statement: renews its own row, reads
    /// the row just ahead of it and the lease row. Returns whether its own row is still there
    /// (an UPDATE, never an upsert: a look that arrives late, after the row was deleted, puts
    /// nothing back), the row ahead (none: this waiter is first), how many are ahead (up to
    /// `LISTENING_PLACES`) and how long until the lease row may be taken ([`Postgres::sight`]).
    async fn poll_line(&self) -> Result<(bool, Option<AheadSighting>, i64, Duration), StoreError> {
        let shared = &self.shared;
        let sql = format!(
            "WITH mine AS (
                 UPDATE {waiters} SET renewals = renewals + 1, ttl_ms = $4,
                     expires_at = now() + $4::bigint * interval '1 millisecond'
                 WHERE name = $1 AND id = $2 AND identity = $3
                 RETURNING 1)
             SELECT (SELECT count(*) FROM mine), a.id, a.renewals, a.ttl_ms,
                    l.holder, l.token, l.renewals,
                    (EXTRACT(EPOCH FROM l.expires_at) * 1000000)::bigint, l.ttl_ms,
                    (SELECT count(*) FROM (SELECT 1 FROM {waiters} WHERE name = $1 AND id < $2
                                           LIMIT {LISTENING_PLACES}) places)
             FROM (SELECT 1) one
             LEFT JOIN LATERAL (SELECT id, renewals, ttl_ms FROM {waiters}
                                WHERE name = $1 AND id < $2 ORDER BY id DESC LIMIT 1) a ON true
             LEFT JOIN {leases} l ON l.name = $1",
            waiters = self.qualified(&shared.waiters),
            leases = self.leases(),
        );
        let a = (
            shared.name.clone(),
            shared.waiter.load(Ordering::SeqCst),
            shared.identity.clone(),
            shared.ttl_ms,
        );
        let row = self
            .request(
                |c| async move { unnamed::query_one(&c, &sql, &[&a.0, &a.1, &a.2, &a.3]).await },
            )
            .await?;
        let received = BootClock.now();
        let ahead = row.get::<_, Option<i64>>(1).map(|id| AheadSighting {
            id,
            renewals: row.get(2),
            ttl: shared
                .ttl
                .max(Duration::from_millis(row.get::<_, i64>(3).max(0) as u64)),
        });
        let wait = match row.get::<_, Option<i64>>(5) {
            Some(_) => self.sight(&Row::from(&row, 4), received),
            None => Duration::ZERO,
        };
        Ok((row.get::<_, i64>(0) > 0, ahead, row.get(9), wait))
    }

    /// Notes the waiter row ahead as seen at `received`; how long until it counts as dead
    /// (zero: seen unchanged for its full TTL on this waiter's boot clock).
    fn sight_ahead(&self, seen: AheadSighting, received: Duration) -> Duration {
        let mut ahead = self.shared.ahead.lock().expect("not poisoned");
        let since = match ahead.as_ref() {
            Some((before, since)) if *before == seen => *since,
            _ => received,
        };
        let dead_at = since + seen.ttl;
        *ahead = Some((seen, since));
        dead_at.saturating_sub(BootClock.now())
    }

    /// Deletes a dead waiter row ahead, only if it is still exactly as seen.
    async fn skip_dead(&self, dead: &AheadSighting) -> Result<(), StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE name = $1 AND id = $2 AND renewals = $3",
            self.qualified(&self.shared.waiters)
        );
        let a = (self.shared.name.clone(), dead.id, dead.renewals);
        self.request(|c| async move { unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2]).await })
            .await?;
        *self.shared.ahead.lock().expect("not poisoned") = None;
        Ok(())
    }

    /// Waits for a release heard after `seen`, or until `until`, whichever first. Returns the
    /// new state heard.
    async fn wait_heard(&self, seen: i64, until: tokio::time::Instant) -> Heard {
        let mut rx = self.shared.heard.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            if now.free > seen {
                return now;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(until).await;
                        return *rx.borrow();
                    }
                }
                _ = tokio::time::sleep_until(until) => return *rx.borrow(),
            }
        }
    }
}

/// SQL for the channel of the waiter row whose id is `id` (an expression): [`Postgres::waiter_channel`].
fn waiter_channel_sql(id: &str, base: &str) -> String {
    format!(
        "pg_catalog.left('w' || ({id})::text || '_' || {}, 63)",
        quote_literal(base)
    )
}

fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
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

impl Campaign for Postgres {
    type Keeper = PgKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        // A new candidacy holds nothing, whatever an earlier one of this process held: a claim
        // it could not release is left to expire, never renewed by the new keeper (which would
        // keep it alive while this candidacy waits behind it).
        self.shared.held.store(0, Ordering::SeqCst);
        // A place at the back of the line (kept if a first try got one but failed later), and
        // listening on its channel before the first attempt: no release can fall between a
        // failed attempt and the wait that follows it.
        self.join_line().await?;
        self.ensure_listener().await?;
        Ok(Candidacy {
            lease_id: None,
            key: self.row_key(),
            token: 0,
        })
    }

    fn keeper(&self, _candidacy: &Candidacy) -> PgKeeper {
        PgKeeper {
            backend: self.clone(),
            client: None,
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let shared = &self.shared;
        let held = shared.held.load(Ordering::SeqCst);
        if candidacy.token != 0 && held == candidacy.token {
            return Ok(Turn::Leading { token: held });
        }
        self.join_line().await?;
        self.ensure_listener().await?;
        // What was heard before this look: a release after it wakes the wait that follows.
        let seen = shared.heard.borrow().free;
        let (holder, wait) = match self.acquire().await? {
            Some(Attempt::Won(token)) => {
                shared.held.store(token, Ordering::SeqCst);
                return Ok(Turn::Leading { token });
            }
            Some(Attempt::Held { holder, wait }) => (holder, wait),
            None => match self.insert_new().await? {
                Some(token) => {
                    shared.held.store(token, Ordering::SeqCst);
                    return Ok(Turn::Leading { token });
                }
                // Inserted by another instance meanwhile.
                None => (None, self.look().await?),
            },
        };
        Ok(Turn::Behind(Ahead {
            key: holder.unwrap_or_default().into_bytes(),
            revision: seen,
            expires_in: Some(wait),
        }))
    }

    async fn predecessor_gone(&self, ahead: &Ahead) -> Result<(), StoreError> {
        let shared = &self.shared;
        let mut seen = ahead.revision;
        // Until the first look at the line this waiter may be first: the lease row's own wait.
        let mut wait = ahead.expires_in.unwrap_or_default();
        loop {
            // A release wakes only the first waiter in line (its own channel), which then tries
            // at once. Every waiter looks at the line every --retry-period anyway (renewing its
            // own row): the first one also reads the lease row, so that a holder that crashed
            // is taken over once this waiter has seen its row unchanged for a full TTL, and a
            // release whose notification was lost (or never sent: leader_exec_listen=off) is
            // found within a retry period. Waiters behind the first sleep through releases.
            let heard = self
                .wait_heard(seen, tokio::time::Instant::now() + wait.min(shared.poll))
                .await;
            if heard.free > seen {
                return Ok(());
            }
            seen = heard.free;
            let (mine, ahead, places, lease_wait) = self.poll_line().await?;
            let received = BootClock.now();
            if !mine {
                // Taken for dead by the waiter behind (this process was paused for a TTL, say):
                // back in line, at the back, on a new channel.
                shared.waiter.store(0, Ordering::SeqCst);
                self.join_line().await?;
                self.ensure_listener().await?;
                seen = shared.heard.borrow().free;
                wait = Duration::ZERO;
                continue;
            }
            if places < LISTENING_PLACES && shared.far_back.swap(false, Ordering::SeqCst) {
                // Moved up into the listening places: LISTEN, then look again, so that a
                // release between that look and the LISTEN is not missed.
                self.ensure_listener().await?;
                seen = shared.heard.borrow().free;
                wait = Duration::ZERO;
                continue;
            }
            match ahead {
                None => {
                    *shared.ahead.lock().expect("not poisoned") = None;
                    // First in line: the lease row is free, gone, or ripe for a takeover.
                    if lease_wait.is_zero() {
                        return Ok(());
                    }
                    wait = lease_wait;
                }
                Some(ahead) => {
                    // Not first: the lease row is the first waiter's to take. The one just
                    // ahead, seen unchanged for a full TTL, is dead: skip it and look again, so
                    // that a dead waiter delays the line by a TTL at most (each in a row of
                    // dead ones by another).
                    let left = self.sight_ahead(ahead.clone(), received);
                    if left.is_zero() {
                        self.skip_dead(&ahead).await?;
                        wait = Duration::ZERO;
                    } else {
                        wait = left;
                    }
                }
            }
        }
    }

    async fn key_gone(&self, _candidacy: &Candidacy) {
        // A row taken away shows up as a renewal that answers "expired".
        std::future::pending::<()>().await;
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        let s = &self.shared;
        if candidacy.token == 0 {
            // A waiter holds no lease, only its place in line: it leaves the line, and if the
            // lease row is free meanwhile (a release woke this waiter, which is going), it wakes
            // the next waiter in its place.
            let id = s.waiter.load(Ordering::SeqCst);
            if id == 0 {
                return Ok(());
            }
            let sql = format!(
                "WITH gone AS (DELETE FROM {waiters} WHERE name = $1 AND id = $2 RETURNING 1),
                      next AS (SELECT id FROM {waiters} WHERE name = $1 AND id <> $2
                               ORDER BY id LIMIT 1)
                 SELECT pg_notify({channel}, 'free' || chr(10) || $1)::text
                 FROM next, {leases} l WHERE l.name = $1 AND l.holder IS NULL",
                waiters = self.qualified(&s.waiters),
                leases = self.leases(),
                channel = waiter_channel_sql("next.id", &s.base),
            );
            let a = (s.name.clone(), id);
            self.request(|c| async move { unnamed::query(&c, &sql, &[&a.0, &a.1]).await })
                .await?;
            let _ = s
                .waiter
                .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
            return Ok(());
        }
        // The release wakes the first waiter in line (its own channel: the others sleep on) and
        // whoever watches the table's channel (`watch`); a dead first waiter is skipped by the
        // one behind it after a TTL, which then finds the row free.
        let sql = format!(
            "WITH gone AS (
                 UPDATE {leases} SET holder = NULL, expires_at = now()
                 WHERE name = $1 AND holder = $2 AND token = $3
                 RETURNING 1),
             first AS (SELECT id FROM {waiters} WHERE name = $1 ORDER BY id LIMIT 1)
             SELECT pg_notify($4, 'free' || chr(10) || $1)::text,
                    (SELECT pg_notify({channel}, 'free' || chr(10) || $1)::text FROM first)
             FROM gone",
            leases = self.leases(),
            waiters = self.qualified(&s.waiters),
            channel = waiter_channel_sql("first.id", &s.base),
        );
        let a = (
            s.name.clone(),
            s.identity.clone(),
            candidacy.token,
            s.channel.clone(),
        );
        self.request(|c| async move { unnamed::query(&c, &sql, &[&a.0, &a.1, &a.2, &a.3]).await })
            .await?;
        let _ = self.shared.held.compare_exchange(
            candidacy.token,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        Ok(())
    }
}

impl Read for Postgres {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        // No LISTEN here (`status` and `check` need none): the first `changed_after` starts
        // the listening session, which counts as a change, so `watch` reads again once it
        // listens and misses nothing in between.
        let heard = *self.shared.heard.borrow();
        let row = self.read_row().await?;
        let waiting = self.waiting().await?;
        let leader = row.and_then(|(holder, token, _, live)| self.leader_of(holder, token, live));
        Ok(Observation {
            candidates: i64::from(leader.is_some()) + waiting,
            leader,
            revision: heard.free + heard.taken,
        })
    }

    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        let revision = seen.revision;
        self.ensure_listener().await?;
        // A crashed holder announces nothing: look again when its lease runs out, and at least
        // every few seconds.
        let left = match self.read_row().await? {
            Some((Some(_), _, left_ms, true)) => Duration::from_millis(left_ms.max(0) as u64 + 1),
            _ => Duration::from_secs(5),
        };
        let until = self.look_by(left.min(Duration::from_secs(5)));
        let mut rx = self.shared.heard.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            if now.free + now.taken > revision {
                return Ok(());
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep_until(until) => return Ok(()),
            }
        }
    }

    async fn list_elections(&self, _prefix: &str) -> Result<Vec<Election>, StoreError> {
        // The prefix is the table: every row in it is an election.
        let sql = format!(
            "SELECT l.name, l.holder, l.token, l.expires_at > now(),
                    (SELECT count(*) FROM {waiters} w WHERE w.name = l.name AND w.expires_at > now())
             FROM {leases} l ORDER BY l.name",
            leases = self.leases(),
            waiters = self.qualified(&self.shared.waiters),
        );
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[]).await })
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let name: String = r.get(0);
                let holder: Option<String> = r.get(1);
                let live: bool = r.get(3);
                let leader = holder.filter(|_| live).map(|holder| Leader {
                    key: format!("{}/{}", self.shared.leases, name).into_bytes(),
                    identity: holder.into_bytes(),
                    token: r.get(2),
                    lease_id: None,
                });
                Election {
                    name: name.into_bytes(),
                    candidates: i64::from(leader.is_some()) + r.get::<_, i64>(4),
                    leader,
                }
            })
            .collect())
    }

    async fn lease_time(&self, leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        let sql = format!(
            "SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint, ttl_ms
             FROM {} WHERE name = $1 AND token = $2 AND holder IS NOT NULL AND expires_at > now()",
            self.leases()
        );
        let a = (self.shared.name.clone(), leader.token);
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&a.0, &a.1]).await })
            .await?;
        Ok(row.map(|r| LeaseTime {
            remaining: Duration::from_millis(r.get::<_, i64>(0).max(0) as u64),
            granted: Duration::from_millis(r.get::<_, i64>(1).max(0) as u64),
        }))
    }
}

impl Records for Postgres {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = format!(
            "SELECT value FROM {records} r WHERE key = $1 AND {visible}",
            records = self.records(),
            visible = self.visible(),
        );
        let key = key.to_owned();
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&key]).await })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, now() + $3::bigint * interval '1 millisecond', NULL, NULL
             {fence}
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,
                 expires_at = EXCLUDED.expires_at, lease_name = NULL, lease_token = NULL",
            records = self.records(),
            fence = self.fence(),
        );
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let s = &self.shared;
        let a = (
            key.to_owned(),
            value,
            retention_ms,
            s.name.clone(),
            s.identity.clone(),
            candidacy.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4, &a.5]).await
            })
            .await?;
        if written > 0 {
            // Best effort: records past their retention go.
            let sql = format!("DELETE FROM {} WHERE expires_at < now()", self.records());
            let _ = self
                .request(|c| async move { unnamed::execute(&c, &sql, &[]).await })
                .await;
        }
        Ok(written > 0)
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let sql = format!(
            "SELECT key, value FROM {records} r WHERE starts_with(key, $1) AND {visible} ORDER BY key",
            records = self.records(),
            visible = self.visible(),
        );
        let p = prefix.to_owned();
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[&p]).await })
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let key: String = r.get(0);
                let id = key.strip_prefix(prefix).unwrap_or(&key).as_bytes().to_vec();
                (id, r.get(1))
            })
            .collect())
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, NULL, name, token
             {fence}
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = NULL,
                 lease_name = EXCLUDED.lease_name, lease_token = EXCLUDED.lease_token",
            records = self.records(),
            fence = self
                .fence()
                .replace("$4", "$3")
                .replace("$5", "$4")
                .replace("$6", "$5"),
        );
        let s = &self.shared;
        let a = (
            key.to_owned(),
            value,
            s.name.clone(),
            s.identity.clone(),
            candidacy.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await
            })
            .await?;
        Ok(written > 0)
    }
}

impl Handover for Postgres {
    /// The request is a record like any other (no new column, no new table), fenced by the
    /// lease row still holding the leader's token (not by our own identity, which `resign`
    /// does not have), `FOR SHARE` as every fenced write. The leader reads it once per
    /// `--retry-period`.
    async fn request_handover(
        &self,
        leader: &Leader,
        key: &str,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, now() + $3::bigint * interval '1 millisecond', NULL, NULL
             FROM {leases} WHERE name = $4 AND token = $5 AND holder IS NOT NULL
                 AND expires_at > now() FOR SHARE
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,
                 expires_at = EXCLUDED.expires_at, lease_name = NULL, lease_token = NULL",
            records = self.records(),
            leases = self.leases(),
        );
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let a = (
            key.to_owned(),
            leader.token.to_string().into_bytes(),
            retention_ms,
            self.shared.name.clone(),
            leader.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await
            })
            .await?;
        Ok(written > 0)
    }

    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        let (key, token) = (leader.key.as_slice(), leader.token);
        let key = String::from_utf8_lossy(key).into_owned();
        let Some(name) = key.strip_prefix(&format!("{}/", self.shared.leases)) else {
            return Ok(false);
        };
        let sql = format!(
            "WITH gone AS (
                 UPDATE {} SET holder = NULL, expires_at = now()
                 WHERE name = $1 AND token = $2 AND holder IS NOT NULL AND expires_at > now()
                 RETURNING 1)
             SELECT pg_notify($3, 'free' || chr(10) || $1)::text FROM gone",
            self.leases()
        );
        let a = (name.to_owned(), token, self.shared.channel.clone());
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[&a.0, &a.1, &a.2]).await })
            .await?;
        Ok(!rows.is_empty())
    }
}

impl Describe for Postgres {
    fn store_name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn shown(&self) -> String {
        self.shared.target.shown.clone()
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        let config = &self.shared.target.config;
        let ports = config.get_ports();
        let mut addresses = Vec::new();
        for (i, host) in config.get_hosts().iter().enumerate() {
            let tokio_postgres::config::Host::Tcp(host) = host else {
                // A Unix socket cannot be probed over TCP: never taken as refused.
                return Vec::new();
            };
            let port = match ports {
                [] => 5432,
                [port] => *port,
                ports => ports.get(i).copied().unwrap_or(5432),
            };
            addresses.push((host.clone(), port));
        }
        addresses
    }

    fn restart_resets_leases(&self) -> bool {
        false
    }

    fn delete_record_hint(&self, key: &str) -> String {
        format!(
            "psql -c {}",
            crate::escape::shell_quote(&format!(
                "DELETE FROM {} WHERE key = {}",
                self.records(),
                quote_literal(key)
            ))
        )
    }
}

impl Postgres {
    /// A record is visible while its retention lasts, and a record that goes with a lease while
    /// that lease row still holds its token.
    fn visible(&self) -> String {
        format!(
            "(r.expires_at IS NULL OR r.expires_at > now())
             AND (r.lease_token IS NULL OR EXISTS (
                 SELECT 1 FROM {} l WHERE l.name = r.lease_name AND l.token = r.lease_token
                 AND l.holder IS NOT NULL AND l.expires_at > now()))",
            self.leases()
        )
    }
}

/// Renews the row this instance holds, on a session of its own (a renewal never queues behind
/// another request). A waiter holds no row: its renewal answers "alive" without a request,
/// and the state machine proves its lease from the acquiring request's send instant instead.
pub struct PgKeeper {
    backend: Postgres,
    client: Option<Client>,
}

impl Keeper for PgKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let shared = self.backend.shared.clone();
        let token = shared.held.load(Ordering::SeqCst);
        if token == 0 {
            return Ok(Renewal::Alive);
        }
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.backend.open(false).await?);
        }
        let client = self.client.as_ref().expect("just opened");
        // No wall clock in the condition: the row is ours while it holds our identity and
        // token, since no waiter takes a held row over before it has seen it unchanged for a
        // full TTL, and this renewal changes it (`renewals`). A step of the server's clock
        // (either way) thus neither ends the lease nor keeps a taken one.
        let sql = format!(
            "UPDATE {} SET expires_at = now() + $4::bigint * interval '1 millisecond', ttl_ms = $4,
                 renewals = renewals + 1
             WHERE name = $1 AND holder = $2 AND token = $3",
            self.backend.leases()
        );
        let renewed = unnamed::execute(
            client,
            &sql,
            &[&shared.name, &shared.identity, &token, &shared.ttl_ms],
        )
        .await;
        match renewed {
            Ok(1) => Ok(Renewal::Alive),
            // Taken over, released by `resign`, or the row deleted (the table truncated): the
            // claim is gone for certain, and the command is killed at once.
            Ok(_) => Ok(Renewal::Expired),
            // The table was dropped: as certain a loss as a deleted row.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                self.client = None;
                Ok(Renewal::Expired)
            }
            Err(e) => {
                self.client = None;
                Err(classify(e))
            }
        }
    }

    fn reset(&mut self) {
        self.client = None;
    }
}

/// Whether the password-without-TLS warning has been given (once per process).
static CLEARTEXT_WARNED: AtomicBool = AtomicBool::new(false);

/// The TLS connector, noting whether the session got TLS: with `sslmode=prefer` a server that
/// offers none gets plain TCP, and tokio-postgres does not say so.
struct Noted {
    inner: tokio_postgres_rustls::MakeRustlsConnect,
    /// Set when the TLS handshake of the host tried last began (the session fails if it fails).
    encrypted: Arc<AtomicBool>,
}

impl MakeTlsConnect<Socket> for Noted {
    type Stream = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = NotedConnect;
    type Error = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<NotedConnect, Self::Error> {
        // Once per host tried: a host that had TLS and was then passed over (a standby) says
        // nothing about the next one.
        self.encrypted.store(false, Ordering::SeqCst);
        Ok(NotedConnect {
            inner: MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)?,
            encrypted: self.encrypted.clone(),
        })
    }
}

struct NotedConnect {
    inner: RustlsConnect,
    encrypted: Arc<AtomicBool>,
}

/// The rustls connector of one host.
type RustlsConnect =
    <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;

impl TlsConnect<Socket> for NotedConnect {
    type Stream = <RustlsConnect as TlsConnect<Socket>>::Stream;
    type Error = <RustlsConnect as TlsConnect<Socket>>::Error;
    type Future = <RustlsConnect as TlsConnect<Socket>>::Future;

    fn connect(self, stream: Socket) -> Self::Future {
        self.encrypted.store(true, Ordering::SeqCst);
        self.inner.connect(stream)
    }
}

/// What a TLS connection checks of the server's certificate, as libpq's `sslmode` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// `allow`, `prefer`, and `require` without a CA file: encrypted, not authenticated.
    Nothing,
    /// `verify-ca`, and `require` with a CA file: the chain, not the host name.
    Chain,
    /// `verify-full`: the chain and the host name.
    Full,
}

/// Makes the rustls connector: the CA file given (`sslrootcert`, or `--cacert`), else the
/// platform's trust store, checked as far as `verify` says.
pub fn rustls_connector(
    ca: Option<&[u8]>,
    verify: Verify,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = if verify == Verify::Nothing {
        None
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(pem) => {
                for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("CA certificate: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("CA certificate: {e}"))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        if roots.is_empty() {
            return Err("no CA certificate to verify the server with".into());
        }
        Some(
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| e.to_string())?,
        )
    };
    let verifier = Arc::new(Verifier {
        inner,
        check_name: verify == Verify::Full,
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The server certificate check of one `sslmode`. Handshake signatures are always verified
/// (they prove the server holds the key of the certificate it sent).
#[derive(Debug)]
struct Verifier {
    /// `None`: the certificate itself is not checked (libpq's `prefer` and `require`).
    inner: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    /// Whether the certificate must name the host (`verify-full`).
    check_name: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls_pki_types::CertificateDer<'_>,
        intermediates: &[rustls_pki_types::CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        let Some(inner) = &self.inner else {
            return Ok(rustls::client::danger::ServerCertVerified::assertion());
        };
        match inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn backend(ttl: Duration) -> Postgres {
        let target = Target {
            config: Config::new(),
            tls: None,
            shown: "postgres://test".into(),
            listen: false,
        };
        let timing = PgTiming {
            ttl,
            retry_period: Duration::from_millis(300),
            connect_timeout: Duration::from_secs(1),
        };
        Postgres::new(target, "/leader-exec/", "l", "me".into(), timing).unwrap()
    }

    fn row(holder: Option<&str>, token: i64, renewals: i64, ttl_ms: i64) -> Row {
        Row {
            holder: holder.map(str::to_owned),
            token,
            renewals,
            expires_us: 1_000_000,
            ttl_ms,
        }
    }

    #[test]
    fn a_held_row_ripens_only_after_a_full_ttl_of_being_seen_unchanged() {
        let pg = backend(Duration::from_secs(60));
        let now = BootClock.now();
        // First seen now: a full TTL to go, nothing to take yet.
        let wait = pg.sight(&row(Some("a"), 7, 3, 60_000), now);
        assert!(wait > Duration::from_secs(59), "{wait:?}");
        assert!(pg.ripe().is_none());
        // Seen again unchanged: the window keeps its first instant.
        let again = pg.sight(&row(Some("a"), 7, 3, 60_000), now + Duration::from_secs(30));
        assert!(again <= wait, "{again:?} after {wait:?}");
        // Renewed (the count moved), or taken over (the token moved): counted afresh.
        let renewed = pg.sight(&row(Some("a"), 7, 4, 60_000), BootClock.now());
        assert!(renewed > Duration::from_secs(59), "{renewed:?}");
        // The holder's longer TTL counts.
        let longer = pg.sight(&row(Some("b"), 8, 0, 120_000), BootClock.now());
        assert!(longer > Duration::from_secs(119), "{longer:?}");
        // A released row is free at once.
        assert_eq!(
            pg.sight(&row(None, 8, 1, 120_000), BootClock.now()),
            Duration::ZERO
        );
        // A sighting first made a full TTL ago is ripe: exactly it may be taken over.
        let long_ago = BootClock.now().saturating_sub(Duration::from_secs(61));
        assert_eq!(
            pg.sight(&row(Some("c"), 9, 5, 1_000), long_ago),
            Duration::ZERO
        );
        let ripe = pg.ripe().expect("ripe");
        assert_eq!(
            (ripe.holder.as_str(), ripe.token, ripe.renewals),
            ("c", 9, 5)
        );
    }

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
