//! With `--occurrence`: the record read and written (fenced) before the command may start, and
//! the outcome recorded once its group is gone.

use super::Runner;
use super::Settings;
use crate::clock::Clock;
use crate::election::{Backoff, Candidacy, Store, StoreError};
use crate::exit::{self, Failure};
use crate::process::Supervise;
use crate::records::occurrence::{self, Decision, Occurrence, Record};

/// How recording an occurrence's outcome went.
pub(super) enum Finished {
    Recorded,
    /// The fence rejected it: this instance no longer leads.
    Rejected,
    /// The store could not be reached in time; the record stays `started`.
    Unrecorded,
}

/// How a leader's occurrence begins.
pub(super) enum Begun {
    /// Recorded as started: run the command.
    Run(Record),
    /// Do not run it; exit with this code.
    Exit(u8),
    /// The fenced write was rejected: this instance no longer leads.
    Lost,
}

impl<B: Store, C: Clock, S: Supervise> Runner<'_, B, C, S> {
    /// Reads the occurrence record and decides; writes `started` (fenced) when the command
    /// is to run.
    /// Takes no `self`, so that the caller can listen for signals meanwhile.
    pub(super) async fn begin_occurrence(
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
                crate::telemetry::metrics::occurrence(
                    crate::telemetry::metrics::OccurrenceOutcome::AlreadyDone,
                );
                tracing::info!(event = "occurrence-done", occurrence = id, by_token = done.token, by = %done.identity, finished_at = done.finished_at.as_deref().unwrap_or("unknown"), "occurrence {id} was already done; not running it again");
                return Ok(Begun::Exit(0));
            }
            Decision::SkipUnfinished(started) => {
                crate::telemetry::metrics::occurrence(
                    crate::telemetry::metrics::OccurrenceOutcome::Skipped,
                );
                tracing::info!(event = "occurrence-skipped", occurrence = id, by_token = started.token, by = %started.identity, "occurrence {id} was started by an earlier leader and never finished; skipping it (--if-unfinished skip)");
                return Ok(Begun::Exit(0));
            }
            Decision::RefuseUnfinished(started) => {
                crate::telemetry::metrics::occurrence(
                    crate::telemetry::metrics::OccurrenceOutcome::Refused,
                );
                tracing::error!(event = "occurrence-unfinished", occurrence = id, by_token = started.token, by = %started.identity, started_at = %started.started_at, "occurrence {id} was started by an earlier leader and has no recorded outcome: that run died or lost its lease mid-run, or finished but could not record it (its store cut off at the end); not running it (--if-unfinished fail); to run it again: {}", backend.delete_record_hint(&occurrence.key));
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
                    crate::telemetry::metrics::occurrence(
                        crate::telemetry::metrics::OccurrenceOutcome::Started,
                    );
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
                    crate::telemetry::metrics::fenced_write_rejected();
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
    pub(super) async fn finish_occurrence(
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
                    crate::telemetry::metrics::occurrence(if code == 0 {
                        crate::telemetry::metrics::OccurrenceOutcome::Done
                    } else {
                        crate::telemetry::metrics::OccurrenceOutcome::Failed
                    });
                    tracing::info!(event = "occurrence-finished", occurrence = id, token = candidacy.token, state = %finished.state, exit_code = code, "occurrence {id} recorded as {}", finished.state);
                    return Finished::Recorded;
                }
                Ok(false) => {
                    crate::telemetry::metrics::fenced_write_rejected();
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
                    crate::telemetry::metrics::occurrence(
                        crate::telemetry::metrics::OccurrenceOutcome::Unrecorded,
                    );
                    tracing::error!(event = "occurrence-unrecorded", occurrence = id, token = candidacy.token, error = %e, "could not record the outcome of occurrence {id}; it stays 'started', and a later leader with the same ID takes it for a run that never finished (--if-unfinished decides)");
                    return Finished::Unrecorded;
                }
            }
        }
    }
}
