//! What a new operator runs into: `resign`, the release retried after an etcd outage, `status`
//! detail, the exit code of a refused occurrence, log lines, timing hints, `--no-wait` under
//! systemd's notify protocol.

use std::time::{Duration, Instant};



use crate::harness::*;

fn run(etcd_endpoint: &str, args: &[&str]) -> (i32, String, String) {
    let out = leader_exec()
        .args(args)
        .args(["--endpoints", etcd_endpoint])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn resign_moves_leadership_only_from_the_named_token() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // TTL 8 s: a handover within 4 s is the resignation, not an expiry.
    let mut args_a = patient_lease_args(&endpoint, "rs");
    args_a.extend(["--identity", "host-a:1"]);
    let mut a = Instance::start(&args_a, &scratch.job("a", "sleep 30"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut args_b = patient_lease_args(&endpoint, "rs");
    args_b.extend(["--identity", "host-b:2"]);
    let mut b = Instance::start(&args_b, &scratch.job("b", "sleep 30"));
    assert!(wait_for(Duration::from_secs(10), || etcd
        .keys("/leader-exec/rs/")
        .len()
        == 2));

    // A token that is not the leader's: nothing happens.
    let wrong = (a_start.token() + 1000).to_string();
    let (code, stdout, stderr) = run(&endpoint, &["resign", "--lease", "rs", "--token", &wrong]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("is not the current leader's") && stderr.contains("host-a:1"),
        "{stderr}"
    );
    assert!(a.running());
    assert_eq!(etcd.keys("/leader-exec/rs/").len(), 2);
    let (code, _, stderr) = run(&endpoint, &["resign", "--lease", "rs", "--token", "x"]);
    assert_eq!(code, 125, "{stderr}");

    // The leader's own token: its key goes, it stops at once, the waiter takes over.
    let token = a_start.token().to_string();
    let resigned_at = Instant::now();
    let (code, stdout, stderr) = run(&endpoint, &["resign", "--lease", "rs", "--token", &token]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("resigned leader host-a:1 (token {token}")),
        "{stdout}"
    );
    assert_eq!(a.wait(Duration::from_secs(4)), Some(75), "{}", a.stderr());
    assert!(!alive(a_start.pid()), "a's command survived the resignation");
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(4))
        .expect("b took over");
    assert!(
        resigned_at.elapsed() < Duration::from_secs(5),
        "handover took {:?}",
        resigned_at.elapsed()
    );
    assert!(b_start.token() > a_start.token());
    assert!(a.stderr().contains("our election key was deleted"), "{}", a.stderr());

    // Without --token: whoever leads now.
    let (code, stdout, stderr) = run(&endpoint, &["resign", "--lease", "rs"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("resigned leader host-b:2"), "{stdout}");
    assert_eq!(b.wait(Duration::from_secs(4)), Some(75), "{}", b.stderr());

    // Nobody left.
    assert!(wait_for(Duration::from_secs(5), || etcd
        .keys("/leader-exec/rs/")
        .is_empty()));
    let (code, _, stderr) = run(&endpoint, &["resign", "--lease", "rs"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("no leader"), "{stderr}");
    assert_one_at_a_time(&scratch.history());
}

/// The leader's command ends while etcd is down; etcd comes back (resetting every lease's TTL).
/// The leader has kept retrying its release, so its key goes as soon as etcd answers, not a
/// full TTL later.
#[test]
fn a_release_that_failed_during_an_outage_is_retried_when_etcd_is_back() {
    let mut etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done",
        go.display()
    );
    // TTL 8 s, renew deadline 5 s: the command ends well inside the deadline.
    let mut a = Instance::start(
        &patient_lease_args(&endpoint, "outage"),
        &scratch.job("a", &body),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    etcd.kill();
    std::fs::write(&go, "").unwrap();
    scratch
        .wait_record("end", "a", Duration::from_secs(5))
        .expect("a's command ended");
    // The first release fails (etcd is down); leader-exec is still there, retrying.
    assert!(
        wait_for(Duration::from_secs(5), || a
            .stderr()
            .contains("retrying the release")),
        "{}",
        a.stderr()
    );
    assert!(a.running(), "gave up on the release at once: {}", a.stderr());
    etcd.restart();
    let back = Instant::now();
    // Gone within a few seconds of etcd answering again; without the retry it would stand for
    // the full 8 s TTL that etcd's restart gave it.
    assert!(
        wait_for(Duration::from_secs(4), || etcd
            .keys("/leader-exec/outage/")
            .is_empty()),
        "the key outlived etcd's return by {:?}",
        back.elapsed()
    );
    assert_eq!(a.wait(Duration::from_secs(3)), Some(0), "{}", a.stderr());
    assert!(
        a.stderr().contains("lease released once etcd answered again"),
        "{}",
        a.stderr()
    );
}

/// TERM during the retry ends it at once, with the command's status.
#[test]
fn term_ends_the_release_retry_at_once() {
    let mut etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; exit 3",
        go.display()
    );
    let mut a = Instance::start(
        &patient_lease_args(&endpoint, "outage-term"),
        &scratch.job("a", &body),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    etcd.kill();
    std::fs::write(&go, "").unwrap();
    assert!(
        wait_for(Duration::from_secs(8), || a
            .stderr()
            .contains("retrying the release")),
        "{}",
        a.stderr()
    );
    let asked = Instant::now();
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(2)), Some(3), "{}", a.stderr());
    assert!(asked.elapsed() < Duration::from_secs(2));
    assert!(
        a.stderr().contains("stopped retrying the release"),
        "{}",
        a.stderr()
    );
}
