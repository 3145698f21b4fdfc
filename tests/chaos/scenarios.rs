//! The faults, one trial each. Every trial starts three instances on a fresh lease, waits for the
//! first leader's job and a full line, waits a random part of two renewal cycles (so that faults
//! land anywhere in the lease cycle), injects its fault, observes from outside what must happen,
//! tears down and checks the history.
//!
//! The functions generic over `Store` are the store-neutral faults: `main.rs` runs each of them
//! against every store the store list marks for it: etcd, PostgreSQL, a standalone ZooKeeper
//! server and MariaDB (`every_store!`). The rest inspect
//! etcd (scenario 7 reads its token with etcdctl) or need an etcd cluster (5a, 5b).

pub mod holders;
pub mod rows;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::Ctx;
use crate::harness::{Cluster, Etcd, Proxy, Store, alive, group_alive, now_ns, wait_for};
use crate::history::Verdict;
use crate::trial::{FAST, JobKind, STEADY, Start, Trial, current_token, token_is_current};

/// Generous bound for what should take well under a second, on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(5);

fn single<S: Store>(store: &S, ctx: &Ctx, timing: crate::trial::Timing, kind: JobKind) -> Trial {
    Trial::start(store, &ctx.lease, timing, kind)
}

/// Waits for the next leader's job after `first`'s: the failover.
fn next_leader(trial: &Trial, first: &Start) -> Start {
    let timeout = trial.timing.ttl + trial.timing.renew_deadline + SLACK;
    trial
        .wait_start(&[&first.name], timeout)
        .unwrap_or_else(|| trial.fail(format!("no other instance took over within {timeout:?}")))
}

fn elapsed_ns(since: u128) -> Duration {
    Duration::from_nanos((now_ns() - since) as u64)
}

