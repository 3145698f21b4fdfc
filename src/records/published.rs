//! What `status` shows beyond the election key: since when the leader leads, and whether its
//! command is running or it only holds the lease (`--hold-at-least`).
//!
//! The claim itself holds the identity alone (on etcd other tools read it: `etcdctl elect` and
//! Go's `concurrency.Election`), so this lives in a record of its own, `PREFIX .leaders/NAME`,
//! outside every election's key range (lease names cannot start with `.`). The leader writes it
//! for as long as its own claim lives, fenced by that claim
//! ([`crate::election::Records::put_on_lease_fenced`]): it goes when the claim goes, and a
//! deposed leader cannot overwrite its successor's. It is
//! written once the command has started, never before it (the handover path ends at the
//! start: the record costs it nothing), again
//! when a hold begins, and with `--health-cmd` again whenever the verdict changes ([`Health`];
//! one write at a time, each an arm of the leading or holding loop that nothing waits for). A
//! write that fails is only logged at debug level: `status` then says the detail is unknown.
//! `status` shows it only when its token is the current leader's. Fields added later are
//! optional and skipped when empty, and readers ignore fields they do not know, so versions
//! read each other's records.
//!
//! With `--max-holders` N > 1 every holder writes its own record, `PREFIX .leaders/NAME/TOKEN`
//! ([`holder_key`]): the token in the key keeps holders from overwriting each other (no two
//! holders of one name ever share a token), and each is fenced by its own claim as above. A
//! reader learns N from the store (`Observation::max_holders`; instances that disagree on N are
//! refused before they hold), so it reads exactly the keys of the current holders' tokens and a
//! record left by an earlier holder is never shown for a current one. With N = 1 the key stays
//! `PREFIX .leaders/NAME`, as earlier versions wrote it. Requests from `resign` follow the same
//! rule ([`holder_handover_key`]).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::election::Scope;
use crate::election::{Backoff, Candidacy, Store};

pub fn key(scope: &Scope) -> String {
    format!("{}.leaders/{}", scope.prefix, scope.lease)
}

/// Where the holder with `token` records its state: [`key`] with `--max-holders` 1, else
/// `PREFIX .leaders/NAME/TOKEN`.
pub fn holder_key(scope: &Scope, max_holders: u32, token: i64) -> String {
    if max_holders > 1 {
        format!("{}/{token}", key(scope))
    } else {
        key(scope)
    }
}

/// Where `resign` asks the holder with `token` to hand over: [`handover_key`] with
/// `--max-holders` 1, else `PREFIX .resign/NAME/TOKEN`, so that requests to two holders never
/// overwrite each other (the value still names the token, as with one leader).
pub fn holder_handover_key(scope: &Scope, max_holders: u32, token: i64) -> String {
    if max_holders > 1 {
        format!("{}/{token}", handover_key(scope))
    } else {
        handover_key(scope)
    }
}

/// Where `resign` asks the leader to hand over: `PREFIX .resign/NAME`, outside every election's
/// key range like [`key`], so that no tool reading the election takes a request for a candidate.
pub fn handover_key(scope: &Scope) -> String {
    format!("{}.resign/{}", scope.prefix, scope.lease)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    /// The command was started and has not ended.
    Running,
    /// The command ended; the lease is held until `hold_until` (`--hold-at-least`).
    Holding,
}

/// The value under [`key`] (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub token: i64,
    pub identity: String,
    /// When this leader was elected (RFC 3339, UTC, the leader's clock).
    pub since: String,
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<String>,
    /// The leader's `--kill-after` and `--retry-period` in milliseconds: how long a handover
    /// (`resign`) may take it, which `resign` waits for by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period_ms: Option<u64>,
    /// The holder's `--health-cmd` verdict when this was written; absent without a check (and
    /// in records of earlier versions, which ignore it when they read a newer one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// A held slot (`leader-exec hold --for DUR`): DUR in milliseconds. Such a record has
    /// `command` = `holding` and `hold_until` = when DUR runs out on the holder's clock (shown
    /// only), so that earlier versions show it as a lease held with no command. Absent for
    /// every other holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for_ms: Option<u64>,
}

