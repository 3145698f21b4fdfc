//! `--max-holders` N > 1 on etcd: the markers that record each candidate's N, the holders of a
//! line, and the check of a candidacy's turn among N holders (see the module above for the
//! layout).

use super::*;

impl Etcd {
    /// `check_turn` with `--max-holders` N > 1: a semaphore in the election's own line.
    ///
    /// The line is the election's candidate keys in create-revision order, as with one leader.
    /// A candidate *takes* its place among the holders with a write: a put of its own key (same
    /// value, same lease), fenced by the key's create-revision, so its mod-revision rises above
    /// its create-revision. Only a taken candidate runs its command. A candidacy takes when
    /// (a) fewer than N candidates are ahead of it and (b) the one just ahead (if any) has taken.
    ///
    /// Why no N+1st holds: by (b) and induction the taken keys are a prefix of the line (a key
    /// takes only after every key ahead of it has taken or left, and a taken key stays taken
    /// until deleted). So when this candidacy takes, every taken key is ahead of it, and by (a)
    /// fewer than N are. Both facts were read at one revision and stay true until the take
    /// commits: keys are only ever added behind this one, taken keys never become untaken, and
    /// the take's compare fails if this key itself went.
    ///
    /// Why tokens rise: the token is the create-revision, as with one leader. Takes happen in
    /// line order (a key behind takes only after this one took or left, and a key that left
    /// never comes back with the same create-revision), so a later candidate can never hold
    /// before an earlier one still in line: each take's token exceeds every token taken before.
    ///
    /// Why nobody misses a turn and only the one that may hold wakes: a waiter watches from
    /// the revision it read at, so no change after its read is lost. The first waiter (N
    /// taken keys ahead) waits for any of them to be deleted; a later waiter, or one whose
    /// predecessor has not taken yet, waits for its predecessor's take or deletion, the only
    /// change that can satisfy (b) and the one that precedes any change to (a) that matters.
    ///
    /// A mismatch: every candidate ahead is compared with this one's N (its marker, or 1 for a
    /// key without one: `etcdctl elect`, or an instance with N = 1). Of two instances with
    /// different N the later one, while both stand, finds the earlier ahead of it and answers
    /// `Mismatch` before it ever takes; its release revokes the lease, taking key and marker.
    pub(super) async fn check_shared_turn(
        &self,
        candidacy: &Candidacy,
    ) -> Result<Turn, StoreError> {
        let place = candidacy.place;
        let ahead = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(place - 1)
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only();
        let (revision, [own, ahead, markers]) = read_together(
            &self.client,
            [
                TxnOp::get(
                    candidacy.key.as_str(),
                    Some(GetOptions::new().with_keys_only()),
                ),
                TxnOp::get(self.election_prefix.as_str(), Some(ahead)),
                TxnOp::get(self.marker_prefix.as_str(), Some(markers_ahead_of(place))),
            ],
        )
        .await?;
        let own_taken = match own.kvs().first() {
            Some(kv) if kv.create_revision() == place => taken(kv),
            _ => return Ok(Turn::Gone),
        };
        let markers = Markers::new(self.marker_prefix.as_bytes(), markers.kvs());
        let ahead = ahead.kvs();
        if let Some(theirs) = ahead
            .iter()
            .map(|kv| markers.of(self.election_prefix.as_bytes(), kv))
            .find(|&n| n != self.max_holders)
        {
            return Ok(Turn::Mismatch { theirs });
        }
        if own_taken {
            // Taken by an earlier look whose answer was lost: it holds.
            return Ok(Turn::Leading { token: place });
        }
        let predecessor = ahead.last();
        let fewer_than_n = ahead.len() < self.max_holders as usize;
        if fewer_than_n && predecessor.is_none_or(taken) {
            return self.take(candidacy).await;
        }
        let Some(predecessor) = predecessor else {
            // Unreachable: no predecessor means nothing ahead, fewer than N, taken above.
            return Err(StoreError::Transient("no candidate ahead".into()));
        };
        // A taken predecessor has fewer than N ahead of it, so this one has exactly N ahead,
        // all taken: it is the first waiter and watches them all.
        let holders = if taken(predecessor) {
            ahead.iter().map(|kv| kv.key().to_vec()).collect()
        } else {
            Vec::new()
        };
        Ok(Turn::Behind(Ahead {
            key: predecessor.key().to_vec(),
            revision,
            expires_in: None,
            holders,
        }))
    }
}

impl Etcd {
    /// The take: a put of the candidacy's own key (same value, same lease), fenced by its
    /// create-revision. `Gone` when the key went (or was made anew).
    async fn take(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let place = candidacy.place;
        let take = Txn::new()
            .when([Compare::create_revision(
                candidacy.key.as_str(),
                CompareOp::Equal,
                place,
            )])
            .and_then([TxnOp::put(
                candidacy.key.as_str(),
                self.identity.as_str(),
                Some(PutOptions::new().with_lease(candidacy.lease_id.unwrap_or_default())),
            )]);
        let response = self.client.kv_client().txn(take).await.map_err(classify)?;
        Ok(if response.succeeded() {
            Turn::Leading { token: place }
        } else {
            Turn::Gone
        })
    }

