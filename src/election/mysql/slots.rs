//! `--max-holders` N above 1 on MySQL and MariaDB: N slot rows per lease name, as on
//! PostgreSQL (`postgres/slots.rs`), on the rules every row store shares (`rows/slots.rs`).
//!
//! Slot 1 is the lease row `NAME` itself; slot k (2 ≤ k ≤ N) is the row `NAME/k` in the same
//! table (a lease name never contains '/', so no other name's row can be one). Each slot row is
//! a lease row like any other: one holder, its token, renewed by (row, holder, token) without a
//! clock, released with holder NULL, taken over only as `Sighting` says, and a fence row of the
//! same name in `<p>_fences`. Every lease row carries `max_holders`, the N of the instance that
//! last acquired it (1 for rows made by N = 1); every waiter row the N of its owner.
//!
//! An acquisition is one batch, one transaction (see [`super`]): the tokens row locked
//! (`INSERT … ON DUPLICATE KEY UPDATE`, an exclusive lock), then the row `NAME` made if missing
//! and locked the same way, then the decision, each statement reading with a snapshot of its
//! own (READ COMMITTED) taken after both locks were granted, then the writes. Locks are taken in
//! one order everywhere: the tokens row, the row `NAME`, other slot rows, fence rows. The
//! decision is kept in user variables (`@leader_exec_…`) between statements: MySQL refuses an
//! UPDATE whose subquery reads the table it updates, so every UPDATE of the leases table here
//! compares only with variables and literals.
//!
//! Why no N+1st holder: every acquisition of any slot row of a name (and the N = 1 attempt on
//! `NAME`) runs under the lock on the name's tokens row and on `NAME`, and sees every earlier
//! one committed; this one takes only a slot row among its N that is free (holder NULL, or not
//! there yet) or that it has sighted unchanged for a full TTL, by an UPDATE conditional on
//! exactly that (or an INSERT of a row found missing under the lock). Each slot row has one
//! holder at a time, so at most N rows among `NAME`, `NAME/2` … `NAME/N` are held. An instance
//! with N = 1 takes `NAME` by an UPDATE that requires `max_holders = 1` on it: this path sets it
//! to N, under the lock, before it takes anything, so that instance never takes `NAME` beside
//! slot rows held with N above 1.
//!
//! Why the token rises: it is one above the highest token of every row that remembers one —
//! every lease row of the name (slot rows beyond this N included), every fence row of the name,
//! and the tokens row's `top` — read under the lock, and `top` is raised to it in the same
//! transaction. Each kind of row keeps the rule alone, so a deleted tokens row, a deleted or
//! truncated lease row or fence row leaves the next token above every earlier one; only every
//! row of the name gone at once can reissue a token.
//!
//! Another N: a held row of the name that another `max_holders` wrote keeps everything of the
//! name out — no slot is taken and `NAME`'s `max_holders` stays — until this instance has seen it
//! unchanged for a full TTL on its own boot clock (`Sighting`; the sightings of every slot row are
//! `Sightings::sight_slots`'s), whatever the server's clock says of its `expires_at`: a server
//! clock stepped ahead makes a live holder's row look expired, and judging by it would start a
//! command of this N beside one of another. A row so seen is gone: one of this N's slots is
//! taken over, any other is freed (holder NULL, conditional on exactly the sighting, and its
//! fence row cleared), in the same transaction. The server's clock answers only whether to
//! refuse: a held row that has not expired on it, or a live waiter row, with another
//! `max_holders` answers `Mismatch` under the same lock, and nothing is taken. A stepped clock can
//! thus make an instance wait, or refuse it, where it need not; it can never let it start.
//!
//! The line (`rows/line.rs`): a waiter may take a free slot while fewer live waiters stand
//! ahead of it than slots are free, decided here in the acquiring transaction. Nothing tells a
//! waiter of a release: each looks every --retry-period, the first in line at every slot row
//! (and every row another N holds), so a crashed holder is taken over once seen for a full TTL.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::{BootClock, Clock};

