//! Fault-injection suite: the faults that break leader election in practice, injected over many
//! trials with randomised timing, against real store processes on loopback, with the safety
//! property checked on a history recorded by the jobs themselves (see `history.rs`). The
//! store-neutral scenarios are one list (`every_store!`) that runs against etcd, PostgreSQL (ids
//! `p…`), a standalone ZooKeeper server (ids `z…`) and MariaDB (ids `m…`); the rows that need an etcd cluster or
//! etcdctl, or one store's own setup (a PostgreSQL server under libfaketime, a standby; a
//! ZooKeeper server restarted with other settings), are listed apart (`store_specific!`).
//!
//! Each scenario is one test; they run one at a time (a lock), so that timing measurements are
//! not distorted by each other. By default every scenario runs its row's short trial count
//! (`SHORT_TRIALS` unless the row says otherwise), which is what `cargo test` (and so CI) runs.
//! The soak:
//!
//! ```text
//! LEADER_EXEC_CHAOS_TRIALS=20 cargo test --locked --test chaos
//! ```
//!
//! runs that many trials per scenario and writes the table to `RELIABILITY.md`.
//! `LEADER_EXEC_CHAOS_SEED=N` repeats a run's randomised timings (the seed is in the table).

#[path = "../harness/mod.rs"]
mod harness;
#[path = "../stores.rs"]
#[macro_use]
mod stores;
mod history;
mod nemesis;
mod report;
mod scenarios;
mod trial;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use harness::{Cluster, Etcd, Postgres};
use trial::Trial;

