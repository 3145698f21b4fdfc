//! The store traits on PostgreSQL, and the keeper that renews the held row.

use super::*;

impl Campaign for Postgres {
    type Keeper = PgKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        // A new candidacy holds nothing, whatever an earlier one of this process held: a claim
        // it could not release is left to expire, never renewed by the new keeper (which would
        // keep it alive while this candidacy waits behind it).
        self.shared.held.store(0, Ordering::SeqCst);
        // Only the shared session, checked (a primary, the schema, its ownership) and the tables
        // made: what the acquiring statement needs to be valid and safe to run; a new session's
        // checks carry the first attempt in their round trip (`check_and_try`). The place in
        // line and the listening session come with the first attempt that finds the row held
        // (`check_turn`), so that an uncontended start costs one session and one round trip.
        self.check_and_try().await?;
        Ok(Candidacy {
            lease_id: None,
            key: self.row_key(),
            place: 0,
            token: 0,
        })
    }

    fn keeper(&self, _candidacy: &Candidacy) -> PgKeeper {
        PgKeeper {
            backend: self.clone(),
            client: None,
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let shared = &self.shared;
        let held = shared.held.load(Ordering::SeqCst);
        if candidacy.token != 0 && held == candidacy.token {
            return Ok(Turn::Leading { token: held });
        }
        // Won with the campaign's checks (and not given up since: a new campaign clears both):
        // proven from the instant the campaign began, the one its candidacy's deadline counts
        // from, which came before the message that won it.
        let early = shared.early.swap(0, Ordering::SeqCst);
        if early != 0 && held == early {
            return Ok(Turn::Leading { token: early });
        }
        if shared.waiter.load(Ordering::SeqCst) == 0 {
            // Not in line yet (a new candidacy, or one taken for dead by the waiter behind):
            // one attempt first, as any new instance's first attempt takes a free row even
            // while others wait. Won: no place in line, no LISTEN and no NOTIFY self-test,
            // which only serve a waiter (they decide how it hears of a release). Lost: it
            // joins the line and listens below, then tries again before it waits.
            match self.attempt().await? {
                Attempt::Won(token) => return Ok(Turn::Leading { token }),
                Attempt::Mismatch(theirs) => return Ok(Turn::Mismatch { theirs }),
                Attempt::Held { .. } => {}
            }
        }
        // A place at the back of the line, and listening on its channel before the attempt
        // below: no release can fall between a failed attempt and the wait that follows it.
        self.join_line().await?;
        self.ensure_listener().await?;
        // What was heard before this look: a release after it wakes the wait that follows.
        let seen = shared.heard.borrow().free;
        let (holder, wait) = match self.attempt().await? {
            Attempt::Won(token) => return Ok(Turn::Leading { token }),
            Attempt::Mismatch(theirs) => return Ok(Turn::Mismatch { theirs }),
            Attempt::Held { holder, wait } => (holder, wait),
        };
        Ok(Turn::Behind(Ahead {
            key: holder.unwrap_or_default().into_bytes(),
            revision: seen,
            expires_in: Some(wait),
            holders: Vec::new(),
        }))
    }

    async fn predecessor_gone(
        &self,
        _candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        // The wait for a turn is every row store's (`rows/line.rs`); what this waiter hears and
        // reads, PostgreSQL's (`impl Waiter`, line.rs). Until the first look at the line this
        // waiter may be first: the lease row's own wait.
        wait_turn(self, ahead.revision, ahead.expires_in.unwrap_or_default()).await
    }

    async fn key_gone(&self, _candidacy: &Candidacy) {
        // A row taken away shows up as a renewal that answers "expired".
        std::future::pending::<()>().await;
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        let s = &self.shared;
        if candidacy.token == 0 {
            // A waiter holds no lease, only its place in line: it leaves the line, and if the
            // lease row is free meanwhile (a release woke this waiter, which is going), it wakes
            // the next waiter in its place.
            let id = s.waiter.load(Ordering::SeqCst);
            if id == 0 {
                return Ok(());
            }
            self.leave_line(id).await?;
            let _ = s
                .waiter
                .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
            return Ok(());
        }
        // The release wakes the first waiter in line (its own channel: the others sleep on) and
        // whoever watches the table's channel (`watch`); a dead first waiter is skipped by the
        // one behind it after a TTL, which then finds the row free.
        self.release_row(candidacy.token).await?;
        let _ = s
            .held
            .compare_exchange(candidacy.token, 0, Ordering::SeqCst, Ordering::SeqCst);
        Ok(())
    }

    /// The row stays as it is, held by this identity with this token, with `ttl_ms` = `bound`
    /// (and `renewals` raised, so that every waiter starts its sighting again from here): no
    /// renewal ever changes it again, so a waiter takes it over once it has seen it unchanged
    /// for `bound` (or its own --ttl, if longer) on its own CLOCK_BOOTTIME — the rule for a
    /// holder that crashed. `expires_at` (the server's clock) stays a display.
    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        let s = &self.shared;
        let sql = format!(
            "UPDATE {} SET expires_at = {}, ttl_ms = $4,
                 renewals = renewals OPERATOR(pg_catalog.+) 1::pg_catalog.int8
             WHERE name OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2
                 AND token OPERATOR(pg_catalog.=) $3",
            self.leases(),
            expiry_sql("$4"),
        );
        let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
        let a = (
            self.held_row(),
            s.identity.clone(),
            candidacy.token,
            bound_ms,
        );
        let updated = self
            .request(|c| async move { unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3]).await })
            .await?;
        Ok((updated == 1).then(|| candidacy.clone()))
    }
}

