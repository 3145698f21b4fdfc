//! The state machine of the run form, as data ([`Phase`]) with every transition in one loop
//! ([`Runner::run`]):
//!
//! ```text
//!  Campaigning ──elected──▶ Leading ──command's group empty──▶ Holding (--hold-at-least)
//!     │                      │  │                                 │
//!     │ TERM/INT, timeout,   │  │ deadline missed, lease expired, │ hold over, loss, handover,
//!     │ --no-wait, key lost  │  │ key deleted                     │ TERM/INT
//!     │                      │  ▼                                 │
//!     │                      │ SteppingDown ──group gone/stuck──┐ │
//!     ▼                      ▼                                  ▼ ▼
//!  Released ◀─────────── group empty (own status), handover, TERM stop, failure
//!     │  the one release (now, at exit with retries, or left to expire)
//!     ▼
//!  exit, or Campaigning again (--recampaign, a lost place in line)
//! ```
//!
//! `--max-runtime` is a timer of the leading phase: when it fires, the command gets the stop a
//! forwarded TERM starts; once the group is gone the hold applies, then release and exit 79 (or
//! campaign again). `--splay` happens before the store is opened (`splay.rs`). `--health-cmd`'s
//! verdict is read from memory (`health.rs`): a gate before each join, an arm of the wait for our
//! turn (leave the line), and a second source of the handover request (a leader hands over).
//!
//! A handover asked for by `resign` is the stop a forwarded TERM starts (`--kill-signal`,
//! `--kill-after`, SIGKILL), with the lease renewed until the group is gone; then release,
//! exit 75 (or campaign again). Every stop of the command's group goes through one path,
//! [`stop`]; every candidacy ends in [`Phase::Released`], and the claim is released (or left to
//! expire, never kept alive) in one place after the loop, so no exit path can forget it.
//!
//! One task owns the candidacy, the renewal loop and the supervisor, and `select!`s over lease
//! loss, the command's events, signals and timers.
//!
//! # The rule that keeps the safety path safe
//!
//! Every `select!` that runs while the command's group may be alive keeps three things:
//! - **Renewal first.** It is `biased;` with the renewal loop (then `key_gone`) as its first
//!   arms, so that a loss found at the same instant as any other event wins, and nothing else
//!   can be chosen over it while the deadline passes.
//! - **No `.await` in an arm while the group may be alive**, except the stop path's own bounded
//!   wait ([`Runner::wait_stopped`]): an arm that awaits (a store call, a log write) keeps the
//!   renewal arm from being polled, and the deadline could pass unnoticed. Arms update state
//!   and return to the loop; store calls are arms of their own (`announce`, `handover`).
//! - **The deadline counts from the send instant** of the last successful renewal (see
//!   `lease/renewal.rs`): the lease cannot expire on the server before that instant + TTL, and
//!   validation keeps `renew_deadline + kill_after` below the TTL with a margin, so a stop that
//!   starts at the deadline has the group dead before the lease can end.
//!
//! What the machine does is told outside it only as [`Event`]s, through the one [`Reporter`] the
//! Runner owns: no log line, counter or sd_notify message is written from `run/`. Emitting an
//! event never waits (see telemetry/event.rs for why), so an arm that emits one still keeps the
//! rule above.

mod campaign;
pub mod health;
pub mod held;
mod lead;
mod once;
mod release;
mod settings;
pub mod splay;
mod stop;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::clock::{Clock, sleep_until_some};
use crate::election::{Candidacy, Store};
use crate::exit;
use crate::lease::renewal::{Deadline, keep_renewing};
use crate::signals::Signals;

pub use crate::process::Supervise;
pub use crate::telemetry::event::{
    CandidacyLost, Event, NotAcquired, Recampaign, Report, Reporter, Seen, Sigkill, Withdrawal,
};
use campaign::{Joined, Waited};
use lead::Held;
pub use settings::{Contain, Settings, Wait};
use stop::SteppingDown;

pub struct Runner<'a, B: Store, C: Clock, S: Supervise> {
    pub settings: &'a Settings,
    pub backend: &'a B,
    pub clock: C,
    pub supervisor: &'a mut S,
    pub signals: &'a mut Signals,
    /// `--health-cmd`'s verdicts.
    pub health: Option<health::Checker>,
    /// Where every transition is reported (logs, metrics, sd_notify): never waits.
    pub report: Reporter,
}