/// Scenarios 1 and 2: the leader's proxies cut (every connection reset, new ones refused) or
/// frozen (accepted, nothing forwarded) until another instance leads, then healed.
pub fn proxy_fault<S: Store>(store: &mut S, ctx: &mut Ctx, freeze: bool) {
    let mut trial = single(store, ctx, FAST, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let begin = now_ns();
    let leader = trial.contender(&first.name);
    if freeze {
        leader.freeze();
    } else {
        leader.cut();
    }
    next_leader(&trial, &first);
    trial.contender(&first.name).heal();
    let kind = if freeze { "proxy-freeze" } else { "proxy-cut" };
    trial.fault(kind, begin, now_ns(), false);
    trial.expect_exit(&first.name, 75);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
    ctx.stepped_down(&trial, &verdict, &first, begin);
}

/// Scenarios 1b and 2b: the leader's proxies cut or frozen briefly (100 ms up to the short-fault
/// limit), then healed: leadership is kept and the command left alone.
pub fn brief_proxy_fault<S: Store>(store: &mut S, ctx: &mut Ctx, freeze: bool) {
    let timing = STEADY;
    let mut trial = single(store, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let hold = ctx.between(Duration::from_millis(100), timing.short_fault());
    let begin = now_ns();
    let down = Instant::now();
    let leader = trial.contender(&first.name);
    if freeze {
        leader.freeze();
    } else {
        leader.cut();
    }
    // The fault's duration.
    std::thread::sleep(hold);
    leader.heal();
    let outage = down.elapsed();
    let short = outage <= timing.short_fault();
    let kind = if freeze { "proxy-freeze" } else { "proxy-cut" };
    trial.fault(kind, begin, now_ns(), short);
    ctx.kept(&mut trial, &first, down, outage, short);
}

/// Scenario 3: the store SIGSTOPped for longer than the renew deadline (up to a second past the
/// TTL), then resumed. Every instance loses contact; the leader steps down at its deadline.
///
/// ZooKeeper (z3): once resumed, the server expires every session whose timeout ran out while it
/// was stopped (its clock ran on), the waiters' too; they campaign again on new sessions, and one
/// of them leads. What is asserted holds all the same: the old leader exits 75, a next leader
/// starts, and the history is safe.
pub fn store_sigstop<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let timing = FAST;
    let mut trial = single(store, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let shortest = timing.renew_deadline + Duration::from_millis(300);
    let hold = ctx.between(shortest, timing.ttl + Duration::from_secs(1));
    let begin = now_ns();
    {
        let _frozen = Frozen::new(store);
        // The fault's duration.
        std::thread::sleep(hold);
    }
    trial.fault(&format!("{}-sigstop", S::NAME), begin, now_ns(), false);
    ctx.stats.outages.push(hold);
    next_leader(&trial, &first);
    trial.expect_exit(&first.name, 75);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
    ctx.stepped_down(&trial, &verdict, &first, begin);
}

/// Scenario 3b: the store SIGSTOPped briefly (100 ms up to the short-fault limit), as in an fsync
/// or garbage-collection stall, then resumed: leadership is kept and the command left alone.
/// (ZooKeeper, z3b: far shorter than the session timeout, so no session expires.)
pub fn store_sigstop_brief<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let timing = STEADY;
    let mut trial = single(store, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let hold = ctx.between(Duration::from_millis(100), timing.short_fault());
    let begin = now_ns();
    let down = Instant::now();
    {
        let _frozen = Frozen::new(store);
        // The fault's duration.
        std::thread::sleep(hold);
    }
    let outage = down.elapsed();
    let short = outage <= timing.short_fault();
    trial.fault(&format!("{}-sigstop", S::NAME), begin, now_ns(), short);
    ctx.kept(&mut trial, &first, down, outage, short);
}

/// Thaws the store when dropped, also when a trial fails.
struct Frozen<'a, S: Store>(&'a S);

impl<'a, S: Store> Frozen<'a, S> {
    fn new(store: &'a S) -> Self {
        store.freeze();
        Frozen(store)
    }
}

impl<S: Store> Drop for Frozen<'_, S> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

/// Scenario 4: the store killed and started again on the same data, faster than the renew
/// deadline: leadership is kept and the command left alone. (ZooKeeper, z4: sessions survive a
/// restart, with their timeouts started afresh, and the clients resume them on reconnecting.)
pub fn store_restart<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let timing = STEADY;
    let mut trial = single(store, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let begin = now_ns();
    let down = Instant::now();
    store.restart();
    let outage = down.elapsed();
    let short = outage <= timing.short_fault();
    trial.fault(&format!("{}-restart", S::NAME), begin, now_ns(), short);
    ctx.kept(&mut trial, &first, down, outage, short);
}

/// Scenario 5: a 3-member cluster loses a member: the one the leader's renewals go to, or the
/// raft leader. Leadership is kept when the remaining members answer in time.
pub fn member_kill(cluster: &mut Cluster, ctx: &mut Ctx, raft_leader: bool) {
    let timing = STEADY;
    for i in 0..cluster.size() {
        if !cluster.is_running(i) {
            cluster.restart(i);
        }
    }
    if !cluster.wait_healthy(Duration::from_secs(20)) {
        panic!("the cluster is not healthy before the trial");
    }
    let targets: Vec<SocketAddr> = (0..cluster.size()).map(|i| cluster.addr(i)).collect();
    let mut trial = Trial::start_via(
        &targets,
        Proxy::endpoint,
        &cluster.endpoints(),
        &ctx.lease,
        timing,
        JobKind::Stoppable,
    );
    let first = trial.elected_in_cluster();
    ctx.phase(&trial);
    let current_raft_leader = cluster.raft_leader();
    let member = if raft_leader {
        current_raft_leader.unwrap_or_else(|| trial.fail("no member reports a raft leader"))
    } else {
        // The member the leader's renewals go to: the one whose proxy forwarded the most in the
        // last two renewal cycles (renewals are the leader's only steady traffic).
        let proxies = &trial.contender(&first.name).proxies;
        let before: Vec<u64> = proxies.iter().map(Proxy::forwarded).collect();
        std::thread::sleep(2 * timing.retry_period);
        let after: Vec<u64> = proxies.iter().map(Proxy::forwarded).collect();
        (0..proxies.len())
            .max_by_key(|&i| after[i] - before[i])
            .unwrap()
    };
    if !raft_leader && current_raft_leader == Some(member) {
        ctx.stats.tally += 1;
    }
    let begin = now_ns();
    let down = Instant::now();
    cluster.kill(member);
    // "A healthy member answers": a linearizable read through the remaining members.
    let answered = wait_for(Duration::from_secs(10), || {
        cluster
            .ctl(&["get", "probe", "--command-timeout=500ms"])
            .status
            .success()
    });
    let outage = down.elapsed();
    let short = answered && outage <= timing.short_fault();
    let kind = if raft_leader {
        "raft-leader-kill"
    } else {
        "member-kill"
    };
    trial.fault(kind, begin, now_ns(), short);
    ctx.kept(&mut trial, &first, down, outage, short);
    drop(trial);
    cluster.restart(member);
}

/// Scenario 6: leader-exec SIGKILLed. Its command and the grandchild in the command's group die
/// with it at once, long before the next leader starts.
pub fn leader_exec_sigkill<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let mut trial = single(store, ctx, FAST, JobKind::WithGrandchild);
    let first = trial.elected(store);
    let grandchild = trial.wait_spawn(&first.name, SLACK);
    ctx.phase(&trial);
    let begin = now_ns();
    trial.contender_mut(&first.name).signal(Signal::SIGKILL);
    let Some((seen_alive, _)) = wait_all_dead(&[first.pid, grandchild], Duration::from_secs(2))
    else {
        trial.fail("the command or its grandchild outlived a SIGKILLed leader-exec by 2 s");
    };
    ctx.stats.reactions.push(elapsed_ns(begin));
    if !wait_for(Duration::from_secs(3), || !group_alive(first.pid)) {
        trial.fail("the command's process group outlived a SIGKILLed leader-exec by 3 s");
    }
    let next = next_leader(&trial, &first);
    // The runner polls, so it sees a death up to a poll late; what it can hold against the next
    // command is having started while the runner still saw the old group alive. (The next
    // command's own check at its start, in the history, is exact.)
    if next.time <= seen_alive {
        trial.fail("the next command started while the old group was still seen alive");
    }
    trial.fault("leader-exec-sigkill", begin, begin, false);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}

