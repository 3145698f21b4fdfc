//! The history a trial writes, and the checker of the safety property over it.
//!
//! One record per line; times are wall-clock nanoseconds since the epoch (jobs take them from
//! bash's `$EPOCHREALTIME`, the runner from `SystemTime`, the same clock).
//!
//! | record                           | written by   | meaning                                          |
//! |----------------------------------|--------------|--------------------------------------------------|
//! | `start NAME TOKEN PID T`         | job          | job NAME began, with `$LEADER_TOKEN` = TOKEN     |
//! | `overlap NAME PID T`             | job          | at NAME's start, PID of an earlier job was alive |
//! | `spawn NAME PID T`               | job          | NAME started grandchild PID (same group)         |
//! | `beat NAME T`                    | job          | a process of NAME was alive at T                 |
//! | `term NAME T`                    | job          | NAME got SIGTERM and goes on running             |
//! | `stop NAME T`                    | job          | NAME got SIGTERM and exits                       |
//! | `gone NAME T`                    | runner       | every process of NAME was seen dead at T         |
//! | `fault KIND BEGIN END short\|long` | runner     | a fault from BEGIN to END; `short` when it was shorter than the renew deadline with room for a renewal |
//! | `teardown T`                     | runner       | the trial ends: instances are stopped from T on  |
//!
//! Every record a job writes is proof that the job was alive at its time. A job's run interval
//! is therefore [its start, its last record]; `gone` (written by the runner after it saw every pid
//! of the job dead) is an upper bound of its end, not proof of life.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Start {
        name: String,
        token: i64,
        pid: i32,
        time: u128,
    },
    /// The job's own check at its start found a process of an earlier job alive.
    Overlap {
        name: String,
        pid: i32,
        time: u128,
    },
    Spawn {
        name: String,
        pid: i32,
        time: u128,
    },
    Beat {
        name: String,
        time: u128,
    },
    Term {
        name: String,
        time: u128,
    },
    Stop {
        name: String,
        time: u128,
    },
    Gone {
        name: String,
        time: u128,
    },
    Fault(Fault),
    Teardown {
        time: u128,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub begin: u128,
    pub end: u128,
    /// Shorter than the renew deadline with room for a renewal: leadership must survive it.
    pub short: bool,
}

impl Record {
    pub fn parse(line: &str) -> Option<Record> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = || words.get(1).map(|s| s.to_string());
        let int = |i: usize| words.get(i).and_then(|w| w.parse::<i64>().ok());
        let time = |i: usize| words.get(i).and_then(|w| w.parse::<u128>().ok());
        let record = match (*words.first()?, words.len()) {
            ("start", 5) => Record::Start {
                name: name()?,
                token: int(2)?,
                pid: int(3)? as i32,
                time: time(4)?,
            },
            ("overlap", 4) => Record::Overlap {
                name: name()?,
                pid: int(2)? as i32,
                time: time(3)?,
            },
            ("spawn", 4) => Record::Spawn {
                name: name()?,
                pid: int(2)? as i32,
                time: time(3)?,
            },
            ("beat", 3) => Record::Beat {
                name: name()?,
                time: time(2)?,
            },
            ("term", 3) => Record::Term {
                name: name()?,
                time: time(2)?,
            },
            ("stop", 3) => Record::Stop {
                name: name()?,
                time: time(2)?,
            },
            ("gone", 3) => Record::Gone {
                name: name()?,
                time: time(2)?,
            },
            ("fault", 5) => Record::Fault(Fault {
                kind: name()?,
                begin: time(2)?,
                end: time(3)?,
                short: match words[4] {
                    "short" => true,
                    "long" => false,
                    _ => return None,
                },
            }),
            ("teardown", 2) => Record::Teardown { time: time(1)? },
            _ => return None,
        };
        Some(record)
    }

    pub fn line(&self) -> String {
        match self {
            Record::Start {
                name,
                token,
                pid,
                time,
            } => format!("start {name} {token} {pid} {time}"),
            Record::Overlap { name, pid, time } => format!("overlap {name} {pid} {time}"),
            Record::Spawn { name, pid, time } => format!("spawn {name} {pid} {time}"),
            Record::Beat { name, time } => format!("beat {name} {time}"),
            Record::Term { name, time } => format!("term {name} {time}"),
            Record::Stop { name, time } => format!("stop {name} {time}"),
            Record::Gone { name, time } => format!("gone {name} {time}"),
            Record::Fault(f) => format!(
                "fault {} {} {} {}",
                f.kind,
                f.begin,
                f.end,
                if f.short { "short" } else { "long" }
            ),
            Record::Teardown { time } => format!("teardown {time}"),
        }
    }

    /// The job that wrote it, for records a job writes.
    fn job(&self) -> Option<(&str, u128)> {
        match self {
            Record::Start { name, time, .. }
            | Record::Overlap { name, time, .. }
            | Record::Spawn { name, time, .. }
            | Record::Beat { name, time }
            | Record::Term { name, time }
            | Record::Stop { name, time } => Some((name, *time)),
            _ => None,
        }
    }
}

