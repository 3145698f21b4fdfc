//! The line of waiters on MySQL: a waiter row each in `<p>_waiters`, its id the name's next
//! `top` in the tokens table (strictly increasing, never a clock, and tokens only need to
//! grow), and the wait for a turn every row store shares ([`wait_turn`]) over this store's
//! [`Waiter`]. Nothing tells a waiter of a release (there is no LISTEN): each looks at the line
//! every --retry-period, the first in line reading the lease row too.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::{BootClock, Clock};

use super::super::StoreError;
use super::super::rows::line::{AheadSighting, Line, Look, Waiter};
use super::{MySql, hex, lease_row, take};

impl MySql {
    /// Joins the line: a waiter row at its back, in one transaction with the id it takes.
    pub(super) async fn join_line(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        if s.waiter.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let name = hex(s.name.as_bytes());
        let batch = format!(
            "START TRANSACTION;
             INSERT INTO {tokens} (name, top) VALUES ({name}, 0) ON DUPLICATE KEY UPDATE top = top;
             UPDATE {tokens} SET top = top + 1 WHERE name = {name};
             INSERT INTO {waiters} (name, id, identity, renewals, ttl_ms, expires_at, max_holders)
                 SELECT {name}, top, {me}, 0, {ttl_ms}, TIMESTAMPADD(MICROSECOND, {ttl_us}, NOW(6)),
                        {n}
                 FROM {tokens} WHERE name = {name};
             SELECT top FROM {tokens} WHERE name = {name};
             COMMIT",
            tokens = self.tokens(),
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

    /// A waiter's look, once per --retry-period: renews its own row (an UPDATE, never an
    /// upsert: a look that arrives late, after the row was deleted, puts nothing back), then
    /// reads the row just ahead of it and the lease row. Whether its own row is still there, the
    /// row ahead (none: first), and how long until the lease row may be taken.
    async fn poll_line(&self) -> Result<(bool, Option<AheadSighting>, Duration), StoreError> {
        let s = &self.shared;
        let name = hex(s.name.as_bytes());
        let id = s.waiter.load(Ordering::SeqCst);
        let batch = format!(
            "UPDATE {waiters} SET renewals = renewals + 1, ttl_ms = {ttl_ms},
                 expires_at = TIMESTAMPADD(MICROSECOND, {ttl_us}, NOW(6))
             WHERE name = {name} AND id = {id} AND identity = {me};
             SET @leader_exec_mine = ROW_COUNT();
             SELECT @leader_exec_mine, a.id, a.renewals, a.ttl_ms,
                    l.holder, l.token, l.renewals,
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), l.ttl_ms
             FROM (SELECT 1 AS one) one
             LEFT JOIN (SELECT id, renewals, ttl_ms FROM {waiters}
                        WHERE name = {name} AND id < {id} ORDER BY id DESC LIMIT 1) a ON 1 = 1
             LEFT JOIN {leases} l ON l.name = {name}",
            waiters = self.waiters(),
            leases = self.leases(),
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
        let token: Option<i64> = row.get_opt(5).and_then(Result::ok).flatten();
        let wait = match token {
            Some(_) => {
                let (lease, _) = lease_row(&mut row, 4)?;
                s.sightings.sight(&lease, received, BootClock.now())
            }
            None => Duration::ZERO,
        };
        Ok((mine == 1, ahead, wait))
    }
}

/// A waiter in MySQL's line: it hears of nothing, and looks every --retry-period.
impl Waiter for MySql {
    fn line(&self) -> &Line {
        &self.shared.line
    }

    fn max_holders(&self) -> u32 {
        self.shared.max_holders
    }

    async fn heard(&self, seen: i64, wait: Duration) -> i64 {
        tokio::time::sleep(wait.min(self.shared.poll)).await;
        seen
    }

    async fn look_at_line(&self) -> Result<Look, StoreError> {
        let (mine, ahead, lease_wait) = self.poll_line().await?;
        let received = BootClock.now();
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
