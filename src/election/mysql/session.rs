//! Sessions: connecting to the first writable host, setting the session up, the client-side
//! timer on every request, and the tables (made, or found and checked to be leader-exec's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};

use super::target::SslMode;
use super::{MySql, StoreError, take};
use crate::clock::{BootClock, Clock};

/// What every session of leader-exec's runs first, so that a server's defaults cannot change
/// what its statements mean: strict mode, no backslash escapes in literals (none are written:
/// values are hex or digits, but a literal must read the same everywhere), READ COMMITTED (a
/// locking read and every UPDATE act on the latest committed row, and no gap locks), UTC for
/// `NOW(6)` and DATETIME values, a binary collation, autocommit for the one-statement requests,
/// and the least lock wait InnoDB has (whole seconds: the client's timer bounds it further).
/// Then `@leader_exec_server`, the server's `server_id`, which every write of a lease row stamps
/// it with (as a value, so that a replica applies the same number whatever the binary log's
/// format): `mod.rs`, `row_columns`. Then what the session found: whether the server is
/// read-only, its version, the database, and its binary log's format.
const SETUP: &str = "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,\
ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,NO_BACKSLASH_ESCAPES',
    time_zone = '+00:00', autocommit = 1, innodb_lock_wait_timeout = 1,
    character_set_client = utf8mb4, character_set_connection = utf8mb4,
    character_set_results = utf8mb4, collation_connection = utf8mb4_bin;
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET @leader_exec_server = @@global.server_id;
SELECT @@global.read_only, @@innodb_read_only, VERSION(), DATABASE(), @@log_bin,
    @@binlog_format";

/// Whether the warning about a password used without a verified certificate has been given
/// (once per process).
static CLEARTEXT_WARNED: AtomicBool = AtomicBool::new(false);

/// The comment that marks a table as leader-exec's (with its kind: `leases`, `tokens`) and its
/// version: the leases and tokens tables are at v2 (their `server_id` column), the others at v1.
fn marker(kind: &str) -> String {
    format!("leader-exec {kind} v{}", version(kind))
}

fn version(kind: &str) -> u32 {
    match kind {
        "leases" | "tokens" => 2,
        _ => 1,
    }
}

