//! PostgreSQL behind pgbouncer in transaction mode, beyond the store-independent list: many
//! processes at once share the pool's server sessions, so a statement prepared by name in one
//! would collide with another's (`prepared statement "s1" already exists`, pgbouncer before 1.21).

use std::process::Stdio;
use std::time::Duration;

use crate::harness::{
    Instance, PgBouncer, Scratch, Store, campaigning, leader_exec, lease_args, wait_for,
};

/// A `check` or `status` process, its stderr piped.
fn spawn(endpoint: &str, args: &[&str]) -> std::process::Child {
    leader_exec()
        .args(args)
        .args(["--endpoints", endpoint])
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
