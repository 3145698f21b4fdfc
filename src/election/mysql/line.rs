//! The line of waiters on MySQL: a waiter row each in `<p>_waiters`, its id the name's next
//! `top` in the tokens table (strictly increasing, never a clock, and tokens only need to
//! grow), and the wait for a turn every row store shares ([`wait_turn`]) over this store's
//! [`Waiter`]. Nothing tells a waiter of a release (there is no LISTEN): the first waiters look
//! at the line every --retry-period, the first in line reading the lease row too, and those
//! further back less often, by how many stand ahead ([`look_spacing`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::{BootClock, Clock};

use super::super::StoreError;
use super::super::rows::line::{AheadSighting, Line, Look, Waiter, look_spacing};
use super::{MySql, hex, lease_row, take};

impl MySql {
    /// Joins the line: a waiter row at its back, in one transaction with the id it takes.
    ///
    /// A join whose answer did not come within its timer (200 instances joining at once queue
    /// on the name's `top`) may still commit: a row this instance never learnt of, which would
    /// stand in line until the waiter behind had seen it unchanged for a TTL, each such row
    /// another TTL. So a join first deletes the rows of this identity that never had a look
    /// (`renewals = 0`; an owner looks right after joining), after the name's `top` is locked:
    /// an earlier join of this instance that reached the server has committed by then.
    pub(super) async fn join_line(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        if s.waiter.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let name = hex(s.name.as_bytes());
        let batch = format!(
            "START TRANSACTION;
             {tokens_row};
             UPDATE {tokens} SET top = top + 1 WHERE name = {name};
             DELETE FROM {waiters} WHERE name = {name} AND identity = {me} AND renewals = 0;
             INSERT INTO {waiters} (name, id, identity, renewals, ttl_ms, expires_at, max_holders)
                 SELECT {name}, top, {me}, 0, {ttl_ms}, TIMESTAMPADD(MICROSECOND, {ttl_us}, NOW(6)),
                        {n}
                 FROM {tokens} WHERE name = {name};
             SELECT top FROM {tokens} WHERE name = {name};
             COMMIT",
            tokens = self.tokens(),
            tokens_row = self.tokens_row_sql(),
            waiters = self.waiters(),
            me = hex(s.identity.as_bytes()),
            ttl_ms = s.ttl_ms,
            ttl_us = s.ttl_ms.saturating_mul(1000),
            n = s.max_holders,
        );
        let id: i64 = match self.query(batch).await?.pop() {
            Some(mut row) => take(&mut row, 0)?,
            None => return Err(StoreError::Transient("MySQL: no place in line".into())),
        };
        s.waiter.store(id, Ordering::SeqCst);
        s.line.forget();
        Ok(())
    }

    /// Leaves the line: deletes this waiter's row (if the one behind has not already).
    pub(super) async fn leave_line(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        let id = s.waiter.load(Ordering::SeqCst);
        if id == 0 {
            return Ok(());
        }
        let sql = format!(
            "DELETE FROM {} WHERE name = {} AND id = {id}",
            self.waiters(),
            hex(s.name.as_bytes())
        );
        self.query(sql).await?;
        let _ = s
            .waiter
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
        Ok(())
    }

