//! The same crontab line on many hosts: exactly once per occurrence, with `--occurrence` (records
//! in the store, fenced by the token) and with `--hold-at-least` + `--no-wait`.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::*;

/// Starts `count` instances spread evenly over `spread`, as cron on hosts with skewed clocks.
fn staggered(count: usize, spread: Duration, start: impl Fn(usize) -> Instance) -> Vec<Instance> {
    let began = Instant::now();
    (0..count)
        .map(|i| {
            let at = spread * i as u32 / (count as u32 - 1);
            std::thread::sleep(at.saturating_sub(began.elapsed()));
            start(i)
        })
        .collect()
}

fn starts(scratch: &Scratch) -> Vec<Record> {
    scratch
        .history()
        .into_iter()
        .filter(|r| r.kind == "start")
        .collect()
}

/// The record the store holds for an occurrence, as `status --json` shows it.
fn occurrence(endpoint: &str, lease: &str, id: &str) -> Option<Value> {
    let status = status_json(endpoint, lease);
    status["occurrences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .cloned()
}

pub fn six_staggered_hosts_run_an_occurrence_once<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut hosts = staggered(6, Duration::from_secs(3), |i| {
        let mut args = lease_args(&endpoint, "nightly");
        args.extend(["--occurrence", "statements:2026-11-29"]);
        Instance::start(&args, &scratch.job(&format!("host{i}"), "sleep 1"))
    });
    for host in &mut hosts {
        assert_eq!(
            host.wait(Duration::from_secs(30)),
            Some(0),
            "{}",
            host.stderr()
        );
    }
    assert_eq!(starts(&scratch).len(), 1, "{:#?}", scratch.history());
    let record = occurrence(&endpoint, "nightly", "statements:2026-11-29").expect("recorded");
    assert_eq!(record["state"], "done");
    assert_eq!(record["exit_code"], 0);
    assert_eq!(record["token"], starts(&scratch)[0].token());
}

#[test]
fn six_staggered_hosts_with_hold_at_least_and_no_wait_run_once() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut hosts = staggered(6, Duration::from_secs(3), |i| {
        let mut args = lease_args(&endpoint, "held");
        args.extend(["--no-wait", "--hold-at-least", "5s"]);
        Instance::start(&args, &scratch.job(&format!("host{i}"), "sleep 1"))
    });
    let codes: Vec<_> = hosts
        .iter_mut()
        .map(|h| h.wait(Duration::from_secs(30)))
        .collect();
    assert_eq!(starts(&scratch).len(), 1, "{:#?}", scratch.history());
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(124)).count(),
        5,
        "{codes:?}"
    );
    // The winner held the lease well past its 1 s job, then released it.
    let winner = starts(&scratch)[0].clone();
    let end = scratch
        .wait_record("end", &winner.name, Duration::ZERO)
        .unwrap();
    assert!(end.time() - winner.time() < 2_000_000_000);
    assert!(etcd.keys("/leader-exec/held/").is_empty());
}

/// Leader A starts occurrence `id` and is SIGKILLed mid-run; returns A's token once its command
/// is gone. The record stays `started`.
fn kill_mid_run(etcd: &Etcd, scratch: &Scratch, id: &str, name: &str) -> i64 {
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "unfinished");
    args.extend(["--occurrence", id]);
    let a = Instance::start(&args, &scratch.job(name, "sleep 30"));
    let start = scratch
        .wait_record("start", name, Duration::from_secs(10))
        .expect("a started");
    a.signal(Signal::SIGKILL);
    assert!(wait_for(Duration::from_secs(2), || !alive(start.pid())));
    let record = occurrence(&endpoint, "unfinished", id).expect("recorded");
    assert_eq!(record["state"], "started");
    start.token()
}

/// A leader SIGKILLed mid-run leaves its occurrence `started`; the next leader refuses it (76)
/// in one line that says what may have happened (died mid-run, or finished but could not record
/// it) and how to run it again, naming the store's connection: pasted as printed, that command
/// removes the record, and the next leader runs the occurrence.
pub fn an_unfinished_occurrence_is_refused_with_a_hint_that_works<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut args = lease_args(&endpoint, "unfinished");
    args.retain(|a| *a != "-v");
    args.extend(["--occurrence", "job:1"]);
    let a = Instance::start(&args, &scratch.job("a", "sleep 30"));
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    a.signal(Signal::SIGKILL);
    assert!(wait_for(Duration::from_secs(2), || !alive(start.pid())));

    let mut b = Instance::start(&args, &scratch.job("b", "true"));
    assert_eq!(b.wait(Duration::from_secs(30)), Some(76), "{}", b.stderr());
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());
    let stderr = b.stderr();
    // One line (through pgbouncer in transaction mode, after the warning that NOTIFY is lost).
    let refusal: Vec<&str> = stderr.lines().filter(|l| !l.contains(" WARN ")).collect();
    assert_eq!(refusal.len(), 1, "{stderr}");
    let stderr = refusal[0];
    assert!(
        stderr.contains("died or lost its lease mid-run")
            && stderr.contains("finished but could not record it"),
        "{stderr}"
    );
    let hint = stderr
        .split("to run it again: ")
        .nth(1)
        .and_then(|rest| rest.split(" occurrence=").next())
        .unwrap_or_else(|| panic!("no hint: {stderr}"))
        .trim()
        .to_owned();
    // The address as one `HOST:PORT` or, for a client that takes them apart (`mariadb -h HOST
    // -P PORT`), both.
    let addr = store.addr();
    assert!(
        hint.contains(&addr.to_string())
            || hint.contains(&format!("'{}'", addr.ip()))
                && hint.contains(&format!(" {} ", addr.port())),
        "{}: the hint names no connection: {hint}",
        S::NAME
    );
    let pasted = std::process::Command::new("sh")
        .args(["-c", &hint])
        .output()
        .unwrap();
    assert!(
        pasted.status.success(),
        "{hint}: {}",
        String::from_utf8_lossy(&pasted.stderr)
    );

    let mut c = Instance::start(&args, &scratch.job("c", "true"));
    assert_eq!(c.wait(Duration::from_secs(30)), Some(0), "{}", c.stderr());
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_some());
}

