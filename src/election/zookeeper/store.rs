//! The store traits on ZooKeeper, and the keeper that renews the session.

use super::*;

impl Campaign for ZooKeeper {
    type Keeper = ZkKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        // A campaign opens its own session: a session that expired (an earlier loss) can never
        // come back, and closing the previous one releases whatever it still held.
        self.stop_sweep();
        let previous = self.session.lock().expect("not poisoned").take();
        drop(previous);
        let client = self.connect().await?;
        // The timeout of the connection the session was just established on: the client's own
        // `session_timeout()` may have been raised to its connection timeout.
        let negotiated = client.negotiated_session_timeout();
        if negotiated < self.timing.needed {
            return Err(StoreError::Fatal(format!(
                "ZooKeeper negotiated a session timeout of {} for --ttl {}: --renew-deadline + --kill-after + margin need {}; raise the servers' maxSessionTimeout or lower --renew-deadline and --kill-after",
                humantime::format_duration(negotiated),
                humantime::format_duration(self.timing.ttl),
                humantime::format_duration(self.timing.needed),
            )));
        }
        if negotiated != self.timing.ttl {
            tracing::warn!(
                event = "session-timeout-negotiated",
                negotiated_ms = negotiated.as_millis() as u64,
                "ZooKeeper negotiated a session timeout of {} for --ttl {}: a leader that dies is replaced after the longer of the two",
                humantime::format_duration(negotiated),
                humantime::format_duration(self.timing.ttl)
            );
        }
        *self.session.lock().expect("not poisoned") = Some(client.clone());
        let protection = protection_id();
        let mine = candidate_name(&protection, self.max_holders);
        let options = CreateMode::EphemeralSequential.with_acls(self.acls());
        let mut backoff = Backoff::new();
        for _ in 0..6 {
            // The election node is a container, as Curator creates it: the server deletes it
            // once empty. It can go between the mkdir and the create: then both run again.
            if let Err(e) = client
                .mkdir(
                    &self.election,
                    &CreateMode::Container.with_acls(self.acls()),
                )
                .await
            {
                if e == zk::Error::NoNode {
                    // mkdir creates everything below the chroot, never the chroot itself.
                    self.chroot_exists(&client).await?;
                }
                let e = classify(e);
                if !e.is_transient() {
                    return Err(e);
                }
                backoff.sleep().await;
                continue;
            }
            if self.target.digest.is_some() {
                let open = self.open_nodes(&client).await;
                if !open.is_empty() {
                    tracing::warn!(
                        event = "open-acl",
                        "ZooKeeper: {} give every client more than read (created without credentials?): anyone who reaches ZooKeeper can delete the leader's node or plant a candidate ahead of it; set their ACL (zkCli.sh setAcl PATH auth::cdrwa,world:anyone:r, authenticated as this --user)",
                        crate::escape::escape(open.join(", ").as_bytes())
                    );
                }
            }
            let created = client
                .create(
                    &format!("{}/{mine}", self.election),
                    self.identity.as_bytes(),
                    &options,
                )
                .await;
            match created {
                Ok((stat, sequence)) => {
                    return Ok(Candidacy {
                        lease_id: Some(client.session_id().0),
                        key: format!("{}/{mine}{sequence}", self.election),
                        place: stat.czxid,
                        token: 0,
                    });
                }
                Err(zk::Error::NoNode) => continue,
                Err(zk::Error::SessionExpired) => {
                    return Err(StoreError::Transient(
                        "ZooKeeper: the session expired while campaigning".into(),
                    ));
                }
                Err(e) if classify(e.clone()).is_transient() => {
                    // The create may have committed without its answer: find the node by the
                    // protection id instead of creating a second one.
                    if let Ok(children) = client.list_children(&self.election).await
                        && let Some(name) = children.iter().find(|c| c.starts_with(&mine))
                    {
                        let key = format!("{}/{name}", self.election);
                        if let Ok(Some(stat)) = client.check_stat(&key).await {
                            return Ok(Candidacy {
                                lease_id: Some(client.session_id().0),
                                key,
                                place: stat.czxid,
                                token: 0,
                            });
                        }
                    }
                    backoff.sleep().await;
                }
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: could not create a candidate node under {}",
            self.election
        )))
    }

    fn keeper(&self, candidacy: &Candidacy) -> ZkKeeper {
        ZkKeeper {
            client: self.session_of(),
            path: candidacy.key.clone(),
            needed: self.timing.needed,
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(Turn::Gone);
        };
        for _ in 0..3 {
            match self.look(&client, candidacy).await? {
                Some(turn) => return Ok(turn),
                // A held slot ahead was removed: look again at once.
                None => continue,
            }
        }
        Err(StoreError::Transient(
            "ZooKeeper: held slots ahead kept going".into(),
        ))
    }

    /// Herd-free waiting with `--max-holders` N > 1: the first waiter (N ahead of it, all
    /// holders) sets an exists-watch on each holder and wakes when any goes; every later waiter
    /// watches only its predecessor, which wakes it twice at most: when the predecessor goes, and
    /// when it touches its node on becoming a holder (`touch`), which makes this waiter the first.
    ///
    /// Why a waiter that is not woken cannot miss its turn: it may hold only once fewer than N
    /// are ahead of it. The first waiter is woken by the deletion of any node ahead of it (a node
    /// already gone when the watch is set answers "no node": it looks again at once). A later
    /// waiter W behind predecessor P becomes the first waiter, or may hold, only once P may hold
    /// (P is one place ahead): P, woken the same way, then touches its node (or leaves), and
    /// either fires W's watch. A touch before W's watch was set shows in the stat the watch
    /// answers with (the node's data version above 0): W looks again at once. Only a holder
    /// touches its node, and a holder's successor is at most N from the front, so in a line of
    /// leader-exec instances this never finds a touched predecessor twice in a row.
    async fn predecessor_gone(
        &self,
        _candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        let watch = async {
            let Some(client) = self.session_of() else {
                return Ok(());
            };
            if !ahead.holders.is_empty() {
                let paths: Vec<String> = ahead
                    .holders
                    .iter()
                    .map(|key| String::from_utf8_lossy(key).into_owned())
                    .collect();
                // Sent together, answered in order.
                let watches: Vec<_> = paths
                    .iter()
                    .map(|path| client.check_and_watch_stat(path))
                    .collect();
                let mut watchers = Vec::with_capacity(watches.len());
                for watch in watches {
                    match watch.await {
                        Ok((None, _)) => return Ok(()),
                        Ok((Some(_), watcher)) => watchers.push(Box::pin(watcher.changed())),
                        Err(e) => return Err(classify(e)),
                    }
                }
                // Deleted, touched, or a session event: either way the caller looks again.
                futures_util::future::poll_fn(|cx| {
                    for watcher in watchers.iter_mut() {
                        if watcher.as_mut().poll(cx).is_ready() {
                            return std::task::Poll::Ready(());
                        }
                    }
                    std::task::Poll::Pending
                })
                .await;
                return Ok(());
            }
            let path = String::from_utf8_lossy(&ahead.key).into_owned();
            match client.check_and_watch_stat(&path).await {
                Ok((None, _)) => Ok(()),
                // Touched before the watch was set: it holds, and this waiter moved up.
                Ok((Some(stat), _)) if self.max_holders > 1 && stat.version > 0 => Ok(()),
                // Deleted, or a session event: either way the caller looks again.
                Ok((Some(_), watcher)) => {
                    watcher.changed().await;
                    Ok(())
                }
                Err(e) => Err(classify(e)),
            }
        };
        match ahead.expires_in {
            // A held slot ahead may be removed by then (`expire_held`): look again at that time.
            Some(left) => tokio::time::timeout(left, watch).await.unwrap_or(Ok(())),
            None => watch.await,
        }
    }

    /// Also completes, as a loss of the same certainty (SIGKILL at once), when the session's
    /// current connection negotiated a timeout too short for the flags: see [`ZkKeeper`].
    async fn key_gone(&self, candidacy: &Candidacy) {
        tokio::select! {
            () = self.own_node_gone(candidacy) => {}
            () = self.session_timeout_shrunk() => {}
        }
    }

    /// The timeout negotiated on the session's current connection, which the server may have
    /// clamped below `--ttl` (never below what the flags need: see [`ZkKeeper`]).
    ///
    /// Why a proof sent at `s` keeps the session until at least `s` + this value: the server
    /// received the request after `s`, on the connection that answered it, and expires the
    /// session no sooner than that connection's timeout later; a later reconnect it accepted
    /// restarted the timer, after `s`, with that connection's timeout. The value read here is
    /// the answering connection's or a later one's (the patched client publishes a connection's
    /// timeout before any reply read on it), since the step-down reads it after the proof's
    /// answer. Not `--ttl`: a late stop that counted on `--ttl` would give the command a grace
    /// that may outlast the session, beside the next leader's command.
    fn lease_length(&self) -> Option<Duration> {
        self.session_of()
            .map(|client| client.negotiated_session_timeout())
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(());
        };
        // A session the client library reports ended cannot delete anything. The library also
        // says `Expired` on its own after failing to reconnect for a whole timeout, which an
        // ensemble without quorum has not decided yet: then the node stays until the servers
        // expire the session. Not a release, and not reported as one.
        let ended = || {
            StoreError::Fatal(format!(
                "ZooKeeper: the session {:#x} has ended; its nodes go when the servers expire it",
                client.session_id().0
            ))
        };
        if client.state().is_terminated() {
            return Err(ended());
        }
        match client.delete(&candidacy.key, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(zk::Error::SessionExpired) => return Err(ended()),
            Err(e) => return Err(classify(e)),
        }
        // The leader's state node is ephemeral on this session; closing the session (dropping
        // the last client) removes it too, but only once the close reaches the server.
        let state = self.path_of(&format!("{}.leaders/", self.prefix))
            + "/"
            + self.election.rsplit('/').next().unwrap_or_default();
        if let Ok(Some(stat)) = client.check_stat(&state).await
            && stat.ephemeral_owner == client.session_id().0
        {
            let _ = client.delete(&state, Some(stat.version)).await;
        }
        self.finish_sweep().await;
        self.session.lock().expect("not poisoned").take();
        Ok(())
    }

    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        self.hold_slot(candidacy, bound).await
    }
}

