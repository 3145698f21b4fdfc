//! `leader-exec resign`: hand leadership over to the next instance in line, from any host,
//! without an overlap.
//!
//! `resign` does not take the claim away; it asks. It writes a request under
//! `PREFIX .resign/NAME` (outside every election, so no tool reading the election takes it for
//! a candidate) that names the leader's token, fenced by the leader's own claim: the write
//! commits only while that token still leads, so a request can never reach a later leader,
//! and it expires on its own when `resign` stops waiting. The leader watches that key (etcd,
//! ZooKeeper), or reads it once per `--retry-period` (PostgreSQL). On a request for its own
//! token it stops its command exactly as on a forwarded TERM (`--kill-signal`, `--kill-after`,
//! SIGKILL to the group), keeps renewing its claim meanwhile, releases the claim only once the
//! whole group is gone, and exits 75. The next instance cannot start before that release (or
//! the lease's expiry), so the old and new commands never overlap.
//!
//! `resign` then waits until the claim is gone and exits 0. A leader that does not answer
//! within `--timeout` (a frozen host: SIGSTOP, a paused VM, cut off from the store) is named
//! and `resign` exits 124; `--force` deletes the claim at once — today's forced takeover,
//! which can overlap, and says so.
//!
//! With `--max-holders` N > 1, `resign` asks the oldest holder (the one `status` shows as
//! leader), or with `--token T` the holder with that token; its request key is that holder's
//! own (`PREFIX .resign/NAME/TOKEN`), and it waits until exactly that holder's claim is gone,
//! whatever the other holders do meanwhile. `--force` deletes that holder's claim alone.
//!
//! Exit codes: 0 handed over (or, with `--force`, deleted), 1 `--token` given and not the
//! current leader's (with N > 1: no current holder's), or the leader changed meanwhile:
//! nothing asked or deleted, 3 no leader, 124 no handover within `--timeout`, 125 error.

use std::io::Write as _;
use std::time::Duration;

use crate::commands;
use crate::election::Scope;
use crate::election::{Leader, Store};
use crate::escape::{escape, escape_str};
use crate::exit::{Failure, RESIGN_NO_LEADER, RESIGN_NOT_CURRENT, RESIGN_TIMED_OUT, RESIGNED};
use crate::records::published;
use crate::signals::{self, Signals};

/// A leader that records no timing (an older leader-exec) is assumed to run with the defaults.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(4);
const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Beyond the leader's own timing: a release retried, a loaded host, the look that sees it.
const SLACK: Duration = Duration::from_secs(5);
/// How often `resign` looks whether the claim is gone, besides the store's change
/// notifications (a store that announces nothing: a leader whose lease simply expired).
const LOOK: Duration = Duration::from_millis(500);

/// What `resign` was asked to do.
pub struct Request<'a> {
    pub token: Option<&'a str>,
    pub force: bool,
    pub timeout: Option<Duration>,
}

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

/// How long a leader with this timing may take to hand over: it sees the request within a
/// retry period, its command gets `--kill-after`, then SIGKILL, and its release (or the look
/// that sees it) takes about another retry period.
fn handover_bound(kill_after: Duration, retry_period: Duration) -> Duration {
    kill_after
        .saturating_add(retry_period.saturating_mul(2))
        .saturating_add(SLACK)
}

