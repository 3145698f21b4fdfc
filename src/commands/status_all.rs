//! `leader-exec status --all`: every lease under the prefix, one line each, sorted by name —
//! the fleet overview. Read-only, like `status`.
//!
//! Everything shown comes from the store, where any client with access to the prefix can write:
//! text output escapes it (`crate::escape`), JSON output is escaped by JSON itself.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::election::bounded::bounded;
use crate::election::{Election, LeaseTime, Store};
use crate::escape::{escape, escape_str};
use crate::records::occurrence::{Record, State};

/// A lease as `status --all` shows it.
struct Row {
    election: Election,
    time: Option<LeaseTime>,
    /// What each holder recorded about itself (`since`, `command`, `hold_until`, `health`), as in
    /// `status`, in the order of `election.holders` (the first is the leader's).
    states: Vec<Option<crate::records::published::State>>,
    /// Occurrence records under this lease name.
    occurrences: usize,
    /// Records `started` by a token that is not the current leader's: started, never finished.
    unfinished: Vec<(Vec<u8>, Record)>,
    /// Values under the records prefix that are not records.
    unreadable: Vec<Vec<u8>>,
}

/// `status --all [--json]` under `prefix`. Exit 0 once read (whatever it found), 125 on error.
pub async fn status_all<B: Store>(
    backend: &B,
    prefix: &str,
    json: bool,
    limit: Duration,
) -> anyhow::Result<u8> {
    let elections = crate::commands::first_contact(backend, limit, "reading the elections", || {
        backend.list_elections(prefix)
    })
    .await?;
    let records_prefix = format!("{prefix}.occurrences/");
    let records = bounded(
        backend,
        limit,
        "reading occurrences",
        backend.list_records(&records_prefix),
    )
    .await?;
    let mut rows: Vec<Row> = Vec::new();
    for election in elections {
        let time = match election.leader() {
            Some(leader) => {
                bounded(
                    backend,
                    limit,
                    "reading a lease",
                    backend.lease_time(leader),
                )
                .await?
            }
            None => None,
        };
        // A name that is not UTF-8 was not written by leader-exec, which records no state for it.
        let states = match std::str::from_utf8(&election.name) {
            Ok(name) => {
                let scope = crate::election::Scope {
                    lease: name.to_owned(),
                    prefix: prefix.to_owned(),
                };
                crate::records::published::read_each(
                    backend,
                    &scope,
                    election.max_holders,
                    &election.holders,
                    limit,
                )
                .await?
            }
            Err(_) => vec![None; election.holders.len()],
        };
        rows.push(Row {
            election,
            time,
            states,
            occurrences: 0,
            unfinished: Vec::new(),
            unreadable: Vec::new(),
        });
    }
    // Records are `NAME/ID`; a lease with records but no candidate is listed too.
    for (key, value) in records {
        let Some(slash) = key.iter().position(|&b| b == b'/') else {
            continue;
        };
        let (name, id) = (&key[..slash], key[slash + 1..].to_vec());
        let index = match rows.iter().position(|r| r.election.name == name) {
            Some(index) => index,
            None => {
                rows.push(Row {
                    election: Election {
                        name: name.to_vec(),
                        holders: Vec::new(),
                        max_holders: 1,
                        candidates: 0,
                    },
                    time: None,
                    states: Vec::new(),
                    occurrences: 0,
                    unfinished: Vec::new(),
                    unreadable: Vec::new(),
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[index];
        row.occurrences += 1;
        match Record::from_json(&value) {
            Some(record) => {
                // Occurrences run with --max-holders 1 only; any holder's token is running.
                let running = row.election.holders.iter().any(|h| h.token == record.token);
                if record.state == State::Started && !running {
                    row.unfinished.push((id, record));
                }
            }
            None => row.unreadable.push(id),
        }
    }
    rows.sort_by(|a, b| a.election.name.cmp(&b.election.name));
    let out = if json {
        render_json(prefix, &rows)
    } else {
        render_text(&rows)
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush());
    Ok(0)
}

fn render_json(prefix: &str, rows: &[Row]) -> String {
    let leases: Vec<Value> = rows
        .iter()
        .map(|row| {
            let state = row.states.first().and_then(Option::as_ref);
            let leader = row.election.leader().map(|leader| {
                json!({
                    "identity": String::from_utf8_lossy(&leader.identity),
                    "token": leader.token,
                    "key": String::from_utf8_lossy(&leader.key),
                    "lease_id": leader.lease_id.map(|id| format!("{id:x}")),
                    "ttl_remaining_seconds": row.time.map(|t| t.remaining.as_secs()),
                    "ttl_granted_seconds": row.time.map(|t| t.granted.as_secs()),
                    "since": state.map(|s| &s.since),
                    "command": crate::commands::status::command_json(state),
                    "hold_until": state.and_then(|s| s.hold_until.as_ref()),
                    "held_for_seconds": crate::commands::status::held_json(state),
                    "health": state.and_then(|s| s.health),
                })
            });
            let unfinished: Vec<Value> = row
                .unreadable
                .iter()
                .map(|id| json!({"id": String::from_utf8_lossy(id), "state": "unreadable"}))
                .chain(row.unfinished.iter().map(|(id, record)| {
                    json!({
                        "id": String::from_utf8_lossy(id),
                        "state": "started",
                        "token": record.token,
                        "identity": record.identity,
                        "started_at": record.started_at,
                    })
                }))
                .collect();
            let mut object = json!({
                "lease": String::from_utf8_lossy(&row.election.name),
                "leader": leader,
                "candidates": row.election.candidates,
                "occurrences": row.occurrences,
                "unfinished_occurrences": unfinished,
            });
            // With --max-holders above 1: N and every holder, oldest first (with 1, unchanged).
            if row.election.max_holders > 1 {
                let holders: Vec<Value> = row
                    .election
                    .holders
                    .iter()
                    .zip(row.states.iter().chain(std::iter::repeat(&None)))
                    .map(|(holder, state)| {
                        json!({
                            "identity": String::from_utf8_lossy(&holder.identity),
                            "token": holder.token,
                            "key": String::from_utf8_lossy(&holder.key),
                            "lease_id": holder.lease_id.map(|id| format!("{id:x}")),
                            "since": state.as_ref().map(|s| &s.since),
                            "command": crate::commands::status::command_json(state.as_ref()),
                            "hold_until": state.as_ref().and_then(|s| s.hold_until.as_ref()),
                            "held_for_seconds": crate::commands::status::held_json(state.as_ref()),
                            "health": state.as_ref().and_then(|s| s.health),
                        })
                    })
                    .collect();
                object["max_holders"] = json!(row.election.max_holders);
                object["holders"] = json!(holders);
            }
            object
        })
        .collect();
    format!("{}\n", json!({"prefix": prefix, "leases": leases}))
}

fn render_text(rows: &[Row]) -> String {
    let header = [
        "LEASE",
        "LEADER",
        "TOKEN",
        "TTL",
        "CANDIDATES",
        "UNFINISHED",
    ];
    let table: Vec<[String; 6]> = rows
        .iter()
        .map(|row| {
            let (leader, token, ttl) = match row.election.leader() {
                Some(leader) => (
                    // A slot `hold` took, no process behind it.
                    match row.states.first().and_then(Option::as_ref) {
                        Some(state) if state.held_for_ms.is_some() => {
                            format!("{} (held)", escape(&leader.identity))
                        }
                        _ => escape(&leader.identity),
                    },
                    leader.token.to_string(),
                    row.time
                        .map_or_else(|| "-".to_owned(), |t| format!("{}s", t.remaining.as_secs())),
                ),
                None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
            };
            let stuck = row.unfinished.len() + row.unreadable.len();
            [
                escape(&row.election.name),
                leader,
                token,
                ttl,
                row.election.candidates.to_string(),
                if stuck == 0 {
                    "-".to_owned()
                } else {
                    format!("{stuck} !")
                },
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for line in &table {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut write_line = |cells: &[&str]| {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    };
    write_line(&header);
    for (line, row) in table.iter().zip(rows) {
        write_line(&line.each_ref().map(String::as_str));
        // With --max-holders above 1: how many hold of N, and who (the leader column shows
        // the oldest).
        if row.election.max_holders > 1 {
            write_line(&[&holders_line(&row.election, &row.states)]);
        }
        // Unfinished occurrences stand out, one line each, under their lease.
        for id in &row.unreadable {
            write_line(&[&format!(
                "  ! {} unreadable (not an occurrence record)",
                escape(id)
            )]);
        }
        for (id, record) in &row.unfinished {
            write_line(&[&format!(
                "  ! {} unfinished: started by token {} ({}) at {}",
                escape(id),
                record.token,
                escape_str(&record.identity),
                escape_str(&record.started_at)
            )]);
        }
    }
    out
}

/// `  K/N holders: token T IDENTITY, …` (oldest first); a slot `hold` took adds `(held for
/// DUR)`.
fn holders_line(
    election: &Election,
    states: &[Option<crate::records::published::State>],
) -> String {
    let mut line = format!(
        "  {}/{} holders",
        election.holders.len(),
        election.max_holders
    );
    for (i, holder) in election.holders.iter().enumerate() {
        line.push_str(if i == 0 { ": " } else { ", " });
        let _ = write!(line, "token {} {}", holder.token, escape(&holder.identity));
        if let Some(ms) = states
            .get(i)
            .and_then(Option::as_ref)
            .and_then(|s| s.held_for_ms)
        {
            let _ = write!(
                line,
                " (held for {})",
                humantime::format_duration(std::time::Duration::from_millis(ms))
            );
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Leader;

    fn holder(token: i64, identity: &[u8]) -> Leader {
        Leader {
            key: format!("/leader-exec/reboot/{token:x}").into_bytes(),
            identity: identity.to_vec(),
            token,
            lease_id: Some(token),
            provisional: false,
        }
    }

    fn row(holders: Vec<Leader>, max_holders: u32) -> Row {
        Row {
            election: Election {
                name: b"reboot".to_vec(),
                holders,
                max_holders,
                candidates: 3,
            },
            time: None,
            states: Vec::new(),
            occurrences: 0,
            unfinished: Vec::new(),
            unreadable: Vec::new(),
        }
    }

    #[test]
    fn several_holders_add_a_line_and_json_fields_one_holder_adds_nothing() {
        let one = render_text(&[row(vec![holder(5, b"a:1")], 1)]);
        assert_eq!(
            one,
            "LEASE   LEADER  TOKEN  TTL  CANDIDATES  UNFINISHED\n\
             reboot  a:1     5      -    3           -\n"
        );
        let json: Value =
            serde_json::from_str(&render_json("/p/", &[row(vec![holder(5, b"a:1")], 1)])).unwrap();
        assert!(json["leases"][0].get("holders").is_none());
        assert!(json["leases"][0].get("max_holders").is_none());

        let two = row(vec![holder(5, b"a:1"), holder(9, b"b\x1b:2")], 3);
        let text = render_text(std::slice::from_ref(&two));
        assert_eq!(
            text.lines().nth(2),
            Some("  2/3 holders: token 5 a:1, token 9 b\\x1b:2"),
            "{text}"
        );
        let json: Value = serde_json::from_str(&render_json("/p/", &[two])).unwrap();
        let lease = &json["leases"][0];
        assert_eq!(lease["max_holders"], 3);
        assert_eq!(lease["leader"]["token"], 5);
        let tokens: Vec<i64> = lease["holders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["token"].as_i64().unwrap())
            .collect();
        assert_eq!(tokens, [5, 9]);
        assert_eq!(lease["holders"][1]["identity"], "b\u{1b}:2");
        assert!(lease["holders"][1]["since"].is_null());
    }
}
