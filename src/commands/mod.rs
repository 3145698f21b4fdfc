//! The subcommands that read or administer an election: `status`, `watch`, `check`, `resign`
//! and `status --all`, each on the store door.

pub mod check;
pub mod resign;
pub mod status;
pub mod status_all;
pub mod watch;

use std::io::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::election::{self, Leader, Observation, Reach, StartError, Store, StoreError};
use crate::exit::Failure;

/// `status` exit codes.
pub const STATUS_LEADER: u8 = 0;
pub const STATUS_NO_LEADER: u8 = 3;
/// `check` exit codes.
pub const CHECK_CURRENT: u8 = 0;
pub const CHECK_STALE: u8 = 1;

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
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}
