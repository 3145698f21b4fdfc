//! What this instance is doing, as Prometheus metrics: for `--http` (GET /metrics, /leader,
//! /healthz) and `--metrics-file`.
//!
//! # Never in the way of the safety path
//! The state machine and the renewal loop report through the free functions below. Each is a
//! handful of atomic stores and counter increments: no I/O, no await, no lock that anything else
//! holds (every metric is read and encoded on the same runtime thread that updates it; the
//! metrics file is written by a thread of its own from a string encoded here). When neither
//! `--http` nor `--metrics-file` is given nothing is initialised and every function returns at
//! once.
//!
//! Instants are boot-clock instants (see `clock.rs`) stored as nanoseconds; values that depend
//! on "now" (renewal age, time to the deadline, time led or waited) are computed when scraped.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::clock::{BootClock, Clock};
use crate::ended::Ended;

/// The man page's METRICS section (docs/operations.md has the same table).
pub const MAN_SECTION: &str = "\
With --http ADDR, GET /metrics (Prometheus text format; OpenMetrics when the Accept header asks
for application/openmetrics-text), GET /leader and GET /healthz. Every metric carries a
lease label.

leader_exec_leader                         gauge    1 while this instance leads (holds), else 0;
                                                    summed over the fleet: how many hold
leader_exec_max_holders                    gauge    --max-holders
leader_exec_token                          gauge    fencing token of the current (or last) leadership
leader_exec_command_running                gauge    1 while the command runs
leader_exec_leading_seconds_total          counter  time led, over the run
leader_exec_waiting_seconds_total          counter  time waited in line, over the run
leader_exec_elections_won_total            counter  times elected
leader_exec_step_downs_total{reason}       counter  deadline, expired, key_deleted, signal,
                                                    command_exited
leader_exec_renewals_total{outcome}        counter  ok, expired, error, timeout
leader_exec_renewal_duration_seconds       histogram  renewal round trips
leader_exec_last_renewal_age_seconds       gauge    since the last successful renewal was sent
leader_exec_deadline_remaining_seconds     gauge    until the local renew deadline
leader_exec_command_starts_total           counter  command starts
leader_exec_max_runtime_stops_total        counter  commands stopped at --max-runtime
leader_exec_last_exit_code                 gauge    the command's last exit status
leader_exec_healthy                        gauge    --health-cmd: 1 healthy, 0 not (absent without)
leader_exec_occurrences_total{outcome}     counter  started, done, failed, already_done, skipped,
                                                    refused, unrecorded
leader_exec_fenced_writes_rejected_total   counter  occurrence writes refused by the fence
leader_exec_log_lines_dropped_total        counter  log lines dropped (stderr not draining)
leader_exec_build_info{version}            gauge    always 1
leader_exec_held_slot{identity,token}      gauge    a slot `hold` keeps in this lease: its bound
                                                    (--for) in seconds; one series per held slot,
                                                    as this instance last read the holders (every
                                                    --ttl)

/leader: 200 while this instance leads and its command runs, else 503; body
{\"lease\",\"identity\",\"token\",\"role\"}, role one of leader, elected, candidate,
starting, stepping-down, exiting.
/healthz: 500 while this instance leads (or is stepping down) and its last successful renewal
was sent more than --renew-deadline + --retry-period ago, else 200.

--metrics-file FILE adds, for node_exporter's textfile collector:
leader_exec_run_start_timestamp_seconds, leader_exec_run_end_timestamp_seconds,
leader_exec_run_duration_seconds, leader_exec_run_exit_code, leader_exec_run_led,
leader_exec_run_token, leader_exec_last_success_timestamp_seconds.";

/// Where this instance stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Not yet in line (connecting to the store).
    Starting = 0,
    /// In line, waiting for its turn.
    Candidate = 1,
    /// Leads (elected, lease proven).
    Leader = 2,
    /// Leadership ended; the command's group is being stopped.
    SteppingDown = 3,
    /// Leaving: the run is over.
    Exiting = 4,
}

impl Role {
    fn from_u8(value: u8) -> Role {
        match value {
            1 => Role::Candidate,
            2 => Role::Leader,
            3 => Role::SteppingDown,
            4 => Role::Exiting,
            _ => Role::Starting,
        }
    }
}

