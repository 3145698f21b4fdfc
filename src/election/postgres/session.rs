//! Sessions: opening one on a primary, checking it, the schema (made and kept up to date),
//! and every request bounded by its own timer.

use super::*;

impl Postgres {
    /// Opens a session; notifications (when `heard` is given) go to the waiters.
    pub(super) async fn open(&self, listen: bool) -> Result<Client, StoreError> {
        let (client, encrypted) = self.open_unchecked(listen).await?;
        self.checked(&client, encrypted).await?;
        Ok(client)
    }

    /// [`check_session`](Self::check_session) under the same bound as a connect.
    pub(super) async fn checked(&self, client: &Client, encrypted: bool) -> Result<(), StoreError> {
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
    pub(super) async fn open_unchecked(&self, listen: bool) -> Result<(Client, bool), StoreError> {
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
    pub(super) async fn client(&self) -> Result<Arc<Client>, StoreError> {
        let mut slot = self.shared.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        *slot = None;
        let (client, encrypted) = self.open_unchecked(false).await?;
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
                false => Some(self.look_at_tables(&client).await),
            }
        };
        let limit = self.shared.request_timeout * 4 + Duration::from_secs(1);
        let (checked, looked) = tokio::time::timeout(
            limit,
            futures_util::future::join(self.check_session(&client, encrypted), look),
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
            self.ensure_schema(&client, looked?).await?;
        }
        let client = Arc::new(client);
        *slot = Some(client.clone());
        Ok(client)
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
    /// pinned to leader-exec's schema; and, once per process, a warning when a password goes
    /// out without TLS.
    pub(super) async fn check_session(
        &self,
        client: &Client,
        encrypted: bool,
    ) -> Result<(), StoreError> {
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
                        (SELECT found::oid FROM (SELECT pg_catalog.to_regclass({table}) AS found) AS f
                         WHERE found IS DISTINCT FROM pg_catalog.to_regclass(
                            pg_catalog.quote_ident(pg_catalog.current_schema()) || '.' || {table}));
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

    /// The schema of the relation `oid` (the table the session check found through
    /// `search_path` in another than the first schema), for the message that says so.
    async fn schema_of(&self, client: &Client, oid: &str) -> Result<String, StoreError> {
        let oid: u32 = oid.parse().map_err(|_| {
            StoreError::Transient(format!("PostgreSQL: {oid:?} is not a relation's oid"))
        })?;
        let rows = client
            .simple_query(&format!(
                "SELECT n.nspname::text FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = {oid}"
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

    /// Whether the tables are complete (the current layout), and whether any object the
    /// ownership check covers is owned by another role, in one statement; before the session
    /// check's answer, so in the schema that check pins (`current_schema()` until this process
    /// knows it).
    ///
    /// The statement reads the same objects as [`refuse_foreign_objects`] (every relation and
    /// function named with the prefix, the function of every trigger on those relations) and
    /// holds their owners against the same roles, but answers only with two booleans: no
    /// message is composed, nothing is sorted. On a new backend's cold caches the statements
    /// a start plans, not their rows, are its cost, and this is the start's one look at the
    /// catalogs. Only a `true` (an object another role owns) costs the full check, which names
    /// the object; tables not complete are made under it (`ensure_schema`).
    ///
    /// [`refuse_foreign_objects`]: Self::refuse_foreign_objects
    pub(super) async fn look_at_tables(&self, client: &Client) -> Result<(bool, bool), StoreError> {
        let shared = &self.shared;
        let schema = shared.schema.get().cloned();
        let prefix = self.prefix();
        let (low, high) = name_bounds(&prefix);
        // Everything the current layout needs, so that tables made by an earlier version are
        // brought up to date (the `renewals` column, the token sequence, the guard trigger, the
        // waiters table, `max_holders`, `top_token`, the fence index). A role not found would be
        // a NULL in `mine`: left out, so that then every object counts as another role's (fail
        // closed).
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
        let row = unnamed::query_one(
            client,
            "WITH RECURSIVE mine(oid) AS (
                 SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid
                 UNION
                 SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN mine ON m.member = mine.oid
             ),
             s AS (SELECT pg_catalog.quote_ident(COALESCE($1, pg_catalog.current_schema()::text)) AS q),
             k AS (
                 SELECT pg_catalog.to_regnamespace(q)::oid AS ns,
                        pg_catalog.to_regclass(q || '.' || pg_catalog.quote_ident($2))::oid AS l,
                        pg_catalog.to_regclass(q || '.' || pg_catalog.quote_ident($6))::oid AS w,
                        pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                            OPERATOR(pg_catalog.||) pg_catalog.quote_ident($10))::oid AS f,
                        pg_catalog.to_regclass(q || '.' || pg_catalog.quote_ident($3)) IS NOT NULL
                            AND pg_catalog.to_regclass(q || '.' || pg_catalog.quote_ident($4)) IS NOT NULL AS rest
                 FROM s
             ),
             ours AS (
                 SELECT c.oid, c.relowner FROM pg_catalog.pg_class c, k
                 WHERE c.relnamespace = k.ns
                   AND c.relname >= $8::name AND ($9::text IS NULL OR c.relname < $9::name)
                   AND pg_catalog.starts_with(c.relname::text, $7)
             )
             SELECT k.rest AND k.l IS NOT NULL AND k.w IS NOT NULL
                    AND (SELECT count(*) FROM pg_catalog.pg_attribute a
                         WHERE NOT a.attisdropped
                           AND ((a.attrelid = k.l AND a.attname IN ('renewals', 'max_holders', 'top_token'))
                                OR (a.attrelid = k.w AND a.attname = 'max_holders'))) = 4
                    AND EXISTS (SELECT FROM pg_catalog.pg_index i
                                WHERE i.indexrelid OPERATOR(pg_catalog.=) k.f
                                  AND i.indrelid OPERATOR(pg_catalog.=) k.l AND i.indisunique)
                    AND EXISTS (SELECT FROM pg_catalog.pg_trigger t
                                WHERE t.tgrelid = k.l AND t.tgname = $5),
                    EXISTS (SELECT FROM ours o
                            WHERE o.relowner NOT IN (SELECT oid FROM mine WHERE oid IS NOT NULL))
                    OR EXISTS (SELECT FROM pg_catalog.pg_proc p
                               WHERE p.pronamespace = k.ns
                                 AND p.proname >= $8::name AND ($9::text IS NULL OR p.proname < $9::name)
                                 AND pg_catalog.starts_with(p.proname::text, $7)
                                 AND p.proowner NOT IN (SELECT oid FROM mine WHERE oid IS NOT NULL))
                    OR EXISTS (SELECT FROM pg_catalog.pg_trigger t
                               JOIN ours o ON o.oid = t.tgrelid
                               JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                               WHERE NOT t.tgisinternal
                                 AND p.proowner NOT IN (SELECT oid FROM mine WHERE oid IS NOT NULL))
             FROM k",
            &params,
        )
        .await
        .map_err(classify)?;
        Ok((row.get::<_, bool>(0), row.get::<_, bool>(1)))
    }

    /// Makes the tables (or brings them up to date) unless [`look_at_tables`] found them
    /// complete; found complete, they are used unless another role owns an object the
    /// ownership check covers (then the full check says which, and refuses).
    ///
    /// [`look_at_tables`]: Self::look_at_tables
    pub(super) async fn ensure_schema(
        &self,
        client: &Client,
        (exists, foreign): (bool, bool),
    ) -> Result<(), StoreError> {
        let leases = self.leases();
        let records = self.records();
        let tokens = self.qualified(&self.shared.tokens);
        let waiters = self.qualified(&self.shared.waiters);
        // A trigger's name is not schema-qualified; its function's is.
        let guard = quote_ident(&self.shared.guard);
        let guard_fn = self.qualified(&self.shared.guard);
        if exists {
            if foreign {
                self.refuse_foreign_objects(client).await?;
            }
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
                     max_holders bigint NOT NULL DEFAULT 1,
                     PRIMARY KEY (name, id)
                 );
                 ALTER TABLE {waiters} ADD COLUMN IF NOT EXISTS max_holders bigint NOT NULL DEFAULT 1;
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
                fence = quote_ident(&self.fence_index()),
                fence_literal = quote_literal(&self.qualified(&self.fence_index())),
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
                 SELECT COALESCE($1, pg_catalog.current_schema()::text)
             ),
             mine(oid) AS (
                 SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid
                 UNION
                 SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN mine ON m.member = mine.oid
             ),
             ns(oid) AS (SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident(name))::oid FROM target_schema),
             ours AS (
                 SELECT c.oid, c.relname, c.relkind, c.relowner FROM pg_catalog.pg_class c
                 WHERE c.relnamespace = (SELECT oid FROM ns)
                   AND c.relname >= $3::name AND ($4::text IS NULL OR c.relname < $4::name)
                   AND pg_catalog.starts_with(c.relname::text, $2)
             ),
             objects(rank, what, owner) AS (
                 SELECT CASE WHEN o.relkind IN ('r', 'p') THEN 0 ELSE 1 END,
                        CASE o.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table'
                            WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' WHEN 'I' THEN 'index'
                            WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                            ELSE 'relation' END || ' ' || (SELECT name FROM target_schema) || '.' || o.relname::text,
                        o.relowner
                 FROM ours o
                 UNION ALL
                 SELECT 2, 'function ' || (SELECT name FROM target_schema) || '.' || p.proname::text || '('
                            || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')',
                        p.proowner
                 FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = (SELECT oid FROM ns)
                   AND p.proname >= $3::name AND ($4::text IS NULL OR p.proname < $4::name)
                   AND pg_catalog.starts_with(p.proname::text, $2)
                 UNION ALL
                 SELECT 3, 'function ' || n.nspname::text || '.' || p.proname::text || '('
                            || pg_catalog.pg_get_function_identity_arguments(p.oid)
                            || ') of trigger ' || t.tgname::text || ' on ' || (SELECT name FROM target_schema) || '.'
                            || o.relname::text,
                        p.proowner
                 FROM pg_catalog.pg_trigger t
                 JOIN ours o ON o.oid = t.tgrelid
                 JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                 JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                 WHERE NOT t.tgisinternal
             )
             SELECT what, pg_catalog.pg_get_userbyid(owner)::text, CURRENT_USER::text
             FROM objects WHERE owner NOT IN (SELECT oid FROM mine WHERE oid IS NOT NULL)
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
    fn prefix(&self) -> String {
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
