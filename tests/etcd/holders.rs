//! `--max-holders` on etcd: the key layout (a marker beside each candidate key only with N > 1,
//! `etcdctl elect` candidates counted as N = 1), and a waiter woken only when it may hold.

use std::time::Duration;

use crate::harness::*;
use crate::holders::*;

/// The lease id in hex: the last segment of a key.
fn id_of(key: &str) -> &str {
    key.rsplit('/').next().unwrap()
}

#[test]
fn a_marker_with_n_stands_beside_each_candidate_key_only_with_more_than_one_holder() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut two = Instance::start(
        &holder_args(&endpoint, "lay", "2"),
        &holder_job(&scratch, "a", &gated(&scratch, "a")),
    );
    let mut one = Instance::start(
        &lease_args(&endpoint, "solo"),
        &holder_job(&scratch, "s", &gated(&scratch, "s")),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    scratch
        .wait_record("start", "s", Duration::from_secs(10))
        .expect("s started");

    let candidates = etcd.keys("/leader-exec/lay/");
    assert_eq!(candidates.len(), 1, "{candidates:?}");
    let markers = etcd.keys("/leader-exec/.holders/");
    assert_eq!(
        markers,
        [format!(
            "/leader-exec/.holders/lay/{}",
            id_of(&candidates[0])
        )],
        "one marker, the candidate's lease id"
    );
    let out = etcd.ctl(&["get", "--print-value-only", &markers[0]]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
    // The marker lives on the candidate's lease.
    let out = etcd.ctl(&["get", "-w", "json", &markers[0]]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lease = json["kvs"][0]["lease"].as_i64().unwrap();
    assert_eq!(format!("{lease:x}"), id_of(&candidates[0]));
    // N = 1: the candidate key alone, as `etcdctl elect` writes it.
    assert_eq!(etcd.keys("/leader-exec/solo/").len(), 1);
    assert!(
        !etcd
            .keys("/leader-exec/")
            .iter()
            .any(|k| k.contains("solo") && k.contains(".holders")),
        "{:?}",
        etcd.keys("/leader-exec/")
    );

    // status --all: the markers are no election; each lease its oldest holder.
    let out = Cmd::bare()
        .args(["status", "--all", "--json", "--endpoints", &endpoint])
        .output();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let leases: Vec<(&str, i64)> = json["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["lease"].as_str().unwrap(),
                l["leader"]["token"].as_i64().unwrap(),
            )
        })
        .collect();
    let token = |name| {
        scratch
            .wait_record("start", name, Duration::ZERO)
            .unwrap()
            .token()
    };
    assert_eq!(
        leases,
        [("lay", token("a")), ("solo", token("s"))],
        "{json}"
    );

    open_gate(&scratch, "a");
    open_gate(&scratch, "s");
    assert_eq!(
        two.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        two.stderr()
    );
    assert_eq!(
        one.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        one.stderr()
    );
    assert!(etcd.keys("/leader-exec/.holders/").is_empty());
    assert!(etcd.held().is_empty(), "{:?}", etcd.held());
}

#[test]
fn an_etcdctl_elect_candidate_counts_as_one_holder() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let _etcdctl = etcd.elect("/leader-exec/mixed", "etcdctl-proposal");
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/mixed/")
            .len()
            == 1),
        "etcdctl elect did not campaign"
    );
    let (code, stderr) = run_with(&endpoint, "mixed", "2", &scratch, "two");
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("--max-holders 2") && stderr.contains("--max-holders 1"),
        "{stderr}"
    );
    assert_eq!(etcd.keys("/leader-exec/mixed/").len(), 1);
    assert!(etcd.keys("/leader-exec/.holders/").is_empty());
    assert!(scratch.history().is_empty());
    // status: one leader, N = 1.
    let out = Cmd::bare()
        .args([
            "status",
            "--lease",
            "mixed",
            "--json",
            "--endpoints",
            &endpoint,
        ])
        .output();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["max_holders"], 1, "{json}");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
}

/// How many times an instance logged that it waits (once per look that found it behind).
fn waits(instance: &Instance) -> usize {
    instance
        .stderr()
        .matches("waiting for the candidate ahead to go")
        .count()
}

#[test]
fn one_holder_leaving_wakes_only_the_first_waiter() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = holder_args(&endpoint, "herd", "2");
    args.push("-vv");
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut holders = Vec::new();
    for name in ["a", "b"] {
        holders.push(start(name));
        scratch
            .wait_record("start", name, Duration::from_secs(10))
            .expect("a holder started");
    }
    let names = ["w1", "w2", "w3", "w4", "w5", "w6"];
    let mut waiters = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let waiter = start(name);
        waits_in_line(&etcd, "herd", 3 + i, &waiter);
        assert!(wait_for(Duration::from_secs(10), || waits(&waiter) == 1));
        waiters.push(waiter);
    }
    let before: Vec<usize> = waiters.iter().map(waits).collect();
    assert_eq!(before, [1; 6], "each waiter looked once");

    open_gate(&scratch, "a");
    scratch
        .wait_record("start", "w1", Duration::from_secs(10))
        .expect("w1 took a's place");
    // w1's take wakes w2, its successor, which now waits first in line behind b and w1.
    assert!(
        wait_for(Duration::from_secs(10), || waits(&waiters[1]) == 2),
        "{}",
        waiters[1].stderr()
    );
    // Time for any other wake-up to show.
    std::thread::sleep(Duration::from_secs(1));
    let after: Vec<usize> = waiters.iter().map(waits).collect();
    assert_eq!(after, [1, 2, 1, 1, 1, 1], "only w1 and then w2 woke");

    for name in ["b"].iter().chain(names.iter()) {
        open_gate(&scratch, name);
    }
    for instance in holders.iter_mut().chain(waiters.iter_mut()) {
        assert_eq!(
            instance.wait(Duration::from_secs(20)),
            Some(0),
            "{}",
            instance.stderr()
        );
    }
    // The gates opened together: start records may come in any order, but the tokens follow
    // the line.
    let history = scratch.history();
    assert_at_most_running(&history, 2);
    let token = |name: &str| {
        starts(&history)
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .token()
    };
    let line: Vec<i64> = ["a", "b"]
        .iter()
        .chain(names.iter())
        .map(|n| token(n))
        .collect();
    assert!(
        line.is_sorted() && line.windows(2).all(|w| w[0] < w[1]),
        "{line:?}"
    );
}

#[test]
fn fifty_waiters_with_three_holders_all_hold_in_turn() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let args = holder_args(&endpoint, "fifty", "3");
    let mut instances: Vec<Instance> = (0..50)
        .map(|i| Instance::start(&args, &holder_job(&scratch, &format!("j{i}"), "sleep 0.05")))
        .collect();
    for instance in &mut instances {
        assert_eq!(
            instance.wait(Duration::from_secs(120)),
            Some(0),
            "{}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_at_most_running(&history, 3);
    let mut tokens: Vec<i64> = starts(&history).iter().map(|r| r.token()).collect();
    assert_eq!(tokens.len(), 50, "{history:#?}");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 50, "every holder its own token");
    assert!(etcd.held().is_empty(), "{:?}", etcd.held());
    assert!(etcd.keys("/leader-exec/.holders/").is_empty());
}