/// A holder's health as it records it (`--health-cmd`): rewritten whenever the verdict or the
/// count of checks failed in a row changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Healthy: a check passed, and fewer than `retries` have failed in a row since.
    pub healthy: bool,
    /// Checks failed in a row.
    pub failures: u32,
    /// `--health-retries`: this many failures in a row hand over.
    pub retries: u32,
}

impl Health {
    /// As `watch` shows it: `healthy`, `failing 1 of 3`, `unhealthy`.
    pub fn short(&self) -> String {
        match (self.healthy, self.failures) {
            (true, 0) => "healthy".to_owned(),
            (true, n) => format!("failing {n} of {}", self.retries),
            (false, _) => "unhealthy".to_owned(),
        }
    }

    /// As `status` shows it: `healthy`, `failing (1 of 3 in a row)`, `unhealthy (…)`.
    pub fn describe(&self) -> String {
        match (self.healthy, self.failures) {
            (true, 0) => "healthy".to_owned(),
            (true, n) => format!(
                "failing ({n} of --health-retries {} in a row)",
                self.retries
            ),
            (false, n) => format!("unhealthy ({n} checks failed in a row); handing over"),
        }
    }
}

impl State {
    pub fn new(candidacy: &Candidacy, identity: &str, since: SystemTime, command: Command) -> Self {
        State {
            token: candidacy.token,
            identity: identity.to_owned(),
            since: rfc3339(since),
            command,
            hold_until: None,
            kill_after_ms: None,
            retry_period_ms: None,
            health: None,
            held_for_ms: None,
        }
    }

    /// With the holder's health (`None` without `--health-cmd`).
    pub fn with_health(mut self, health: Option<Health>) -> Self {
        self.health = health;
        self
    }

    /// With the timing a handover takes this leader (see `kill_after_ms`).
    pub fn with_timing(mut self, kill_after: Duration, retry_period: Duration) -> Self {
        self.kill_after_ms = u64::try_from(kill_after.as_millis()).ok();
        self.retry_period_ms = u64::try_from(retry_period.as_millis()).ok();
        self
    }

    pub fn from_json(bytes: &[u8]) -> Option<State> {
        serde_json::from_slice(bytes).ok()
    }
}

pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Writes `state` on the candidacy's lease, fenced; retried for up to `limit`, then given up
/// (only `status` loses detail). Completes when done either way.
pub async fn write<B: Store>(
    backend: &B,
    candidacy: &Candidacy,
    key: &str,
    state: State,
    limit: Duration,
) {
    let value = serde_json::to_vec(&state).expect("states serialize");
    let attempt = async {
        let mut backoff = Backoff::new();
        loop {
            match backend
                .put_on_lease_fenced(candidacy, key, value.clone())
                .await
            {
                Ok(true) => return,
                Ok(false) => {
                    tracing::debug!("not recording the leader's state: no longer leading");
                    return;
                }
                Err(e) if e.is_transient() => backoff.sleep().await,
                Err(e) => {
                    tracing::debug!(error = %e, "recording the leader's state failed");
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(limit, attempt).await.is_err() {
        tracing::debug!("recording the leader's state took too long; given up");
    }
}

/// A current holder's state (with `--max-holders` 1: the leader's), if it recorded one for
/// `token`. `max_holders` is what the store says the election uses.
pub async fn read<B: Store>(
    backend: &B,
    scope: &Scope,
    max_holders: u32,
    token: i64,
    limit: Duration,
) -> anyhow::Result<Option<State>> {
    let value = crate::election::bounded::bounded(
        backend,
        limit,
        "reading the leader's state",
        backend.read_record(&holder_key(scope, max_holders, token)),
    )
    .await?;
    Ok(value
        .and_then(|bytes| State::from_json(&bytes))
        .filter(|state| state.token == token))
}

/// Every current holder's state, in the order of `holders` (`None` where a holder recorded
/// none). One read per holder: `status` and `status --all` show each holder's since/command.
pub async fn read_each<B: Store>(
    backend: &B,
    scope: &Scope,
    max_holders: u32,
    holders: &[crate::election::Leader],
    limit: Duration,
) -> anyhow::Result<Vec<Option<State>>> {
    let mut states = Vec::with_capacity(holders.len());
    for holder in holders {
        states.push(read(backend, scope, max_holders, holder.token, limit).await?);
    }
    Ok(states)
}

/// A held slot's bound (`--for`) as text (`1h`); empty for any other holder.
pub fn held_for(state: &State) -> String {
    state.held_for_ms.map_or_else(String::new, |ms| {
        humantime::format_duration(Duration::from_millis(ms)).to_string()
    })
}

/// The text `status` shows on its `since:` and `command:` lines.
pub fn describe(state: Option<&State>) -> (String, String) {
    use crate::escape::escape_str;
    let Some(state) = state else {
        let unknown = "unknown (not recorded yet, or by an older leader-exec)".to_owned();
        return (unknown.clone(), unknown);
    };
    let since = match age(&state.since) {
        Some(age) => format!("{} ({age} ago)", escape_str(&state.since)),
        None => escape_str(&state.since),
    };
    let command = match (state.command, &state.hold_until) {
        (Command::Holding, Some(until)) if state.held_for_ms.is_some() => format!(
            "none; a slot held by `leader-exec hold` until `release` or its bound (--for {}, not before {})",
            held_for(state),
            escape_str(until)
        ),
        (Command::Running, _) => "running".to_owned(),
        (Command::Holding, Some(until)) => format!(
            "ended; holding the lease until {} (--hold-at-least)",
            escape_str(until)
        ),
        (Command::Holding, None) => "ended; holding the lease (--hold-at-least)".to_owned(),
    };
    (since, command)
}

/// "3m 12s" since `since` (RFC 3339), to the second; `None` when it cannot be read or lies in
/// the future (clocks of different hosts).
pub fn age(since: &str) -> Option<String> {
    let since = humantime::parse_rfc3339(since).ok()?;
    let age = SystemTime::now().duration_since(since).ok()?;
    Some(humantime::format_duration(Duration::from_secs(age.as_secs())).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_as_json() {
        let candidacy = Candidacy {
            lease_id: Some(0x1f),
            key: "/leader-exec/x/1f".into(),
            place: 42,
            token: 42,
        };
        let mut state = State::new(&candidacy, "h:1", SystemTime::UNIX_EPOCH, Command::Running);
        let text = String::from_utf8(serde_json::to_vec(&state).unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"token":42,"identity":"h:1","since":"1970-01-01T00:00:00.000Z","command":"running"}"#
        );
        state.command = Command::Holding;
        state.hold_until = Some("1970-01-01T00:10:00.000Z".into());
        let back = State::from_json(&serde_json::to_vec(&state).unwrap()).unwrap();
        assert_eq!(back, state);
        state.health = Some(Health {
            healthy: true,
            failures: 1,
            retries: 3,
        });
        let text = String::from_utf8(serde_json::to_vec(&state).unwrap()).unwrap();
        assert!(text.ends_with(r#""health":{"healthy":true,"failures":1,"retries":3}}"#));
        assert_eq!(State::from_json(text.as_bytes()).unwrap(), state);
        // A record of an earlier version has no `health`; one of a later version may carry
        // fields this one does not know.
        let older =
            State::from_json(br#"{"token":42,"identity":"h:1","since":"x","command":"running"}"#);
        assert_eq!(older.unwrap().health, None);
        let newer = br#"{"token":42,"identity":"h:1","since":"x","command":"running","later":1}"#;
        assert!(State::from_json(newer).is_some());
        assert!(age("1970-01-01T00:00:00Z").is_some());
        assert_eq!(age("not a time"), None);
    }

    #[test]
    fn one_holder_keeps_the_keys_and_several_get_one_each() {
        let scope = Scope {
            lease: "backup".into(),
            prefix: "/leader-exec/".into(),
        };
        assert_eq!(holder_key(&scope, 1, 7), "/leader-exec/.leaders/backup");
        assert_eq!(holder_key(&scope, 1, 7), key(&scope));
        assert_eq!(holder_key(&scope, 2, 7), "/leader-exec/.leaders/backup/7");
        assert_eq!(
            holder_handover_key(&scope, 1, 7),
            "/leader-exec/.resign/backup"
        );
        assert_eq!(holder_handover_key(&scope, 1, 7), handover_key(&scope));
        assert_eq!(
            holder_handover_key(&scope, 1000, 12),
            "/leader-exec/.resign/backup/12"
        );
    }
}
