//! Fault-injection suite: the faults that break leader election in practice, injected over many
//! trials with randomised timing, against real etcd processes on loopback, with the safety
//! property checked on a history recorded by the jobs themselves (see `history.rs`). The
//! store-neutral scenarios run against a standalone ZooKeeper server as well (ids `z…`).
//!
//! Each scenario is one test; they run one at a time (a lock), so that timing measurements are
//! not distorted by each other. By default every scenario runs `SHORT_TRIALS` trials, which is
//! what `cargo test` (and so CI) runs. The soak:
//!
//! ```text
//! LEADER_EXEC_CHAOS_TRIALS=20 cargo test --locked --test chaos
//! ```
//!
//! runs that many trials per scenario and writes the table to `RELIABILITY.md`.
//! `LEADER_EXEC_CHAOS_SEED=N` repeats a run's randomised timings (the seed is in the table).

#[path = "../harness.rs"]
mod harness;
mod history;
mod report;
mod scenarios;
mod trial;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use harness::{Cluster, Etcd, ZooKeeper};
use trial::Trial;

/// Trials per scenario when `LEADER_EXEC_CHAOS_TRIALS` is not set.
pub const SHORT_TRIALS: usize = 2;
/// Upper bound on trials per scenario, whatever the variable says.
const MAX_TRIALS: usize = 500;

pub struct Config {
    pub trials: usize,
    /// Set when `LEADER_EXEC_CHAOS_TRIALS` is: write RELIABILITY.md.
    pub soak: bool,
    pub seed: u64,
}

pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let trials = std::env::var("LEADER_EXEC_CHAOS_TRIALS").ok();
        let seed = std::env::var("LEADER_EXEC_CHAOS_SEED")
            .ok()
            .map(|s| s.parse().expect("LEADER_EXEC_CHAOS_SEED is a number"))
            .unwrap_or_else(|| harness::now_ns() as u64);
        Config {
            trials: trials.as_deref().map_or(SHORT_TRIALS, |t| {
                t.parse::<usize>()
                    .expect("LEADER_EXEC_CHAOS_TRIALS is a number")
                    .clamp(1, MAX_TRIALS)
            }),
            soak: trials.is_some(),
            seed,
        }
    })
}

/// What a scenario's trials measured.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub trials: usize,
    /// Overlaps the checker found (scenario 7: beyond the expected one).
    pub overlaps: usize,
    /// Fault began → next job started.
    pub failovers: Vec<Duration>,
    /// Per trial, the smallest time between a job's last sign of life and the next job's start.
    pub gaps: Vec<Duration>,
    /// Short faults after which leadership was kept and the command left alone.
    pub kept: usize,
    /// Faults meant to be short that lasted longer than `Timing::short_fault` (then a step-down
    /// is allowed; safety is still checked).
    pub long_faults: usize,
    /// How long the fault lasted, or etcd did not answer (scenarios 1b–5b; 3: etcd frozen).
    pub outages: Vec<Duration>,
    /// Scenarios 1–3: the old command's signal after the fault began; 6 and 6b: command and
    /// grandchild dead after the SIGKILL; 7: command stopped after SIGCONT; 8: SIGKILL after the
    /// ignored TERM.
    pub reactions: Vec<Duration>,
    /// Scenario 7: how long the stale leader's job ran on after the next one started.
    pub windows: Vec<Duration>,
    /// A per-scenario count (5a: the member killed was the raft leader; 7: stale token checks).
    pub tally: usize,
}

/// What a trial gets: randomness, the scenario's stats, its own lease name.
pub struct Ctx<'a> {
    pub rng: &'a mut fastrand::Rng,
    pub stats: &'a mut Stats,
    pub lease: String,
}

impl Ctx<'_> {
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let low = low.as_micros() as u64;
        let high = (high.as_micros() as u64).max(low + 1);
        Duration::from_micros(self.rng.u64(low..high))
    }

    /// Waits a random part of two renewal cycles, so the fault lands anywhere in the cycle.
    pub fn phase(&mut self, trial: &Trial) {
        let wait = self.between(Duration::ZERO, 2 * trial.timing.retry_period);
        std::thread::sleep(wait);
    }
}

/// One scenario at a time: the suite measures timing.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs a scenario's trials on one store set up for it, records its row, and fails if any trial
/// failed. A failed trial does not stop the others, so a soak reports every failure.
fn scenario<S>(id: &'static str, setup: impl FnOnce() -> S, mut one: impl FnMut(&mut S, &mut Ctx)) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let config = config();
    // Each scenario its own stream of randomness, so a filtered run repeats the same timings.
    let seed = id.bytes().fold(config.seed, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut store = setup();
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    for n in 0..config.trials {
        let mut ctx = Ctx {
            rng: &mut rng,
            stats: &mut stats,
            lease: format!("s{id}-{n}"),
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| one(&mut store, &mut ctx)));
        stats.trials += 1;
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("trial {n}: {message}"));
        }
    }
    drop(store);
    let failed = failures.len();
    let trials = stats.trials;
    report::publish(report::Row {
        id,
        stats,
        failures: failures.clone(),
        elapsed: started.elapsed(),
    });
    assert!(
        failures.is_empty(),
        "scenario {id}: {failed} of {trials} trials failed:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn scenario_1_leaders_proxy_cut() {
    scenario("1", Etcd::start, |etcd, ctx| {
        scenarios::proxy_fault(etcd, ctx, false)
    });
}