impl ZooKeeper {
    /// One look at the line for `check_turn`: `None` when a held slot ahead was just removed
    /// (`expire_held`), and the line must be read again.
    async fn look(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
    ) -> Result<Option<Turn>, StoreError> {
        let line = match client.get_children(&self.election).await {
            Ok((children, _)) => in_line(children),
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => return Ok(Some(Turn::Gone)),
            Err(e) => return Err(classify(e)),
        };
        let own = candidacy.key.rsplit('/').next().unwrap_or_default();
        let n = self.max_holders;
        Ok(Some(match place_in(&line, own, n) {
            Place::Gone => Turn::Gone,
            Place::Mismatch(theirs) => Turn::Mismatch { theirs },
            // The first in line leads once it has written the leader mark, whose zxid is its
            // token (see `Place::Holds`).
            Place::Holds if n == 1 => self.mark(client, candidacy).await?,
            Place::Holds => self.touch(client, candidacy).await?,
            Place::Waits(i) => {
                // The first waiter times the held slots among the holders (see `expire_held`).
                let mut expires_in = None;
                if i == n as usize {
                    let holders: Vec<String> = line[..i]
                        .iter()
                        .map(|c| format!("{}/{c}", self.election))
                        .collect();
                    let (removed, next) = self.expire_held(client, &holders).await?;
                    if removed {
                        return Ok(None);
                    }
                    expires_in = next;
                }
                Turn::Behind(Ahead {
                    key: format!("{}/{}", self.election, line[i - 1]).into_bytes(),
                    revision: 0,
                    expires_in,
                    // The first waiter (exactly N ahead: the holders) watches every holder; a later
                    // one its predecessor alone (see `predecessor_gone`).
                    holders: if n > 1 && i == n as usize {
                        line[..i]
                            .iter()
                            .map(|c| format!("{}/{c}", self.election).into_bytes())
                            .collect()
                    } else {
                        Vec::new()
                    },
                })
            }
        }))
    }
}

