//! The rows for each store's own failure modes (p11, p12, z11) and the handover row (13, every
//! store): faults that only a store's own setup can inject (a clock step on the PostgreSQL server,
//! a lagging standby first in the URL, a ZooKeeper server restarted with a smaller session
//! maximum), and `resign` during a command that ignores TERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{SLACK, next_leader, parent_of, single, wait_all_dead};
use crate::Ctx;
use crate::harness::{
    Cmd, Postgres, Proxy, Store, ZooKeeper, group_has_live_member, leader_exec, now_ns, wait_for,
};
use crate::history::Record;
use crate::trial::{FAST, JobKind, NAMES, Timing, Trial, die_with_the_runner};

/// A PostgreSQL server under libfaketime whose clock offset the runner sets (a file the server
/// reads on every clock call).
pub struct SteppedPostgres {
    pub pg: Postgres,
    clock: tempfile::NamedTempFile,
}

impl SteppedPostgres {
    pub fn start() -> SteppedPostgres {
        let (pg, clock) = Postgres::start_with_faketime();
        SteppedPostgres { pg, clock }
    }

    /// Steps the server's wall clock to `seconds` ahead of the real one (0: back to it), and
    /// waits until `now()` shows it.
    fn step(&self, seconds: i64) {
        std::fs::write(self.clock.path(), format!("{seconds:+}\n")).unwrap();
        let offset = || {
            let now: f64 = self
                .pg
                .psql("SELECT extract(epoch FROM now())")
                .trim()
                .parse()
                .unwrap();
            now - now_ns() as f64 / 1e9
        };
        if !wait_for(SLACK, || (offset() - seconds as f64).abs() < 2.0) {
            panic!("the server's clock did not step to {seconds:+} s");
        }
    }
}

