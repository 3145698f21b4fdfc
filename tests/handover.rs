//! `resign` as a handover, on every store: the leader stops its command as on TERM, releases
//! its claim only once the whole group is gone, and the next instance starts after that; a
//! frozen leader is named, and `--force` takes over.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::*;

/// --kill-after 2 s: a grace that can be told apart from an immediate SIGKILL.
const TIMING: [&str; 8] = [
    "--ttl",
    "10s",
    "--renew-deadline",
    "5s",
    "--retry-period",
    "500ms",
    "--kill-after",
    "2s",
];

fn args<'a>(endpoint: &'a str, lease: &'a str, identity: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "-v",
        "--endpoints",
        endpoint,
        "--lease",
        lease,
        "--identity",
        identity,
    ];
    args.extend(TIMING);
    args
}

fn resign(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    let out = leader_exec()
        .arg("resign")
        .args(args)
        .args(["--endpoints", endpoint])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `b` stands in line behind the leader (a claim per candidate on every store).
fn wait_in_line<S: Store>(store: &S, b: &Instance, lease: &str) {
    assert!(
        wait_for(Duration::from_secs(10), || campaigning(b)
            && store.claims(lease) == 2),
        "b did not join the line: {}",
        b.stderr()
    );
}

pub fn resign_hands_over_only_after_the_whole_old_group_is_gone<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut a = Instance::start(
        &args(&endpoint, "ho", "host-a:1"),
        &scratch.job("a", &stubborn("a")),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let a_grandchild = scratch.grandchild("a");
    let mut b = Instance::start(
        &args(&endpoint, "ho", "host-b:2"),
        &scratch.job("b", "true"),
    );
    wait_in_line(&store, &b, "ho");

    let asked_ns = now_ns();
    let asked = Instant::now();
    let (code, stdout, stderr) = resign(&endpoint, &["--lease", "ho"]);
    let took = asked.elapsed();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("resigned leader host-a:1") && stdout.contains("handed over"),
        "{stdout}"
    );
    // resign returns once the claim is gone, and the claim goes only after the whole group.
    assert!(
        !alive(a_start.pid()) && !alive(a_grandchild),
        "the claim was gone while a's group still ran (after {took:?})"
    );
    // The command ignores TERM: it got --kill-after (2 s) before SIGKILL, not SIGKILL at once.
    assert!(
        took >= Duration::from_millis(1500),
        "handed over in {took:?}"
    );
    assert_eq!(a.wait(Duration::from_secs(5)), Some(75), "{}", a.stderr());

    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b took over");
    assert!(b_start.token() > a_start.token());
    // The next command started only after the grace, and (its own check, in the history) only
    // once neither the old command nor its grandchild was alive.
    assert!(
        b_start.time() > asked_ns + 1_500_000_000,
        "b started {} ms after resign was asked: before a's --kill-after was over",
        (b_start.time().saturating_sub(asked_ns)) / 1_000_000
    );
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
}

/// Starts leader-exec the way a shell starts a job: in a process group of its own, with its
/// parent (this test) alive in another group of the same session, so that no stop signal sent
/// to it is discarded as one sent to an orphaned group would be.
fn start_as_job(args: &[&str], command: &[String]) -> Instance {
    let mut leader = leader_exec();
    leader.args(args).arg("--").args(command).process_group(0);
    Instance::start_command(&mut leader)
}