/// Where a candidacy is. Each phase's function returns the next phase; [`Runner::run`] holds
/// the loop.
enum Phase {
    /// In line, renewing, waiting for our turn.
    Campaigning,
    /// Elected: the command runs (or is being stopped, on TERM/INT or a handover request,
    /// while the claim is still proven).
    Leading,
    /// The command's group ended; `--hold-at-least` keeps the claim until `until`.
    Holding {
        code: u8,
        until: Duration,
        /// Since when it leads, for `status`.
        since: std::time::SystemTime,
        /// `--max-runtime` stopped the command: the hold ends in [`Then::MaxRuntime`].
        max_runtime: bool,
    },
    /// Leadership was lost while the command ran: stop its group.
    SteppingDown(SteppingDown),
    /// Done with this candidacy.
    Released(End),
}

/// How a candidacy ended: what the one release does, then what comes next.
struct End {
    claim: Claim,
    then: Then,
}

/// What happens to the claim when the candidacy ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// Released, retried briefly ([`release::RELEASE_BUDGET`]).
    Release,
    /// Released, and when the store is unreachable retried for up to a TTL: the release that
    /// ends a run, once the command's whole group is gone.
    ReleaseAtExit,
    /// Left to expire on its own: the group may not be gone, or a stop was asked for.
    LeaveToExpire,
}

/// What comes after the release.
enum Then {
    /// Exit with this code.
    Exit(u8),
    /// Exit 124: `--no-wait` found a leader, or `--wait-timeout` passed while in line.
    NotAcquired,
    /// Exit with this error (its exit code).
    Fail(anyhow::Error),
    /// Leadership was lost and the command's group is gone (or given up on): exit 75, or
    /// campaign again.
    Lost,
    /// `resign` asked for a handover, and the command's group is gone.
    HandedOver,
    /// `--max-runtime` stopped the command, and its group is gone: exit 79, or campaign again.
    MaxRuntime,
    /// Campaign again after `--retry-period` (our place in line was lost).
    Recampaign,
}

impl End {
    fn release(then: Then) -> Phase {
        Phase::Released(End {
            claim: Claim::Release,
            then,
        })
    }

    fn release_at_exit(then: Then) -> Phase {
        Phase::Released(End {
            claim: Claim::ReleaseAtExit,
            then,
        })
    }