    /// A waiter's look: renews its own row (an UPDATE, never an upsert: a look that arrives
    /// late, after the row was deleted, puts nothing back), then reads the row just ahead of it,
    /// how many rows stand ahead (a range of the primary key), and the lease row. Whether its
    /// own row is still there, the row ahead (none: first), how long until the lease row may be
    /// taken, and the rows ahead.
    async fn poll_line(&self) -> Result<(bool, Option<AheadSighting>, Duration, u64), StoreError> {
        let s = &self.shared;
        let name = hex(s.name.as_bytes());
        let id = s.waiter.load(Ordering::SeqCst);
        let batch = format!(
            "UPDATE {waiters} SET renewals = renewals + 1, ttl_ms = {ttl_ms},
                 expires_at = TIMESTAMPADD(MICROSECOND, {ttl_us}, NOW(6))
             WHERE name = {name} AND id = {id} AND identity = {me};
             SET @leader_exec_mine = ROW_COUNT();
             SELECT @leader_exec_mine, a.id, a.renewals, a.ttl_ms, {columns},
                    (SELECT COUNT(*) FROM {waiters} WHERE name = {name} AND id < {id})
             FROM (SELECT 1 AS one) one
             LEFT JOIN (SELECT id, renewals, ttl_ms FROM {waiters}
                        WHERE name = {name} AND id < {id} ORDER BY id DESC LIMIT 1) a ON 1 = 1
             LEFT JOIN {leases} l ON l.name = {name}",
            waiters = self.waiters(),
            leases = self.leases(),
            columns = self.row_columns("l"),
            me = hex(s.identity.as_bytes()),
            ttl_ms = s.ttl_ms,
            ttl_us = s.ttl_ms.saturating_mul(1000),
        );
        let mut row = self
            .query(batch)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Transient("MySQL: a look answered nothing".into()))?;
        let received = BootClock.now();
        let mine: i64 = take(&mut row, 0)?;
        let ahead_id: Option<i64> = take(&mut row, 1)?;
        let ahead = match ahead_id {
            Some(ahead_id) => {
                let renewals: i64 = take(&mut row, 2)?;
                let ttl_ms: i64 = take(&mut row, 3)?;
                Some(s.line.ahead(ahead_id, renewals, ttl_ms))
            }
            None => None,
        };
        let in_front: i64 = take(&mut row, 10)?;
        let token: Option<i64> = row.get_opt(5).and_then(Result::ok).flatten();
        let wait = match token {
            Some(_) => {
                let (lease, _) = lease_row(&mut row, 4)?;
                s.sightings.sight(&lease, received, BootClock.now())
            }
            None => Duration::ZERO,
        };
        Ok((mine == 1, ahead, wait, u64::try_from(in_front).unwrap_or(0)))
    }
}

/// A waiter in MySQL's line: it hears of nothing, and looks every --retry-period, or less often
/// far back in the line ([`look_spacing`]).
impl Waiter for MySql {
    fn line(&self) -> &Line {
        &self.shared.line
    }

    fn max_holders(&self) -> u32 {
        self.shared.max_holders
    }

    async fn heard(&self, seen: i64, wait: Duration) -> i64 {
        let every = Duration::from_nanos(self.shared.look_every.load(Ordering::SeqCst));
        tokio::time::sleep(wait.min(every)).await;
        seen
    }

    async fn look_at_line(&self) -> Result<Look, StoreError> {
        let (mine, ahead, lease_wait, in_front) = self.poll_line().await?;
        let received = BootClock.now();
        let s = &self.shared;
        // Set before the look is acted on: the next wait (`heard`) is spaced by this look (the
        // first in line, none ahead, looks every `poll`).
        let every = look_spacing(
            s.poll,
            Duration::from_millis(u64::try_from(s.ttl_ms).unwrap_or(0)),
            s.max_holders,
            in_front,
        );
        s.look_every.store(
            u64::try_from(every.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        if !mine {
            // Taken for dead by the waiter behind (this process was paused for a TTL, say):
            // back in line, at the back.
            self.shared.waiter.store(0, Ordering::SeqCst);
            self.join_line().await?;
            return Ok(Look::Again { heard: 0 });
        }
        Ok(Look::Line {
            ahead,
            lease_wait,
            received,
        })
    }

    /// N above 1: every slot row, and every row another N holds (`slots.rs`).
    async fn look_at_slots(&self) -> Result<Duration, StoreError> {
        self.look_slots().await
    }

    /// Deletes a dead waiter row ahead, only if it is still exactly as seen.
    async fn skip_dead(&self, dead: &AheadSighting) -> Result<(), StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE name = {} AND id = {} AND renewals = {}",
            self.waiters(),
            hex(self.shared.name.as_bytes()),
            dead.id,
            dead.renewals
        );
        self.query(sql).await?;
        Ok(())
    }
}