/// How one renewal went (the `outcome` label of `leader_exec_renewals_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewed {
    Ok = 0,
    /// The store said the lease is gone.
    Expired = 1,
    /// The request failed.
    Error = 2,
    /// No answer within `--retry-period`.
    Timeout = 3,
}

const RENEWAL_OUTCOMES: [&str; 4] = ["ok", "expired", "error", "timeout"];

/// What became of an `--occurrence` (the `outcome` label of `leader_exec_occurrences_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OccurrenceOutcome {
    /// Recorded as started; the command runs.
    Started = 0,
    /// Recorded as done (the command exited 0).
    Done = 1,
    /// Recorded as failed.
    Failed = 2,
    /// Already done by an earlier leader: not run.
    AlreadyDone = 3,
    /// Unfinished by an earlier leader, skipped (`--if-unfinished skip`).
    Skipped = 4,
    /// Unfinished by an earlier leader, refused (`--if-unfinished fail`).
    Refused = 5,
    /// The outcome could not be recorded (the store unreachable); the record stays `started`.
    Unrecorded = 6,
}

const OCCURRENCE_OUTCOMES: [&str; 7] = [
    "started",
    "done",
    "failed",
    "already_done",
    "skipped",
    "refused",
    "unrecorded",
];

/// Renewal latency buckets, in seconds: a store on loopback answers in about a millisecond, a
/// remote one in tens; anything near `--retry-period` is about to be abandoned.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const NONE: u64 = u64::MAX;

/// The state that scrapes read, in atomics.
#[derive(Debug)]
struct State {
    role: AtomicU8,
    /// When the current role began (boot-clock ns).
    role_since: AtomicU64,
    /// Time spent leading / waiting in earlier spells, ns.
    led: AtomicU64,
    waited: AtomicU64,
    /// The current (or last) leader token; 0 before the first election.
    token: AtomicI64,
    command_running: AtomicBool,
    /// The send instant of the last successful renewal (or the grant), boot-clock ns.
    last_renewal: AtomicU64,
    /// The local deadline, boot-clock ns.
    deadline: AtomicU64,
    /// The command's last exit code (its own, or 128+N); -1 before the first exit.
    last_exit_code: AtomicI64,
    /// Whether this run led at least once.
    led_once: AtomicBool,
    /// TERM or INT asked the current leadership to stop the command.
    stop_requested: AtomicBool,
    /// `--health-cmd`'s verdict: 1 healthy, 0 not; -1 without a check.
    healthy: AtomicI64,
}

/// Fixed facts the endpoints report.
#[derive(Debug)]
pub struct Config {
    pub lease: String,
    pub identity: String,
    pub renew_deadline: Duration,
    /// How far past the renew deadline a leader's last renewal may be before /healthz fails.
    pub health_grace: Duration,
    /// `--max-holders`: how many instances of the lease may hold at once.
    pub max_holders: u32,
}