    fn leave_to_expire(then: Then) -> Phase {
        Phase::Released(End {
            claim: Claim::LeaveToExpire,
            then,
        })
    }
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// Campaigns, leads, and returns the exit code.
    pub async fn run(&mut self) -> anyhow::Result<u8> {
        let wait_limit = |now: Duration| match self.settings.wait {
            Wait::Until(timeout) => Some(now + timeout),
            Wait::Forever | Wait::No => None,
        };
        let mut give_up_at = wait_limit(self.clock.now());
        let mut first = true;
        loop {
            // Only a healthy instance stands in line (`--health-cmd`).
            if let Some(code) = self.wait_healthy(give_up_at).await {
                return Ok(code);
            }
            let (candidacy, confirmed, mut phase) = match self.join(first, give_up_at).await? {
                Joined::Candidacy(candidacy, confirmed) => {
                    (candidacy, confirmed, Phase::Campaigning)
                }
                Joined::Exit(code) => return Ok(code),
                // Created by a campaign that was in flight when a stop was asked for: withdrawn
                // through the one release below.
                Joined::Withdrawn(candidacy, code) => {
                    (candidacy, self.clock.now(), End::release(Then::Exit(code)))
                }
            };
            let clock = self.clock.clone();
            let deadline = Deadline::new(confirmed, self.settings.timing);
            if matches!(phase, Phase::Campaigning) {
                self.report.emit(Event::Campaigning {
                    first,
                    place: candidacy.place,
                    key: candidacy.key.clone(),
                    confirmed,
                    deadline: deadline.get(),
                });
            }
            first = false;
            let mut keeper = self.backend.keeper(&candidacy);
            let renewal = keep_renewing(
                &mut keeper,
                &clock,
                self.settings.timing,
                confirmed,
                &deadline,
                self.report.clone(),
            );
            tokio::pin!(renewal);
            // Our own key is watched from the start: a deleted key is noticed while waiting, and
            // no request is left to make at the moment leadership passes to us (handover path).
            let backend = self.backend;
            // Boxed, so that it can go before the release (below).
            let mut key_gone = Box::pin(backend.key_gone(&candidacy));
            // The claim as it leads (with its token), once elected.
            let leader = std::cell::OnceCell::new();
            // `resign` asks through the store; the request names this leader's token. Not polled
            // before the candidacy leads.
            // With --max-holders above 1 each holder has a request key of its own.
            let scope = self.settings.scope();
            let max_holders = self.settings.max_holders;
            let retry_period = self.settings.timing.retry_period;
            let health = self.health.clone();
            // Where the token is the candidacy's place (etcd), the watch for requests is set up
            // with the candidacy and polled while it waits, like `key_gone`: at the moment
            // leadership passes there is nothing left to request. A request can only name a
            // leader's token, so one heard while waiting is acted on only once leading, as the
            // read at the start of leading would have found it. Elsewhere it starts once
            // leading, with the token that brought.
            let early = backend
                .token_is_place()
                .then(|| candidacy.leading(candidacy.place));
            let requested =
                std::cell::RefCell::new(Box::pin(futures_util::future::maybe_done(async {
                    let leader: &Candidacy = match &early {
                        Some(early) => early,
                        None => leader.get().expect("polled only once leading"),
                    };
                    let handover_key = crate::records::published::holder_handover_key(
                        &scope,
                        max_holders,
                        leader.token,
                    );
                    backend
                        .handover_requested(leader, &handover_key, retry_period)
                        .await;
                })));
            // Ready once a request came (and on every poll after): the one watch, shared by
            // the wait below and by `handover`, never polled at once (one task).
            let request_heard =
                || std::future::poll_fn(|cx| requested.borrow_mut().as_mut().poll(cx));
            // While waiting: drives the early watch, and never completes (a request heard now
            // is kept for `handover`).
            let watch_requests = async {
                if early.is_some() {
                    request_heard().await;
                }
                std::future::pending::<()>().await
            };
            tokio::pin!(watch_requests);
            // A handover is asked for by `resign`, or by --health-cmd failing --health-retries
            // times in a row; either is the same stop.
            let handover = async {
                // Why, for the log line that follows the signal.
                tokio::select! {
                    () = request_heard() => "resign asked for a handover",
                    _ = health::unhealthy(health.as_ref()) => {
                        "the health check failed --health-retries times in a row (--health-cmd)"
                    }
                }
            };
            tokio::pin!(handover);
            let mut led = false;
            let end = loop {
                phase = match phase {
                    Phase::Campaigning => {
                        match self
                            .wait_turn(
                                &candidacy,
                                renewal.as_mut(),
                                key_gone.as_mut(),
                                watch_requests.as_mut(),
                                give_up_at,
                            )
                            .await
                        {
                            // The token may be known only now (a store with one lease row per
                            // name), and the lease proven only from the request that acquired
                            // it: no earlier renewal may stretch the deadline past that
                            // request's send instant + renew deadline.
                            Waited::Leading(token, sent) => {
                                deadline.cap(sent + self.settings.timing.renew_deadline);
                                // A store that says its tokens are places leads with its place.
                                debug_assert!(early.as_ref().is_none_or(|e| e.token == token));
                                let _ = leader.set(candidacy.leading(token));
                                // The renewal loop would report this too, but only once polled
                                // again: never start the command on a lease we can no longer
                                // vouch for.
                                if clock.now() >= deadline.get() {
                                    self.report.emit(Event::CandidacyLost(
                                        CandidacyLost::ElectedPastDeadline,
                                    ));
                                    End::release(Then::Recampaign)
                                } else if self.health.as_ref().is_some_and(|h| !h.healthy()) {
                                    // The turn came in the same instant as the failing verdict:
                                    // an unhealthy instance does not start the command.
                                    self.report.emit(Event::LeftLine { failures: None });
                                    End::release(Then::Recampaign)
                                } else {
                                    led = true;
                                    Phase::Leading
                                }
                            }
                            Waited::End(phase) => phase,
                        }
                    }
                    Phase::Leading => {
                        let leader = leader.get().expect("elected");
                        self.lead(
                            leader,
                            renewal.as_mut(),
                            key_gone.as_mut(),
                            handover.as_mut(),
                        )
                        .await
                    }
                    Phase::Holding {
                        code,
                        until,
                        since,
                        max_runtime,
                    } => {
                        let leader = leader.get().expect("elected");
                        match self
                            .hold(
                                leader,
                                renewal.as_mut(),
                                key_gone.as_mut(),
                                handover.as_mut(),
                                until,
                                since,
                            )
                            .await
                        {
                            Held::Over if max_runtime => self.ran_too_long(),
                            Held::Over => End::release_at_exit(Then::Exit(code)),
                            // Asked to stop during the hold: leave the lease to expire.
                            Held::Stopped => End::leave_to_expire(Then::Exit(code)),
                            Held::HandOver => self.handed_over(leader),
                        }
                    }
                    Phase::SteppingDown(down) => {
                        let leader = leader.get().expect("elected");
                        self.step_down(leader, down, key_gone.as_mut(), deadline.get())
                            .await
                    }
                    Phase::Released(end) => break end,
                };
            };
            // The one release: of the claim as it leads, or of the candidacy in line.
            let claim = leader.get().unwrap_or(&candidacy);
            // Nothing polls the watch on our own key any more: it goes before the release, so
            // that the store has no watcher of ours to tell of the delete (etcd: the waiter
            // behind is the only one, as with etcdctl) and this process is not woken by it
            // while the next leader starts.
            drop(key_gone);
            self.settle(claim, end.claim).await;
            if led && !matches!(end.then, Then::Fail(_)) {
                self.report.emit(Event::LeadEnded {
                    lost: matches!(end.then, Then::Lost | Then::HandedOver),
                });
            }
            match end.then {
                Then::Exit(code) => return Ok(code),
                Then::NotAcquired => {
                    // READY=1 went out when we joined: make sure systemd has read it before
                    // this process is gone.
                    self.report.barrier(Duration::from_secs(1));
                    return Ok(exit::NOT_ACQUIRED);
                }
                Then::Fail(e) => return Err(e),
                Then::Recampaign => {
                    // Not at once: whatever took the candidacy away may still be going on.
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                }
                Then::HandedOver => {
                    self.report.emit(Event::HandoverComplete);
                    if !self.settings.recampaign {
                        return Ok(exit::LEADERSHIP_LOST);
                    }
                    // The back of the line: etcd and ZooKeeper put a new candidacy behind every
                    // waiter anyway; on PostgreSQL, whose line it joins at the back too, this
                    // pause lets the first waiter (woken by the release, or finding it within a
                    // retry period) take the row before the new candidacy's first attempt, which
                    // takes a free row at once.
                    self.report.emit(Event::Recampaigning(Recampaign::Handover));
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                    give_up_at = wait_limit(clock.now());
                }
                Then::Lost if self.settings.recampaign => {
                    self.report.emit(Event::Recampaigning(Recampaign::Loss));
                    give_up_at = wait_limit(clock.now());
                }
                Then::Lost => return Ok(exit::LEADERSHIP_LOST),
                Then::MaxRuntime if self.settings.recampaign => {
                    // As after a handover: the next instance in line goes first.
                    self.report
                        .emit(Event::Recampaigning(Recampaign::MaxRuntime));
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                    give_up_at = wait_limit(clock.now());
                }
                Then::MaxRuntime => return Ok(exit::MAX_RUNTIME),
            }
        }
    }

