//! Held slots (`leader-exec hold`) on ZooKeeper: a candidate node made persistent in its place
//! in line, and the first waiter's rule for removing one whose bound has passed.

use super::*;

/// Where the held slot (`leader-exec hold`) whose candidate node is `node` keeps its bound:
/// `PREFIX .held/NAME/<node>`, outside the election node like [`marker_path`].
pub(super) fn held_path(election: &str, node: &str) -> String {
    match election.rsplit_once('/') {
        Some((base, name)) => format!("{base}/{HELD}/{name}/{node}"),
        None => format!("{HELD}/{election}/{node}"),
    }
}

/// The node under the prefix that holds every held slot's bound (see [`held_path`]).
const HELD: &str = ".held";

impl ZooKeeper {
    /// The ephemeral candidate node is replaced, in one transaction, by a persistent node of
    /// the same name and data (the same place in line: the line sorts by name) and a node
    /// `PREFIX .held/NAME/<node>` holding `bound` in milliseconds; the delete is fenced by the
    /// node's version as read on this session. Then the node leads again as any candidate
    /// does, by the leader mark (N = 1) or a touch (N > 1), written after the replacement, so
    /// the token is the zxid of a write newer than every token given before (see
    /// [`Place::Holds`]). No session stands behind the node: it goes by `remove_claim`
    /// (`release`, `resign --force`), or when the first waiter behind it has seen it unchanged
    /// for `bound` on its own CLOCK_BOOTTIME (`check_turn`), the rule PostgreSQL keeps for a
    /// row not released.
    pub(super) async fn hold_slot(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(None);
        };
        let (data, stat) = match client.get_data(&candidacy.key).await {
            Ok(found) => found,
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => return Ok(None),
            Err(e) => return Err(classify(e)),
        };
        if stat.czxid != candidacy.place || stat.ephemeral_owner != client.session_id().0 {
            return Ok(None);
        }
        let node = candidacy.key.rsplit('/').next().unwrap_or_default();
        let side = held_path(&self.election, node);
        let persistent = CreateMode::Persistent.with_acls(self.acls());
        client
            .mkdir(Self::parent(&side), &persistent)
            .await
            .map_err(classify)?;
        let bound_ms = bound.as_millis().to_string();
        let mut writer = client.new_multi_writer();
        writer
            .add_delete(&candidacy.key, Some(stat.version))
            .map_err(classify)?;
        writer
            .add_create(&candidacy.key, &data, &persistent)
            .map_err(classify)?;
        writer
            .add_create(&side, bound_ms.as_bytes(), &persistent)
            .map_err(classify)?;
        match writer.commit().await {
            Ok(_) => {}
            Err(zk::MultiWriteError::OperationFailed { .. }) => return Ok(None),
            Err(zk::MultiWriteError::RequestFailed { source }) => return Err(classify(source)),
        }
        // The create's stat in a multi's answer may be missing (ZOOKEEPER-4026): read it.
        let Some(stat) = client.check_stat(&candidacy.key).await.map_err(classify)? else {
            return Ok(None);
        };
        let held = Candidacy {
            lease_id: None,
            key: candidacy.key.clone(),
            place: stat.czxid,
            token: 0,
        };
        let turn = if self.max_holders == 1 {
            self.mark(&client, &held).await?
        } else {
            self.touch(&client, &held).await?
        };
        Ok(match turn {
            Turn::Leading { token } => Some(held.leading(token)),
            _ => None,
        })
    }

    /// For the first waiter: the held slots among `holders` (candidate paths, the first N in
    /// line), each sighted on this process's CLOCK_BOOTTIME. A held slot (a persistent
    /// candidate node: only `hold_claim` makes one, and nothing changes it after its token was
    /// given) seen unchanged — the same czxid and mzxid — for its bound (the `.held` node's
    /// milliseconds; this instance's --ttl if that node is missing or unreadable) is removed,
    /// fenced by the version seen: the rule PostgreSQL keeps for a row nobody renews, with the
    /// waiter's own clock deciding, never the servers'. Answers whether one was removed (look
    /// again at once), else how long until the next may be.
    pub(super) async fn expire_held(
        &self,
        client: &zk::Client,
        holders: &[String],
    ) -> Result<(bool, Option<Duration>), StoreError> {
        use crate::clock::Clock as _;
        let now = crate::clock::BootClock.now();
        let mut next: Option<Duration> = None;
        for path in holders {
            let stat = match client.check_stat(path).await {
                Ok(Some(stat)) => stat,
                Ok(None) => return Ok((true, None)),
                Err(e) => return Err(classify(e)),
            };
            if stat.ephemeral_owner != 0 {
                continue;
            }
            let node = path.rsplit('/').next().unwrap_or_default();
            let side = held_path(&self.election, node);
            let bound = match client.get_data(&side).await {
                Ok((data, _)) => std::str::from_utf8(&data)
                    .ok()
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .map(Duration::from_millis),
                Err(_) => None,
            }
            .unwrap_or(self.timing.ttl);
            let since = {
                let mut sightings = self.sightings.lock().expect("not poisoned");
                let seen = sightings
                    .entry(path.clone())
                    .or_insert((stat.czxid, stat.mzxid, now));
                if (seen.0, seen.1) != (stat.czxid, stat.mzxid) {
                    *seen = (stat.czxid, stat.mzxid, now);
                }
                seen.2
            };
            let ripe = since + bound;
            if now < ripe {
                let left = ripe - now;
                next = Some(next.map_or(left, |n| n.min(left)));
                continue;
            }
            tracing::info!(
                event = "held-slot-expired",
                node = %crate::escape::escape_str(node),
                "a held slot was seen unchanged for its bound ({}); removing it",
                humantime::format_duration(bound)
            );
            match client.delete(path, Some(stat.version)).await {
                Ok(()) | Err(zk::Error::NoNode | zk::Error::BadVersion) => {}
                Err(e) => return Err(classify(e)),
            }
            self.forget_held(client, path, &stat).await;
            return Ok((true, None));
        }
        Ok((false, next))
    }

    /// Best effort, once a held slot's node is gone: its `.held` node, and with N > 1 its state
    /// record (`PREFIX .leaders/NAME/TOKEN`, persistent for a held slot).
    pub(super) async fn forget_held(&self, client: &zk::Client, path: &str, stat: &zk::Stat) {
        let node = path.rsplit('/').next().unwrap_or_default();
        self.sightings.lock().expect("not poisoned").remove(path);
        let _ = client.delete(&held_path(&self.election, node), None).await;
        if max_holders_of(node) > 1 {
            let lease = self.election.rsplit('/').next().unwrap_or_default();
            let record = self.path_of(&format!("{}.leaders/{lease}/{}", self.prefix, stat.mzxid));
            if let Ok(Some(found)) = client.check_stat(&record).await
                && found.ephemeral_owner == 0
            {
                let _ = client.delete(&record, Some(found.version)).await;
            }
        }
    }
}
