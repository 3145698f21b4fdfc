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