/// One job (one leader's command and everything in its group), as the history shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub name: String,
    pub token: i64,
    pub start: u128,
    /// The time of its last own record: it was alive at least until then.
    pub last_alive: u128,
    /// Its own pid and its grandchildren's.
    pub pids: Vec<i32>,
    /// First SIGTERM it recorded (`term` or `stop`).
    pub signalled: Option<u128>,
    pub stopped: Option<u128>,
    pub gone: Option<u128>,
}

/// Two jobs that ran at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub earlier: String,
    pub later: String,
    pub earlier_token: i64,
    pub later_token: i64,
    /// How long the earlier job was seen alive after the later one started (zero when only the
    /// later job's own check at its start saw a live process of the earlier one).
    pub window: Duration,
}

/// What the checker found in one history.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// In start order.
    pub jobs: Vec<Job>,
    pub overlaps: Vec<Overlap>,
    /// Everything else that breaks the rules: tokens not increasing, a job never seen gone, a
    /// restart after a short fault, unreadable lines.
    pub violations: Vec<String>,
    pub faults: Vec<Fault>,
    pub teardown: Option<u128>,
}

pub fn parse(text: &str) -> (Vec<Record>, Vec<String>) {
    let mut records = Vec::new();
    let mut unreadable = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match Record::parse(line) {
            Some(record) => records.push(record),
            None => unreadable.push(line.to_owned()),
        }
    }
    (records, unreadable)
}

/// Checks a history:
/// 1. no two jobs' run intervals overlap (a later job starting before an earlier job's last sign
///    of life, or a job's own start-time check finding an earlier job's process alive);
/// 2. tokens strictly increase in start order;
/// 3. every job that started was seen gone (all its processes dead) by the runner, and never
///    showed a sign of life after that;
/// 4. after a short fault (shorter than the renew deadline) and until the teardown, no job was
///    signalled and none started: leadership was kept and the command left alone.
///
/// With `--max-holders` N (`holders`), 1 and 2 read: no more than N jobs ran at any instant (a
/// job started while N earlier ones still lived is an overlap with each of them); a job that
/// started after another showed its last sign of life has a greater token (N holders start in
/// no fixed order among themselves, but none can get a token below one that ended before it).
pub fn check_text(text: &str) -> Verdict {
    check_text_holders(text, 1)
}

pub fn check_text_holders(text: &str, holders: usize) -> Verdict {
    let (records, unreadable) = parse(text);
    let mut verdict = check_holders(&records, holders);
    for line in unreadable {
        verdict
            .violations
            .insert(0, format!("unreadable record: {line:?}"));
    }
    verdict
}

