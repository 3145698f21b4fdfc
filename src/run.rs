//! The state machine of the run form:
//!
//! ```text
//! Campaigning ──elected──▶ Leading(token) ──command's group empty──▶ Released (exit: its status)
//!     │                        │
//!     │ TERM/INT, timeout      │ deadline missed, lease expired, key deleted
//!     ▼                        ▼
//!  withdrawn (exit 128+N/124)  SteppingDown ──group gone──▶ exit 75
//! ```
//!
//! A handover asked for by `resign` is the stop a forwarded TERM starts (`--kill-signal`,
//! `--kill-after`, SIGKILL), with the lease renewed until the group is gone; then release,
//! exit 75 (or campaign again).
//!
//! One task owns the candidacy, the renewal loop and the supervisor handle, and `select!`s over
//! lease loss, the command's events, signals and timers. Every exit path either revokes the lease
//! or leaves it to expire; none keeps it alive.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::{Clock, sleep_until_some};
use crate::election::Backoff;
use crate::election::{self, Candidacy, Reach, Store, StoreError, Turn};
use crate::exit::{self, ChildStatus, Failure};
use crate::leadership;
use crate::notify;
use crate::occurrence::{self, Decision, Occurrence, Record};
use crate::release::Release;
use crate::renewal::{Deadline, Lost, keep_renewing};
use crate::settings::{Settings, Wait};
use crate::signals::{self, Signals};
use crate::supervisor::{self, Event, Group};

/// How long releasing the lease may take before we leave it to expire on its own.
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// How long the command's group may outlive SIGKILL before leader-exec stops waiting for it
/// (a process in uninterruptible sleep cannot die until the kernel lets it), logs the pids left,
/// leaves the lease to expire and exits 75. Documented in docs/safety.md (step-down is bounded).
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often a stepping-down leader looks in /proc for what is left of the command's group.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Why leadership ended while the command ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// No proof either way: the lease may still be ours until its TTL runs out.
    Unproven(Lost),
    /// The store reports the lease expired.
    Expired,
    /// Our election key was deleted.
    KeyDeleted,
}

impl Loss {
    /// Whether the store itself says the claim is gone, so that another instance may already
    /// lead.
    fn certain(self) -> bool {
        !matches!(self, Loss::Unproven(_))
    }
}

impl From<Lost> for Loss {
    fn from(lost: Lost) -> Loss {
        match lost {
            Lost::Expired => Loss::Expired,
            unproven @ Lost::DeadlineMissed { .. } => Loss::Unproven(unproven),
        }
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Unproven(lost) => lost.fmt(f),
            Loss::Expired => Lost::Expired.fmt(f),
            Loss::KeyDeleted => f.write_str("our election key was deleted"),
        }
    }
}

/// How recording an occurrence's outcome went.
enum Finished {
    Recorded,
    /// The fence rejected it: this instance no longer leads.
    Rejected,
    /// The store could not be reached in time; the record stays `started`.
    Unrecorded,
}

/// The next signal that withdraws a candidacy (TERM, INT, HUP, QUIT); others are ignored.
async fn wait_for_withdrawal(signals: &mut Signals) -> Signal {
    loop {
        let signal = signals.recv().await;
        if signals::withdraws_candidacy(signal) {
            return signal;
        }
    }
}

pub struct Runner<'a, B: Store, C: Clock> {
    pub settings: &'a Settings,
    pub backend: &'a B,
    pub clock: C,
    pub supervisor: &'a mut supervisor::Handle,
    pub signals: &'a mut Signals,
}

enum Joined {
    Candidacy(Candidacy, Duration),
    Exit(u8),
}

/// How leading ended.
enum Led {
    /// With this exit code: the command's status, or a failure to start it.
    Exit(u8),
    /// Leadership was lost and the command's group is gone.
    Lost,
    /// `resign` asked for a handover: the command's group is gone and the claim released.
    HandedOver,
}

/// How `--hold-at-least` ended.
enum Held {
    /// The hold is over or leadership was lost: release and exit with the command's status.
    Over,
    /// Asked to stop meanwhile: the lease is left to expire.
    Stopped,
    /// `resign` asked for a handover.
    HandOver,
}

/// How a leader's occurrence begins.
enum Begun {
    /// Recorded as started: run the command.
    Run(Record),
    /// Do not run it; exit with this code.
    Exit(u8),
    /// The fenced write was rejected: this instance no longer leads.
    Lost,
}

enum Waited {
    /// Leading, with this fencing token, as answered to a request sent at this instant.
    Leading(i64, Duration),
    Recampaign,
    Exit(u8),
}