impl Read for Postgres {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        // No LISTEN here (`status` and `check` need none): the first `changed_since` starts
        // the listening session, which counts as a change, so `watch` reads again once it
        // listens and misses nothing in between.
        let heard = *self.shared.heard.borrow();
        // Every row of the name: the lease row and, with N above 1, its slot rows.
        let (holders, max_holders) = self.read_holders().await?;
        let waiting = self.waiting().await?;
        Ok(Observation {
            candidates: holders.len() as i64 + waiting,
            holders,
            max_holders,
            revision: heard.free + heard.taken,
        })
    }

    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        let revision = seen.revision;
        self.ensure_listener().await?;
        // A crashed holder announces nothing: look again when its lease runs out, and at least
        // every few seconds.
        let left = match self.read_row().await? {
            Some((Some(_), _, left_ms, true)) => Duration::from_millis(left_ms.max(0) as u64 + 1),
            _ => Duration::from_secs(5),
        };
        let until = self.look_by(left.min(Duration::from_secs(5)));
        let mut rx = self.shared.heard.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            if now.free + now.taken > revision {
                return Ok(());
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep_until(until) => return Ok(()),
            }
        }
    }

    async fn list_elections(&self, _prefix: &str) -> Result<Vec<Election>, StoreError> {
        // The prefix is the table: every row in it is an election.
        // Slot rows (`NAME/k`, with N above 1) are folded into their name's election.
        let sql = format!(
            "SELECT l.name, l.holder, l.token, {holding},
                    (SELECT pg_catalog.count(*) FROM {waiters} w
                     WHERE w.name OPERATOR(pg_catalog.=) l.name
                       AND w.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()),
                    l.max_holders
             FROM {leases} l ORDER BY l.name",
            leases = self.leases(),
            waiters = self.qualified(&self.shared.waiters),
            holding = self.holding("l"),
        );
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[]).await })
            .await?;
        let mut elections: Vec<Election> = Vec::new();
        let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for r in rows {
            let row: String = r.get(0);
            let name = lease_of_row(&row).to_owned();
            let i = *at.entry(name.clone()).or_insert_with(|| {
                elections.push(Election {
                    name: name.clone().into_bytes(),
                    holders: Vec::new(),
                    max_holders: 1,
                    candidates: 0,
                });
                elections.len() - 1
            });
            let election = &mut elections[i];
            if row == name {
                election.max_holders = clamp_n(r.get(5));
                election.candidates += r.get::<_, i64>(4);
            }
            let holder: Option<String> = r.get(1);
            let live: bool = r.get(3);
            if let Some(holder) = holder.filter(|_| live) {
                election.holders.push(Leader {
                    key: format!("{}/{}", self.shared.leases, row).into_bytes(),
                    identity: holder.into_bytes(),
                    token: r.get(2),
                    lease_id: None,
                    provisional: false,
                });
                election.candidates += 1;
            }
        }
        for election in &mut elections {
            election.holders.sort_by_key(|h| h.token);
        }
        Ok(elections)
    }

    async fn lease_time(&self, leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        let sql = format!(
            "SELECT {LEFT_MS}, ttl_ms
             FROM {} l WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2
                 AND {}",
            self.leases(),
            self.holding("l"),
        );
        let row_name = self
            .row_of(&leader.key)
            .unwrap_or_else(|| self.shared.name.clone());
        let a = (row_name, leader.token);
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&a.0, &a.1]).await })
            .await?;
        Ok(row.map(|r| LeaseTime {
            remaining: Duration::from_millis(r.get::<_, i64>(0).max(0) as u64),
            granted: Duration::from_millis(r.get::<_, i64>(1).max(0) as u64),
        }))
    }
}

