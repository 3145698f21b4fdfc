//! The read-only subcommands: `status`, `watch` and `check`.
//!
//! They read the same keys the run form writes, at one revision of the store, and never create
//! anything.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::election::Backoff;
use crate::election::{self, Leader, Observation, Reach, StartError, Store, StoreError};
use crate::escape::{escape, escape_str};
use crate::exit::Failure;
use crate::occurrence::{self, Record};
use crate::settings::Scope;
use crate::signals::{self, Signals};

/// `status` exit codes.
pub const STATUS_LEADER: u8 = 0;
pub const STATUS_NO_LEADER: u8 = 3;
/// `check` exit codes.
pub const CHECK_CURRENT: u8 = 0;
pub const CHECK_STALE: u8 = 1;

/// Bounds one request by the connect timeout: these commands run from scripts and must not hang.
/// A timeout names the store and the endpoint, as at first contact.
pub(crate) async fn bounded<B: Store, T>(
    backend: &B,
    limit: Duration,
    what: &str,
    request: impl Future<Output = Result<T, StoreError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Failure::usage(format!("{what}: {e}")).into()),
        Err(_) => Err(Failure::usage(format!(
            "{what}: {}",
            Reach::of(backend).no_answer(limit, None)
        ))
        .into()),
    }
}

/// Reads once, retrying transient errors within `limit`.
pub(crate) async fn observe_once<B: Store>(
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

fn leader_json(leader: &Leader) -> Value {
    // JSON strings escape every control character; bytes that are not UTF-8 become U+FFFD.
    json!({
        "identity": String::from_utf8_lossy(&leader.identity),
        "token": leader.token,
        "key": String::from_utf8_lossy(&leader.key),
        "lease_id": leader.lease_id.map(|id| format!("{id:x}")),
    })
}

/// How many occurrences `status` shows as text (JSON has them all).
const OCCURRENCES_SHOWN: usize = 10;

/// `leader-exec status`.
///
/// JSON fields (stable): `lease`, `leader` (null, or an object with `identity`, `token`, `key`,
/// `lease_id`, `ttl_remaining_seconds`, `ttl_granted_seconds`, `since`, `command` (`running`,
/// `holding` or null), `hold_until`), `candidates`, `occurrences`
/// (newest first: `id`, `state`, `token`, `identity`, `started_at`, and when present
/// `finished_at`, `exit_code`, `previous_token`; a value that is not a record is listed first as
/// `{"id": …, "state": "unreadable"}`).
pub async fn status<B: Store>(
    backend: &B,
    scope: &Scope,
    json: bool,
    limit: Duration,
) -> anyhow::Result<u8> {
    let observation = observe_once(backend, limit).await?;
    let lease_time = match &observation.leader {
        Some(leader) => {
            bounded(
                backend,
                limit,
                "reading the lease",
                backend.lease_time(leader),
            )
            .await?
        }
        None => None,
    };
    let state = match &observation.leader {
        Some(leader) => crate::leadership::read(backend, scope, leader.token, limit).await?,
        None => None,
    };
    let records = bounded(
        backend,
        limit,
        "reading occurrences",
        backend.list_records(&occurrence::records_prefix(scope)),
    )
    .await?;
    // A value that is not a record (written by something else, or damaged) is shown as
    // unreadable rather than hidden: a run with that occurrence ID refuses to start (125).
    let mut occurrences: Vec<(Vec<u8>, Record)> = Vec::new();
    let mut unreadable: Vec<Vec<u8>> = Vec::new();
    for (id, value) in records {
        match Record::from_json(&value) {
            Some(record) => occurrences.push((id, record)),
            None => unreadable.push(id),
        }
    }
    // RFC 3339 in UTC sorts as text.
    occurrences.sort_by(|a, b| b.1.started_at.cmp(&a.1.started_at));
    let mut out = String::new();
    if json {
        let leader = observation.leader.as_ref().map(|leader| {
            let mut object = leader_json(leader);
            object["ttl_remaining_seconds"] = json!(lease_time.map(|t| t.remaining.as_secs()));
            object["ttl_granted_seconds"] = json!(lease_time.map(|t| t.granted.as_secs()));
            object["since"] = json!(state.as_ref().map(|s| &s.since));
            object["command"] = json!(state.as_ref().map(|s| s.command));
            object["hold_until"] = json!(state.as_ref().and_then(|s| s.hold_until.as_ref()));
            object
        });
        let occurrences: Vec<Value> = unreadable
            .iter()
            .map(|id| json!({"id": String::from_utf8_lossy(id), "state": "unreadable"}))
            .chain(occurrences.iter().map(|(id, record)| {
                let mut object = serde_json::to_value(record).expect("records serialize");
                object["id"] = json!(String::from_utf8_lossy(id));
                object
            }))
            .collect();
        let object = json!({
            "lease": scope.lease,
            "leader": leader,
            "candidates": observation.candidates,
            "occurrences": occurrences,
        });
        writeln!(out, "{object}")?;
    } else {
        // Everything read from etcd is escaped: it may hold terminal control sequences.
        writeln!(out, "lease:       {}", escape_str(&scope.lease))?;
        match &observation.leader {
            Some(leader) => {
                writeln!(out, "leader:      {}", escape(&leader.identity))?;
                writeln!(out, "token:       {}", leader.token)?;
                writeln!(out, "key:         {}", escape(&leader.key))?;
                if let Some(lease_id) = leader.lease_id {
                    writeln!(out, "lease id:    {lease_id:x}")?;
                }
                if let Some(time) = lease_time {
                    // How stale this view may be: a leader that died without releasing stays
                    // listed until its lease runs out, and an etcd restart starts that over.
                    if backend.restart_resets_leases() {
                        writeln!(
                            out,
                            "ttl left:    {}s of {}s (a leader gone without releasing stays listed until then; an etcd restart resets it to {}s)",
                            time.remaining.as_secs(),
                            time.granted.as_secs(),
                            time.granted.as_secs()
                        )?;
                    } else {
                        writeln!(
                            out,
                            "ttl left:    {}s of {}s (a leader gone without releasing stays listed until then)",
                            time.remaining.as_secs(),
                            time.granted.as_secs()
                        )?;
                    }
                }
                let (since, command) = crate::leadership::describe(state.as_ref());
                writeln!(out, "since:       {since}")?;
                writeln!(out, "command:     {command}")?;
            }
            None => writeln!(out, "leader:      none")?,
        }
        writeln!(out, "candidates:  {}", observation.candidates)?;
        if !occurrences.is_empty() || !unreadable.is_empty() {
            writeln!(out, "occurrences:")?;
            // Unreadable records first: they are what needs a human.
            for id in &unreadable {
                writeln!(
                    out,
                    "  {}  unreadable  (the value under this key is not an occurrence record)",
                    escape(id)
                )?;
            }
            for (id, record) in occurrences.iter().take(OCCURRENCES_SHOWN) {
                let state = serde_json::to_value(record.state).expect("states serialize");
                let state = state.as_str().unwrap_or("?");
                let outcome = match (record.finished_at.as_deref(), record.exit_code) {
                    (Some(at), Some(code)) => format!(" finished {} exit {code}", escape_str(at)),
                    _ => String::new(),
                };
                writeln!(
                    out,
                    "  {}  {state:<7}  token {}  {}  started {}{outcome}",
                    escape(id),
                    record.token,
                    escape_str(&record.identity),
                    escape_str(&record.started_at)
                )?;
            }
            if occurrences.len() > OCCURRENCES_SHOWN {
                writeln!(
                    out,
                    "  ({} older; see --json)",
                    occurrences.len() - OCCURRENCES_SHOWN
                )?;
            }
        }
    }
    print(&out);
    Ok(if observation.leader.is_some() {
        STATUS_LEADER
    } else {
        STATUS_NO_LEADER
    })
}

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
    let observation = observe_once(backend, limit).await?;
    match observation.leader {
        Some(leader) if leader.token == token => Ok(CHECK_CURRENT),
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

/// `leader-exec watch`: one line per leadership change until INT or TERM.
pub async fn watch<B: Store>(
    backend: &B,
    scope: &Scope,
    json: bool,
    limit: Duration,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    // The first read is bounded like every command's first contact; later outages are waited out.
    let mut observation = observe_once(backend, limit).await?;
    let mut shown: Option<Option<Leader>> = None;
    let mut backoff = Backoff::new();
    loop {
        if shown.as_ref() != Some(&observation.leader) {
            if let Err(e) = print_change(scope, observation.leader.as_ref(), json) {
                // Nobody reads any more (`watch | head -1`): done.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(0);
                }
                return Err(e.into());
            }
            shown = Some(observation.leader.clone());
        }
        let next = async {
            loop {
                if let Err(e) = backend.changed_since(&observation).await {
                    tracing::debug!(error = %e, "watch interrupted; reading again");
                    backoff.sleep().await;
                }
                match backend.read_election().await {
                    Ok(next) => return next,
                    Err(e) => {
                        tracing::debug!(error = %e, "reading the election failed; retrying");
                        backoff.sleep().await;
                    }
                }
            }
        };
        tokio::select! {
            next = next => observation = next,
            signal = signals.recv() => {
                if signals::stops_the_child(signal) {
                    return Ok(0);
                }
            }
        }
    }
}

/// Writes to stdout; a reader that went away (`status | head -1`) is not an error.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn print_change(scope: &Scope, leader: Option<&Leader>, json: bool) -> std::io::Result<()> {
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let mut out = std::io::stdout().lock();
    if json {
        let object = json!({
            "time": time,
            "lease": scope.lease,
            "leader": leader.map(leader_json),
        });
        writeln!(out, "{object}")?;
    } else {
        match leader {
            Some(leader) => writeln!(
                out,
                "{time} leader {} token {} key {}",
                escape(&leader.identity),
                leader.token,
                escape(&leader.key)
            )?,
            None => writeln!(out, "{time} no leader")?,
        }
    }
    out.flush()
}
