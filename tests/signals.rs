//! Signals reach the command's whole process group, and the group cannot outlive leader-exec.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// A job whose real work is a grandchild (`sh -c 'a & wait'`), which records the signals it gets.
fn grandchild_job(scratch: &Scratch, name: &str) -> Vec<String> {
    scratch.job(
        name,
        r#"sh -c 'trap "echo usr1 grandchild \$(date +%s%N) >> $h" USR1
              trap "echo term grandchild \$(date +%s%N) >> $h; exit 0" TERM
              echo "ready grandchild $$ $(date +%s%N)" >> "$h"
              while :; do sleep 0.05; done' &
           gc=$!; register grandchild $gc
           # The job's own shell survives USR1 (a handler, so the grandchild starts with the
           # default disposition) and keeps waiting for the grandchild; TERM kills it.
           trap : USR1
           while [ -d /proc/$gc ]; do wait $gc; done"#,
    )
}

#[test]
fn forwarded_signals_reach_a_grandchild_and_term_stops_gracefully() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let mut instance = Instance::start(
        &lease_args(&etcd.endpoint(), "fwd"),
        &grandchild_job(&scratch, "a"),
    );
    let ready = scratch
        .wait_record("ready", "grandchild", Duration::from_secs(10))
        .expect("grandchild ready");
    let grandchild = ready.fields[0].parse::<i32>().unwrap();

    instance.signal(Signal::SIGUSR1);
    assert!(
        scratch
            .wait_record("usr1", "grandchild", Duration::from_secs(5))
            .is_some(),
        "USR1 did not reach the grandchild"
    );
    assert!(instance.running(), "USR1 must not stop anything");

    instance.signal(Signal::SIGTERM);
    // The job's shell dies of TERM; the grandchild handles it and exits.
    assert_eq!(
        instance.wait(Duration::from_secs(5)),
        Some(143),
        "{}",
        instance.stderr()
    );
    assert!(
        scratch
            .wait_record("term", "grandchild", Duration::ZERO)
            .is_some()
    );
    assert!(!alive(grandchild));
    assert!(etcd.keys("/leader-exec/").is_empty());
}

#[test]
fn term_escalates_to_sigkill_after_the_grace() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let job = scratch.job(
        "stubborn",
        r#"trap '' TERM
           sleep 1000 & register stubborn $!; echo "ready stubborn $! $(date +%s%N)" >> "$h"
           while :; do sleep 0.05; done"#,
    );
    let mut instance = Instance::start(&lease_args(&etcd.endpoint(), "stubborn"), &job);
    let ready = scratch
        .wait_record("ready", "stubborn", Duration::from_secs(10))
        .expect("job ready");
    let child = scratch
        .wait_record("start", "stubborn", Duration::ZERO)
        .unwrap()
        .pid();
    let grandchild = ready.fields[0].parse::<i32>().unwrap();
    let sent = Instant::now();
    instance.signal(Signal::SIGTERM);
    assert_eq!(
        instance.wait(Duration::from_secs(10)),
        Some(137),
        "{}",
        instance.stderr()
    );
    let took = sent.elapsed();
    assert!(
        took >= KILL_AFTER,
        "SIGKILL came before the grace was over: {took:?}"
    );
    assert!(!alive(child) && !alive(grandchild));
    assert!(!group_alive(child));
}

pub fn killing_leader_exec_kills_the_whole_group<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let job = scratch.job(
        "orphan",
        r#"sleep 1000 & echo "ready orphan $! $(date +%s%N)" >> "$h"; wait"#,
    );
    let mut instance = Instance::start(&lease_args(&etcd.endpoint(), "crash"), &job);
    let ready = scratch
        .wait_record("ready", "orphan", Duration::from_secs(10))
        .expect("job ready");
    let child = scratch
        .wait_record("start", "orphan", Duration::ZERO)
        .unwrap()
        .pid();
    let grandchild = ready.fields[0].parse::<i32>().unwrap();
    assert!(alive(child) && alive(grandchild));

    let killed = Instant::now();
    instance.signal(Signal::SIGKILL);
    assert!(
        wait_for(Duration::from_secs(1), || !alive(child)
            && !alive(grandchild)),
        "the command's group outlived leader-exec by more than a second"
    );
    assert!(killed.elapsed() < Duration::from_secs(1));
    assert!(wait_for(Duration::from_secs(1), || !group_alive(child)));
    assert_eq!(instance.wait(Duration::from_secs(1)), Some(-1));
}
