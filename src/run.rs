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
use crate::election::etcd::Backoff;
use crate::election::{self, Backend, Candidacy, StoreError, Turn};
use crate::exit::{self, ChildStatus, Failure};
use crate::notify;
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
            let deadline = Deadline::default();
            let mut keeper = self.backend.keeper(&candidacy);
            let renewal = keep_renewing(
                &mut keeper,
                &clock,
                self.settings.timing,
                confirmed,
                &deadline,
            );
            tokio::pin!(renewal);
            match self
                .wait_turn(&candidacy, renewal.as_mut(), give_up_at)
                .await?
            {
                Waited::Leading => {}
                Waited::Recampaign => continue,
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
                continue;
            }
            match self.lead(&candidacy, renewal.as_mut()).await? {
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
        give_up_at: Option<Duration>,
    ) -> anyhow::Result<Waited> {
        let backend = self.backend;
        let clock = self.clock.clone();
        let backoff = (self.settings.timing.retry_period / 4).max(Duration::from_millis(20));
        if self.settings.wait == Wait::No {
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
    ) -> anyhow::Result<Led> {
        let settings = self.settings;
        let env = [
            ("LEADER_TOKEN", candidacy.token.to_string()),
            ("LEADER_LEASE", settings.lease.clone()),
            ("LEADER_KEY", candidacy.key.clone()),
            ("LEADER_IDENTITY", settings.identity.clone()),
            ("LEADER_LEASE_ID", candidacy.lease_id_hex()),
        ];
        tracing::info!(
            event = "elected",
            token = candidacy.token,
            "elected; starting the command"
        );
        notify::status(&format!(
            "leader of lease {} (token {})",
            settings.lease, candidacy.token
        ));
        if let Err(e) = self.supervisor.spawn(&env).await {
            self.release(candidacy).await;
            return Err(Failure::usage(format!("cannot reach the supervisor: {e}")).into());
        }
        let backend = self.backend;
        let clock = self.clock.clone();
        let key_gone = backend.key_gone(candidacy);
        tokio::pin!(key_gone);
        let mut status: Option<ChildStatus> = None;
        let mut kill_at: Option<Duration> = None;
        let mut killed = false;
        loop {
            tokio::select! {
                biased;
                lost = &mut renewal => {
                    self.step_down(candidacy, &lost.to_string()).await;
                    return Ok(Led::Lost);
                }
                () = &mut key_gone => {
                    self.step_down(candidacy, "our election key was deleted").await;
                    return Ok(Led::Lost);
                }
                event = self.supervisor.next_event() => match event {
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
                        self.release(candidacy).await;
                        return Ok(Led::Exit(status.map_or(exit::FAILURE, ChildStatus::code)));
                    }
                    Err(e) => {
                        self.release(candidacy).await;
                        return Err(Failure::usage(format!("supervisor: {e}")).into());
                    }
                },
                signal = self.signals.recv() => {
                    tracing::info!(event = "signal-forwarded", token = candidacy.token, signal = signal.as_str(), "forwarding to the command's process group");
                    self.supervisor.signal(signal).await;
                    if signals::stops_the_child(signal) && kill_at.is_none() {
                        kill_at = Some(clock.now() + settings.timing.kill_after);
                    }
                }
                _ = sleep_until_some(&clock, kill_at), if !killed => {
                    killed = true;
                    tracing::warn!(event = "sigkill", token = candidacy.token, "the command's group outlived --kill-after; sending SIGKILL");
                    self.supervisor.signal(Signal::SIGKILL).await;
                }
            }
        }
    }

    /// Leadership can no longer be proven: stop the command's whole group within
    /// `--kill-after`. The renewal loop has stopped (its future ended or is dropped with this
    /// call): a lost lease is never kept alive.
    async fn step_down(&mut self, candidacy: &Candidacy, reason: &str) {
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
        // Usually the lease is gone or etcd unreachable; if not, revoking it lets the next
        // leader start now instead of after the TTL.
        self.release(candidacy).await;
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