/// The parent of a process, from /proc.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Scenario 6b: leader-exec's supervising process (the command's parent) SIGKILLed. The command
/// dies of its death signal, leader-exec kills the rest of the group itself, and only then
/// releases the lease (exiting non-zero), so the next leader starts early but after the group.
pub fn supervisor_sigkill<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let mut trial = single(store, ctx, FAST, JobKind::WithGrandchild);
    let first = trial.elected(store);
    let grandchild = trial.wait_spawn(&first.name, SLACK);
    let instance = trial.contender(&first.name).instance.pid();
    let supervisor = parent_of(first.pid)
        .filter(|&s| s != instance && parent_of(s) == Some(instance))
        .unwrap_or_else(|| trial.fail("the command's parent is not leader-exec's supervisor"));
    ctx.phase(&trial);
    let begin = now_ns();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), Signal::SIGKILL).unwrap();
    let Some((seen_alive, _)) = wait_all_dead(&[first.pid, grandchild], Duration::from_secs(2))
    else {
        trial.fail("the command or its grandchild outlived the supervisor by 2 s");
    };
    ctx.stats.reactions.push(elapsed_ns(begin));
    let next = next_leader(&trial, &first);
    // The runner polls, so it sees a death up to a poll late; what it can hold against the next
    // command is having started while the runner still saw the old group alive. (The next
    // command's own check at its start, in the history, is exact.)
    if next.time <= seen_alive {
        trial.fail("the next command started while the old group was still seen alive");
    }
    let code = trial
        .contender_mut(&first.name)
        .instance
        .wait(Duration::from_secs(10));
    if code.is_none() || code == Some(0) {
        trial.fail(format!(
            "leader-exec exited {code:?} after losing its supervisor"
        ));
    }
    trial.fault("supervisor-sigkill", begin, begin, false);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}

