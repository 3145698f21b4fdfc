//! What the run state machine reports: one [`Event`] per transition, as facts (tokens, signals,
//! reasons, instants), through the one [`Reporter`] the Runner owns; the renewal loop beside it
//! (`lease/renewal.rs`: each renewal) and the reader of held slots (`run/held.rs`) report through
//! the same reporter, so that no counter is written from where the run is. What is *said* about an
//! event — the log line, the counters, the status systemd shows — is decided in one place,
//! [`super::report::Exporter`]; the state machine only measures (hyperfine's split between
//! measuring and exporting). `run/` re-exports these as `run::Event` and `run::Reporter`: they
//! live on this floor so that the exporter, below `run/`, can name them.
//!
//! # Emitting never waits
//! Events are emitted from `select!` arms on the way from a missed deadline to SIGKILL, so
//! [`Reporter::emit`] must never block. The exporter keeps that by doing only what cannot block:
//! a log line is formatted and *queued* with `try_send` (logging.rs: a full queue drops the line
//! and counts it; the writer thread alone waits on stderr, so a pipe nobody reads stops nothing
//! here — tests/local_faults.rs), the counters are atomics (a change only wakes the metrics
//! file's task, which hands the writing to a thread of its own), and sd_notify sends on a non-blocking
//! socket and drops what does not fit (notify.rs, and its local-fault test of a stalled
//! socket). The one call that may wait, [`Reporter::barrier`], is not an event and is made only
//! on an exit path.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::metrics::Renewed;
use crate::ended::Ended;
use crate::exit::ChildStatus;

