//! What each [`Event`] of the run state machine means outside it: the log line, the counters and
//! the status systemd shows, decided in one `match` ([`Exporter`]). Every arm only does what
//! cannot block (see "Emitting never waits" in event.rs): queue a line, update atomics, send a
//! datagram that is dropped when it does not fit.

use std::time::Duration;

use super::event::{
    CandidacyLost, Event, NotAcquired, Recampaign, Report, Seen, Sigkill, Withdrawal,
};
use super::metrics::{self, OccurrenceOutcome};
use crate::notify;

/// The reporter of a real run: logs, metrics, sd_notify.
pub struct Exporter {
    /// The lease name, for the status lines.
    lease: String,
}

impl Exporter {
    pub fn new(lease: &str) -> Exporter {
        Exporter {
            lease: lease.to_owned(),
        }
    }
}

impl Report for Exporter {
    fn emit(&self, event: &Event) {
        let lease = &self.lease;
        match event {
            Event::Splaying { delay } => {
                let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                tracing::info!(
                    event = "splay",
                    delay_ms = ms,
                    "waiting {} before campaigning (--splay)",
                    humantime::format_duration(Duration::from_millis(ms))
                );
            }
            Event::Withdrawn { signal, when } => {
                let signal = signal.as_str();
                match when {
                    Withdrawal::Splay => {
                        tracing::info!(
                            event = "withdrawn",
                            signal,
                            "stopped during --splay; nothing was contacted"
                        )
                    }
                    Withdrawal::WaitingForHealth => {
                        tracing::info!(
                            event = "withdrawn",
                            signal,
                            "stopped while waiting for the health check"
                        )
                    }
                    Withdrawal::Campaigning => {
                        tracing::info!(event = "withdrawn", signal, "withdrawing the candidacy")
                    }
                    Withdrawal::BeforeStart => {
                        tracing::info!(
                            event = "withdrawn",
                            signal,
                            "withdrawing before the command started"
                        )
                    }
                }
            }
            Event::WaitingForHealth => tracing::info!(
                event = "waiting-for-health",
                "waiting for the health check to pass before campaigning"
            ),
            Event::NotAcquired(why) => not_acquired(why),
            Event::CampaignFailed { error } => {
                tracing::debug!(event = "campaign-failed", error = %error, "campaign failed; retrying")
            }
            Event::Campaigning {
                first,
                place,
                key,
                confirmed,
                deadline,
            } => {
                let campaigning = format!("campaigning for lease {lease}");
                if *first {
                    notify::ready(&campaigning);
                } else {
                    notify::status(&campaigning);
                }
                // Not a token yet: only a leader's create-revision is one.
                tracing::info!(
                    candidate_revision = *place,
                    key = %key,
                    event = "campaigning",
                    "campaigning"
                );
                metrics::campaigning(*confirmed, *deadline);
            }
            Event::CandidacyLost(how) => candidacy_lost(*how),
            Event::LeftLine { failures: None } => tracing::warn!(
                event = "left-line",
                "elected, but the health check fails; leaving the line until it passes"
            ),
            Event::LeftLine {
                failures: Some(failures),
            } => {
                tracing::warn!(
                    event = "left-line",
                    failures = *failures,
                    "the health check failed {} times in a row; leaving the line until it passes",
                    failures
                )
            }
            Event::SignalIgnored { signal } => {
                tracing::debug!(
                    event = "signal-ignored",
                    signal = signal.as_str(),
                    "ignored while campaigning"
                )
            }
            Event::Elected { token } => {
                tracing::info!(event = "elected", token = *token, "elected");
                metrics::elected(*token);
                notify::status(&format!("leader of lease {lease} (token {token})"));
            }
            Event::LostBeforeStart { token, seen } => {
                metrics::stepped_down(seen.reason());
                match seen {
                    Seen::Renewal(lost) => {
                        tracing::warn!(event = "stepping-down", token = *token, reason = %lost, "leadership lost before the command started")
                    }
                    Seen::KeyDeleted => {
                        tracing::warn!(
                            event = "stepping-down",
                            token = *token,
                            "our election key was deleted before the command started"
                        )
                    }
                }
            }
            Event::Starting { token } => {
                tracing::info!(event = "starting", token = *token, "starting the command")
            }
            Event::Started { token, pid } => {
                metrics::command_started();
                tracing::info!(
                    event = "started",
                    token = *token,
                    pid = *pid,
                    "command started"
                );
            }
            Event::Exited { token, status } => {
                metrics::command_exited(status.code());
                tracing::info!(
                    event = "exited",
                    token = *token,
                    status = status.code(),
                    "command {status}"
                );
            }
            Event::SignalForwarded {
                token,
                signal,
                stop,
            } => {
                tracing::info!(
                    event = "signal-forwarded",
                    token = *token,
                    signal = signal.as_str(),
                    "forwarded to the command's process group"
                );
                if *stop {
                    metrics::stop_requested();
                }
            }
            Event::HandingOver {
                token,
                signal,
                why,
                stop,
            } => {
                if *stop {
                    metrics::stop_requested();
                }
                tracing::warn!(
                    event = "handing-over",
                    token = *token,
                    signal = signal.as_str(),
                    "{why}; stopping the command"
                );
                notify::status(&format!("handing over lease {lease} (token {token})"));
            }
            Event::MaxRuntime { token, signal } => {
                metrics::max_runtime_reached();
                tracing::warn!(
                    event = "max-runtime",
                    token = *token,
                    signal = signal.as_str(),
                    "the command ran for --max-runtime; stopping it"
                );
                notify::status(&format!(
                    "stopping the command at --max-runtime (lease {lease}, token {token})"
                ));
            }
            Event::SupervisorDied { token, error } => {
                tracing::error!(event = "supervisor-died", token = *token, error = %error, "the supervisor process died; killing the command's group")
            }
            Event::GroupGone { code } => metrics::command_ended(*code),
            Event::MaxRuntimeStopped { token, code } => tracing::warn!(
                event = "max-runtime-stopped",
                token = *token,
                status = *code,
                "the command's process group is gone (stopped at --max-runtime)"
            ),
            Event::NotHolding { token } => tracing::info!(
                event = "hold-ended",
                token = *token,
                "stopped while the command ran: not holding; the lease expires on its own"
            ),
            Event::Holding { token } => {
                tracing::info!(
                    event = "holding",
                    token = *token,
                    "command done; holding the lease (--hold-at-least)"
                );
                notify::status(&format!("holding lease {lease} (token {token})"));
            }
            Event::HoldLost { token, seen } => match seen {
                Seen::Renewal(lost) => {
                    tracing::warn!(event = "hold-ended", token = *token, reason = %lost, "leadership lost during --hold-at-least")
                }
                Seen::KeyDeleted => {
                    tracing::warn!(
                        event = "hold-ended",
                        token = *token,
                        "our election key was deleted during --hold-at-least"
                    )
                }
            },
            Event::HoldStopped { token, signal } => {
                tracing::info!(
                    event = "hold-ended",
                    token = *token,
                    signal = signal.as_str(),
                    "stopping during --hold-at-least; the lease expires on its own"
                )
            }
            Event::HandingOverWhileHolding { token, why } => {
                tracing::warn!(
                    event = "handing-over",
                    token = *token,
                    "{why} during --hold-at-least"
                )
            }
            Event::HandedOver { token } => tracing::warn!(
                event = "handed-over",
                token = *token,
                "the command's process group is gone; releasing the lease (resign)"
            ),
            Event::HandoverComplete => notify::status("handed over (resign)"),
            Event::Recampaigning(after) => recampaigning(*after),
            Event::LeadEnded { lost } => metrics::led_ended(*lost),
            Event::LeadershipLost { reason } => metrics::stepped_down(*reason),
            Event::SteppingDown {
                token,
                reason,
                signal: None,
            } => {
                tracing::warn!(event = "stepping-down", token = *token, reason = %reason, "leadership lost; the command had already ended");
                notify::status(&format!("stepped down: {reason}"));
            }
            Event::SteppingDown {
                token,
                reason,
                signal: Some(first),
            } => {
                tracing::warn!(
                    event = "stepping-down",
                    token = *token,
                    reason = %reason,
                    signal = first.as_str(),
                    "leadership lost; stopping the command"
                );
                notify::status(&format!("stepping down: {reason}"));
            }
            Event::Sigkill { token, why } => sigkill(*token, *why),
            Event::SteppedDown { token } => tracing::warn!(
                event = "stepped-down",
                token = *token,
                "the command's process group is gone"
            ),
            Event::GroupStuck {
                token,
                pids,
                waited,
            } => tracing::error!(
                event = "group-stuck",
                token = *token,
                pids = %pids.iter().map(i32::to_string).collect::<Vec<_>>().join(","),
                "the command's group survived SIGKILL for {}; giving up on it and leaving the lease to expire on its own",
                humantime::format_duration(*waited)
            ),
            Event::ExitedWhileStopping { token, status } => {
                tracing::info!(
                    event = "exited",
                    token = *token,
                    status = status.code(),
                    "command {status}"
                )
            }
            Event::SupervisorDiedWhileStopping { error } => {
                tracing::error!(event = "supervisor-died", error = %error, "the supervisor process died")
            }
            Event::Released { lease_id } => tracing::info!(
                event = "released",
                lease_id = lease_id.as_deref(),
                "lease released"
            ),
            Event::ReleaseFailed { error } => tracing::warn!(
                event = "release-failed",
                error = %error,
                "could not release the lease; it expires on its own within the TTL"
            ),
            Event::ReleaseRetrying {
                lease_id,
                store,
                left,
                restart_resets_leases,
            } => {
                let why = if *restart_resets_leases {
                    format!(
                        " ({store} restarts reset lease TTLs, so a lease left behind would stand a full TTL after {store} is back)"
                    )
                } else {
                    String::new()
                };
                tracing::warn!(
                    event = "release-retrying",
                    lease_id = lease_id.as_deref(),
                    "{store} is unreachable: retrying the release for up to {}{why}; TERM or INT stops this",
                    // To the millisecond: whole seconds, rounded down, promised up to a second less
                    // than the retry then took.
                    humantime::format_duration(Duration::from_millis(
                        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
                    ))
                );
            }
            Event::ReleasedOnRetry { lease_id, store } => tracing::warn!(
                event = "released",
                lease_id = lease_id.as_deref(),
                "lease released once {store} answered again"
            ),
            Event::ReleaseAbandoned { signal } => {
                tracing::warn!(
                    event = "release-abandoned",
                    signal = signal.as_str(),
                    "stopped retrying the release; the lease expires on its own"
                )
            }
            Event::ReleaseGaveUp { store, error } => tracing::warn!(
                event = "release-failed",
                error = %error,
                "gave up retrying the release; the lease expires on its own within the TTL after {store} is back"
            ),
            Event::OccurrenceDone {
                id,
                by_token,
                by,
                finished_at,
            } => {
                metrics::occurrence(OccurrenceOutcome::AlreadyDone);
                tracing::info!(event = "occurrence-done", occurrence = id.as_str(), by_token = *by_token, by = %by, finished_at = finished_at.as_deref().unwrap_or("unknown"), "occurrence {id} was already done; not running it again");
            }
            Event::OccurrenceSkipped { id, by_token, by } => {
                metrics::occurrence(OccurrenceOutcome::Skipped);
                tracing::info!(event = "occurrence-skipped", occurrence = id.as_str(), by_token = *by_token, by = %by, "occurrence {id} was started by an earlier leader and never finished; skipping it (--if-unfinished skip)");
            }
            Event::OccurrenceUnfinished {
                id,
                by_token,
                by,
                started_at,
                hint,
            } => {
                metrics::occurrence(OccurrenceOutcome::Refused);
                tracing::error!(event = "occurrence-unfinished", occurrence = id.as_str(), by_token = *by_token, by = %by, started_at = %started_at, "occurrence {id} was started by an earlier leader and has no recorded outcome: that run died or lost its lease mid-run, or finished but could not record it (its store cut off at the end); not running it (--if-unfinished fail); to run it again: {hint}");
            }
            Event::OccurrenceStarted {
                id,
                token,
                previous_token,
            } => {
                metrics::occurrence(OccurrenceOutcome::Started);
                tracing::info!(
                    event = "occurrence-started",
                    occurrence = id.as_str(),
                    token = *token,
                    previous_token = *previous_token,
                    "occurrence {id} recorded as started"
                );
            }
            Event::OccurrenceRejected {
                id,
                token,
                before_start,
            } => {
                metrics::fenced_write_rejected();
                if *before_start {
                    tracing::error!(
                        event = "occurrence-rejected",
                        occurrence = id.as_str(),
                        token = *token,
                        "fenced write rejected: this instance no longer leads; not starting the command"
                    );
                } else {
                    tracing::error!(
                        event = "occurrence-rejected",
                        occurrence = id.as_str(),
                        token = *token,
                        "fenced write rejected: this instance no longer leads, so occurrence {id} stays as the current leader recorded it"
                    );
                }
            }
            Event::OccurrenceFinished {
                id,
                token,
                state,
                code,
            } => {
                metrics::occurrence(if *code == 0 {
                    OccurrenceOutcome::Done
                } else {
                    OccurrenceOutcome::Failed
                });
                tracing::info!(event = "occurrence-finished", occurrence = id.as_str(), token = *token, state = %state, exit_code = *code, "occurrence {id} recorded as {}", state);
            }
            Event::OccurrenceUnrecorded { id, token, error } => {
                metrics::occurrence(OccurrenceOutcome::Unrecorded);
                tracing::error!(event = "occurrence-unrecorded", occurrence = id.as_str(), token = *token, error = %error, "could not record the outcome of occurrence {id}; it stays 'started', and a later leader with the same ID takes it for a run that never finished (--if-unfinished decides)");
            }
            Event::HealthCheckFailed { failures, why } => tracing::info!(
                event = "health-check-failed",
                failures = *failures,
                "the health check failed: {why}"
            ),
            Event::Healthy => tracing::info!(event = "healthy", "the health check passed"),
            Event::Unhealthy { failures } => tracing::warn!(
                event = "unhealthy",
                failures = *failures,
                "the health check failed {failures} times in a row (--health-retries)"
            ),
            // Called from the checker's thread: atomics only.
            Event::HealthVerdict { healthy } => metrics::health(*healthy),
            Event::Renewed {
                outcome,
                sent,
                latency,
                deadline,
            } => metrics::renewed(*outcome, *sent, *latency, *deadline),
            Event::HeldSlots { held } => metrics::held_slots(held.clone()),
        }
    }