impl Read for ZooKeeper {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        let synced = self.synced(&self.election).await?;
        let line = Self::holders_of(&synced, &self.election).await?;
        if line.revision == 0 {
            // No election node: nobody stands in line, or the URL's chroot is not there.
            self.chroot_exists(&synced.0).await?;
        }
        Ok(Observation {
            holders: line.holders,
            max_holders: line.max_holders,
            candidates: line.candidates,
            revision: line.revision,
        })
    }

    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        let revision = seen.revision;
        let client = self.client().await?;
        // With N > 1 a holder's token changes without a change of the line (its touch, when it
        // becomes a holder): an exists-watch on each holder seen wakes on that as well.
        let mut touched = Vec::new();
        if seen.max_holders > 1 {
            let paths: Vec<String> = seen
                .holders
                .iter()
                .map(|h| String::from_utf8_lossy(&h.key).into_owned())
                .collect();
            let watches: Vec<_> = paths
                .iter()
                .map(|path| client.check_and_watch_stat(path))
                .collect();
            for ((watch, path), holder) in watches.into_iter().zip(&paths).zip(&seen.holders) {
                match watch.await {
                    Ok((Some(stat), watcher))
                        if token_of(path.rsplit('/').next().unwrap_or_default(), &stat, None)
                            == holder.token =>
                    {
                        touched.push(Box::pin(watcher.changed()));
                    }
                    Ok(_) => return Ok(()),
                    Err(e) => return Err(classify(e)),
                }
            }
        }
        // With N = 1 the leader's token changes without a change of the line when it writes the
        // leader mark (`mark`): a watch on the mark wakes on that. A mark that names the leader
        // seen with another zxid than its token is a change already.
        if seen.max_holders == 1
            && let Some(leader) = seen.holders.first()
        {
            let marker = marker_path(&self.election);
            let name = leader.key.rsplit(|&b| b == b'/').next().unwrap_or_default();
            match client.get_and_watch_data(&marker).await {
                Ok((node, stat, _)) if node == name && stat.mzxid != leader.token => {
                    return Ok(());
                }
                Ok((_, _, watcher)) => touched.push(Box::pin(watcher.changed())),
                Err(zk::Error::NoNode) => match client.check_and_watch_stat(&marker).await {
                    Ok((None, watcher)) => touched.push(Box::pin(watcher.changed())),
                    Ok((Some(_), _)) => return Ok(()),
                    Err(e) => return Err(classify(e)),
                },
                Err(e) => return Err(classify(e)),
            }
        }
        // A node among the first N that had not touched itself is no holder yet (`holders_of`),
        // and its touch changes no line either: watch it too. One that has touched since, or
        // gone, is a change already.
        if seen.max_holders > 1 && seen.holders.len() < seen.max_holders as usize {
            let (line, _) = Self::line(&client, &self.election).await?;
            let (_, holding) = holders_in(&line);
            for name in &line[..holding] {
                let path = format!("{}/{name}", self.election);
                if seen.holders.iter().any(|h| h.key == path.as_bytes()) {
                    continue;
                }
                match client.check_and_watch_stat(&path).await {
                    Ok((Some(stat), watcher)) if stat.mzxid == stat.czxid => {
                        touched.push(Box::pin(watcher.changed()));
                    }
                    Ok(_) => return Ok(()),
                    Err(e) => return Err(classify(e)),
                }
            }
        }
        let any_touched = futures_util::future::poll_fn(|cx| {
            for watcher in touched.iter_mut() {
                if watcher.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        });
        tokio::pin!(any_touched);
        match client.get_and_watch_children(&self.election).await {
            Ok((_, stat, _)) if stat.pzxid != revision => Ok(()),
            Ok((_, _, watcher)) => {
                tokio::select! {
                    _ = watcher.changed() => {}
                    () = &mut any_touched => {}
                }
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                if revision != 0 {
                    return Ok(());
                }
                match client.check_and_watch_stat(&self.election).await {
                    Ok((Some(_), _)) => Ok(()),
                    Ok((None, watcher)) => {
                        watcher.changed().await;
                        Ok(())
                    }
                    Err(e) => Err(classify(e)),
                }
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn list_elections(&self, prefix: &str) -> Result<Vec<Election>, StoreError> {
        let base = prefix.trim_end_matches('/');
        // One `sync` covers every read after it on this session.
        let synced = self.synced(base).await?;
        let client = &synced.0;
        let mut names = match client.list_children(base).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => {
                self.chroot_exists(client).await?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(classify(e)),
        };
        names.sort();
        let mut elections = Vec::new();
        for name in names.into_iter().filter(|n| !n.starts_with('.')) {
            let line = Self::holders_of(&synced, &format!("{base}/{name}")).await?;
            if line.candidates > 0 {
                elections.push(Election {
                    name: name.into_bytes(),
                    holders: line.holders,
                    max_holders: line.max_holders,
                    candidates: line.candidates,
                });
            }
        }
        Ok(elections)
    }

    /// A client cannot read another session's remaining time from ZooKeeper.
    async fn lease_time(&self, _leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        Ok(None)
    }
}

impl Records for ZooKeeper {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path_of(key);
        let Synced(client) = self.synced(&path).await?;
        match client.get_data(&path).await {
            // Judged by the servers' clock (records.rs), as seen in this process's own writes:
            // a leader has written its mark or touch before it reads. Without such a write
            // nothing is judged expired, so no host's wall clock ever decides.
            Ok((data, stat)) => match self.server_now() {
                Some(now) if records::expired_at(&data, &stat, now) => {
                    // The version check keeps a record rewritten meanwhile.
                    let _ = client.delete(&path, Some(stat.version)).await;
                    Ok(None)
                }
                _ => Ok(Some(records::record_of(data))),
            },
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(false);
        };
        let path = self.path_of(key);
        let data = records::with_expiry(&value, retention);
        let options = CreateMode::Persistent.with_acls(self.acls());
        let Some(time) = self
            .create_or_replace(
                &client,
                candidacy,
                &path,
                |w| w.add_create(&path, &data, &options),
                |w| w.add_set_data(&path, &data, None),
            )
            .await?
        else {
            return Ok(false);
        };
        if let Some(time) = time {
            *self.server_time.lock().expect("not poisoned") = Some(time);
        }
        // Retention enforced whatever IDs later runs use: the lease's expired records are
        // swept once a process, in the background, after its first record write (the
        // command's start waits for nothing more than the write itself).
        if key.starts_with(&format!("{}.occurrences/", self.prefix))
            && !self.swept.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let task = tokio::spawn(records::sweep(
                client.clone(),
                Self::parent(&path).to_owned(),
                path.clone(),
                time,
            ));
            *self.sweep.lock().expect("not poisoned") = Some(task);
        }
        Ok(true)
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let path = self.path_of(prefix);
        let Synced(client) = self.synced(&path).await?;
        // `PREFIX .occurrences/NAME/` lists IDs; `PREFIX .occurrences/` lists `NAME/ID`.
        let depth = prefix
            .strip_prefix(&self.prefix)
            .unwrap_or(prefix)
            .trim_end_matches('/')
            .split('/')
            .count();
        let mut out = Vec::new();
        let mut parents: Vec<(String, Vec<u8>)> = vec![(path, Vec::new())];
        if depth == 1 {
            parents = match client.list_children(&parents[0].0).await {
                Ok(names) => names
                    .into_iter()
                    .map(|n| {
                        (
                            format!("{}/{n}", parents[0].0),
                            format!("{n}/").into_bytes(),
                        )
                    })
                    .collect(),
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(classify(e)),
            };
        }
        for (parent, shown) in parents {
            let names = match client.list_children(&parent).await {
                Ok(names) => names,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(classify(e)),
            };
            for name in names {
                match client.get_data(&format!("{parent}/{name}")).await {
                    Ok((data, _)) => {
                        if let Some(value) = records::unexpired(data) {
                            let mut id = shown.clone();
                            id.extend(decode_name(&name));
                            out.push((id, value));
                        }
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(classify(e)),
                }
            }
        }
        Ok(out)
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(false);
        };
        let path = self.path_of(key);
        // A held slot (`hold_claim`) has no session: its record stays as its node does.
        let options = if candidacy.lease_id.is_none() {
            CreateMode::Persistent.with_acls(self.acls())
        } else {
            CreateMode::Ephemeral.with_acls(self.acls())
        };
        // A node from an earlier leader's session is replaced, not rewritten, so that it goes
        // with this session.
        self.create_or_replace(
            &client,
            candidacy,
            &path,
            |w| w.add_create(&path, &value, &options),
            |w| {
                w.add_delete(&path, None)?;
                w.add_create(&path, &value, &options)
            },
        )
        .await
        .map(|written| written.is_some())
    }
}

