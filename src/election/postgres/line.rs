//! The line of waiters on PostgreSQL: listening for releases, acquiring the row, looking at the
//! line. The sightings of a crashed holder and of a dead waiter ahead, and the wait for a turn,
//! are `rows/`'s (`rows/sighting.rs`, `rows/line.rs`); the statements that keep them are here.

use super::*;

impl Postgres {
    /// Makes sure the listening session is up; a new one counts as a release heard (anything
    /// may have happened while none listened).
    pub(super) async fn ensure_listener(&self) -> Result<(), StoreError> {
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
    pub(super) async fn probe(&self, channel: &str) -> Result<bool, StoreError> {
        let shared = &self.shared;
        let mut rx = shared.heard.subscribe();
        let before = rx.borrow_and_update().probes;
        let wait = shared.request_timeout.min(Duration::from_secs(1));
        let sql = "SELECT pg_catalog.pg_notify($1, $2)::pg_catalog.text";
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
    pub(super) fn look_by(&self, left: Duration) -> tokio::time::Instant {
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
    pub(super) fn waiter_channel(&self, id: i64) -> String {
        let mut channel = format!("w{id}_{}", self.shared.base);
        channel.truncate(63);
        channel
    }

    /// The channel the listening session should be on: this waiter's own while it waits in
    /// line (a release wakes only the first waiter), the table's otherwise (`watch`).
    pub(super) fn listen_channel(&self) -> String {
        match self.shared.waiter.load(Ordering::SeqCst) {
            0 => self.shared.channel.clone(),
            id => self.waiter_channel(id),
        }
    }

    /// The waiters in line whose last renewal was within their TTL as the server's clock says
    /// (a display: a dead row stays in line until the waiter behind it skips it).
    pub(super) async fn waiting(&self) -> Result<i64, StoreError> {
        let sql = format!(
            "SELECT pg_catalog.count(*) FROM {}
             WHERE name OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.now()",
            self.qualified(&self.shared.waiters)
        );
        let name = self.shared.name.clone();
        let row = self
            .request(|c| async move { unnamed::query_one(&c, &sql, &[&name]).await })
            .await?;
        Ok(row.get(0))
    }

    /// The row: (holder, token, milliseconds left, whether it has not expired).
    pub(super) async fn read_row(
        &self,
    ) -> Result<Option<(Option<String>, i64, i64, bool)>, StoreError> {
        let sql = format!(
            "SELECT holder, token, {LEFT_MS},
                    expires_at OPERATOR(pg_catalog.>) pg_catalog.now()
             FROM {} WHERE name OPERATOR(pg_catalog.=) $1",
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
    /// at once by the first in line — by an instance not in line yet only when nobody is — and a
    /// held one only as `Sighting` says: when this waiter has seen it unchanged for a full TTL,
    /// and only if it is still exactly that.
    ///
    /// First in line (`rows/line.rs`): no live waiter row ahead (none at all for an instance not in
    /// line). So a leader that handed over and campaigns again (`--recampaign`), or a newcomer,
    /// never takes a released row from a waiter that polls rather than listens (behind pgbouncer)
    /// and has not looked yet; the line is first come, first served, as on etcd and ZooKeeper. A
    /// waiter row counts as live until its `expires_at` on the server's clock, which its owner
    /// renews every look: that clock decides only the order of the line (a stepped clock may let
    /// one instance go ahead of a dead-looking one), never who holds the lease row.
    ///
    /// The row says which `--max-holders` its last users had (`max_holders`): only a row that
    /// says 1 is taken here (instances with N above 1 set it, under the lock `slots.rs` takes,
    /// before they take any of their rows, so this conditional UPDATE, which waits for that
    /// lock's transaction, sees it). A row that says otherwise is answered with its value: the
    /// caller asks the locked path whether anyone with that N is still there.
    ///
    /// The token is above the row's own and its `top_token` (the highest token the name's slot
    /// rows had when instances with N above 1 last acquired: `slots.rs` keeps it, under the
    /// lock this UPDATE waits for), and drawn from the sequence: above every earlier token of
    /// the name, also after the sequence was set back or N changed.
    pub(super) async fn acquire(&self) -> Result<Option<(Attempt, i64)>, StoreError> {
        let shared = &self.shared;
        let waiter = shared.waiter.load(Ordering::SeqCst);
        // What may be taken over: the sighting, once seen for its full TTL.
        let ripe = shared.sightings.ripe(BootClock.now());
        let update = self.acquire_sql(waiter, ripe.is_some());
        let a = (
            shared.name.clone(),
            shared.identity.clone(),
            shared.ttl_ms,
            shared.channel.clone(),
            waiter,
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
                shared.sightings.forget_one();
                // Its waiter row went in the same statement.
                shared.waiter.store(0, Ordering::SeqCst);
                (Attempt::Won(token), 1)
            }
            None => {
                let seen = lease_row(&row, 2);
                let attempt = Attempt::Held {
                    holder: seen.holder.clone(),
                    wait: shared.sightings.sight(&seen, received, BootClock.now()),
                };
                (attempt, row.get(7))
            }
        }))
    }

    /// The acquiring `UPDATE` for a waiter `waiter` (0: not in line), with the takeover of a
    /// ripe sighting or without: [`acquire`](Self::acquire)'s parameters.
    pub(super) fn acquire_sql(&self, waiter: i64, ripe: bool) -> String {
        let shared = &self.shared;
        // The statement names only the conditions this attempt can meet: a waiter row ahead
        // (`id < $5`) only for a waiter in line, the sighting's takeover only when one is ripe
        // (its parameters would be NULLs, which match nothing). On a new backend every
        // condition is planned on cold catalog caches; one left out is one not paid for, and
        // the rows it could take are the same.
        let left_line = self.left_line(waiter);
        let ahead = match waiter {
            0 => "",
            _ => " AND w.id OPERATOR(pg_catalog.<) $5",
        };
        let takeover = match ripe {
            false => "",
            true => {
                "
                     OR (holder OPERATOR(pg_catalog.=) $6 AND token OPERATOR(pg_catalog.=) $7
                         AND renewals OPERATOR(pg_catalog.=) $8
                         AND (EXTRACT(EPOCH FROM expires_at) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.int8
                             OPERATOR(pg_catalog.=) $9)"
            }
        };
        format!(
            "WITH won AS (
                 UPDATE {leases}
                 SET holder = $2,
                     token = GREATEST(token OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                                      top_token OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                                      pg_catalog.nextval({tokens}::pg_catalog.regclass)),
                     renewals = renewals OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                     expires_at = {expiry}, ttl_ms = $3
                 WHERE name OPERATOR(pg_catalog.=) $1 AND max_holders OPERATOR(pg_catalog.=) 1::pg_catalog.int8
                     AND ((holder IS NULL
                         AND NOT EXISTS (SELECT 1 FROM {waiters} w
                                         WHERE w.name OPERATOR(pg_catalog.=) $1{ahead}
                                           AND w.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())){takeover})
                 RETURNING token),
             told AS (SELECT pg_catalog.pg_notify($4, {taken}) FROM won){left_line}
             SELECT (SELECT token FROM won), (SELECT pg_catalog.count(*) FROM told),
                    {ROW_COLUMNS}, max_holders
             FROM {leases} WHERE name OPERATOR(pg_catalog.=) $1",
            leases = self.leases(),
            waiters = self.qualified(&shared.waiters),
            tokens = quote_literal(&self.qualified(&shared.tokens)),
            expiry = expiry_sql("$3"),
            taken = TAKEN,
        )
    }

    /// One attempt on the lease row, a new row for a new name included; a win is noted as
    /// held (for the keeper).
    pub(super) async fn attempt(&self) -> Result<Attempt, StoreError> {
        if self.shared.max_holders > 1 {
            return self.attempt_slots(self.shared.max_holders).await;
        }
        // A newcomer (not in line, no sighting to take over) sends the INSERT of a new row
        // with its UPDATE, pipelined on the session (one round trip for a new lease name). The
        // INSERT writes only where no row of the name exists (ON CONFLICT DO NOTHING), the
        // UPDATE only where one does, so at most one of them takes anything, in either order;
        // a newcomer whose row exists pays one token number of the sequence (a gap: tokens
        // only ever need to grow).
        let newcomer = self.shared.waiter.load(Ordering::SeqCst) == 0
            && self.shared.sightings.ripe(BootClock.now()).is_none();
        let (acquired, inserted) = if newcomer {
            let (acquired, inserted) = tokio::join!(self.acquire(), self.insert_new());
            let acquired = acquired?;
            // Where the UPDATE found the row, the INSERT took nothing, whatever it answered
            // (a failed statement writes nothing): its error counts only when no row was found.
            let inserted = match acquired {
                None => inserted?,
                Some(_) => inserted.unwrap_or(None),
            };
            (acquired, Some(inserted))
        } else {
            (self.acquire().await?, None)
        };
        let attempt = match (acquired, inserted) {
            (_, Some(Some(token))) => Attempt::Won(token),
            // Left by instances with another --max-holders: whether any of them is still
            // there, and if none is, the row back to 1 and an attempt, under the lock.
            (Some((Attempt::Held { .. }, theirs)), _) if theirs != 1 => {
                return self.attempt_slots(1).await;
            }
            (Some((attempt, _)), _) => attempt,
            // No row: the INSERT (sent already, or now) makes it.
            (None, inserted) => {
                let inserted = match inserted {
                    Some(inserted) => inserted,
                    None => self.insert_new().await?,
                };
                match inserted {
                    Some(token) => Attempt::Won(token),
                    // Inserted by another instance meanwhile.
                    None => Attempt::Held {
                        holder: None,
                        wait: self.look().await?,
                    },
                }
            }
        };
        if let Attempt::Won(token) = attempt {
            self.shared.held.store(token, Ordering::SeqCst);
        }
        Ok(attempt)
    }

    /// The row, for a waiter: read (no lock), noted as a sighting; how long until it may be
    /// taken (zero: free, gone, or seen unchanged for a full TTL).
    pub(super) async fn look(&self) -> Result<Duration, StoreError> {
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM {} WHERE name OPERATOR(pg_catalog.=) $1",
            self.leases()
        );
        let name = self.shared.name.clone();
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&name]).await })
            .await?;
        let received = BootClock.now();
        Ok(match row {
            Some(row) => {
                let row = lease_row(&row, 0);
                self.shared.sightings.sight(&row, received, BootClock.now())
            }
            None => Duration::ZERO,
        })
    }

    /// The part of an acquiring statement that takes the winner's own row out of the line
    /// (`$5`: its id) in the same statement. An instance not in line (a newcomer: `waiter` 0)
    /// has none, so its statement has no DELETE: nothing to delete, and one table access fewer
    /// to plan, on a new backend's cold catalog caches a fair part of its first statement.
    fn left_line(&self, waiter: i64) -> String {
        match waiter {
            0 => String::new(),
            _ => format!(
                ",
             left_line AS (DELETE FROM {waiters}
                           WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $5
                           AND EXISTS (SELECT 1 FROM won))",
                waiters = self.qualified(&self.shared.waiters),
            ),
        }
    }

    pub(super) async fn insert_new(&self) -> Result<Option<i64>, StoreError> {
        let shared = &self.shared;
        let waiter = shared.waiter.load(Ordering::SeqCst);
        let insert = self.insert_sql(waiter);
        let a = (
            shared.name.clone(),
            shared.identity.clone(),
            shared.ttl_ms,
            shared.channel.clone(),
            waiter,
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

    /// The `INSERT` of a new name's row for a waiter `waiter` (0: not in line):
    /// [`insert_new`](Self::insert_new)'s parameters, the first four of
    /// [`acquire`](Self::acquire)'s.
    pub(super) fn insert_sql(&self, waiter: i64) -> String {
        format!(
            "WITH won AS (
                 INSERT INTO {leases} (name, holder, token, expires_at, ttl_ms)
                 VALUES ($1, $2, pg_catalog.nextval({tokens}::pg_catalog.regclass), {expiry}, $3)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING token){left_line}
             SELECT token, pg_catalog.pg_notify($4, {TAKEN})::pg_catalog.text FROM won",
            expiry = expiry_sql("$3"),
            leases = self.leases(),
            tokens = quote_literal(&self.qualified(&self.shared.tokens)),
            left_line = self.left_line(waiter),
        )
    }

    /// The fence shared by every fenced write: the lease row still holds this candidacy's token,
    /// locked FOR SHARE so that a takeover's UPDATE waits until the write has committed.
    pub(super) fn fence(&self) -> String {
        format!(
            "FROM {} WHERE name OPERATOR(pg_catalog.=) $4 AND holder OPERATOR(pg_catalog.=) $5
                 AND token OPERATOR(pg_catalog.=) $6 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.now()
             FOR SHARE",
            self.leases()
        )
    }

    /// Joins the line: a waiter row at its back, its id from the table's own sequence
    /// (`<p>_waiters_id_seq`: strictly increasing; never a clock).
    pub(super) async fn join_line(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        if shared.waiter.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        // The row records this instance's N (1 for a single holder), which a candidate with
        // another N compares against.
        let sql = format!(
            "INSERT INTO {waiters} (name, identity, ttl_ms, expires_at, max_holders)
             VALUES ($1, $2, $3, {expiry}, $4)
             RETURNING id, (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM {waiters}
                                                              WHERE name OPERATOR(pg_catalog.=) $1
                                                              LIMIT {LISTENING_PLACES}) ahead)",
            expiry = expiry_sql("$3"),
            waiters = self.qualified(&shared.waiters),
        );
        let a = (
            shared.name.clone(),
            shared.identity.clone(),
            shared.ttl_ms,
            i64::from(shared.max_holders),
        );
        let row = self
            .request(
                |c| async move { unnamed::query_one(&c, &sql, &[&a.0, &a.1, &a.2, &a.3]).await },
            )
            .await?;
        // The rows there before this one, all ahead of it (ids only grow).
        shared
            .far_back
            .store(row.get::<_, i64>(1) >= LISTENING_PLACES, Ordering::SeqCst);
        shared.waiter.store(row.get(0), Ordering::SeqCst);
        shared.line.forget();
        Ok(())
    }

    /// A waiter's look, once per --retry-period, in one statement: renews its own row, reads
    /// the row just ahead of it and the lease row. Returns whether its own row is still there
    /// (an UPDATE, never an upsert: a look that arrives late, after the row was deleted, puts
    /// nothing back), the row ahead (none: this waiter is first), how many are ahead (up to
    /// `LISTENING_PLACES`) and how long until the lease row may be taken ([`Sightings::sight`]).
    pub(super) async fn poll_line(
        &self,
    ) -> Result<(bool, Option<AheadSighting>, i64, Duration), StoreError> {
        let shared = &self.shared;
        let sql = format!(
            "WITH mine AS (
                 UPDATE {waiters} SET renewals = renewals OPERATOR(pg_catalog.+) 1::pg_catalog.int8,
                     ttl_ms = $4, expires_at = {expiry}
                 WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2
                     AND identity OPERATOR(pg_catalog.=) $3
                 RETURNING 1)
             SELECT (SELECT pg_catalog.count(*) FROM mine), a.id, a.renewals, a.ttl_ms,
                    l.holder, l.token, l.renewals,
                    (EXTRACT(EPOCH FROM l.expires_at) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.int8,
                    l.ttl_ms,
                    (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM {waiters}
                                                      WHERE name OPERATOR(pg_catalog.=) $1
                                                        AND id OPERATOR(pg_catalog.<) $2
                                                      LIMIT {LISTENING_PLACES}) places)
             FROM (SELECT 1) one
             LEFT JOIN LATERAL (SELECT id, renewals, ttl_ms FROM {waiters}
                                WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.<) $2
                                ORDER BY id DESC LIMIT 1) a ON true
             LEFT JOIN {leases} l ON l.name OPERATOR(pg_catalog.=) $1",
            expiry = expiry_sql("$4"),
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
        let ahead = row
            .get::<_, Option<i64>>(1)
            .map(|id| shared.line.ahead(id, row.get(2), row.get(3)));
        let wait = match row.get::<_, Option<i64>>(5) {
            Some(_) => {
                let lease = lease_row(&row, 4);
                shared.sightings.sight(&lease, received, BootClock.now())
            }
            None => Duration::ZERO,
        };
        Ok((row.get::<_, i64>(0) > 0, ahead, row.get(9), wait))
    }

    /// Waits for a release heard after `seen`, or until `until`, whichever first. Returns the
    /// new state heard.
    pub(super) async fn wait_heard(&self, seen: i64, until: tokio::time::Instant) -> Heard {
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

/// A waiter in PostgreSQL's line: told of a release by a NOTIFY on its own channel (when it
/// listens), looking at the line in one statement every --retry-period.
impl Waiter for Postgres {
    fn line(&self) -> &Line {
        &self.shared.line
    }

    fn max_holders(&self) -> u32 {
        self.shared.max_holders
    }

    /// One that does not listen (behind pgbouncer, `leader_exec_listen=off`) hears nothing,
    /// and looks every --retry-period (`poll`) like every waiter.
    async fn heard(&self, seen: i64, wait: Duration) -> i64 {
        let until = tokio::time::Instant::now() + wait.min(self.shared.poll);
        self.wait_heard(seen, until).await.free
    }

    async fn look_at_line(&self) -> Result<Look, StoreError> {
        let shared = &self.shared;
        let (mine, ahead, places, lease_wait) = self.poll_line().await?;
        let received = BootClock.now();
        if !mine {
            // Taken for dead by the waiter behind (this process was paused for a TTL, say):
            // back in line, at the back, on a new channel.
            shared.waiter.store(0, Ordering::SeqCst);
            self.join_line().await?;
            self.ensure_listener().await?;
            let heard = shared.heard.borrow().free;
            return Ok(Look::Again { heard });
        }
        if places < LISTENING_PLACES && shared.far_back.swap(false, Ordering::SeqCst) {
            // Moved up into the listening places: LISTEN, then look again, so that a
            // release between that look and the LISTEN is not missed.
            self.ensure_listener().await?;
            let heard = shared.heard.borrow().free;
            return Ok(Look::Again { heard });
        }
        Ok(Look::Line {
            ahead,
            lease_wait,
            received,
        })
    }

    async fn look_at_slots(&self) -> Result<Duration, StoreError> {
        self.look_slots().await
    }

    /// Deletes a dead waiter row ahead, only if it is still exactly as seen.
    async fn skip_dead(&self, dead: &AheadSighting) -> Result<(), StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE name OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2
                 AND renewals OPERATOR(pg_catalog.=) $3",
            self.qualified(&self.shared.waiters)
        );
        let a = (self.shared.name.clone(), dead.id, dead.renewals);
        self.request(|c| async move { unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2]).await })
            .await?;
        Ok(())
    }
}
