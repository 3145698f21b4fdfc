//! The watch on the key ahead, which woke a waiter: cancelled a moment later, not at once.
//!
//! What follows a waiter's wake-up is the handover path: its one read of the line and, when it
//! leads, the command's start. Dropping the watch there sends its cancel (an HTTP/2 RST_STREAM)
//! ahead of the read, and etcd's work on it (ending the watch) takes the CPU from the read, the
//! fork and the exec on a small machine. Kept open for [`LINGER`], the cancel goes once that is
//! over. Only the one-leader watch lingers: it filters puts and has seen its key's delete, so
//! etcd has nothing more to send on it (the wider watches of `--max-holders` N > 1 would receive
//! other deletes meanwhile, and are cancelled at once).

use std::time::Duration;

use super::*;

/// How long the watch that woke a waiter stays open.
const LINGER: Duration = Duration::from_millis(100);

impl Etcd {
    /// With one leader: completes when the key ahead is deleted after the revision it was read
    /// at. The watch that saw it is cancelled [`LINGER`] later, on a task of its own: nothing
    /// waits for it.
    pub(super) async fn predecessor_deleted(&self, ahead: &Ahead) -> Result<(), StoreError> {
        let stream = self.deleted_after(&ahead.key, ahead.revision).await?;
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            drop(stream);
        });
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
}