impl Handover for ZooKeeper {
    /// An exists-watch on the request node (it fires on its creation, a new request and its
    /// deletion): a request wakes the leader at once, at no cost while none comes.
    async fn handover_requested(&self, candidacy: &Candidacy, key: &str, poll: Duration) {
        let path = self.path_of(key);
        loop {
            // The leader's own session; without one, its renewal and `key_gone` end leadership.
            let Some(client) = self.session_of() else {
                tokio::time::sleep(poll).await;
                continue;
            };
            let watcher = match client.check_and_watch_stat(&path).await {
                Ok((stat, watcher)) => {
                    if stat.is_some() {
                        match client.get_data(&path).await {
                            Ok((data, stat)) => {
                                if records::unexpired(data).is_some_and(|v| {
                                    super::super::is_request_for(&v, candidacy.token)
                                }) {
                                    // With N > 1 the request node is this holder's alone
                                    // (`.resign/NAME/TOKEN`, a token no later holder gets):
                                    // taken, it is deleted, or every resigned holder would leave
                                    // a persistent node behind. `resign` waits for the claim,
                                    // not for this node. Best effort, version-checked: a
                                    // request written again meanwhile stays (and expires).
                                    if self.max_holders > 1
                                        && let Err(e) =
                                            client.delete(&path, Some(stat.version)).await
                                    {
                                        tracing::debug!(error = %classify(e), "deleting the handover request failed");
                                    }
                                    return;
                                }
                            }
                            Err(zk::Error::NoNode) => {}
                            Err(e) => {
                                tracing::debug!(error = %classify(e), "reading handover requests failed");
                                tokio::time::sleep(poll).await;
                                continue;
                            }
                        }
                    }
                    watcher
                }
                Err(e) => {
                    tracing::debug!(error = %classify(e), "watching for handover requests failed");
                    tokio::time::sleep(poll).await;
                    continue;
                }
            };
            if watcher.changed().await.session_state.is_terminated() {
                tokio::time::sleep(poll).await;
            }
        }
    }

    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        let (key, token) = (leader.key.as_slice(), leader.token);
        let path = String::from_utf8_lossy(key).into_owned();
        let Synced(client) = self.synced(&path).await?;
        // ZooKeeper cannot compare a czxid in a transaction; the version check closes the gap
        // between this read and the delete for everything but a delete-and-recreate of the same
        // path, and candidate paths hold their creator's own random id.
        // The token as readers compute it: the czxid, or with N > 1 the mzxid of the holder's
        // touch (the version check then also covers a later write to the node).
        let name = path.rsplit('/').next().unwrap_or_default();
        // With N = 1 the token is the leader mark's, read after the node (a mark it wrote meanwhile
        // is seen); a node whose token was handed out has its mark, and a mark never names another
        // node again before this one is gone.
        let stat = client.check_stat(&path).await.map_err(classify)?;
        let mark = if max_holders_of(name) == 1 {
            Self::mark_of(&client, &marker_path(Self::parent(&path))).await?
        } else {
            None
        };
        match stat {
            Some(stat) if token_of(name, &stat, mark.as_ref()) == token => {
                match client.delete(&path, Some(stat.version)).await {
                    Ok(()) => {
                        if stat.ephemeral_owner == 0 {
                            // A held slot: what it kept beside its node goes too.
                            self.forget_held(&client, &path, &stat).await;
                        }
                        Ok(true)
                    }
                    Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
                    Err(e) => Err(classify(e)),
                }
            }
            _ => Ok(false),
        }
    }
}

