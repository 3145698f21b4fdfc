//! The one stop path: first signal → grace (`--kill-after`) → SIGKILL → bounded wait for the
//! whole group → give up. Used by a lost leadership (the stepping-down phase), a forwarded TERM
//! or INT and a handover asked for by `resign` (both while leading), and a supervisor that died.
//!
//! Budgets, the same for every user: the grace is `--kill-after` from the first signal (none
//! when the first signal is SIGKILL); the wait is [`KILL_WAIT`] from the instant SIGKILL went.
//! What differs is only *when /proc is looked at* ([`Looks`]):
//! - a loss and a dead supervisor look from the first signal on: the exit code is 75 (or 125)
//!   whatever the command's status, and a supervisor that is stopped or gone must not keep the
//!   step-down waiting;
//! - a forwarded TERM or a handover look only once SIGKILL went: until then the supervisor's
//!   `empty` carries the command's own status, which is leader-exec's exit code, and the claim
//!   is still proven (a loss meanwhile ends leading and starts the stepping-down phase).
//!
//! SIGKILL goes to the group from one place, [`Stop::kill`]; nothing in a stop waits before a
//! signal (the event that reports it comes after it, and emitting it never waits either).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{End, Phase, Reporter, Runner, Sigkill, Then};
use crate::clock::Clock;
use crate::election::{Candidacy, Store};
use crate::ended::Ended;
use crate::exit::ChildStatus;
use crate::process::Supervise;
use crate::process::{Event, Group};
use crate::records::occurrence::Record;
use crate::signals;

/// How long the command's group may outlive SIGKILL before leader-exec stops waiting for it
/// (a process in uninterruptible sleep cannot die until the kernel lets it), logs the pids left,
/// leaves the lease to expire and exits. Documented in docs/safety.md (step-down is bounded).
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often a stop looks in /proc for what is left of the command's group.
pub const GROUP_POLL: Duration = Duration::from_millis(20);

/// When a stop looks in /proc for the group (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Looks {
    FromTheStart,
    AfterSigkill,
}

/// How a stop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// No process of the group is left.
    Gone,
    /// The group survived SIGKILL for [`KILL_WAIT`]: given up on (logged), the lease is left to
    /// expire.
    Stuck,
}

/// A stop in progress, as data: the caller's `select!` waits for [`Stop::due_at`] and calls
/// [`Stop::on_due`]; events and signals stay with the caller.
#[derive(Debug)]
pub struct Stop {
    token: i64,
    /// The end of the grace, while SIGKILL has not gone.
    kill_at: Option<Duration>,
    /// When SIGKILL went.
    killed_at: Option<Duration>,
    next_look: Option<Duration>,
}

impl Stop {
    /// Sends `first` to the group now (SIGKILL: no grace) and starts the grace.
    pub fn begin(
        group: &mut impl Supervise,
        first: Signal,
        now: Duration,
        kill_after: Duration,
        looks: Looks,
        token: i64,
    ) -> Stop {
        if first == Signal::SIGKILL {
            let mut stop = Stop {
                token,
                kill_at: None,
                killed_at: None,
                next_look: Some(now),
            };
            stop.kill(group, now);
            return stop;
        }
        group.signal(first);
        Stop::signalled(now, kill_after, looks, token)
    }

    /// The first signal has already gone (a forwarded TERM or INT, sent as it came).
    pub fn signalled(now: Duration, kill_after: Duration, looks: Looks, token: i64) -> Stop {
        Stop {
            token,
            kill_at: Some(now + kill_after),
            killed_at: None,
            next_look: (looks == Looks::FromTheStart).then_some(now),
        }
    }

    /// The group was SIGKILLed already (by the supervisor handle, when the supervisor died).
    pub fn killed(now: Duration, token: i64) -> Stop {
        Stop {
            token,
            kill_at: None,
            killed_at: Some(now),
            next_look: Some(now),
        }
    }

    pub fn sigkilled(&self) -> bool {
        self.killed_at.is_some()
    }

    /// Sends SIGKILL to the group (once) and starts the bounded wait. The only place the run
    /// state machine sends SIGKILL.
    pub fn kill(&mut self, group: &mut impl Supervise, now: Duration) {
        if self.sigkilled() {
            return;
        }
        group.signal(Signal::SIGKILL);
        self.kill_at = None;
        self.killed_at = Some(now);
        self.next_look.get_or_insert(now + GROUP_POLL);
    }

    /// The next instant something is due: SIGKILL, a look in /proc, giving up.
    pub fn due_at(&self) -> Duration {
        [self.kill_at, self.next_look, self.give_up_at()]
            .into_iter()
            .flatten()
            .min()
            .expect("a stop always has a grace or a wait")
    }