impl<B: Store, C: Clock> Runner<'_, B, C> {
    /// Campaigns, leads, and returns the exit code.
    pub async fn run(&mut self) -> anyhow::Result<u8> {
        let wait_limit = |now: Duration| match self.settings.wait {
            Wait::Until(timeout) => Some(now + timeout),
            Wait::Forever | Wait::No => None,
        };
        let mut give_up_at = wait_limit(self.clock.now());
        let mut first = true;
        loop {
            let (candidacy, confirmed) = match self.join(first, give_up_at).await? {
                Joined::Candidacy(candidacy, confirmed) => (candidacy, confirmed),
                Joined::Exit(code) => return Ok(code),
            };
            let campaigning = format!("campaigning for lease {}", self.settings.lease);
            if first {
                notify::ready(&campaigning);
            } else {
                notify::status(&campaigning);
            }
            first = false;
            // Not a token yet: only a leader's create-revision is one.
            tracing::info!(
                candidate_revision = candidacy.place,
                key = %candidacy.key,
                event = "campaigning",
                "campaigning"
            );
            let clock = self.clock.clone();
            let deadline = Deadline::new(confirmed, self.settings.timing);
            crate::metrics::campaigning(confirmed, deadline.get());
            let mut keeper = self.backend.keeper(&candidacy);
            let renewal = keep_renewing(
                &mut keeper,
                &clock,
                self.settings.timing,
                confirmed,
                &deadline,
            );
            tokio::pin!(renewal);
            // Our own key is watched from the start: a deleted key is noticed while waiting, and
            // no request is left to make at the moment leadership passes to us (handover path).
            let backend = self.backend;
            let key_gone = backend.key_gone(&candidacy);
            tokio::pin!(key_gone);
            let leader = match self
                .wait_turn(&candidacy, renewal.as_mut(), key_gone.as_mut(), give_up_at)
                .await?
            {
                // The token may be known only now (a store with one lease row per name), and
                // the lease proven only from the request that acquired it: no earlier renewal
                // may stretch the deadline past that request's send instant + renew deadline.
                Waited::Leading(token, sent) => {
                    deadline.cap(sent + self.settings.timing.renew_deadline);
                    candidacy.leading(token)
                }
                Waited::Recampaign => {
                    // Not at once: whatever took the candidacy away may still be going on.
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                    continue;
                }
                Waited::Exit(code) => {
                    if code == exit::NOT_ACQUIRED {
                        // READY=1 went out when we joined: make sure systemd has read it
                        // before this process is gone.
                        notify::barrier(Duration::from_secs(1));
                    }
                    return Ok(code);
                }
            };
            // The renewal loop would report this too, but only once polled again: never start
            // the command on a lease we can no longer vouch for.
            if clock.now() >= deadline.get() {
                tracing::warn!(
                    event = "candidacy-lost",
                    "elected, but the lease is past its renew deadline; campaigning again"
                );
                self.release(&leader).await;
                tokio::time::sleep(self.settings.timing.retry_period).await;
                continue;
            }
            let led = self
                .lead(&leader, renewal.as_mut(), key_gone.as_mut())
                .await?;
            crate::metrics::led_ended(matches!(led, Led::Lost | Led::HandedOver));
            match led {
                Led::Exit(code) => return Ok(code),
                Led::HandedOver if self.settings.recampaign => {
                    // The back of the line: etcd and ZooKeeper put a new candidacy behind every
                    // waiter anyway; on PostgreSQL, whose line it joins at the back too, this
                    // pause lets the first waiter (woken by the release, or finding it within a
                    // retry period) take the row before the new candidacy's first attempt, which
                    // takes a free row at once.
                    tracing::info!(
                        event = "recampaigning",
                        "handed over; campaigning again after --retry-period (--recampaign)"
                    );
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                    give_up_at = wait_limit(clock.now());
                }
                Led::HandedOver => return Ok(exit::LEADERSHIP_LOST),
                Led::Lost if self.settings.recampaign => {
                    tracing::info!(event = "recampaigning", "campaigning again (--recampaign)");
                    give_up_at = wait_limit(clock.now());
                }
                Led::Lost => return Ok(exit::LEADERSHIP_LOST),
            }
        }
    }

    /// Creates a candidacy. The first contact with the store is bounded by `--connect-timeout`
    /// (exit 125 when it passes); later campaigns retry until `--wait-timeout`, if any.
    async fn join(&mut self, first: bool, give_up_at: Option<Duration>) -> anyhow::Result<Joined> {
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
        let timed_out = |last_error: &Option<String>| -> anyhow::Result<Joined> {
            if first {
                Err(Failure::usage(
                    reach.no_answer(connection.connect_timeout, last_error.as_deref()),
                )
                .into())
            } else {
                tracing::info!(
                    event = "not-acquired",
                    "--wait-timeout passed while campaigning"
                );
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
                            if let Ok(Ok(candidacy)) =
                                tokio::time::timeout(Duration::from_secs(1), &mut campaign).await
                            {
                                self.release(&candidacy).await;
                            }
                            return Ok(Joined::Exit(128 + signal as u8));
                        }
                    }
                    result = &mut campaign => break result,
                    refused = &mut refusal => return Err(Failure::usage(refused).into()),
                }
            };
            match result {
                Ok(candidacy) => return Ok(Joined::Candidacy(candidacy, sent)),
                Err(StoreError::Fatal(message)) => return Err(Failure::usage(message).into()),
                Err(StoreError::Transient(message)) => {
                    tracing::debug!(event = "campaign-failed", error = %message, "campaign failed; retrying");
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

    /// Waits until the candidacy leads, renewing its lease meanwhile.
    async fn wait_turn(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Lost>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
        give_up_at: Option<Duration>,
    ) -> anyhow::Result<Waited> {
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
                    Ok(Turn::Leading { token }) => return Ok(Waited::Leading(token, sent)),
                    Ok(Turn::Behind(ahead)) => {
                        let predecessor = crate::escape::escape(&ahead.key);
                        // Name who leads, not only the key ahead (one more read, bounded).
                        let limit = self.settings.timing.retry_period;
                        let leader =
                            match tokio::time::timeout(limit, backend.read_election()).await {
                                Ok(Ok(observation)) => observation.leader,
                                _ => None,
                            };
                        let leader_identity = leader.as_ref().map_or_else(
                            || "unknown".to_owned(),
                            |l| String::from_utf8_lossy(&l.identity).into_owned(),
                        );
                        let leader_token = leader.map(|l| l.token);
                        tracing::info!(event = "not-acquired", leader = %leader_identity, leader_token, %predecessor, "another instance leads (--no-wait): {leader_identity}");
                        self.release(candidacy).await;
                        return Ok(Waited::Exit(exit::NOT_ACQUIRED));
                    }
                    Ok(Turn::Gone) => return Ok(Waited::Recampaign),
                    Err(e) if e.is_transient() && clock.now() < limit => retry.sleep().await,
                    Err(e) => {
                        self.release(candidacy).await;
                        return Err(Failure::usage(format!("reading the election: {e}")).into());
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
                    tracing::warn!(event = "candidacy-lost", reason = %lost, "lost our place in line; campaigning again");
                    self.release(candidacy).await;
                    return Ok(Waited::Recampaign);
                }
                (turn, sent) = &mut turn => {
                    if let Turn::Leading { token } = turn {
                        return Ok(Waited::Leading(token, sent));
                    }
                    tracing::warn!(event = "candidacy-lost", "our candidate key disappeared; campaigning again");
                    self.release(candidacy).await;
                    return Ok(Waited::Recampaign);
                }
                () = &mut key_gone => {
                    tracing::warn!(event = "candidacy-lost", "our candidate key was deleted; campaigning again");
                    self.release(candidacy).await;
                    return Ok(Waited::Recampaign);
                }
                signal = self.signals.recv() => {
                    if signals::withdraws_candidacy(signal) {
                        tracing::info!(event = "withdrawn", signal = signal.as_str(), "withdrawing the candidacy");
                        self.release(candidacy).await;
                        return Ok(Waited::Exit(128 + signal as u8));
                    }
                    tracing::debug!(event = "signal-ignored", signal = signal.as_str(), "ignored while campaigning");
                }
                _ = sleep_until_some(&clock, give_up_at) => {
                    tracing::info!(event = "not-acquired", "--wait-timeout passed; withdrawing the candidacy");
                    self.release(candidacy).await;
                    return Ok(Waited::Exit(exit::NOT_ACQUIRED));
                }
            }
        }
    }

    /// Runs the command while the renewal loop vouches for the lease.
    async fn lead(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Lost>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
    ) -> anyhow::Result<Led> {
        let settings = self.settings;
        let clock = self.clock.clone();
        let acquired = clock.now();
        let since = std::time::SystemTime::now();
        let mut env = vec![
            ("LEADER_TOKEN", candidacy.token.to_string()),
            ("LEADER_LEASE", settings.lease.clone()),
            ("LEADER_KEY", candidacy.key.clone()),
            ("LEADER_IDENTITY", settings.identity.clone()),
        ];
        // Absent where the store has no lease ids (PostgreSQL).
        if let Some(lease_id) = candidacy.lease_id_hex() {
            env.push(("LEADER_LEASE_ID", lease_id));
        }
        tracing::info!(event = "elected", token = candidacy.token, "elected");
        crate::metrics::elected(candidacy.token);
        notify::status(&format!(
            "leader of lease {} (token {})",
            settings.lease, candidacy.token
        ));

        // With --occurrence, the record is written (fenced) before the command may start.
        let mut record: Option<Record> = None;
        let backend = self.backend;
        if let Some(occurrence) = &settings.occurrence {
            let begun = tokio::select! {
                biased;
                lost = &mut renewal => {
                    crate::metrics::stepped_down(lost.into());
                    tracing::warn!(event = "stepping-down", token = candidacy.token, reason = %lost, "leadership lost before the command started");
                    Ok(Begun::Lost)
                }
                () = &mut key_gone => {
                    crate::metrics::stepped_down(crate::metrics::StepDown::KeyDeleted);
                    tracing::warn!(event = "stepping-down", token = candidacy.token, "our election key was deleted before the command started");
                    Ok(Begun::Lost)
                }
                // A stop asked for while the record is read or written withdraws at once: the
                // command never starts.
                signal = wait_for_withdrawal(&mut *self.signals) => {
                    tracing::info!(event = "withdrawn", signal = signal.as_str(), "withdrawing before the command started");
                    Ok(Begun::Exit(128 + signal as u8))
                }
                begun = Self::begin_occurrence(backend, settings, candidacy, occurrence) => begun,
            };
            match begun {
                Ok(Begun::Run(started)) => {
                    env.push(("LEADER_OCCURRENCE", occurrence.id.clone()));
                    if let Some(previous) = started.previous_token {
                        env.push(("LEADER_PREVIOUS_TOKEN", previous.to_string()));
                    }
                    record = Some(started);
                }
                Ok(Begun::Exit(code)) => {
                    self.release(candidacy).await;
                    return Ok(Led::Exit(code));
                }
                Ok(Begun::Lost) => {
                    self.release(candidacy).await;
                    return Ok(Led::Lost);
                }
                Err(e) => {
                    // Nothing runs yet: let the next candidate go at once.
                    self.release(candidacy).await;
                    return Err(e);
                }
            }
        }

        tracing::info!(
            event = "starting",
            token = candidacy.token,
            "starting the command"
        );
        if let Err(e) = self.supervisor.spawn(&env) {
            self.release(candidacy).await;
            return Err(Failure::usage(format!("cannot reach the supervisor: {e}")).into());
        }
        // For `status`: since when it leads, and that the command runs. Written beside the
        // start, never before it.
        let state = leadership::State::new(
            candidacy,
            &settings.identity,
            since,
            leadership::Command::Running,
        )
        .with_timing(settings.timing.kill_after, settings.timing.retry_period);
        let state_key = leadership::key(&settings.scope());
        let announce = leadership::write(
            backend,
            candidacy,
            &state_key,
            state,
            settings.timing.renew_deadline,
        );
        tokio::pin!(announce);
        let mut announced = false;
        // `resign` asks through the store; the request names this leader's token.
        let handover_key = leadership::handover_key(&settings.scope());
        let handover =
            backend.handover_requested(candidacy, &handover_key, settings.timing.retry_period);
        tokio::pin!(handover);
        let mut handing_over = false;
        let mut status: Option<ChildStatus> = None;
        let mut kill_at: Option<Duration> = None;
        let mut killed = false;
        let mut look_at: Option<Duration> = None;
        loop {
            let reason = tokio::select! {
                biased;
                lost = &mut renewal => Loss::from(lost),
                () = &mut key_gone => Loss::KeyDeleted,
                event = self.supervisor.next_event() => {
                    match event {
                        Ok(Event::Started(pid)) => {
                            crate::metrics::command_started();
                            tracing::info!(event = "started", token = candidacy.token, pid, "command started");
                        }
                        Ok(Event::SpawnFailed { errno, message }) => {
                            self.release(candidacy).await;
                            let command = settings.command[0].to_string_lossy();
                            return Err(Failure::new(
                                supervisor::spawn_failure_code(errno),
                                format!("{command}: {message}"),
                            )
                            .into());
                        }
                        Ok(Event::Exited(child)) => {
                            crate::metrics::command_exited(child.code());
                            tracing::info!(event = "exited", token = candidacy.token, status = child.code(), "command {child}");
                            status = Some(child);
                        }
                        Ok(Event::GroupEmpty) => {
                            let code = status.map_or(exit::FAILURE, ChildStatus::code);
                            crate::metrics::command_ended(status.map(ChildStatus::code));
                            if let Some(started) = &record {
                                match self.finish_occurrence(candidacy, started, code).await {
                                    Finished::Recorded => {}
                                    Finished::Rejected => {
                                        self.release(candidacy).await;
                                        return Ok(Led::Exit(exit::LEADERSHIP_LOST));
                                    }
                                    // The command's own status still says how it went; the
                                    // record stays `started`, and the next run of the
                                    // occurrence applies --if-unfinished.
                                    Finished::Unrecorded => {}
                                }
                            }
                            if handing_over {
                                return Ok(self.handed_over(candidacy).await);
                            }
                            // A stop asked for while the command ran (TERM, INT) is not
                            // followed by --hold-at-least: as during the hold, leader-exec exits
                            // and leaves the lease to expire on its own.
                            if settings.hold_at_least.is_some() && kill_at.is_some() {
                                tracing::info!(event = "hold-ended", token = candidacy.token, "stopped while the command ran: not holding; the lease expires on its own");
                                return Ok(Led::Exit(code));
                            }
                            if let Some(hold) = settings.hold_at_least {
                                match self.hold(candidacy, renewal.as_mut(), key_gone.as_mut(), handover.as_mut(), acquired + hold, since).await {
                                    Held::Over => {}
                                    // Asked to stop during the hold: leave the lease to expire.
                                    Held::Stopped => return Ok(Led::Exit(code)),
                                    Held::HandOver => return Ok(self.handed_over(candidacy).await),
                                }
                            }
                            self.release_at_exit(candidacy).await;
                            return Ok(Led::Exit(code));
                        }
                        Err(e) => {
                            // The supervisor died: the command's group has been SIGKILLed
                            // directly. Release only once it is seen gone.
                            tracing::error!(event = "supervisor-died", token = candidacy.token, error = %e, "the supervisor process died; killing the command's group");
                            if self.wait_group_gone(candidacy, KILL_WAIT).await {
                                self.release(candidacy).await;
                            }
                            return Err(Failure::usage(format!("supervisor: {e}")).into());
                        }
                    }
                    continue;
                }
                signal = self.signals.recv() => {
                    self.supervisor.signal(signal);
                    tracing::info!(event = "signal-forwarded", token = candidacy.token, signal = signal.as_str(), "forwarded to the command's process group");
                    if signals::stops_the_child(signal) && kill_at.is_none() {
                        crate::metrics::stop_requested();
                        kill_at = Some(clock.now() + settings.timing.kill_after);
                    }
                    continue;
                }
                _ = sleep_until_some(&clock, kill_at), if !killed => {
                    killed = true;
                    self.supervisor.signal(Signal::SIGKILL);
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the command's group outlived --kill-after; sent SIGKILL");
                    look_at = Some(clock.now() + GROUP_POLL);
                    continue;
                }
                // After SIGKILL, should the supervisor not report the group empty (stopped, or
                // a process stuck in the kernel), leader-exec looks for itself, bounded.
                _ = sleep_until_some(&clock, look_at) => {
                    let since_kill = kill_at.map_or(Duration::ZERO, |at| clock.now().saturating_sub(at));
                    if self.supervisor.group() == Group::Gone {
                        if handing_over {
                            return Ok(self.handed_over(candidacy).await);
                        }
                        self.release_at_exit(candidacy).await;
                        let killed = ChildStatus::Signaled(Signal::SIGKILL as i32);
                        return Ok(Led::Exit(status.unwrap_or(killed).code()));
                    }
                    if since_kill >= KILL_WAIT {
                        self.supervisor.cancel_pending_spawn();
                        self.report_stuck(candidacy);
                        return Ok(Led::Exit(128 + Signal::SIGKILL as u8));
                    }
                    look_at = Some(clock.now() + GROUP_POLL);
                    continue;
                }
                // A handover is the stop a forwarded TERM starts, with --kill-signal: signal
                // the group first, log after; the claim stays ours (renewed as ever) until the
                // group is gone, so the next leader cannot start beside any of it.
                () = &mut handover, if !handing_over => {
                    handing_over = true;
                    if kill_at.is_none() {
                        self.supervisor.signal(settings.kill_signal);
                        crate::metrics::stop_requested();
                        kill_at = Some(clock.now() + settings.timing.kill_after);
                    }
                    tracing::warn!(event = "handing-over", token = candidacy.token, signal = settings.kill_signal.as_str(), "resign asked for a handover; stopping the command");
                    notify::status(&format!("handing over lease {} (token {})", settings.lease, candidacy.token));
                    continue;
                }
                () = &mut announce, if !announced => {
                    announced = true;
                    continue;
                }
            };
            // Leadership is lost. What the supervisor already said is read first (reading a
            // ready socket never blocks): if the whole group ended on its own before the loss
            // was seen, there is nothing to signal.
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
            // In memory only: nothing here can delay the signal.
            crate::metrics::stepped_down(match reason {
                Loss::Unproven(_) => crate::metrics::StepDown::Deadline,
                Loss::Expired => crate::metrics::StepDown::Expired,
                Loss::KeyDeleted => crate::metrics::StepDown::KeyDeleted,
            });
            let gone = self
                .step_down(candidacy, reason, group_gone, key_gone.as_mut())
                .await;
            crate::metrics::command_ended(None);
            // `done` only for a command whose whole group finished on its own, and only if the
            // store still accepts our fenced write: a group killed mid-work is not done, and its
            // record stays `started` for the next leader's --if-unfinished.
            if group_gone && let (Some(started), Some(child)) = (&record, status) {
                self.finish_occurrence(candidacy, started, child.code())
                    .await;
            }
            if gone && settings.recampaign {
                // Usually the lease is gone or the store unreachable; if not, revoking it lets the
                // next leader start now instead of after the TTL.
                self.release(candidacy).await;
            } else if gone {
                self.release_at_exit(candidacy).await;
            }
            return Ok(Led::Lost);
        }
    }

    /// Reads the occurrence record and decides; writes `started` (fenced) when the command
    /// is to run.
    /// Takes no `self`, so that the caller can listen for signals meanwhile.
    async fn begin_occurrence(
        backend: &B,
        settings: &Settings,
        candidacy: &Candidacy,
        occurrence: &Occurrence,
    ) -> anyhow::Result<Begun> {
        let mut backoff = Backoff::new();
        // Retried until it works or the renewal deadline ends the attempt (the caller selects).
        let existing = loop {
            match backend.read_record(&occurrence.key).await {
                Ok(value) => break value,
                Err(e) if e.is_transient() => backoff.sleep().await,
                Err(e) => {
                    return Err(Failure::usage(format!("reading {}: {e}", occurrence.key)).into());
                }
            }
        };
        let existing = match existing {
            None => None,
            Some(bytes) => Some(Record::from_json(&bytes).ok_or_else(|| {
                Failure::usage(format!(
                    "{} holds something that is not an occurrence record",
                    occurrence.key
                ))
            })?),
        };
        let id = occurrence.id.as_str();
        let previous_token = match occurrence::decide(
            existing,
            occurrence.if_unfinished,
            candidacy.token,
        ) {
            Decision::Run { previous_token } => previous_token,
            Decision::AlreadyDone(done) => {
                crate::metrics::occurrence(crate::metrics::OccurrenceOutcome::AlreadyDone);
                tracing::info!(event = "occurrence-done", occurrence = id, by_token = done.token, by = %done.identity, finished_at = done.finished_at.as_deref().unwrap_or("unknown"), "occurrence {id} was already done; not running it again");
                return Ok(Begun::Exit(0));
            }
            Decision::SkipUnfinished(started) => {
                crate::metrics::occurrence(crate::metrics::OccurrenceOutcome::Skipped);
                tracing::info!(event = "occurrence-skipped", occurrence = id, by_token = started.token, by = %started.identity, "occurrence {id} was started by an earlier leader and never finished; skipping it (--if-unfinished skip)");
                return Ok(Begun::Exit(0));
            }
            Decision::RefuseUnfinished(started) => {
                crate::metrics::occurrence(crate::metrics::OccurrenceOutcome::Refused);
                tracing::error!(event = "occurrence-unfinished", occurrence = id, by_token = started.token, by = %started.identity, started_at = %started.started_at, "occurrence {id} was started by an earlier leader and never finished; not running it (--if-unfinished fail); to run it again: {}", backend.delete_record_hint(&occurrence.key));
                return Ok(Begun::Exit(exit::UNFINISHED_OCCURRENCE));
            }
            Decision::TokenWentBackwards(newer) => {
                return Err(Failure::usage(format!(
                    "occurrence {id} was recorded by token {} but this leader's token is {}: \
                     the store's revisions went backwards (data loss, or a snapshot restore without \
                     --bump-revision), so fencing tokens no longer increase; nothing was run \
                     (see docs/safety.md, 'Tokens after data loss')",
                    newer.token, candidacy.token
                ))
                .into());
            }
        };
        let started = Record::started(candidacy.token, &settings.identity, previous_token);
        loop {
            match backend
                .write_fenced(
                    candidacy,
                    &occurrence.key,
                    started.to_json(),
                    occurrence.retention,
                )
                .await
            {
                Ok(true) => {
                    crate::metrics::occurrence(crate::metrics::OccurrenceOutcome::Started);
                    tracing::info!(
                        event = "occurrence-started",
                        occurrence = id,
                        token = candidacy.token,
                        previous_token,
                        "occurrence {id} recorded as started"
                    );
                    return Ok(Begun::Run(started));
                }
                Ok(false) => {
                    crate::metrics::fenced_write_rejected();
                    tracing::error!(
                        event = "occurrence-rejected",
                        occurrence = id,
                        token = candidacy.token,
                        "fenced write rejected: this instance no longer leads; not starting the command"
                    );
                    return Ok(Begun::Lost);
                }
                Err(e) if e.is_transient() => backoff.sleep().await,
                Err(e) => {
                    return Err(Failure::usage(format!("writing {}: {e}", occurrence.key)).into());
                }
            }
        }
    }

    /// Records the command's outcome, fenced.
    async fn finish_occurrence(
        &self,
        candidacy: &Candidacy,
        started: &Record,
        code: u8,
    ) -> Finished {
        let Some(occurrence) = &self.settings.occurrence else {
            return Finished::Recorded;
        };
        let id = occurrence.id.as_str();
        let finished = started.finished(code);
        let clock = self.clock.clone();
        let limit = clock.now() + self.settings.timing.renew_deadline;
        let mut backoff = Backoff::new();
        loop {
            let result = tokio::select! {
                result = self.backend.write_fenced(candidacy, &occurrence.key, finished.to_json(), occurrence.retention) => result,
                _ = clock.sleep_until(limit) => Err(StoreError::Transient("no answer".into())),
            };
            match result {
                Ok(true) => {
                    crate::metrics::occurrence(if code == 0 {
                        crate::metrics::OccurrenceOutcome::Done
                    } else {
                        crate::metrics::OccurrenceOutcome::Failed
                    });
                    tracing::info!(event = "occurrence-finished", occurrence = id, token = candidacy.token, state = %finished.state, exit_code = code, "occurrence {id} recorded as {}", finished.state);
                    return Finished::Recorded;
                }
                Ok(false) => {
                    crate::metrics::fenced_write_rejected();
                    tracing::error!(
                        event = "occurrence-rejected",
                        occurrence = id,
                        token = candidacy.token,
                        "fenced write rejected: this instance no longer leads, so occurrence {id} stays as the current leader recorded it"
                    );
                    return Finished::Rejected;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    crate::metrics::occurrence(crate::metrics::OccurrenceOutcome::Unrecorded);
                    tracing::error!(event = "occurrence-unrecorded", occurrence = id, token = candidacy.token, error = %e, "could not record the outcome of occurrence {id}; it stays 'started'");
                    return Finished::Unrecorded;
                }
            }
        }
    }

    /// `--hold-at-least`: keeps the lease (renewing, still able to lose it) until `until`.
    /// Returns false when asked to stop meanwhile: then the lease is left to expire.
    async fn hold(
        &mut self,
        candidacy: &Candidacy,
        mut renewal: Pin<&mut impl Future<Output = Lost>>,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
        mut handover: Pin<&mut impl Future<Output = ()>>,
        until: Duration,
        since: std::time::SystemTime,
    ) -> Held {
        let clock = self.clock.clone();
        if clock.now() >= until {
            return Held::Over;
        }
        // For `status`: holding, not running, and until when.
        let mut state = leadership::State::new(
            candidacy,
            &self.settings.identity,
            since,
            leadership::Command::Holding,
        )
        .with_timing(
            self.settings.timing.kill_after,
            self.settings.timing.retry_period,
        );
        let left = until.saturating_sub(clock.now());
        state.hold_until = Some(leadership::rfc3339(std::time::SystemTime::now() + left));
        let state_key = leadership::key(&self.settings.scope());
        let announce = leadership::write(
            self.backend,
            candidacy,
            &state_key,
            state,
            self.settings.timing.renew_deadline,
        );
        tokio::pin!(announce);
        let mut announced = false;
        tracing::info!(
            event = "holding",
            token = candidacy.token,
            "command done; holding the lease (--hold-at-least)"
        );
        notify::status(&format!(
            "holding lease {} (token {})",
            self.settings.lease, candidacy.token
        ));
        loop {
            tokio::select! {
                biased;
                lost = &mut renewal => {
                    tracing::warn!(event = "hold-ended", token = candidacy.token, reason = %lost, "leadership lost during --hold-at-least");
                    return Held::Over;
                }
                () = &mut key_gone => {
                    tracing::warn!(event = "hold-ended", token = candidacy.token, "our election key was deleted during --hold-at-least");
                    return Held::Over;
                }
                () = &mut handover => {
                    tracing::warn!(event = "handing-over", token = candidacy.token, "resign asked for a handover during --hold-at-least");
                    return Held::HandOver;
                }
                _ = clock.sleep_until(until) => return Held::Over,
                () = &mut announce, if !announced => announced = true,
                signal = self.signals.recv() => {
                    if signals::stops_the_child(signal) {
                        tracing::info!(event = "hold-ended", token = candidacy.token, signal = signal.as_str(), "stopping during --hold-at-least; the lease expires on its own");
                        return Held::Stopped;
                    }
                }
            }
        }
    }

    /// Leadership can no longer be proven: stop the command's whole group. Returns whether the
    /// group is known to be gone; if it is not (a process stuck in the kernel, a supervisor
    /// that neither reports nor can be seen through), the caller leaves the lease to expire
    /// instead of releasing it, so that the next leader gets the most time it can.
    ///
    /// Nothing here waits before the first signal: it goes straight to the group (`killpg`),
    /// then comes the log line and the sd_notify status, neither of which can block.
    ///
    /// While the lease may still be ours (the deadline passed without proof either way) the
    /// command gets `--kill-signal` and `--kill-after` to finish cleanly; the lease cannot
    /// expire before that is over. When the store says the lease or the key is gone, another
    /// instance may already lead and start its command: no grace then, SIGKILL at once. The same
    /// holds when the store says so during the grace (`key_gone`: the key deleted, or on
    /// ZooKeeper a reconnect that negotiated a session timeout too short to outlast the grace).
    async fn step_down(
        &mut self,
        candidacy: &Candidacy,
        reason: Loss,
        group_gone: bool,
        mut key_gone: Pin<&mut impl Future<Output = ()>>,
    ) -> bool {
        let settings = self.settings;
        let clock = self.clock.clone();
        if group_gone {
            tracing::warn!(event = "stepping-down", token = candidacy.token, reason = %reason, "leadership lost; the command had already ended");
            notify::status(&format!("stepped down: {reason}"));
            return true;
        }
        let first = if reason.certain() {
            Signal::SIGKILL
        } else {
            settings.kill_signal
        };
        self.supervisor.signal(first);
        let signalled = clock.now();
        tracing::warn!(
            event = "stepping-down",
            token = candidacy.token,
            reason = %reason,
            signal = first.as_str(),
            "leadership lost; stopping the command"
        );
        notify::status(&format!("stepping down: {reason}"));
        let mut killed = first == Signal::SIGKILL;
        let kill_at = signalled + settings.timing.kill_after;
        let mut give_up_at = if killed {
            signalled + KILL_WAIT
        } else {
            kill_at + KILL_WAIT
        };
        let mut next_look = clock.now();
        loop {
            tokio::select! {
                event = self.supervisor.next_event() => match event {
                    Ok(Event::GroupEmpty) | Ok(Event::SpawnFailed { .. }) => break,
                    Ok(Event::Exited(child)) => tracing::info!(event = "exited", token = candidacy.token, status = child.code(), "command {child}"),
                    Ok(Event::Started(_)) => {}
                    // The group has been SIGKILLed directly; the look below sees it go.
                    Err(e) => tracing::error!(event = "supervisor-died", error = %e, "the supervisor process died"),
                },
                // Independent of the supervisor, which may be stopped: look in /proc.
                _ = clock.sleep_until(next_look) => {
                    if self.supervisor.group() == Group::Gone {
                        break;
                    }
                    next_look = clock.now() + GROUP_POLL;
                }
                _ = clock.sleep_until(kill_at), if !killed => {
                    killed = true;
                    self.supervisor.signal(Signal::SIGKILL);
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the command's group outlived --kill-after; sent SIGKILL");
                }
                // Polled only before SIGKILL, so never after it completed (a certain loss starts
                // with SIGKILL): the grace assumed the claim outlasts it, and it no longer does.
                () = &mut key_gone, if !killed => {
                    killed = true;
                    self.supervisor.signal(Signal::SIGKILL);
                    give_up_at = clock.now() + KILL_WAIT;
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the claim ended during --kill-after; sent SIGKILL");
                }
                _ = clock.sleep_until(give_up_at) => {
                    // A supervisor that never said whether it started the command may be
                    // stopped with the request in its buffer: it must not start it later.
                    self.supervisor.cancel_pending_spawn();
                    if self.supervisor.group() == Group::Gone {
                        break;
                    }
                    self.report_stuck(candidacy);
                    return false;
                }
                signal = self.signals.recv() => {
                    self.supervisor.signal(signal);
                    // A second TERM or INT while stepping down: stop waiting for the grace.
                    if signals::stops_the_child(signal) && !killed {
                        killed = true;
                        self.supervisor.signal(Signal::SIGKILL);
                        give_up_at = clock.now() + KILL_WAIT;
                    }
                }
            }
        }
        tracing::warn!(
            event = "stepped-down",
            token = candidacy.token,
            "the command's process group is gone"
        );
        true
    }

    /// After SIGKILL: waits up to `limit` for the command's group to be gone, looking in /proc.
    async fn wait_group_gone(&mut self, candidacy: &Candidacy, limit: Duration) -> bool {
        let clock = self.clock.clone();
        let until = clock.now() + limit;
        loop {
            if self.supervisor.group() == Group::Gone {
                return true;
            }
            if clock.now() >= until {
                self.supervisor.cancel_pending_spawn();
                if self.supervisor.group() == Group::Gone {
                    return true;
                }
                self.report_stuck(candidacy);
                return false;
            }
            tokio::select! {
                event = self.supervisor.next_event() => {
                    if let Ok(Event::GroupEmpty) = event {
                        return true;
                    }
                }
                _ = clock.sleep_until(clock.now() + GROUP_POLL) => {}
            }
        }
    }

    /// The end of a handover, once the command's whole group is gone: release the claim, so
    /// that the next instance in line takes over now (with --recampaign briefly, since this
    /// instance campaigns again; else retried as every release at exit).
    async fn handed_over(&mut self, candidacy: &Candidacy) -> Led {
        tracing::warn!(
            event = "handed-over",
            token = candidacy.token,
            "the command's process group is gone; releasing the lease (resign)"
        );
        if self.settings.recampaign {
            self.release(candidacy).await;
        } else {
            self.release_at_exit(candidacy).await;
        }
        notify::status("handed over (resign)");
        Led::HandedOver
    }

    fn report_stuck(&mut self, candidacy: &Candidacy) {
        let pids = match self.supervisor.group() {
            Group::Alive(pids) => pids,
            Group::Gone => Vec::new(),
        };
        tracing::error!(
            event = "group-stuck",
            token = candidacy.token,
            pids = %pids.iter().map(i32::to_string).collect::<Vec<_>>().join(","),
            "the command's group survived SIGKILL for {}; giving up on it and leaving the lease to expire on its own",
            humantime::format_duration(KILL_WAIT)
        );
    }

    /// The release that ends a run, once the command's whole group is gone: when the store is
    /// unreachable it is retried for up to a TTL (see `release.rs`).
    async fn release_at_exit(&mut self, candidacy: &Candidacy) {
        let until = self.clock.now() + self.settings.timing.ttl;
        if self.release(candidacy).await == Release::Unreachable {
            let clock = self.clock.clone();
            crate::release::retry(self.backend, candidacy, &clock, self.signals, until).await;
        }
    }

    /// Revokes the lease (deleting the candidate key), retrying briefly; if that fails the lease
    /// expires on its own within the TTL.
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
                    tracing::info!(
                        event = "released",
                        lease_id = candidacy.lease_id_hex(),
                        "lease released"
                    );
                    return Release::Done;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    tracing::warn!(
                        event = "release-failed",
                        error = %e,
                        "could not release the lease; it expires on its own within the TTL"
                    );
                    return Release::from(&e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_store_that_says_so_makes_a_loss_certain() {
        let unproven = Loss::from(Lost::DeadlineMissed {
            renew_deadline: Duration::from_secs(10),
        });
        assert!(!unproven.certain());
        assert!(Loss::from(Lost::Expired).certain());
        assert!(Loss::KeyDeleted.certain());
    }
}
