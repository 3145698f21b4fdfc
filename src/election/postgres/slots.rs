//! `--max-holders` N above 1 on PostgreSQL: N slot rows per lease name.
//!
//! Slot 1 is the lease row `NAME` itself; slot k (2 ≤ k ≤ N) is the row `NAME/k` in the same table,
//! as every row store names them (`rows/slots.rs`: a lease name never contains '/', so no other
//! name's row can be one, and `status --all` folds them into their name). Each slot row is a lease
//! row like any other: one holder, its token from `<p>_tokens`, renewed by (row, holder, token)
//! without a clock, released with holder NULL, taken over only as `Sighting` says. Every row
//! carries `max_holders`, the N of the instance that last acquired it (1 for rows made before, or
//! by N = 1); every waiter row the N of its owner.
//!
//! An acquisition is one simple-query message holding one transaction (implicit: it commits at
//! its end and rolls back on any error, and the server runs it through without waiting for the
//! client, so a paused client can hold no lock, and it passes through pgbouncer in transaction
//! mode unchanged): the row `NAME` made if missing, then locked `FOR NO KEY UPDATE`, then (each
//! statement with a snapshot of its own, taken after the lock was granted) the decision.
//!
//! Why no N+1st holder: every acquisition of any slot row of a name by this path runs under the
//! lock on `NAME`, and sees every earlier one committed; it takes only a slot row among the N
//! that is free (holder NULL, or not there yet) or that it has sighted for a full TTL, by an
//! UPDATE conditional on exactly that. Each slot row has one holder at a time, so at most N
//! rows among `NAME`, `NAME/2` … `NAME/N` are held. An instance with N = 1 (`line.rs`) takes
//! `NAME` by a conditional UPDATE that requires `max_holders = 1` on it: the locked path sets it
//! to N before it takes anything, and that UPDATE waits for the lock's transaction and then
//! rechecks the row it waited for, so it never takes `NAME` beside slot rows held with N > 1.
//!
//! Why the token rises: it is the greater of `nextval` of the one sequence and one above the
//! highest token any row of the name has had (every slot row's `token`, slot rows beyond this
//! N included, and the row `NAME`'s `top_token`), drawn in acquisition order under the lock: so
//! it is above every earlier token of the name, whichever slot held it, and no two rows of the
//! name share one, even with the sequence set back (`ALTER SEQUENCE … RESTART`, a schema-only
//! restore). The same transaction then raises `NAME`'s `top_token` to the name's highest
//! token, which is what an instance with N = 1 (`line.rs`), reading `NAME` alone, goes above.
//! The rows and the sequence each keep the rule: a set-back sequence is outdone by the rows,
//! rows deleted by hand or a truncated table by the sequence; only both lost together can
//! reissue a token.
//!
//! The lock on `NAME` is `FOR NO KEY UPDATE`, and `top_token` is no key column: a job's
//! `FOR KEY SHARE` fence on `NAME` (slot 1's row) delays none of it, only a change of that
//! row's holder or token (see `fence_index`).
//!
//! Another N: a held row of the name that another `max_holders` wrote keeps everything of the name
//! out — no slot is taken and `NAME`'s `max_holders` stays — until this instance has seen it
//! unchanged for a full TTL on its own boot clock (`Sighting`, the takeover rule; the sightings of
//! every slot row are [`Sightings::sight_slots`]'s), whatever the server's clock says of its
//! `expires_at`: a server clock stepped ahead (or set back while that holder took its row) makes a
//! live holder's row look expired, and judging by it would start a command of this N beside one of
//! another. A row so seen is gone: one of this N's slots is taken over, any other is freed (holder
//! NULL, under the same conditions), in the same transaction. The server's clock answers only the
//! question whether to refuse: a held row that has not expired on it, or a live waiter row, with
//! another `max_holders` answers `Mismatch` under the same lock, and nothing is taken (the row
//! `NAME`, when missing, is made free: no holder). A stepped clock can thus make an instance wait,
//! or refuse it, where it need not; it can never let it start.
//!
//! Herd-free: a release notifies the first waiter in line only; a waiter may take a free slot
//! while fewer live waiters stand ahead of it than slots are free (the line's rule,
//! `rows/line.rs`, decided here in the acquiring transaction), and one that takes a slot
//! while others stay free wakes the next waiter (one NOTIFY). The first waiter looks at every
//! slot row each --retry-period for a crashed holder to take over.
//!
//! Why a waiter that is not woken cannot miss its turn: as with one holder, it listens before
//! the attempt that put it behind, so a release after that attempt reaches it if it is first;
//! one not first is woken by the waiter ahead when that one takes a slot with another still
//! free, or by a release once it has become first; and every waiter looks at the line every
//! --retry-period anyway (the first one at every slot row), so a lost or unsent notification
//! (pgbouncer, `leader_exec_listen=off`) delays it by one period at most.

