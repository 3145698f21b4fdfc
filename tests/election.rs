//! Who runs, in which order, with which token; and what is left in the store afterwards.

use std::process::{Command, Stdio};
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

#[test]
fn the_command_sees_the_documented_environment() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let out = scratch.path("env");
    let script = format!(
        "echo \"$LEADER_TOKEN|$LEADER_LEASE|$LEADER_KEY|$LEADER_IDENTITY|$LEADER_LEASE_ID|$INHERITED\" > '{}'",
        out.display()
    );
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "envy");
    args.extend(["--identity", "host-a:42"]);
    let status = leader_exec()
        .env("INHERITED", "yes")
        .args(&args)
        .args(["--", "sh", "-c", &script])
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(out).unwrap();
    let fields: Vec<&str> = text.trim().split('|').collect();
    let token: i64 = fields[0].parse().expect("LEADER_TOKEN is a decimal");
    assert!(token > 0);
    assert_eq!(fields[1], "envy");
    let lease_id = fields[4];
    assert!(
        i64::from_str_radix(lease_id, 16).is_ok(),
        "LEADER_LEASE_ID {lease_id} is hex"
    );
    assert_eq!(fields[2], format!("/leader-exec/envy/{lease_id}"));
    assert_eq!(fields[3], "host-a:42");
    assert_eq!(fields[5], "yes");
}

#[test]
fn etcdctl_elect_observes_our_leader() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "interop");
    args.extend(["--identity", "host-a:7"]);
    let _leader = Instance::start(&args, &scratch.job("a", "sleep 30"));
    let started = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("leader started");
    let out = Command::new("timeout")
        .args(["2", "etcdctl"])
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .args(["elect", "-l", "/leader-exec/interop"])
        .env_remove("ETCDCTL_ENDPOINTS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let key = lines.next().unwrap_or_default();
    assert!(
        key.starts_with("/leader-exec/interop/"),
        "etcdctl elect -l printed: {stdout}"
    );
    assert_eq!(
        lines.next(),
        Some("host-a:7"),
        "etcdctl elect -l printed: {stdout}"
    );
    // The key etcd shows as leader carries the token our command got.
    let revision = etcd.ctl(&["get", key, "-w", "json"]);
    let json = String::from_utf8_lossy(&revision.stdout);
    assert!(
        json.contains(&format!("\"create_revision\":{}", started.token())),
        "{json}"
    );
}

#[test]
fn an_etcdctl_elect_candidate_is_a_fair_competitor() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // etcd's own election client campaigns first, on the same prefix.
    let mut etcdctl = KillOnDrop(
        Command::new("etcdctl")
            .arg(format!("--endpoints={endpoint}"))
            .args(["elect", "/leader-exec/shared", "etcdctl-proposal"])
            .env_remove("ETCDCTL_ENDPOINTS")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/shared/")
            .len()
            == 1),
        "etcdctl elect did not campaign"
    );
    let mut args = lease_args(&endpoint, "shared");
    args.push("--no-wait");
    let mut refused = Instance::start(&args, &scratch.job("refused", "true"));
    assert_eq!(
        refused.wait(Duration::from_secs(10)),
        Some(124),
        "{}",
        refused.stderr()
    );

    let mut waiting = Instance::start(&lease_args(&endpoint, "shared"), &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || etcd
        .keys("/leader-exec/shared/")
        .len()
        == 2));
    assert!(scratch.history().is_empty(), "ran while etcdctl led");
    // etcdctl resigns on SIGINT; our waiter goes next.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(etcdctl.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let _ = etcdctl.0.wait();
    assert_eq!(
        waiting.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        waiting.stderr()
    );
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_some());
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
