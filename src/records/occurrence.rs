//! Exactly once per occurrence: records of which leader ran a scheduled occurrence, and how it
//! ended.
//!
//! The same crontab line on many hosts elects one leader at a time, not one run per night: a
//! quick job on a fast host releases the lease before a slow host's cron fires. With
//! `--occurrence ID` the leader records the occurrence in the store before starting the command
//! and its outcome afterwards; a later leader with the same ID reads the record and does not run
//! the job again.
//!
//! Every write is *fenced*: it commits only while the writer's own claim still stands with its
//! token ([`crate::election::Records`]). A leader whose claim ended (frozen, partitioned) cannot
//! mark an occurrence done or started over a newer leader's record.
//!
//! Records live under `PREFIX .occurrences/ NAME / ID`, outside every election prefix (lease names
//! may not start with '.'), each kept for the retention period, after which the store deletes it
//! or readers treat it as absent (each store's own way: docs/etcd.md, docs/postgresql.md,
//! docs/zookeeper.md).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::election::Scope;

/// What to do when the record says an older leader started the occurrence and never finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IfUnfinished {
    /// Run it again; the command gets the old leader's token in LEADER_PREVIOUS_TOKEN.
    Rerun,
    /// Treat it as done: exit 0 without running.
    Skip,
    /// Refuse to run and exit 76, so a human (or an alert) decides.
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Started,
    Done,
    Failed,
}

impl std::fmt::Display for State {
    /// As stored and as `status` shows it: `started`, `done`, `failed`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Started => "started",
            State::Done => "done",
            State::Failed => "failed",
        })
    }
}

/// The value stored under an occurrence key (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub state: State,
    /// The fencing token of the leader that wrote it.
    pub token: i64,
    pub identity: String,
    /// RFC 3339.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// When this run re-ran unfinished work: the token of the leader that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_token: Option<i64>,
}

impl Record {
    pub fn started(token: i64, identity: &str, previous_token: Option<i64>) -> Record {
        Record {
            state: State::Started,
            token,
            identity: identity.to_owned(),
            started_at: now(),
            finished_at: None,
            exit_code: None,
            previous_token,
        }
    }

