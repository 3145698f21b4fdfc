//! Faults between leader-exec and the store: the leader steps down before its lease can expire, and
//! the next leader's command starts only after the old command's whole group is gone. Faults
//! shorter than the renew deadline cost nothing.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// A job that records the signal that stops it (and its end), then exits.
pub const STOPPABLE: &str = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; echo "end a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;

/// Slack for a loaded 2-core machine, in nanoseconds.
const SLACK_NS: u128 = 1_000_000_000;
const fn ns(d: Duration) -> u128 {
    d.as_nanos()
}

/// Starts leader A through `proxy` and waiter B directly; returns them once A's job runs and B
/// stands in line.
fn leader_behind_proxy<S: Store>(
    etcd: &S,
    proxy: &Proxy,
    scratch: &Scratch,
    a_job: &str,
    lease: &str,
) -> (Instance, Instance) {
    let proxied = etcd.endpoint_via(proxy);
    let a = Instance::start(&lease_args(&proxied, lease), &scratch.job("a", a_job));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let direct = etcd.endpoint();
    let b = Instance::start(&lease_args(&direct, lease), &scratch.job("b", "true"));
    assert!(
        wait_for(Duration::from_secs(10), || campaigning(&b)),
        "b did not join the line"
    );
    (a, b)
}

pub fn a_leader_cut_off_from_the_store_stops_its_command_before_the_next_one_starts<S: Store>() {
    let etcd = S::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let job = STOPPABLE;
    let (mut a, mut b) = leader_behind_proxy(&etcd, &proxy, &scratch, job, "cut");

    let cut = now_ns();
    proxy.cut();
    let term = scratch
        .wait_record("term", "a", Duration::from_secs(10))
        .expect("a's command got no signal");
    // The deadline counts from the send of the last renewal that was answered. Renewals are
    // sent one retry period apart, and the one in flight at the cut may be lost with it, so the
    // last answered one was sent at most two retry periods before the cut.
    let earliest = cut + ns(RENEW_DEADLINE) - 2 * ns(RETRY_PERIOD);
    assert!(
        term.time() >= earliest,
        "stepped down {} ms early",
        (earliest - term.time()) / 1_000_000
    );
    assert!(
        term.time() <= cut + ns(RENEW_DEADLINE) + SLACK_NS,
        "stepped down {} ms after the cut",
        (term.time() - cut) / 1_000_000
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());

    // B takes over once A's lease has expired on the server, never before A's command is gone.
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(b_start.time() > term.time());
    assert_one_at_a_time(&scratch.history());
}

pub fn a_leader_behind_a_black_hole_sigkills_a_term_ignoring_group_in_time<S: Store>() {
    let etcd = S::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let job = r#"trap '' TERM
                 sleep 1000 & register a $!; echo "ready a $! $(date +%s%N)" >> "$h"
                 while :; do sleep 0.05; done"#;
    let (mut a, mut b) = leader_behind_proxy(&etcd, &proxy, &scratch, job, "blackhole");
    let child = scratch
        .wait_record("start", "a", Duration::ZERO)
        .unwrap()
        .pid();
    let grandchild = scratch
        .wait_record("ready", "a", Duration::from_secs(5))
        .expect("a ready")
        .fields[0]
        .parse::<i32>()
        .unwrap();

    let frozen = now_ns();
    proxy.freeze();
    // TERM is ignored by both; only the SIGKILL after the grace ends them.
    let gone = wait_for(Duration::from_secs(10), || {
        !alive(child) && !alive(grandchild)
    });
    let dead = now_ns();
    assert!(gone, "a's group survived");
    // As above: the last answered renewal was sent at most two retry periods before the freeze.
    let earliest = frozen + ns(RENEW_DEADLINE) - 2 * ns(RETRY_PERIOD) + ns(KILL_AFTER);
    assert!(
        dead >= earliest,
        "killed {} ms before the grace was over",
        (earliest - dead) / 1_000_000
    );
    assert!(
        dead <= frozen + ns(RENEW_DEADLINE) + ns(KILL_AFTER) + SLACK_NS,
        "killed only {} ms after the freeze",
        (dead - frozen) / 1_000_000
    );
    // Gone well before the lease could expire on the server (last renewal + TTL).
    assert!(dead < frozen + ns(TTL), "the group lived past the lease");
    // Dead, and reaped soon after (a loaded machine may take a moment to reap the zombies).
    assert!(wait_for(Duration::from_secs(1), || !group_alive(child)));
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());

    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(
        b_start.time() > dead,
        "b started before a's group was seen dead"
    );
    assert_one_at_a_time(&scratch.history());
    proxy.heal();
}