pub fn check_holders(records: &[Record], holders: usize) -> Verdict {
    let holders = holders.max(1);
    let mut verdict = Verdict::default();
    let mut jobs: Vec<Job> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut self_reported: Vec<(String, i32, u128)> = Vec::new();

    for record in records {
        match record {
            Record::Start {
                name,
                token,
                pid,
                time,
            } => {
                if index.contains_key(name) {
                    verdict
                        .violations
                        .push(format!("{name} started twice (a name is one job)"));
                    continue;
                }
                index.insert(name.clone(), jobs.len());
                jobs.push(Job {
                    name: name.clone(),
                    token: *token,
                    start: *time,
                    last_alive: *time,
                    pids: vec![*pid],
                    signalled: None,
                    stopped: None,
                    gone: None,
                });
            }
            Record::Fault(fault) => verdict.faults.push(fault.clone()),
            Record::Teardown { time } => verdict.teardown = Some(*time),
            Record::Gone { name, time } => match index.get(name) {
                Some(&i) => jobs[i].gone = Some(*time),
                None => verdict
                    .violations
                    .push(format!("gone {name} without a start")),
            },
            _ => {
                let (name, time) = record.job().unwrap();
                let Some(&i) = index.get(name) else {
                    verdict
                        .violations
                        .push(format!("{} without a start", record.line()));
                    continue;
                };
                let job = &mut jobs[i];
                job.last_alive = job.last_alive.max(time);
                match record {
                    Record::Spawn { pid, .. } => job.pids.push(*pid),
                    Record::Term { .. } => {
                        job.signalled.get_or_insert(time);
                    }
                    Record::Stop { .. } => {
                        job.signalled.get_or_insert(time);
                        job.stopped = Some(time);
                    }
                    Record::Overlap { pid, .. } => {
                        self_reported.push((name.to_owned(), *pid, time));
                    }
                    _ => {}
                }
            }
        }
    }
    jobs.sort_by_key(|j| j.start);

    // 1. Overlaps, seen by heartbeats (an earlier job alive after a later one started: with N
    //    holders, N earlier jobs alive)...
    for (i, later) in jobs.iter().enumerate() {
        let alive: Vec<&Job> = jobs[..i]
            .iter()
            .filter(|earlier| earlier.last_alive > later.start)
            .collect();
        if alive.len() >= holders {
            for earlier in alive {
                add_overlap(
                    &mut verdict.overlaps,
                    earlier,
                    later,
                    Duration::from_nanos((earlier.last_alive - later.start) as u64),
                );
            }
        }
    }
    // ...and by the later job's own check of the earlier jobs' pids at its start.
    let mut seen: Vec<(String, Vec<usize>)> = Vec::new();
    for (name, pid, time) in self_reported {
        match jobs
            .iter()
            .position(|j| j.name != name && j.start <= time && j.pids.contains(&pid))
        {
            Some(earlier) => match seen.iter_mut().find(|(n, _)| *n == name) {
                Some((_, earlier_jobs)) if earlier_jobs.contains(&earlier) => {}
                Some((_, earlier_jobs)) => earlier_jobs.push(earlier),
                None => seen.push((name, vec![earlier])),
            },
            None => verdict.violations.push(format!(
                "{name} saw pid {pid} alive at its start, which is no earlier job's"
            )),
        }
    }
    for (name, earlier_jobs) in seen {
        if earlier_jobs.len() >= holders {
            let later = jobs.iter().find(|j| j.name == name).unwrap();
            for earlier in earlier_jobs {
                add_overlap(&mut verdict.overlaps, &jobs[earlier], later, Duration::ZERO);
            }
        }
    }

    // 2. Tokens strictly increase in start order (with N holders: above every job that had
    //    ended before this one started).
    if holders == 1 {
        for pair in jobs.windows(2) {
            if pair[1].token <= pair[0].token {
                verdict.violations.push(format!(
                    "token {} of {} is not greater than token {} of {}, which started before it",
                    pair[1].token, pair[1].name, pair[0].token, pair[0].name
                ));
            }
        }
    } else {
        for (i, later) in jobs.iter().enumerate() {
            for earlier in jobs[..i].iter().filter(|e| e.last_alive < later.start) {
                if later.token <= earlier.token {
                    verdict.violations.push(format!(
                        "token {} of {} is not greater than token {} of {}, which ended before it started",
                        later.token, later.name, earlier.token, earlier.name
                    ));
                }
            }
        }
    }

    // 3. Every job ended, for good.
    for job in &jobs {
        match job.gone {
            None => verdict.violations.push(format!(
                "{} (token {}) was never seen gone: some process of it outlived the trial",
                job.name, job.token
            )),
            Some(gone) if gone < job.last_alive => verdict.violations.push(format!(
                "{} was seen gone at {gone} but alive at {}",
                job.name, job.last_alive
            )),
            Some(_) => {}
        }
    }

    // 4. Short faults cost nothing.
    let until = verdict.teardown.unwrap_or(u128::MAX);
    for fault in verdict.faults.iter().filter(|f| f.short) {
        for job in &jobs {
            if job.start > fault.begin && job.start < until {
                verdict.violations.push(format!(
                    "{} started at {} after a short {} fault began at {}: a restart",
                    job.name, job.start, fault.kind, fault.begin
                ));
            }
            if let Some(signalled) = job.signalled
                && signalled > fault.begin
                && signalled < until
            {
                verdict.violations.push(format!(
                    "{} was stopped at {signalled} after a short {} fault began at {}",
                    job.name, fault.kind, fault.begin
                ));
            }
        }
    }

    verdict.jobs = jobs;
    verdict
}

