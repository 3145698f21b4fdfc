//! Renewing the lease, and the local deadline that decides when we can no longer prove we lead.
//!
//! The safety argument is stated once, in the store contract (`src/election/contract.rs`, "The
//! safety argument"); this is its renewal part, the same on every store:
//! - The store cannot end a claim before (instant the renewal request was *sent*) + TTL. So every
//!   renewal that comes back "alive" proves the claim lives until at least its send instant +
//!   TTL. Our deadline is that send instant + `renew_deadline`.
//! - At the deadline we stop renewing and the caller stops the child: `--kill-signal`, then after
//!   `kill_after` SIGKILL to the whole group. Validation guarantees
//!   `renew_deadline + kill_after + margin <= ttl`, so the child is gone before the claim can
//!   end and before any other instance can be elected.
//! - A store's own client may count its keep-alive deadline from the *response* (etcd's does). A
//!   response can arrive arbitrarily late (a slow network, a stalled server), and counting from
//!   it would stretch our belief in the claim past its real end. We never do that.
//! - An answer that does not come is a loss once the deadline passes: a hung store never
//!   answers, so the deadline is a timer of its own, not something checked when an answer
//!   arrives.
//! - Each attempt gets at most `retry_period`; then the keeper is reset ([`Keeper::reset`]) and a
//!   new attempt starts afresh, so that a stalled server or a failover shorter than the deadline
//!   is survived, and so that a late answer to an abandoned request can never be credited to a
//!   newer send instant.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use crate::clock::Clock;
use crate::election::{Keeper, Renewal};
use crate::ended::Ended;
use crate::lease::timing::Timing;
use crate::telemetry::event::{Event, Reporter};
use crate::telemetry::metrics::Renewed;

/// The instant (on the boot clock) until which the lease is proven to be ours.
/// Shared between the renewal loop, which extends it, and the state machine, which reads it.
#[derive(Clone, Debug)]
pub struct Deadline(Rc<Cell<Duration>>);

impl Deadline {
    /// The deadline proven by a request sent at `confirmed` (the grant): valid from the start,
    /// whether or not the renewal loop has run yet.
    pub fn new(confirmed: Duration, timing: Timing) -> Deadline {
        Deadline(Rc::new(Cell::new(confirmed + timing.renew_deadline)))
    }

    pub fn get(&self) -> Duration {
        self.0.get()
    }

    /// Brings the deadline forward to `instant` if it is later: used when leadership is proven
    /// by the request that acquired it (sent at `instant - renew_deadline`), so that nothing
    /// proven before the acquisition, or by a waiter that held nothing, stretches it.
    pub fn cap(&self, instant: Duration) {
        if instant < self.0.get() {
            self.0.set(instant);
        }
    }

    fn extend_to(&self, instant: Duration) {
        if instant > self.0.get() {
            self.0.set(instant);
        }
    }
}

