//! The rows with `--max-holders 2` (h1, h4, h6, every store): two of three instances hold at
//! once, and a fault hits one holder (its proxy cut, its leader-exec SIGKILLed) or the store (a
//! restart within the renew deadline). The history is checked for two holders: never three
//! commands at once, and no token below one that had ended.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{SLACK, wait_all_dead};
use crate::Ctx;
use crate::harness::{Store, group_alive, now_ns, wait_for};
use crate::trial::{FAST, JobKind, STEADY, Start, Timing, Trial};

/// Two holders and one waiter.
const HOLDERS: usize = 2;
const NAMES: [&str; 3] = ["a", "b", "c"];

fn two_of_three<S: Store>(store: &S, ctx: &Ctx, timing: Timing, kind: JobKind) -> Trial {
    Trial::start_holders(store, &ctx.lease, timing, kind, HOLDERS, &NAMES)
}

/// The waiter's job, once one of `holders` has gone.
fn next_holder(trial: &Trial, holders: &[Start]) -> Start {
    let timeout = trial.timing.ttl + trial.timing.renew_deadline + SLACK;
    let except: Vec<&str> = holders.iter().map(|s| s.name.as_str()).collect();
    trial
        .wait_start(&except, timeout)
        .unwrap_or_else(|| trial.fail(format!("the waiter did not hold within {timeout:?}")))
}

/// h1: one holder's proxy cut until the waiter holds, then healed. The cut holder exits 75, the
/// other keeps its command, and the waiter's command starts only after the cut one's ended
/// (never three at once: the history's check).
pub fn one_holder_cut<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let mut trial = two_of_three(store, ctx, FAST, JobKind::Stoppable);
    let holders = trial.holding(store);
    ctx.phase(&trial);
    let (cut, kept) = (&holders[0], &holders[1]);
    let begin = now_ns();
    trial.contender(&cut.name).cut();
    next_holder(&trial, &holders);
    trial.contender(&cut.name).heal();
    trial.fault("proxy-cut", begin, now_ns(), false);
    trial.expect_exit(&cut.name, 75);
    if !crate::harness::alive(kept.pid) {
        trial.fail("the holder that kept its connection lost its command");
    }
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
    ctx.stepped_down(&trial, &verdict, cut, begin);
}

/// h4: the store restarted within the renew deadline: both holders keep their commands and the
/// waiter stays in line.
pub fn store_restart<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let timing = STEADY;
    let mut trial = two_of_three(store, ctx, timing, JobKind::Stoppable);
    let holders = trial.holding(store);
    ctx.phase(&trial);
    let begin = now_ns();
    let down = Instant::now();
    store.restart();
    let outage = down.elapsed();
    let short = outage <= timing.short_fault();
    trial.fault(&format!("{}-restart", S::NAME), begin, now_ns(), short);
    if short && !crate::harness::alive(holders[1].pid) {
        trial.fail(format!(
            "the second holder's command died after a {outage:?} outage"
        ));
    }
    ctx.kept(&mut trial, &holders[0], down, outage, short);
}

/// h6: one holder's leader-exec SIGKILLed: its command and grandchild die at once, and the waiter
/// holds after them, beside the other holder.
pub fn one_holder_sigkilled<S: Store>(store: &mut S, ctx: &mut Ctx) {
    let mut trial = two_of_three(store, ctx, FAST, JobKind::WithGrandchild);
    let holders = trial.holding(store);
    let killed = holders[0].clone();
    let grandchild = trial.wait_spawn(&killed.name, SLACK);
    ctx.phase(&trial);
    let begin = now_ns();
    trial.contender_mut(&killed.name).signal(Signal::SIGKILL);
    let Some((seen_alive, _)) = wait_all_dead(&[killed.pid, grandchild], Duration::from_secs(2))
    else {
        trial.fail("the command or its grandchild outlived a SIGKILLed leader-exec by 2 s");
    };
    ctx.stats
        .reactions
        .push(Duration::from_nanos((now_ns() - begin) as u64));
    if !wait_for(Duration::from_secs(3), || !group_alive(killed.pid)) {
        trial.fail("the command's process group outlived a SIGKILLed leader-exec by 3 s");
    }
    let next = next_holder(&trial, &holders);
    if next.time <= seen_alive {
        trial.fail("the waiter's command started while the killed holder's group was seen alive");
    }
    if !crate::harness::alive(holders[1].pid) {
        trial.fail("the other holder's command died");
    }
    trial.fault("leader-exec-sigkill", begin, begin, false);
    let verdict = trial.finish();
    ctx.failover(&trial, &verdict);
}
