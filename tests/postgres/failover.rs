//! A standby promoted after its primary died (docs/postgresql.md, "Caveats"): leader-exec does
//! not tell a promoted standby from the primary it was, so what keeps the promise is synchronous
//! replication, which gives the standby every committed acquisition before the holder hears of
//! it. This is that configuration, tested.

use std::time::Duration;

use crate::harness::*;

/// A primary with a synchronous standby (`synchronous_standby_names = '*'`): a leads on the
/// primary, the primary dies with a cut off, the standby is promoted and b starts there at
/// once. The standby has a's claim, so b waits until it has seen it unchanged for a TTL: b's
/// command starts after a's is gone, more than a TTL after a led, with a greater token.
#[test]
fn a_synchronous_standby_promoted_hands_over_only_after_the_old_holder_is_gone() {
    let mut primary = Postgres::start();
    let standby = primary.start_standby();
    assert!(
        primary.replicate_synchronously(Duration::from_secs(20)),
        "the standby never became synchronous"
    );
    let scratch = Scratch::new();
    let on_primary = primary.url(primary.port);
    let on_standby = standby.url(standby.port);
    let mut a = Instance::start(
        &failover_args(&on_primary, "sync", "host-a"),
        &scratch.job("a", "sleep 60"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a never led: {}", a.stderr()));

    primary.kill();
    standby.promote();
    let mut b = Instance::start(
        &failover_args(&on_standby, "sync", "host-b"),
        &scratch.job("b", "sleep 60"),
    );
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("b never led: {}", b.stderr()));
    assert_handed_over(&scratch, &a_start, &b_start);
    assert_ne!(a.wait(Duration::from_secs(15)), None, "a never exited");
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert_ne!(b.wait(Duration::from_secs(15)), None);
}
