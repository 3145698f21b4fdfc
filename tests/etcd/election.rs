//! etcd's own side of an election: the key and lease id a command sees, `etcdctl elect` as an
//! observer and as a competitor on the same prefix, a dead member first in the endpoint list,
//! and the leader's key deleted behind its back, with the first waiter's own.

use std::process::Command;
use std::time::Duration;

use crate::faults::{STOPPABLE, a_deleted_claim_kills_its_command_at_once};
use crate::harness::*;

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
    let mut etcdctl = etcd.elect("/leader-exec/shared", "etcdctl-proposal");
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

/// Three members that refuse connections listed before the one that answers: the leader runs
/// its command through three renew deadlines and releases, and no renewal fails. (Before: the
/// client balanced requests over all four, each landing on a dead one failed, and under load
/// the retries ran out the connect timeout or a renew deadline.)
#[test]
fn a_dead_member_in_the_endpoint_list_costs_nothing() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let dead: Vec<String> = (0..3)
        .map(|_| format!("http://127.0.0.1:{}", free_port()))
        .collect();
    let endpoints = format!("{},{}", dead.join(","), etcd.endpoint());
    // Runs for three renew deadlines; a step-down would end it with 75.
    let mut a = Instance::start(
        &lease_args(&endpoints, "deadmember"),
        &scratch.job("a", "sleep 4.5"),
    );
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    assert!(scratch.wait_record("end", "a", Duration::ZERO).is_some());
    let stderr = a.stderr();
    assert!(
        !stderr.contains("renewal failed"),
        "a request went to a dead member:\n{stderr}"
    );
    assert!(etcd.keys("/leader-exec/").is_empty());
}

/// A member that refused connections when the leader started, and answers later, is used: once
/// it carries the leader's requests, the route to the member it started with is cut, and the
/// leader renews through the other for three renew deadlines.
#[test]
fn a_member_that_starts_answering_later_is_used() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let first = Proxy::start(etcd.addr());
    let later_port = free_port();
    let endpoints = format!("{},http://127.0.0.1:{later_port}", first.endpoint());
    let mut a = Instance::start(
        &lease_args(&endpoints, "latermember"),
        &scratch.job("a", "sleep 60"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a never led: {}", a.stderr()));
    let later = Proxy::start_on(later_port, etcd.addr());
    assert!(
        wait_for(Duration::from_secs(15), || a
            .stderr()
            .contains("etcd member that refused connections answers")),
        "the member that started later was never added: {}",
        a.stderr()
    );
    // The renewals ride one stream on the first member's connection until it is cut; then
    // they go through the member added.
    let before = later.forwarded();
    first.cut();
    assert!(
        wait_for(2 * RENEW_DEADLINE, || later.forwarded() > before),
        "nothing went through the member added once the first was cut: {}",
        a.stderr()
    );
    // A leader whose renewals all failed would have stepped down within one renew deadline.
    std::thread::sleep(3 * RENEW_DEADLINE);
    assert!(
        alive(a_start.pid()),
        "the leader stepped down with a member answering: {}",
        a.stderr()
    );
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_ne!(a.wait(Duration::from_secs(15)), None);
}

#[test]
fn deleting_the_leaders_key_kills_its_command_at_once() {
    let etcd = Etcd::start();
    a_deleted_claim_kills_its_command_at_once(&etcd, || {
        let out = etcd.ctl(&["del", "--prefix", "/leader-exec/deleted/"]);
        assert!(out.status.success());
    });
}

/// The first waiter leads on the leader's delete without reading the line again, but only while
/// its own key stands: the whole election deleted in one transaction (`etcdctl del --prefix`,
/// both keys at one revision, the leader's first among the events) is no turn. The waiter
/// starts its command only after it has campaigned again with a new key: a token above its
/// first place.
#[test]
fn a_waiter_whose_key_goes_with_the_leaders_does_not_lead_on_that_delete() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let args = lease_args(&endpoint, "both");
    let mut a = Instance::start(&args, &scratch.job("a", STOPPABLE));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&args, &scratch.job("b", "sleep 30"));
    crate::holders::waits_in_line(&etcd, "both", 2, &b);
    // Its watch on the leader's key and its own is in place.
    std::thread::sleep(Duration::from_millis(300));
    let out = etcd.ctl(&["get", "--prefix", "/leader-exec/both/", "-w", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("etcdctl's json");
    let place = json["kvs"]
        .as_array()
        .expect("two keys")
        .iter()
        .map(|kv| kv["create_revision"].as_i64().unwrap())
        .max()
        .unwrap();
    let out = etcd.ctl(&["del", "--prefix", "/leader-exec/both/"]);
    assert!(out.status.success());
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    let started = scratch.wait_record("start", "b", Duration::from_secs(15));
    let log = b.stderr();
    assert!(
        !log.contains(&format!("elected token={place}")),
        "b led with its deleted key (place {place}): {log}"
    );
    let started = started.unwrap_or_else(|| panic!("b never started: {log}"));
    assert!(started.token() > place, "place {place}: {log}");
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(b.wait(Duration::from_secs(10)).is_some());
}