    fn barrier(&self, limit: Duration) {
        notify::barrier(limit);
    }
}

fn not_acquired(why: &NotAcquired) {
    match why {
        NotAcquired::HealthFailed => {
            tracing::info!(
                event = "not-acquired",
                "the health check failed (--no-wait)"
            )
        }
        NotAcquired::TimeoutWaitingForHealth => {
            tracing::info!(
                event = "not-acquired",
                "--wait-timeout passed while waiting for the health check"
            )
        }
        NotAcquired::TimeoutCampaigning => tracing::info!(
            event = "not-acquired",
            "--wait-timeout passed while campaigning"
        ),
        NotAcquired::TimeoutInLine => {
            tracing::info!(
                event = "not-acquired",
                "--wait-timeout passed; withdrawing the candidacy"
            )
        }
        NotAcquired::Holders {
            holders,
            count,
            max_holders,
            predecessor,
        } => {
            tracing::info!(event = "not-acquired", %holders, max_holders = *max_holders, %predecessor, "{} of {} instances hold (--no-wait): {holders}", count, max_holders)
        }
        NotAcquired::Leader {
            identity,
            token,
            predecessor,
        } => {
            tracing::info!(event = "not-acquired", leader = %identity, leader_token = *token, %predecessor, "another instance leads (--no-wait): {identity}")
        }
    }
}