fn add_overlap(overlaps: &mut Vec<Overlap>, earlier: &Job, later: &Job, window: Duration) {
    if let Some(known) = overlaps
        .iter_mut()
        .find(|o| o.earlier == earlier.name && o.later == later.name)
    {
        known.window = known.window.max(window);
        return;
    }
    overlaps.push(Overlap {
        earlier: earlier.name.clone(),
        later: later.name.clone(),
        earlier_token: earlier.token,
        later_token: later.token,
        window,
    });
}

impl Verdict {
    /// Whether the history shows the safety property held.
    pub fn is_safe(&self) -> bool {
        self.overlaps.is_empty() && self.violations.is_empty()
    }

    /// What is wrong, one line each.
    pub fn problems(&self) -> String {
        let mut out = String::new();
        for o in &self.overlaps {
            let _ = writeln!(
                out,
                "OVERLAP: {} (token {}) was alive {:?} after {} (token {}) started",
                o.earlier, o.earlier_token, o.window, o.later, o.later_token
            );
        }
        for v in &self.violations {
            let _ = writeln!(out, "VIOLATION: {v}");
        }
        out
    }

    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// From the first fault's beginning to the first job start after it.
    pub fn failover(&self) -> Option<Duration> {
        let begin = self.faults.first()?.begin;
        let next = self.jobs.iter().find(|j| j.start > begin)?;
        Some(Duration::from_nanos((next.start - begin) as u64))
    }

    /// The smallest time between one job's last sign of life and the next job's start (None
    /// with fewer than two jobs, or when they overlapped).
    pub fn min_gap(&self) -> Option<Duration> {
        self.jobs
            .windows(2)
            .filter_map(|p| p[1].start.checked_sub(p[0].last_alive))
            .map(|ns| Duration::from_nanos(ns as u64))
            .min()
    }
}

