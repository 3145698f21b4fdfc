//! A renewal held up by a lock someone else holds names who holds it (`src/election/mysql/
//! waits.rs`): on InnoDB an account that may only read the lease rows can stop every leader.

use std::time::Duration;

use crate::harness::*;

/// Two leaders, one with an account that sees other sessions (PROCESS, through `GRANT ALL ON
/// *.*`), one without; a root session holds a shared lock on every lease row in an open
/// transaction (as `SELECT … LOCK IN SHARE MODE` by any reader does). Both leaders' renewals
/// wait, get no answer in time, and the leaders stop their commands; the first names the root
/// session that holds the lock, the second says which privilege would let it. (Before: only
/// "renewal failed; retrying … no answer within".)
#[test]
fn a_renewal_held_up_by_a_readers_lock_names_who_holds_it() {
    let db = MariaDb::start();
    let admin = db.add_admin();
    let open = db.open_url(db.port);
    let scratch = Scratch::new();
    let start = |url: &str, lease: &str, name: &str| {
        let args = failover_args(url, lease, name);
        let instance = Instance::start(&args, &scratch.job(name, "sleep 60"));
        let record = scratch
            .wait_record("start", name, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("{name} never led: {}", instance.stderr()));
        (instance, record)
    };
    let (mut a, a_start) = start(&admin, "w1", "a");
    let (mut b, b_start) = start(&open, "w2", "b");
    let mut locker = db.sql_in_background(
        "BEGIN; SELECT COUNT(*) FROM leader_exec.leader_exec_leases LOCK IN SHARE MODE; SELECT SLEEP(30); COMMIT",
    );
    for (who, start) in [("a", &a_start), ("b", &b_start)] {
        assert!(
            wait_for(Duration::from_secs(15), || !alive(start.pid())),
            "{who}'s command ran on behind the lock"
        );
    }
    assert!(
        wait_for(Duration::from_secs(10), || a
            .stderr()
            .contains("held by session")),
        "a should name the lock's holder: {}",
        a.stderr()
    );
    assert!(a.stderr().contains("user root"), "{}", a.stderr());
    assert!(
        wait_for(Duration::from_secs(10), || b.stderr().contains("PROCESS")),
        "b should say what would name the holder: {}",
        b.stderr()
    );
    let _ = locker.kill();
    let _ = locker.wait();
    for instance in [&mut a, &mut b] {
        instance.signal(nix::sys::signal::Signal::SIGTERM);
        assert_ne!(instance.wait(Duration::from_secs(20)), None);
    }
}