pub struct Metrics {
    pub config: Config,
    state: std::sync::Arc<State>,
    registry: Registry,
    elections_won: Counter,
    step_downs: [Counter; 5],
    renewals: [Counter; 4],
    renewal_latency: Histogram,
    command_starts: Counter,
    max_runtime_stops: Counter,
    occurrences: [Counter; 7],
    fenced_rejected: Counter,
    /// The slots `hold` keeps in this lease, by identity and token: their bound in seconds.
    held_slots: Family<Vec<(&'static str, String)>, Gauge<f64, AtomicU64>>,
    /// What `held_slots` was last set to, to tell a change.
    held_seen: std::sync::Mutex<Vec<(String, i64, u64)>>,
    /// Wall-clock time this run started.
    pub started_at: SystemTime,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Called by the metrics file's task whenever the state changed.
static ON_CHANGE: OnceLock<fn()> = OnceLock::new();

fn now_ns() -> u64 {
    u64::try_from(BootClock.now().as_nanos()).unwrap_or(NONE - 1)
}

fn ns(instant: Duration) -> u64 {
    u64::try_from(instant.as_nanos()).unwrap_or(NONE - 1)
}

fn seconds(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64()
}

/// Sets up the metrics. Called once, before the runtime starts, when `--http` or
/// `--metrics-file` is given.
pub fn init(config: Config) -> &'static Metrics {
    METRICS.get_or_init(|| Metrics::new(config))
}

/// `on_change` is called (on the runtime thread, from the functions below) after every change of
/// role, token or command state. It must not block.
pub fn on_change(on_change: fn()) {
    let _ = ON_CHANGE.set(on_change);
}

fn changed() {
    if let Some(f) = ON_CHANGE.get() {
        f();
    }
}

impl Metrics {
    fn new(config: Config) -> Metrics {
        let labels = [(
            Cow::Borrowed("lease"),
            Cow::Owned::<str>(config.lease.clone()),
        )];
        let mut registry = Registry::with_prefix_and_labels("leader_exec", labels.into_iter());
        let state = std::sync::Arc::new(State {
            role: AtomicU8::new(Role::Starting as u8),
            role_since: AtomicU64::new(now_ns()),
            led: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            token: AtomicI64::new(0),
            command_running: AtomicBool::new(false),
            last_renewal: AtomicU64::new(NONE),
            deadline: AtomicU64::new(NONE),
            last_exit_code: AtomicI64::new(-1),
            led_once: AtomicBool::new(false),
            stop_requested: AtomicBool::new(false),
            healthy: AtomicI64::new(-1),
        });
        registry.register_collector(Box::new(StateCollector(state.clone())));

        let elections_won = Counter::default();
        registry.register(
            "elections_won",
            "Times this instance was elected leader",
            elections_won.clone(),
        );
        let step_downs = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "step_downs",
            "Times leadership ended, by reason: deadline (no renewal succeeded within --renew-deadline), expired (the store reported the lease gone), key_deleted, signal (TERM/INT), command_exited",
            step_downs.clone(),
        );
        let step_downs = crate::ended::REASONS
            .map(|reason| step_downs.get_or_create_owned(&vec![("reason", reason)]));
        let renewals = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "renewals",
            "Lease renewals, by outcome: ok, expired, error, timeout (no answer within --retry-period)",
            renewals.clone(),
        );
        let renewals = RENEWAL_OUTCOMES
            .map(|outcome| renewals.get_or_create_owned(&vec![("outcome", outcome)]));
        let renewal_latency = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "renewal_duration_seconds",
            "Round trip of answered lease renewals, from send to answer",
            renewal_latency.clone(),
        );
        let command_starts = Counter::default();
        registry.register(
            "command_starts",
            "Times the command was started",
            command_starts.clone(),
        );
        let max_runtime_stops = Counter::default();
        registry.register(
            "max_runtime_stops",
            "Times the command was stopped because it ran for --max-runtime",
            max_runtime_stops.clone(),
        );
        let occurrences = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "occurrences",
            "--occurrence outcomes: started, done, failed, already_done, skipped, refused, unrecorded",
            occurrences.clone(),
        );
        let occurrences = OCCURRENCE_OUTCOMES
            .map(|outcome| occurrences.get_or_create_owned(&vec![("outcome", outcome)]));
        let fenced_rejected = Counter::default();
        registry.register(
            "fenced_writes_rejected",
            "Occurrence records the store refused to write because this instance no longer led",
            fenced_rejected.clone(),
        );
        let max_holders = Gauge::<i64>::default();
        max_holders.set(i64::from(config.max_holders));
        registry.register(
            "max_holders",
            "--max-holders: how many instances of the lease may hold it at once (1: a single leader)",
            max_holders,
        );
        let held_slots = Family::<Vec<(&'static str, String)>, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "held_slot",
            "A slot `leader-exec hold` keeps in this lease (no process behind it), by identity and token: its bound (--for) in seconds; as this instance last read the holders",
            held_slots.clone(),
        );
        let build = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the version of leader-exec in a label",
            build.clone(),
        );
        build
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION"))])
            .set(1);
        Metrics {
            config,
            state,
            registry,
            elections_won,
            step_downs,
            renewals,
            renewal_latency,
            command_starts,
            max_runtime_stops,
            occurrences,
            fenced_rejected,
            held_slots,
            held_seen: std::sync::Mutex::new(Vec::new()),
            started_at: SystemTime::now(),
        }
    }

    /// The metrics in the Prometheus text format (0.0.4), or OpenMetrics when `openmetrics`.
    pub fn encode(&self, openmetrics: bool) -> String {
        let mut out = String::with_capacity(8192);
        let result = if openmetrics {
            prometheus_client::encoding::text::encode(&mut out, &self.registry)
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        };
        // Writing into a String cannot fail; an encoder error would be a bug in a label.
        debug_assert!(result.is_ok(), "{result:?}");
        out
    }

    /// Encodes `extra` (another registry, with this one's prefix and labels) after the metrics,
    /// in the Prometheus text format.
    pub fn encode_with(&self, extra: &Registry) -> String {
        let mut out = self.encode(false);
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, extra);
        out
    }

    /// A registry with the same prefix and labels, for metrics of the metrics file only.
    pub fn sibling_registry(&self) -> Registry {
        let labels = [(
            Cow::Borrowed("lease"),
            Cow::Owned::<str>(self.config.lease.clone()),
        )];
        Registry::with_prefix_and_labels("leader_exec", labels.into_iter())
    }

    pub fn role(&self) -> Role {
        self.state.role()
    }

    pub fn token(&self) -> i64 {
        self.state.token.load(Ordering::Relaxed)
    }

    pub fn command_running(&self) -> bool {
        self.state.command_running.load(Ordering::Relaxed)
    }

    pub fn led_once(&self) -> bool {
        self.state.led_once.load(Ordering::Relaxed)
    }

    /// What /leader answers: whether this instance leads and its command runs.
    pub fn serving(&self) -> bool {
        self.role() == Role::Leader && self.command_running()
    }

    /// The role as /leader names it: `leader` only while the command runs (200), `elected` while
    /// leading without it (before it starts, during --hold-at-least), else `starting`,
    /// `candidate`, `stepping-down`, `exiting`.
    pub fn role_name(&self) -> &'static str {
        match self.role() {
            Role::Starting => "starting",
            Role::Candidate => "candidate",
            Role::Leader if self.command_running() => "leader",
            Role::Leader => "elected",
            Role::SteppingDown => "stepping-down",
            Role::Exiting => "exiting",
        }
    }

    /// Time since the send instant of the last successful renewal (or the grant).
    pub fn renewal_age(&self) -> Option<Duration> {
        self.state.renewal_age()
    }

    /// /healthz: false when this instance holds (or is giving up) a claim whose last successful
    /// renewal is older than the renew deadline plus the grace: it should have stepped down by
    /// now and has not finished doing so.
    pub fn healthy(&self) -> bool {
        match self.role() {
            Role::Leader | Role::SteppingDown => self
                .renewal_age()
                .is_none_or(|age| age <= self.config.renew_deadline + self.config.health_grace),
            _ => true,
        }
    }

    fn set_role(&self, role: Role) {
        let now = now_ns();
        let state = &self.state;
        let previous = Role::from_u8(state.role.swap(role as u8, Ordering::Relaxed));
        let since = state.role_since.swap(now, Ordering::Relaxed);
        let spell = now.saturating_sub(since);
        match previous {
            Role::Leader => {
                state.led.fetch_add(spell, Ordering::Relaxed);
            }
            Role::Candidate => {
                state.waited.fetch_add(spell, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

impl State {
    fn role(&self) -> Role {
        Role::from_u8(self.role.load(Ordering::Relaxed))
    }

    fn renewal_age(&self) -> Option<Duration> {
        let last = self.last_renewal.load(Ordering::Relaxed);
        (last != NONE).then(|| Duration::from_nanos(now_ns().saturating_sub(last)))
    }

    /// Seconds led (or waited) so far, the current spell included.
    fn time_in(&self, role: Role, total: &AtomicU64) -> f64 {
        let mut ns = total.load(Ordering::Relaxed);
        if self.role() == role {
            ns += now_ns().saturating_sub(self.role_since.load(Ordering::Relaxed));
        }
        seconds(ns)
    }
}

/// Metrics computed when scraped, from the atomics.
#[derive(Debug)]
struct StateCollector(std::sync::Arc<State>);

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let state = &self.0;
        let role = state.role();
        let now = now_ns();
        let gauge = |encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64| {
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)
        };
        let counter = |encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64| {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)
        };
        let leads = role == Role::Leader;
        gauge(
            &mut encoder,
            "leader",
            "1 while this instance leads the lease (with --max-holders above 1: holds it), else 0",
            f64::from(u8::from(leads)),
        )?;
        gauge(
            &mut encoder,
            "token",
            "The fencing token of this instance's current (or last) leadership; 0 before the first",
            state.token.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            &mut encoder,
            "command_running",
            "1 while the command this instance started runs, else 0",
            f64::from(u8::from(state.command_running.load(Ordering::Relaxed))),
        )?;
        counter(
            &mut encoder,
            "leading_seconds",
            "Time this instance has led, over the whole run",
            state.time_in(Role::Leader, &state.led),
        )?;
        counter(
            &mut encoder,
            "waiting_seconds",
            "Time this instance has waited in line, over the whole run",
            state.time_in(Role::Candidate, &state.waited),
        )?;
        if let Some(age) = state.renewal_age()
            && matches!(role, Role::Candidate | Role::Leader | Role::SteppingDown)
        {
            gauge(
                &mut encoder,
                "last_renewal_age_seconds",
                "Time since the send instant of the last successful lease renewal (or the grant)",
                age.as_secs_f64(),
            )?;
        }
        let deadline = state.deadline.load(Ordering::Relaxed);
        if deadline != NONE && matches!(role, Role::Candidate | Role::Leader) {
            gauge(
                &mut encoder,
                "deadline_remaining_seconds",
                "Time left until the local renew deadline; at 0 a leader steps down",
                seconds(deadline.saturating_sub(now)),
            )?;
        }
        let healthy = state.healthy.load(Ordering::Relaxed);
        if healthy >= 0 {
            gauge(
                &mut encoder,
                "healthy",
                "--health-cmd: 1 while this instance is healthy (it may stand in line and lead), else 0",
                healthy as f64,
            )?;
        }
        let code = state.last_exit_code.load(Ordering::Relaxed);
        if code >= 0 {
            gauge(
                &mut encoder,
                "last_exit_code",
                "Exit status of the command's last run (128+N when killed by signal N)",
                code as f64,
            )?;
        }
        counter(
            &mut encoder,
            "log_lines_dropped",
            "Log lines dropped because stderr did not drain",
            crate::telemetry::logging::dropped() as f64,
        )?;
        Ok(())
    }
}

