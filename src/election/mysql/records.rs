//! [`Records`] and [`Handover`] on MySQL: records beside the election, each fenced write one
//! transaction sent as one batch.
//!
//! The fence: the batch first reads the lease row `LOCK IN SHARE MODE` where it still holds
//! the writer's identity and token (and has not run out on the server's clock, which can only
//! refuse a write, never allow one), then writes the record from that same row
//! (`INSERT … SELECT … FROM leases WHERE …`), then commits. A takeover, a release or a removal
//! of the row is an UPDATE, which waits for the shared lock: it comes after the write, or the
//! write finds no row and writes nothing. Under READ COMMITTED the INSERT's own read takes no
//! lock; the locking read before it holds the row unchanged until the commit.

use std::time::Duration;

use super::super::{Candidacy, Handover, Leader, RawRecord, Records, StoreError};
use super::{MySql, hex, take};

impl MySql {
    /// A record is visible while its retention lasts, and one that goes with a lease while that
    /// lease row still holds its token: SQL over the alias `r`.
    fn visible(&self) -> String {
        format!(
            "(r.expires_at IS NULL OR r.expires_at > NOW(6))
             AND (r.lease_token IS NULL OR EXISTS (
                 SELECT 1 FROM {} h WHERE h.name = r.lease_name AND h.token = r.lease_token
                     AND {}))",
            self.leases(),
            self.holding("h")
        )
    }

    /// One fenced write: `row` is the condition on the lease row `l` that must hold (locked in
    /// share mode until the commit); `values` the record's columns, selected from that row. The
    /// answer: whether the fence let it through.
    async fn fenced_write(
        &self,
        key: &[u8],
        row: &str,
        values: &str,
        update: &str,
    ) -> Result<bool, StoreError> {
        let batch = format!(
            "START TRANSACTION;
             SELECT COUNT(*) FROM {leases} l WHERE {row} LOCK IN SHARE MODE;
             INSERT INTO {records} (`key`, value, expires_at, lease_name, lease_token)
                 SELECT {key}, {values} FROM {leases} l WHERE {row}
                 ON DUPLICATE KEY UPDATE {update};
             SELECT ROW_COUNT();
             COMMIT",
            leases = self.leases(),
            records = self.records(),
            key = hex(key),
        );
        let mut rows = self.query(batch).await?;
        let written: i64 = match rows.pop() {
            Some(mut row) => take(&mut row, 0)?,
            None => 0,
        };
        Ok(written > 0)
    }

    /// The held row (`NAME`, or a slot row `NAME/k`), still this identity's with `token`: the
    /// fence of this instance's writes.
    fn own_row(&self, token: i64) -> String {
        format!(
            "l.name = {} AND l.holder = {} AND l.token = {token} AND l.expires_at > NOW(6)",
            hex(self.held_row().as_bytes()),
            hex(self.shared.identity.as_bytes()),
        )
    }

    /// `NOW(6)` plus `d`: SQL.
    fn after(d: Duration) -> String {
        let us = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        format!("TIMESTAMPADD(MICROSECOND, {us}, NOW(6))")
    }
}

impl Records for MySql {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = format!(
            "SELECT r.value FROM {} r WHERE r.`key` = {} AND {}",
            self.records(),
            hex(key.as_bytes()),
            self.visible()
        );
        match self.query(sql).await?.pop() {
            Some(mut row) => Ok(Some(take(&mut row, 0)?)),
            None => Ok(None),
        }
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let expiry = MySql::after(retention);
        let value = hex(&value);
        let written = self
            .fenced_write(
                key.as_bytes(),
                &self.own_row(candidacy.token),
                &format!("{value}, {expiry}, NULL, NULL"),
                &format!(
                    "value = {value}, expires_at = {expiry}, lease_name = NULL, lease_token = NULL"
                ),
            )
            .await?;
        if written {
            // Best effort: records past their retention go.
            let sql = format!("DELETE FROM {} WHERE expires_at < NOW(6)", self.records());
            let _ = self.query(sql).await;
        }
        Ok(written)
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let p = hex(prefix.as_bytes());
        let sql = format!(
            "SELECT r.`key`, r.value FROM {} r WHERE LEFT(r.`key`, LENGTH({p})) = {p} AND {}
             ORDER BY r.`key`",
            self.records(),
            self.visible()
        );
        let mut records = Vec::new();
        for mut row in self.query(sql).await? {
            let key: Vec<u8> = take(&mut row, 0)?;
            let value: Vec<u8> = take(&mut row, 1)?;
            let id = key
                .strip_prefix(prefix.as_bytes())
                .map_or(key.clone(), <[u8]>::to_vec);
            records.push((id, value));
        }
        Ok(records)
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let value = hex(&value);
        self.fenced_write(
            key.as_bytes(),
            &self.own_row(candidacy.token),
            &format!("{value}, NULL, l.name, l.token"),
            &format!(
                "value = {value}, expires_at = NULL, lease_name = {}, lease_token = {}",
                hex(self.held_row().as_bytes()),
                candidacy.token
            ),
        )
        .await
    }
}

impl Handover for MySql {
    /// The request is a record like any other, fenced by the lease row still holding the
    /// leader's token (not by an identity, which `resign` does not have).
    async fn request_handover(
        &self,
        leader: &Leader,
        key: &str,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let Some(name) = self.name_of(leader) else {
            return Ok(false);
        };
        let expiry = MySql::after(retention);
        let value = hex(leader.token.to_string().as_bytes());
        self.fenced_write(
            key.as_bytes(),
            &format!(
                "l.name = {} AND l.token = {} AND l.holder IS NOT NULL AND l.expires_at > NOW(6)",
                hex(name),
                leader.token
            ),
            &format!("{value}, {expiry}, NULL, NULL"),
            &format!(
                "value = {value}, expires_at = {expiry}, lease_name = NULL, lease_token = NULL"
            ),
        )
        .await
    }

    /// Frees the row only while it holds `leader.token` and counts as held (`holding`), and
    /// its fence row, in one transaction.
    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        let Some(name) = self.name_of(leader) else {
            return Ok(false);
        };
        let sql = self.freeing_sql(
            &format!(
                "token = {} AND {}",
                leader.token,
                self.holding(&self.leases())
            ),
            name,
            leader.token,
        );
        let removed: i64 = match self.query(sql).await?.pop() {
            Some(mut row) => take(&mut row, 0)?,
            None => 0,
        };
        Ok(removed > 0)
    }
}

impl MySql {
    /// The lease name a holder's key (`TABLE/NAME`, as `status` shows it) names, if it is a row
    /// of this table.
    fn name_of<'a>(&self, leader: &'a Leader) -> Option<&'a [u8]> {
        leader
            .key
            .strip_prefix(format!("{}/", self.shared.leases).as_bytes())
    }
}
