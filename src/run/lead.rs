//! The leading and holding phases: the command runs while the renewal loop vouches for the
//! lease; `--hold-at-least` keeps the claim after it ended.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use super::campaign::wait_for_withdrawal;
use super::health;
use super::once::{Begun, Finished};
use super::stop::{Looks, SteppingDown, Stop, Stopped};
use super::{End, Phase, Runner, Seen, Then, Withdrawal};
use crate::clock::{Clock, sleep_until_some};
use crate::election::{Candidacy, Store};
use crate::ended::Ended;
use crate::exit::{self, ChildStatus, Failure};
use crate::process::Event;
use crate::process::Supervise;
use crate::process::protocol::spawn_failure_code;
use crate::records::occurrence::Record;
use crate::records::published;
use crate::signals;

/// Why the command's group ended while the claim was proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// On its own.
    OnItsOwn,
    /// TERM or INT asked for a stop.
    Asked,
    /// A handover was asked for (`resign`, or the health check failing).
    HandOver,
    /// `--max-runtime` passed.
    MaxRuntime,
}

/// How `--hold-at-least` ended.
pub(super) enum Held {
    /// The hold is over or leadership was lost: release and exit with the command's status.
    Over,
    /// Asked to stop meanwhile: the lease is left to expire.
    Stopped,
    /// `resign` asked for a handover.
    HandOver,
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// The leading phase: runs the command while the renewal loop vouches for the lease.
    pub(super) async fn lead(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Ended>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
        mut handover: Pin<&mut impl Future<Output = &'static str>>,
    ) -> Phase {
        let settings = self.settings;
        let clock = self.clock.clone();
        let acquired = clock.now();
        let since = SystemTime::now();
        let mut env = vec![
            ("LEADER_TOKEN", candidacy.token.to_string()),
            ("LEADER_LEASE", settings.lease.clone()),
            ("LEADER_KEY", candidacy.key.clone()),
            ("LEADER_IDENTITY", settings.identity.clone()),
            ("LEADER_MAX_HOLDERS", settings.max_holders.to_string()),
        ];
        // Absent where the store has no lease ids (PostgreSQL).
        if let Some(lease_id) = candidacy.lease_id_hex() {
            env.push(("LEADER_LEASE_ID", lease_id));
        }
        self.report.emit(super::Event::Elected {
            token: candidacy.token,
        });

        // With --occurrence, the record is written (fenced) before the command may start.
        let mut record: Option<Record> = None;
        let backend = self.backend;
        if let Some(occurrence) = &settings.occurrence {
            let begun = tokio::select! {
                biased;
                lost = &mut renewal => {
                    self.report.emit(super::Event::LostBeforeStart { token: candidacy.token, seen: Seen::Renewal(lost) });
                    Ok(Begun::Lost)
                }
                () = &mut key_gone => {
                    self.report.emit(super::Event::LostBeforeStart { token: candidacy.token, seen: Seen::KeyDeleted });
                    Ok(Begun::Lost)
                }
                // A stop asked for while the record is read or written withdraws at once: the
                // command never starts.
                signal = wait_for_withdrawal(&mut *self.signals) => {
                    self.report.emit(super::Event::Withdrawn { signal, when: Withdrawal::BeforeStart });
                    Ok(Begun::Exit(128 + signal as u8))
                }
                begun = Self::begin_occurrence(backend, settings, &self.report, candidacy, occurrence) => begun,
            };
            match begun {
                Ok(Begun::Run(started)) => {
                    env.push(("LEADER_OCCURRENCE", occurrence.id.clone()));
                    if let Some(previous) = started.previous_token {
                        env.push(("LEADER_PREVIOUS_TOKEN", previous.to_string()));
                    }
                    record = Some(started);
                }
                Ok(Begun::Exit(code)) => return End::release(Then::Exit(code)),
                Ok(Begun::Lost) => return End::release(Then::Lost),
                // Nothing runs yet: let the next candidate go at once.
                Err(e) => return End::release(Then::Fail(e)),
            }
        }

        self.report.emit(super::Event::Starting {
            token: candidacy.token,
        });
        if let Err(e) = self.supervisor.spawn(&env) {
            let e = Failure::usage(format!("cannot reach the supervisor: {e}"));
            return End::release(Then::Fail(e.into()));
        }
        // `--max-runtime` counts from the start asked for; a timer in the loop below, so it can
        // never delay a renewal or a step-down.
        let runtime_bound = settings.max_runtime.map(|bound| clock.now() + bound);
        let mut ran_too_long = false;
        // For `status`: since when it leads, and that the command runs. Written once the
        // supervisor reports the command started (its exec done), never before: the record is
        // for `status` only, so the handover path ends at the start, and etcd's work on the
        // write does not compete with the fork and exec on a small machine. It is the one
        // request a new leader makes after leadership passes (etcd: the watch for `resign`
        // requests is already in place, see `run`).
        let state = published::State::new(
            candidacy,
            &settings.identity,
            since,
            published::Command::Running,
        )
        .with_timing(settings.timing.kill_after, settings.timing.retry_period);
        // With --health-cmd, the verdict too, recorded again whenever it changes (below).
        let checker = self.health.clone();
        let mut recorded = health::published(checker.as_ref());
        let state_key =
            published::holder_key(&settings.scope(), settings.max_holders, candidacy.token);
        let announce = published::write(
            backend,
            candidacy,
            &state_key,
            state.clone().with_health(recorded),
            settings.timing.renew_deadline,
        );
        tokio::pin!(announce);
        let mut announced = false;
        let mut started = false;
        let mut handing_over = false;
        let mut status: Option<ChildStatus> = None;
        // A stop asked for while leading (TERM/INT, a handover): the claim is still proven.
        let mut stop: Option<Stop> = None;
        // See "The rule that keeps the safety path safe" in mod.rs: renewal first, and no arm
        // awaits while the group may be alive.
        let reason = loop {
            tokio::select! {
                biased;
                lost = &mut renewal => break lost,
                () = &mut key_gone => break Ended::KeyDeleted,
                event = self.supervisor.next_event() => match event {
                    Ok(Event::Started(pid)) => {
                        started = true;
                        self.report.emit(super::Event::Started { token: candidacy.token, pid });
                    }
                    Ok(Event::SpawnFailed { errno, message }) => {
                        let command = settings.command[0].to_string_lossy();
                        let e = Failure::new(
                            spawn_failure_code(errno),
                            format!("{command}: {message}"),
                        );
                        return End::release(Then::Fail(e.into()));
                    }
                    Ok(Event::Exited(child)) => {
                        self.report.emit(super::Event::Exited { token: candidacy.token, status: child });
                        status = Some(child);
                    }
                    Ok(Event::GroupEmpty) => {
                        let why = if handing_over {
                            Why::HandOver
                        } else if ran_too_long {
                            Why::MaxRuntime
                        } else if stop.is_some() {
                            Why::Asked
                        } else {
                            Why::OnItsOwn
                        };
                        return self
                            .command_ended(candidacy, &record, status, why, (acquired, since))
                            .await;
                    }
                    Err(e) => {
                        // The supervisor died: the command's group has been SIGKILLed
                        // directly. Release only once it is seen gone.
                        self.report.emit(super::Event::SupervisorDied { token: candidacy.token, error: e.to_string() });
                        let mut stop = Stop::killed(clock.now(), candidacy.token);
                        let never = std::future::pending::<()>();
                        tokio::pin!(never);
                        let e = Failure::usage(format!("supervisor: {e}"));
                        return match self.wait_stopped(&mut stop, never).await {
                            Stopped::Gone => End::release(Then::Fail(e.into())),
                            Stopped::Stuck => End::leave_to_expire(Then::Fail(e.into())),
                        };
                    }
                },
                signal = self.signals.recv() => {
                    self.supervisor.signal(signal);
                    let stops = signals::stops_the_child(signal) && stop.is_none();
                    self.report.emit(super::Event::SignalForwarded { token: candidacy.token, signal, stop: stops });
                    if stops {
                        stop = Some(Stop::signalled(clock.now(), settings.timing.kill_after, Looks::AfterSigkill, candidacy.token));
                    }
                }
                // The stop path's timers: SIGKILL after --kill-after; after it, should the
                // supervisor not report the group empty (stopped, or a process stuck in the
                // kernel), leader-exec looks for itself, bounded.
                _ = sleep_until_some(&clock, stop.as_ref().map(Stop::due_at)) => {
                    let Some(stopping) = stop.as_mut() else { continue };
                    match stopping.on_due(self.supervisor, clock.now(), &self.report) {
                        None => {}
                        Some(Stopped::Gone) if handing_over => return self.handed_over(candidacy),
                        Some(Stopped::Gone) if ran_too_long => {
                            return self
                                .command_ended(candidacy, &record, status, Why::MaxRuntime, (acquired, since))
                                .await;
                        }
                        Some(Stopped::Gone) => {
                            let killed = ChildStatus::Signaled(Signal::SIGKILL as i32);
                            return End::release_at_exit(Then::Exit(status.unwrap_or(killed).code()));
                        }
                        Some(Stopped::Stuck) => {
                            let code = if ran_too_long { exit::MAX_RUNTIME } else { 128 + Signal::SIGKILL as u8 };
                            return End::leave_to_expire(Then::Exit(code));
                        }
                    }
                }
                // A handover is the stop a forwarded TERM starts, with --kill-signal: signal
                // the group first, log after; the claim stays ours (renewed as ever) until the
                // group is gone, so the next leader cannot start beside any of it.
                why = &mut handover, if !handing_over => {
                    handing_over = true;
                    let begins = stop.is_none();
                    if begins {
                        stop = Some(Stop::begin(self.supervisor, settings.kill_signal, clock.now(), settings.timing.kill_after, Looks::AfterSigkill, candidacy.token));
                    }
                    self.report.emit(super::Event::HandingOver { token: candidacy.token, signal: settings.kill_signal, why, stop: begins });
                }
                // `--max-runtime`: the stop a forwarded TERM starts, with --kill-signal (signal
                // first, log after). Not once a stop is under way: that stop goes on as it is.
                _ = sleep_until_some(&clock, runtime_bound), if stop.is_none() => {
                    ran_too_long = true;
                    stop = Some(Stop::begin(self.supervisor, settings.kill_signal, clock.now(), settings.timing.kill_after, Looks::AfterSigkill, candidacy.token));
                    self.report.emit(super::Event::MaxRuntime { token: candidacy.token, signal: settings.kill_signal });
                }
                () = &mut announce, if started && !announced => announced = true,
                // A new verdict for `status`: one write at a time, so a later verdict is never
                // overwritten by an earlier one. A write is an arm like the first: nothing
                // waits for it, and it is dropped with this loop on every way out.
                health = health::changed(checker.as_ref(), recorded), if announced => {
                    recorded = health;
                    announced = false;
                    announce.set(published::write(backend, candidacy, &state_key, state.clone().with_health(health), settings.timing.renew_deadline));
                }
            }
        };
        Phase::SteppingDown(SteppingDown {
            reason,
            status,
            record,
        })
    }