// --- What the state machine and the renewal loop report. Plain in-memory updates only. ---

/// A candidacy was created; `confirmed` is its grant's send instant, `deadline` the local deadline.
pub fn campaigning(confirmed: Duration, deadline: Duration) {
    let Some(m) = METRICS.get() else { return };
    m.state.last_renewal.store(ns(confirmed), Ordering::Relaxed);
    m.state.deadline.store(ns(deadline), Ordering::Relaxed);
    m.set_role(Role::Candidate);
    changed();
}

/// One renewal was answered (or abandoned); `sent` is its send instant.
pub fn renewed(outcome: Renewed, sent: Duration, latency: Duration, deadline: Duration) {
    let Some(m) = METRICS.get() else { return };
    m.renewals[outcome as usize].inc();
    if outcome != Renewed::Timeout {
        m.renewal_latency.observe(latency.as_secs_f64());
    }
    if outcome == Renewed::Ok {
        m.state.last_renewal.store(ns(sent), Ordering::Relaxed);
        m.state.deadline.store(ns(deadline), Ordering::Relaxed);
    }
}

pub fn elected(token: i64) {
    let Some(m) = METRICS.get() else { return };
    m.elections_won.inc();
    m.state.stop_requested.store(false, Ordering::Relaxed);
    m.state.token.store(token, Ordering::Relaxed);
    m.state.led_once.store(true, Ordering::Relaxed);
    m.set_role(Role::Leader);
    changed();
}