/// Trials per scenario when `LEADER_EXEC_CHAOS_TRIALS` is not set: one, so that `cargo test`
/// (and CI) stays well under 15 minutes with every store's rows; the soak runs many.
pub const SHORT_TRIALS: usize = 1;
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
    /// How long the fault lasted, or etcd did not answer (scenarios 1b–5b; 3: etcd frozen; p11:
    /// how long the server's clock stood ahead; z11: the new maxSessionTimeout).
    pub outages: Vec<Duration>,
    /// Scenarios 1–3: the old command's signal after the fault began; 6 and 6b: command and
    /// grandchild dead after the SIGKILL; 7: command stopped after SIGCONT; 8 and 13: SIGKILL
    /// after the ignored TERM.
    pub reactions: Vec<Duration>,
    /// Scenario 7: how long the stale leader's job ran on after the next one started; p11: the
    /// clock steps (whole seconds ahead).
    pub windows: Vec<Duration>,
    /// A per-scenario count (5a: the member killed was the raft leader; 7, p12: stale token
    /// checks; p11: fresh `--no-wait` instances refused).
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
fn scenario<S>(
    id: &'static str,
    name: &'static str,
    short_trials: usize,
    setup: impl FnOnce() -> S,
    mut one: impl FnMut(&mut S, &mut Ctx),
) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let config = config();
    let trials = if config.soak {
        config.trials
    } else {
        short_trials
    };
    // Each scenario its own stream of randomness, so a filtered run repeats the same timings.
    let seed = id.bytes().fold(config.seed, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut store = setup();
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    for n in 0..trials {
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
        name,
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

/// The store-neutral scenarios: one list, and every store the store list (`tests/stores.rs`)
/// marks `[chaos "PREFIX"]` runs every row, as a test `etcd::NAME`, `postgres::NAME`,
/// `zookeeper::NAME` and `mysql::NAME`, with row ids `ID`, `pID`, `zID` and `mID` in the table
/// (pgbouncer is not marked). A row is one line, `"ID" NAME [SHORT_TRIALS] => BODY;`, where BODY is a function of
/// (&mut store, &mut Ctx) generic over `Store` and SHORT_TRIALS the trials `cargo test` runs (the
/// soak runs `LEADER_EXEC_CHAOS_TRIALS` for every row). Its description in RELIABILITY.md is
/// `report::SCENARIOS`' entry for ID (without one, the row's name).
macro_rules! every_store {
    ($($id:literal $test:ident [$short:expr] => $body:expr;)*) => {
        with_stores! { every_store_modules! { $($id $test [$short] => $body;)* } }
        with_stores! { chaos_stores! {} }
        /// The fast tier's rows: each on one store, drawn (`on_drawn_store`).
        mod drawn {
            /// The rows' ids, in the list's order.
            const IDS: &[&str] = &[$($id),*];
            $( #[test] fn $test() { crate::on_drawn_store(IDS, $id, stringify!($test)); } )*
        }
    };
}

/// `LISTED`: every store of the list, with its row prefix and its rows by test name where it is
/// marked `[chaos …]`.
macro_rules! chaos_stores {
    ({} $($store:ident : $ty:ident [$($chaos:tt)*] [$($bench:tt)*];)*) => {
        /// Every store of the list, with its row prefix and its store-neutral rows by test name
        /// where it runs them.
        pub const LISTED: &[Option<(&str, &str, &[(&str, fn())])>] = &[$( chaos_store!($store [$($chaos)*]) ),*];
    };
}

macro_rules! chaos_store {
    ($store:ident [chaos $prefix:literal]) => {
        Some((stringify!($store), $prefix, $store::rows::ALL))
    };
    ($store:ident []) => {
        None
    };
}

/// One module per store of the list that is marked `[chaos "PREFIX"]`.
macro_rules! every_store_modules {
    ($rows:tt $($store:ident : $ty:ident [$($chaos:tt)*] [$($bench:tt)*];)*) => {
        $( every_store_module! { $rows $store $ty [$($chaos)*] } )*
    };
}

macro_rules! every_store_module {
    ($rows:tt $store:ident $ty:ident [chaos $prefix:literal]) => {
        every_store_rows! { $store $ty $prefix $rows }
    };
    ($rows:tt $store:ident $ty:ident []) => {};
}

macro_rules! every_store_rows {
    ($store:ident $ty:ident $prefix:literal { $($id:literal $test:ident [$short:expr] => $body:expr;)* }) => {
        mod $store {
            pub mod rows {
                use crate::{SHORT_TRIALS, scenarios};
                $( pub fn $test() { crate::scenario(concat!($prefix, $id), stringify!($test), $short, crate::harness::$ty::start, $body); } )*
                /// Every row, by test name (for `drawn`).
                pub const ALL: &[(&str, fn())] = &[$( (stringify!($test), $test) ),*];
            }
            $(
                #[test]
                #[ignore = "full tier: cargo test --locked -- --ignored"]
                fn $test() { rows::$test() }
            )*
        }
    };
}

/// Runs row `test` (id `id`, of the rows `ids`) on one store of [`LISTED`]: the fast tier runs
/// every store-neutral row once, each on one store, the stores taken in turn down the list from
/// one the seed draws, so that every store runs its share; the full tier (`-- --ignored`) runs
/// every row on every store. The line printed says which store, and the seed that repeats it.
fn on_drawn_store(ids: &[&str], id: &str, test: &str) {
    let seed = config().seed;
    let stores: Vec<_> = LISTED.iter().flatten().collect();
    let at = ids
        .iter()
        .position(|i| *i == id)
        .expect("a row of the list");
    let (store, _, rows) = stores[(at + (seed % stores.len() as u64) as usize) % stores.len()];
    eprintln!(
        "chaos: row {id} on {store} (LEADER_EXEC_CHAOS_SEED={seed}; on every store: cargo test --locked --test chaos -- --ignored {store}::{test})"
    );
    let (_, row) = rows
        .iter()
        .find(|(name, _)| *name == test)
        .expect("every store has every row");
    row();
}

/// Scenarios that need one store's own setup or tools: one line each,
/// `NAME("ID", SHORT_TRIALS, SETUP, BODY);`.
macro_rules! store_specific {
    ($($test:ident($id:literal, $short:expr, $setup:expr, $body:expr);)*) => {
        $( #[test] fn $test() { scenario($id, stringify!($test), $short, $setup, $body); } )*
    };
}

every_store! {
    "1" scenario_1_leaders_proxy_cut [SHORT_TRIALS] => |s, ctx| scenarios::proxy_fault(s, ctx, false);
    "1b" scenario_1b_leaders_proxy_cut_briefly [SHORT_TRIALS] => |s, ctx| scenarios::brief_proxy_fault(s, ctx, false);
    "2" scenario_2_leaders_proxy_frozen [SHORT_TRIALS] => |s, ctx| scenarios::proxy_fault(s, ctx, true);
    "2b" scenario_2b_leaders_proxy_frozen_briefly [SHORT_TRIALS] => |s, ctx| scenarios::brief_proxy_fault(s, ctx, true);
    "3" scenario_3_store_sigstopped_past_the_renew_deadline [SHORT_TRIALS] => scenarios::store_sigstop;
    "3b" scenario_3b_store_sigstopped_briefly [SHORT_TRIALS] => scenarios::store_sigstop_brief;
    "4" scenario_4_store_restarted_within_the_renew_deadline [SHORT_TRIALS] => scenarios::store_restart;
    "6" scenario_6_leader_exec_sigkilled [SHORT_TRIALS] => scenarios::leader_exec_sigkill;
    // leader-exec's own processes as the fault, or a handover (13): the same local code on every
    // store, so one trial per store in the short run (three in all).
    "6b" scenario_6b_supervisor_sigkilled [1] => scenarios::supervisor_sigkill;
    "8" scenario_8_term_ignoring_command_with_a_grandchild [1] => |s, ctx| scenarios::term_ignoring_group(s, ctx, false);
    "9" scenario_9_supervisor_sigstopped_then_proxy_frozen [1] => |s, ctx| scenarios::term_ignoring_group(s, ctx, true);
    "10" scenario_10_every_process_named_leader_exec_sigkilled [1] => scenarios::pkill_by_name;
    "13" scenario_13_resign_during_a_term_ignoring_command_with_a_grandchild [1] => scenarios::rows::resign_term_ignoring;
    // --max-holders 2: two of three instances hold; a fault hits one holder, or the store.
    "h1" scenario_h1_one_of_two_holders_proxy_cut [1] => scenarios::holders::one_holder_cut;
    "h4" scenario_h4_store_restarted_under_two_holders [1] => scenarios::holders::store_restart;
    "h6" scenario_h6_one_of_two_holders_leader_exec_sigkilled [1] => scenarios::holders::one_holder_sigkilled;
}

// An etcd cluster's members (5a, 5b), and etcd's own view of the token through etcdctl (7).
store_specific! {
    scenario_5a_cluster_member_the_leader_talks_to_killed("5a", SHORT_TRIALS, || Cluster::start(3), |c, ctx| scenarios::member_kill(c, ctx, false));
    scenario_5b_cluster_raft_leader_killed("5b", SHORT_TRIALS, || Cluster::start(3), |c, ctx| scenarios::member_kill(c, ctx, true));
    scenario_7_leader_exec_sigstopped_past_the_ttl("7", SHORT_TRIALS, Etcd::start, scenarios::leader_exec_sigstop);
}

// PostgreSQL's own faults: its server's clock stepped under libfaketime (p11), a lagging standby
// first in the URL (p12); ZooKeeper's: the server restarted with a smaller session maximum (z11).
// Slow (a standby's base backup, ZooKeeper restarts, 20 s sessions): one trial in the short run.
store_specific! {
    scenario_p11_postgres_server_clock_stepped("p11", 1, scenarios::rows::SteppedPostgres::start, scenarios::rows::postgres_clock_step);
    scenario_p12_postgres_lagging_standby_first_in_the_url("p12", 1, Postgres::start, scenarios::rows::postgres_standby_first);
    scenario_z11_zookeeper_restarted_with_a_smaller_session_maximum("z11", 1, scenarios::rows::ShrinkingZooKeeper::start, scenarios::rows::zookeeper_smaller_maximum);
}