impl Records for Postgres {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = format!(
            "SELECT value FROM {records} r WHERE key OPERATOR(pg_catalog.=) $1 AND {visible}",
            records = self.records(),
            visible = self.visible(),
        );
        let key = key.to_owned();
        let row = self
            .request(|c| async move { unnamed::query_opt(&c, &sql, &[&key]).await })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, {expiry}, NULL, NULL
             {fence}
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,
                 expires_at = EXCLUDED.expires_at, lease_name = NULL, lease_token = NULL",
            records = self.records(),
            expiry = expiry_sql("$3"),
            fence = self.fence(),
        );
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let s = &self.shared;
        let a = (
            key.to_owned(),
            value,
            retention_ms,
            self.held_row(),
            s.identity.clone(),
            candidacy.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4, &a.5]).await
            })
            .await?;
        if written > 0 {
            // Best effort: records past their retention go.
            let sql = format!(
                "DELETE FROM {} WHERE expires_at OPERATOR(pg_catalog.<) pg_catalog.now()",
                self.records()
            );
            let _ = self
                .request(|c| async move { unnamed::execute(&c, &sql, &[]).await })
                .await;
        }
        Ok(written > 0)
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let sql = format!(
            "SELECT key, value FROM {records} r WHERE pg_catalog.starts_with(key, $1) AND {visible}
             ORDER BY key",
            records = self.records(),
            visible = self.visible(),
        );
        let p = prefix.to_owned();
        let rows = self
            .request(|c| async move { unnamed::query(&c, &sql, &[&p]).await })
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let key: String = r.get(0);
                let id = key.strip_prefix(prefix).unwrap_or(&key).as_bytes().to_vec();
                (id, r.get(1))
            })
            .collect())
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, NULL, name, token
             {fence}
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = NULL,
                 lease_name = EXCLUDED.lease_name, lease_token = EXCLUDED.lease_token",
            records = self.records(),
            fence = self
                .fence()
                .replace("$4", "$3")
                .replace("$5", "$4")
                .replace("$6", "$5"),
        );
        let s = &self.shared;
        let a = (
            key.to_owned(),
            value,
            self.held_row(),
            s.identity.clone(),
            candidacy.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await
            })
            .await?;
        Ok(written > 0)
    }
}