/// One transition of the run state machine (or of the `--health-cmd` checker beside it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `--splay`: waiting this long before the first campaign.
    Splaying { delay: Duration },
    /// TERM, INT, HUP or QUIT ended a candidacy before the command started.
    Withdrawn { signal: Signal, when: Withdrawal },
    /// `--health-cmd` must pass before this instance joins the line.
    WaitingForHealth,
    /// The run gives up without leading: exit 124.
    NotAcquired(NotAcquired),
    /// One attempt to join the line failed; it is retried.
    CampaignFailed { error: String },
    /// A candidacy stands in line: `first` for the first of the run (systemd's READY=1).
    /// `confirmed` is its grant's send instant, `deadline` its renew deadline.
    Campaigning {
        first: bool,
        place: i64,
        key: String,
        confirmed: Duration,
        deadline: Duration,
    },
    /// The candidacy lost its place before leading; it campaigns again.
    CandidacyLost(CandidacyLost),
    /// The health check fails: the candidacy leaves the line until it passes. `failures` in a
    /// row while waiting; `None` when the turn came in the instant the verdict failed.
    LeftLine { failures: Option<u32> },
    /// A signal that means nothing while campaigning.
    SignalIgnored { signal: Signal },
    /// This instance leads, with this fencing token.
    Elected { token: i64 },
    /// Leadership ended while the occurrence record was read or written: nothing started.
    LostBeforeStart { token: i64, seen: Seen },
    /// The supervisor is asked to start the command.
    Starting { token: i64 },
    /// The command runs, as this pid.
    Started { token: i64, pid: i32 },
    /// The command exited while leading (its group may still run).
    Exited { token: i64, status: ChildStatus },
    /// A signal was forwarded to the command's group; `stop`: it starts the stop path.
    SignalForwarded {
        token: i64,
        signal: Signal,
        stop: bool,
    },
    /// A handover (`why`) sent `signal` to the group; `stop`: it started the stop path (none
    /// was under way).
    HandingOver {
        token: i64,
        signal: Signal,
        why: &'static str,
        stop: bool,
    },
    /// `--max-runtime` passed: `signal` went to the group.
    MaxRuntime { token: i64, signal: Signal },
    /// The supervisor died while leading; the group has been SIGKILLed.
    SupervisorDied { token: i64, error: String },
    /// The command's whole group is gone; its status, when known.
    GroupGone { code: Option<u8> },
    /// The group stopped at `--max-runtime` is gone; `code` is the command's status.
    MaxRuntimeStopped { token: i64, code: u8 },
    /// A stop asked for while the command ran: `--hold-at-least` does not apply.
    NotHolding { token: i64 },
    /// `--hold-at-least`: the command is done, the claim is kept.
    Holding { token: i64 },
    /// Leadership ended during `--hold-at-least`.
    HoldLost { token: i64, seen: Seen },
    /// TERM or INT during `--hold-at-least`: the lease is left to expire.
    HoldStopped { token: i64, signal: Signal },
    /// A handover (`why`) asked for during `--hold-at-least`.
    HandingOverWhileHolding { token: i64, why: &'static str },
    /// A handover's group is gone: the lease is released.
    HandedOver { token: i64 },
    /// After a handover's release.
    HandoverComplete,
    /// `--recampaign`: campaigning again.
    Recampaigning(Recampaign),
    /// Leading is over; `lost`: leadership was lost or handed over.
    LeadEnded { lost: bool },
    /// Leadership was lost while the command ran: counted before any signal goes.
    LeadershipLost { reason: Ended },
    /// Stepping down: `signal` went to the group (`None`: the command had already ended).
    SteppingDown {
        token: i64,
        reason: Ended,
        signal: Option<Signal>,
    },
    /// SIGKILL went to the group.
    Sigkill { token: i64, why: Sigkill },
    /// A step-down's group is gone.
    SteppedDown { token: i64 },
    /// The group survived SIGKILL for `KILL_WAIT`: given up on; these pids were left.
    GroupStuck {
        token: i64,
        pids: Vec<i32>,
        waited: Duration,
    },
    /// The command exited while its group was being stopped.
    ExitedWhileStopping { token: i64, status: ChildStatus },
    /// The supervisor died while the group was being stopped.
    SupervisorDiedWhileStopping { error: String },
    /// The claim was released.
    Released { lease_id: Option<String> },
    /// The release failed; the lease expires on its own.
    ReleaseFailed { error: String },
    /// The store is unreachable: the release at exit is retried for up to `left`.
    ReleaseRetrying {
        lease_id: Option<String>,
        store: &'static str,
        left: Duration,
        restart_resets_leases: bool,
    },
    /// A retried release went through.
    ReleasedOnRetry {
        lease_id: Option<String>,
        store: &'static str,
    },
    /// TERM or INT ended the release's retry.
    ReleaseAbandoned { signal: Signal },
    /// The release's retry gave up.
    ReleaseGaveUp { store: &'static str, error: String },
    /// `--occurrence`: already done by an earlier leader; not run again.
    OccurrenceDone {
        id: String,
        by_token: i64,
        by: String,
        finished_at: Option<String>,
    },
    /// `--occurrence`: unfinished by an earlier leader, skipped (`--if-unfinished skip`).
    OccurrenceSkipped {
        id: String,
        by_token: i64,
        by: String,
    },
    /// `--occurrence`: unfinished by an earlier leader, refused (`--if-unfinished fail`);
    /// `hint` says how to run it again.
    OccurrenceUnfinished {
        id: String,
        by_token: i64,
        by: String,
        started_at: String,
        hint: String,
    },
    /// `--occurrence`: recorded as started.
    OccurrenceStarted {
        id: String,
        token: i64,
        previous_token: Option<i64>,
    },
    /// `--occurrence`: a fenced write was rejected, before the command started or after it.
    OccurrenceRejected {
        id: String,
        token: i64,
        before_start: bool,
    },
    /// `--occurrence`: the outcome was recorded.
    OccurrenceFinished {
        id: String,
        token: i64,
        state: String,
        code: u8,
    },
    /// `--occurrence`: the outcome could not be recorded.
    OccurrenceUnrecorded {
        id: String,
        token: i64,
        error: String,
    },
    /// `--health-cmd`: one check failed (`failures` in a row).
    HealthCheckFailed { failures: u32, why: String },
    /// `--health-cmd`: the instance became healthy.
    Healthy,
    /// `--health-cmd`: the instance became unhealthy after `failures` in a row.
    Unhealthy { failures: u32 },
    /// `--health-cmd`: the verdict after each check.
    HealthVerdict { healthy: bool },
    /// One renewal was answered, or abandoned after `--retry-period` (`lease/renewal.rs`): how,
    /// the instant it was sent, how long it took, and the deadline it proves if the claim is
    /// alive (send instant + `--renew-deadline`). Counted, not logged.
    Renewed {
        outcome: Renewed,
        sent: Duration,
        latency: Duration,
        deadline: Duration,
    },
    /// The held slots (`leader-exec hold`) of the lease as last read (`run/held.rs`): identity,
    /// token and bound in ms of each, for /metrics.
    HeldSlots { held: Vec<(String, i64, u64)> },
}

/// Where a candidacy was when a signal withdrew it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    Splay,
    WaitingForHealth,
    Campaigning,
    BeforeStart,
}

