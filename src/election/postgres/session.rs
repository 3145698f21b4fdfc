//! Sessions: opening one on a primary, checking it, the schema (made and kept up to date),
//! and every request bounded by its own timer.

use super::*;

/// What the start's look at the catalogs found ([`Postgres::look_at_tables`]).
pub(super) struct Look {
    /// The tables are there, in the current layout.
    pub complete: bool,
    /// An object the ownership check covers is owned by another role.
    pub foreign: bool,
    /// The refusal of a schema another role owns or may create objects in.
    pub unsafe_schema: Option<String>,
}

impl Postgres {
    /// Opens a session; notifications (when `heard` is given) go to the waiters.
    pub(super) async fn open(&self, listen: bool) -> Result<Client, StoreError> {
        let client = self.open_unchecked(listen).await?;
        self.checked(&client).await?;
        Ok(client)
    }

    /// [`check_session`](Self::check_session) under the same bound as a connect.
    pub(super) async fn checked(&self, client: &Client) -> Result<(), StoreError> {
        let limit = self.shared.request_timeout * 4 + Duration::from_secs(1);
        match tokio::time::timeout(limit, self.check_session(client)).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Transient(format!(
                "PostgreSQL at {} did not answer",
                self.shared.target.shown
            ))),
        }
    }

    /// Connects (`connect.rs`); the session is not checked yet. The warning about a password
    /// used without a verified certificate comes before the first login.
    pub(super) async fn open_unchecked(&self, listen: bool) -> Result<Client, StoreError> {
        let shared = &self.shared;
        let heard = listen.then(|| Ears {
            heard: shared.heard.clone(),
            name: shared.name.clone(),
            probe: shared.probe.clone(),
        });
        self.warn_unverified();
        let attempt = async {
            let (client, connection) = self.connect().await?;
            tokio::spawn(drive(connection, heard));
            Ok(client)
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
    pub(super) async fn client(&self) -> Result<Arc<Client>, StoreError> {
        let mut slot = self.shared.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        *slot = None;
        let client = self.open_unchecked(false).await?;
        if !self.shared.unchecked {
            self.check_new(&client).await?;
        }
        let client = Arc::new(client);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Checks a new session, and the tables unless this process has found them ready: what
    /// every session goes through before it is used (save the campaign's first, whose checks
    /// ride with its first attempt: `check_and_try`).
    pub(super) async fn check_new(&self, client: &Client) -> Result<(), StoreError> {
        // The session check and the look at the tables (with their ownership check) in one
        // round trip: tokio-postgres pipelines requests issued concurrently on one client. The
        // look names the schema the check pins (`current_schema()`, which the pin keeps), so it
        // reads the same tables whichever the server runs first; its answer counts only once
        // the check has passed, and nothing is written (no DDL, no lease row) before both
        // answers are in: a standby, a table found in a later schema, or an object another
        // role owns is refused before leader-exec writes anything.
        let ready = *self.shared.schema_ready.lock().expect("not poisoned");
        let look = async {
            match ready {
                true => None,
                false => Some(self.look_at_tables(client).await),
            }
        };
        let limit = self.shared.request_timeout * 4 + Duration::from_secs(1);
        let (checked, looked) = tokio::time::timeout(
            limit,
            futures_util::future::join(self.check_session(client), look),
        )
        .await
        .map_err(|_| {
            StoreError::Transient(format!(
                "PostgreSQL at {} did not answer",
                self.shared.target.shown
            ))
        })?;
        checked?;
        if let Some(looked) = looked {
            self.ensure_schema(client, looked?).await?;
        }
        Ok(())
    }

    /// Runs one request on the shared session under the request timer; a session that timed
    /// out or failed is dropped, so that no later request queues behind a lost one.
    pub(super) async fn request<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
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
    /// pinned to leader-exec's schema.
    pub(super) async fn check_session(&self, client: &Client) -> Result<(), StoreError> {
        let shared = &self.shared;
        // One round trip (the simple-query protocol runs both statements in order): whether this is
        // a primary, the first schema of search_path, the table of this prefix found through it
        // (read before the second statement pins search_path) if that is another than the one in
        // that first schema (its oid), and the pin: to the schema this process already uses, or
        // (first session) to that first schema. A session that fails a check below is dropped, its
        // pin with it. The comparison is of two `to_regclass` answers, name lookups in the server's
        // catalog caches: no catalog is planned and read here, which is the costly part of a
        // statement on a new backend's cold caches. Only a table found elsewhere costs a second
        // statement, for the name of its schema.
        //
        // This statement runs before the pin, under whatever search_path the role, the database
        // or the URL gives (a schema of another role's may come before pg_catalog there): every
        // name in it is qualified (see the module's "SQL"); `found` differs from the table in the
        // first schema when that one is missing (its oid NULL, compared as 0) or another.
        let pin = self.pin_sql();
        // With one host, libpq's read-write answer rides here (see `Postgres::new`).
        let read_only = if shared.read_write_in_check {
            ", pg_catalog.current_setting('transaction_read_only'::pg_catalog.text)"
        } else {
            ""
        };
        let messages = client
            .simple_query(&format!(
                "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_schema()::pg_catalog.text,
                        (SELECT found FROM (SELECT pg_catalog.to_regclass({table})::pg_catalog.oid AS found) AS f
                         WHERE found OPERATOR(pg_catalog.<>) COALESCE(pg_catalog.to_regclass(
                            pg_catalog.quote_ident(pg_catalog.current_schema()::pg_catalog.text)
                            OPERATOR(pg_catalog.||) '.'::pg_catalog.text OPERATOR(pg_catalog.||) {table}
                         )::pg_catalog.oid, 0::pg_catalog.oid)){read_only};
                 {pin}",
                table = text_literal(&quote_ident(&shared.leases)),
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
        // What read-write refuses (a server that does not allow writes), asked here with one host.
        if shared.read_write_in_check && row.get(3) != Some("off") {
            return Err(StoreError::Transient(format!(
                "PostgreSQL at {}: the server does not allow writes (transaction_read_only is on); only a primary is used",
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
                if let Some(oid) = row.get(2) {
                    use crate::escape::escape_str;
                    let found = self.schema_of(client, oid).await?;
                    return Err(StoreError::Fatal(format!(
                        "PostgreSQL: {table} is in schema {found}, but the first schema of \
                         search_path is {current}, where leader-exec would make new tables (tokens \
                         from 1 again): put {found} first in search_path \
                         (?options=-csearch_path%3D{found}) or move the tables",
                        table = escape_str(&shared.leases),
                        found = escape_str(&found),
                        current = escape_str(current),
                    )));
                }
                shared.schema.get_or_init(|| current.to_owned());
            }
        }
        // Names resolved through search_path (the pin above): this schema, and pg_catalog
        // (implicitly first). That alone does not keep another role's code out: an overload in
        // this schema whose argument types match better than pg_catalog's is taken over it, and
        // the schema may hold such objects of other roles (see the module's "SQL": every
        // operator, function and type is qualified with pg_catalog instead). Table names are
        // qualified as well (`qualified`): a pooler in transaction mode does not keep a
        // session's SET.
        Ok(())
    }

    /// The pin of `search_path`: to the schema this process already uses, or (first session) to
    /// the first schema of the session's own `search_path` (nothing when it names none).
    pub(super) fn pin_sql(&self) -> String {
        match self.shared.schema.get() {
            Some(schema) => format!("SET search_path = {}", quote_ident(schema)),
            None => "SELECT pg_catalog.set_config('search_path'::pg_catalog.text,
                                                  pg_catalog.quote_ident(s), false)
                     FROM (SELECT pg_catalog.current_schema()::pg_catalog.text AS s) AS first
                     WHERE s IS NOT NULL"
                .to_owned(),
        }
    }

    /// Once per process, before the first login: a warning when a password is given and the
    /// server's certificate is not verified. Whatever answers at the address then gets a SCRAM
    /// exchange to guess the password from offline, or with `require_auth` allowing them the
    /// password itself or its MD5 hash (refused otherwise: `auth.rs`). Unix sockets are not
    /// warned about: no one between.
    fn warn_unverified(&self) {
        let target = &self.shared.target;
        let config = &target.config;
        let on_network = !config.get_hostaddrs().is_empty()
            || config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)));
        if !target.verified
            && on_network
            && config.get_password().is_some()
            && !CLEARTEXT_WARNED.swap(true, Ordering::SeqCst)
        {
            tracing::warn!(
                event = "cleartext-password",
                "the PostgreSQL password is used with {} without a verified certificate \
                 (sslmode={}); use sslmode=verify-full (or verify-ca) with sslrootcert=FILE",
                target.shown,
                target.sslmode
            );
        }
    }

    /// The schema of the relation `oid` (the table the session check found through
    /// `search_path` in another than the first schema), for the message that says so.
    async fn schema_of(&self, client: &Client, oid: &str) -> Result<String, StoreError> {
        let oid: u32 = oid.parse().map_err(|_| {
            StoreError::Transient(format!("PostgreSQL: {oid:?} is not a relation's oid"))
        })?;
        let rows = client
            .simple_query(&format!(
                "SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                 WHERE c.oid OPERATOR(pg_catalog.=) '{oid}'::pg_catalog.oid"
            ))
            .await
            .map_err(classify)?;
        Ok(rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap_or_default())
    }

    /// Whether the schema is safe, whether the tables are complete (the current layout), and
    /// whether any object the ownership check covers is owned by another role, in one
    /// statement; before the session check's answer, so in the schema that check pins
    /// (`current_schema()` until this process knows it).
    ///
    /// The schema is safe when every role that owns it or holds CREATE on it (PUBLIC included)
    /// is trusted: the connecting role, a role it is explicitly a member of (as the ownership
    /// check counts them), a member of the connecting role (it can act as that role anyway), or
    /// a superuser; `pg_database_owner` stands for the database's owner. Any other such role
    /// could add, at any time, an object leader-exec would use or run (a table of the prefix's
    /// name before the first run, a trigger's function): refused before anything else is read
    /// or written there. Objects other roles already own in a safe schema are not refused (an
    /// upgraded cluster keeps those made before `REVOKE CREATE … FROM PUBLIC`): no statement
    /// resolves a name to them (the module's "SQL"), save the ones the ownership check covers.
    ///
    /// The statement reads the same objects as [`refuse_foreign_objects`] (every relation and
    /// function named with the prefix, the function of every trigger on those relations) and
    /// holds their owners against the same roles, but answers only with two booleans and, for
    /// an unsafe schema, the first role that makes it so: no message is composed for a safe
    /// one, nothing is sorted. On a new backend's cold caches the statements a start plans, not
    /// their rows, are its cost, and this is the start's one look at the catalogs. Only a `true`
    /// (an object another role owns) costs the full check, which names the object; tables not
    /// complete are made (`ensure_schema`) once neither refusal applies.
    ///
    /// [`refuse_foreign_objects`]: Self::refuse_foreign_objects
    pub(super) async fn look_at_tables(&self, client: &Client) -> Result<Look, StoreError> {
        let shared = &self.shared;
        let schema = shared.schema.get().cloned();
        let prefix = self.prefix();
        let (low, high) = name_bounds(&prefix);
        // Everything the current layout needs, so that tables made by an earlier version are
        // brought up to date (the `renewals` column, the token sequence, the guard trigger, the
        // waiters table, `max_holders`, `top_token`, the fence index). A role not found would be
        // a NULL in `mine`: left out, so that then every object counts as another role's (fail
        // closed); likewise an unknown answer of `pg_has_role` counts as untrusted.
        let fence = self.fence_index();
        let params: [&dyn unnamed::Param; 10] = [
            &schema,
            &shared.leases,
            &shared.records,
            &shared.tokens,
            &shared.guard,
            &shared.waiters,
            &prefix,
            &low,
            &high,
            &fence,
        ];
        let row = unnamed::query_one(client, LOOK, &params)
            .await
            .map_err(classify)?;
        use crate::escape::escape_str;
        let unsafe_schema = match (
            row.get::<_, Option<String>>(3),
            row.get::<_, Option<String>>(4),
        ) {
            (Some(how), Some(who)) => {
                let schema: String = row.get(2);
                let user: String = row.get(5);
                let (schema_id, who_id) = (quote_ident(&schema), quote_ident(&who));
                let fix = match how.as_str() {
                    "owns" => format!("ALTER SCHEMA {schema_id} OWNER TO {}", quote_ident(&user)),
                    _ if who == "PUBLIC" => {
                        format!("REVOKE CREATE ON SCHEMA {schema_id} FROM PUBLIC")
                    }
                    _ => format!("REVOKE CREATE ON SCHEMA {schema_id} FROM {who_id}"),
                };
                Some(format!(
                    "PostgreSQL: role {who} {how} schema {schema}, leader-exec's (the first of \
                     search_path): it could plant objects there that run as {user}; not used. \
                     {fix}, or give leader-exec a schema of its own (?options=-csearch_path%3DNAME \
                     in the URL) (docs/postgresql.md: Schema)",
                    who = escape_str(&who),
                    schema = escape_str(&schema),
                    user = escape_str(&user),
                    fix = escape_str(&fix),
                ))
            }
            _ => None,
        };
        Ok(Look {
            complete: row.get(0),
            foreign: row.get(1),
            unsafe_schema,
        })
    }

    /// Refuses a schema that [`look_at_tables`] found unsafe, and (before any statement reads
    /// the tables) objects another role owns that the ownership check covers (the full check
    /// says which); then makes the tables, or brings them up to date, unless they were found
    /// complete.
    ///
    /// [`look_at_tables`]: Self::look_at_tables
    pub(super) async fn ensure_schema(
        &self,
        client: &Client,
        look: Look,
    ) -> Result<(), StoreError> {
        if let Some(refusal) = look.unsafe_schema {
            return Err(StoreError::Fatal(refusal));
        }
        let (exists, foreign) = (look.complete, look.foreign);
        let leases = self.leases();
        let records = self.records();
        let tokens = self.qualified(&self.shared.tokens);
        let waiters = self.qualified(&self.shared.waiters);
        // A trigger's name is not schema-qualified; its function's is.
        let guard = quote_ident(&self.shared.guard);
        let guard_fn = self.qualified(&self.shared.guard);
        // Ownership is decided before any statement touches the tables: a table another role
        // owns may carry that role's code (a trigger, a column of its type whose aggregate or
        // operator is its own, a policy), which would run as the connecting role in the first
        // DDL statement that reads it, and a ROLLBACK undoes none of what it did.
        if foreign {
            self.refuse_foreign_objects(client).await?;
        }
        if !exists {
            // Two first runs at once would race in the catalog (a unique violation on pg_type,
            // say): each tries, briefly, a transaction-scoped advisory lock that orders them,
            // and goes on without it when that does not come (the key is computable by anyone,
            // and an advisory lock has no permissions: any role that can connect may hold it
            // for ever). Every statement is idempotent, and a transaction that lost a race in
            // the catalog is rolled back and tried again. Leadership never depends on the lock.
            //
            // Tokens come from a sequence the tables do not own: dropping and recreating the
            // tables keeps it, and it is set above every token the table holds whenever it is
            // (re)made. The guard refuses DELETE and TRUNCATE of lease rows (a lease is freed by
            // releasing it: `leader-exec resign`); a superuser who drops the trigger or the
            // tables still gets greater tokens from the sequence.
            // The ownership check runs again before the COMMIT (for objects a trusted role made
            // since the look): a refusal leaves nothing behind.
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {leases} (
                     name pg_catalog.text PRIMARY KEY,
                     holder pg_catalog.text,
                     token bigint NOT NULL,
                     expires_at pg_catalog.timestamptz NOT NULL,
                     ttl_ms bigint NOT NULL DEFAULT 0,
                     renewals bigint NOT NULL DEFAULT 0,
                     max_holders bigint NOT NULL DEFAULT 1,
                     top_token bigint NOT NULL DEFAULT 0
                 );
                 ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS renewals bigint NOT NULL DEFAULT 0;
                 ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS max_holders bigint NOT NULL DEFAULT 1;
                 ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS top_token bigint NOT NULL DEFAULT 0;
                 CREATE UNIQUE INDEX IF NOT EXISTS {fence} ON {leases} (name, holder, token);
                 DO $do$ BEGIN
                     IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                                    WHERE i.indexrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass({fence_literal}::pg_catalog.text)
                                      AND i.indrelid OPERATOR(pg_catalog.=) {leases_literal}::pg_catalog.regclass
                                      AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
                                      AND i.indnkeyatts OPERATOR(pg_catalog.=) 3::pg_catalog.int2) THEN
                         RAISE EXCEPTION 'leader-exec: % is not a unique index on (name, holder, token) of %: the fencing recipe needs one', {fence_literal}::pg_catalog.text, {leases_literal}::pg_catalog.text
                             USING ERRCODE = 'object_not_in_prerequisite_state';
                     END IF;
                 END $do$;
                 CREATE TABLE IF NOT EXISTS {records} (
                     key pg_catalog.text PRIMARY KEY,
                     value pg_catalog.bytea NOT NULL,
                     expires_at pg_catalog.timestamptz,
                     lease_name pg_catalog.text,
                     lease_token bigint
                 );
                 CREATE TABLE IF NOT EXISTS {waiters} (
                     name pg_catalog.text NOT NULL,
                     id bigserial NOT NULL,
                     identity pg_catalog.text NOT NULL,
                     renewals bigint NOT NULL DEFAULT 0,
                     ttl_ms bigint NOT NULL,
                     expires_at pg_catalog.timestamptz NOT NULL,
                     max_holders bigint NOT NULL DEFAULT 1,
                     PRIMARY KEY (name, id)
                 );
                 ALTER TABLE {waiters} ADD COLUMN IF NOT EXISTS max_holders bigint NOT NULL DEFAULT 1;
                 CREATE SEQUENCE IF NOT EXISTS {tokens};
                 SELECT CASE WHEN t.m OPERATOR(pg_catalog.>=) s.last_value
                             THEN pg_catalog.setval({tokens_literal}::pg_catalog.regclass, t.m) END
                 FROM (SELECT COALESCE(pg_catalog.max(token), 0::pg_catalog.int8) AS m FROM {leases}) t,
                      {tokens} s;
                 CREATE OR REPLACE FUNCTION {guard_fn}() RETURNS pg_catalog.trigger LANGUAGE plpgsql AS $guard$
                 BEGIN
                     RAISE EXCEPTION 'leader-exec: % of %.% refused: a lease row keeps its fencing token; free a lease with leader-exec resign', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
                         USING ERRCODE = 'restrict_violation';
                 END $guard$;
                 DO $do$ BEGIN
                     IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                                    WHERE tgrelid OPERATOR(pg_catalog.=) {leases_literal}::pg_catalog.regclass::pg_catalog.oid
                                      AND tgname OPERATOR(pg_catalog.=) {guard_literal}::pg_catalog.name) THEN
                         CREATE TRIGGER {guard} BEFORE DELETE OR TRUNCATE ON {leases}
                             FOR EACH STATEMENT EXECUTE FUNCTION {guard_fn}();
                     END IF;
                 END $do$;",
                tokens_literal = quote_literal(&tokens),
                leases_literal = quote_literal(&leases),
                guard_literal = quote_literal(&self.shared.guard),
                fence = quote_ident(&self.fence_index()),
                fence_literal = quote_literal(&self.qualified(&self.fence_index())),
            );
            let mut attempt = 0;
            loop {
                attempt += 1;
                let done = tokio::time::timeout(Duration::from_secs(35), async {
                    self.begin_ddl(client).await?;
                    client.batch_execute(&ddl).await?;
                    Ok(())
                })
                .await
                .map_err(|_| StoreError::Transient("creating the tables took too long".into()))?;
                let failed = match done {
                    Ok(()) => match self.refuse_foreign_objects(client).await {
                        Ok(()) => match client.batch_execute("COMMIT").await {
                            Ok(()) => break,
                            Err(e) => DdlError::Sql(e),
                        },
                        Err(e) => DdlError::Refused(e),
                    },
                    Err(e) => e,
                };
                let _ = client.batch_execute("ROLLBACK").await;
                match failed {
                    DdlError::Refused(e) => return Err(e),
                    DdlError::Sql(e) if lost_a_catalog_race(&e) && attempt < 4 => {
                        tracing::debug!(error = %e, "making the tables raced another first run: again");
                    }
                    DdlError::Sql(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                        return Err(self.lock_holders(client).await);
                    }
                    DdlError::Sql(e) => return Err(classify(e)),
                }
            }
        }
        *self.shared.schema_ready.lock().expect("not poisoned") = true;
        Ok(())
    }

    /// Opens the transaction the first-run DDL runs in: its statements may wait for a lock at
    /// most half of --connect-timeout (then the holder is named: `lock_holders`), and the
    /// advisory lock that orders concurrent first runs is tried for a moment, not waited for.
    async fn begin_ddl(&self, client: &Client) -> Result<(), DdlError> {
        let connect = self.shared.connect_timeout;
        let lock_ms = (connect / 2)
            .clamp(Duration::from_millis(200), Duration::from_secs(30))
            .as_millis();
        client
            .batch_execute(&format!(
                "BEGIN; SET LOCAL statement_timeout = '30s'; SET LOCAL lock_timeout = '{lock_ms}ms'"
            ))
            .await?;
        let try_lock = format!(
            "SELECT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext(
                 'leader-exec schema '::pg_catalog.text
                 OPERATOR(pg_catalog.||) pg_catalog.current_schema()::pg_catalog.text
                 OPERATOR(pg_catalog.||) {channel}))::pg_catalog.text",
            channel = text_literal(&self.shared.channel),
        );
        let until = tokio::time::Instant::now()
            + (connect / 10).clamp(Duration::from_millis(50), Duration::from_millis(500));
        loop {
            let got =
                client.simple_query(&try_lock).await?.iter().any(
                    |m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("true")),
                );
            if got || tokio::time::Instant::now() >= until {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The refusal for a first-run DDL statement that waited too long for a lock: which
    /// sessions hold a lock on leader-exec's relations in the schema (pid, role, application),
    /// read after the rollback, so that whoever can end them knows which.
    async fn lock_holders(&self, client: &Client) -> StoreError {
        let schema = self.shared.schema.get().cloned().unwrap_or_default();
        let prefix = self.prefix();
        let holders = unnamed::query_one(
            client,
            "SELECT pg_catalog.string_agg(pg_catalog.format(
                        'pid %s (role %s, application %s)'::pg_catalog.text,
                        a.pid, a.usename, a.application_name), ', '::pg_catalog.text ORDER BY a.pid)
             FROM pg_catalog.pg_stat_activity a
             WHERE a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
               AND EXISTS (SELECT FROM pg_catalog.pg_locks l
                           JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) l.relation
                           WHERE l.pid OPERATOR(pg_catalog.=) a.pid AND l.granted
                             AND c.relnamespace OPERATOR(pg_catalog.=)
                                 pg_catalog.to_regnamespace(pg_catalog.quote_ident($1))::pg_catalog.oid
                             AND pg_catalog.starts_with(c.relname::pg_catalog.text, $2))",
            &[&schema, &prefix],
        )
        .await
        .ok()
        .and_then(|row| row.get::<_, Option<String>>(0));
        use crate::escape::escape_str;
        let held = match holders {
            Some(holders) => format!("held by {}", escape_str(&holders)),
            None => "whose holder has gone since".to_owned(),
        };
        StoreError::Fatal(format!(
            "PostgreSQL: making leader-exec's tables in schema {schema} waited for a lock on them \
             {held}: end that transaction, or run again once it is over",
            schema = escape_str(&schema),
        ))
    }

    /// Refuses objects leader-exec relies on that another role owns: every relation and
    /// function in the schema whose name starts with the table prefix (`<p>_`: the tables,
    /// their indexes, any sequence or function named for them), and the function of every
    /// trigger on those relations. Their owner could rewrite `token` (fencing gone) or run
    /// code with the privileges of the connecting role (a trigger runs as whoever writes the
    /// row: a superuser, say). Owned by the connecting role, or by a role it is explicitly a
    /// member of, is fine; a superuser's implicit power over every role does not count.
    pub(super) async fn refuse_foreign_objects(&self, client: &Client) -> Result<(), StoreError> {
        // Until this process knows its schema (the first session's look, pipelined with the
        // check that pins it): the session's current_schema(), which the pin keeps.
        let schema = self.shared.schema.get().cloned();
        let prefix = self.prefix();
        // Every name that starts with the prefix sorts, byte by byte as `name` compares (the C
        // collation), at or after the prefix and before the prefix with its last byte raised by
        // one: bounds the catalogs' name indexes can look up, where `starts_with` alone reads
        // every row of pg_proc (a cold new session's slowest part of this check). The bounds
        // only narrow the rows read; `starts_with` still decides. The connecting role and the
        // schema are looked up by name in the server's catalog caches (`to_regrole`,
        // `to_regnamespace`, of quoted names so that case is kept) rather than by reading
        // pg_roles (a view of two catalogs) and pg_namespace: on a new backend's cold caches,
        // planning such reads is most of what a statement costs. A role not found would be a
        // NULL in `mine`, which would make every `NOT IN` unknown (nothing refused): it is left
        // out, so that then everything is refused instead.
        let (low, high) = name_bounds(&prefix);
        let sql = "WITH RECURSIVE target_schema(name) AS (
                 SELECT COALESCE($1, pg_catalog.current_schema()::pg_catalog.text)
             ),
             mine(oid) AS (
                 SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER::pg_catalog.text))::pg_catalog.oid
                 UNION
                 SELECT m.roleid FROM pg_catalog.pg_auth_members m
                 JOIN mine ON m.member OPERATOR(pg_catalog.=) mine.oid
             ),
             ns(oid) AS (SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident(name))::pg_catalog.oid FROM target_schema),
             ours AS (
                 SELECT c.oid, c.relname, c.relkind, c.relowner FROM pg_catalog.pg_class c
                 WHERE c.relnamespace OPERATOR(pg_catalog.=) (SELECT oid FROM ns)
                   AND c.relname OPERATOR(pg_catalog.>=) $3::pg_catalog.name
                   AND ($4::pg_catalog.text IS NULL OR c.relname OPERATOR(pg_catalog.<) $4::pg_catalog.name)
                   AND pg_catalog.starts_with(c.relname::pg_catalog.text, $2)
             ),
             kinds(relkind, rank, kind) AS (VALUES
                 ('r'::pg_catalog.\"char\", 0, 'table'::pg_catalog.text),
                 ('p'::pg_catalog.\"char\", 0, 'table'::pg_catalog.text),
                 ('S'::pg_catalog.\"char\", 1, 'sequence'::pg_catalog.text),
                 ('i'::pg_catalog.\"char\", 1, 'index'::pg_catalog.text),
                 ('I'::pg_catalog.\"char\", 1, 'index'::pg_catalog.text),
                 ('v'::pg_catalog.\"char\", 1, 'view'::pg_catalog.text),
                 ('m'::pg_catalog.\"char\", 1, 'materialized view'::pg_catalog.text)
             ),
             objects(rank, what, owner) AS (
                 SELECT COALESCE(k.rank, 1),
                        pg_catalog.concat_ws(''::pg_catalog.text, COALESCE(k.kind, 'relation'::pg_catalog.text),
                            ' '::pg_catalog.text, (SELECT name FROM target_schema), '.'::pg_catalog.text,
                            o.relname::pg_catalog.text),
                        o.relowner
                 FROM ours o LEFT JOIN kinds k ON k.relkind OPERATOR(pg_catalog.=) o.relkind
                 UNION ALL
                 SELECT 2, pg_catalog.concat_ws(''::pg_catalog.text, 'function '::pg_catalog.text,
                            (SELECT name FROM target_schema), '.'::pg_catalog.text, p.proname::pg_catalog.text,
                            '('::pg_catalog.text, pg_catalog.pg_get_function_identity_arguments(p.oid),
                            ')'::pg_catalog.text),
                        p.proowner
                 FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace OPERATOR(pg_catalog.=) (SELECT oid FROM ns)
                   AND p.proname OPERATOR(pg_catalog.>=) $3::pg_catalog.name
                   AND ($4::pg_catalog.text IS NULL OR p.proname OPERATOR(pg_catalog.<) $4::pg_catalog.name)
                   AND pg_catalog.starts_with(p.proname::pg_catalog.text, $2)
                 UNION ALL
                 SELECT 3, pg_catalog.concat_ws(''::pg_catalog.text, 'function '::pg_catalog.text,
                            n.nspname::pg_catalog.text, '.'::pg_catalog.text, p.proname::pg_catalog.text,
                            '('::pg_catalog.text, pg_catalog.pg_get_function_identity_arguments(p.oid),
                            ') of trigger '::pg_catalog.text, t.tgname::pg_catalog.text, ' on '::pg_catalog.text,
                            (SELECT name FROM target_schema), '.'::pg_catalog.text, o.relname::pg_catalog.text),
                        p.proowner
                 FROM pg_catalog.pg_trigger t
                 JOIN ours o ON o.oid OPERATOR(pg_catalog.=) t.tgrelid
                 JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
                 WHERE NOT t.tgisinternal
             )
             SELECT what, pg_catalog.pg_get_userbyid(owner)::pg_catalog.text, CURRENT_USER::pg_catalog.text
             FROM objects
             WHERE owner OPERATOR(pg_catalog.<>) ALL (SELECT oid FROM mine WHERE oid IS NOT NULL)
             ORDER BY rank, what";
        let rows = unnamed::query(client, sql, &[&schema, &prefix, &low, &high])
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
}

impl Postgres {
    /// The table prefix (`<p>_`): what every name of leader-exec's objects starts with.
    pub(super) fn prefix(&self) -> String {
        let leases = &self.shared.leases;
        leases.strip_suffix("leases").unwrap_or(leases).to_owned()
    }

    /// The unique index on the leases table's (name, holder, token), `<p>_fence`. It makes
    /// `holder` and `token` key columns: an UPDATE that changes either (an acquisition, a
    /// takeover, a release) takes the row `FOR UPDATE`, which waits for a job's `FOR KEY SHARE`
    /// fence, while a renewal (`expires_at`, `renewals`, `ttl_ms`) and a slot acquisition's
    /// lock on the row `NAME` (`FOR NO KEY UPDATE`, and its `top_token`) do not
    /// (docs/postgresql.md, "Fencing in the same database"). Name already unique, it refuses
    /// nothing.
    pub(super) fn fence_index(&self) -> String {
        format!("{}_fence", self.shared.base)
    }
}

/// Bounds of the names that start with `prefix` in the byte order `name` compares in: the
/// prefix itself, and (when its last byte is ASCII below DEL, so that raising it keeps the text
/// valid) the prefix with that byte raised by one; `None`: no upper bound.
pub(super) fn name_bounds(prefix: &str) -> (String, Option<String>) {
    let mut high = prefix.as_bytes().to_vec();
    let upper = match high.last_mut() {
        Some(last) if *last < 0x7f => {
            *last += 1;
            String::from_utf8(high).ok()
        }
        _ => None,
    };
    (prefix.to_owned(), upper)
}

/// How a first-run DDL transaction failed: a statement, or the ownership check.
enum DdlError {
    Sql(tokio_postgres::Error),
    Refused(StoreError),
}

impl From<tokio_postgres::Error> for DdlError {
    fn from(error: tokio_postgres::Error) -> DdlError {
        DdlError::Sql(error)
    }
}

/// Whether a DDL statement failed because a concurrent transaction made the same object first
/// (each `IF NOT EXISTS` looked before the other's commit): made now, so going again succeeds.
fn lost_a_catalog_race(error: &tokio_postgres::Error) -> bool {
    let code = error.code();
    code == Some(&SqlState::UNIQUE_VIOLATION)
        || code == Some(&SqlState::DUPLICATE_TABLE)
        || code == Some(&SqlState::DUPLICATE_OBJECT)
        || code == Some(&SqlState::DUPLICATE_FUNCTION)
        || error_text(error).contains("tuple concurrently updated")
}

/// The start's one look at the schema and the tables ([`Postgres::look_at_tables`]): whether
/// the tables are complete, whether another role owns an object the ownership check covers, the
/// schema's name, and (for an unsafe schema) how and which role makes it so, and the connecting
/// role. Parameters, all text: the schema (NULL: `current_schema()`), the leases, records,
/// tokens, guard and waiters names, the prefix, its bounds (`name_bounds`), the fence index.
pub(super) const LOOK: &str = "WITH RECURSIVE mine(oid) AS (
        SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER::pg_catalog.text))::pg_catalog.oid
        UNION
        SELECT m.roleid FROM pg_catalog.pg_auth_members m
        JOIN mine ON m.member OPERATOR(pg_catalog.=) mine.oid
    ),
    me(oid) AS (SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER::pg_catalog.text))::pg_catalog.oid),
    s AS (SELECT COALESCE($1, pg_catalog.current_schema()::pg_catalog.text) AS name),
    k AS (
        SELECT s.name, pg_catalog.to_regnamespace(q)::pg_catalog.oid AS ns,
               pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident($2))::pg_catalog.oid AS l,
               pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident($6))::pg_catalog.oid AS w,
               pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident($10))::pg_catalog.oid AS f,
               pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident($3)) IS NOT NULL
                   AND pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                       OPERATOR(pg_catalog.||) pg_catalog.quote_ident($4)) IS NOT NULL AS rest
        FROM s, LATERAL (SELECT pg_catalog.quote_ident(s.name) AS q) AS quoted
    ),
    writers(rank, how, role) AS (
        SELECT 0, 'owns'::pg_catalog.text, n.nspowner
        FROM pg_catalog.pg_namespace n, k WHERE n.oid OPERATOR(pg_catalog.=) k.ns
        UNION ALL
        SELECT 1, 'may create objects in'::pg_catalog.text, a.grantee
        FROM pg_catalog.pg_namespace n, k, pg_catalog.aclexplode(n.nspacl) a
        WHERE n.oid OPERATOR(pg_catalog.=) k.ns
          AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
    ),
    judged AS (
        SELECT w.rank, w.how, w.role,
               CASE WHEN w.role OPERATOR(pg_catalog.=) pg_catalog.to_regrole('pg_database_owner'::pg_catalog.text)::pg_catalog.oid
                    THEN (SELECT d.datdba FROM pg_catalog.pg_database d
                          WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                    ELSE w.role END AS acting
        FROM writers w
    ),
    foreign_writer AS (
        SELECT j.how,
               CASE WHEN j.role OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'::pg_catalog.text
                    ELSE pg_catalog.pg_get_userbyid(j.role)::pg_catalog.text END AS who
        FROM judged j
        WHERE j.role OPERATOR(pg_catalog.=) 0::pg_catalog.oid
           OR NOT (j.acting OPERATOR(pg_catalog.=) ANY (SELECT oid FROM mine WHERE oid IS NOT NULL)
                   OR COALESCE(pg_catalog.pg_has_role(j.acting, (SELECT oid FROM me),
                                                      'MEMBER'::pg_catalog.text), false))
        ORDER BY j.rank LIMIT 1
    ),
    ours AS (
        SELECT c.oid, c.relowner FROM pg_catalog.pg_class c, k
        WHERE c.relnamespace OPERATOR(pg_catalog.=) k.ns
          AND c.relname OPERATOR(pg_catalog.>=) $8::pg_catalog.name
          AND ($9::pg_catalog.text IS NULL OR c.relname OPERATOR(pg_catalog.<) $9::pg_catalog.name)
          AND pg_catalog.starts_with(c.relname::pg_catalog.text, $7)
    )
    SELECT k.rest AND k.l IS NOT NULL AND k.w IS NOT NULL
           AND (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
                WHERE NOT a.attisdropped
                  AND ((a.attrelid OPERATOR(pg_catalog.=) k.l
                        AND (a.attname OPERATOR(pg_catalog.=) 'renewals'::pg_catalog.name
                             OR a.attname OPERATOR(pg_catalog.=) 'max_holders'::pg_catalog.name
                             OR a.attname OPERATOR(pg_catalog.=) 'top_token'::pg_catalog.name))
                       OR (a.attrelid OPERATOR(pg_catalog.=) k.w
                           AND a.attname OPERATOR(pg_catalog.=) 'max_holders'::pg_catalog.name)))
               OPERATOR(pg_catalog.=) 4::pg_catalog.int8
           AND EXISTS (SELECT FROM pg_catalog.pg_index i
                       WHERE i.indexrelid OPERATOR(pg_catalog.=) k.f
                         AND i.indrelid OPERATOR(pg_catalog.=) k.l AND i.indisunique)
           AND EXISTS (SELECT FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid OPERATOR(pg_catalog.=) k.l
                         AND t.tgname OPERATOR(pg_catalog.=) $5::pg_catalog.name),
           EXISTS (SELECT FROM ours o
                   WHERE o.relowner OPERATOR(pg_catalog.<>) ALL (SELECT oid FROM mine WHERE oid IS NOT NULL))
           OR EXISTS (SELECT FROM pg_catalog.pg_proc p
                      WHERE p.pronamespace OPERATOR(pg_catalog.=) k.ns
                        AND p.proname OPERATOR(pg_catalog.>=) $8::pg_catalog.name
                        AND ($9::pg_catalog.text IS NULL OR p.proname OPERATOR(pg_catalog.<) $9::pg_catalog.name)
                        AND pg_catalog.starts_with(p.proname::pg_catalog.text, $7)
                        AND p.proowner OPERATOR(pg_catalog.<>) ALL (SELECT oid FROM mine WHERE oid IS NOT NULL))
           OR EXISTS (SELECT FROM pg_catalog.pg_trigger t
                      JOIN ours o ON o.oid OPERATOR(pg_catalog.=) t.tgrelid
                      JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
                      WHERE NOT t.tgisinternal
                        AND p.proowner OPERATOR(pg_catalog.<>) ALL (SELECT oid FROM mine WHERE oid IS NOT NULL)),
           k.name, (SELECT how FROM foreign_writer), (SELECT who FROM foreign_writer),
           CURRENT_USER::pg_catalog.text
    FROM k";
