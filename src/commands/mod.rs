//! The subcommands that read or administer an election: `status`, `watch`, `check`, `resign`
//! and `status --all`, each on the store door.

pub mod check;
pub mod hold;
pub mod resign;
pub mod status;
pub mod status_all;
pub mod watch;

use std::io::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::election::{self, Leader, Observation, Reach, StartError, Store, StoreError};
use crate::exit::Failure;

/// Reads once, retrying transient errors within `limit`.
pub(crate) async fn read_once<B: Store>(
    backend: &B,
    limit: Duration,
) -> anyhow::Result<Observation> {
    first_contact(backend, limit, "reading the election", || {
        backend.read_election()
    })
    .await
}

/// How long a reader waits for a provisional leader ([`Leader::provisional`]: ZooKeeper, a first
/// node the leader mark does not name yet) to be confirmed before taking it as it stands. A
/// leader-exec leader marks one round trip after its look, so the mark comes well within it; a
/// Curator leader never marks, and is shown (with its czxid) once it is over.
pub const PROVISIONAL_GRACE: Duration = Duration::from_secs(1);

/// Whether the leader of `observation` is provisional (only ever with `--max-holders` 1).
pub(crate) fn provisional(observation: &Observation) -> bool {
    observation.max_holders == 1 && observation.leader().is_some_and(|l| l.provisional)
}

/// Reads as [`read_once`]; while the leader read is provisional, waits up to
/// [`PROVISIONAL_GRACE`] for a change (its mark) and reads again, so that `status`, `check` and
/// `resign` see the token its command is given, not the node's czxid. When the grace runs out,
/// or the store cannot be read meanwhile, the provisional leader stands (a Curator leader).
pub(crate) async fn read_settled<B: Store>(
    backend: &B,
    limit: Duration,
) -> anyhow::Result<Observation> {
    let mut observation = read_once(backend, limit).await?;
    let until = tokio::time::Instant::now() + PROVISIONAL_GRACE;
    while provisional(&observation) {
        let next = async {
            backend.changed_since(&observation).await?;
            backend.read_election().await
        };
        match tokio::time::timeout_at(until, next).await {
            Ok(Ok(next)) => observation = next,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "reading the election again failed");
                break;
            }
            Err(_) => break,
        }
    }
    Ok(observation)
}

/// The first request of a subcommand: retried within `limit`, ended early by a refusal on every
/// endpoint, and worded as the run form words an unreachable store.
pub(crate) async fn first_contact<B, T, F, Fut>(
    backend: &B,
    limit: Duration,
    what: &str,
    attempt: F,
) -> anyhow::Result<T>
where
    B: Store,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    match election::first_contact(&Reach::of(backend), limit, attempt).await {
        Ok(value) => Ok(value),
        Err(StartError::Unreachable(message)) => Err(Failure::usage(message).into()),
        Err(StartError::Store(e)) => Err(Failure::usage(format!("{what}: {e}")).into()),
    }
}

pub(crate) fn leader_json(leader: &Leader) -> Value {
    // JSON strings escape every control character; bytes that are not UTF-8 become U+FFFD.
    json!({
        "identity": String::from_utf8_lossy(&leader.identity),
        "token": leader.token,
        "key": String::from_utf8_lossy(&leader.key),
        "lease_id": leader.lease_id.map(|id| format!("{id:x}")),
    })
}

/// Writes to stdout; a reader that went away (`status | head -1`) is not an error.
pub(crate) fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}
