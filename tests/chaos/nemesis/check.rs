//! The one checker of a nemesis history: the promise of docs/safety.md, and no more, over what the
//! jobs wrote (`start`, `beat`, `stop`, `term`: history.rs) and what the runner did (below).
//!
//! | record               | meaning                                                             |
//! |----------------------|---------------------------------------------------------------------|
//! | `join NAME N T`      | instance NAME (one job at most) started with `--max-holders` N at T |
//! | `pause NAME T`       | its leader-exec SIGSTOPped at T                                     |
//! | `resume NAME T`      | its leader-exec SIGCONTed at T                                      |
//! | `kill NAME T`        | its leader-exec SIGKILLed at T (its supervisor running)             |
//! | `exit NAME CODE T`   | its leader-exec was seen exited with CODE (`sig`: by a signal) by T |
//! | `deposed T0 T1`      | a claim deleted behind its holder's back (`resign --force`, a key or node deleted by hand) |
//! | `op …`               | the schedule's step, for the reader; not checked                    |
//!
//! The rules:
//! 1. At every job's start, the jobs still alive (their last record after that start) are all of
//!    its N and fewer than N: never more than N commands of one N at once, never two of
//!    different N. Excused, as documented: a job whose leader-exec was SIGSTOPped before that
//!    start, up to `RESUMED` after its SIGCONT (a frozen leader-exec cannot stop its command;
//!    once running again it must SIGKILL at once when its grace cannot end inside the lease), and
//!    a job alive when a claim was deleted behind its holder's back, up to its renew deadline and
//!    `--kill-after` and `DEPOSED` after that (`resign --force` documents the overlap: the holder
//!    SIGKILLs when it sees its claim gone, at once on etcd and ZooKeeper, at its next renewal on
//!    PostgreSQL; a holder cut off from the store sees nothing and steps down at its deadline).
//! 2. Tokens: never two jobs with one token; a job's token is above the token of every job that
//!    started before its instance joined (issued before it existed), and of every job that showed
//!    its last sign of life before it started, and (both with N = 1) of every leader that started
//!    before it, unless its own leader-exec was paused between its join and its start (then
//!    another holder may have come and gone after its token was issued).
//!    No pause excuses the first part: the token is the defence when leader-exec is frozen.
//! 3. No command outlives its wrapper: a job is dead `KILLED` after its leader-exec's SIGKILL, and
//!    before its leader-exec was seen exited; every job was seen gone after the teardown.
//! 4. Exit codes before the teardown are 0 (the command ended), 75 (leadership lost, resigned),
//!    124 (`--no-wait` found it held), 125 (a `--max-holders` that disagrees with the instances
//!    in line, or the supervisor killed) or a signal of the runner's.

use std::collections::HashMap;
use std::time::Duration;

use crate::history::Record;

/// How long after SIGCONT a resumed leader-exec's command may still run beside a newer holder.
pub const RESUMED: Duration = Duration::from_millis(750);
/// Slack on how long after its claim was deleted a holder's command may run (beyond its renew
/// deadline and `--kill-after`).
pub const DEPOSED: Duration = Duration::from_millis(750);
/// How long after its leader-exec's SIGKILL a command may run (the supervisor kills it).
pub const KILLED: Duration = Duration::from_millis(1000);

#[derive(Clone, Debug, Default)]
struct Job {
    name: String,
    n: usize,
    token: i64,
    join: u128,
    start: u128,
    last_alive: u128,
    gone: Option<u128>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Join {
        name: String,
        n: usize,
        time: u128,
    },
    Pause {
        name: String,
        time: u128,
    },
    Resume {
        name: String,
        time: u128,
    },
    Kill {
        name: String,
        time: u128,
    },
    Exit {
        name: String,
        code: Option<i32>,
        time: u128,
    },
    Deposed {
        from: u128,
        to: u128,
    },
}