/// Runs a fresh `--no-wait` instance (what cron starts) directly against `endpoint`. Its job
/// writes a `start` record to the trial's history, so that should it run beside the leader, the
/// checker sees the overlap. Returns its exit code.
fn fresh_no_wait(trial: &Trial, endpoint: &str, name: &str) -> Option<i32> {
    let script = format!(
        r#"echo "start {name} $LEADER_TOKEN $$ ${{EPOCHREALTIME//[!0-9]/}}000" >> '{h}'"#,
        h = trial.history_path().display()
    );
    let mut command = leader_exec();
    command
        .args([
            "--endpoints",
            endpoint,
            "--lease",
            &trial.lease,
            "--no-wait",
        ])
        .args(["--identity", name])
        .args(trial.timing.args())
        .args(["--", "bash", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_the_runner(&mut command);
    let mut child = command.spawn().unwrap();
    let mut code = None;
    wait_for(Duration::from_secs(15), || {
        code = child.try_wait().unwrap().map(|s| s.code().unwrap_or(-1));
        code.is_some()
    });
    if code.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    code
}

/// Scenario p11: the PostgreSQL server's wall clock stepped ahead by 5–60 s and back, once or
/// twice, at random moments, while a leader holds and two waiters campaign; while it stands
/// ahead, a fresh `--no-wait` instance tries too. By `expires_at` every lease looks expired then;
/// a taker must have seen the row unchanged for a full TTL on its own clock, so nothing changes:
/// leadership kept, the fresh instance exits 124.
pub fn postgres_clock_step(store: &mut SteppedPostgres, ctx: &mut Ctx) {
    store.step(0);
    let timing = FAST;
    let mut trial = single(&store.pg, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(&store.pg);
    ctx.phase(&trial);
    let begin = now_ns();
    let steps = ctx.rng.usize(1..=2);
    for n in 0..steps {
        let ahead = ctx.rng.i64(5..=60);
        let stepped = Instant::now();
        store.step(ahead);
        ctx.stats.windows.push(Duration::from_secs(ahead as u64));
        // Ahead for 0.5 s up to two TTLs, with a fresh instance at a random moment of it.
        let hold = ctx.between(Duration::from_millis(500), 2 * timing.ttl);
        std::thread::sleep(ctx.between(Duration::ZERO, hold));
        let name = format!("fresh{n}");
        let code = fresh_no_wait(&trial, &store.pg.endpoint(), &name);
        if code != Some(124) {
            trial.fail(format!(
                "a fresh --no-wait instance exited {code:?} with the server's clock {ahead} s ahead, expected 124 (held)"
            ));
        }
        ctx.stats.tally += 1;
        std::thread::sleep(hold.saturating_sub(stepped.elapsed()));
        store.step(0);
        ctx.stats.outages.push(stepped.elapsed());
        ctx.phase(&trial);
    }
    // A clock step is no outage: leadership must survive it whatever its size, so the fault is
    // "short" (the checker then holds that no job was signalled or started after it began).
    trial.fault("postgres-clock-step", begin, now_ns(), true);
    let outage = Duration::from_nanos((now_ns() - begin) as u64);
    ctx.kept(&mut trial, &first, Instant::now(), outage, true);
}

/// The `--endpoints` value naming a standby first and the primary second, as libpq lists hosts.
fn standby_first(standby: u16, primary: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{standby},127.0.0.1:{primary}/postgres")
}

/// `leader-exec check` of `token` through `endpoints`: Some(true) current, Some(false) stale.
fn check(endpoints: &str, lease: &str, token: i64) -> Option<bool> {
    let out = Cmd::bare()
        .args(["check", "--endpoints", endpoints, "--lease", lease])
        .args(["--token", &token.to_string()])
        .output();
    match out.status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        _ => None,
    }
}

/// `leader-exec resign` of the lease through `endpoints`, bounded by `--timeout`.
fn resign(endpoints: &str, lease: &str, timeout: &str) -> std::process::Child {
    let mut command = leader_exec();
    command
        .args(["resign", "--endpoints", endpoints, "--lease", lease])
        .args(["--timeout", timeout])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_the_runner(&mut command);
    command.spawn().unwrap()
}

fn finish_resign(child: std::process::Child, trial: &Trial) {
    let out = child.wait_with_output().unwrap();
    if out.status.code() != Some(0) {
        trial.fail(format!(
            "resign exited {:?}: {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
}

/// Scenario p12: every instance's URL names a hot standby first and the primary second
/// (`standby,primary`); the standby's replay is paused at a random moment (before the first
/// handover or between the two), so it shows a deposed leader's row as live. Two handovers
/// (`resign`) at random moments; after each, `check` of every deposed token through the same
/// URL answers stale (exit 1), of the leader's current.
pub fn postgres_standby_first(primary: &mut Postgres, ctx: &mut Ctx) {
    let timing = FAST;
    let standby = primary.start_standby();
    let direct = standby_first(standby.port, primary.port);
    let mut trial = Trial::empty(&direct, &ctx.lease, timing);
    for name in NAMES {
        trial.add(
            name,
            &[standby.addr(), primary.addr()],
            |p: &[Proxy]| standby_first(p[0].port, p[1].port),
            timing,
            JobKind::Stoppable,
        );
    }
    let mut leader = trial.elected(primary);
    let pause_before = ctx.rng.usize(0..2);
    let mut deposed = Vec::new();
    let mut begin = None;
    for n in 0..2 {
        if n == pause_before {
            std::thread::sleep(ctx.between(Duration::ZERO, Duration::from_secs(2)));
            standby.pause_replay();
        }
        ctx.phase(&trial);
        begin.get_or_insert(now_ns());
        finish_resign(resign(&direct, &trial.lease, "20s"), &trial);
        let next = next_leader_after(&trial, &leader, &deposed);
        trial.expect_exit(&leader.name, 75);
        if next.token <= leader.token {
            trial.fail(format!("token {} after {}", next.token, leader.token));
        }
        deposed.push(leader);
        leader = next;
        for old in &deposed {
            match check(&direct, &trial.lease, old.token) {
                Some(false) => ctx.stats.tally += 1,
                other => trial.fail(format!(
                    "check of the deposed token {} through standby,primary answered {other:?}, not stale",
                    old.token
                )),
            }
        }
        if check(&direct, &trial.lease, leader.token) != Some(true) {
            trial.fail(format!(
                "the leader's token {} is not current",
                leader.token
            ));
        }
    }
    trial.fault(
        "standby-first-replay-paused",
        begin.unwrap(),
        now_ns(),
        false,
    );
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
    drop(standby);
}

/// Waits for a job's start by an instance that has not led yet.
fn next_leader_after(
    trial: &Trial,
    leader: &crate::trial::Start,
    deposed: &[crate::trial::Start],
) -> crate::trial::Start {
    let mut except: Vec<&str> = deposed.iter().map(|s| s.name.as_str()).collect();
    except.push(&leader.name);
    let timeout = trial.timing.ttl + trial.timing.renew_deadline + SLACK;
    trial
        .wait_start(&except, timeout)
        .unwrap_or_else(|| trial.fail(format!("no other instance took over within {timeout:?}")))
}

/// The leader's flags in z11: a 20 s session, needing 14 s + 3 s + margin of it.
pub const ZK_LONG: Timing = Timing {
    name: "ZK-LONG",
    ttl: Duration::from_secs(20),
    renew_deadline: Duration::from_secs(14),
    retry_period: Duration::from_secs(1),
    kill_after: Duration::from_secs(3),
};

/// The waiters' flags in z11: they fit a 4 s session.
pub const ZK_SHORT: Timing = Timing {
    name: "ZK-SHORT",
    ttl: Duration::from_secs(4),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
    kill_after: Duration::from_secs(1),
};

/// A ZooKeeper server whose `maxSessionTimeout` a trial lowers (and the next trial restores).
pub struct ShrinkingZooKeeper {
    pub zk: ZooKeeper,
    shrunk: bool,
}

impl ShrinkingZooKeeper {
    pub fn start() -> ShrinkingZooKeeper {
        ShrinkingZooKeeper {
            zk: ZooKeeper::start(),
            shrunk: false,
        }
    }
}

/// Scenario z11: the leader (ZK-LONG, a 20 s session) and two waiters (ZK-SHORT) in line; the
/// server restarted on the same data with `maxSessionTimeout` 4–8 s (a rolling configuration
/// change), and the leader's proxy cut 0–3 s after it serves again. Every reconnect
/// renegotiates the session timeout, and the server expires a session by its current
/// connection's: a leader that reconnected holds a session the server may expire long before its
/// 14 s deadline, so it stops its command at once; one cut before it reconnected still holds the
/// 20 s the server loaded. Either way its group is gone before a waiter starts.
pub fn zookeeper_smaller_maximum(store: &mut ShrinkingZooKeeper, ctx: &mut Ctx) {
    if store.shrunk {
        store.zk.restart_with("");
        store.shrunk = false;
    }
    let zk = &store.zk;
    let mut trial = Trial::empty(&zk.endpoint(), &ctx.lease, ZK_SHORT);
    let via = |p: &[Proxy]| zk.endpoint_via(&p[0]);
    trial.add("a", &[zk.addr()], via, ZK_LONG, JobKind::Stoppable);
    let first = trial
        .wait_start(&[], Duration::from_secs(30))
        .unwrap_or_else(|| trial.fail("a was not elected"));
    for name in ["b", "c"] {
        trial.add(name, &[zk.addr()], via, ZK_SHORT, JobKind::Stoppable);
    }
    if !wait_for(Duration::from_secs(15), || zk.claims(&trial.lease) == 3) {
        trial.fail("not all 3 instances joined the line");
    }
    ctx.phase(&trial);
    let maximum = ctx.rng.u64(4000..=8000);
    let begin = now_ns();
    store
        .zk
        .restart_with(&format!("maxSessionTimeout={maximum}\n"));
    store.shrunk = true;
    let served = now_ns();
    // The leader reconnects and learns the shorter timeout: it must stop its command before a
    // waiter can start. (Not injected here: a leader cut off after its reconnect request reached
    // the server but before the answer reached it. The server then expires the session by the new,
    // shorter timeout while the leader still counts with the old one; no client can see that.
    // docs/zookeeper.md states the rule that avoids it: never lower the session bounds of a server
    // while leaders hold sessions longer than the new maximum.)
    let timeout = ZK_LONG.ttl + SLACK + SLACK;
    let next = trial
        .wait_start(&[&first.name], timeout)
        .unwrap_or_else(|| trial.fail(format!("no other instance took over within {timeout:?}")));
    if next.token <= first.token {
        trial.fail(format!("token {} after {}", next.token, first.token));
    }
    trial.fault("zookeeper-max-session-timeout", begin, served, false);
    ctx.stats.outages.push(Duration::from_millis(maximum));
    trial.expect_exit(&first.name, 75);
    if group_has_live_member(first.pid) {
        trial.fail("the old leader's command group is still alive");
    }
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}

/// Scenario 13: `resign` (run from elsewhere, directly against the store) at a random moment
/// while the leader's command ignores TERM and has a grandchild that ignores it too. The leader
/// hands over as on TERM: TERM to the group, SIGKILL after --kill-after, and it releases its claim
/// only once the whole group is gone, so the next command starts after that; `resign` exits 0,
/// the old instance 75.
pub fn resign_term_ignoring<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let timing = FAST;
    let mut trial = single(store, ctx, timing, JobKind::IgnoresTerm);
    let first = trial.elected(store);
    let grandchild = trial.wait_spawn(&first.name, SLACK);
    parent_of(first.pid).unwrap_or_else(|| trial.fail("the command has no parent"));
    ctx.phase(&trial);
    let begin = now_ns();
    let resigning = resign(&store.endpoint(), &trial.lease, "20s");
    let name = first.name.clone();
    let term = trial.wait_record(
        SLACK,
        |r| matches!(r, Record::Term { name: n, .. } if *n == name),
    );
    let Some(Record::Term { time: term, .. }) = term else {
        trial.fail("the command got no SIGTERM on resign");
    };
    let Some((seen_alive, dead)) =
        wait_all_dead(&[first.pid, grandchild], timing.kill_after + SLACK)
    else {
        trial.fail("the TERM-ignoring command or its grandchild survived the handover");
    };
    // TERM was ignored: only the SIGKILL after the grace ended them. (250 ms: the trap records
    // TERM a moment after it was sent.)
    let grace = Duration::from_nanos((dead - term) as u64);
    if grace + Duration::from_millis(250) < timing.kill_after {
        trial.fail(format!(
            "SIGKILL came {grace:?} after TERM, before the grace was over"
        ));
    }
    ctx.stats.reactions.push(grace);
    if !wait_for(Duration::from_secs(3), || !group_has_live_member(first.pid)) {
        trial.fail("the command's process group survived the handover");
    }
    let next = next_leader(&trial, &first);
    // The runner polls, so it sees a death up to a poll late; what it can hold against the next
    // command is having started while the runner still saw the old group alive. (The next
    // command's own check at its start, in the history, is exact.)
    if next.time <= seen_alive {
        trial.fail("the next command started while the old group was still seen alive");
    }
    finish_resign(resigning, &trial);
    trial.fault("resign", begin, now_ns(), false);
    trial.expect_exit(&first.name, 75);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}