    fn give_up_at(&self) -> Option<Duration> {
        self.killed_at.map(|at| at + KILL_WAIT)
    }

    /// Does what is due at `now`; `Some` once the stop is over.
    pub fn on_due(
        &mut self,
        group: &mut impl Supervise,
        now: Duration,
        report: &Reporter,
    ) -> Option<Stopped> {
        if self.kill_at.is_some_and(|at| now >= at) {
            self.kill(group, now);
            report.emit(super::Event::Sigkill {
                token: self.token,
                why: Sigkill::KillAfter,
            });
        }
        let give_up = self.give_up_at().is_some_and(|at| now >= at);
        if (give_up || self.next_look.is_some_and(|at| now >= at)) && group.group() == Group::Gone {
            return Some(Stopped::Gone);
        }
        if give_up {
            // A supervisor that never said whether it started the command may be stopped with
            // the request in its buffer: it must not start it later.
            group.cancel_pending_spawn();
            if group.group() == Group::Gone {
                return Some(Stopped::Gone);
            }
            report_stuck(group, self.token, report);
            return Some(Stopped::Stuck);
        }
        if self.next_look.is_some_and(|at| now >= at) {
            self.next_look = Some(now + GROUP_POLL);
        }
        None
    }
}

/// Whether a stop that begins at `now` must skip the grace: the lease, last proven by the request
/// that set the renew deadline `deadline`, may end before `--kill-after` does (see
/// [`crate::lease::timing::Timing::grace_fits`]).
///
/// Why SIGKILL at once is then the safe choice: the grace is only given on the promise that the
/// lease outlives it, which validation keeps for a stop that begins at the deadline. A stop that
/// begins later — leader-exec (or its whole host) was paused, stopped by SIGSTOP, or starved
/// past the deadline — may find the lease already expired and another leader's command already
/// running; nothing local can tell, since the proof is all there is. A grace then would let the
/// old command run beside the new one for up to `--kill-after` more; SIGKILL ends the overlap the
/// pause made as soon as this process runs again. Pure arithmetic on the clock, decided before
/// the first signal: nothing on the way from the deadline to SIGKILL waits.
///
/// `lease` is how long the store keeps a lease from a proof's send instant when that is less
/// than `--ttl` (ZooKeeper's negotiated session timeout, see `Campaign::lease_length`): the
/// lease ends then, and the grace must end inside it.
pub(super) fn late_for_the_grace(
    timing: crate::lease::timing::Timing,
    lease: Option<Duration>,
    deadline: Duration,
    now: Duration,
) -> bool {
    let lease = lease.map_or(timing.ttl, |lease| lease.min(timing.ttl));
    !timing.grace_fits(lease, deadline, now)
}

fn report_stuck(group: &mut impl Supervise, token: i64, report: &Reporter) {
    let pids = match group.group() {
        Group::Alive(pids) => pids,
        Group::Gone => Vec::new(),
    };
    report.emit(super::Event::GroupStuck {
        token,
        pids,
        waited: KILL_WAIT,
    });
}

