//! `leader-exec resign`: move leadership away from the current leader without logging into its
//! host.
//!
//! It deletes the leader's election key in one transaction that compares the key's
//! create-revision (the leader's token), so it deletes exactly the leader it read, or nothing:
//! a leader that changed in between is never resigned by mistake. The leader notices the
//! deletion through the watch it keeps on its own key and treats it like every certain loss:
//! SIGKILL to the command's group at once, release, exit 75 (or campaign again with
//! `--recampaign`). The next candidate in line takes over as its watch sees the key go.
//!
//! Exit codes: 0 resigned, 1 `--token` given and not the current leader's (or the leader changed
//! while resigning: nothing deleted), 3 no leader, 125 error.

use std::io::Write as _;
use std::time::Duration;

use crate::election::Backend;
use crate::escape::{escape, escape_str};
use crate::exit::Failure;
use crate::observe::{self, STATUS_NO_LEADER};
use crate::settings::Scope;

/// The leader was resigned.
pub const RESIGNED: u8 = 0;
/// `--token` is not the current leader's, or the leader changed while resigning.
pub const NOT_CURRENT: u8 = 1;
/// There is no leader to resign (same as `status`).
pub const NO_LEADER: u8 = STATUS_NO_LEADER;

/// Parses `--token` like `check` does.
fn parse_token(token: &str) -> anyhow::Result<i64> {
    match token.trim().parse() {
        Ok(t) if t > 0 => Ok(t),
        _ => Err(Failure::usage(format!(
            "--token '{}' is not a token (a positive integer, as `status` shows it)",
            token.escape_debug()
        ))
        .into()),
    }
}

pub async fn resign<B: Backend>(
    backend: &B,
    scope: &Scope,
    token: Option<&str>,
    limit: Duration,
) -> anyhow::Result<u8> {
    let wanted = token.map(parse_token).transpose()?;
    let observation = observe::observe_once(backend, limit).await?;
    let Some(leader) = observation.leader else {
        tracing::warn!(
            event = "no-leader",
            "lease {} has no leader: nothing to resign",
            escape_str(&scope.lease)
        );
        return Ok(NO_LEADER);
    };
    if let Some(wanted) = wanted
        && wanted != leader.token
    {
        tracing::warn!(
            event = "stale",
            token = wanted,
            current = leader.token,
            "token {wanted} is not the current leader's (the current leader, {}, has token {}); nothing deleted",
            escape(&leader.identity),
            leader.token
        );
        return Ok(NOT_CURRENT);
    }
    let deleted = observe::bounded(
        backend,
        limit,
        "deleting the leader's key",
        backend.delete_if_current(&leader.key, leader.token),
    )
    .await?;
    if !deleted {
        tracing::warn!(
            event = "leader-changed",
            token = leader.token,
            "the leader with token {} ({}) left while resigning it; nothing deleted",
            leader.token,
            escape(&leader.identity)
        );
        return Ok(NOT_CURRENT);
    }
    tracing::info!(event = "resigned", token = leader.token, "leader resigned");
    let line = format!(
        "resigned leader {} (token {}, key {})\n",
        escape(&leader.identity),
        leader.token,
        escape(&leader.key)
    );
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
    Ok(RESIGNED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_positive_integers() {
        assert_eq!(parse_token(" 42 ").unwrap(), 42);
        for bad in ["", "0", "-3", "x", "4.2"] {
            assert!(parse_token(bad).is_err(), "{bad}");
        }
    }
}