    /// The command's whole group ended while the claim was proven: record the occurrence's
    /// outcome, then hold, hand over, or release.
    async fn command_ended(
        &mut self,
        candidacy: &Candidacy,
        record: &Option<Record>,
        status: Option<ChildStatus>,
        why: Why,
        (acquired, since): (Duration, SystemTime),
    ) -> Phase {
        let code = status.map_or(exit::FAILURE, ChildStatus::code);
        self.report.emit(super::Event::GroupGone {
            code: status.map(ChildStatus::code),
        });
        // A command stopped at --max-runtime did not finish: its record stays `started`, and
        // the next run of the occurrence applies --if-unfinished.
        if let Some(started) = record.as_ref().filter(|_| why != Why::MaxRuntime) {
            match self.finish_occurrence(candidacy, started, code).await {
                Finished::Recorded => {}
                Finished::Rejected => return End::release(Then::Exit(exit::LEADERSHIP_LOST)),
                // The command's own status still says how it went; the record stays
                // `started`, and the next run of the occurrence applies --if-unfinished.
                Finished::Unrecorded => {}
            }
        }
        if why == Why::HandOver {
            return self.handed_over(candidacy);
        }
        if why == Why::MaxRuntime {
            self.report.emit(super::Event::MaxRuntimeStopped {
                token: candidacy.token,
                code,
            });
        }
        match self.settings.hold_at_least {
            // A stop asked for while the command ran (TERM, INT) is not followed by
            // --hold-at-least: as during the hold, leader-exec exits and leaves the lease to
            // expire on its own.
            Some(_) if why == Why::Asked => {
                self.report.emit(super::Event::NotHolding {
                    token: candidacy.token,
                });
                End::leave_to_expire(Then::Exit(code))
            }
            // --max-runtime keeps the hold: the lease is still proven and nobody asked to stop.
            Some(hold) => Phase::Holding {
                code: if why == Why::MaxRuntime {
                    exit::MAX_RUNTIME
                } else {
                    code
                },
                until: acquired + hold,
                since,
                max_runtime: why == Why::MaxRuntime,
            },
            None if why == Why::MaxRuntime => self.ran_too_long(),
            None => End::release_at_exit(Then::Exit(code)),
        }
    }