impl Describe for ZooKeeper {
    fn store_name(&self) -> &'static str {
        "ZooKeeper"
    }

    fn shown(&self) -> String {
        self.target.shown.clone()
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        // `HOST:PORT[,HOST:PORT…][/chroot]`, checked when it was parsed.
        let hosts = self.target.connect.split('/').next().unwrap_or_default();
        hosts
            .split(',')
            .filter_map(|h| {
                let (host, port) = h.rsplit_once(':')?;
                Some((host.trim_matches(['[', ']']).to_owned(), port.parse().ok()?))
            })
            .collect()
    }

    fn restart_resets_leases(&self) -> bool {
        true
    }

    fn delete_record_hint(&self, key: &str) -> String {
        let path = self.path_of(key);
        format!(
            "/usr/share/zookeeper/bin/zkCli.sh -server {} delete {}",
            crate::escape::shell_quote(self.connect_string_hosts()),
            crate::escape::shell_quote(&format!("{}{path}", self.chroot()))
        )
    }
}

/// Renews the session: one `sync` and one `exists` on the candidacy's own node, sent together.
///
/// Why this proves the session alive until the send instant plus the timeout: a ZooKeeper
/// server expires a session a timeout after the last request it *received* from it (rounded up
/// to its next tick), and it received this one after it was sent. The client library's own
/// pings and its disconnect timer are not used as proof: the library notices a black hole only
/// after about 2/5 of the timeout, later than a short renew deadline. `sync` goes through the
/// ensemble's leader, so a follower that lost the leader (and so no longer relays this session's
/// activity to it) cannot answer it; a follower relays activity on its next ping to the leader,
/// every tickTime/2, which the margin must cover (docs/zookeeper.md, In an ensemble).
///
/// The timeout is the one negotiated on the session's *current* connection: the client
/// renegotiates it on every reconnect (a server with a smaller `maxSessionTimeout`, or another
/// `tickTime`, clamps it), and the server expires the session by the timeout of its current
/// connection. So the proof is "alive until the send instant + the timeout of the connection that
/// answered, or of a later one", and it is worth `--renew-deadline` only while that timeout is at
/// least `needed` (`--renew-deadline + --kill-after + margin`). Two places hold that:
///
/// - every renewal reads the current timeout *after* its answer. The patched client publishes a
///   connection's timeout before it hands out any reply read on that connection, so the value
///   read belongs to the connection that answered or to a later one; a later connection's connect
///   request reached the server after this renewal was sent, and restarted the session's timer
///   with that later timeout, which is then the one that counts. Too short: `Expired`.
/// - between renewals, and during a step-down's `--kill-after` grace, `key_gone` watches the
///   same value and completes the moment a reconnect negotiates too little
///   (`session_timeout_shrunk`). The deadline proven by an earlier renewal
///   no longer holds then: the server restarted the session's timer with the new, shorter
///   timeout when it accepted the reconnect, and may expire it that long after, before our
///   deadline + `--kill-after`.
///
/// Both are losses the caller treats as certain: SIGKILL to the command's group at once, no
/// `--kill-signal` grace. Why that is safe: the server cannot expire the session before the
/// instant it accepted the reconnect + the new timeout (at least its `minSessionTimeout`, two
/// ticks by default, 1 s and more in practice); we learn of the new timeout one reply later (the
/// connect response, read on the session's task and published at once) and signal the group
/// without waiting on anything local, so the command is dead within milliseconds of that
/// reply, long before the new timeout can run out. Shrinking the deadline instead would keep the
/// command running on a proof that depends on timing we cannot see (when exactly the server
/// accepted the reconnect), and would need `--kill-after` to fit under the new timeout, which by
/// definition it may not. A campaign that follows (`--recampaign`) opens a new session, whose
/// negotiated timeout is checked as at start (exit 125 when it does not fit).
pub struct ZkKeeper {
    client: Option<zk::Client>,
    path: String,
    /// `--renew-deadline + --kill-after + margin`.
    needed: Duration,
}

