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
//! One task owns the candidacy, the renewal loop and the supervisor handle, and `select!`s over
//! lease loss, the command's events, signals and timers. Every exit path either revokes the lease
//! or leaves it to expire; none keeps it alive.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::{Clock, sleep_until_some};
use crate::election::Backoff;
use crate::election::{self, Backend, Candidacy, StoreError, Turn};
use crate::exit::{self, ChildStatus, Failure};
use crate::notify;
use crate::occurrence::{self, Decision, Occurrence, Record};
use crate::renewal::{Deadline, Lost, keep_renewing};
use crate::settings::{Settings, Wait};
use crate::signals::{self, Signals};
use crate::supervisor::{self, Event};

/// How long releasing the lease may take before we leave it to expire on its own.
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

pub struct Runner<'a, B: Backend, C: Clock> {
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
    Leading,
    Recampaign,
    Exit(u8),
}

impl<B: Backend, C: Clock> Runner<'_, B, C> {
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
            tracing::info!(
                token = candidacy.token,
                key = %candidacy.key,
                event = "campaigning",
                "campaigning"
            );
            let clock = self.clock.clone();
            let deadline = Deadline::new(confirmed, self.settings.timing);
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
            match self
                .wait_turn(&candidacy, renewal.as_mut(), key_gone.as_mut(), give_up_at)
                .await?
            {
                Waited::Leading => {}
                Waited::Recampaign => {
                    // Not at once: whatever took the candidacy away may still be going on.
                    tokio::time::sleep(self.settings.timing.retry_period).await;
                    continue;
                }
                Waited::Exit(code) => return Ok(code),
            }
            // The renewal loop would report this too, but only once polled again: never start
            // the command on a lease we can no longer vouch for.
            if clock.now() >= deadline.get() {
                tracing::warn!(
                    event = "candidacy-lost",
                    "elected, but the lease is past its renew deadline; campaigning again"
                );
                self.release(&candidacy).await;
                tokio::time::sleep(self.settings.timing.retry_period).await;
                continue;
            }
            match self
                .lead(&candidacy, renewal.as_mut(), key_gone.as_mut())
                .await?
            {
                Led::Exit(code) => return Ok(code),
                Led::Lost if self.settings.recampaign => {
                    tracing::info!(event = "recampaigning", "campaigning again (--recampaign)");
                    give_up_at = wait_limit(clock.now());
                }
                Led::Lost => return Ok(exit::LEADERSHIP_LOST),
            }
        }
    }

    /// Creates a candidacy. The first contact with etcd is bounded by `--connect-timeout`
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
        let mut last_error = String::from("no answer");
        loop {
            // The lease cannot expire before this instant + TTL: the grant is sent after it.
            let sent = clock.now();
            let campaign = backend.campaign();
            tokio::pin!(campaign);
            let result = loop {
                tokio::select! {
                    result = &mut campaign => break result,
                    _ = sleep_until_some(&clock, limit) => {
                        return if first {
                            Err(Failure::usage(format!(
                                "etcd at {} did not answer within --connect-timeout ({}): {last_error}",
                                connection.endpoints.join(","),
                                humantime::format_duration(connection.connect_timeout)
                            ))
                            .into())
                        } else {
                            tracing::info!(event = "not-acquired", "--wait-timeout passed while campaigning");
                            Ok(Joined::Exit(exit::NOT_ACQUIRED))
                        };
                    }
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
                }
            };
            match result {
                Ok(candidacy) => return Ok(Joined::Candidacy(candidacy, sent)),
                Err(StoreError::Fatal(message)) => return Err(Failure::usage(message).into()),
                Err(StoreError::Transient(message)) => {
                    tracing::debug!(event = "campaign-failed", error = %message, "campaign failed; retrying");
                    last_error = message;
                    backoff.sleep().await;
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
                let turn = tokio::select! {
                    turn = backend.check_turn(candidacy) => turn,
                    _ = clock.sleep_until(limit) => Err(StoreError::Transient("no answer".into())),
                };
                match turn {
                    Ok(Turn::Leading) => return Ok(Waited::Leading),
                    Ok(Turn::Behind { predecessor, .. }) => {
                        let predecessor = crate::escape::escape(&predecessor);
                        tracing::info!(event = "not-acquired", %predecessor, "another instance leads (--no-wait)");
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
        let turn = election::wait_for_turn(backend, candidacy, backoff);
        tokio::pin!(turn);
        loop {
            tokio::select! {
                biased;
                lost = &mut renewal => {
                    tracing::warn!(event = "candidacy-lost", reason = %lost, "lost our place in line; campaigning again");
                    self.release(candidacy).await;
                    return Ok(Waited::Recampaign);
                }
                turn = &mut turn => {
                    if turn == Turn::Leading {
                        return Ok(Waited::Leading);
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
        let mut env = vec![
            ("LEADER_TOKEN", candidacy.token.to_string()),
            ("LEADER_LEASE", settings.lease.clone()),
            ("LEADER_KEY", candidacy.key.clone()),
            ("LEADER_IDENTITY", settings.identity.clone()),
            ("LEADER_LEASE_ID", candidacy.lease_id_hex()),
        ];
        tracing::info!(event = "elected", token = candidacy.token, "elected");
        notify::status(&format!(
            "leader of lease {} (token {})",
            settings.lease, candidacy.token
        ));

        // With --occurrence, the record is written (fenced) before the command may start.
        let mut record: Option<Record> = None;
        if let Some(occurrence) = &settings.occurrence {
            let begun = tokio::select! {
                biased;
                lost = &mut renewal => {
                    tracing::warn!(event = "stepping-down", token = candidacy.token, reason = %lost, "leadership lost before the command started");
                    Begun::Lost
                }
                begun = self.begin_occurrence(candidacy, occurrence) => begun?,
            };
            match begun {
                Begun::Run(started) => {
                    env.push(("LEADER_OCCURRENCE", occurrence.id.clone()));
                    if let Some(previous) = started.previous_token {
                        env.push(("LEADER_PREVIOUS_TOKEN", previous.to_string()));
                    }
                    record = Some(started);
                }
                Begun::Exit(code) => {
                    self.release(candidacy).await;
                    return Ok(Led::Exit(code));
                }
                Begun::Lost => {
                    self.release(candidacy).await;
                    return Ok(Led::Lost);
                }
            }
        }

        tracing::info!(
            event = "starting",
            token = candidacy.token,
            "starting the command"
        );
        if let Err(e) = self.supervisor.spawn(&env).await {
            self.release(candidacy).await;
            return Err(Failure::usage(format!("cannot reach the supervisor: {e}")).into());
        }
        let mut status: Option<ChildStatus> = None;
        let mut kill_at: Option<Duration> = None;
        let mut killed = false;
        loop {
            let reason = tokio::select! {
                biased;
                lost = &mut renewal => lost.to_string(),
                () = &mut key_gone => "our election key was deleted".to_owned(),
                event = self.supervisor.next_event() => {
                    match event {
                        Ok(Event::Started(pid)) => tracing::info!(event = "started", token = candidacy.token, pid, "command started"),
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
                            tracing::info!(event = "exited", token = candidacy.token, status = child.code(), "command {child}");
                            status = Some(child);
                        }
                        Ok(Event::GroupEmpty) => {
                            let code = status.map_or(exit::FAILURE, ChildStatus::code);
                            if let Some(started) = &record
                                && !self.finish_occurrence(candidacy, started, code).await
                            {
                                self.release(candidacy).await;
                                return Ok(Led::Exit(exit::LEADERSHIP_LOST));
                            }
                            if let Some(hold) = settings.hold_at_least
                                && !self.hold(candidacy, renewal.as_mut(), key_gone.as_mut(), acquired + hold).await
                            {
                                // Asked to stop during the hold: leave the lease to expire.
                                return Ok(Led::Exit(code));
                            }
                            self.release(candidacy).await;
                            return Ok(Led::Exit(code));
                        }
                        Err(e) => {
                            self.release(candidacy).await;
                            return Err(Failure::usage(format!("supervisor: {e}")).into());
                        }
                    }
                    continue;
                }
                signal = self.signals.recv() => {
                    tracing::info!(event = "signal-forwarded", token = candidacy.token, signal = signal.as_str(), "forwarding to the command's process group");
                    self.supervisor.signal(signal).await;
                    if signals::stops_the_child(signal) && kill_at.is_none() {
                        kill_at = Some(clock.now() + settings.timing.kill_after);
                    }
                    continue;
                }
                _ = sleep_until_some(&clock, kill_at), if !killed => {
                    killed = true;
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the command's group outlived --kill-after; sending SIGKILL");
                    self.supervisor.signal(Signal::SIGKILL).await;
                    continue;
                }
            };
            // Leadership is lost. If the command had already exited on its own (its exit was
            // waiting to be read when the loss was noticed, e.g. after this process was
            // frozen), its outcome is known and worth recording, fenced: the store decides
            // whether this instance still may.
            let mut group_gone = false;
            while let Ok(Ok(event)) =
                tokio::time::timeout(Duration::ZERO, self.supervisor.next_event()).await
            {
                match event {
                    Event::Exited(child) => status = Some(child),
                    Event::GroupEmpty => group_gone = true,
                    _ => {}
                }
            }
            self.step_down(candidacy, &reason, group_gone).await;
            if let (Some(started), Some(child)) = (&record, status) {
                self.finish_occurrence(candidacy, started, child.code())
                    .await;
            }
            // Usually the lease is gone or etcd unreachable; if not, revoking it lets the next
            // leader start now instead of after the TTL.
            self.release(candidacy).await;
            return Ok(Led::Lost);
        }
    }

    /// Reads the occurrence record and decides; writes `started` (fenced) when the command
    /// is to run.
    async fn begin_occurrence(
        &self,
        candidacy: &Candidacy,
        occurrence: &Occurrence,
    ) -> anyhow::Result<Begun> {
        let backend = self.backend;
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
                tracing::info!(event = "occurrence-done", occurrence = id, by_token = done.token, by = %done.identity, finished_at = ?done.finished_at, "occurrence {id} was already done; not running it again");
                return Ok(Begun::Exit(0));
            }
            Decision::SkipUnfinished(started) => {
                tracing::info!(event = "occurrence-skipped", occurrence = id, by_token = started.token, by = %started.identity, "occurrence {id} was started by an earlier leader and never finished; skipping it (--if-unfinished skip)");
                return Ok(Begun::Exit(0));
            }
            Decision::RefuseUnfinished(started) => {
                tracing::error!(event = "occurrence-unfinished", occurrence = id, by_token = started.token, by = %started.identity, started_at = %started.started_at, "occurrence {id} was started by an earlier leader and never finished; not running it (--if-unfinished fail); to run it again: etcdctl del '{}'", occurrence.key);
                return Ok(Begun::Exit(exit::FAILURE));
            }
        };
        let started = Record::started(candidacy.token, &self.settings.identity, previous_token);
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

    /// Records the command's outcome, fenced. Returns whether the store accepted it.
    async fn finish_occurrence(&self, candidacy: &Candidacy, started: &Record, code: u8) -> bool {
        let Some(occurrence) = &self.settings.occurrence else {
            return true;
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
                    tracing::info!(event = "occurrence-finished", occurrence = id, token = candidacy.token, state = ?finished.state, exit_code = code, "occurrence {id} recorded as {:?}", finished.state);
                    return true;
                }
                Ok(false) => {
                    tracing::error!(
                        event = "occurrence-rejected",
                        occurrence = id,
                        token = candidacy.token,
                        "fenced write rejected: this instance no longer leads, so occurrence {id} stays as the current leader recorded it"
                    );
                    return false;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    tracing::error!(event = "occurrence-unrecorded", occurrence = id, token = candidacy.token, error = %e, "could not record the outcome of occurrence {id}; it stays 'started'");
                    return false;
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
        until: Duration,
    ) -> bool {
        let clock = self.clock.clone();
        if clock.now() >= until {
            return true;
        }
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
                    return true;
                }
                () = &mut key_gone => {
                    tracing::warn!(event = "hold-ended", token = candidacy.token, "our election key was deleted during --hold-at-least");
                    return true;
                }
                _ = clock.sleep_until(until) => return true,
                signal = self.signals.recv() => {
                    if signals::stops_the_child(signal) {
                        tracing::info!(event = "hold-ended", token = candidacy.token, signal = signal.as_str(), "stopping during --hold-at-least; the lease expires on its own");
                        return false;
                    }
                }
            }
        }
    }

    /// Leadership can no longer be proven: stop the command's whole group within
    /// `--kill-after`. The renewal loop has stopped (its future ended or is dropped with this
    /// call): a lost lease is never kept alive.
    async fn step_down(&mut self, candidacy: &Candidacy, reason: &str, group_gone: bool) {
        let settings = self.settings;
        let clock = self.clock.clone();
        tracing::warn!(
            event = "stepping-down",
            token = candidacy.token,
            reason,
            signal = settings.kill_signal.as_str(),
            "leadership lost; stopping the command"
        );
        notify::status(&format!("stepping down: {reason}"));
        if group_gone {
            tracing::warn!(
                event = "stepped-down",
                token = candidacy.token,
                "the command had already ended"
            );
            return;
        }
        self.supervisor.signal(settings.kill_signal).await;
        let kill_at = clock.now() + settings.timing.kill_after;
        let mut killed = false;
        loop {
            tokio::select! {
                event = self.supervisor.next_event() => match event {
                    Ok(Event::GroupEmpty) | Ok(Event::SpawnFailed { .. }) | Err(_) => break,
                    Ok(Event::Exited(child)) => tracing::info!(event = "exited", token = candidacy.token, status = child.code(), "command {child}"),
                    Ok(Event::Started(_)) => {}
                },
                _ = clock.sleep_until(kill_at), if !killed => {
                    killed = true;
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the command's group outlived --kill-after; sending SIGKILL");
                    self.supervisor.signal(Signal::SIGKILL).await;
                }
                signal = self.signals.recv() => self.supervisor.signal(signal).await,
            }
        }
        tracing::warn!(
            event = "stepped-down",
            token = candidacy.token,
            "the command's process group is gone"
        );
    }

    /// Revokes the lease (deleting the candidate key), retrying briefly; if that fails the lease
    /// expires on its own within the TTL.
    async fn release(&mut self, candidacy: &Candidacy) {
        let clock = self.clock.clone();
        let limit = clock.now() + RELEASE_BUDGET;
        let mut backoff = Backoff::new();
        loop {
            let result = tokio::select! {
                result = self.backend.resign(candidacy) => result,
                _ = clock.sleep_until(limit) => Err(StoreError::Transient("no answer".into())),
            };
            match result {
                Ok(()) => {
                    tracing::info!(
                        event = "released",
                        token = candidacy.token,
                        "lease released"
                    );
                    return;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    tracing::warn!(
                        event = "release-failed",
                        error = %e,
                        "could not release the lease; it expires on its own within the TTL"
                    );
                    return;
                }
            }
        }
    }
}
