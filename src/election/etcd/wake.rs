//! How a waiter wakes up on etcd with one leader, and what becomes of the watch that woke it.
//!
//! **The first waiter leads on the leader's delete alone.** A waiter whose look at the line
//! (`check_turn`, at revision R) found exactly one key ahead of it, the leader's, watches from
//! R + 1 one key range that holds both that key and its own key, deletes only
//! ([`Etcd::leader_left`]). When the leader's delete arrives (revision D) and its own key's did
//! not come first, the waiter leads as of D, without a second read:
//! - nothing is ahead at D: at R only the leader was, a key created later has a higher
//!   create-revision than this candidacy's (etcd's revisions only grow), so it is behind; and
//!   the leader's key is gone at D;
//! - its own key stands at D: it stood at R, and one watch sends its events in revision order
//!   from R + 1 on, so a delete of it before D would have come first (a key of that name made
//!   again would have another create-revision, and its delete would have come first too); a
//!   delete in the same revision (`etcdctl del --prefix`) is in the same response, and is no
//!   turn either. The watch on its own key alone (`key_gone`) is another stream, whose events
//!   may come later than this one's: it cannot answer this;
//! - no marker ahead names another N: a marker is written with its candidate key, so one
//!   created after R is behind, and those read at R were checked then;
//! - a watch that etcd ends (compaction, a member without a leader) wakes nothing: the waiter
//!   reads the line again.
//!
//! That is `check_turn`'s answer at D, the fact `etcdctl lock` reads again after the delete:
//! one request less on the handover path (`Campaign::turn_on_wake`). The lease behind the key
//! is this process's own, proven by its renewals as in every phase. As with a read, the proof
//! is of a revision: a delete of its key after D (an operator's, a forced takeover) is a
//! leader's key deleted, which `key_gone` answers with a step-down. Keys between the two in
//! the range (other candidates, by the order of their lease ids) are behind this candidacy: their
//! deletes are passed over. A waiter further back waits for the key just ahead and reads again.
//!
//! **The watch that woke it is cancelled a moment later.** What follows a wake-up is the
//! handover path: the waiter's read of the line (when it makes one) and the command's start.
//! Dropping the watch there sends its cancel (an HTTP/2 RST_STREAM) ahead of them, and etcd's
//! work on it (ending the watch) takes the CPU from the read, the fork and the exec on a small
//! machine. It is parked instead ([`Parked`]), and cancelled [`LINGER`] later or when the claim
//! is released, whichever comes first: before the release's revoke, so that etcd sends its
//! delete to no watch of ours. Only one-leader watches are parked: they filter puts, and what
//! etcd could still send on them is a delete of this candidacy's own key (which the release
//! forestalls) or of a key between the two; the wider watches of `--max-holders` N > 1 would
//! receive other deletes meanwhile, and are cancelled at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// How long the watch that woke a waiter stays open, at most.
const LINGER: Duration = Duration::from_millis(100);

/// The watch that woke this candidacy, until it is cancelled.
#[derive(Clone, Default)]
pub(super) struct Parked(Arc<Mutex<Option<WatchStream>>>);

impl Parked {
    /// Keeps `stream` open until [`LINGER`] has passed or [`Parked::cancel`] is called; nothing
    /// waits for it.
    fn park(&self, stream: WatchStream) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream);
        let parked = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            parked.cancel();
        });
    }

    /// Cancels the parked watch now, if any.
    pub(super) fn cancel(&self) {
        drop(self.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Etcd {
    /// The first waiter behind the one leader: completes when the leader's key is deleted after
    /// `ahead.revision` while this candidacy's own key stands (see the module comment); errors
    /// when its own key is deleted first or the watch breaks (the caller looks again).
    pub(super) async fn leader_left(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        let own = candidacy.key.as_bytes();
        let leader = ahead.key.as_slice();
        let (low, high) = if own < leader {
            (own, leader)
        } else {
            (leader, own)
        };
        // The range's end is exclusive: the key just after the higher one.
        let mut end = high.to_vec();
        end.push(0);
        let options = WatchOptions::new()
            .with_range(end)
            .with_start_revision(ahead.revision + 1)
            .with_filters([WatchFilterType::NoPut]);
        let mut stream = self
            .client
            .watch_client()
            .watch(low, Some(options))
            .await
            .map_err(classify)?;
        loop {
            let Some(response) = stream.message().await.map_err(classify)? else {
                return Err(StoreError::Transient("watch stream closed".into()));
            };
            // A response holds every event of a revision: own key and leader's deleted in one
            // transaction (`etcdctl del --prefix`) is no turn, whatever their order in it.
            let deleted = |key: &[u8]| {
                response.events().iter().any(|e| {
                    e.event_type() == EventType::Delete && e.kv().is_some_and(|kv| kv.key() == key)
                })
            };
            if deleted(own) {
                return Err(StoreError::Transient("own key deleted".into()));
            }
            if deleted(leader) {
                self.parked.park(stream);
                return Ok(());
            }
            if response.canceled() {
                return Err(StoreError::Transient(format!(
                    "watch canceled: {}",
                    response.cancel_reason()
                )));
            }
        }
    }

    /// A waiter further back: completes when the key just ahead is deleted after the revision
    /// it was read at; the watch that saw it is parked.
    pub(super) async fn predecessor_deleted(&self, ahead: &Ahead) -> Result<(), StoreError> {
        let stream = self.deleted_after(&ahead.key, ahead.revision).await?;
        self.parked.park(stream);
        Ok(())
    }

    /// Completes when `key` is deleted after `revision`, with the watch that saw it; errors when
    /// the watch breaks.
    pub(super) async fn deleted_after(
        &self,
        key: &[u8],
        revision: i64,
    ) -> Result<WatchStream, StoreError> {
        let options = WatchOptions::new()
            .with_start_revision(revision + 1)
            .with_filters([WatchFilterType::NoPut]);
        self.first_event(key, options, |e| e.event_type() == EventType::Delete)
            .await
    }

    /// Watches with `options` until an event matches `wanted`, and returns the watch (dropping
    /// it cancels it); errors when the watch breaks.
    pub(super) async fn first_event(
        &self,
        key: &[u8],
        options: WatchOptions,
        wanted: impl Fn(&etcd_client::Event) -> bool,
    ) -> Result<WatchStream, StoreError> {
        let mut stream = self
            .client
            .watch_client()
            .watch(key, Some(options))
            .await
            .map_err(classify)?;
        loop {
            match stream.message().await.map_err(classify)? {
                Some(response) => {
                    if response.events().iter().any(&wanted) {
                        return Ok(stream);
                    }
                    if response.canceled() {
                        // Compacted past `revision`, or the member lost its leader: the caller
                        // reads the current state again.
                        return Err(StoreError::Transient(format!(
                            "watch canceled: {}",
                            response.cancel_reason()
                        )));
                    }
                }
                None => return Err(StoreError::Transient("watch stream closed".into())),
            }
        }
    }
}