use super::super::rows::Row;
use super::super::rows::sighting::Sighting;
use super::super::rows::slots::{SlotRow, clamp_n};
use super::super::{Leader, StoreError};
use super::{Attempt, FOREIGN_JUMP, MySql, TABLE_ROW, hex, hex_digits, take};

/// `expires_at` of the row `l` in microseconds since the epoch (the session's time zone is
/// UTC): compared only.
fn expires_us(l: &str) -> String {
    format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {l}.expires_at)")
}

/// Whether a row (its name, holder, token, renewals and `expires_at` in microseconds, each
/// given as SQL) is exactly one of the `ripe` sightings (row names as hex digits), read from the
/// same server: SQL, a disjunction of literals (`FALSE` without any), so that an UPDATE of the
/// leases table can say it without reading that table in a subquery. A released row another
/// server wrote last is sighted as held by the empty holder (`MySql::row_columns`): `holder`
/// must read it so (`COALESCE(l.holder, X'')`).
fn is_ripe(ripe: &[(String, Sighting)], cols: [&str; 5]) -> String {
    if ripe.is_empty() {
        return "FALSE".to_owned();
    }
    let [name, holder, token, renewals, expires] = cols;
    let each = ripe
        .iter()
        .map(|(row, seen)| {
            format!(
                "({name} = X'{row}' AND {holder} = X'{}' AND {token} = {} AND {renewals} = {} \
                 AND {expires} = {} AND @leader_exec_server = {})",
                seen.holder, seen.token, seen.renewals, seen.expires_us, seen.server
            )
        })
        .collect::<Vec<_>>();
    format!("({})", each.join(" OR "))
}

/// Hex digits (two a byte, as `hex_digits` writes them) back to bytes.
fn unhex(digits: &str) -> Vec<u8> {
    digits
        .as_bytes()
        .chunks(2)
        .filter_map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(text, 16).ok()
        })
        .collect()
}

/// The columns a sighted row is read from, in this order. A slot is picked free ones first,
/// then rows there before missing ones (as PostgreSQL sorts NULL last), the lowest token
/// first: slot 1, the row `NAME`, is the one a new name's first holder takes.
const SIGHTED: &str =
    "c.slot, c.present, c.holder, c.token, c.renewals, c.expires_us, c.ttl_ms, c.other, c.server";

/// A sighted row read from the columns [`SIGHTED`] put first: its name as hex digits (the key
/// of its sighting, compared and written back as `X'…'`).
fn slot_row(row: &mut mysql_async::Row) -> Result<SlotRow, StoreError> {
    let slot: Vec<u8> = take(row, 0)?;
    let present: i64 = take(row, 1)?;
    let holder: Option<Vec<u8>> = take(row, 2)?;
    let seen = match present {
        0 => None,
        _ => Some(Row {
            holder: holder.as_deref().map(hex_digits),
            token: take::<Option<i64>>(row, 3)?.unwrap_or(0),
            renewals: take::<Option<i64>>(row, 4)?.unwrap_or(0),
            expires_us: take::<Option<i64>>(row, 5)?.unwrap_or(0),
            ttl_ms: take::<Option<i64>>(row, 6)?.unwrap_or(0),
            server: take::<Option<i64>>(row, 8)?.unwrap_or(0),
        }),
    };
    let other: i64 = take(row, 7)?;
    Ok(SlotRow {
        row: hex_digits(&slot),
        seen,
        other: other != 0,
    })
}

impl MySql {
    /// The slot rows of `n` for this name, as an SQL relation `(k, slot)` of literals.
    fn slot_rows_sql(&self, n: u32) -> String {
        let rows = (1..=n)
            .map(|k| {
                format!(
                    "SELECT {k} AS k, {} AS slot",
                    hex(self.slot_name(k).as_bytes())
                )
            })
            .collect::<Vec<_>>();
        format!("({})", rows.join(" UNION ALL "))
    }

    /// Slot `k`'s row: `NAME`, or `NAME/k`.
    fn slot_name(&self, k: u32) -> String {
        match k {
            1 => self.shared.name.clone(),
            k => format!("{}/{k}", self.shared.name),
        }
    }