fn event(line: &str) -> Option<Event> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let t = |i: usize| w.get(i)?.parse::<u128>().ok();
    let name = || w.get(1).map(|s| s.to_string());
    Some(match (*w.first()?, w.len()) {
        ("join", 4) => Event::Join {
            name: name()?,
            n: w[2].parse().ok()?,
            time: t(3)?,
        },
        ("pause", 3) => Event::Pause {
            name: name()?,
            time: t(2)?,
        },
        ("resume", 3) => Event::Resume {
            name: name()?,
            time: t(2)?,
        },
        ("kill", 3) => Event::Kill {
            name: name()?,
            time: t(2)?,
        },
        ("exit", 4) => Event::Exit {
            name: name()?,
            code: w[2].parse().ok(),
            time: t(3)?,
        },
        ("deposed", 3) => Event::Deposed {
            from: t(1)?,
            to: t(2)?,
        },
        _ => return None,
    })
}

/// Checks a nemesis history; returns every violation found (empty: the promise held).
/// `step_down` is the instances' renew deadline + `--kill-after`: the longest a holder whose claim
/// was deleted behind its back may take to notice and stop.
pub fn check(text: &str, step_down: Duration) -> Vec<String> {
    let mut violations = Vec::new();
    let mut events = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut joins: HashMap<String, (usize, u128)> = HashMap::new();
    let mut teardown = u128::MAX;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with("op ") {
            continue;
        }
        if let Some(e) = event(line) {
            if let Event::Join { name, n, time } = &e {
                joins.insert(name.clone(), (*n, *time));
            }
            events.push(e);
            continue;
        }
        let Some(record) = Record::parse(line) else {
            violations.push(format!("unreadable record: {line:?}"));
            continue;
        };
        match record {
            Record::Start {
                name, token, time, ..
            } => {
                if index.contains_key(&name) {
                    violations.push(format!("{name} started twice"));
                    continue;
                }
                let Some(&(n, join)) = joins.get(&name) else {
                    violations.push(format!("{name} started without a join"));
                    continue;
                };
                index.insert(name.clone(), jobs.len());
                jobs.push(Job {
                    name,
                    n,
                    token,
                    join,
                    start: time,
                    last_alive: time,
                    gone: None,
                });
            }
            Record::Teardown { time } => teardown = teardown.min(time),
            Record::Gone { name, time } => {
                if let Some(&i) = index.get(&name) {
                    jobs[i].gone = Some(time);
                }
            }
            Record::Beat { name, time }
            | Record::Term { name, time }
            | Record::Stop { name, time }
            | Record::Spawn { name, time, .. }
            | Record::Overlap { name, time, .. } => match index.get(&name) {
                Some(&i) => jobs[i].last_alive = jobs[i].last_alive.max(time),
                None => violations.push(format!("{line} without a start")),
            },
            Record::Fault(_) => {}
        }
    }
    jobs.sort_by_key(|j| j.start);

    // Pause windows per instance: [pause, resume] (an unmatched pause lasts for ever).
    let mut paused: HashMap<&str, Vec<(u128, u128)>> = HashMap::new();
    for e in &events {
        match e {
            Event::Pause { name, time } => paused
                .entry(name.as_str())
                .or_default()
                .push((*time, u128::MAX)),
            Event::Resume { name, time } => {
                if let Some(w) = paused
                    .get_mut(name.as_str())
                    .and_then(|w| w.iter_mut().rev().find(|w| w.1 == u128::MAX))
                {
                    w.1 = *time;
                }
            }
            _ => {}
        }
    }
    let deposed: Vec<(u128, u128)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Deposed { from, to } => Some((*from, *to)),
            _ => None,
        })
        .collect();
    let ns = |d: Duration| d.as_nanos();
    let excused = |earlier: &Job, at: u128| {
        // Its leader-exec paused by `at` and its command gone by just after the resume.
        let frozen_by = |at: u128| {
            paused.get(earlier.name.as_str()).is_some_and(|ws| {
                ws.iter()
                    .any(|&(p, r)| p <= at && earlier.last_alive <= r.saturating_add(ns(RESUMED)))
            })
        };
        let frozen = frozen_by(at);
        // A holder whose claim was deleted behind its back runs on until it steps down; if its
        // leader-exec was frozen before it could (paused within that window), until it is
        // resumed, when it must stop at once, as any frozen leader-exec: both documented.
        let claim_deleted = deposed.iter().any(|&(from, to)| {
            let until = to + ns(DEPOSED) + ns(step_down);
            from <= at && earlier.start <= to && (earlier.last_alive <= until || frozen_by(until))
        });
        frozen || claim_deleted
    };

    // 1. Never more than N of one N at once, never two of different N.
    for (i, later) in jobs.iter().enumerate() {
        let alive: Vec<&Job> = jobs[..i]
            .iter()
            .filter(|e| e.last_alive > later.start && !excused(e, later.start))
            .collect();
        for e in alive.iter().filter(|e| e.n != later.n) {
            violations.push(format!(
                "{} (N {}, token {}) started while {} (N {}, token {}) ran, for {:?} more",
                later.name,
                later.n,
                later.token,
                e.name,
                e.n,
                e.token,
                Duration::from_nanos((e.last_alive - later.start) as u64)
            ));
        }
        let same: Vec<String> = alive
            .iter()
            .filter(|e| e.n == later.n)
            .map(|e| format!("{} (token {})", e.name, e.token))
            .collect();
        if same.len() >= later.n {
            violations.push(format!(
                "{} (N {}, token {}) started while {} already ran: more than {} at once",
                later.name,
                later.n,
                later.token,
                same.join(", "),
                later.n
            ));
        }
    }

    // 2. Tokens.
    for (i, a) in jobs.iter().enumerate() {
        for b in &jobs[i + 1..] {
            if a.token == b.token {
                violations.push(format!(
                    "{} and {} were both given token {}",
                    a.name, b.name, a.token
                ));
            }
        }
    }
    for later in &jobs {
        let stalled = paused
            .get(later.name.as_str())
            .is_some_and(|ws| ws.iter().any(|&(p, r)| p < later.start && r > later.join));
        for earlier in jobs.iter().filter(|e| e.name != later.name) {
            let issued_before_join = earlier.start < later.join;
            let ended_before = earlier.last_alive < later.start && !stalled;
            // Single leaders follow one another: their tokens rise in start order.
            let leader_before =
                earlier.n == 1 && later.n == 1 && earlier.start < later.start && !stalled;
            if (issued_before_join || ended_before || leader_before) && later.token <= earlier.token
            {
                violations.push(format!(
                    "token {} of {} (N {}) is not above token {} of {} (N {}), which {}",
                    later.token,
                    later.name,
                    later.n,
                    earlier.token,
                    earlier.name,
                    earlier.n,
                    if issued_before_join {
                        "had started before it joined"
                    } else if ended_before {
                        "had ended before it started"
                    } else {
                        "had led before it"
                    }
                ));
            }
        }
    }

    // 3. No command outlives its wrapper.
    for e in &events {
        let (name, time, slack, what) = match e {
            Event::Kill { name, time } => (name, *time, ns(KILLED), "SIGKILLed"),
            Event::Exit { name, time, .. } => (name, *time, 0, "seen exited"),
            _ => continue,
        };
        if let Some(&i) = index.get(name)
            && jobs[i].start <= time
            && jobs[i].last_alive > time + slack
        {
            violations.push(format!(
                "{name}'s command ran {:?} after its leader-exec was {what}",
                Duration::from_nanos((jobs[i].last_alive - time) as u64)
            ));
        }
    }
    for job in &jobs {
        match job.gone {
            None => violations.push(format!(
                "{} (token {}) was never seen gone: some process of it outlived the run",
                job.name, job.token
            )),
            Some(gone) if gone < job.last_alive => violations.push(format!(
                "{} was seen gone at {gone} but alive at {}",
                job.name, job.last_alive
            )),
            Some(_) => {}
        }
    }

    // 4. Exit codes.
    for e in &events {
        if let Event::Exit { name, code, time } = e
            && *time < teardown
            && !matches!(code, None | Some(0 | 75 | 124 | 125))
        {
            violations.push(format!("{name}'s leader-exec exited {code:?}"));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u128 = 1_000_000_000;
    const STEP_DOWN: Duration = Duration::from_millis(3500);

    /// A job's lines: join, start, beats every 100 ms from `from` to `to` (seconds), gone.
    fn job(name: &str, n: usize, token: i64, join: f64, from: f64, to: f64) -> String {
        let t = |s: f64| (s * S as f64) as u128;
        let mut out = format!(
            "join {name} {n} {}\nstart {name} {token} 100 {}\n",
            t(join),
            t(from)
        );
        let mut at = from;
        while at < to {
            at = (at + 0.1).min(to);
            out.push_str(&format!("beat {name} {}\n", t(at)));
        }
        out
    }

    fn end(names: &[&str]) -> String {
        let mut out = format!("teardown {}\n", 100 * S);
        for n in names {
            out.push_str(&format!("gone {n} {}\n", 101 * S));
        }
        out
    }

    fn verdict(parts: &[String]) -> Vec<String> {
        check(&parts.concat(), STEP_DOWN)
    }

    #[test]
    fn one_leader_after_another_passes() {
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 3.0),
            job("b", 1, 7, 0.0, 3.2, 5.0),
            job("c", 1, 9, 4.0, 5.5, 6.0),
            "exit a 75 3100000000\njoin d 2 4000000000\nexit d 125 4100000000\n".into(),
            end(&["a", "b", "c"]),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn an_overlap_of_two_single_leaders_fails() {
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 3.0),
            job("b", 1, 7, 0.0, 2.5, 5.0),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("more than 1")), "{v:?}");
    }

    #[test]
    fn two_holders_of_two_pass_and_a_third_fails() {
        let two = [
            job("a", 2, 5, 0.0, 1.0, 3.0),
            job("b", 2, 6, 0.0, 1.1, 5.0),
            job("c", 2, 8, 0.0, 3.2, 5.0),
        ];
        let v = verdict(&[two.concat(), end(&["a", "b", "c"])]);
        assert!(v.is_empty(), "{v:?}");
        let v = verdict(&[
            two.concat(),
            job("d", 2, 9, 0.0, 4.0, 4.5),
            end(&["a", "b", "c", "d"]),
        ]);
        assert!(v.iter().any(|v| v.contains("more than 2")), "{v:?}");
    }

    #[test]
    fn holders_of_different_n_at_once_fail() {
        let v = verdict(&[
            job("a", 2, 5, 0.0, 1.0, 3.0),
            job("b", 1, 6, 0.0, 2.0, 5.0),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("N 2")), "{v:?}");
    }

    #[test]
    fn a_token_below_one_that_ended_fails_across_n() {
        // Issue 33, 1: the N = 1 leader's czxid below the N = 2 holder's touch.
        let v = verdict(&[
            job("p", 2, 0x1d, 0.5, 1.0, 2.0),
            job("x", 1, 0x1b, 0.8, 3.0, 4.0),
            end(&["p", "x"]),
        ]);
        assert!(v.iter().any(|v| v.contains("token 27 of x")), "{v:?}");
    }

    #[test]
    fn a_shared_token_fails() {
        // Issue 33, 2: two live holders with one token.
        let v = verdict(&[
            job("a", 2, 6, 0.0, 1.0, 3.0),
            job("b", 2, 6, 0.0, 2.0, 4.0),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("both given token 6")), "{v:?}");
    }

    #[test]
    fn holders_of_n_start_in_any_order_of_their_tokens() {
        // Both joined before either started: the later start may hold the smaller token.
        let v = verdict(&[
            job("a", 2, 8, 0.0, 1.0, 3.0),
            job("b", 2, 7, 0.0, 1.01, 3.0),
            end(&["a", "b"]),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_paused_leader_may_overlap_until_just_after_its_resume_but_not_longer() {
        let base = [
            "pause a 2000000000\n".to_string(),
            job("b", 1, 7, 0.0, 5.0, 8.0),
            "resume a 6000000000\n".into(),
        ];
        // SIGKILLed at once on resume: the documented hole, excused.
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 6.05),
            base.concat(),
            end(&["a", "b"]),
        ]);
        assert!(v.is_empty(), "{v:?}");
        // Issue 33, 5: the whole --kill-after after the resume.
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 8.0),
            base.concat(),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("more than 1")), "{v:?}");
    }

    #[test]
    fn a_pause_does_not_excuse_a_token() {
        let v = verdict(&[
            "pause a 2000000000\n".into(),
            job("a", 1, 9, 0.0, 1.0, 6.0),
            job("b", 1, 7, 0.0, 5.0, 8.0),
            "resume a 6000000000\n".into(),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("token 7 of b")), "{v:?}");
    }

    #[test]
    fn a_deposed_holder_may_run_until_it_steps_down_and_no_longer() {
        let base = [
            job("b", 1, 7, 0.0, 3.1, 9.0),
            "deposed 3000000000 3000100000\n".into(),
        ];
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 6.5),
            base.concat(),
            end(&["a", "b"]),
        ]);
        assert!(v.is_empty(), "{v:?}");
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 7.5),
            base.concat(),
            end(&["a", "b"]),
        ]);
        assert!(v.iter().any(|v| v.contains("more than 1")), "{v:?}");
    }

    /// Deposed, then frozen before it stopped: it may run until just after its resume, and no
    /// longer; a freeze that begins after it should have stopped excuses nothing.
    #[test]
    fn a_deposed_holder_frozen_before_it_stopped_may_run_until_it_resumes() {
        let base = [
            job("b", 1, 7, 0.0, 3.1, 9.0),
            "deposed 3000000000 3000100000\n".into(),
        ];
        let frozen = |pause: &str, resume: &str, last: f64| {
            verdict(&[
                job("a", 1, 5, 0.0, 1.0, last),
                format!("pause a {pause}\nresume a {resume}\n"),
                base.concat(),
                end(&["a", "b"]),
            ])
        };
        let v = frozen("4000000000", "12000000000", 12.5);
        assert!(v.is_empty(), "{v:?}");
        let v = frozen("4000000000", "12000000000", 13.0);
        assert!(v.iter().any(|v| v.contains("more than 1")), "{v:?}");
        let v = frozen("8000000000", "12000000000", 12.5);
        assert!(v.iter().any(|v| v.contains("more than 1")), "{v:?}");
    }

    #[test]
    fn a_command_that_outlives_its_killed_wrapper_fails() {
        let v = verdict(&[
            job("a", 1, 5, 0.0, 1.0, 5.0),
            "kill a 2000000000\n".into(),
            end(&["a"]),
        ]);
        assert!(v.iter().any(|v| v.contains("SIGKILLed")), "{v:?}");
        let v = verdict(&[job("a", 1, 5, 0.0, 1.0, 5.0), end(&[])]);
        assert!(v.iter().any(|v| v.contains("never seen gone")), "{v:?}");
    }

    #[test]
    fn unexpected_exit_codes_fail_and_documented_ones_pass() {
        let v = verdict(&[
            "join a 1 0\nexit a 125 1\njoin b 1 0\nexit b 124 1\njoin c 1 0\nexit c sig 1\n".into(),
            end(&[]),
        ]);
        assert!(v.is_empty(), "{v:?}");
        let v = verdict(&["join a 1 0\nexit a 101 1\n".into(), end(&[])]);
        assert!(v.iter().any(|v| v.contains("exited Some(101)")), "{v:?}");
    }
}
