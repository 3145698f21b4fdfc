//! Who runs, in which order, with which token; and what is left in the store afterwards.

use std::time::Duration;

use crate::harness::*;

fn run_in_turn<S: Store>(instances: usize) {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut running: Vec<Instance> = (0..instances)
        .map(|i| {
            let name = format!("job{i}");
            let instance = Instance::start(
                &lease_args(&endpoint, "turns"),
                &scratch.job(&name, "sleep 0.4"),
            );
            std::thread::sleep(Duration::from_millis(50));
            instance
        })
        .collect();
    for instance in &mut running {
        assert_eq!(
            instance.wait(Duration::from_secs(30)),
            Some(0),
            "{}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_one_at_a_time(&history);
    let starts = history.iter().filter(|r| r.kind == "start").count();
    assert_eq!(starts, instances, "{history:#?}");
    assert!(etcd.held().is_empty(), "left behind: {:?}", etcd.held());
}

pub fn two_instances_take_turns<S: Store>() {
    run_in_turn::<S>(2);
}

pub fn three_instances_take_turns_with_increasing_tokens<S: Store>() {
    run_in_turn::<S>(3);
}

pub fn the_next_instance_starts_right_after_the_command_exits<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut first = Instance::start(
        &lease_args(&endpoint, "handover"),
        &scratch.job("a", "sleep 0.5"),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut second = Instance::start(
        &lease_args(&endpoint, "handover"),
        &scratch.job("b", "true"),
    );
    assert_eq!(
        first.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        first.stderr()
    );
    assert_eq!(
        second.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        second.stderr()
    );
    let a_end = scratch
        .wait_record("end", "a", Duration::ZERO)
        .unwrap()
        .time();
    let b_start = scratch
        .wait_record("start", "b", Duration::ZERO)
        .unwrap()
        .time();
    assert!(b_start > a_end);
    let handover = Duration::from_nanos((b_start - a_end) as u64);
    // The lease is revoked when the command exits: nobody waits for the 3 s TTL.
    assert!(
        handover < Duration::from_millis(1500),
        "handover took {handover:?}"
    );
    assert_one_at_a_time(&scratch.history());
    assert!(etcd.held().is_empty(), "left: {:?}", etcd.held());
}

pub fn no_wait_and_wait_timeout_exit_124_and_leave_no_key<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // Nobody leads: --no-wait runs the command like the default does.
    let mut args = lease_args(&endpoint, "free");
    args.push("--no-wait");
    let status = leader_exec()
        .args(&args)
        .args(["--", "true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(etcd.claims("free"), 0);

    let _holder = Instance::start(
        &lease_args(&endpoint, "busy"),
        &scratch.job("holder", "sleep 30"),
    );
    scratch
        .wait_record("start", "holder", Duration::from_secs(10))
        .expect("holder started");

    let mut args = lease_args(&endpoint, "busy");
    args.push("--no-wait");
    let mut no_wait = Instance::start(&args, &scratch.job("no-wait", "true"));
    assert_eq!(
        no_wait.wait(Duration::from_secs(10)),
        Some(124),
        "{}",
        no_wait.stderr()
    );

    let mut args = lease_args(&endpoint, "busy");
    args.extend(["--wait-timeout", "1s"]);
    let started = std::time::Instant::now();
    let mut timed = Instance::start(&args, &scratch.job("timed", "true"));
    assert_eq!(
        timed.wait(Duration::from_secs(10)),
        Some(124),
        "{}",
        timed.stderr()
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");
    assert!(
        waited < Duration::from_secs(5),
        "gave up only after {waited:?}"
    );

    // Only the holder's claim remains.
    assert_eq!(etcd.claims("busy"), 1);
    assert_eq!(
        etcd.held().len(),
        1 + usize::from(S::NAME == "etcd"),
        "{:?}",
        etcd.held()
    );
    let ran: Vec<_> = scratch
        .history()
        .into_iter()
        .filter(|r| r.kind == "start")
        .collect();
    assert_eq!(ran.len(), 1, "{ran:?}");
}

#[test]
fn term_while_campaigning_withdraws_the_candidacy() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let _holder = Instance::start(
        &lease_args(&endpoint, "withdraw"),
        &scratch.job("holder", "sleep 30"),
    );
    scratch
        .wait_record("start", "holder", Duration::from_secs(10))
        .expect("holder started");
    let mut waiter = Instance::start(
        &lease_args(&endpoint, "withdraw"),
        &scratch.job("waiter", "true"),
    );
    assert!(wait_for(Duration::from_secs(10), || etcd
        .keys("/leader-exec/withdraw/")
        .len()
        == 2));
    waiter.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        waiter.wait(Duration::from_secs(5)),
        Some(143),
        "{}",
        waiter.stderr()
    );
    assert_eq!(etcd.keys("/leader-exec/withdraw/").len(), 1);
    assert!(
        scratch
            .wait_record("start", "waiter", Duration::ZERO)
            .is_none()
    );
}
