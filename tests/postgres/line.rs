//! PostgreSQL waiters in a line (`<p>_waiters`): a release wakes the first waiter only, waiters
//! take the lease in the order they joined, a withdrawn waiter leaves the line, a SIGKILLed one
//! is skipped after a TTL, and `status` counts the waiters.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::holders::{TIMING, waiter_rows};
use crate::harness::*;

/// Slack for a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(2);

#[test]
fn waiters_take_the_lease_in_the_order_they_joined() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "line"];
    args.extend(TIMING);
    let _a = Instance::start(&args, &scratch.job("a", &gated(&scratch, "a")));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    // Each joins once the one before it is in line.
    let names = ["b", "c", "d", "e"];
    let mut waiters = Vec::new();
    for (i, name) in names.iter().enumerate() {
        waiters.push(Instance::start(
            &args,
            &scratch.job(name, &gated(&scratch, name)),
        ));
        assert!(
            wait_for(Duration::from_secs(10), || waiter_rows(&pg, "line")
                == i as i64 + 1),
            "{name} not in line"
        );
    }
    let mut leader = "a";
    for name in names {
        open_gate(&scratch, leader);
        let start = scratch
            .wait_record("start", name, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{name} did not follow {leader}: {:?}", scratch.history()));
        let end = scratch
            .wait_record("end", leader, Duration::ZERO)
            .expect("the leader ended");
        // Woken by the release, not by a poll or an expiry.
        let handover = Duration::from_nanos((start.time() - end.time()) as u64);
        assert!(handover < Duration::from_secs(1), "{name}: {handover:?}");
        leader = name;
    }
    open_gate(&scratch, leader);
    for (name, w) in names.iter().zip(&mut waiters) {
        assert_eq!(
            w.wait(Duration::from_secs(20)),
            Some(0),
            "{name}: {}",
            w.stderr()
        );
    }
    let history = scratch.history();
    assert_one_at_a_time(&history);
    let starts: Vec<&str> = history
        .iter()
        .filter(|r| r.kind == "start")
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(starts, ["a", "b", "c", "d", "e"]);
    assert_eq!(waiter_rows(&pg, "line"), 0);
}

#[test]
fn status_counts_waiters_and_a_withdrawn_waiter_leaves_the_line() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "counted"];
    args.extend(TIMING);
    let mut a = Instance::start(&args, &scratch.job("a", &gated(&scratch, "a")));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&args, &scratch.job("b", &gated(&scratch, "b")));
    let mut c = Instance::start(&args, &scratch.job("c", &gated(&scratch, "c")));
    assert!(
        wait_for(Duration::from_secs(10), || status_json(
            &endpoint, "counted"
        )["candidates"]
            == 3),
        "{}",
        status_json(&endpoint, "counted")
    );
    // A waiter that --wait-timeout gives up on leaves nothing in line.
    let mut timed: Vec<&str> = args.clone();
    timed.extend(["--wait-timeout", "2s"]);
    let mut d = Instance::start(&timed, &scratch.job("d", "true"));
    assert_eq!(d.wait(Duration::from_secs(20)), Some(124), "{}", d.stderr());
    // So does one withdrawn by TERM while it waits.
    b.signal(Signal::SIGTERM);
    assert_eq!(b.wait(Duration::from_secs(10)), Some(143), "{}", b.stderr());
    assert_eq!(waiter_rows(&pg, "counted"), 1);
    let json = status_json(&endpoint, "counted");
    assert_eq!(json["candidates"], 2, "{json}");
    // --no-wait: one look, then out of line.
    let mut nowait: Vec<&str> = args.clone();
    nowait.push("--no-wait");
    let mut e = Instance::start(&nowait, &scratch.job("e", "true"));
    assert_eq!(e.wait(Duration::from_secs(20)), Some(124), "{}", e.stderr());
    assert_eq!(waiter_rows(&pg, "counted"), 1);

    open_gate(&scratch, "a");
    scratch
        .wait_record("start", "c", Duration::from_secs(10))
        .expect("c followed a");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0));
    let json = status_json(&endpoint, "counted");
    assert_eq!(json["candidates"], 1, "{json}");
    open_gate(&scratch, "c");
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
    assert_one_at_a_time(&scratch.history());
    assert_eq!(waiter_rows(&pg, "counted"), 0);
}

#[test]
fn a_sigkilled_first_waiter_is_skipped_within_a_ttl() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "skipped"];
    args.extend(TIMING);
    let _a = Instance::start(&args, &scratch.job("a", &gated(&scratch, "a")));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let b = Instance::start(&args, &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || waiter_rows(
        &pg, "skipped"
    ) == 1));
    let mut c = Instance::start(&args, &scratch.job("c", &gated(&scratch, "c")));
    assert!(wait_for(Duration::from_secs(10), || waiter_rows(
        &pg, "skipped"
    ) == 2));
    b.signal(Signal::SIGKILL);
    let killed = Instant::now();
    open_gate(&scratch, "a");
    // The release woke b, which is dead: c, behind it, sees b's row unchanged for a TTL (6 s),
    // deletes it, finds itself first and the lease row free.
    let start = scratch
        .wait_record(
            "start",
            "c",
            Duration::from_secs(6) + Duration::from_secs(1) + SLACK * 3,
        )
        .expect("c took over behind the dead waiter");
    let waited = killed.elapsed();
    eprintln!("c started {waited:?} after b was killed");
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());
    let end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    assert!(start.time() > end.time());
    open_gate(&scratch, "c");
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
    assert_one_at_a_time(&scratch.history());
    assert_eq!(
        waiter_rows(&pg, "skipped"),
        0,
        "{}",
        pg.psql("SELECT id, identity, renewals FROM leader_exec_waiters")
    );
}