impl MySql {
    /// A session on the first host of the URL that is writable, set up and checked.
    pub(super) async fn connect(&self) -> Result<Conn, StoreError> {
        let target = &self.shared.target;
        let mut last = None;
        for (host, port) in &target.hosts {
            match self.connect_to(host, *port).await {
                Ok(conn) => return Ok(conn),
                Err(e) => {
                    tracing::debug!(host, port, error = %e, "MySQL host not used");
                    if !e.is_transient() {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Fatal("MySQL: no host in the URL".into())))
    }

    async fn connect_to(&self, host: &str, port: u16) -> Result<Conn, StoreError> {
        let target = &self.shared.target;
        let shown = format!("{host}:{port}");
        let tls = match target.ssl_mode {
            SslMode::Disabled => None,
            mode => {
                let mut opts = SslOpts::default();
                if let Some(ca) = &target.ca {
                    opts = opts.with_root_certs(vec![ca.clone().into()]);
                }
                match mode {
                    SslMode::Preferred | SslMode::Required => {
                        opts = opts.with_danger_accept_invalid_certs(true);
                    }
                    SslMode::VerifyCa => opts = opts.with_danger_skip_domain_validation(true),
                    SslMode::Disabled | SslMode::VerifyIdentity => {}
                }
                Some(opts)
            }
        };
        let opts = |tls: Option<SslOpts>| {
            OptsBuilder::default()
                .ip_or_hostname(host)
                .tcp_port(port)
                .user(Some(target.user.clone()))
                .pass(target.password.clone())
                .db_name(Some(target.database.clone()))
                // The host and port asked for, never a Unix socket the server names.
                .prefer_socket(false)
                // Matched rows, not changed ones (see the module's header).
                .client_found_rows(true)
                // The password itself (caching_sha2_password's full authentication,
                // mysql_clear_password) only to a verified server or where the URL allows it:
                // otherwise the driver refuses before writing it (vendor/mysql_async/PATCHES.md).
                .enable_cleartext_plugin(target.may_send_password())
                .ssl_opts(tls)
        };
        let limit = self.shared.connect_timeout.min(Duration::from_secs(3));
        let (shown, opts) = (shown.as_str(), &opts);
        let connect = |tls| async move {
            match tokio::time::timeout(limit, Conn::new(opts(tls))).await {
                Ok(result) => result.map_err(|e| classify(e, shown)),
                Err(_) => Err(StoreError::Transient(format!(
                    "MySQL at {shown}: no answer within {}",
                    humantime::format_duration(limit)
                ))),
            }
        };
        // Without a verified certificate whatever answers at the address — a process that bound
        // the port while the server was down, a host in the path — is sent mysql_native_password's
        // challenge-response hash, which can be cracked. (The password itself it does not get:
        // `may_send_password`.) Said once, before the first login, as for PostgreSQL.
        if !target.ssl_mode.verified()
            && target.password.is_some()
            && !CLEARTEXT_WARNED.swap(true, Ordering::SeqCst)
        {
            tracing::warn!(
                event = "cleartext-password",
                "the MySQL password is used with {} without a verified certificate (ssl-mode={}); use ssl-mode=VERIFY_IDENTITY or VERIFY_CA",
                target.shown,
                target.ssl_mode.name()
            );
        }
        let mut conn = match connect(tls).await {
            // PREFERRED, as the mysql client: plain TCP where the server offers no TLS.
            Err(StoreError::Fatal(m))
                if target.ssl_mode == SslMode::Preferred && m.contains(NO_TLS) =>
            {
                connect(None).await?
            }
            other => other?,
        };
        let mut found = self
            .run_as_is(&mut conn, SETUP.to_owned())
            .await
            .map_err(|(e, _)| e)?;
        let mut row = found
            .pop()
            .ok_or_else(|| StoreError::Fatal("MySQL: the session check answered nothing".into()))?;
        let read_only: i64 = take(&mut row, 0)?;
        let innodb_read_only: i64 = take(&mut row, 1)?;
        let version: String = take(&mut row, 2)?;
        if read_only != 0 || innodb_read_only != 0 {
            // A replica, or an old primary after a failover: worth trying again (a failover
            // may make one writable), and never used.
            return Err(StoreError::Transient(format!(
                "MySQL at {shown} ({version}) is read-only (read_only is on): only a writable primary is used"
            )));
        }
        let log_bin: i64 = take(&mut row, 4)?;
        let binlog_format: String = take(&mut row, 5)?;
        if log_bin != 0 && binlog_format.eq_ignore_ascii_case("STATEMENT") {
            // InnoDB refuses every write under READ COMMITTED to a statement-based binary log
            // (error 1665): say why once, at the start, rather than at the first write.
            return Err(StoreError::Fatal(format!(
                "MySQL at {shown}: binlog_format is STATEMENT; leader-exec's READ COMMITTED transactions need ROW or MIXED"
            )));
        }
        tracing::debug!(host, port, version, "MySQL session set up");
        Ok(conn)
    }

    /// Runs `batch` on `conn` under the request timer, after [`WRITABLE`](super::WRITABLE): on a
    /// server that is read-only by now nothing of it runs, and the request fails as on an
    /// unreachable server. The rows of every result set, in order.
    pub(super) async fn run(
        &self,
        conn: &mut Conn,
        batch: String,
    ) -> Result<Vec<mysql_async::Row>, StoreError> {
        self.run_keeping(conn, batch).await.map_err(|(e, _)| e)
    }

    /// [`run`](Self::run), and on a failure whether `conn` may be used again: a statement the
    /// server refused (a lock wait, a deadlock, read-only) ends the batch there, and a
    /// `ROLLBACK` on the same session, under what is left of the timer, undoes whatever of it
    /// ran; anything else (no answer in time, the connection lost) leaves the session to be
    /// dropped, which the server rolls back.
    pub(super) async fn run_keeping(
        &self,
        conn: &mut Conn,
        batch: String,
    ) -> Result<Vec<mysql_async::Row>, (StoreError, bool)> {
        self.run_as_is(conn, format!("{};\n{batch}", super::WRITABLE))
            .await
    }

    /// Runs `batch` on `conn` under the request timer, as it is.
    async fn run_as_is(
        &self,
        conn: &mut Conn,
        batch: String,
    ) -> Result<Vec<mysql_async::Row>, (StoreError, bool)> {
        let limit = self.shared.request_timeout;
        let until = tokio::time::Instant::now() + limit;
        let work = async {
            let mut result = conn.query_iter(batch).await?;
            let mut rows = Vec::new();
            loop {
                rows.extend(result.collect::<mysql_async::Row>().await?);
                if result.is_empty() {
                    break;
                }
            }
            // The server stops a batch at its first failing statement; the driver keeps that
            // error in what is left of the answer, and `is_empty` can say "no more" before it
            // was read. Reading the rest surfaces it: a batch whose later statement failed (a
            // lock wait, a deadlock, a missing table, a refused write) is an error, not an
            // answer with fewer rows (and not a transaction left open on the session, which
            // the next batch's `START TRANSACTION` would commit half done).
            result.drop_result().await?;
            Ok::<_, mysql_async::Error>(rows)
        };
        let shown = &self.shared.target.shown;
        match tokio::time::timeout_at(until, work).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(mysql_async::Error::Server(e))) => {
                // Not kept: a server that turned read-only (the next session goes to a writable
                // host), a table that is gone (the next session makes it again).
                let other_session = matches!(e.code, 1242 | 1146);
                let error = classify(mysql_async::Error::Server(e), shown);
                let rolled_back = !other_session
                    && matches!(
                        tokio::time::timeout_at(until, conn.query_drop("ROLLBACK")).await,
                        Ok(Ok(()))
                    );
                Err((error, rolled_back))
            }
            Ok(Err(e)) => Err((classify(e, shown), false)),
            Err(_) => Err((
                StoreError::Transient(format!(
                    "MySQL: no answer within {}",
                    humantime::format_duration(limit)
                )),
                false,
            )),
        }
    }

