//! The [`Store`] trait: what the store-independent tests and the chaos suite ask of every store.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use super::Proxy;

/// A store the store-independent tests run against: a real server on free loopback ports,
/// stopped when dropped.
pub trait Store: Sized {
    /// A name for messages.
    const NAME: &'static str;

    fn start() -> Self;

    /// The `--endpoints` value that reaches it.
    fn endpoint(&self) -> String;

    /// Its TCP address (for a proxy in front of it).
    fn addr(&self) -> SocketAddr;

    /// The `--endpoints` value that reaches it through `proxy`.
    fn endpoint_via(&self, proxy: &Proxy) -> String;

    /// Kills it and starts it again on the same port and data; returns once it answers.
    fn restart(&mut self);

    /// How many instances hold a claim on `lease` as the store sees it, leader and waiters:
    /// etcd, the candidate keys; ZooKeeper, the candidate nodes; PostgreSQL, the row while it
    /// has an unexpired holder, and the waiter rows in line whose TTL has not run out.
    fn claims(&self, lease: &str) -> usize;

    /// Whatever is still held anywhere: etcd, election keys and leases; PostgreSQL, rows with an
    /// unexpired holder and unexpired waiter rows. Empty once every instance has released.
    fn held(&self) -> Vec<String>;

    /// SIGSTOP: the server hangs, connections stay open and nothing answers.
    fn freeze(&self);

    /// SIGCONT after `freeze`.
    fn thaw(&self);

    // What the benchmarks (bench/servers.rs) read besides; the defaults fit a store that cannot
    // count its requests.

    /// Starts it for measuring: as `start`, with whatever counts its requests switched on.
    fn start_measured() -> Self {
        Self::start()
    }

    /// The server's name and version, for the report.
    fn version(&self) -> String {
        Self::NAME.to_owned()
    }

    /// How many instances stand in line for `lease` (the leader and its waiters).
    fn in_line(&self, lease: &str) -> usize {
        self.claims(lease)
    }

    /// The requests the server has received so far from clients, where it counts them
    /// (less the harness's own reads of the count).
    fn requests(&self) -> Option<f64> {
        None
    }

    /// Of those, the waiters' periodic requests, where the store has any apart from renewals.
    fn periodic_requests(&self) -> Option<f64> {
        None
    }

    /// For `count` leases of `ttl` that a client takes and then abandons without a word (at
    /// random instants within a second): seconds from the taking's answer to the claim being
    /// gone, sorted. None where the store has no reaper of its own (a waiter ends the lease).
    fn expiry_lag(&self, _count: usize, _ttl: Duration) -> Option<Vec<f64>> {
        None
    }
}

/// The first line of `program --version`-like output.
pub(super) fn first_line_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(if o.stdout.is_empty() {
                &o.stderr
            } else {
                &o.stdout
            })
            .into_owned();
            text.lines().next().unwrap_or_default().trim().to_owned()
        })
        .unwrap_or_else(|e| format!("{program}: {e}"))
}