/// Renews every `retry_period` until the deadline passes or the lease is reported expired.
///
/// `confirmed` is the send instant of the request that last proved the lease alive (the grant).
/// Never completes while renewals keep succeeding. Each renewal answered or abandoned is reported
/// as [`Event::Renewed`] (emitting never waits).
pub async fn keep_renewing<K: Keeper, C: Clock>(
    keeper: &mut K,
    clock: &C,
    timing: Timing,
    confirmed: Duration,
    deadline: &Deadline,
    report: Reporter,
) -> Ended {
    let missed = Ended::DeadlineMissed {
        renew_deadline: timing.renew_deadline,
    };
    let first_backoff = (timing.retry_period / 8).max(Duration::from_millis(10));
    let mut backoff = first_backoff;
    let mut next = confirmed + timing.retry_period;
    loop {
        tokio::select! {
            biased;
            _ = clock.sleep_until(deadline.get()) => return missed,
            _ = clock.sleep_until(next) => {}
        }
        // Read the clock *before* the request leaves: this is the instant the proof counts from.
        let sent = clock.now();
        let outcome = tokio::select! {
            biased;
            _ = clock.sleep_until(deadline.get()) => return missed,
            _ = clock.sleep_until(sent + timing.retry_period) => None,
            answer = keeper.renew() => Some(answer),
        };
        report.emit(Event::Renewed {
            outcome: match &outcome {
                Some(Ok(Renewal::Alive)) => Renewed::Ok,
                Some(Ok(Renewal::Expired)) => Renewed::Expired,
                Some(Err(_)) => Renewed::Error,
                None => Renewed::Timeout,
            },
            sent,
            latency: clock.now().saturating_sub(sent),
            deadline: sent + timing.renew_deadline,
        });
        match outcome {
            Some(Ok(Renewal::Alive)) => {
                deadline.extend_to(sent + timing.renew_deadline);
                next = sent + timing.retry_period;
                backoff = first_backoff;
                tracing::trace!("lease renewed");
            }
            Some(Ok(Renewal::Expired)) => return Ended::Expired,
            Some(Err(error)) => {
                keeper.reset();
                tracing::warn!(event = "renewal-failed", %error, "renewal failed; retrying");
                next = clock.now() + backoff;
                backoff = (backoff * 2).min(timing.retry_period / 2);
            }
            None => {
                // The abandoned request may still be answered on the old stream; dropping the
                // stream makes sure that answer is never counted.
                keeper.reset();
                tracing::warn!(
                    event = "renewal-failed",
                    timeout = %humantime::format_duration(timing.retry_period),
                    "renewal got no answer in time; retrying on a new stream"
                );
                next = clock.now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::election::StoreError;
    use crate::telemetry::event::Report;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// Keeps every event reported.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Event>>>);

    impl Report for Recorder {
        fn emit(&self, event: &Event) {
            self.0.lock().unwrap().push(event.clone());
        }
    }

    /// The renewal loop with the test timing, from `confirmed`, reporting to nobody.
    fn renewing<'a>(
        keeper: &'a mut ScriptedKeeper,
        clock: &'a TokioClock,
        confirmed: Duration,
        deadline: &'a Deadline,
    ) -> impl Future<Output = Ended> + 'a {
        let quiet = Reporter::new(Recorder::default());
        keep_renewing(keeper, clock, timing(), confirmed, deadline, quiet)
    }

    /// What one renewal does: answer after a delay, or never.
    #[derive(Clone, Debug)]
    enum Step {
        Answer(Duration, Result<Renewal, StoreError>),
        Hang,
    }

    /// A keeper that plays a script and records when each request was sent and whether the
    /// stream was reset before it.
    struct ScriptedKeeper {
        clock: TokioClock,
        script: VecDeque<Step>,
        /// What to do once the script is over.
        then: Step,
        sends: Rc<std::cell::RefCell<Vec<Duration>>>,
        resets: Rc<Cell<usize>>,
    }

    impl ScriptedKeeper {
        fn new(clock: &TokioClock, script: Vec<Step>, then: Step) -> Self {
            ScriptedKeeper {
                clock: clock.clone(),
                script: script.into(),
                then,
                sends: Rc::default(),
                resets: Rc::default(),
            }
        }
    }

    impl Keeper for ScriptedKeeper {
        async fn renew(&mut self) -> Result<Renewal, StoreError> {
            self.sends.borrow_mut().push(self.clock.now());
            let step = self.script.pop_front().unwrap_or_else(|| self.then.clone());
            match step {
                Step::Answer(delay, answer) => {
                    tokio::time::sleep(delay).await;
                    answer
                }
                Step::Hang => std::future::pending().await,
            }
        }

        fn reset(&mut self) {
            self.resets.set(self.resets.get() + 1);
        }
    }

    fn timing() -> Timing {
        Timing {
            ttl: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            kill_after: Duration::from_secs(4),
        }
    }

    fn ok(ms: u64) -> Step {
        Step::Answer(Duration::from_millis(ms), Ok(Renewal::Alive))
    }

    fn unavailable(ms: u64) -> Step {
        Step::Answer(
            Duration::from_millis(ms),
            Err(StoreError::Transient("unavailable".into())),
        )
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_deadline_holds_before_the_renewal_loop_first_runs() {
        // The state machine may read it before polling the loop (e.g. with --no-wait).
        let deadline = Deadline::new(5 * S, timing());
        assert_eq!(deadline.get(), 15 * S);
    }

    #[tokio::test(start_paused = true)]
    async fn healthy_renewals_never_lose() {
        let clock = TokioClock::new();
        let mut keeper = ScriptedKeeper::new(&clock, vec![], ok(5));
        let sends = keeper.sends.clone();
        let deadline = Deadline::new(Duration::ZERO, timing());
        let outcome = tokio::time::timeout(
            600 * S,
            renewing(&mut keeper, &clock, Duration::ZERO, &deadline),
        )
        .await;
        assert!(
            outcome.is_err(),
            "lost leadership with a healthy store: {outcome:?}"
        );
        // One renewal per retry period, each sent on schedule.
        let sends = sends.borrow();
        assert!(sends.len() >= 299, "{} renewals in 600 s", sends.len());
        assert_eq!(sends[0], 2 * S);
        assert_eq!(sends[1], 4 * S);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_store_loses_exactly_at_the_deadline() {
        let clock = TokioClock::new();
        let mut keeper = ScriptedKeeper::new(&clock, vec![ok(5)], Step::Hang);
        let resets = keeper.resets.clone();
        let sends = keeper.sends.clone();
        let deadline = Deadline::new(Duration::ZERO, timing());
        let lost = renewing(&mut keeper, &clock, Duration::ZERO, &deadline).await;
        assert_eq!(
            lost,
            Ended::DeadlineMissed {
                renew_deadline: 10 * S
            }
        );
        // The last good renewal was *sent* at 2 s: the deadline is 12 s, not 12.005 s.
        assert_eq!(deadline.get(), 12 * S);
        assert_eq!(clock.now(), 12 * S);
        // Each hung attempt was abandoned after one retry period, on a fresh stream each time.
        let sends = sends.borrow();
        assert_eq!(&sends[..], &[2 * S, 4 * S, 6 * S, 8 * S, 10 * S]);
        assert_eq!(resets.get(), 3);
    }

    /// Every renewal answered or abandoned is reported with its send instant and latency; one
    /// cut short by the deadline is not (it has no outcome).
    #[tokio::test(start_paused = true)]
    async fn each_renewal_is_reported() {
        let clock = TokioClock::new();
        let mut keeper = ScriptedKeeper::new(&clock, vec![ok(5), unavailable(1)], Step::Hang);
        let deadline = Deadline::new(Duration::ZERO, timing());
        let recorder = Recorder::default();
        let report = Reporter::new(recorder.clone());
        keep_renewing(
            &mut keeper,
            &clock,
            timing(),
            Duration::ZERO,
            &deadline,
            report,
        )
        .await;
        let ms = Duration::from_millis;
        let renewed = |outcome, sent: Duration, latency| Event::Renewed {
            outcome,
            sent,
            latency,
            deadline: sent + 10 * S,
        };
        let events = recorder.0.lock().unwrap().clone();
        assert_eq!(
            events,
            [
                renewed(Renewed::Ok, 2 * S, ms(5)),
                renewed(Renewed::Error, 4 * S, ms(1)),
                renewed(Renewed::Timeout, 4 * S + ms(251), 2 * S),
                renewed(Renewed::Timeout, 6 * S + ms(251), 2 * S),
                renewed(Renewed::Timeout, 8 * S + ms(251), 2 * S),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_from_the_send_instant_not_the_answer() {
        let clock = TokioClock::new();
        // Slow but in time: answered 1.9 s after it was sent.
        let mut keeper = ScriptedKeeper::new(&clock, vec![ok(1_900)], Step::Hang);
        let deadline = Deadline::new(Duration::ZERO, timing());
        renewing(&mut keeper, &clock, Duration::ZERO, &deadline).await;
        assert_eq!(deadline.get(), 2 * S + 10 * S);
        assert_eq!(clock.now(), 12 * S);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_answer_is_a_loss_at_once() {
        let clock = TokioClock::new();
        let expired = Step::Answer(Duration::from_millis(3), Ok(Renewal::Expired));
        let mut keeper = ScriptedKeeper::new(&clock, vec![ok(5), expired], Step::Hang);
        let deadline = Deadline::new(Duration::ZERO, timing());
        let lost = renewing(&mut keeper, &clock, Duration::ZERO, &deadline).await;
        assert_eq!(lost, Ended::Expired);
        assert_eq!(clock.now(), 4 * S + Duration::from_millis(3));
    }

    #[tokio::test(start_paused = true)]
    async fn errors_shorter_than_the_deadline_are_survived() {
        let clock = TokioClock::new();
        // The store restarting: every request fails at once for almost 5 s, then it answers again.
        let mut script = vec![ok(5)];
        script.extend(std::iter::repeat_n(unavailable(1), 6));
        let mut keeper = ScriptedKeeper::new(&clock, script, ok(5));
        let sends = keeper.sends.clone();
        let deadline = Deadline::new(Duration::ZERO, timing());
        let outcome = tokio::time::timeout(
            60 * S,
            renewing(&mut keeper, &clock, Duration::ZERO, &deadline),
        )
        .await;
        assert!(
            outcome.is_err(),
            "a short outage cost leadership: {outcome:?}"
        );
        // Retries came quickly (backoff capped at half a retry period), so the first good
        // renewal after the outage was well before the deadline of 12 s.
        let sends = sends.borrow();
        let recovered = sends[7];
        assert!(recovered < 10 * S, "recovered only at {recovered:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn errors_longer_than_the_deadline_lose() {
        let clock = TokioClock::new();
        let mut keeper = ScriptedKeeper::new(&clock, vec![], unavailable(1));
        let started = Duration::from_millis(300);
        tokio::time::advance(started).await;
        let deadline = Deadline::new(started, timing());
        let lost = renewing(&mut keeper, &clock, started, &deadline).await;
        assert!(matches!(lost, Ended::DeadlineMissed { .. }));
        assert_eq!(clock.now(), started + 10 * S);
    }
}