    /// The first waiter's wake-up (`Campaign::turn_on_wake`, N > 1): one of the N holders ahead
    /// was deleted, and the waiter takes at once, without reading the line again. With N = 1
    /// the first waiter leads on the wake-up itself (why: wake.rs).
    ///
    /// Why that is safe: the look that answered `ahead` found, at its revision R, this key not
    /// taken, exactly N keys ahead of it, all taken, each with this N (else `Mismatch`), and
    /// the watch then saw one of them deleted at a revision D > R. Between R and the take,
    /// keys are only ever added behind this one (a later create-revision), a taken key stays
    /// taken until it is deleted, and a marker never changes (it is written once, with its
    /// key). So at D and until the take commits, fewer than N keys are ahead, every one of them
    /// taken and with this N: (a) and (b) of `check_shared_turn` hold, and a look would answer
    /// the take itself. The take's compare fails if this key went meanwhile (`Gone`, looked
    /// at by the caller as after any other take). A waiter behind a predecessor that has not
    /// taken yet (`holders` empty) looks again as before: its wake-up proves nothing about (a).
    pub(super) async fn take_on_wake(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Option<Result<Turn, StoreError>> {
        if ahead.holders.is_empty() {
            return None;
        }
        if self.max_holders <= 1 {
            // The leader left while this candidacy's key stood, and nothing else was ahead:
            // `leader_left` (wake.rs) completes only then, and that is the proof. The instant the
            // caller pairs with it only caps the deadline this lease's renewals already bound.
            return Some(Ok(Turn::Leading {
                token: candidacy.place,
            }));
        }
        Some(self.take(candidacy).await)
    }
}

/// Where markers go: `PREFIX NAME "/"` → `PREFIX ".holders/" NAME "/"`. Prefixes are one
/// segment between slashes and lease names hold no '/' (validate.rs), so the name is the last
/// segment. Outside every election's key range (names starting with '.' are no election):
/// `etcdctl elect` and earlier versions never take a marker for a candidate.
pub(super) fn marker_prefix(election_prefix: &str) -> String {
    let trimmed = election_prefix.strip_suffix('/').unwrap_or(election_prefix);
    match trimmed.rsplit_once('/') {
        Some((prefix, name)) => format!("{prefix}/{MARKERS}{name}/"),
        None => format!("{MARKERS}{trimmed}/"),
    }
}

/// The segment under the prefix that holds every election's markers.
pub(super) const MARKERS: &str = ".holders/";

/// The markers written with candidate keys created before `place`.
pub(super) fn markers_ahead_of(place: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_max_create_revision(place - 1)
}

/// N as a marker holds it: a decimal from 1 to 1000. Store data is untrusted: anything else
/// counts as no marker, N = 1, which an instance with N > 1 refuses: never more holders.
pub(super) fn marker_value(value: &[u8]) -> u32 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse::<u32>().ok())
        .filter(|n| (1..=1000).contains(n))
        .unwrap_or(1)
}

/// Whether a candidate key has taken its place among the holders (N > 1): its take put it
/// again after its creation.
pub(super) fn taken(kv: &etcd_client::KeyValue) -> bool {
    kv.mod_revision() > kv.create_revision()
}

/// Markers of one election by create-revision, with their key's last segment (the lease id).
pub(super) struct Markers<'a> {
    by_revision: std::collections::HashMap<i64, (&'a [u8], u32)>,
}

impl<'a> Markers<'a> {
    pub(super) fn new(marker_prefix: &[u8], kvs: &'a [etcd_client::KeyValue]) -> Self {
        let by_revision = kvs
            .iter()
            .filter_map(|kv| {
                let id = kv.key().strip_prefix(marker_prefix)?;
                Some((kv.create_revision(), (id, marker_value(kv.value()))))
            })
            .collect();
        Markers { by_revision }
    }

    /// The N of a candidate key: its marker's (written in the same transaction: same
    /// create-revision, same lease id), else 1.
    pub(super) fn of(&self, election_prefix: &[u8], candidate: &etcd_client::KeyValue) -> u32 {
        let id = candidate.key().strip_prefix(election_prefix);
        match self.by_revision.get(&candidate.create_revision()) {
            Some((marker_id, n)) if id == Some(*marker_id) => *n,
            _ => 1,
        }
    }
}

/// The holders of a line of candidate keys (oldest first) whose N is `max_holders`: the
/// oldest alone with one leader (as `etcdctl elect` reads it); with N > 1, the taken keys,
/// which are the front of the line, at most N.
pub(super) fn holders_of(line: &[etcd_client::KeyValue], max_holders: u32) -> Vec<Leader> {
    let as_leader = |kv: &etcd_client::KeyValue| Leader {
        key: kv.key().to_vec(),
        identity: kv.value().to_vec(),
        token: kv.create_revision(),
        lease_id: Some(kv.lease()),
        provisional: false,
    };
    if max_holders <= 1 {
        return line.first().map(as_leader).into_iter().collect();
    }
    line.iter()
        .take(max_holders as usize)
        .take_while(|kv| taken(kv))
        .map(as_leader)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{marker_prefix, marker_value};

    #[test]
    fn markers_live_beside_the_election_outside_its_range() {
        assert_eq!(
            marker_prefix("/leader-exec/backup/"),
            "/leader-exec/.holders/backup/"
        );
        assert!(!marker_prefix("/p/a/").starts_with("/p/a/"));
    }

    #[test]
    fn a_marker_is_a_decimal_from_1_to_1000_and_anything_else_counts_as_1() {
        assert_eq!(marker_value(b"2"), 2);
        assert_eq!(marker_value(b"1000"), 1000);
        for junk in [
            &b""[..],
            b"0",
            b"1001",
            b" 2",
            b"2\n",
            b"-3",
            b"\xff",
            b"99999999999",
        ] {
            assert_eq!(marker_value(junk), 1, "{junk:?}");
        }
    }
}
