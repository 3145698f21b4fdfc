//! `leader-exec check`: is a token the current leader's (with `--max-holders` N: any current
//! holder's)?

use std::time::Duration;

use super::read_settled;
use crate::election::Store;
use crate::exit::Failure;
use crate::exit::{CHECK_CURRENT, CHECK_STALE};

/// `leader-exec check`: is TOKEN the current leader's?
pub async fn check<B: Store>(backend: &B, token: &str, limit: Duration) -> anyhow::Result<u8> {
    let token: i64 = match token.trim().parse() {
        Ok(t) if t > 0 => t,
        _ => {
            return Err(Failure::usage(format!(
                "--token '{}' is not a token (a positive integer, usually \"$LEADER_TOKEN\")",
                token.escape_debug()
            ))
            .into());
        }
    };
    let observation = read_settled(backend, limit).await?;
    // A provisional leader's token (a node's czxid) is no command's: never current.
    if observation.holder(token).is_some_and(|h| !h.provisional) {
        return Ok(CHECK_CURRENT);
    }
    match observation.leader().cloned() {
        Some(leader) if leader.token == token && !leader.provisional => Ok(CHECK_CURRENT),
        Some(leader) if leader.token == token => {
            tracing::warn!(
                event = "stale",
                token,
                "token {token} is no command's: the current leader has not marked its leadership (a Curator leader never does)"
            );
            Ok(CHECK_STALE)
        }
        Some(leader) => {
            tracing::warn!(
                event = "stale",
                token,
                current = leader.token,
                "token {token} is stale: the current leader's token is {}",
                leader.token
            );
            Ok(CHECK_STALE)
        }
        None => {
            tracing::warn!(
                event = "stale",
                token,
                "token {token} is stale: there is no leader"
            );
            Ok(CHECK_STALE)
        }
    }
}
