//! The one release that ends every candidacy ([`Runner::settle`]), and the last release of a
//! run, retried through a store outage.
//!
//! Releasing is not what keeps the commands apart (the safety argument, `src/election/contract.rs`,
//! rests on the claim ending on its own): it decides how soon the next instance starts. A store
//! that gives every lease a full TTL again when it restarts
//! ([`crate::election::Describe::restart_resets_leases`]: etcd, also when a new raft leader takes
//! over, and ZooKeeper) would keep a claim left behind during an outage standing for a full TTL
//! *after the store is back*: `status` shows a leader whose process is long gone, and the next
//! instance in line starts that much later.
//!
//! So when the release that ends a run finds the store unreachable, leader-exec keeps trying for
//! up to one TTL (counted from the first attempt, which starts once the command's whole group is
//! gone), and exits as soon as a release goes through or the store says the claim no longer
//! exists. Past that TTL the claim may have ended anyway had the store kept running, and an
//! outage that long is not worth waiting out: leader-exec exits and the claim ends on its own
//! (with such a store, a TTL after it is back). TERM or INT during the retry end it at once. The
//! claim is never renewed meanwhile.

use std::time::Duration;

use super::{Claim, Event, Reporter, Runner};
use crate::clock::Clock;
use crate::election::{Backoff, Candidacy, Store, StoreError};
use crate::process::Supervise;
use crate::signals::{self, Signals};

/// How long releasing the lease may take before we leave it to expire on its own.
pub const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// How one release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// The claim is released (or no longer existed).
    Done,
    /// The store did not answer in time: worth trying again later.
    Unreachable,
    /// The store refused (permission, invalid request): trying again will not help.
    Refused,
}

impl From<&StoreError> for Release {
    fn from(error: &StoreError) -> Release {
        if error.is_transient() {
            Release::Unreachable
        } else {
            Release::Refused
        }
    }
}

/// How long one release may take before it is abandoned and sent again.
const ATTEMPT: Duration = Duration::from_secs(1);

/// Keeps releasing the claim until it works, `until` (a value of `clock.now()`) passes, or TERM
/// or INT arrives. Returns whether the lease was released.
async fn retry<B: Store, C: Clock>(
    backend: &B,
    candidacy: &Candidacy,
    clock: &C,
    signals: &mut Signals,
    report: &Reporter,
    until: Duration,
) -> bool {
    let store = backend.store_name();
    report.emit(Event::ReleaseRetrying {
        lease_id: candidacy.lease_id_hex(),
        store,
        left: until.saturating_sub(clock.now()),
        restart_resets_leases: backend.restart_resets_leases(),
    });
    let mut backoff = Backoff::new();
    loop {
        let attempt = async {
            match tokio::time::timeout(ATTEMPT, backend.release_claim(candidacy)).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Transient("no answer".into())),
            }
        };
        let result = tokio::select! {
            result = attempt => result,
            () = clock.sleep_until(until) => Err(StoreError::Transient("no answer".into())),
            signal = wait_for_stop(signals) => {
                report.emit(Event::ReleaseAbandoned { signal });
                return false;
            }
        };
        match result {
            Ok(()) => {
                report.emit(Event::ReleasedOnRetry {
                    lease_id: candidacy.lease_id_hex(),
                    store,
                });
                return true;
            }
            Err(e) if e.is_transient() && clock.now() < until => {
                tokio::select! {
                    () = backoff.sleep() => {}
                    // The backoff (up to 1 s) never carries the retry past the bound announced.
                    () = clock.sleep_until(until) => {
                        gave_up(report, store, &e);
                        return false;
                    }
                    signal = wait_for_stop(signals) => {
                        report.emit(Event::ReleaseAbandoned { signal });
                        return false;
                    }
                }
            }
            Err(e) => {
                gave_up(report, store, &e);
                return false;
            }
        }
    }
}

fn gave_up(report: &Reporter, store: &'static str, error: &StoreError) {
    report.emit(Event::ReleaseGaveUp {
        store,
        error: error.to_string(),
    });
}

/// The next TERM or INT; other signals are ignored (there is no command left to forward to).
async fn wait_for_stop(signals: &mut Signals) -> nix::sys::signal::Signal {
    loop {
        let signal = signals.recv().await;
        if signals::stops_the_child(signal) {
            return signal;
        }
    }
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// The one release on the way out of a candidacy, called from one place (after the phase
    /// loop in [`Runner::run`]), so that no exit path can forget it.
    pub(super) async fn settle(&mut self, candidacy: &Candidacy, claim: Claim) {
        match claim {
            Claim::Release => {
                self.release(candidacy).await;
            }
            Claim::ReleaseAtExit => self.release_at_exit(candidacy).await,
            Claim::LeaveToExpire => {}
        }
    }

    /// The release that ends a run, once the command's whole group is gone: when the store is
    /// unreachable it is retried for up to a TTL (see the module comment).
    async fn release_at_exit(&mut self, candidacy: &Candidacy) {
        let until = self.clock.now() + self.settings.timing.ttl;
        if self.release(candidacy).await == Release::Unreachable {
            let clock = self.clock.clone();
            let report = self.report.clone();
            retry(
                self.backend,
                candidacy,
                &clock,
                self.signals,
                &report,
                until,
            )
            .await;
        }
    }

    /// Releases the claim ([`crate::election::Campaign::release_claim`]), retrying briefly; if
    /// that fails the claim ends on its own within the TTL.
    async fn release(&mut self, candidacy: &Candidacy) -> Release {
        let clock = self.clock.clone();
        let limit = clock.now() + RELEASE_BUDGET;
        let mut backoff = Backoff::new();
        loop {
            let result = tokio::select! {
                result = self.backend.release_claim(candidacy) => result,
                _ = clock.sleep_until(limit) => Err(StoreError::Transient("no answer".into())),
            };
            match result {
                Ok(()) => {
                    self.report.emit(Event::Released {
                        lease_id: candidacy.lease_id_hex(),
                    });
                    return Release::Done;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    self.report.emit(Event::ReleaseFailed {
                        error: e.to_string(),
                    });
                    return Release::from(&e);
                }
            }
        }
    }
}