use std::fmt::Write as _;

use super::super::rows::slots::SlotRow;
use super::*;

/// A row's `expires_at` in microseconds since the epoch, as SQL (compared, never a time).
fn expires_us_sql(l: &str) -> String {
    format!(
        "(EXTRACT(EPOCH FROM {l}.expires_at) OPERATOR(pg_catalog.*) \
         1000000::pg_catalog.numeric)::pg_catalog.int8"
    )
}

/// Whether the row `l` (columns `slot`, `holder`, `token`, `renewals`, and `expires_us` given
/// as SQL) is exactly one of the ripe sightings in the relation `ripe`: SQL.
fn is_ripe(ripe: &str, l: &str, slot: &str, expires_us: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {ripe} r
                 WHERE r.slot OPERATOR(pg_catalog.=) {l}.{slot}
                   AND r.holder OPERATOR(pg_catalog.=) {l}.holder
                   AND r.token OPERATOR(pg_catalog.=) {l}.token
                   AND r.renewals OPERATOR(pg_catalog.=) {l}.renewals
                   AND r.expires_us OPERATOR(pg_catalog.=) {expires_us})"
    )
}

/// A string as an SQL literal of type `pg_catalog.text` that means the same whatever
/// `standard_conforming_strings` says.
fn literal(text: &str) -> String {
    format!(
        "E'{}'::pg_catalog.text",
        text.replace('\\', "\\\\").replace('\'', "''")
    )
}