pub fn command_started() {
    let Some(m) = METRICS.get() else { return };
    m.command_starts.inc();
    m.state.command_running.store(true, Ordering::Relaxed);
    changed();
}

/// The command's process group is gone; `code` is the command's status, when known.
pub fn command_ended(code: Option<u8>) {
    let Some(m) = METRICS.get() else { return };
    if let Some(code) = code {
        m.state
            .last_exit_code
            .store(i64::from(code), Ordering::Relaxed);
    }
    m.state.command_running.store(false, Ordering::Relaxed);
    changed();
}

/// `--health-cmd`'s verdict changed (or was first given). Called from the checker's thread:
/// atomics only.
pub fn health(healthy: bool) {
    let Some(m) = METRICS.get() else { return };
    m.state.healthy.store(i64::from(healthy), Ordering::Relaxed);
    changed();
}

/// The command ran for `--max-runtime`: its stop begins.
pub fn max_runtime_reached() {
    let Some(m) = METRICS.get() else { return };
    m.max_runtime_stops.inc();
    changed();
}

/// The command exited (its group may still be running).
pub fn command_exited(code: u8) {
    let Some(m) = METRICS.get() else { return };
    m.state
        .last_exit_code
        .store(i64::from(code), Ordering::Relaxed);
}

/// Leadership ended for `reason`. Called once per leadership, before the command's group is
/// signalled: an in-memory update only.
pub fn stepped_down(reason: Ended) {
    let Some(m) = METRICS.get() else { return };
    if m.role() != Role::Leader {
        return;
    }
    m.step_downs[reason.index()].inc();
    m.set_role(Role::SteppingDown);
    changed();
}