pub fn resign_names_a_frozen_leader_and_force_takes_over<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut a = start_as_job(
        &args(&endpoint, "frozen", "host-a:1"),
        &scratch.job("a", "sleep 1000"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(
        &args(&endpoint, "frozen", "host-b:2"),
        &scratch.job("b", "true"),
    );
    wait_in_line(&store, &b, "frozen");

    kill(Pid::from_raw(a.pid()), Signal::SIGSTOP).unwrap();
    assert!(
        wait_for(Duration::from_secs(2), || state_of(a.pid()) == Some('T')),
        "leader-exec did not stop"
    );
    // Well within the TTL (10 s): the claim still stands, nobody answers.
    let asked = Instant::now();
    let (code, stdout, stderr) = resign(
        &endpoint,
        &[
            "--lease",
            "frozen",
            "--token",
            &a_start.token().to_string(),
            "--timeout",
            "2s",
        ],
    );
    let took = asked.elapsed();
    assert_eq!(code, 124, "{stdout}{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "gave up after {took:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("host-a:1")
            && stderr.contains("did not hand over")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(
        alive(a_start.pid()),
        "a's command was stopped by a frozen leader-exec?"
    );
    assert!(
        scratch.wait_record("start", "b", Duration::ZERO).is_none(),
        "b started while a still held its claim"
    );

    // --force deletes the claim at once and says it may overlap; the waiter takes over.
    let (code, stdout, stderr) = resign(
        &endpoint,
        &[
            "--lease",
            "frozen",
            "--token",
            &a_start.token().to_string(),
            "--force",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("resigned leader host-a:1") && stdout.contains("--force"),
        "{stdout}"
    );
    assert!(stderr.contains("may start before"), "{stderr}");
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b took over after --force");
    assert!(b_start.token() > a_start.token());
    // The overlap --force warns about: a's command still runs, its leader-exec frozen.
    assert!(alive(a_start.pid()));

    // Thawed, a finds its claim gone, kills its command and exits 75.
    kill(Pid::from_raw(a.pid()), Signal::SIGCONT).unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert!(!alive(a_start.pid()));
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
}

pub fn resign_with_recampaign_sends_the_leader_to_the_back_of_the_line<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut args_a = args(&endpoint, "back", "host-a:1");
    args_a.push("--recampaign");
    let mut a = Instance::start(&args_a, &scratch.job("a", "sleep 1000"));
    let a_first = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(
        &args(&endpoint, "back", "host-b:2"),
        &scratch.job("b", "sleep 2"),
    );
    wait_in_line(&store, &b, "back");

    let (code, stdout, stderr) = resign(&endpoint, &["--lease", "back"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The waiter goes first, not the leader that handed over (on PostgreSQL both race for the
    // row: the handed-over leader waits a retry period before it tries).
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b took over");
    assert!(b_start.token() > a_first.token());
    assert!(!alive(a_first.pid()));
    assert!(a.running(), "a did not campaign again: {}", a.stderr());
    // Then a, once b's command is done.
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let a_again = scratch
        .wait_record_nth("start", "a", 2, Duration::from_secs(10))
        .expect("a led again after b");
    assert!(a_again.token() > b_start.token());
    let b_end = scratch
        .wait_record("end", "b", Duration::ZERO)
        .expect("b's end recorded");
    assert!(a_again.time() > b_end.time());
    let history = scratch.history();
    assert!(
        history.iter().all(|r| r.kind != "overlap"),
        "jobs overlapped: {history:#?}"
    );
    a.signal(Signal::SIGTERM);
    assert!(a.wait(Duration::from_secs(10)).is_some());
}

/// A leader that got its turn by a handover hears `resign` at once, and so does the one after it:
/// on etcd each waiter's watch for requests is set up while it waits in line (its token is its
/// place), before anyone could ask it to hand over; a request for an earlier leader's token,
/// replayed to that watch, is not taken for one for it.
pub fn resign_reaches_a_leader_that_waited_in_line_and_then_the_next<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut a = Instance::start(
        &args(&endpoint, "chain", "host-a:1"),
        &scratch.job("a", "sleep 1000"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(
        &args(&endpoint, "chain", "host-b:2"),
        &scratch.job("b", "sleep 1000"),
    );
    wait_in_line(&store, &b, "chain");
    let mut c = Instance::start(
        &args(&endpoint, "chain", "host-c:3"),
        &scratch.job("c", "sleep 1000"),
    );
    assert!(
        wait_for(Duration::from_secs(10), || campaigning(&c)
            && store.claims("chain") == 3),
        "c did not join the line: {}",
        c.stderr()
    );

    let (code, stdout, stderr) = resign(&endpoint, &["--lease", "chain"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("resigned leader host-a:1"), "{stdout}");
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b took over");
    assert!(b_start.token() > a_start.token());
    assert!(a.wait(Duration::from_secs(10)).is_some(), "{}", a.stderr());
    // c stays in line: the request named a's token, not b's.
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(b_start.pid()), "b stopped without being asked");

    let (code, stdout, stderr) = resign(&endpoint, &["--lease", "chain"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("resigned leader host-b:2"), "{stdout}");
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(10))
        .expect("c took over");
    assert!(c_start.token() > b_start.token());
    assert!(!alive(b_start.pid()));
    assert!(b.wait(Duration::from_secs(10)).is_some(), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
    c.signal(Signal::SIGTERM);
    assert!(c.wait(Duration::from_secs(10)).is_some());
}

pub fn resign_ends_a_hold_at_least<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut args_a = args(&endpoint, "hold", "host-a:1");
    args_a.extend(["--hold-at-least", "10m"]);
    let mut a = Instance::start(&args_a, &scratch.job("a", "true"));
    scratch
        .wait_record("end", "a", Duration::from_secs(10))
        .expect("a's command ran");
    let mut b = Instance::start(
        &args(&endpoint, "hold", "host-b:2"),
        &scratch.job("b", "true"),
    );
    wait_in_line(&store, &b, "hold");
    assert!(a.running(), "a did not hold the lease: {}", a.stderr());

    let (code, stdout, stderr) = resign(&endpoint, &["--lease", "hold"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(a.wait(Duration::from_secs(5)), Some(75), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
}