/// Why the run gives up without leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAcquired {
    /// `--no-wait`, and the first health check failed.
    HealthFailed,
    /// `--wait-timeout` passed while waiting for the health check.
    TimeoutWaitingForHealth,
    /// `--wait-timeout` passed while joining the line.
    TimeoutCampaigning,
    /// `--wait-timeout` passed while in line.
    TimeoutInLine,
    /// `--no-wait`, and `count` of `max_holders` hold (`holders` names them).
    Holders {
        holders: String,
        count: usize,
        max_holders: u32,
        predecessor: String,
    },
    /// `--no-wait`, and another instance leads.
    Leader {
        identity: String,
        token: Option<i64>,
        predecessor: String,
    },
}

/// How a candidacy lost its place before leading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidacyLost {
    /// The renewal loop ended it.
    Renewal(Ended),
    /// The turn came, but the lease is past its renew deadline.
    ElectedPastDeadline,
    /// The store no longer has the candidate key.
    KeyDisappeared,
    /// The candidate key was deleted (seen by the watch).
    KeyDeleted,
}

/// How a loss was seen: by the renewal loop, or by the watch on our own key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Renewal(Ended),
    KeyDeleted,
}

impl Seen {
    pub fn reason(self) -> Ended {
        match self {
            Seen::Renewal(reason) => reason,
            Seen::KeyDeleted => Ended::KeyDeleted,
        }
    }
}

/// What `--recampaign` campaigns again after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recampaign {
    Handover,
    Loss,
    MaxRuntime,
}

/// Why SIGKILL went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sigkill {
    /// The group outlived `--kill-after`.
    KillAfter,
    /// The loss was noticed this long after the renew deadline: too late for a grace.
    Late(Duration),
    /// The claim ended during `--kill-after`.
    ClaimEnded,
}

/// Where events go. [`Report::emit`] must never block (see the module comment).
pub trait Report: Send + Sync {
    fn emit(&self, event: &Event);

    /// Waits, at most `limit`, until what was reported has been read (sd_notify's barrier).
    /// May block: only on an exit path, never from a `select!` arm.
    fn barrier(&self, _limit: Duration) {}
}

/// The handle the Runner owns (and the health checker's thread, and `--splay`): cheap to clone.
#[derive(Clone)]
pub struct Reporter(Arc<dyn Report>);

impl Reporter {
    pub fn new(report: impl Report + 'static) -> Reporter {
        Reporter(Arc::new(report))
    }

    /// Never blocks.
    pub fn emit(&self, event: Event) {
        self.0.emit(&event);
    }

    /// See [`Report::barrier`]: exit paths only.
    pub fn barrier(&self, limit: Duration) {
        self.0.barrier(limit);
    }
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reporter")
    }
}