pub async fn resign<B: Store>(
    backend: &B,
    scope: &Scope,
    request: Request<'_>,
    limit: Duration,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    let wanted = request.token.map(parse_token).transpose()?;
    if request.timeout == Some(Duration::ZERO) {
        return Err(Failure::usage("--timeout 0s: give the leader some time, like 30s").into());
    }
    // Settled: a leader still to write its mark (ZooKeeper) is asked by the token its command
    // is given, which its watch on the request compares, not by its node's czxid.
    let observation = commands::read_settled(backend, limit).await?;
    // With --max-holders N > 1 (as the store says the instances use): `--token T` picks the
    // holder with that token, and without it the oldest holder (the leader) is asked. Which
    // one is fixed here; everything after follows that holder alone, by its token.
    let several = observation.max_holders > 1;
    if several
        && let Some(wanted) = wanted
        && observation.leader().is_some()
        && observation.holder(wanted).is_none()
    {
        let holding: Vec<String> = observation
            .holders
            .iter()
            .map(|h| format!("{} ({})", h.token, escape(&h.identity)))
            .collect();
        tracing::warn!(
            event = "stale",
            token = wanted,
            "token {wanted} is not a current holder's (the holders have tokens {}); nothing asked or deleted",
            holding.join(", ")
        );
        return Ok(RESIGN_NOT_CURRENT);
    }
    let target = match wanted {
        Some(wanted) if several => observation.holder(wanted),
        _ => observation.leader(),
    };
    let Some(leader) = target.cloned() else {
        tracing::warn!(
            event = "no-leader",
            "lease {} has no leader: nothing to resign",
            escape_str(&scope.lease)
        );
        return Ok(RESIGN_NO_LEADER);
    };
    if let Some(wanted) = wanted
        && wanted != leader.token
    {
        tracing::warn!(
            event = "stale",
            token = wanted,
            current = leader.token,
            "token {wanted} is not the current leader's (the current leader, {}, has token {}); nothing asked or deleted",
            escape(&leader.identity),
            leader.token
        );
        return Ok(RESIGN_NOT_CURRENT);
    }
    if request.force {
        return force(backend, &leader, limit).await;
    }
    // A slot `leader-exec hold` took has no process that could hand it over: say so at once
    // instead of waiting out the bound for an answer that cannot come.
    let state = published::read(backend, scope, observation.max_holders, leader.token, limit)
        .await
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "reading the leader's state failed");
            None
        });
    if state.as_ref().is_some_and(|s| s.held_for_ms.is_some()) {
        return Err(Failure::new(
            RESIGN_TIMED_OUT,
            format!(
                "token {} ({}) is a slot held by `leader-exec hold`, with no process to hand it over: `leader-exec release --lease {} --identity {}` gives it back, `resign --token {} --force` deletes it",
                leader.token,
                escape(&leader.identity),
                crate::escape::shell_quote(&scope.lease),
                crate::escape::shell_quote(&String::from_utf8_lossy(&leader.identity)),
                leader.token
            ),
        )
        .into());
    }
    let bound = match request.timeout {
        Some(timeout) => timeout,
        None => {
            // The leader records its timing beside its claim (read above); a read that failed
            // only costs the default.
            let ms = |v: Option<u64>, default| v.map_or(default, Duration::from_millis);
            let kill_after = ms(
                state.as_ref().and_then(|s| s.kill_after_ms),
                DEFAULT_KILL_AFTER,
            );
            let retry = ms(
                state.as_ref().and_then(|s| s.retry_period_ms),
                DEFAULT_RETRY_PERIOD,
            );
            handover_bound(kill_after, retry)
        }
    };
    let started = tokio::time::Instant::now();
    let give_up_at = started + bound;
    let key = published::holder_handover_key(scope, observation.max_holders, leader.token);
    let asked = crate::election::bounded::bounded(
        backend,
        limit,
        "asking the leader to hand over",
        backend.request_handover(&leader, &key, bound),
    )
    .await?;
    if !asked {
        tracing::warn!(
            event = "leader-changed",
            token = leader.token,
            "the leader with token {} ({}) left while resigning it; nothing asked",
            leader.token,
            escape(&leader.identity)
        );
        return Ok(RESIGN_NOT_CURRENT);
    }
    tracing::info!(
        event = "handover-requested",
        token = leader.token,
        "asked leader {} (token {}) to hand over; waiting up to {}",
        escape(&leader.identity),
        leader.token,
        humantime::format_duration(bound)
    );
    // The latest look: a change is awaited from there on.
    let mut seen = observation;
    loop {
        // Until the claim is gone: the store's change notification or the next look, whichever
        // comes first.
        let look_at = (tokio::time::Instant::now() + LOOK).min(give_up_at);
        tokio::select! {
            _ = tokio::time::timeout_at(look_at, backend.changed_since(&seen)) => {}
            signal = signals.recv() => {
                if signals::withdraws_candidacy(signal) {
                    tracing::info!(event = "interrupted", signal = signal.as_str(), "interrupted; the request expires on its own");
                    return Ok(128 + signal as u8);
                }
                continue;
            }
        }
        let remaining = give_up_at.saturating_duration_since(tokio::time::Instant::now());
        let look = tokio::time::timeout(remaining.max(LOOK), backend.read_election()).await;
        match look {
            Ok(Ok(now)) => {
                // That holder's claim is gone (with one holder: the leader changed). Another
                // holder coming or going is not it.
                if now.holder(leader.token).is_none() {
                    print_line(&format!(
                        "resigned leader {} (token {}, key {}): handed over in {} ms\n",
                        escape(&leader.identity),
                        leader.token,
                        escape(&leader.key),
                        started.elapsed().as_millis()
                    ));
                    tracing::info!(
                        event = "resigned",
                        token = leader.token,
                        "leader handed over"
                    );
                    return Ok(RESIGNED);
                }
                seen = now;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "reading the election failed; retrying"),
            Err(_) => tracing::debug!("reading the election took too long; retrying"),
        }
        if tokio::time::Instant::now() >= give_up_at {
            return Err(Failure::new(
                RESIGN_TIMED_OUT,
                format!(
                    "the leader {} (token {}, key {}) did not hand over within {}: its host may be frozen or cut off from the store; \
                     `leader-exec resign --lease {} --token {} --force` deletes its claim at once (its command may then run beside the next one until it notices)",
                    // Raw here: the final line escapes the whole message.
                    String::from_utf8_lossy(&leader.identity),
                    leader.token,
                    String::from_utf8_lossy(&leader.key),
                    humantime::format_duration(bound),
                    crate::escape::shell_quote(&scope.lease),
                    leader.token
                ),
            )
            .into());
        }
    }
}