impl Postgres {
    /// The slot rows of `n` for this name, as an SQL relation `(k, slot)`.
    fn slot_rows_sql(&self, n: u32) -> String {
        let name = literal(&self.shared.name);
        format!(
            "(SELECT k, CASE WHEN k OPERATOR(pg_catalog.=) 1 THEN {name}
                             ELSE {name} OPERATOR(pg_catalog.||) '/'::pg_catalog.text
                                  OPERATOR(pg_catalog.||) k::pg_catalog.text END AS slot
              FROM pg_catalog.generate_series(1, {n}) k)"
        )
    }

    /// The highest token any row of this name has had: every row's token, and the row `NAME`'s
    /// `top_token` (0 without rows).
    fn high_sql(&self) -> String {
        let name = literal(&self.shared.name);
        format!(
            "SELECT COALESCE(pg_catalog.max(GREATEST(h.token, h.top_token)), 0::pg_catalog.int8)
             FROM {leases} h
             WHERE h.name OPERATOR(pg_catalog.=) {name}::pg_catalog.text
                OR pg_catalog.starts_with(h.name, {name}::pg_catalog.text
                                          OPERATOR(pg_catalog.||) '/'::pg_catalog.text)",
            leases = self.leases(),
        )
    }

    /// Every row this instance sights, as an SQL relation `(k, slot, present, holder, token,
    /// renewals, expires_us, ttl_ms, other)`: its `n` slot rows (a missing one as not present),
    /// then every held slot row beyond them that instances with another N hold (`k` above any
    /// slot's). `other`: held with another N than `n`.
    fn sighted_sql(&self, n: u32) -> String {
        let name = literal(&self.shared.name);
        let slots = self.slot_rows_sql(n);
        let (l_us, o_us) = (expires_us_sql("l"), expires_us_sql("o"));
        let n = int8(i64::from(n));
        format!(
            "(SELECT s.k, s.slot, l.name IS NOT NULL AS present, l.holder, l.token, l.renewals,
                     {l_us} AS expires_us, l.ttl_ms,
                     COALESCE(l.holder IS NOT NULL
                              AND l.max_holders OPERATOR(pg_catalog.<>) {n}, false) AS other
              FROM {slots} s LEFT JOIN {leases} l ON l.name OPERATOR(pg_catalog.=) s.slot
              UNION ALL
              SELECT 1001, o.name, true, o.holder, o.token, o.renewals, {o_us}, o.ttl_ms, true
              FROM {leases} o
              WHERE pg_catalog.starts_with(o.name, {name} OPERATOR(pg_catalog.||) '/'::pg_catalog.text)
                AND o.holder IS NOT NULL AND o.max_holders OPERATOR(pg_catalog.<>) {n}
                AND NOT EXISTS (SELECT 1 FROM {slots} s2 WHERE s2.slot OPERATOR(pg_catalog.=) o.name))",
            leases = self.leases(),
        )
    }

    /// The rows this instance has seen unchanged for a full TTL, as an SQL relation `(slot,
    /// holder, token, renewals, expires_us)`: each may be taken over (one of this N's slots)
    /// or freed (another N's).
    fn ripe_sql(&self) -> String {
        let ripe = self.shared.sightings.ripe_rows(BootClock.now());
        if ripe.is_empty() {
            return "(SELECT NULL::pg_catalog.text AS slot, NULL::pg_catalog.text AS holder,
                            NULL::pg_catalog.int8 AS token, NULL::pg_catalog.int8 AS renewals,
                            NULL::pg_catalog.int8 AS expires_us WHERE false)"
                .to_owned();
        }
        let rows = ripe
            .iter()
            .map(|(row, seen)| {
                format!(
                    "SELECT {} AS slot, {} AS holder, {} AS token, {} AS renewals, {} AS expires_us",
                    literal(row),
                    literal(&seen.holder),
                    int8(seen.token),
                    int8(seen.renewals),
                    int8(seen.expires_us)
                )
            })
            .collect::<Vec<_>>();
        format!("({})", rows.join(" UNION ALL "))
    }

    /// A live holder or waiter of this name with another N than `n`, live on the server's
    /// clock: its N (at most one row). That clock decides only whether to refuse (see the
    /// module's header); an expired-looking row of another N still keeps everything out.
    fn theirs_sql(&self, n: u32, waiter: i64) -> String {
        let name = literal(&self.shared.name);
        format!(
            "SELECT max_holders FROM {leases}
             WHERE (name OPERATOR(pg_catalog.=) {name}
                    OR pg_catalog.starts_with(name, {name} OPERATOR(pg_catalog.||) '/'::pg_catalog.text))
               AND holder IS NOT NULL AND expires_at OPERATOR(pg_catalog.>) pg_catalog.now()
               AND max_holders OPERATOR(pg_catalog.<>) {n}
             UNION ALL
             SELECT max_holders FROM {waiters}
             WHERE name OPERATOR(pg_catalog.=) {name} AND id OPERATOR(pg_catalog.<>) {waiter}
               AND expires_at OPERATOR(pg_catalog.>) pg_catalog.now() AND max_holders OPERATOR(pg_catalog.<>) {n}
             LIMIT 1",
            leases = self.leases(),
            waiters = self.qualified(&self.shared.waiters),
            n = int8(i64::from(n)),
            waiter = int8(waiter),
        )
    }

    /// One attempt to take one of `n` slot rows (see the module's header), in one transaction.
    /// With `n` = 1 this is the reconciling attempt of an instance with N = 1 that found the
    /// row `NAME` marked by instances with another N.
    pub(super) async fn attempt_slots(&self, n: u32) -> Result<Attempt, StoreError> {
        let shared = &self.shared;
        let name = literal(&shared.name);
        let ident = literal(&shared.identity);
        let ttl = shared.ttl_ms;
        let waiter = shared.waiter.load(Ordering::SeqCst);
        let leases = self.leases();
        let waiters = self.qualified(&shared.waiters);
        let tokens = quote_literal(&self.qualified(&shared.tokens));
        let channel = literal(&shared.channel);
        let theirs = self.theirs_sql(n, waiter);
        let sighted = self.sighted_sql(n);
        let ripe = self.ripe_sql();
        let l_us = expires_us_sql("l");
        // Held by another N and not seen unchanged for a full TTL: keeps everything out.
        let unripe_other = |c: &str| {
            format!(
                "{c}.other AND NOT {}",
                is_ripe(&ripe, c, "slot", &format!("{c}.expires_us"))
            )
        };
        let blocked = unripe_other("c");
        let next_channel = waiter_channel_sql("nx.id", &shared.base);
        let high = self.high_sql();
        // A new token is above every token any row of this name has had, and drawn from the
        // sequence: see the module's header.
        let next = format!(
            "GREATEST(({high}) OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                      pg_catalog.nextval({tokens}::pg_catalog.regclass))"
        );
        let (ttl, n, waiter) = (int8(ttl), int8(i64::from(n)), int8(waiter));
        let expiry = expiry_sql(&ttl);
        let l_ripe = is_ripe("ripe", "l", "name", &l_us);
        let c_ripe = is_ripe("ripe", "c", "slot", "c.expires_us");
        let mut sql = String::new();
        // The row NAME, free, for a new name: what the lock is taken on.
        let _ = write!(
            sql,
            "INSERT INTO {leases} (name, holder, token, expires_at, ttl_ms, max_holders)
             SELECT {name}, NULL, pg_catalog.nextval({tokens}::pg_catalog.regclass), pg_catalog.now(),
                    0, {n}
             WHERE NOT EXISTS (SELECT 1 FROM {leases} WHERE name OPERATOR(pg_catalog.=) {name})
             ON CONFLICT (name) DO NOTHING;
             SELECT 'lock'::pg_catalog.text FROM {leases} WHERE name OPERATOR(pg_catalog.=) {name} FOR NO KEY UPDATE;
             UPDATE {leases} SET max_holders = {n}
             WHERE name OPERATOR(pg_catalog.=) {name} AND max_holders OPERATOR(pg_catalog.<>) {n}
                 AND NOT EXISTS ({theirs})
                 AND NOT EXISTS (SELECT 1 FROM {sighted} c WHERE {blocked});"
        );
        let _ = write!(
            sql,
            "WITH cur AS (SELECT * FROM {sighted} x),
             ripe AS {ripe},
             theirs AS ({theirs}),
             others AS (SELECT 1 FROM cur c WHERE {blocked}),
             free AS (SELECT pg_catalog.count(*) AS f FROM cur
                      WHERE k OPERATOR(pg_catalog.<=) {n} AND holder IS NULL),
             ahead AS (SELECT pg_catalog.count(*) AS a FROM {waiters} w
                       WHERE w.name OPERATOR(pg_catalog.=) {name}
                       AND ({waiter} OPERATOR(pg_catalog.=) 0::pg_catalog.int8
                            OR w.id OPERATOR(pg_catalog.<) {waiter})
                       AND w.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()),
             pick AS (
                 SELECT c.slot, c.present, c.holder IS NULL AS was_free FROM cur c
                 WHERE c.k OPERATOR(pg_catalog.<=) {n}
                   AND NOT EXISTS (SELECT 1 FROM theirs) AND NOT EXISTS (SELECT 1 FROM others)
                   AND ((c.holder IS NULL AND (SELECT a FROM ahead) OPERATOR(pg_catalog.<) (SELECT f FROM free))
                        OR {c_ripe})
                 ORDER BY c.holder IS NULL DESC, c.token, c.k LIMIT 1),
             upd AS (
                 UPDATE {leases} l SET holder = {ident},
                     token = {next},
                     renewals = l.renewals OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                     expires_at = {expiry},
                     ttl_ms = {ttl}, max_holders = {n}
                 FROM pick
                 WHERE l.name OPERATOR(pg_catalog.=) pick.slot AND pick.present
                   AND (l.holder IS NULL OR {l_ripe})
                 RETURNING l.name, l.token),
             freed AS (
                 UPDATE {leases} l SET holder = NULL, expires_at = pg_catalog.now()
                 WHERE (l.name OPERATOR(pg_catalog.=) {name}
                        OR pg_catalog.starts_with(l.name, {name} OPERATOR(pg_catalog.||) '/'::pg_catalog.text))
                   AND l.max_holders OPERATOR(pg_catalog.<>) {n} AND {l_ripe}
                   AND NOT EXISTS (SELECT 1 FROM pick WHERE pick.slot OPERATOR(pg_catalog.=) l.name)
                 RETURNING 1),
             ins AS (
                 INSERT INTO {leases} (name, holder, token, expires_at, ttl_ms, max_holders)
                 SELECT slot, {ident}, {next},
                        {expiry}, {ttl}, {n}
                 FROM pick WHERE NOT pick.present
                 ON CONFLICT (name) DO NOTHING
                 RETURNING name, token),
             won AS (SELECT name, token FROM upd UNION ALL SELECT name, token FROM ins),
             told AS (SELECT pg_catalog.pg_notify({channel}, 'taken'::pg_catalog.text
                          OPERATOR(pg_catalog.||) pg_catalog.chr(10) OPERATOR(pg_catalog.||) {ttl}::pg_catalog.text
                          OPERATOR(pg_catalog.||) pg_catalog.chr(10) OPERATOR(pg_catalog.||) {name})
                      FROM won),
             left_line AS (DELETE FROM {waiters}
                           WHERE name OPERATOR(pg_catalog.=) {name} AND id OPERATOR(pg_catalog.=) {waiter}
                           AND EXISTS (SELECT 1 FROM won)),
             next AS (
                 SELECT pg_catalog.pg_notify({next_channel}, {FREE} OPERATOR(pg_catalog.||) {name})
                 FROM (SELECT id FROM {waiters}
                       WHERE name OPERATOR(pg_catalog.=) {name} AND id OPERATOR(pg_catalog.<>) {waiter}
                       ORDER BY id LIMIT 1) nx
                 WHERE EXISTS (SELECT 1 FROM won)
                   AND (SELECT f FROM free) OPERATOR(pg_catalog.>) (SELECT pg_catalog.count(*) FROM pick WHERE was_free))
             SELECT 'slot'::pg_catalog.text, c.slot, c.holder, c.token, c.renewals, c.expires_us, c.ttl_ms,
                    (SELECT name FROM won), (SELECT token FROM won),
                    (SELECT max_holders FROM theirs LIMIT 1),
                    (SELECT pg_catalog.count(*) FROM told), (SELECT pg_catalog.count(*) FROM next), c.present,
                    c.other, (SELECT pg_catalog.count(*) FROM freed)
             FROM cur c ORDER BY c.k, c.slot;"
        );
        // The row NAME keeps the name's highest token (for an instance with N = 1, whose
        // acquisition reads that row alone), also when nothing was taken here: tokens of slot
        // rows made by an earlier version count from the first attempt of this one.
        let _ = write!(
            sql,
            "UPDATE {leases} l SET top_token = h.m FROM ({high}) h(m)
             WHERE l.name OPERATOR(pg_catalog.=) {name}::pg_catalog.text
               AND l.top_token OPERATOR(pg_catalog.<) h.m"
        );
        let messages = self
            .request(|c| async move { c.simple_query(&sql).await })
            .await?;
        let received = BootClock.now();
        let rows: Vec<&tokio_postgres::SimpleQueryRow> = messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(row) if row.len() == 15 && row.get(0) == Some("slot") => {
                    Some(row)
                }
                _ => None,
            })
            .collect();
        let Some(first) = rows.first() else {
            return Err(StoreError::Transient(
                "PostgreSQL: no answer to the slot rows' look".into(),
            ));
        };
        let number = |row: &tokio_postgres::SimpleQueryRow, i: usize| -> Option<i64> {
            row.get(i).and_then(|v| v.parse().ok())
        };
        if let (Some(row), Some(token)) = (first.get(7), number(first, 8)) {
            *shared.held_row.lock().expect("not poisoned") = row.to_owned();
            shared.held.store(token, Ordering::SeqCst);
            shared.sightings.forget();
            // Its waiter row went in the same transaction.
            shared.waiter.store(0, Ordering::SeqCst);
            return Ok(Attempt::Won(token));
        }
        if let Some(theirs) = number(first, 9) {
            let theirs = u32::try_from(theirs.clamp(1, i64::from(u32::MAX))).unwrap_or(u32::MAX);
            return Ok(Attempt::Mismatch(theirs));
        }
        let slots = rows
            .iter()
            .map(|r| SlotRow {
                row: r.get(1).unwrap_or_default().to_owned(),
                seen: (r.get(12) == Some("t")).then(|| Row {
                    holder: r.get(2).map(str::to_owned),
                    token: number(r, 3).unwrap_or(0),
                    renewals: number(r, 4).unwrap_or(0),
                    expires_us: number(r, 5).unwrap_or(0),
                    ttl_ms: number(r, 6).unwrap_or(0),
                    server: 0,
                }),
                other: r.get(13) == Some("t"),
            })
            .collect::<Vec<_>>();
        let (holder, wait) = shared
            .sightings
            .sight_slots(&slots, received, BootClock.now());
        Ok(Attempt::Held { holder, wait })
    }

    /// The first waiter's look at every slot row, and at every row another N holds (no
    /// lock): how long until one may be taken. A row of another N that looks live on the
    /// server's clock answers zero: the attempt that follows refuses this instance.
    pub(super) async fn look_slots(&self) -> Result<Duration, StoreError> {
        let sql = format!(
            "SELECT s.slot, s.present, s.holder, s.token, s.renewals, s.expires_us, s.ttl_ms, s.other,
                    s.other AND s.expires_us OPERATOR(pg_catalog.>)
                        (EXTRACT(EPOCH FROM pg_catalog.now()) OPERATOR(pg_catalog.*)
                         1000000::pg_catalog.numeric)::pg_catalog.int8
             FROM {sighted} s ORDER BY s.k, s.slot",
            sighted = self.sighted_sql(self.shared.max_holders),
        );
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[]).await })
            .await?;
        let received = BootClock.now();
        let slots = rows
            .iter()
            .map(|r| SlotRow {
                row: r.get(0),
                seen: r.get::<_, bool>(1).then(|| Row {
                    holder: r.get(2),
                    token: r.get(3),
                    renewals: r.get(4),
                    expires_us: r.get(5),
                    ttl_ms: r.get(6),
                    server: 0,
                }),
                other: r.get(7),
            })
            .collect::<Vec<_>>();
        let wait = (self.shared.sightings)
            .sight_slots(&slots, received, BootClock.now())
            .1;
        if rows
            .iter()
            .any(|r| r.get::<_, Option<bool>>(8) == Some(true))
        {
            return Ok(Duration::ZERO);
        }
        Ok(wait)
    }

    /// Releases the row this instance holds (`NAME`, or a slot row `NAME/k` with several
    /// holders) if it still holds it with `token`: the first waiter in line is woken (its own
    /// channel), and whoever watches the table's channel.
    pub(super) async fn release_row(&self, token: i64) -> Result<(), StoreError> {
        let s = &self.shared;
        let sql = format!(
            "WITH gone AS (
                 UPDATE {leases} SET holder = NULL, expires_at = pg_catalog.now()
                 WHERE name OPERATOR(pg_catalog.=) $5 AND holder OPERATOR(pg_catalog.=) $2
                     AND token OPERATOR(pg_catalog.=) $3
                 RETURNING 1),
             first AS (SELECT id FROM {waiters} WHERE name OPERATOR(pg_catalog.=) $1 ORDER BY id LIMIT 1)
             SELECT pg_catalog.pg_notify($4, {FREE} OPERATOR(pg_catalog.||) $1)::pg_catalog.text,
                    (SELECT pg_catalog.pg_notify({channel}, {FREE} OPERATOR(pg_catalog.||) $1)::pg_catalog.text
                     FROM first)
             FROM gone",
            leases = self.leases(),
            waiters = self.qualified(&s.waiters),
            channel = waiter_channel_sql("first.id", &s.base),
        );
        let a = (
            s.name.clone(),
            s.identity.clone(),
            token,
            s.channel.clone(),
            self.held_row(),
        );
        self.request(
            |c| async move { unnamed::query(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await },
        )
        .await?;
        Ok(())
    }

    /// A waiter leaving the line: its row goes, and if a row it waited for (`NAME`, or a slot
    /// row with several holders) is free or missing meanwhile (a release woke this waiter,
    /// which is going), the next waiter is woken in its place. A wake-up is a hint: the woken
    /// waiter's own attempt decides.
    pub(super) async fn leave_line(&self, id: i64) -> Result<(), StoreError> {
        let s = &self.shared;
        let sql = format!(
            "WITH gone AS (DELETE FROM {waiters}
                           WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2
                           RETURNING 1),
                  next AS (SELECT id FROM {waiters}
                           WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.<>) $2
                           ORDER BY id LIMIT 1)
             SELECT pg_catalog.pg_notify({channel}, {FREE} OPERATOR(pg_catalog.||) $1)::pg_catalog.text
             FROM next
             WHERE EXISTS (SELECT 1 FROM {slots} s LEFT JOIN {leases} l ON l.name OPERATOR(pg_catalog.=) s.slot
                           WHERE l.holder IS NULL)",
            waiters = self.qualified(&s.waiters),
            leases = self.leases(),
            slots = self.slot_rows_sql(s.max_holders),
            channel = waiter_channel_sql("next.id", &s.base),
        );
        let a = (s.name.clone(), id);
        self.request(|c| async move { unnamed::query(&c, &sql, &[&a.0, &a.1]).await })
            .await?;
        Ok(())
    }

    /// Every row of this name (`NAME` and its slot rows): the live holders, oldest (lowest
    /// token) first, and the N the row `NAME` says (1 without it).
    pub(super) async fn read_holders(&self) -> Result<(Vec<Leader>, u32), StoreError> {
        let sql = format!(
            "SELECT name, holder, token, {}, max_holders
             FROM {} l
             WHERE name OPERATOR(pg_catalog.=) $1
                OR pg_catalog.starts_with(name, $1 OPERATOR(pg_catalog.||) '/'::pg_catalog.text)
             ORDER BY token",
            self.holding("l"),
            self.leases()
        );
        let name = self.shared.name.clone();
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[&name]).await })
            .await?;
        let mut max_holders = 1;
        let mut holders = Vec::new();
        for r in rows {
            let row: String = r.get(0);
            if row == self.shared.name {
                max_holders = clamp_n(r.get(4));
            }
            let holder: Option<String> = r.get(1);
            if let Some(holder) = holder.filter(|_| r.get::<_, bool>(3)) {
                holders.push(Leader {
                    key: format!("{}/{}", self.shared.leases, row).into_bytes(),
                    identity: holder.into_bytes(),
                    token: r.get(2),
                    lease_id: None,
                    provisional: false,
                });
            }
        }
        Ok((holders, max_holders))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_mean_the_same_whatever_the_server_says() {
        assert_eq!(literal(r"it's \n"), r"E'it''s \\n'::pg_catalog.text");
    }
}