fn candidacy_lost(how: CandidacyLost) {
    match how {
        CandidacyLost::Renewal(lost) => {
            tracing::warn!(event = "candidacy-lost", reason = %lost, "lost our place in line; campaigning again")
        }
        CandidacyLost::ElectedPastDeadline => tracing::warn!(
            event = "candidacy-lost",
            "elected, but the lease is past its renew deadline; campaigning again"
        ),
        CandidacyLost::KeyDisappeared => {
            tracing::warn!(
                event = "candidacy-lost",
                "our candidate key disappeared; campaigning again"
            )
        }
        CandidacyLost::KeyDeleted => {
            tracing::warn!(
                event = "candidacy-lost",
                "our candidate key was deleted; campaigning again"
            )
        }
    }
}

fn recampaigning(after: Recampaign) {
    match after {
        Recampaign::Handover => tracing::info!(
            event = "recampaigning",
            "handed over; campaigning again after --retry-period (--recampaign)"
        ),
        Recampaign::Loss => {
            tracing::info!(event = "recampaigning", "campaigning again (--recampaign)")
        }
        Recampaign::MaxRuntime => tracing::info!(
            event = "recampaigning",
            "stopped at --max-runtime; campaigning again after --retry-period (--recampaign)"
        ),
    }
}

fn sigkill(token: i64, why: Sigkill) {
    match why {
        Sigkill::KillAfter => tracing::warn!(
            event = "sigkill",
            token,
            "the command's group outlived --kill-after; sent SIGKILL"
        ),
        Sigkill::Late(late) => {
            let late_ms = late.as_millis() as u64;
            tracing::warn!(
                event = "sigkill",
                token,
                late_ms,
                "the loss was noticed {} after the renew deadline, too late for --kill-after to end before the lease can; sent SIGKILL",
                humantime::format_duration(Duration::from_millis(late_ms))
            );
        }
        Sigkill::ClaimEnded => {
            tracing::warn!(
                event = "sigkill",
                token,
                "the claim ended during --kill-after; sent SIGKILL"
            )
        }
    }
}
