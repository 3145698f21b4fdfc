//! With `--occurrence`: the record read and written (fenced) before the command may start, and
//! the outcome recorded once its group is gone.

use super::Runner;
use super::Settings;
use super::{Event, Reporter};
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
        report: &Reporter,
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
                report.emit(Event::OccurrenceDone {
                    id: id.to_owned(),
                    by_token: done.token,
                    by: done.identity,
                    finished_at: done.finished_at,
                });
                return Ok(Begun::Exit(0));
            }
            Decision::SkipUnfinished(started) => {
                report.emit(Event::OccurrenceSkipped {
                    id: id.to_owned(),
                    by_token: started.token,
                    by: started.identity,
                });
                return Ok(Begun::Exit(0));
            }
            Decision::RefuseUnfinished(started) => {
                report.emit(Event::OccurrenceUnfinished {
                    id: id.to_owned(),
                    by_token: started.token,
                    by: started.identity,
                    started_at: started.started_at,
                    hint: backend.delete_record_hint(&occurrence.key),
                });
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
                    report.emit(Event::OccurrenceStarted {
                        id: id.to_owned(),
                        token: candidacy.token,
                        previous_token,
                    });
                    return Ok(Begun::Run(started));
                }
                Ok(false) => {
                    report.emit(Event::OccurrenceRejected {
                        id: id.to_owned(),
                        token: candidacy.token,
                        before_start: true,
                    });
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
                    self.report.emit(Event::OccurrenceFinished {
                        id: id.to_owned(),
                        token: candidacy.token,
                        state: finished.state.to_string(),
                        code,
                    });
                    return Finished::Recorded;
                }
                Ok(false) => {
                    self.report.emit(Event::OccurrenceRejected {
                        id: id.to_owned(),
                        token: candidacy.token,
                        before_start: false,
                    });
                    return Finished::Rejected;
                }
                Err(e) if e.is_transient() && clock.now() < limit => backoff.sleep().await,
                Err(e) => {
                    self.report.emit(Event::OccurrenceUnrecorded {
                        id: id.to_owned(),
                        token: candidacy.token,
                        error: e.to_string(),
                    });
                    return Finished::Unrecorded;
                }
            }
        }
    }
}