impl Keeper for ZkKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let Some(client) = &self.client else {
            return Ok(Renewal::Expired);
        };
        if matches!(
            client.state(),
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
        ) {
            return Ok(Renewal::Expired);
        }
        // Both requests leave when called (the library sends in call order); awaited together.
        let sync = client.sync(&self.path);
        let exists = client.check_stat(&self.path);
        let (synced, existing) = futures_util::future::join(sync, exists).await;
        // Read after the answer (see above): the connection that answered, or a later one.
        let negotiated = client.negotiated_session_timeout();
        if negotiated < self.needed {
            tracing::warn!(
                event = "session-timeout-shrunk",
                negotiated_ms = negotiated.as_millis() as u64,
                "ZooKeeper negotiated a session timeout of {} on the current connection, less than --renew-deadline + --kill-after + margin ({}): the lease can no longer be proven for the renew deadline",
                humantime::format_duration(negotiated),
                humantime::format_duration(self.needed)
            );
            return Ok(Renewal::Expired);
        }
        match synced.and(existing.map(|_| ())) {
            // The node's own fate (deleted by someone) is `key_gone`'s to report.
            Ok(()) | Err(zk::Error::NoNode) => Ok(Renewal::Alive),
            Err(zk::Error::SessionExpired) => Ok(Renewal::Expired),
            Err(e) => Err(classify(e)),
        }
    }

    /// Each renewal is its own pair of requests: nothing to forget.
    fn reset(&mut self) {}
}
