//! [`Read`] on MySQL: who holds the lease row (and, with N above 1, its slot rows), every name in the table, the time left; and a
//! reader (`status`, `watch`, `check`) that holds nothing.

use std::collections::HashMap;
use std::time::Duration;

use super::super::rows::reader_timing;
use super::super::rows::slots::clamp_n;
use super::super::{Election, Leader, LeaseTime, Observation, Open, Read, StoreError};
use super::slots::lease_of;
use super::{MySql, Target, hex, take};

/// How often `watch` reads the row again: there is nothing to listen on.
const WATCH_POLL: Duration = Duration::from_secs(1);

impl MySql {
    /// MySQL for reading (`status`, `watch`, `check`): it holds no lease, so it has no TTL
    /// ([`reader_timing`]).
    pub fn reader(target: Target, open: Open) -> Result<MySql, StoreError> {
        let timing = reader_timing(open.connect_timeout);
        MySql::new(target, open.for_reader(timing))
    }

    /// Whether the lease row `l` (an alias) counts as held, for `status`, `check`, `release`
    /// and `resign --force`: SQL. A row is held until its `expires_at` on the server's clock,
    /// and a held slot (`hold`: its state record, fenced on this row's token, carries
    /// `held_for_ms`) for as long as it has that holder and token, whatever `expires_at` says,
    /// as on PostgreSQL: such a row keeps waiters out until the first of them has seen it
    /// unchanged for the hold's bound, and hiding it by the server's clock would let that clock
    /// decide what `status` shows. A display and a fence only: a takeover is decided by the
    /// taker's own sighting, never by this. JSON escapes every `"` inside a string, so
    /// `"held_for_ms":` occurs in a record only as that key.
    pub(super) fn holding(&self, l: &str) -> String {
        format!(
            "{l}.holder IS NOT NULL AND ({l}.expires_at > NOW(6) OR EXISTS (
                 SELECT 1 FROM {records} s WHERE s.lease_name = {l}.name
                     AND s.lease_token = {l}.token AND LOCATE({held}, s.value) > 0))",
            records = self.records(),
            held = hex(b"\"held_for_ms\":"),
        )
    }

    /// How many waiters stand in line for the name `name` (SQL), live on the server's clock (a
    /// waiter renews its row every --retry-period): SQL for a count. A display only.
    fn waiting_sql(&self, name: &str) -> String {
        format!(
            "SELECT COUNT(*) FROM {} w WHERE w.name = {name} AND w.expires_at > NOW(6)",
            self.waiters()
        )
    }

    pub(super) fn leader(&self, name: &[u8], identity: Vec<u8>, token: i64) -> Leader {
        let mut key = format!("{}/", self.shared.leases).into_bytes();
        key.extend_from_slice(name);
        Leader {
            key,
            identity,
            token,
            lease_id: None,
            provisional: false,
        }
    }
}

impl Read for MySql {
    /// Every row of the name: the lease row and, with N above 1, its slot rows (`slots.rs`).
    async fn read_election(&self) -> Result<Observation, StoreError> {
        let (holders, max_holders) = self.read_holders().await?;
        let waiting: i64 = match self
            .query(self.waiting_sql(&hex(self.shared.name.as_bytes())))
            .await?
            .pop()
        {
            Some(mut row) => take(&mut row, 0)?,
            None => 0,
        };
        Ok(Observation {
            candidates: holders.len() as i64 + waiting,
            holders,
            max_holders,
            revision: 0,
        })
    }

    /// Nothing tells of a change: wake after a poll, or when the holder's lease runs out on the
    /// server's clock if that is sooner (the caller reads again and compares).
    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        let left = match seen.leader() {
            Some(leader) => self
                .lease_time(leader)
                .await?
                .map_or(Duration::ZERO, |t| t.remaining),
            None => WATCH_POLL,
        };
        tokio::time::sleep(left.min(WATCH_POLL)).await;
        Ok(())
    }

    /// The prefix is the table: every row in it is an election, sorted by name (bytes); slot
    /// rows (`NAME/k`, with N above 1) are folded into their name's election.
    async fn list_elections(&self, _prefix: &str) -> Result<Vec<Election>, StoreError> {
        let sql = format!(
            "SELECT l.name, l.holder, l.token, {}, l.max_holders, ({}) FROM {} l ORDER BY l.name",
            self.holding("l"),
            self.waiting_sql("l.name"),
            self.leases()
        );
        let mut elections: Vec<Election> = Vec::new();
        let mut at: HashMap<Vec<u8>, usize> = HashMap::new();
        for mut row in self.query(sql).await? {
            let row_name: Vec<u8> = take(&mut row, 0)?;
            let holder: Option<Vec<u8>> = take(&mut row, 1)?;
            let token: i64 = take(&mut row, 2)?;
            let live: i64 = take(&mut row, 3)?;
            let n: i64 = take(&mut row, 4)?;
            let waiting: i64 = take(&mut row, 5)?;
            let name = lease_of(&row_name).to_vec();
            let i = *at.entry(name.clone()).or_insert_with(|| {
                elections.push(Election {
                    name: name.clone(),
                    holders: Vec::new(),
                    max_holders: 1,
                    candidates: 0,
                });
                elections.len() - 1
            });
            let election = &mut elections[i];
            if row_name == name {
                election.max_holders = clamp_n(n);
                election.candidates += waiting;
            }
            if let Some(holder) = holder.filter(|_| live == 1) {
                election.holders.push(self.leader(&row_name, holder, token));
                election.candidates += 1;
            }
        }
        for election in &mut elections {
            election.holders.sort_by_key(|h| h.token);
        }
        Ok(elections)
    }

    async fn lease_time(&self, leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        let Some(name) = leader
            .key
            .strip_prefix(format!("{}/", self.shared.leases).as_bytes())
        else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, NOW(6), l.expires_at) / 1000)),
                    l.ttl_ms
             FROM {} l WHERE l.name = {} AND l.token = {} AND {}",
            self.leases(),
            hex(name),
            leader.token,
            self.holding("l")
        );
        let mut rows = self.query(sql).await?;
        let Some(mut row) = rows.pop() else {
            return Ok(None);
        };
        let left: i64 = take(&mut row, 0)?;
        let granted: i64 = take(&mut row, 1)?;
        Ok(Some(LeaseTime {
            remaining: Duration::from_millis(left.max(0) as u64),
            granted: Duration::from_millis(granted.max(0) as u64),
        }))
    }
}