#[test]
fn scenario_2_leaders_proxy_frozen() {
    scenario("2", Etcd::start, |etcd, ctx| {
        scenarios::proxy_fault(etcd, ctx, true)
    });
}

#[test]
fn scenario_1b_leaders_proxy_cut_briefly() {
    scenario("1b", Etcd::start, |etcd, ctx| {
        scenarios::brief_proxy_fault(etcd, ctx, false)
    });
}

#[test]
fn scenario_2b_leaders_proxy_frozen_briefly() {
    scenario("2b", Etcd::start, |etcd, ctx| {
        scenarios::brief_proxy_fault(etcd, ctx, true)
    });
}

#[test]
fn scenario_3_etcd_sigstopped_past_the_renew_deadline() {
    scenario("3", Etcd::start, scenarios::store_sigstop);
}

#[test]
fn scenario_3b_etcd_sigstopped_briefly() {
    scenario("3b", Etcd::start, scenarios::store_sigstop_brief);
}

#[test]
fn scenario_4_etcd_restarted_within_the_renew_deadline() {
    scenario("4", Etcd::start, scenarios::store_restart);
}

#[test]
fn scenario_5a_cluster_member_the_leader_talks_to_killed() {
    scenario(
        "5a",
        || Cluster::start(3),
        |cluster, ctx| scenarios::member_kill(cluster, ctx, false),
    );
}

#[test]
fn scenario_5b_cluster_raft_leader_killed() {
    scenario(
        "5b",
        || Cluster::start(3),
        |cluster, ctx| scenarios::member_kill(cluster, ctx, true),
    );
}

#[test]
fn scenario_6_leader_exec_sigkilled() {
    scenario("6", Etcd::start, scenarios::leader_exec_sigkill);
}

#[test]
fn scenario_6b_supervisor_sigkilled() {
    scenario("6b", Etcd::start, scenarios::supervisor_sigkill);
}

#[test]
fn scenario_7_leader_exec_sigstopped_past_the_ttl() {
    scenario("7", Etcd::start, scenarios::leader_exec_sigstop);
}

#[test]
fn scenario_8_term_ignoring_command_with_a_grandchild() {
    scenario("8", Etcd::start, |etcd, ctx| {
        scenarios::term_ignoring_group(etcd, ctx, false)
    });
}

#[test]
fn scenario_9_supervisor_sigstopped_then_proxy_frozen() {
    scenario("9", Etcd::start, |etcd, ctx| {
        scenarios::term_ignoring_group(etcd, ctx, true)
    });
}

#[test]
fn scenario_10_every_process_named_leader_exec_sigkilled() {
    scenario("10", Etcd::start, scenarios::pkill_by_name);
}

// The same faults against a standalone ZooKeeper server, whose session is the lease: a leader that
// stops renewing keeps its node until the server expires its session, a timeout after the last
// request it received. Not run against ZooKeeper: 5a and 5b (an etcd cluster's members; the
// ZooKeeper ensemble has tests of its own), 7 (reads the token with etcdctl), and 6b, 8, 9, 10,
// whose faults are leader-exec's own processes and whose store side (a release, or a session that
// expires) the rows here already cover.

#[test]
fn scenario_z1_zookeeper_leaders_proxy_cut() {
    scenario("z1", ZooKeeper::start, |zk, ctx| {
        scenarios::proxy_fault(zk, ctx, false)
    });
}

#[test]
fn scenario_z2_zookeeper_leaders_proxy_frozen() {
    scenario("z2", ZooKeeper::start, |zk, ctx| {
        scenarios::proxy_fault(zk, ctx, true)
    });
}

#[test]
fn scenario_z1b_zookeeper_leaders_proxy_cut_briefly() {
    scenario("z1b", ZooKeeper::start, |zk, ctx| {
        scenarios::brief_proxy_fault(zk, ctx, false)
    });
}

#[test]
fn scenario_z2b_zookeeper_leaders_proxy_frozen_briefly() {
    scenario("z2b", ZooKeeper::start, |zk, ctx| {
        scenarios::brief_proxy_fault(zk, ctx, true)
    });
}

#[test]
fn scenario_z3_zookeeper_sigstopped_past_the_renew_deadline() {
    scenario("z3", ZooKeeper::start, scenarios::store_sigstop);
}

#[test]
fn scenario_z3b_zookeeper_sigstopped_briefly() {
    scenario("z3b", ZooKeeper::start, scenarios::store_sigstop_brief);
}

#[test]
fn scenario_z4_zookeeper_restarted_within_the_renew_deadline() {
    scenario("z4", ZooKeeper::start, scenarios::store_restart);
}

#[test]
fn scenario_z6_leader_exec_sigkilled_on_zookeeper() {
    scenario("z6", ZooKeeper::start, scenarios::leader_exec_sigkill);
}