    /// The same record, finished with `code` (0 is done, anything else failed).
    pub fn finished(&self, code: u8) -> Record {
        Record {
            state: if code == 0 {
                State::Done
            } else {
                State::Failed
            },
            finished_at: Some(now()),
            exit_code: Some(code),
            ..self.clone()
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    pub fn from_json(bytes: &[u8]) -> Option<Record> {
        serde_json::from_slice(bytes).ok()
    }
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// What a new leader does with an occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the command; `previous_token` is set when re-running unfinished work.
    Run { previous_token: Option<i64> },
    /// A leader already finished it successfully: exit 0.
    AlreadyDone(Record),
    /// Unfinished, and `--if-unfinished skip`: exit 0.
    SkipUnfinished(Record),
    /// Unfinished, and `--if-unfinished fail`: exit 125.
    RefuseUnfinished(Record),
    /// The record carries a token not lower than ours although tokens only grow: the store's
    /// revisions went backwards (data loss, or a snapshot restore without a revision bump).
    /// Nothing is run: exit 125 with that explanation.
    TokenWentBackwards(Record),
}

/// Decides from the stored record (if any). `token` is this leader's.
pub fn decide(existing: Option<Record>, policy: IfUnfinished, token: i64) -> Decision {
    let Some(record) = existing else {
        return Decision::Run {
            previous_token: None,
        };
    };
    // Tokens only grow, so every record was written by an earlier leader with a lower token. A
    // record with our own or a larger token means the store reissued revisions; fencing by
    // token is broken until it is repaired, and running would be a guess.
    if record.token >= token {
        return Decision::TokenWentBackwards(record);
    }
    match record.state {
        State::Done => Decision::AlreadyDone(record),
        // A failed run is retried: that is what a new occurrence of a failed job means.
        State::Failed => Decision::Run {
            previous_token: None,
        },
        // An older leader's "started" record: it died, or lost its lease mid-run.
        State::Started => match policy {
            IfUnfinished::Rerun => Decision::Run {
                previous_token: Some(record.token),
            },
            IfUnfinished::Skip => Decision::SkipUnfinished(record),
            IfUnfinished::Fail => Decision::RefuseUnfinished(record),
        },
    }
}

/// Where a lease's occurrence records live.
pub fn records_prefix(scope: &Scope) -> String {
    format!("{}.occurrences/{}/", scope.prefix, scope.lease)
}

pub fn record_key(scope: &Scope, id: &str) -> String {
    format!("{}{id}", records_prefix(scope))
}

/// The occurrence settings of the run form.
#[derive(Clone, Debug)]
pub struct Occurrence {
    pub id: String,
    pub key: String,
    pub if_unfinished: IfUnfinished,
    pub retention: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: State, token: i64) -> Record {
        Record {
            state,
            token,
            identity: "host-a:1".into(),
            started_at: "2026-11-29T02:00:00.000Z".into(),
            finished_at: None,
            exit_code: None,
            previous_token: None,
        }
    }

    #[test]
    fn nothing_recorded_runs() {
        for policy in [IfUnfinished::Rerun, IfUnfinished::Skip, IfUnfinished::Fail] {
            assert_eq!(
                decide(None, policy, 10),
                Decision::Run {
                    previous_token: None
                }
            );
        }
    }

    #[test]
    fn done_never_runs_again_and_failed_always_does() {
        let done = record(State::Done, 5);
        let failed = record(State::Failed, 5);
        for policy in [IfUnfinished::Rerun, IfUnfinished::Skip, IfUnfinished::Fail] {
            assert_eq!(
                decide(Some(done.clone()), policy, 10),
                Decision::AlreadyDone(done.clone())
            );
            assert_eq!(
                decide(Some(failed.clone()), policy, 10),
                Decision::Run {
                    previous_token: None
                }
            );
        }
    }

    #[test]
    fn unfinished_follows_the_policy() {
        let started = record(State::Started, 5);
        assert_eq!(
            decide(Some(started.clone()), IfUnfinished::Rerun, 10),
            Decision::Run {
                previous_token: Some(5)
            }
        );
        assert_eq!(
            decide(Some(started.clone()), IfUnfinished::Skip, 10),
            Decision::SkipUnfinished(started.clone())
        );
        assert_eq!(
            decide(Some(started.clone()), IfUnfinished::Fail, 10),
            Decision::RefuseUnfinished(started)
        );
    }

    #[test]
    fn a_record_from_the_future_is_refused() {
        let newer = record(State::Started, 12);
        assert_eq!(
            decide(Some(newer.clone()), IfUnfinished::Rerun, 10),
            Decision::TokenWentBackwards(newer)
        );
    }

    #[test]
    fn records_round_trip_as_json() {
        let started = Record::started(7, "host-b:2", Some(5));
        let done = started.finished(0);
        assert_eq!(done.state, State::Done);
        assert_eq!(done.exit_code, Some(0));
        assert_eq!(started.finished(3).state, State::Failed);
        assert_eq!(Record::from_json(&done.to_json()), Some(done.clone()));
        let text = String::from_utf8(done.to_json()).unwrap();
        assert!(text.contains("\"state\":\"done\""), "{text}");
        assert_eq!(Record::from_json(b"not json"), None);
    }

    #[test]
    fn records_live_outside_every_election_prefix() {
        let scope = Scope {
            lease: "statement-job".into(),
            prefix: "/leader-exec/".into(),
        };
        let key = record_key(&scope, "statements:2026-11-29");
        assert_eq!(
            key,
            "/leader-exec/.occurrences/statement-job/statements:2026-11-29"
        );
        assert!(!key.starts_with(&scope.election_prefix()));
    }
}
