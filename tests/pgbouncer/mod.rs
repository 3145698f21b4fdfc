//! PostgreSQL behind pgbouncer in transaction mode, beyond the store-independent list: many
//! processes at once share the pool's server sessions, so a statement prepared by name in one
//! would collide with another's (`prepared statement "s1" already exists`, pgbouncer before 1.21).

use std::process::Stdio;
use std::time::Duration;

use crate::harness::{Cmd, Instance, PgBouncer, Scratch, Store, campaigning, lease_args, wait_for};

/// A `check` or `status` process, its stderr piped.
fn spawn(endpoint: &str, args: &[&str]) -> std::process::Child {
    Cmd::at(endpoint)
        .args(args)
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn many_processes_at_once_through_pgbouncer_share_its_server_sessions_without_collisions() {
    let bouncer = PgBouncer::start();
    let scratch = Scratch::new();
    let endpoint = bouncer.endpoint();
    let _leader = Instance::start(
        &lease_args(&endpoint, "pool"),
        &scratch.job("a", "sleep 60"),
    );
    let token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token()
        .to_string();
    let waiter = Instance::start(&lease_args(&endpoint, "pool"), &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&waiter)));

    // Three rounds of 12 processes at once: every statement of each goes through the pool, on
    // whichever server session is free (the leader's renewals and the waiter's reads as well).
    for round in 0..3 {
        let children: Vec<_> = (0..12)
            .map(|i| {
                if i % 2 == 0 {
                    spawn(&endpoint, &["check", "--lease", "pool", "--token", &token])
                } else {
                    spawn(&endpoint, &["status", "--lease", "pool", "--json"])
                }
            })
            .collect();
        for (i, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}, process {i}: {stderr}"
            );
            assert!(!stderr.contains("prepared statement"), "{stderr}");
        }
    }
    // The leader kept its lease throughout, and nothing else ran.
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());
    let history = scratch.history();
    assert_eq!(history.iter().filter(|r| r.kind == "start").count(), 1);
}

/// Behind pgbouncer waiters poll (LISTEN cannot work there). A lease row released before the
/// first waiter's next look still goes to that waiter: an instance that arrives meanwhile finds
/// someone in line ahead of it and, with `--no-wait`, exits 124 without running its command.
#[test]
fn a_released_row_goes_to_the_waiter_in_line_not_to_a_newcomer() {
    let bouncer = PgBouncer::start();
    let scratch = Scratch::new();
    let endpoint = bouncer.endpoint();
    let mut a = Instance::start(
        &lease_args(&endpoint, "first"),
        &scratch.job("a", "sleep 2"),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    // b looks at the line once every 3 s: the release lands between two of its looks.
    let slow = [
        "--endpoints",
        &endpoint,
        "--lease",
        "first",
        "--ttl",
        "15s",
        "--renew-deadline",
        "10s",
        "--retry-period",
        "3s",
        "--kill-after",
        "2s",
    ];
    let mut b = Instance::start(&slow, &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || bouncer
        .claims("first")
        == 2));
    // a's command ends; a releases the row and exits. c arrives at once.
    assert_eq!(a.wait(Duration::from_secs(15)), Some(0), "{}", a.stderr());
    let mut c_args = lease_args(&endpoint, "first");
    c_args.push("--no-wait");
    let mut c = Instance::start(&c_args, &scratch.job("c", "true"));
    assert_eq!(c.wait(Duration::from_secs(15)), Some(124), "{}", c.stderr());
    assert!(
        scratch.wait_record("start", "c", Duration::ZERO).is_none(),
        "c ran its command ahead of the waiter in line"
    );
    let b_start = scratch
        .wait_record(
            "start",
            "b",
            Duration::from_secs(3) + Duration::from_secs(5),
        )
        .expect("b took the row at its next look");
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    assert!(b_start.time() > a_end.time());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
}