    /// Runs `batch` on the shared session (opened, set up and the tables checked first, when
    /// needed). A failure drops the session unless the server refused a statement and the
    /// session was rolled back (`run_keeping`): a batch cut short by the timer or a lost
    /// connection may have left a transaction open, which the server rolls back when the
    /// connection goes.
    ///
    /// A request never waits for another request's session: while the shared one is in use (a
    /// request in flight, or the future of one that its caller set aside without polling it
    /// again, which keeps the session until it is dropped), this one runs on a session of its
    /// own, opened for it and closed after it. Otherwise a release after a lost lease could wait
    /// for a look at handover requests that nobody polls any more, and give up unanswered.
    pub(super) async fn query(&self, batch: String) -> Result<Vec<mysql_async::Row>, StoreError> {
        let Ok(mut guard) = self.shared.conn.try_lock() else {
            let mut conn = self.open_session(false).await?;
            return self.run(&mut conn, batch).await;
        };
        if guard.is_none() {
            *guard = Some(self.open_session(false).await?);
        }
        let conn = guard.as_mut().expect("just opened");
        if self.check_due() {
            // A session kept open: the tables looked at again (see `CHECK_EVERY`).
            if let Err(e) = self.ensure_tables(conn, false).await {
                *guard = None;
                return Err(e);
            }
        }
        match self.run_keeping(conn, batch).await {
            Ok(rows) => Ok(rows),
            Err((e, kept)) => {
                if !kept {
                    *guard = None;
                }
                if e.to_string().contains(NO_TABLE_TEXT) {
                    // The tables were dropped: made again by the next session.
                    self.shared.tables_ready.store(false, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    /// A new session, with the tables made if this process has not made or found them yet, and
    /// checked: always with `check` (the renewals' own session), otherwise when this process
    /// has not checked them for [`CHECK_EVERY`]. A trigger or a view swapped in (by a rename)
    /// while a leader runs is refused by the next session that would use it, or within
    /// `CHECK_EVERY` by the session the leader keeps; its renewals then fail for good.
    pub(super) async fn open_session(&self, check: bool) -> Result<Conn, StoreError> {
        let mut conn = self.connect().await?;
        let make = !self.shared.tables_ready.load(Ordering::SeqCst);
        if make || check || self.check_due() {
            self.ensure_tables(&mut conn, make).await?;
            self.shared.tables_ready.store(true, Ordering::SeqCst);
        }
        Ok(conn)
    }

    /// Whether the tables are due for another look (none for `CHECK_EVERY`).
    fn check_due(&self) -> bool {
        let checked = self.shared.checked.lock().expect("not poisoned");
        checked
            .0
            .is_none_or(|at| BootClock.now().saturating_sub(at) >= CHECK_EVERY)
    }

    /// The refusal a check of the tables made, if one did: every renewal answers with it.
    pub(super) fn refusal(&self) -> Option<StoreError> {
        let checked = self.shared.checked.lock().expect("not poisoned");
        checked.1.clone().map(StoreError::Fatal)
    }

    /// Notes the outcome of a check of the tables.
    fn note_check(&self, outcome: &Result<(), StoreError>) {
        let mut checked = self.shared.checked.lock().expect("not poisoned");
        match outcome {
            Ok(()) => checked.0 = Some(BootClock.now()),
            Err(StoreError::Fatal(m)) => checked.1 = Some(m.clone()),
            Err(_) => {}
        }
    }

    /// Opens the shared session (and makes or checks the tables) if it is not open.
    pub(super) async fn ready(&self) -> Result<(), StoreError> {
        self.query("SELECT 1".to_owned()).await.map(drop)
    }

    /// Makes the tables where they are missing (with `make`), then refuses the session if
    /// anything of their names is not leader-exec's: a table without its marker (made by someone
    /// else, or a planted copy), a view, or a trigger on either table (which could change what a
    /// statement writes). `IF NOT EXISTS` leaves whatever is there alone, so the look after it
    /// sees what the statements will meet. A leases or tokens table of the version before
    /// (v1, without `server_id`) gets the column; its rows then read as another server's
    /// (`mod.rs`, `row_columns`): each is taken over once, a TTL after it was last renewed.
    /// Last, the tokens table's table-wide row is made if it is missing: naming this server on
    /// tables whose rows are all its own, no server on others.
    pub(super) async fn ensure_tables(
        &self,
        conn: &mut Conn,
        make: bool,
    ) -> Result<(), StoreError> {
        let outcome = self.make_and_check(conn, make).await;
        self.note_check(&outcome);
        outcome
    }

    async fn make_and_check(&self, conn: &mut Conn, make: bool) -> Result<(), StoreError> {
        let (leases, tokens, records, fences, waiters) = (
            &self.shared.leases,
            &self.shared.tokens,
            &self.shared.records,
            &self.shared.fences,
            &self.shared.waiters,
        );
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {tokens_q} (
                 name VARBINARY(512) NOT NULL PRIMARY KEY,
                 top BIGINT NOT NULL,
                 server_id BIGINT NULL
             ) ENGINE = InnoDB COMMENT = '{tokens_marker}';
             CREATE TABLE IF NOT EXISTS {leases_q} (
                 name VARBINARY(512) NOT NULL PRIMARY KEY,
                 holder VARBINARY(2048) NULL,
                 token BIGINT NOT NULL,
                 renewals BIGINT NOT NULL,
                 expires_at DATETIME(6) NOT NULL,
                 ttl_ms BIGINT NOT NULL,
                 max_holders BIGINT NOT NULL,
                 server_id BIGINT NULL
             ) ENGINE = InnoDB COMMENT = '{leases_marker}';
             CREATE TABLE IF NOT EXISTS {records_q} (
                 `key` VARBINARY(1024) NOT NULL PRIMARY KEY,
                 value LONGBLOB NOT NULL,
                 expires_at DATETIME(6) NULL,
                 lease_name VARBINARY(512) NULL,
                 lease_token BIGINT NULL
             ) ENGINE = InnoDB COMMENT = '{records_marker}';
             CREATE TABLE IF NOT EXISTS {fences_q} (
                 name VARBINARY(512) NOT NULL PRIMARY KEY,
                 holder VARBINARY(2048) NULL,
                 token BIGINT NOT NULL
             ) ENGINE = InnoDB COMMENT = '{fences_marker}';
             CREATE TABLE IF NOT EXISTS {waiters_q} (
                 name VARBINARY(512) NOT NULL,
                 id BIGINT NOT NULL,
                 identity VARBINARY(2048) NOT NULL,
                 renewals BIGINT NOT NULL,
                 ttl_ms BIGINT NOT NULL,
                 expires_at DATETIME(6) NOT NULL,
                 max_holders BIGINT NOT NULL DEFAULT 1,
                 PRIMARY KEY (name, id)
             ) ENGINE = InnoDB COMMENT = '{waiters_marker}';
             ",
            tokens_q = self.tokens(),
            leases_q = self.leases(),
            tokens_marker = marker("tokens"),
            leases_marker = marker("leases"),
            records_q = self.records(),
            records_marker = marker("records"),
            fences_q = self.fences(),
            fences_marker = marker("fences"),
            waiters_q = self.waiters(),
            waiters_marker = marker("waiters"),
        );
        let look = format!(
            "SELECT table_name, table_type, table_comment FROM information_schema.tables
                 WHERE table_schema = DATABASE() AND table_name IN ('{leases}', '{tokens}', '{records}', '{fences}', '{waiters}');
             SELECT trigger_name, event_object_table FROM information_schema.triggers
                 WHERE trigger_schema = DATABASE() AND event_object_table IN ('{leases}', '{tokens}', '{records}', '{fences}', '{waiters}')"
        );
        let rows = self
            .run(conn, if make { format!("{ddl}{look}") } else { look })
            .await?;
        let database = &self.shared.target.database;
        let mut upgrade = Vec::new();
        for mut row in rows {
            // The tables' rows have three columns, the triggers' two.
            if row.len() == 2 {
                let trigger: String = take(&mut row, 0)?;
                let table: String = take(&mut row, 1)?;
                return Err(StoreError::Fatal(format!(
                    "MySQL: a trigger {trigger} on {database}.{table}, which leader-exec did not make: drop it, or give another --prefix"
                )));
            }
            let table: String = take(&mut row, 0)?;
            let kind: String = take(&mut row, 1)?;
            let comment: String = take(&mut row, 2)?;
            let wanted = match table.as_str() {
                t if t == leases => "leases",
                t if t == records => "records",
                t if t == fences => "fences",
                t if t == waiters => "waiters",
                _ => "tokens",
            };
            if kind != "BASE TABLE" {
                return Err(StoreError::Fatal(format!(
                    "MySQL: {database}.{table} is a {} (leader-exec keeps a table of its own there): drop it, or give another --prefix",
                    kind.to_lowercase()
                )));
            }
            if version(wanted) == 2 && comment == format!("leader-exec {wanted} v1") {
                upgrade.push(format!(
                    "ALTER TABLE {} ADD COLUMN server_id BIGINT NULL, COMMENT = '{}'",
                    super::quote_ident(&table),
                    marker(wanted)
                ));
                continue;
            }
            if comment != marker(wanted) {
                return Err(StoreError::Fatal(format!(
                    "MySQL: {database}.{table} is a table leader-exec did not make (its comment is not '{}'): drop it, or give another --prefix",
                    marker(wanted)
                )));
            }
        }
        for alter in upgrade {
            match self.run(conn, alter).await {
                // Another instance added it first.
                Err(e) if e.to_string().contains("(1060)") => {}
                other => {
                    other?;
                }
            }
        }
        // The table-wide row names this server only on tables whose every row that remembers a
        // token is this server's: lease and tokens rows that it wrote last, fence rows of names
        // whose lease row is there (tables just made remember none). Missing from tables where
        // another server's rows are — deleted or truncated by hand, or never replicated before
        // this server was promoted — nobody knows which server issued their last tokens: the row
        // is made naming no server (NULL), so that every missing row is held for a sighting and
        // the next token of every name jumps (`TOKENS_ROW`), as after a failover. Named this
        // server there, a promoted replica that lacked the old primary's last tokens would issue
        // them again. The first takeover of another server's row names it (`table_row_sql`).
        self.run(
            conn,
            format!(
                "INSERT IGNORE INTO {tokens} (name, top, server_id)
                     SELECT {row}, 0, IF(
                         EXISTS (SELECT 1 FROM {leases} WHERE NOT (server_id <=> @leader_exec_server))
                         OR EXISTS (SELECT 1 FROM {tokens} WHERE NOT (server_id <=> @leader_exec_server))
                         OR EXISTS (SELECT 1 FROM {fences} f
                             WHERE NOT EXISTS (SELECT 1 FROM {leases} l WHERE l.name = f.name)),
                         NULL, @leader_exec_server)
                     FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM {tokens} WHERE name = {row})",
                tokens = self.tokens(),
                leases = self.leases(),
                fences = self.fences(),
                row = super::TABLE_ROW
            ),
        )
        .await?;
        Ok(())
    }
}

/// How long a process goes at most without looking at its tables again while it keeps a session
/// open. Every look reads `information_schema` (which MariaDB answers slowly under many
/// sessions at once: 200 instances looking on every new session queued hundreds of looks), so a
/// process looks when it first opens a session, when its renewals' session opens, and then at
/// most this often.
const CHECK_EVERY: Duration = Duration::from_secs(60);

/// What a server that offers no TLS makes the driver say (PREFERRED then goes on without it).
const NO_TLS: &str = "does not support TLS";

/// What a statement on a missing table says (error 1146).
pub(super) const NO_TABLE_TEXT: &str = "(1146)";

/// Sorts the driver's errors into "try again" and "give up", naming where (`shown`, without
/// a password) when it was the connection.
pub(super) fn classify(error: mysql_async::Error, shown: &str) -> StoreError {
    use mysql_async::{DriverError, Error};
    match error {
        // WRITABLE's refusal: the server turned read-only while the session was open.
        Error::Server(e) if e.code == 1242 => StoreError::Transient(format!(
            "MySQL at {shown} is read-only now (read_only is on): only a writable primary is used"
        )),
        Error::Server(e) => {
            let message = format!("MySQL: {} ({})", e.message, e.code);
            // Lock wait timeout, deadlock, read-only (a failover under way), too many
            // connections, shutting down, a killed connection or statement, a duplicate key
            // (two first runs racing), a table not there yet (made again by the next session).
            let transient = matches!(
                e.code,
                1205 | 1213 | 1290 | 1836 | 1040 | 1053 | 1927 | 1317 | 1062 | 1146 | 1969 | 3024
            );
            if transient {
                StoreError::Transient(message)
            } else if matches!(e.code, 1044 | 1045 | 1049) {
                StoreError::Fatal(format!("{message} (server {shown})"))
            } else {
                StoreError::Fatal(message)
            }
        }
        Error::Driver(DriverError::NoClientSslFlagFromServer) => StoreError::Fatal(format!(
            "MySQL at {shown}: the server {NO_TLS} (ssl-mode asks for it)"
        )),
        // The vendored driver's refusal to send the password itself (`may_send_password`).
        Error::Driver(DriverError::CleartextPluginDisabled) => StoreError::Fatal(format!(
            "MySQL at {shown} asks for the password itself (caching_sha2_password's full authentication, or mysql_clear_password) and its certificate is not verified: not sent; use ssl-mode=VERIFY_CA&ssl-ca=FILE (or VERIFY_IDENTITY), or for a test server on this host allow-unverified-password=true"
        )),
        Error::Io(mysql_async::IoError::Tls(e)) => {
            StoreError::Fatal(format!("MySQL at {shown}: TLS: {e}"))
        }
        // rustls's refusals of a certificate come through as I/O errors: trying again will not
        // make the certificate pass.
        other if other.to_string().contains("certificate") => {
            StoreError::Fatal(format!("MySQL at {shown}: TLS: {other}"))
        }
        other => StoreError::Transient(format!("MySQL unreachable at {shown}: {other}")),
    }
}