impl Handover for Postgres {
    /// The request is a record like any other (no new column, no new table), fenced by the
    /// lease row still holding the leader's token (not by our own identity, which `resign`
    /// does not have), `FOR SHARE` as every fenced write. The leader reads it once per
    /// `--retry-period`.
    async fn request_handover(
        &self,
        leader: &Leader,
        key: &str,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {records} (key, value, expires_at, lease_name, lease_token)
             SELECT $1, $2, {expiry}, NULL, NULL
             FROM {leases} WHERE name OPERATOR(pg_catalog.=) $4 AND token OPERATOR(pg_catalog.=) $5
                 AND holder IS NOT NULL AND expires_at OPERATOR(pg_catalog.>) pg_catalog.now() FOR SHARE
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,
                 expires_at = EXCLUDED.expires_at, lease_name = NULL, lease_token = NULL",
            records = self.records(),
            expiry = expiry_sql("$3"),
            leases = self.leases(),
        );
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let a = (
            key.to_owned(),
            leader.token.to_string().into_bytes(),
            retention_ms,
            self.row_of(&leader.key)
                .unwrap_or_else(|| self.shared.name.clone()),
            leader.token,
        );
        let written = self
            .request(|c| async move {
                unnamed::execute(&c, &sql, &[&a.0, &a.1, &a.2, &a.3, &a.4]).await
            })
            .await?;
        Ok(written > 0)
    }

    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        let (key, token) = (leader.key.as_slice(), leader.token);
        let key = String::from_utf8_lossy(key).into_owned();
        let Some(name) = key.strip_prefix(&format!("{}/", self.shared.leases)) else {
            return Ok(false);
        };
        // A slot row (`NAME/k`) is announced under its lease name.
        let lease = lease_of_row(name);
        let (sql, rows) = if lease == name {
            let sql = format!(
                "WITH gone AS (
                     UPDATE {} l SET holder = NULL, expires_at = pg_catalog.now()
                     WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2
                         AND {}
                     RETURNING 1)
                 SELECT pg_catalog.pg_notify($3, {FREE} OPERATOR(pg_catalog.||) $1)::pg_catalog.text
                 FROM gone",
                self.leases(),
                self.holding("l"),
            );
            (sql, None)
        } else {
            let sql = format!(
                "WITH gone AS (
                     UPDATE {} l SET holder = NULL, expires_at = pg_catalog.now()
                     WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2
                         AND {}
                     RETURNING 1)
                 SELECT pg_catalog.pg_notify($3, {FREE} OPERATOR(pg_catalog.||) $4)::pg_catalog.text
                 FROM gone",
                self.leases(),
                self.holding("l"),
            );
            (sql, Some(lease.to_owned()))
        };
        let a = (name.to_owned(), token, self.shared.channel.clone(), rows);
        let rows = self
            .request(|c| async move {
                match &a.3 {
                    None => unnamed::query(&c, &sql, &[&a.0, &a.1, &a.2]).await,
                    Some(lease) => unnamed::query(&c, &sql, &[&a.0, &a.1, &a.2, lease]).await,
                }
            })
            .await?;
        Ok(!rows.is_empty())
    }
}

impl Describe for Postgres {
    fn store_name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn shown(&self) -> String {
        self.shared.target.shown.clone()
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        let config = &self.shared.target.config;
        let ports = config.get_ports();
        let mut addresses = Vec::new();
        for (i, host) in config.get_hosts().iter().enumerate() {
            let tokio_postgres::config::Host::Tcp(host) = host else {
                // A Unix socket cannot be probed over TCP: never taken as refused.
                return Vec::new();
            };
            let port = match ports {
                [] => 5432,
                [port] => *port,
                ports => ports.get(i).copied().unwrap_or(5432),
            };
            addresses.push((host.clone(), port));
        }
        addresses
    }

    fn restart_resets_leases(&self) -> bool {
        false
    }

    fn delete_record_hint(&self, key: &str) -> String {
        // The URL as psql takes it: without leader-exec's own parameters, which libpq refuses.
        let shown = self.shown();
        let url = match shown.split_once('?') {
            Some((base, query)) => {
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|pair| !pair.starts_with("leader_exec_"))
                    .collect();
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => shown,
        };
        // Qualified as leader-exec's own statements are (see the module's header, SQL): the
        // human who pastes it runs it under the same search_path, hostile overloads included.
        format!(
            "psql {} -c {}",
            crate::escape::shell_quote(&url),
            crate::escape::shell_quote(&format!(
                "DELETE FROM {} WHERE key OPERATOR(pg_catalog.=) {}::pg_catalog.text",
                self.records(),
                quote_literal(key)
            ))
        )
    }
}