/// `--force`: deletes the leader's claim at once, in one transaction that compares its token,
/// so it deletes exactly the leader it read, or nothing. The leader learns of it when its
/// watch or its next renewal does — at about the moment the next instance does, or later — so
/// the two commands can overlap: on etcd and ZooKeeper the old leader SIGKILLs its group when
/// its watch fires (milliseconds), on PostgreSQL at its next renewal (up to a retry period),
/// a frozen leader only when it runs again.
async fn force<B: Store>(backend: &B, leader: &Leader, limit: Duration) -> anyhow::Result<u8> {
    let deleted = crate::election::bounded::bounded(
        backend,
        limit,
        "deleting the leader's key",
        backend.remove_claim(leader),
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
        return Ok(RESIGN_NOT_CURRENT);
    }
    tracing::warn!(
        event = "resigned",
        token = leader.token,
        "claim deleted (--force): the next instance may start before this leader has stopped its command"
    );
    print_line(&format!(
        "resigned leader {} (token {}, key {}): claim deleted (--force)\n",
        escape(&leader.identity),
        leader.token,
        escape(&leader.key)
    ));
    Ok(RESIGNED)
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
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

    #[test]
    fn a_request_is_for_exactly_the_token_it_names() {
        use crate::election::is_request_for;
        assert!(is_request_for(b"42", 42));
        assert!(is_request_for(b"42\n", 42));
        for other in [&b"41"[..], b"420", b"", b"x", b"\xff42"] {
            assert!(!is_request_for(other, 42), "{other:?}");
        }
    }

    #[test]
    fn the_default_bound_covers_the_leaders_kill_after_and_retry_periods() {
        assert_eq!(
            handover_bound(DEFAULT_KILL_AFTER, DEFAULT_RETRY_PERIOD),
            Duration::from_secs(13)
        );
        assert_eq!(
            handover_bound(Duration::from_secs(60), Duration::from_millis(500)),
            Duration::from_secs(66)
        );
    }
}