pub fn a_store_restart_shorter_than_the_deadline_leaves_the_command_alone<S: Store>() {
    let mut etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // A deadline long enough to cover a store restart on a loaded machine.
    let args = patient_lease_args(&endpoint, "restart");
    let job = STOPPABLE;
    let mut a = Instance::start(&args, &scratch.job("a", job));
    let child = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .pid();
    let status = || status_json(&endpoint, "restart");
    let lease_id_before = status()["leader"]["lease_id"].clone();

    let down = Instant::now();
    etcd.restart();
    let outage = down.elapsed();
    assert!(
        outage < Duration::from_secs(4),
        "etcd took {outage:?} to restart"
    );

    // Past the moment the deadline would have fired without renewals after the restart.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(outage) + Duration::from_secs(2));
    assert!(a.running(), "leader-exec exited: {}", a.stderr());
    assert!(alive(child), "the command was stopped");
    assert!(
        scratch.wait_record("term", "a", Duration::ZERO).is_none(),
        "the command got TERM"
    );
    // Renewals resumed: the store shows the lease refreshed within the last retry periods.
    let status = status();
    let text = status.to_string();
    if S::NAME == "zookeeper" {
        // ZooKeeper does not tell a session's remaining time; the session itself survived the
        // restart (the leader's node is still owned by the session that made it) and the leader
        // is still running past the deadline, so its renewals were answered.
        assert_eq!(status["leader"]["lease_id"], lease_id_before, "{text}");
    } else {
        let remaining = status["leader"]["ttl_remaining_seconds"]
            .as_i64()
            .unwrap_or(0);
        assert!(remaining >= 6, "lease not renewed lately: {text}");
    }

    term_ends_the_one_run(&mut a, &scratch);
}

/// TERM to `a` (the one instance of the test, running STOPPABLE) ends it with 0, and its command
/// started exactly once: it was never stopped and started again.
pub fn term_ends_the_one_run(a: &mut Instance, scratch: &Scratch) {
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(0), "{}", a.stderr());
    let starts = scratch
        .history()
        .iter()
        .filter(|r| r.kind == "start")
        .count();
    assert_eq!(starts, 1);
}

/// The store says the claim is gone (`delete` removes the leader's claim on lease `deleted`
/// behind its back): the next candidate may lead already, so there is no grace period: SIGKILL
/// at once, not --kill-signal.
pub fn a_deleted_claim_kills_its_command_at_once<S: Store>(store: &S, delete: impl FnOnce()) {
    let scratch = Scratch::new();
    let mut a = Instance::start(
        &lease_args(&store.endpoint(), "deleted"),
        &scratch.job("a", STOPPABLE),
    );
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let deleted = Instant::now();
    delete();
    assert!(
        wait_for(RENEW_DEADLINE, || !group_alive(start.pid())),
        "the command's group outlived the deleted claim"
    );
    // Well before a renew deadline (the watch on our own claim noticed), and well before the
    // 1 s grace of --kill-after: the TERM trap never ran.
    let took = deleted.elapsed();
    assert!(took < KILL_AFTER, "took {took:?}");
    assert_eq!(a.wait(Duration::from_secs(5)), Some(75), "{}", a.stderr());
    assert!(
        scratch.wait_record("term", "a", Duration::ZERO).is_none(),
        "the command got the grace period on a claim the store said was gone"
    );
    assert!(store.held().is_empty(), "{:?}", store.held());
}

/// Timing for a pause test: a `--kill-after` long enough (3 s) that a grace given after the pause
/// cannot pass for the "at once" the test asserts. 2 s + 3 s + 0.3 s margin <= 6 s.
const PAUSED_TIMING: [&str; 8] = [
    "--ttl",
    "6s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "400ms",
    "--kill-after",
    "3s",
];

/// A leader-exec and its supervisor stopped (SIGSTOP, as a paused VM or process is) for longer
/// than the TTL, while its command ignores TERM: the lease expires meanwhile and the waiter
/// starts (the pause makes that overlap; the token is the defence). Once resumed, the old
/// leader notices its renew deadline long past, too late for `--kill-after` to end inside the
/// lease: its group gets SIGKILL at once, not a grace of `--kill-after` beside the new leader.
pub fn a_leader_paused_past_the_ttl_sigkills_its_group_when_it_resumes<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = |lease| {
        let mut args = vec!["-v", "--endpoints", &endpoint, "--lease", lease];
        args.extend(PAUSED_TIMING);
        args
    };
    let deaf = "trap '' TERM\nwhile :; do sleep 0.05; done";
    let mut a = Instance::start(&args("paused"), &scratch.job("a", deaf));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&args("paused"), &scratch.job("b", "sleep 1000"));
    assert!(
        wait_for(Duration::from_secs(10), || campaigning(&b)),
        "b did not join the line"
    );
    let supervisor = supervisor_of(a.pid()).expect("a's supervisor");

    let paused = now_ns();
    for pid in [a.pid(), supervisor] {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    }
    // The lease expires (the TTL from a's last renewal), and b leads beside the stopped a.
    let b_start = scratch.wait_record("start", "b", Duration::from_secs(30));
    let resumed = now_ns();
    for pid in [supervisor, a.pid()] {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    }
    let b_start = b_start.expect("b took over while a was stopped");
    assert!(b_start.time() > paused, "b started before a was stopped");
    assert!(
        b_start.token() > a_start.token(),
        "b's token {} is not above a's {}",
        b_start.token(),
        a_start.token()
    );
    assert!(
        wait_for(Duration::from_secs(10), || !alive(a_start.pid())),
        "a's command survived"
    );
    let dead = now_ns();
    // SIGKILL at once: well within --kill-after (3 s) of the resume, with slack for load.
    assert!(
        dead - resumed < 1_000_000_000,
        "a's command died {} ms after a resumed",
        (dead - resumed) / 1_000_000
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert!(alive(b_start.pid()), "b's command was stopped");
    b.signal(Signal::SIGTERM);
    assert!(b.wait(Duration::from_secs(10)).is_some());
}