/// Scenario 7: leader-exec SIGSTOPped for longer than the TTL. It cannot stop its command, so the
/// next leader's command overlaps with it: the fencing token is the defence. The new token is
/// larger, the store calls the old one stale, and the resumed instance stops its command at once.
pub fn leader_exec_sigstop(store: &mut Etcd, ctx: &mut Ctx) {
    let timing = FAST;
    let mut trial = single(store, ctx, timing, JobKind::Stoppable);
    let first = trial.elected(store);
    ctx.phase(&trial);
    let begin = now_ns();
    let stopped = Instant::now();
    trial.contender_mut(&first.name).signal(Signal::SIGSTOP);
    let next = next_leader(&trial, &first);
    // Resume after the TTL, at a random point of the new leader's first renewal cycles.
    let resume_after = (timing.ttl + ctx.between(Duration::ZERO, timing.retry_period))
        .max(stopped.elapsed() + ctx.between(Duration::ZERO, timing.retry_period));
    std::thread::sleep(resume_after.saturating_sub(stopped.elapsed()));

    if next.token <= first.token {
        trial.fail(format!(
            "new token {} is not greater than the frozen leader's {}",
            next.token, first.token
        ));
    }
    let endpoints = store.endpoint();
    let current = current_token(&endpoints, &trial.lease);
    if current != Some(next.token) {
        trial.fail(format!(
            "etcd names token {current:?} the leader's, not {}",
            next.token
        ));
    }
    if token_is_current(&endpoints, &trial.lease, first.token) {
        trial.fail(format!(
            "the frozen leader's token {} is not stale",
            first.token
        ));
    }
    if !alive(first.pid) {
        trial.fail("the frozen leader's command is gone: nothing stopped its leader-exec?");
    }

    let resumed = now_ns();
    trial.contender_mut(&first.name).signal(Signal::SIGCONT);
    // Stopped: the command's trap recorded the kill signal, or the command is dead (etcd
    // expired the lease while leader-exec was frozen, so the claim is gone and SIGKILL follows
    // the kill signal at once: the trap may never run).
    let name = first.name.clone();
    let mut stopped_at = None;
    wait_for(SLACK, || {
        stopped_at = trial
            .records()
            .into_iter()
            .find_map(|r| match r {
                crate::history::Record::Stop { name: n, time } if n == name => Some(time),
                _ => None,
            })
            .or_else(|| (!alive(first.pid)).then(now_ns));
        stopped_at.is_some()
    });
    let Some(stop) = stopped_at else {
        trial.fail("the resumed leader-exec did not stop its command");
    };
    let reaction = Duration::from_nanos(stop.saturating_sub(resumed) as u64);
    if reaction > Duration::from_secs(1) {
        trial.fail(format!(
            "the resumed leader-exec stopped its command only after {reaction:?}"
        ));
    }
    ctx.stats.reactions.push(reaction);
    trial.expect_exit(&first.name, 75);
    trial.fault("leader-exec-sigstop", begin, resumed, false);
    let verdict = trial.finish();

    // Exactly the expected overlap, between the frozen leader's job and the next; nothing else.
    let expected = verdict.overlaps.len() == 1
        && verdict.overlaps[0].earlier == first.name
        && verdict.overlaps[0].later == next.name;
    if !expected || !verdict.violations.is_empty() {
        ctx.stats.overlaps += verdict.overlaps.len();
        trial.fail(verdict.problems());
    }
    ctx.stats.windows.push(verdict.overlaps[0].window);
    if let Some(failover) = verdict.failover() {
        ctx.stats.failovers.push(failover);
    }
    ctx.stats.tally += 1;
}

/// Scenario 8: a command that ignores SIGTERM and has a grandchild that ignores it too; the
/// leader's proxy is frozen. The group gets TERM at the deadline, SIGKILL after --kill-after, and
/// is gone before the next leader starts.
///
/// Scenario 9 (`stop_supervisor`): the same with leader-exec's supervising process SIGSTOPped
/// first: the signals must reach the group without its help.
pub fn term_ignoring_group<S: Store>(store: &mut S, ctx: &mut Ctx, stop_supervisor: bool) {
    let timing = FAST;
    let mut trial = single(store, ctx, timing, JobKind::IgnoresTerm);
    let first = trial.elected(store);
    let grandchild = trial.wait_spawn(&first.name, SLACK);
    let supervisor =
        parent_of(first.pid).unwrap_or_else(|| trial.fail("the command has no parent"));
    ctx.phase(&trial);
    let begin = now_ns();
    if stop_supervisor {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), Signal::SIGSTOP).unwrap();
    }
    trial.contender(&first.name).freeze();
    let name = first.name.clone();
    let term = trial.wait_record(
        timing.renew_deadline + SLACK,
        |r| matches!(r, crate::history::Record::Term { name: n, .. } if *n == name),
    );
    let Some(crate::history::Record::Term { time: term, .. }) = term else {
        trial.fail("the command got no SIGTERM");
    };
    let Some((seen_alive, dead)) =
        wait_all_dead(&[first.pid, grandchild], timing.kill_after + SLACK)
    else {
        trial.fail("the TERM-ignoring command or its grandchild survived");
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
    // Zombies do not count: with its supervisor stopped, nobody reaps the dead command.
    if !wait_for(Duration::from_secs(3), || {
        !crate::harness::group_has_live_member(first.pid)
    }) {
        trial.fail("the command's process group survived");
    }
    let next = next_leader(&trial, &first);
    // The runner polls, so it sees a death up to a poll late; what it can hold against the next
    // command is having started while the runner still saw the old group alive. (The next
    // command's own check at its start, in the history, is exact.)
    if next.time <= seen_alive {
        trial.fail("the next command started while the old group was still seen alive");
    }
    trial.contender(&first.name).heal();
    trial.fault("proxy-freeze", begin, now_ns(), false);
    trial.expect_exit(&first.name, 75);
    if stop_supervisor {
        // leader-exec does not leave its stopped supervisor behind.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), Signal::SIGCONT);
    }
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}