/// The stepping-down phase: leadership was lost while the command ran (or was being stopped).
pub struct SteppingDown {
    pub reason: Ended,
    /// The command's status, if the supervisor reported it already.
    pub status: Option<ChildStatus>,
    /// The occurrence record, with --occurrence.
    pub record: Option<Record>,
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// Leadership can no longer be proven: stop the command's whole group. The claim is
    /// released once the group is known to be gone; if it is not (a process stuck in the
    /// kernel, a supervisor that neither reports nor can be seen through), it is left to
    /// expire, so that the next leader gets the most time it can.
    ///
    /// While the lease may still be ours (the deadline passed without proof either way) the
    /// command gets `--kill-signal` and `--kill-after` to finish cleanly; the lease cannot
    /// expire before that is over. When the store says the lease or the key is gone, another
    /// instance may already lead and start its command: no grace then, SIGKILL at once. The same
    /// holds when the store says so during the grace (`key_gone`: the key deleted, or on
    /// ZooKeeper a reconnect that negotiated a session timeout too short to outlast the grace),
    /// and when the loss is noticed so late that the grace could not end inside the lease
    /// (`deadline` is the renew deadline the last proof gave; see [`late_for_the_grace`]).
    pub(super) async fn step_down(
        &mut self,
        candidacy: &Candidacy,
        down: SteppingDown,
        key_gone: Pin<&mut impl Future<Output = ()>>,
        deadline: Duration,
    ) -> Phase {
        let SteppingDown {
            reason,
            mut status,
            record,
        } = down;
        // What the supervisor already said is read first (reading a ready socket never
        // blocks): if the whole group ended on its own before the loss was seen, there is
        // nothing to signal.
        let mut group_gone = false;
        while let Ok(Ok(event)) =
            tokio::time::timeout(Duration::ZERO, self.supervisor.next_event()).await
        {
            match event {
                Event::Exited(child) => status = Some(child),
                Event::GroupEmpty => group_gone = true,
                // Nothing runs: the spawn failed.
                Event::SpawnFailed { .. } => group_gone = true,
                Event::Started(_) => {}
            }
        }
        // Reported before the signal (the metrics say stepping-down once the command is told),
        // and emitting never waits: nothing here can delay the signal.
        self.report.emit(super::Event::LeadershipLost { reason });
        let gone = if group_gone {
            self.report.emit(super::Event::SteppingDown {
                token: candidacy.token,
                reason,
                signal: None,
            });
            true
        } else {
            let now = self.clock.now();
            let lease = self.backend.lease_length();
            let late = late_for_the_grace(self.settings.timing, lease, deadline, now);
            let first = if reason.certain() || late {
                Signal::SIGKILL
            } else {
                self.settings.kill_signal
            };
            let mut stop = Stop::begin(
                self.supervisor,
                first,
                self.clock.now(),
                self.settings.timing.kill_after,
                Looks::FromTheStart,
                candidacy.token,
            );
            self.report.emit(super::Event::SteppingDown {
                token: candidacy.token,
                reason,
                signal: Some(first),
            });
            if late && !reason.certain() {
                self.report.emit(super::Event::Sigkill {
                    token: candidacy.token,
                    why: Sigkill::Late(now.saturating_sub(deadline)),
                });
            }
            let stopped = self.wait_stopped(&mut stop, key_gone).await;
            if stopped == Stopped::Gone {
                self.report.emit(super::Event::SteppedDown {
                    token: candidacy.token,
                });
            }
            stopped == Stopped::Gone
        };
        self.report.emit(super::Event::GroupGone { code: None });
        // `done` only for a command whose whole group finished on its own, and only if the
        // store still accepts our fenced write: a group killed mid-work is not done, and its
        // record stays `started` for the next leader's --if-unfinished.
        if group_gone && let (Some(started), Some(child)) = (&record, status) {
            self.finish_occurrence(candidacy, started, child.code())
                .await;
        }
        if !gone {
            End::leave_to_expire(Then::Lost)
        } else if self.settings.recampaign {
            // Usually the lease is gone or the store unreachable; if not, revoking it lets the
            // next leader start now instead of after the TTL.
            End::release(Then::Lost)
        } else {
            End::release_at_exit(Then::Lost)
        }
    }

    /// Runs `stop` to its end while nothing else matters: the supervisor's events, the timers,
    /// `key_gone` (the claim ending during the grace) and signals.
    pub(super) async fn wait_stopped(
        &mut self,
        stop: &mut Stop,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Stopped {
        let clock = self.clock.clone();
        loop {
            tokio::select! {
                event = self.supervisor.next_event() => match event {
                    Ok(Event::GroupEmpty) | Ok(Event::SpawnFailed { .. }) => return Stopped::Gone,
                    Ok(Event::Exited(child)) => self.report.emit(super::Event::ExitedWhileStopping { token: stop.token, status: child }),
                    Ok(Event::Started(_)) => {}
                    // The group has been SIGKILLed directly; the look below sees it go.
                    Err(e) => self.report.emit(super::Event::SupervisorDiedWhileStopping { error: e.to_string() }),
                },
                // Independent of the supervisor, which may be stopped: SIGKILL, looks in /proc.
                _ = clock.sleep_until(stop.due_at()) => {
                    if let Some(stopped) = stop.on_due(self.supervisor, clock.now(), &self.report) {
                        return stopped;
                    }
                }
                // Polled only before SIGKILL, so never after it completed (a certain loss starts
                // with SIGKILL): the grace assumed the claim outlasts it, and it no longer does.
                () = &mut key_gone, if !stop.sigkilled() => {
                    stop.kill(self.supervisor, clock.now());
                    self.report.emit(super::Event::Sigkill { token: stop.token, why: Sigkill::ClaimEnded });
                }
                signal = self.signals.recv() => {
                    self.supervisor.signal(signal);
                    // A second TERM or INT while stepping down: stop waiting for the grace.
                    if signals::stops_the_child(signal) {
                        stop.kill(self.supervisor, clock.now());
                    }
                }
            }
        }
    }
}