impl Postgres {
    /// A record is visible while its retention lasts, and a record that goes with a lease while
    /// that lease row still holds its token.
    fn visible(&self) -> String {
        format!(
            "(r.expires_at IS NULL OR r.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
             AND (r.lease_token IS NULL OR EXISTS (
                 SELECT 1 FROM {} h WHERE h.name OPERATOR(pg_catalog.=) r.lease_name
                 AND h.token OPERATOR(pg_catalog.=) r.lease_token AND {}))",
            self.leases(),
            self.holding("h"),
        )
    }

    /// Whether the lease row `l` (an alias) counts as held, for `status`, `check`, `release`
    /// and `resign --force`: SQL. A row is held until its `expires_at` on the server's clock,
    /// and a held slot (`hold`: its state record, fenced on this row's token, carries
    /// `held_for_ms`) for as long as it has that holder and token, whatever `expires_at` says.
    /// Such a row keeps waiters out until the first of them has seen it unchanged for DUR on
    /// its own CLOCK_BOOTTIME (a takeover gives it a new token); nobody waiting, it keeps
    /// them out past DUR. Hiding it by the server's clock would let that clock decide what
    /// `status` shows and make `release` answer "nothing to release" for a slot that still
    /// blocks the next waiter for DUR. Removing it stays fenced on the token, so a slot a
    /// waiter took over is never touched. JSON escapes every `"` inside a string, so
    /// `"held_for_ms":` occurs in a record only as that key.
    pub(super) fn holding(&self, l: &str) -> String {
        format!(
            "{l}.holder IS NOT NULL AND ({l}.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()
                 OR EXISTS (SELECT 1 FROM {records} s
                     WHERE s.lease_name OPERATOR(pg_catalog.=) {l}.name
                     AND s.lease_token OPERATOR(pg_catalog.=) {l}.token
                     AND pg_catalog.position(s.value, '\"held_for_ms\":'::pg_catalog.bytea)
                         OPERATOR(pg_catalog.>) 0))",
            records = self.records(),
        )
    }
}

/// Renews the row this instance holds, on a session of its own (a renewal never queues behind
/// another request). A waiter holds no row: its renewal answers "alive" without a request,
/// and the state machine proves its lease from the acquiring request's send instant instead.
pub struct PgKeeper {
    backend: Postgres,
    client: Option<Client>,
}

impl Keeper for PgKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let shared = self.backend.shared.clone();
        let token = shared.held.load(Ordering::SeqCst);
        if token == 0 {
            return Ok(Renewal::Alive);
        }
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.backend.open(false).await?);
        }
        let client = self.client.as_ref().expect("just opened");
        // No wall clock in the condition: the row is ours while it holds our identity and
        // token, since no waiter takes a held row over before it has seen it unchanged for a
        // full TTL, and this renewal changes it (`renewals`). A step of the server's clock
        // (either way) thus neither ends the lease nor keeps a taken one.
        let sql = format!(
            "UPDATE {} SET expires_at = {}, ttl_ms = $4,
                 renewals = renewals OPERATOR(pg_catalog.+) 1::pg_catalog.int8
             WHERE name OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2
                 AND token OPERATOR(pg_catalog.=) $3",
            self.backend.leases(),
            expiry_sql("$4"),
        );
        let renewed = unnamed::execute(
            client,
            &sql,
            &[
                &self.backend.held_row(),
                &shared.identity,
                &token,
                &shared.ttl_ms,
            ],
        )
        .await;
        match renewed {
            Ok(1) => Ok(Renewal::Alive),
            // Taken over, released by `resign`, or the row deleted (the table truncated): the
            // claim is gone for certain, and the command is killed at once.
            Ok(_) => Ok(Renewal::Expired),
            // The table was dropped: as certain a loss as a deleted row.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                self.client = None;
                Ok(Renewal::Expired)
            }
            Err(e) => {
                self.client = None;
                Err(classify(e))
            }
        }
    }

    fn reset(&mut self) {
        self.client = None;
    }
}