/// TERM or INT asked the leader to stop its command.
pub fn stop_requested() {
    let Some(m) = METRICS.get() else { return };
    m.state.stop_requested.store(true, Ordering::Relaxed);
}

/// Leading is over. If no step-down was counted yet: after `lost`, the store refused this
/// leader (a fenced write was rejected: counted as `expired`); otherwise the command ended, on
/// its own or asked to by a signal.
pub fn led_ended(lost: bool) {
    let Some(m) = METRICS.get() else { return };
    let reason = if lost {
        Ended::Expired
    } else if m.state.stop_requested.load(Ordering::Relaxed) {
        Ended::Signal
    } else {
        Ended::CommandExited
    };
    stepped_down(reason);
}

pub fn occurrence(outcome: OccurrenceOutcome) {
    let Some(m) = METRICS.get() else { return };
    m.occurrences[outcome as usize].inc();
}

pub fn fenced_write_rejected() {
    let Some(m) = METRICS.get() else { return };
    m.fenced_rejected.inc();
}

/// Whether `--http` or `--metrics-file` set the metrics up.
pub fn enabled() -> bool {
    METRICS.get().is_some()
}

/// The slots `hold` keeps in this lease, as last read: (identity, token, bound in ms). Replaces
/// the last set; the lock is only ever taken here, never across an await.
pub fn held_slots(held: Vec<(String, i64, u64)>) {
    let Some(m) = METRICS.get() else { return };
    let mut seen = m
        .held_seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *seen == held {
        return;
    }
    m.held_slots.clear();
    for (identity, token, ms) in &held {
        m.held_slots
            .get_or_create(&vec![
                ("identity", identity.clone()),
                ("token", token.to_string()),
            ])
            .set(Duration::from_millis(*ms).as_secs_f64());
    }
    *seen = held;
    drop(seen);
    changed();
}

/// The run is over.
pub fn exiting() {
    let Some(m) = METRICS.get() else { return };
    m.state.command_running.store(false, Ordering::Relaxed);
    m.set_role(Role::Exiting);
}

/// The one-line JSON body of /leader.
pub fn leader_json(m: &Metrics) -> String {
    let token = m.token();
    let mut out = serde_json::json!({
        "lease": m.config.lease,
        "identity": m.config.identity,
        "token": (token > 0).then_some(token),
        "role": m.role_name(),
    })
    .to_string();
    out.push('\n');
    out
}

/// The one-line JSON body of /healthz.
pub fn health_json(m: &Metrics, healthy: bool) -> String {
    let mut out = String::new();
    let age = m.renewal_age().map(|a| a.as_secs_f64());
    let _ = writeln!(
        out,
        "{}",
        serde_json::json!({
            "status": if healthy { "ok" } else { "renewal overdue" },
            "role": m.role_name(),
            "last_renewal_age_seconds": age,
        })
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_encode_every_family_with_the_lease_label() {
        let m = Metrics::new(Config {
            lease: "x\"y".into(),
            identity: "h:1".into(),
            renew_deadline: Duration::from_secs(10),
            health_grace: Duration::from_secs(2),
            max_holders: 3,
        });
        m.elections_won.inc();
        m.step_downs[Ended::KeyDeleted.index()].inc();
        let text = m.encode(false);
        assert!(
            text.contains("leader_exec_elections_won_total{lease=\"x\\\"y\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "leader_exec_step_downs_total{lease=\"x\\\"y\",reason=\"key_deleted\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("leader_exec_build_info{"), "{text}");
        assert!(
            text.contains("leader_exec_max_holders{lease=\"x\\\"y\"} 3"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        let open = m.encode(true);
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(
            open.contains("# TYPE leader_exec_renewals counter"),
            "{open}"
        );
    }
}