    /// Every row this instance sights, as an SQL relation `(k, slot, present, holder, token,
    /// renewals, expires_us, ttl_ms, other)`: its `n` slot rows (a missing one as not
    /// present), then every held row of the name beyond them that instances with another N hold
    /// (`k` above any slot's). `other`: held with another N than `n`.
    ///
    /// As `MySql::row_columns` reads a lease row: one another server wrote last is held (by the
    /// empty holder, if released), for the longest TTL of the table. So is a missing slot row
    /// while this server is not the table's (`@leader_exec_home` 0: [`home_sql`](Self::home_sql)): the old server
    /// may have had it, held. Such a row, seen unchanged (token, renewals and `expires_us` 0) for
    /// that TTL, is made by the taker.
    fn sighted_sql(&self, n: u32) -> String {
        let slots = self.slot_rows_sql(n);
        let listed = (1..=n)
            .map(|k| hex(self.slot_name(k).as_bytes()))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "(SELECT s.k, s.slot, (l.name IS NOT NULL OR @leader_exec_home = 0) AS present,
                     CASE WHEN l.name IS NULL THEN IF(@leader_exec_home = 0, X'', NULL)
                          WHEN l.server_id <=> @leader_exec_server THEN l.holder
                          ELSE COALESCE(l.holder, X'') END AS holder,
                     IF(l.name IS NULL AND @leader_exec_home = 0, 0, l.token) AS token,
                     IF(l.name IS NULL AND @leader_exec_home = 0, 0, l.renewals) AS renewals,
                     IF(l.name IS NULL AND @leader_exec_home = 0, 0, {l_us}) AS expires_us,
                     IF(l.server_id <=> @leader_exec_server, l.ttl_ms,
                        GREATEST(COALESCE(l.ttl_ms, 0), {table_ttl})) AS ttl_ms,
                     COALESCE(l.holder IS NOT NULL AND l.max_holders <> {n}, 0) AS other,
                     @leader_exec_server AS server
              FROM {slots} s LEFT JOIN {leases} l ON l.name = s.slot
              UNION ALL
              SELECT 1001, o.name, 1, o.holder, o.token, o.renewals, {o_us},
                     IF(o.server_id <=> @leader_exec_server, o.ttl_ms,
                        GREATEST(o.ttl_ms, {table_ttl})), 1, @leader_exec_server
              FROM {leases} o
              WHERE {of_name} AND o.holder IS NOT NULL AND o.max_holders <> {n}
                AND o.name NOT IN ({listed}))",
            l_us = expires_us("l"),
            o_us = expires_us("o"),
            table_ttl = self.table_ttl_sql(),
            leases = self.leases(),
            of_name = self.rows_of_name("o.name"),
        )
    }

    /// `SET @leader_exec_home` to 1 if this server is the table's (the table-wide row names it),
    /// 0 if not: [`sighted_sql`](Self::sighted_sql) reads it.
    fn home_sql(&self) -> String {
        format!(
            "SET @leader_exec_home = (SELECT COUNT(*) FROM {} WHERE name = {TABLE_ROW}
                 AND server_id <=> @leader_exec_server)",
            self.tokens()
        )
    }

    /// `SET @leader_exec_high` to the highest token any row of this name remembers: every
    /// lease row's and fence row's of the name (slot rows of any N), and the tokens row's `top`
    /// (0 without rows). Read under the tokens row's lock.
    pub(super) fn high_sql(&self) -> String {
        format!(
            "SET @leader_exec_high = GREATEST(
                 (SELECT COALESCE(MAX(token), 0) FROM {leases} WHERE {leases_of}),
                 (SELECT COALESCE(MAX(token), 0) FROM {fences} WHERE {fences_of}),
                 (SELECT COALESCE(MAX(top), 0) FROM {tokens} WHERE name = {name}))",
            leases = self.leases(),
            fences = self.fences(),
            tokens = self.tokens(),
            leases_of = self.rows_of_name("name"),
            fences_of = self.rows_of_name("name"),
            name = hex(self.shared.name.as_bytes()),
        )
    }

    /// One attempt to take one of `n` slot rows (see the module's header), in one batch. With
    /// `n` = 1 this is the reconciling attempt of an instance with N = 1 that found the row
    /// `NAME` marked by instances with another N.
    pub(super) async fn attempt_slots(&self, n: u32) -> Result<Attempt, StoreError> {
        let s = &self.shared;
        let name = hex(s.name.as_bytes());
        let me = hex(s.identity.as_bytes());
        let waiter = s.waiter.load(Ordering::SeqCst);
        let ripe = s.sightings.ripe_rows(BootClock.now());
        let sighted = self.sighted_sql(n);
        let l_ripe = is_ripe(
            &ripe,
            [
                "l.name",
                "COALESCE(l.holder, X'')",
                "l.token",
                "l.renewals",
                &expires_us("l"),
            ],
        );
        let c_ripe = is_ripe(
            &ripe,
            [
                "c.slot",
                "c.holder",
                "c.token",
                "c.renewals",
                "c.expires_us",
            ],
        );
        let ahead = match waiter {
            0 => String::new(),
            id => format!(" AND w.id < {id}"),
        };
        let ttl_ms = s.ttl_ms;
        let expiry = format!(
            "TIMESTAMPADD(MICROSECOND, {}, NOW(6))",
            ttl_ms.saturating_mul(1000)
        );
        let batch = format!(
            "START TRANSACTION;
             {tokens_row};
             INSERT INTO {leases}
                     (name, holder, token, renewals, expires_at, ttl_ms, max_holders, server_id)
                 VALUES ({name}, NULL, 0, 0, NOW(6), 0, {n}, @leader_exec_table_server)
                 ON DUPLICATE KEY UPDATE name = name;
             {HOME};
             SET @leader_exec_theirs = (SELECT t.m FROM (
                 SELECT max_holders AS m FROM {leases}
                 WHERE {leases_of} AND holder IS NOT NULL AND expires_at > NOW(6)
                   AND max_holders <> {n}
                 UNION ALL
                 SELECT max_holders FROM {waiters}
                 WHERE name = {name} AND id <> {waiter} AND expires_at > NOW(6)
                   AND max_holders <> {n}) t LIMIT 1);
             SET @leader_exec_blocked = (SELECT COUNT(*) FROM {leases} l
                 WHERE {l_of} AND l.holder IS NOT NULL AND l.max_holders <> {n} AND NOT {l_ripe});
             UPDATE {leases} SET max_holders = {n}
                 WHERE name = {name} AND max_holders <> {n}
                   AND @leader_exec_theirs IS NULL AND @leader_exec_blocked = 0;
             SET @leader_exec_free = (SELECT COUNT(*) FROM {sighted} c
                 WHERE c.k <= {n} AND c.holder IS NULL);
             SET @leader_exec_ahead = (SELECT COUNT(*) FROM {waiters} w
                 WHERE w.name = {name}{ahead} AND w.expires_at > NOW(6));
             SET @leader_exec_slot = (SELECT c.slot FROM {sighted} c
                 WHERE c.k <= {n} AND @leader_exec_theirs IS NULL AND @leader_exec_blocked = 0
                   AND ((c.holder IS NULL AND @leader_exec_ahead < @leader_exec_free) OR {c_ripe})
                 ORDER BY c.holder IS NULL DESC, c.token IS NULL, c.token, c.k LIMIT 1);
             SET @leader_exec_present = (SELECT COUNT(*) FROM {leases}
                 WHERE name = @leader_exec_slot);
             SET @leader_exec_foreign = IF(@leader_exec_present = 0, @leader_exec_home = 0,
                 (SELECT COUNT(*) FROM {leases} WHERE name = @leader_exec_slot
                    AND NOT (server_id <=> @leader_exec_server)) > 0);
             {high};
             SET @leader_exec_token = @leader_exec_high + 1
                 + IF(@leader_exec_jump, {FOREIGN_JUMP}, 0);
             UPDATE {leases} l SET l.holder = {me}, l.token = @leader_exec_token,
                     l.renewals = l.renewals + 1, l.expires_at = {expiry},
                     l.ttl_ms = {ttl_ms}, l.max_holders = {n}, l.server_id = @leader_exec_server
                 WHERE l.name = @leader_exec_slot AND @@global.read_only = 0
                   AND ((l.holder IS NULL AND l.server_id <=> @leader_exec_server) OR {l_ripe});
             INSERT INTO {leases}
                     (name, holder, token, renewals, expires_at, ttl_ms, max_holders, server_id)
                 SELECT @leader_exec_slot, {me}, @leader_exec_token, 1, {expiry}, {ttl_ms}, {n},
                        @leader_exec_server
                 FROM DUAL WHERE @leader_exec_slot IS NOT NULL AND @leader_exec_present = 0
                   AND @@global.read_only = 0;
             SET @leader_exec_won = (SELECT COUNT(*) FROM {leases}
                 WHERE name = @leader_exec_slot AND holder = {me} AND token = @leader_exec_token);
             UPDATE {leases} l SET l.holder = NULL, l.expires_at = NOW(6),
                     l.renewals = l.renewals + 1, l.server_id = @leader_exec_server
                 WHERE {l_of} AND l.holder IS NOT NULL AND l.max_holders <> {n} AND {l_ripe}
                   AND NOT (l.name <=> @leader_exec_slot);
             SET @leader_exec_freed = ROW_COUNT();
             UPDATE {fences} f JOIN {leases} l ON l.name = f.name SET f.holder = NULL
                 WHERE {f_of} AND l.holder IS NULL AND f.token = l.token AND f.holder IS NOT NULL
                   AND @leader_exec_freed > 0;
             INSERT IGNORE INTO {fences} (name, holder, token)
                 SELECT @leader_exec_slot, NULL, 0 FROM DUAL WHERE @leader_exec_won > 0;
             UPDATE {fences} SET holder = {me}, token = @leader_exec_token
                 WHERE name = @leader_exec_slot AND @leader_exec_won > 0;
             UPDATE {tokens} SET top = GREATEST(top, @leader_exec_high,
                     IF(@leader_exec_won > 0, @leader_exec_token, 0)),
                     server_id = IF(@leader_exec_won > 0, @leader_exec_server, server_id)
                 WHERE name = {name};
             DELETE FROM {waiters} WHERE name = {name} AND id = {waiter} AND @leader_exec_won > 0;
             {table};
             SELECT {SIGHTED}, IF(@leader_exec_won > 0, @leader_exec_slot, NULL),
                    IF(@leader_exec_won > 0, @leader_exec_token, NULL), @leader_exec_theirs
             FROM {sighted} c ORDER BY c.k, c.slot;
             COMMIT",
            tokens = self.tokens(),
            leases = self.leases(),
            fences = self.fences(),
            waiters = self.waiters(),
            leases_of = self.rows_of_name("name"),
            l_of = self.rows_of_name("l.name"),
            f_of = self.rows_of_name("f.name"),
            high = self.high_sql(),
            tokens_row = self.tokens_row_sql(),
            table = self.table_row_sql(ttl_ms),
            HOME = self.home_sql(),
        );
        let rows = self.query(batch).await?;
        let received = BootClock.now();
        let mut slots = Vec::with_capacity(rows.len());
        let mut won: Option<(Vec<u8>, i64)> = None;
        let mut theirs: Option<i64> = None;
        for mut row in rows {
            slots.push(slot_row(&mut row)?);
            let slot: Option<Vec<u8>> = take(&mut row, 9)?;
            let token: Option<i64> = take(&mut row, 10)?;
            if let (Some(slot), Some(token)) = (slot, token) {
                won = Some((slot, token));
            }
            theirs = take(&mut row, 11)?;
        }
        if slots.is_empty() {
            return Err(StoreError::Transient(
                "MySQL: no answer to the slot rows' look".into(),
            ));
        }
        if let Some((slot, token)) = won {
            *s.held_row.lock().expect("not poisoned") = String::from_utf8_lossy(&slot).into();
            s.held.store(token, Ordering::SeqCst);
            s.sightings.forget();
            // Its waiter row went in the same transaction.
            s.waiter.store(0, Ordering::SeqCst);
            return Ok(Attempt::Won(token));
        }
        if let Some(theirs) = theirs {
            return Ok(Attempt::Mismatch(clamp_n(theirs)));
        }
        let (holder, wait) = s.sightings.sight_slots(&slots, received, BootClock.now());
        Ok(Attempt::Held {
            holder: holder.as_deref().map(unhex),
            wait,
        })
    }

    /// The first waiter's look at every slot row, and at every row another N holds (no
    /// lock): how long until one may be taken. A row of another N that looks live on the
    /// server's clock answers zero: the attempt that follows refuses this instance.
    pub(super) async fn look_slots(&self) -> Result<Duration, StoreError> {
        let sql = format!(
            "{home};
             SELECT {SIGHTED},
                    c.other AND c.expires_us > TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6))
             FROM {sighted} c ORDER BY c.k, c.slot",
            home = self.home_sql(),
            sighted = self.sighted_sql(self.shared.max_holders),
        );
        let rows = self.query(sql).await?;
        let received = BootClock.now();
        let mut slots = Vec::with_capacity(rows.len());
        let mut live_other = false;
        for mut row in rows {
            slots.push(slot_row(&mut row)?);
            live_other |= take::<Option<i64>>(&mut row, 9)?.unwrap_or(0) != 0;
        }
        let wait = (self.shared.sightings)
            .sight_slots(&slots, received, BootClock.now())
            .1;
        Ok(if live_other { Duration::ZERO } else { wait })
    }

    /// Every row of this name (`NAME` and its slot rows): the live holders, oldest (lowest
    /// token) first, and the N the row `NAME` says (1 without it).
    pub(super) async fn read_holders(&self) -> Result<(Vec<Leader>, u32), StoreError> {
        let sql = format!(
            "SELECT l.name, l.holder, l.token, {}, l.max_holders FROM {} l WHERE {}
             ORDER BY l.token",
            self.holding("l"),
            self.leases(),
            self.rows_of_name("l.name"),
        );
        let mut max_holders = 1;
        let mut holders = Vec::new();
        for mut row in self.query(sql).await? {
            let name: Vec<u8> = take(&mut row, 0)?;
            let holder: Option<Vec<u8>> = take(&mut row, 1)?;
            let token: i64 = take(&mut row, 2)?;
            let live: i64 = take(&mut row, 3)?;
            if name == self.shared.name.as_bytes() {
                max_holders = clamp_n(take(&mut row, 4)?);
            }
            if let Some(holder) = holder.filter(|_| live == 1) {
                holders.push(self.leader(&name, holder, token));
            }
        }
        Ok((holders, max_holders))
    }
}