/// A history, shortened for a failure message: runs of heartbeats become one line.
pub fn compact(text: &str) -> String {
    let mut out = String::new();
    let mut run: Option<(String, usize, String, String)> = None;
    let flush = |out: &mut String, run: &mut Option<(String, usize, String, String)>| {
        if let Some((name, n, first, last)) = run.take() {
            let _ = writeln!(out, "beat {name} x{n} {first}..{last}");
        }
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["beat", name, time] = words[..] {
            match &mut run {
                Some((n, count, _, last)) if n == name => {
                    *count += 1;
                    *last = time.to_owned();
                }
                _ => {
                    flush(&mut out, &mut run);
                    run = Some((name.to_owned(), 1, time.to_owned(), time.to_owned()));
                }
            }
            continue;
        }
        flush(&mut out, &mut run);
        let _ = writeln!(out, "{line}");
    }
    flush(&mut out, &mut run);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u128 = 1_000_000;

    /// A history in the trial's format; times in ms from an arbitrary origin.
    fn history(lines: &[&str]) -> String {
        lines
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .map(|w| match w.strip_prefix('@') {
                        Some(ms) => {
                            (1_700_000_000_000 * MS + ms.parse::<u128>().unwrap() * MS).to_string()
                        }
                        None => w.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A clean handover: a is cut off, stops, and b starts 1.5 s later with a larger token.
    fn clean() -> Vec<&'static str> {
        vec![
            "start a 10 100 @0",
            "beat a @50",
            "beat a @100",
            "fault proxy-cut @120 @3000 long",
            "beat a @1500",
            "stop a @1600",
            "gone a @1700",
            "start b 14 200 @3100",
            "beat b @3150",
            "teardown @3300",
            "stop b @3310",
            "gone b @3400",
        ]
    }

    #[test]
    fn a_clean_handover_passes() {
        let verdict = check_text(&history(&clean()));
        assert!(verdict.is_safe(), "{}", verdict.problems());
        assert_eq!(verdict.jobs.len(), 2);
        assert_eq!(verdict.failover(), Some(Duration::from_millis(2980)));
        assert_eq!(verdict.min_gap(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn a_heartbeat_after_the_next_start_is_an_overlap() {
        let mut lines = clean();
        // a ran on 200 ms past b's start.
        lines.insert(8, "beat a @3300");
        let verdict = check_text(&history(&lines));
        assert!(!verdict.is_safe());
        assert_eq!(
            verdict.overlaps,
            vec![Overlap {
                earlier: "a".into(),
                later: "b".into(),
                earlier_token: 10,
                later_token: 14,
                window: Duration::from_millis(200),
            }]
        );
        // a was seen gone before its last beat: the runner's observation is contradicted too.
        assert!(verdict.violations.iter().any(|v| v.contains("seen gone")));
    }

    #[test]
    fn a_process_alive_at_the_next_start_is_an_overlap() {
        let mut lines = clean();
        // a's grandchild 101, killed without a last word, was alive when b checked.
        lines.insert(1, "spawn a 101 @10");
        lines.insert(9, "overlap b 101 @3101");
        let verdict = check_text(&history(&lines));
        assert_eq!(verdict.overlaps.len(), 1, "{}", verdict.problems());
        assert_eq!(verdict.overlaps[0].earlier, "a");
        assert_eq!(verdict.overlaps[0].window, Duration::ZERO);
        assert!(!verdict.is_safe());
    }

    #[test]
    #[should_panic(expected = "OVERLAP")]
    fn a_synthetic_overlap_fails_the_check() {
        let text = history(&[
            "start a 5 100 @0",
            "start b 9 200 @1000",
            "beat a @1200",
            "teardown @2000",
            "gone a @2100",
            "gone b @2100",
        ]);
        let verdict = check_text(&text);
        assert!(verdict.is_safe(), "{}", verdict.problems());
    }

    /// With two holders, two jobs may run at once, a third starting beside them is an overlap
    /// (by heartbeats and by its own pid check), and a token below one that had ended is wrong.
    #[test]
    fn two_holders_may_overlap_three_may_not() {
        let two = [
            "start a 5 100 @0",
            "start b 6 200 @100",
            "beat a @900",
            "beat b @950",
            "overlap b 100 @101",
            "stop a @1000",
            "start c 9 300 @1500",
            "overlap c 200 @1501",
            "beat b @1600",
            "teardown @2000",
            "gone a @2100",
            "gone b @2100",
            "gone c @2100",
        ];
        let verdict = check_text_holders(&history(&two), 2);
        assert!(verdict.is_safe(), "{}", verdict.problems());
        // The same history with one holder: b and c each overlap an earlier job.
        assert!(!check_text_holders(&history(&two), 1).is_safe());

        let mut three = two.to_vec();
        // a lived on past c's start: three at once.
        three.insert(6, "beat a @1550");
        let verdict = check_text_holders(&history(&three), 2);
        assert!(
            verdict.overlaps.iter().any(|o| o.later == "c"),
            "{}",
            verdict.problems()
        );
        let mut seen = two.to_vec();
        // c's own check found a's pid (not only b's) alive at its start.
        seen.insert(8, "overlap c 100 @1502");
        assert!(!check_text_holders(&history(&seen), 2).is_safe());

        let mut low = two.to_vec();
        // c's token below a's, which had ended before c started.
        low[6] = "start c 4 300 @1500";
        let verdict = check_text_holders(&history(&low), 2);
        assert!(
            verdict
                .violations
                .iter()
                .any(|v| v.contains("token 4 of c")),
            "{}",
            verdict.problems()
        );
    }

    #[test]
    fn tokens_must_strictly_increase_in_start_order() {
        let text = history(&[
            "start a 9 100 @0",
            "stop a @500",
            "gone a @600",
            "start b 9 200 @1000",
            "stop b @1500",
            "gone b @1600",
            "start c 4 300 @2000",
            "teardown @2500",
            "gone c @2600",
        ]);
        let verdict = check_text(&text);
        assert!(verdict.overlaps.is_empty());
        assert_eq!(verdict.violations.len(), 2, "{}", verdict.problems());
        assert!(verdict.violations[0].contains("token 9 of b"));
        assert!(verdict.violations[1].contains("token 4 of c"));
    }

    #[test]
    fn a_job_never_seen_gone_is_a_violation() {
        let mut lines = clean();
        lines.retain(|l| !l.starts_with("gone a"));
        let verdict = check_text(&history(&lines));
        assert!(verdict.overlaps.is_empty());
        assert_eq!(verdict.violations.len(), 1);
        assert!(verdict.violations[0].contains("a (token 10) was never seen gone"));
    }

    #[test]
    fn a_restart_after_a_short_fault_is_a_violation() {
        let text = history(&[
            "start a 10 100 @0",
            "fault etcd-restart @500 @1200 short",
            "stop a @2100",
            "gone a @2150",
            "start b 20 200 @5200",
            "teardown @6000",
            "stop b @6010",
            "gone b @6100",
        ]);
        let verdict = check_text(&text);
        assert!(verdict.overlaps.is_empty());
        assert_eq!(verdict.violations.len(), 2, "{}", verdict.problems());
        assert!(verdict.violations[0].contains("a was stopped"));
        assert!(verdict.violations[1].contains("b started"));

        // The same history after a long fault is a correct failover.
        let long = text.replace(" short", " long");
        let verdict = check_text(&long);
        assert!(verdict.is_safe(), "{}", verdict.problems());
    }

    #[test]
    fn a_short_fault_that_changed_nothing_passes() {
        let text = history(&[
            "start a 10 100 @0",
            "beat a @400",
            "fault etcd-restart @500 @1200 short",
            "beat a @5000",
            "teardown @6000",
            "stop a @6010",
            "gone a @6100",
        ]);
        let verdict = check_text(&text);
        assert!(verdict.is_safe(), "{}", verdict.problems());
        assert_eq!(verdict.failover(), None);
    }

    #[test]
    fn a_stale_leader_overlap_is_measured() {
        // Scenario 7: a's leader-exec is frozen; b takes over; a stops only when resumed.
        let text = history(&[
            "start a 10 100 @0",
            "start b 15 200 @3400",
            "beat a @3450",
            "beat b @3450",
            "fault leader-exec-sigstop @100 @3700 long",
            "stop a @3720",
            "gone a @3800",
            "teardown @4000",
            "stop b @4010",
            "gone b @4100",
        ]);
        let verdict = check_text(&text);
        assert!(verdict.violations.is_empty(), "{}", verdict.problems());
        assert_eq!(verdict.overlaps.len(), 1);
        assert_eq!(verdict.overlaps[0].window, Duration::from_millis(320));
        assert!(verdict.overlaps[0].later_token > verdict.overlaps[0].earlier_token);
        assert_eq!(verdict.min_gap(), None);
    }

    #[test]
    fn unreadable_and_orphan_records_are_violations() {
        let text = history(&[
            "start a  100 @0",
            "beat z @10",
            "start b 3 100 @20",
            "teardown @30",
            "gone b @40",
        ]);
        let verdict = check_text(&text);
        assert_eq!(verdict.violations.len(), 2, "{}", verdict.problems());
        assert!(verdict.violations[0].starts_with("unreadable record"));
        assert!(verdict.violations[1].contains("beat z"));
    }

    #[test]
    fn compacting_collapses_heartbeats() {
        let text = "start a 1 2 3\nbeat a 4\nbeat a 5\nbeat a 6\nstop a 7\n";
        assert_eq!(compact(text), "start a 1 2 3\nbeat a x3 4..6\nstop a 7\n");
    }
}
