//! Test harness: a real etcd (or PostgreSQL, ZooKeeper, MariaDB) on free loopback ports, a TCP proxy
//! the test can cut or freeze, leader-exec instances, child scripts that report what happened to
//! a history file, and a Curator LeaderLatch participant for ZooKeeper interoperability.
//!
//! One room a concern; everything is re-exported here, so a test says `use crate::harness::*`:
//! - `cmd`: [`Cmd`], the one way a test runs leader-exec (`Cmd::new(&store).args(..).run()`),
//!   and what the tests read from a run (`status_json`, `check_token`, `assert_refused`);
//! - `instance`: the binary under test, [`Instance`] (a running leader-exec, killed when
//!   dropped), the timing flags tests pass;
//! - `scratch`: a test's directory, the job scripts that record to its history file, a job body
//!   that waits for its gate (`gated`, `open_gate`);
//! - `history`: reading a history back and checking it (one at a time, tokens rising);
//! - `procfs`: what /proc says about a process (alive, its children, its name, its group);
//! - `tls`: a CA, server and client certificates made with openssl;
//! - `watch`: `leader-exec watch` in the background, its lines read with a timeout;
//! - `proxy`: the TCP proxy that cuts, black-holes or holds back a connection;
//! - `store`: the [`Store`] trait the store-independent tests are generic over, then one room a
//!   store: `etcd` (one member or a cluster), `postgres`, `pgbouncer` (transaction mode in
//!   front of PostgreSQL), `pg_hostile` (PostgreSQL under a hostile schema), `mariadb` (a
//!   MariaDB and a read-only one), `mysql` (MariaDB as the store list's `mysql` entry), `zookeeper`,
//!   `zookeeper_ensemble`, `curator` (a Curator LeaderLatch participant).
//!
//! The harness is also included by the chaos suite (tests/chaos/main.rs) and the benchmarks'
//! server launcher (bench/servers.rs), each using part of it.

#![allow(dead_code)]

mod cmd;
mod curator;
mod etcd;
mod fake;
mod history;
mod instance;
mod mariadb;
mod mysql;
mod pg_hostile;
mod pgbouncer;
mod postgres;
mod procfs;
mod proxy;
mod scratch;
mod store;
mod tls;
mod watch;
mod zookeeper;
mod zookeeper_ensemble;

// Each includer (the integration tests, the chaos suite, bench/servers.rs) uses part of these.
#[allow(unused_imports)]
pub use cmd::*;
#[allow(unused_imports)]
pub use curator::*;
#[allow(unused_imports)]
pub use etcd::*;
#[allow(unused_imports)]
pub use fake::*;
#[allow(unused_imports)]
pub use history::*;
#[allow(unused_imports)]
pub use instance::*;
#[allow(unused_imports)]
pub use mariadb::*;
#[allow(unused_imports)]
pub use pg_hostile::*;
#[allow(unused_imports)]
pub use pgbouncer::*;
#[allow(unused_imports)]
pub use postgres::*;
#[allow(unused_imports)]
pub use procfs::*;
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use scratch::*;
#[allow(unused_imports)]
pub use store::*;
#[allow(unused_imports)]
pub use tls::*;
#[allow(unused_imports)]
pub use watch::*;
#[allow(unused_imports)]
pub use zookeeper::*;
#[allow(unused_imports)]
pub use zookeeper_ensemble::*;

use std::cell::{Cell, RefCell};
use std::net::TcpListener;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Tests run three at a time (`.cargo/config.toml`), but a test that starts hundreds of
/// instances loads two cores so much that the timing of a test beside it breaks (a store
/// restart outlasting a renew deadline, a connection outlasting --connect-timeout). Such a test
/// calls [`alone`] first and runs with no other test of its binary beside it; every other test
/// shares the machine from the moment it starts a store until its thread ends.
static MACHINE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This test thread's share of [`MACHINE`], taken by the first store it starts.
    static SHARE: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
    /// Set while this thread's test runs [`alone`]: its stores take no share.
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// Called by every store's start: waits while a test runs alone, then holds a share of the
/// machine until this test's thread ends (libtest runs each test on a thread of its own).
pub fn share_machine() {
    if ALONE.with(Cell::get) {
        return;
    }
    SHARE.with(|share| {
        let mut share = share.borrow_mut();
        if share.is_none() {
            *share = Some(MACHINE.read().unwrap_or_else(PoisonError::into_inner));
        }
    });
}

/// The machine to this test alone, until the returned guard drops; waits for the tests
/// already running to end. Call it before starting any store.
#[must_use]
pub fn alone() -> Alone {
    assert!(
        SHARE.with(|share| share.borrow().is_none()),
        "alone() must come before the test starts a store"
    );
    let guard = MACHINE.write().unwrap_or_else(PoisonError::into_inner);
    ALONE.with(|alone| alone.set(true));
    Alone(guard)
}

pub struct Alone(RwLockWriteGuard<'static, ()>);

impl Drop for Alone {
    fn drop(&mut self) {
        ALONE.with(|alone| alone.set(false));
    }
}

/// A loopback port nobody listens on, below the kernel's ephemeral range, and never handed out
/// twice by this process.
///
/// Not port 0's answer: that comes from the ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), the same ports the kernel gives every outgoing
/// connection as its source port. While a server the harness restarts is down, any client on the
/// machine (hundreds of instances in a long chaos run) can be given its port, and the server
/// cannot bind it again ("did not come back"). Below that range only a listener picks a port.
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static HANDED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOW: u16 = 10000;
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    if ephemeral_low > LOW + 1000 {
        // xorshift seeded by the clock and the pid: tests in other processes start elsewhere.
        let mut x = (now_ns() as u64) ^ (u64::from(std::process::id()) << 32) | 1;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = LOW + (x % u64::from(ephemeral_low - LOW)) as u16;
            if !handed.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                handed.insert(port);
                return port;
            }
        }
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free port");
    handed.insert(port);
    port
}

/// Wall-clock nanoseconds, the same clock `date +%s%N` prints in child scripts.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes. Returns whether it held.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
