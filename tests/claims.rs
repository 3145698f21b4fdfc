//! What the harness counts as standing in line, on every store: the leader and every waiter
//! (etcd's candidate keys, ZooKeeper's candidate nodes, PostgreSQL's and MySQL's lease row and
//! waiter rows),
//! so that a test can wait for "N candidates registered" the same way on each.

use std::time::Duration;

use crate::harness::*;

pub fn claims_count_the_leader_and_every_waiter<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let go = scratch.path("go");
    let hold = format!(r#"while [ ! -e '{}' ]; do sleep 0.05; done"#, go.display());
    let mut a = Instance::start(&lease_args(&endpoint, "line"), &scratch.job("a", &hold));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&lease_args(&endpoint, "line"), &scratch.job("b", "true"));
    let mut c = Instance::start(&lease_args(&endpoint, "line"), &scratch.job("c", "true"));
    assert!(
        wait_for(Duration::from_secs(10), || store.claims("line") == 3),
        "{}: {} claims on line, not the leader and two waiters: {:?}\n{}\n{}",
        S::NAME,
        store.claims("line"),
        store.held(),
        b.stderr(),
        c.stderr()
    );
    assert!(b.running() && c.running(), "a waiter exited");
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());

    std::fs::write(&go, "").unwrap();
    for (name, instance) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        assert_eq!(
            instance.wait(Duration::from_secs(20)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    assert_one_at_a_time(&scratch.history());
    // Every claim released: the leader's and each waiter's.
    assert!(
        wait_for(Duration::from_secs(5), || store.claims("line") == 0
            && store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}
