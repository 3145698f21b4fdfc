//! The campaigning phase: joining the line (a new candidacy), then waiting for our turn while
//! the renewal loop keeps the candidacy's lease.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::Wait;
use super::{CandidacyLost, Event, NotAcquired, Withdrawal};
use super::{End, Phase, Runner, Then};
use crate::clock::{Clock, sleep_until_some};
use crate::election::{self, Backoff, Candidacy, Reach, Store, StoreError, Turn};
use crate::ended::Ended;
use crate::exit::{self, Failure};
use crate::process::Supervise;
use crate::signals::{self, Signals};

pub(super) enum Joined {
    Candidacy(Candidacy, Duration),
    Exit(u8),
    /// Asked to stop while a campaign was in flight, which created this candidacy: withdraw it
    /// (the one release), then exit with this code.
    Withdrawn(Candidacy, u8),
}

pub(super) enum Waited {
    /// Leading, with this fencing token, as answered to a request sent at this instant.
    Leading(i64, Duration),
    /// The candidacy ended without leading: [`Phase::Released`].
    End(Phase),
}

/// The next signal that withdraws a candidacy (TERM, INT, HUP, QUIT); others are ignored.
pub(super) async fn wait_for_withdrawal(signals: &mut Signals) -> Signal {
    loop {
        let signal = signals.recv().await;
        if signals::withdraws_candidacy(signal) {
            return signal;
        }
    }
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// Creates a candidacy. The first contact with the store is bounded by `--connect-timeout`
    /// (exit 125 when it passes); later campaigns retry until `--wait-timeout`, if any.
    pub(super) async fn join(
        &mut self,
        first: bool,
        give_up_at: Option<Duration>,
    ) -> anyhow::Result<Joined> {
        let connection = &self.settings.connection;
        let limit = if first {
            Some(self.clock.now() + connection.connect_timeout)
        } else {
            give_up_at
        };
        let backend = self.backend;
        let clock = self.clock.clone();
        let mut backoff = Backoff::new();
        let reach = Reach::of(backend);
        let mut last_error: Option<String> = None;
        let mut looked = false;
        let report = self.report.clone();
        let timed_out = |last_error: &Option<String>| -> anyhow::Result<Joined> {
            if first {
                Err(Failure::usage(
                    reach.no_answer(connection.connect_timeout, last_error.as_deref()),
                )
                .into())
            } else {
                report.emit(Event::NotAcquired(NotAcquired::TimeoutCampaigning));
                Ok(Joined::Exit(exit::NOT_ACQUIRED))
            }
        };
        loop {
            // The lease cannot expire before this instant + TTL: the grant is sent after it.
            let sent = clock.now();
            let campaign = backend.campaign();
            tokio::pin!(campaign);
            // At start, a refusal on every endpoint is an answer: no reason to wait it out.
            // Later campaigns (--recampaign) retry through outages until --wait-timeout.
            let refusal = async {
                if first {
                    reach.refusal().await
                } else {
                    std::future::pending().await
                }
            };
            tokio::pin!(refusal);
            let result = loop {
                tokio::select! {
                    // The limit first: once it has passed, an attempt that failed at the same
                    // moment must not buy another round of backoff.
                    biased;
                    _ = sleep_until_some(&clock, limit) => return timed_out(&last_error),
                    signal = self.signals.recv() => {
                        if signals::withdraws_candidacy(signal) {
                            // A campaign in flight may already have created our key: let it
                            // finish briefly, then withdraw it rather than leave it in line.
                            let code = 128 + signal as u8;
                            if let Ok(Ok(candidacy)) =
                                tokio::time::timeout(Duration::from_secs(1), &mut campaign).await
                            {
                                return Ok(Joined::Withdrawn(candidacy, code));
                            }
                            return Ok(Joined::Exit(code));
                        }
                    }
                    result = &mut campaign => break result,
                    refused = &mut refusal => return Err(Failure::usage(refused).into()),
                }
            };
            match result {
                Ok(candidacy) => return Ok(Joined::Candidacy(candidacy, sent)),
                Err(StoreError::Fatal(message)) => {
                    let message = if first {
                        reach.named(&message)
                    } else {
                        message
                    };
                    return Err(Failure::usage(message).into());
                }
                Err(StoreError::Transient(message)) => {
                    self.report.emit(Event::CampaignFailed {
                        error: message.clone(),
                    });
                    last_error = Some(message);
                    if first {
                        let refused = tokio::select! {
                            biased;
                            _ = sleep_until_some(&clock, limit) => return timed_out(&last_error),
                            refused = election::every_address_refuses(&reach.addresses) => refused,
                        };
                        if refused {
                            return Err(Failure::usage(reach.refused()).into());
                        }
                        // Once: an endpoint that answers, but not as the store does, is not a
                        // store slow to answer.
                        if !looked {
                            looked = true;
                            let found = tokio::select! {
                                biased;
                                _ = sleep_until_some(&clock, limit) => return timed_out(&last_error),
                                found = reach.not_the_store() => found,
                            };
                            if let Some(found) = found {
                                return Err(Failure::usage(found).into());
                            }
                        }
                    }
                    // The backoff never outlasts the limit.
                    tokio::select! {
                        biased;
                        _ = sleep_until_some(&clock, limit) => return timed_out(&last_error),
                        () = backoff.sleep() => {}
                    }
                }
            }
        }
    }

    /// Instances already in the election use another `--max-holders`: release (which leaves
    /// nothing in the store) and exit 125 naming both values.
    fn mismatch(&self, theirs: u32) -> Waited {
        let message =
            election::mismatch_message(&self.settings.lease, self.settings.max_holders, theirs);
        Waited::End(End::release(Then::Fail(Failure::usage(message).into())))
    }

    /// Waits until the candidacy leads, renewing its lease meanwhile.
    pub(super) async fn wait_turn(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Ended>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
        mut watch_requests: Pin<&mut impl Future<Output = ()>>,
        give_up_at: Option<Duration>,
    ) -> Waited {
        let backend = self.backend;
        let clock = self.clock.clone();
        let backoff = (self.settings.timing.retry_period / 4).max(Duration::from_millis(20));
        // A --wait-timeout that passed before the first look still gets that look.
        if self.settings.wait == Wait::No || give_up_at.is_some_and(|at| clock.now() >= at) {
            let limit = clock.now() + self.settings.connection.connect_timeout;
            let mut retry = Backoff::new();
            loop {
                let sent = clock.now();
                let turn = tokio::select! {
                    turn = backend.check_turn(candidacy) => turn,
                    _ = clock.sleep_until(limit) => Err(StoreError::Transient("no answer".into())),
                };
                match turn {
                    Ok(Turn::Leading { token }) => return Waited::Leading(token, sent),
                    Ok(Turn::Behind(ahead)) => {
                        let predecessor = crate::escape::escape(&ahead.key);
                        // Name who leads, not only the key ahead (one more read, bounded).
                        let limit = self.settings.timing.retry_period;
                        let observation =
                            match tokio::time::timeout(limit, backend.read_election()).await {
                                Ok(Ok(observation)) => Some(observation),
                                _ => None,
                            };
                        let leader = observation.as_ref().and_then(|o| o.leader().cloned());
                        // With --max-holders above 1: N others hold; name them all.
                        if let Some(o) = observation.as_ref().filter(|o| o.max_holders > 1) {
                            let holders: Vec<String> = o
                                .holders
                                .iter()
                                .map(|h| {
                                    format!(
                                        "{} (token {})",
                                        crate::escape::escape(&h.identity),
                                        h.token
                                    )
                                })
                                .collect();
                            self.report.emit(Event::NotAcquired(NotAcquired::Holders {
                                holders: holders.join(", "),
                                count: o.holders.len(),
                                max_holders: o.max_holders,
                                predecessor,
                            }));
                            return Waited::End(End::release(Then::NotAcquired));
                        }
                        let leader_identity = leader.as_ref().map_or_else(
                            || "unknown".to_owned(),
                            |l| String::from_utf8_lossy(&l.identity).into_owned(),
                        );
                        self.report.emit(Event::NotAcquired(NotAcquired::Leader {
                            identity: leader_identity,
                            token: leader.map(|l| l.token),
                            predecessor,
                        }));
                        return Waited::End(End::release(Then::NotAcquired));
                    }
                    Ok(Turn::Gone) => return Waited::End(End::leave_to_expire(Then::Recampaign)),
                    Ok(Turn::Mismatch { theirs }) => return self.mismatch(theirs),
                    Err(e) if e.is_transient() && clock.now() < limit => retry.sleep().await,
                    Err(e) => {
                        let e = Failure::usage(format!("reading the election: {e}"));
                        return Waited::End(End::release(Then::Fail(e.into())));
                    }
                }
            }
        }
        let turn = election::wait_for_turn(backend, &clock, candidacy, backoff);
        tokio::pin!(turn);
        loop {
            tokio::select! {
                biased;
                lost = &mut renewal => {
                    self.report.emit(Event::CandidacyLost(CandidacyLost::Renewal(lost)));
                    return Waited::End(End::release(Then::Recampaign));
                }
                (turn, sent) = &mut turn => {
                    match turn {
                        Turn::Leading { token } => return Waited::Leading(token, sent),
                        Turn::Mismatch { theirs } => return self.mismatch(theirs),
                        Turn::Behind(_) | Turn::Gone => {}
                    }
                    self.report.emit(Event::CandidacyLost(CandidacyLost::KeyDisappeared));
                    return Waited::End(End::release(Then::Recampaign));
                }
                () = &mut key_gone => {
                    self.report.emit(Event::CandidacyLost(CandidacyLost::KeyDeleted));
                    return Waited::End(End::release(Then::Recampaign));
                }
                // Never completes: sets up the watch for `resign` requests before we lead.
                () = &mut watch_requests => {}
                signal = self.signals.recv() => {
                    if signals::withdraws_candidacy(signal) {
                        self.report.emit(Event::Withdrawn { signal, when: Withdrawal::Campaigning });
                        return Waited::End(End::release(Then::Exit(128 + signal as u8)));
                    }
                    self.report.emit(Event::SignalIgnored { signal });
                }
                _ = sleep_until_some(&clock, give_up_at) => {
                    self.report.emit(Event::NotAcquired(NotAcquired::TimeoutInLine));
                    return Waited::End(End::release(Then::NotAcquired));
                }
                // Campaigns again once a check passes (the gate before joining).
                verdict = super::health::unhealthy(self.health.as_ref()) => {
                    self.report.emit(Event::LeftLine { failures: Some(verdict.failures) });
                    return Waited::End(End::release(Then::Recampaign));
                }
            }
        }
    }
}