    /// `--hold-at-least`: keeps the lease (renewing, still able to lose it) until `until`.
    pub(super) async fn hold(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Ended>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
        mut handover: Pin<&mut impl Future<Output = &'static str>>,
        until: Duration,
        since: SystemTime,
    ) -> Held {
        let clock = self.clock.clone();
        if clock.now() >= until {
            return Held::Over;
        }
        // For `status`: holding, not running, and until when.
        let mut state = published::State::new(
            candidacy,
            &self.settings.identity,
            since,
            published::Command::Holding,
        )
        .with_timing(
            self.settings.timing.kill_after,
            self.settings.timing.retry_period,
        );
        let left = until.saturating_sub(clock.now());
        state.hold_until = Some(published::rfc3339(std::time::SystemTime::now() + left));
        let checker = self.health.clone();
        let mut recorded = health::published(checker.as_ref());
        let state_key = published::holder_key(
            &self.settings.scope(),
            self.settings.max_holders,
            candidacy.token,
        );
        let announce = published::write(
            self.backend,
            candidacy,
            &state_key,
            state.clone().with_health(recorded),
            self.settings.timing.renew_deadline,
        );
        tokio::pin!(announce);
        let mut announced = false;
        self.report.emit(super::Event::Holding {
            token: candidacy.token,
        });
        loop {
            tokio::select! {
                biased;
                lost = &mut renewal => {
                    self.report.emit(super::Event::HoldLost { token: candidacy.token, seen: Seen::Renewal(lost) });
                    return Held::Over;
                }
                () = &mut key_gone => {
                    self.report.emit(super::Event::HoldLost { token: candidacy.token, seen: Seen::KeyDeleted });
                    return Held::Over;
                }
                why = &mut handover => {
                    self.report.emit(super::Event::HandingOverWhileHolding { token: candidacy.token, why });
                    return Held::HandOver;
                }
                _ = clock.sleep_until(until) => return Held::Over,
                () = &mut announce, if !announced => announced = true,
                // As while leading: a new verdict is recorded, one write at a time.
                health = health::changed(checker.as_ref(), recorded), if announced => {
                    recorded = health;
                    announced = false;
                    announce.set(published::write(self.backend, candidacy, &state_key, state.clone().with_health(health), self.settings.timing.renew_deadline));
                }
                signal = self.signals.recv() => {
                    if signals::stops_the_child(signal) {
                        self.report.emit(super::Event::HoldStopped { token: candidacy.token, signal });
                        return Held::Stopped;
                    }
                }
            }
        }
    }
}
