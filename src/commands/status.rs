//! `leader-exec status`: the leader, the candidates and the occurrences of one lease, read at one
//! revision of the store; creates nothing.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::{leader_json, print, read_settled};
use crate::election::Scope;
use crate::election::bounded::bounded;
use crate::election::{Leader, Store};
use crate::escape::{escape, escape_str};
use crate::exit::{STATUS_LEADER, STATUS_NO_LEADER};
use crate::records::occurrence::{self, Record};
use crate::records::published::{Command, State};

/// How many occurrences `status` shows as text (JSON has them all).
const OCCURRENCES_SHOWN: usize = 10;

/// A holder in JSON: what `leader_json` shows, with what it recorded about itself, as `leader`
/// has it (`since`, `command`, `hold_until`: null where it recorded nothing).
fn holder_json(holder: &Leader, state: Option<&State>) -> Value {
    let mut object = leader_json(holder);
    object["since"] = json!(state.map(|s| &s.since));
    object["command"] = command_json(state);
    object["hold_until"] = json!(state.and_then(|s| s.hold_until.as_ref()));
    object["held_for_seconds"] = held_json(state);
    object["health"] = health_json(state);
    object
}

/// A holder's `command` in JSON: `running`, `holding` (`--hold-at-least`), `held` (a slot
/// `leader-exec hold` took, no process behind it), or null where it recorded nothing.
pub(crate) fn command_json(state: Option<&State>) -> Value {
    match state {
        Some(s) if s.held_for_ms.is_some() => json!("held"),
        state => json!(state.map(|s| s.command)),
    }
}

/// A held slot's `--for` in seconds (its bound; `hold_until` says when it runs out on the
/// holder's clock); null for every other holder.
pub(crate) fn held_json(state: Option<&State>) -> Value {
    json!(state.and_then(|s| s.held_for_ms).map(|ms| ms / 1000))
}

/// A holder's `health` in JSON: null without `--health-cmd` (or no record), else `healthy`,
/// `failures` (checks failed in a row) and `retries` (`--health-retries`).
pub(crate) fn health_json(state: Option<&State>) -> Value {
    json!(state.and_then(|s| s.health))
}

/// What a holder's text line adds from its record: `  since T  running` (or `holding until
/// T`); nothing where it recorded none.
fn holder_detail(state: Option<&State>) -> String {
    let Some(state) = state else {
        return String::new();
    };
    let command = match (state.command, &state.hold_until) {
        (Command::Holding, Some(until)) if state.held_for_ms.is_some() => format!(
            "held (no process) until release or its bound ({}, not before {})",
            crate::records::published::held_for(state),
            escape_str(until)
        ),
        (Command::Running, _) => "running".to_owned(),
        (Command::Holding, Some(until)) => format!("holding until {}", escape_str(until)),
        (Command::Holding, None) => "holding".to_owned(),
    };
    let health = match &state.health {
        Some(health) => format!("  {}", health.describe()),
        None => String::new(),
    };
    format!("  since {}  {command}{health}", escape_str(&state.since))
}