    /// The end of a handover, once the command's whole group is gone: release the claim, so
    /// that the next instance in line takes over now (with --recampaign briefly, since this
    /// instance campaigns again; else retried as every release at exit).
    fn handed_over(&self, candidacy: &Candidacy) -> Phase {
        self.report.emit(Event::HandedOver {
            token: candidacy.token,
        });
        if self.settings.recampaign {
            End::release(Then::HandedOver)
        } else {
            End::release_at_exit(Then::HandedOver)
        }
    }

    /// `--health-cmd`: waits until the instance is healthy before it joins the line. `Some` is
    /// the exit code when it gives up first: TERM/INT/HUP/QUIT (128+N), `--wait-timeout`, or,
    /// with `--no-wait`, a first verdict that is not healthy (124).
    async fn wait_healthy(&mut self, give_up_at: Option<Duration>) -> Option<u8> {
        let checker = self.health.clone()?;
        if checker.healthy() {
            return None;
        }
        self.report.emit(Event::WaitingForHealth);
        let clock = self.clock.clone();
        let no_wait = self.settings.wait == Wait::No;
        tokio::select! {
            _ = checker.until(true) => None,
            verdict = checker.decided(), if no_wait => {
                if verdict.healthy {
                    return None;
                }
                self.report.emit(Event::NotAcquired(NotAcquired::HealthFailed));
                Some(exit::NOT_ACQUIRED)
            }
            signal = campaign::wait_for_withdrawal(self.signals) => {
                self.report.emit(Event::Withdrawn { signal, when: Withdrawal::WaitingForHealth });
                Some(128 + signal as u8)
            }
            _ = sleep_until_some(&clock, give_up_at) => {
                self.report.emit(Event::NotAcquired(NotAcquired::TimeoutWaitingForHealth));
                Some(exit::NOT_ACQUIRED)
            }
        }
    }

    /// The end of a `--max-runtime` stop, once the command's whole group is gone (and any
    /// `--hold-at-least` is over): released as after a handover.
    fn ran_too_long(&self) -> Phase {
        if self.settings.recampaign {
            End::release(Then::MaxRuntime)
        } else {
            End::release_at_exit(Then::MaxRuntime)
        }
    }
}