#[test]
fn the_next_leader_applies_the_unfinished_policy() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let policy = |id: &str, policy: &str, name: &str| {
        let mut args = lease_args(&endpoint, "unfinished");
        args.extend(["--occurrence", id, "--if-unfinished", policy]);
        let body =
            format!(r#"echo "env {name} $LEADER_OCCURRENCE $LEADER_PREVIOUS_TOKEN" >> "$h""#);
        let job = scratch.job(name, &body);
        Instance::start(&args, &job)
    };

    // rerun: runs again, told the earlier leader's token; the record ends done, naming it.
    let killed = kill_mid_run(&etcd, &scratch, "job:1", "a1");
    let mut b = policy("job:1", "rerun", "b1");
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let rerun = scratch
        .wait_record("start", "b1", Duration::ZERO)
        .expect("reran");
    assert!(rerun.token() > killed);
    let env = scratch
        .history()
        .into_iter()
        .find(|r| r.kind == "env")
        .expect("job recorded its environment");
    assert_eq!(env.fields[0], "job:1");
    assert_eq!(env.fields[1], killed.to_string(), "LEADER_PREVIOUS_TOKEN");
    let record = occurrence(&endpoint, "unfinished", "job:1").unwrap();
    assert_eq!(record["state"], "done");
    assert_eq!(record["previous_token"], killed);

    // skip: exit 0 without running; the record stays as the earlier leader left it.
    let killed = kill_mid_run(&etcd, &scratch, "job:2", "a2");
    let mut b = policy("job:2", "skip", "b2");
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    assert!(scratch.wait_record("start", "b2", Duration::ZERO).is_none());
    let record = occurrence(&endpoint, "unfinished", "job:2").unwrap();
    assert_eq!(
        (record["state"].as_str(), record["token"].as_i64()),
        (Some("started"), Some(killed))
    );

    // fail (the default): exit 76 (not 125: a human must decide, nothing is misconfigured)
    // with one line saying why, without running.
    let _ = kill_mid_run(&etcd, &scratch, "job:3", "a3");
    let mut args = lease_args(&endpoint, "unfinished");
    args.retain(|a| *a != "-v");
    args.extend(["--occurrence", "job:3"]);
    let mut b = Instance::start(&args, &scratch.job("b3", "true"));
    assert_eq!(b.wait(Duration::from_secs(15)), Some(76), "{}", b.stderr());
    assert!(scratch.wait_record("start", "b3", Duration::ZERO).is_none());
    let stderr = b.stderr();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no recorded outcome"), "{stderr}");
}

#[test]
fn a_stale_leader_cannot_mark_its_occurrence_done() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "stale");
    args.extend(["--occurrence", "report:1", "--if-unfinished", "rerun"]);
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 1"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    // Freeze leader-exec itself (not its command) for longer than the TTL: its command ends
    // meanwhile, its lease expires, and another leader takes over the occurrence.
    a.signal(Signal::SIGSTOP);
    let mut b = Instance::start(&args, &scratch.job("b", "true"));
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let b_start = scratch
        .wait_record("start", "b", Duration::ZERO)
        .expect("b ran");
    assert!(b_start.token() > a_start.token());
    a.signal(Signal::SIGCONT);
    // On waking, A knows its command finished but can no longer prove it leads: its fenced
    // write is rejected, and it says so.
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert!(
        a.stderr().contains("fenced write rejected"),
        "{}",
        a.stderr()
    );
    let record = occurrence(&endpoint, "stale", "report:1").unwrap();
    assert_eq!(record["state"], "done");
    assert_eq!(record["token"], b_start.token());
    assert_eq!(record["previous_token"], a_start.token());
}

#[test]
fn retention_removes_only_expired_records() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let run = |id: &str, retention: &str| {
        let status = leader_exec()
            .args(lease_args(&endpoint, "kept"))
            .args([
                "--occurrence",
                id,
                "--occurrence-retention",
                retention,
                "--",
                "true",
            ])
            .status()
            .unwrap();
        assert!(status.success());
    };
    run("short", "2s");
    run("long", "1h");
    assert!(occurrence(&endpoint, "kept", "short").is_some());
    assert!(
        wait_for(Duration::from_secs(15), || occurrence(
            &endpoint, "kept", "short"
        )
        .is_none()),
        "the expired record was not removed"
    );
    assert!(
        occurrence(&endpoint, "kept", "long").is_some(),
        "a live record was removed"
    );
    // Records live outside the election: no candidate keys were ever confused with them.
    assert!(etcd.keys("/leader-exec/kept/").is_empty());
    assert_eq!(etcd.keys("/leader-exec/.occurrences/kept/").len(), 1);
}