/// Scenario 10: what `pkill -9 leader-exec`, `pkill -9 -f leader-exec` and `killall -9
/// leader-exec` kill among the leader's processes, SIGKILLed at once. The supervisor is not among
/// them (its name and command line are `lx-supervisor`), so it kills the command's group.
pub fn pkill_by_name<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let mut trial = single(store, ctx, FAST, JobKind::WithGrandchild);
    let first = trial.elected(store);
    let grandchild = trial.wait_spawn(&first.name, SLACK);
    let instance = trial.contender(&first.name).instance.pid();
    ctx.phase(&trial);
    let mut victims = Vec::new();
    let mut todo = vec![instance];
    while let Some(pid) = todo.pop() {
        todo.extend(crate::harness::children_of(pid));
        if crate::harness::comm_of(pid) == "leader-exec"
            || crate::harness::cmdline_of(pid).contains("leader-exec")
        {
            victims.push(pid);
        }
    }
    if let Some(supervisor) = parent_of(first.pid)
        && victims.contains(&supervisor)
    {
        trial.fail("the supervisor matches leader-exec's name");
    }
    let begin = now_ns();
    for &pid in &victims {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
    let Some((seen_alive, _)) = wait_all_dead(&[first.pid, grandchild], Duration::from_secs(2))
    else {
        trial.fail("the command or its grandchild outlived `pkill -9 leader-exec` by 2 s");
    };
    ctx.stats.reactions.push(elapsed_ns(begin));
    if !wait_for(Duration::from_secs(3), || !group_alive(first.pid)) {
        trial.fail("the command's process group outlived `pkill -9 leader-exec` by 3 s");
    }
    let next = next_leader(&trial, &first);
    if next.time <= seen_alive {
        trial.fail("the next command started while the old group was still seen alive");
    }
    trial.fault("pkill-by-name", begin, begin, false);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}

impl Ctx<'_> {
    /// Records a failover trial: its failover time and gap, and fails it unless the history is
    /// safe.
    fn failover(&mut self, trial: &Trial, verdict: &Verdict) {
        self.judge(trial, verdict);
        match verdict.failover() {
            Some(f) => self.stats.failovers.push(f),
            None => trial.fail("no failover in the history"),
        }
    }

    /// Records how long after the fault began the first leader's command got its signal.
    fn stepped_down(&mut self, trial: &Trial, verdict: &Verdict, first: &Start, begin: u128) {
        match verdict.job(&first.name).and_then(|j| j.signalled) {
            Some(at) => self
                .stats
                .reactions
                .push(Duration::from_nanos(at.saturating_sub(begin) as u64)),
            None => trial.fail("the old leader's command recorded no signal"),
        }
    }

    fn judge(&mut self, trial: &Trial, verdict: &Verdict) {
        self.stats.overlaps += verdict.overlaps.len();
        if let Some(gap) = verdict.min_gap() {
            self.stats.gaps.push(gap);
        }
        trial.assert_safe(verdict);
    }

    /// After a fault that leadership should survive: waits past the instant a step-down would
    /// have come (the renew deadline after the fault began, and a second more), then checks that
    /// leader-exec and its command still run and, in the history, that nothing was stopped or
    /// started.
    fn kept(
        &mut self,
        trial: &mut Trial,
        first: &Start,
        down: Instant,
        outage: Duration,
        short: bool,
    ) {
        // A fixed wait: this shows that something does not happen.
        let watch = trial.timing.renew_deadline + Duration::from_secs(1);
        std::thread::sleep(watch.saturating_sub(down.elapsed()));
        self.stats.outages.push(outage);
        if short {
            if !trial.contender_mut(&first.name).instance.running() {
                trial.fail(format!("leader-exec exited after a {outage:?} outage"));
            }
            if !alive(first.pid) {
                trial.fail(format!("the command died after a {outage:?} outage"));
            }
        }
        let verdict = trial.finish();
        self.judge(trial, &verdict);
        if short {
            self.stats.kept += 1;
        } else {
            self.stats.long_faults += 1;
        }
    }
}

/// Polls until none of `pids` is alive. Returns the last instant any of them was seen alive and
/// the first instant all were seen dead: the last death lies between the two.
fn wait_all_dead(pids: &[i32], timeout: Duration) -> Option<(u128, u128)> {
    let mut seen_alive = now_ns();
    let gone = wait_for(timeout, || {
        let before = now_ns();
        if pids.iter().any(|&pid| alive(pid)) {
            seen_alive = before;
            false
        } else {
            true
        }
    });
    gone.then(|| (seen_alive, now_ns()))
}