/// `leader-exec status`.
///
/// JSON fields (stable): `lease`, `leader` (null, or an object with `identity`, `token`, `key`,
/// `lease_id`, `ttl_remaining_seconds`, `ttl_granted_seconds`, `since`, `command` (`running`,
/// `holding` or null), `hold_until`, `health` (null without `--health-cmd`, else `healthy`,
/// `failures`, `retries`); the oldest holder), `max_holders`, `holders` (every holder, oldest
/// first: objects with `identity`, `token`, `key`, `lease_id`, `since`, `command`,
/// `hold_until`, `health`), `candidates`, `occurrences`
/// (newest first: `id`, `state`, `token`, `identity`, `started_at`, and when present
/// `finished_at`, `exit_code`, `previous_token`; a value that is not a record is listed first as
/// `{"id": …, "state": "unreadable"}`).
pub async fn status<B: Store>(
    backend: &B,
    scope: &Scope,
    json: bool,
    limit: Duration,
) -> anyhow::Result<u8> {
    let observation = read_settled(backend, limit).await?;
    let lease_time = match observation.leader() {
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
    // Each holder's own record (with --max-holders 1 the leader's alone, read as before).
    let states = crate::records::published::read_each(
        backend,
        scope,
        observation.max_holders,
        &observation.holders,
        limit,
    )
    .await?;
    let state = states.first().cloned().flatten();
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
        let leader = observation.leader().map(|leader| {
            let mut object = leader_json(leader);
            object["ttl_remaining_seconds"] = json!(lease_time.map(|t| t.remaining.as_secs()));
            object["ttl_granted_seconds"] = json!(lease_time.map(|t| t.granted.as_secs()));
            object["since"] = json!(state.as_ref().map(|s| &s.since));
            object["command"] = command_json(state.as_ref());
            object["hold_until"] = json!(state.as_ref().and_then(|s| s.hold_until.as_ref()));
            object["held_for_seconds"] = held_json(state.as_ref());
            object["health"] = health_json(state.as_ref());
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
        let holders: Vec<Value> = observation
            .holders
            .iter()
            .zip(&states)
            .map(|(holder, state)| holder_json(holder, state.as_ref()))
            .collect();
        let object = json!({
            "lease": scope.lease,
            "leader": leader,
            "max_holders": observation.max_holders,
            "holders": holders,
            "candidates": observation.candidates,
            "occurrences": occurrences,
        });
        writeln!(out, "{object}")?;
    } else {
        // Everything read from the store is escaped: it may hold terminal control sequences.
        writeln!(out, "lease:       {}", escape_str(&scope.lease))?;
        match observation.leader() {
            Some(leader) => {
                writeln!(out, "leader:      {}", escape(&leader.identity))?;
                writeln!(out, "token:       {}", leader.token)?;
                writeln!(out, "key:         {}", escape(&leader.key))?;
                if let Some(lease_id) = leader.lease_id {
                    writeln!(out, "lease id:    {lease_id:x}")?;
                }
                if let Some(time) = lease_time {
                    // How stale this view may be: a leader that died without releasing stays
                    // listed until its lease runs out, and on some stores a restart starts that
                    // over.
                    if backend.restart_resets_leases() {
                        writeln!(
                            out,
                            "ttl left:    {}s of {}s (a leader gone without releasing stays listed until then; a restart of {} resets it to {}s)",
                            time.remaining.as_secs(),
                            time.granted.as_secs(),
                            backend.store_name(),
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
                let (since, command) = crate::records::published::describe(state.as_ref());
                writeln!(out, "since:       {since}")?;
                writeln!(out, "command:     {command}")?;
                // Only with --health-cmd (as the leader last recorded it).
                if let Some(health) = state.as_ref().and_then(|s| s.health) {
                    writeln!(out, "health:      {}", health.describe())?;
                }
            }
            None => writeln!(out, "leader:      none")?,
        }
        // With --max-holders above 1: every holder, a line each, oldest (the leader above) first.
        if observation.max_holders > 1 {
            writeln!(
                out,
                "holders:     {} of {}",
                observation.holders.len(),
                observation.max_holders
            )?;
            for (holder, state) in observation.holders.iter().zip(&states) {
                writeln!(
                    out,
                    "  token {}  {}  {}{}",
                    holder.token,
                    escape(&holder.identity),
                    escape(&holder.key),
                    holder_detail(state.as_ref())
                )?;
            }
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
    Ok(if observation.leader().is_some() {
        STATUS_LEADER
    } else {
        STATUS_NO_LEADER
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn each_holder_shows_what_it_recorded() {
        let holder = Leader {
            key: b"/leader-exec/reboot/1f".to_vec(),
            identity: b"h:1".to_vec(),
            token: 31,
            lease_id: Some(0x1f),
            provisional: false,
        };
        let candidacy = crate::election::Candidacy {
            lease_id: Some(0x1f),
            key: "/leader-exec/reboot/1f".into(),
            place: 31,
            token: 31,
        };
        let mut state = State::new(&candidacy, "h:1", SystemTime::UNIX_EPOCH, Command::Running);
        assert_eq!(holder_detail(None), "");
        assert_eq!(
            holder_detail(Some(&state)),
            "  since 1970-01-01T00:00:00.000Z  running"
        );
        let object = holder_json(&holder, Some(&state));
        assert_eq!(object["token"], 31);
        assert_eq!(object["since"], "1970-01-01T00:00:00.000Z");
        assert_eq!(object["command"], "running");
        assert!(object["hold_until"].is_null());
        state.command = Command::Holding;
        state.hold_until = Some("1970-01-01T00:10:00.000Z\u{1b}".into());
        assert_eq!(
            holder_detail(Some(&state)),
            "  since 1970-01-01T00:00:00.000Z  holding until 1970-01-01T00:10:00.000Z\\x1b"
        );
        assert!(object["health"].is_null());
        state.health = Some(crate::records::published::Health {
            healthy: true,
            failures: 1,
            retries: 3,
        });
        assert!(
            holder_detail(Some(&state)).ends_with("  failing (1 of --health-retries 3 in a row)")
        );
        let object = holder_json(&holder, Some(&state));
        assert_eq!(object["health"]["healthy"], true);
        assert_eq!(object["health"]["failures"], 1);
        assert_eq!(object["health"]["retries"], 3);
        let object = holder_json(&holder, None);
        assert!(object["since"].is_null() && object["command"].is_null());
        assert!(object["health"].is_null());
        assert_eq!(object["identity"], "h:1");
    }
}