/// The lease name a row's name (bytes) belongs to: the row `NAME` itself, or slot row `NAME/k`.
/// Lease names never contain '/' (validate.rs), as `rows::slots::lease_of_row` says of text.
pub(super) fn lease_of(row: &[u8]) -> &[u8] {
    row.split(|b| *b == b'/').next().unwrap_or(row)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn hex_digits_go_back_to_their_bytes() {
        assert_eq!(unhex(&hex_digits(b"a\x00\xff/")), b"a\x00\xff/");
        assert_eq!(lease_of(b"jobs/3"), b"jobs");
        assert_eq!(lease_of(b"jobs"), b"jobs");
        assert_eq!(lease_of(b"\xffj/2"), b"\xffj");
    }

    #[test]
    fn a_ripe_row_is_named_by_every_column_it_was_seen_with() {
        assert_eq!(is_ripe(&[], ["n", "h", "t", "r", "e"]), "FALSE");
        let seen = Sighting {
            holder: "61".into(),
            token: 4,
            renewals: 9,
            expires_us: 17,
            server: 3,
            ttl: Duration::from_secs(1),
        };
        assert_eq!(
            is_ripe(&[("6A2F32".into(), seen)], ["n", "h", "t", "r", "e"]),
            "((n = X'6A2F32' AND h = X'61' AND t = 4 AND r = 9 AND e = 17 \
             AND @leader_exec_server = 3))"
        );
    }
}
