//! The Runner on tokio's paused clock, against the scripted fake store
//! (`election::fake`) and a fake supervisor that records every signal with its instant and
//! lets a test script how the command's group ends. Instants are exact: nothing else moves the
//! paused clock.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Runner, Supervise};
use super::{Settings, Wait};
use crate::clock::TokioClock;
use crate::election::any::Connection;
use crate::election::fake::{Call, Fake, Script, Step};
use crate::election::flags::StoreFlags;
use crate::election::{Ahead, Renewal, StoreError, Turn};
use crate::exit::{self, ChildStatus};
use crate::lease::timing::Timing;
use crate::process::{Event, Group};
use crate::signals::Signals;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
/// How long the fake group takes to die of a signal it does not survive.
const DYING: Duration = Duration::from_millis(10);
const PID: i32 = 4242;

/// The defaults, spelled out: ttl 15 s, renew deadline 10 s, retry period 2 s, kill-after 4 s.
/// The connection is etcd's default endpoint, never contacted: the store is the fake.
fn settings() -> Settings {
    let flags = StoreFlags {
        endpoints: vec!["http://127.0.0.1:2379".into()],
        connect_timeout: 5 * S,
        ..StoreFlags::default()
    };
    Settings {
        lease: "test".into(),
        prefix: "/leader-exec/".into(),
        identity: "host:1".into(),
        timing: Timing {
            ttl: 15 * S,
            renew_deadline: 10 * S,
            retry_period: 2 * S,
            kill_after: 4 * S,
        },
        kill_signal: Signal::SIGTERM,
        max_holders: 1,
        wait: Wait::Forever,
        recampaign: false,
        contain: super::Contain::Group,
        hold_at_least: None,
        max_runtime: None,
        splay: None,
        health: None,
        occurrence: None,
        connection: Connection::parse(flags).expect("the default endpoint parses"),
        command: vec!["job".into()],
        http: None,
        metrics_file: None,
    }
}

/// Which signals end the fake command's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dies {
    /// TERM (or SIGKILL).
    OnTerm,
    /// Only SIGKILL: a command that ignores TERM.
    OnKill,
    /// Nothing: a process stuck in the kernel.
    Never,
}

/// The supervisor, as the Runner sees it, with a scripted command.
struct FakeGroup {
    origin: tokio::time::Instant,
    dies: Dies,
    /// The command exits on its own this long after it started, with this code.
    exits_after: Option<(Duration, i32)>,
    /// The supervisor dies this long after the command started (and takes the group with it).
    supervisor_dies_after: Option<Duration>,
    signals: Rc<RefCell<Vec<(Duration, Signal)>>>,
    events: VecDeque<(Duration, Option<Event>)>,
    spawned: Option<Duration>,
    gone_at: Option<Duration>,
    supervisor_dead: bool,
    /// At this instant the whole process stops running for this long (SIGSTOP, a paused VM):
    /// the clock jumps, and every timer due meanwhile fires late, at once.
    pause: Option<(Duration, Duration)>,
}

impl FakeGroup {
    fn new(dies: Dies) -> FakeGroup {
        FakeGroup {
            origin: tokio::time::Instant::now(),
            dies,
            exits_after: None,
            supervisor_dies_after: None,
            signals: Rc::default(),
            events: VecDeque::new(),
            spawned: None,
            gone_at: None,
            supervisor_dead: false,
            pause: None,
        }
    }

    fn paused(mut self, at: Duration, duration: Duration) -> FakeGroup {
        self.pause = Some((at, duration));
        self
    }

    fn exits_after(mut self, after: Duration, code: i32) -> FakeGroup {
        self.exits_after = Some((after, code));
        self
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn schedule(&mut self, at: Duration, event: Option<Event>) {
        let index = self.events.partition_point(|(t, _)| *t <= at);
        self.events.insert(index, (at, event));
    }

    /// The whole group ends at `at` with the command's `status`, unless it ends sooner anyway.
    fn dies_at(&mut self, at: Duration, status: ChildStatus) {
        if self.gone_at.is_some_and(|gone| gone <= at) {
            return;
        }
        self.events
            .retain(|(_, e)| !matches!(e, Some(Event::Exited(_) | Event::GroupEmpty)));
        self.gone_at = Some(at);
        self.schedule(at, Some(Event::Exited(status)));
        self.schedule(at, Some(Event::GroupEmpty));
    }
}

impl Supervise for FakeGroup {
    fn spawn(&mut self, _env: &[(&str, String)]) -> io::Result<()> {
        let now = self.now();
        self.spawned = Some(now);
        self.schedule(now, Some(Event::Started(PID)));
        if let Some((after, code)) = self.exits_after {
            self.dies_at(now + after, ChildStatus::Exited(code));
        }
        if let Some(after) = self.supervisor_dies_after {
            self.schedule(now + after, None);
        }
        Ok(())
    }

    fn signal(&mut self, signal: Signal) {
        let now = self.now();
        self.signals.borrow_mut().push((now, signal));
        if self.spawned.is_none() || self.gone_at.is_some_and(|gone| gone <= now) {
            return;
        }
        let dies = match self.dies {
            Dies::OnTerm => matches!(signal, Signal::SIGTERM | Signal::SIGKILL),
            Dies::OnKill => signal == Signal::SIGKILL,
            Dies::Never => false,
        };
        if dies {
            self.dies_at(now + DYING, ChildStatus::Signaled(signal as i32));
        }
    }

    fn group(&mut self) -> Group {
        let now = self.now();
        match (self.spawned, self.gone_at) {
            (Some(_), None) => Group::Alive(vec![PID]),
            (Some(_), Some(gone)) if now < gone => Group::Alive(vec![PID]),
            _ => Group::Gone,
        }
    }

    fn cancel_pending_spawn(&mut self) {}

    async fn next_event(&mut self) -> io::Result<Event> {
        // The pause: polled on the Runner's own task, as the Runner's every select! polls the
        // supervisor; taken before the clock jumps, so that it happens once.
        if let Some((at, duration)) = self.pause {
            tokio::time::sleep_until(self.origin + at).await;
            self.pause = None;
            tokio::time::advance(duration).await;
        }
        let Some(&(at, _)) = self.events.front().filter(|_| !self.supervisor_dead) else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(self.origin + at).await;
        match self.events.pop_front().and_then(|(_, event)| event) {
            Some(event) => Ok(event),
            None => {
                // The real handle SIGKILLs the group when the supervisor dies.
                self.supervisor_dead = true;
                self.dies_at(self.now() + DYING, ChildStatus::Signaled(9));
                Err(io::Error::other("the supervisor process died"))
            }
        }
    }
}

/// What a run did.
struct Ran {
    code: u8,
    /// When the run returned.
    ended: Duration,
    signals: Vec<(Duration, Signal)>,
    releases: Vec<Duration>,
    fake: Fake,
    /// The error's message, when the run ended with one.
    message: Option<String>,
    /// When the command was started, if it was.
    spawned: Option<Duration>,
}

/// Runs the Runner to its end (bounded: a run that never ends fails the test), sending
/// `signals` to leader-exec at their instants.
async fn run(
    settings: Settings,
    script: Script,
    group: FakeGroup,
    signals: Vec<(Duration, Signal)>,
) -> Ran {
    run_checked(settings, script, group, signals, None).await
}

/// [`run`] with a `--health-cmd` whose verdicts start as `healthy` and change at the instants
/// given.
async fn run_checked(
    settings: Settings,
    script: Script,
    mut group: FakeGroup,
    signals: Vec<(Duration, Signal)>,
    health: Option<(bool, Vec<(Duration, bool)>)>,
) -> Ran {
    let (checker, verdicts) = match health {
        Some((healthy, verdicts)) => {
            let (checker, send) = super::health::Checker::scripted(healthy);
            (Some(checker), Some((send, verdicts)))
        }
        None => (None, None),
    };
    let fake = Fake::new(script);
    let origin = tokio::time::Instant::now();
    let (mut intake, send) = Signals::scripted();
    let sent = group.signals.clone();
    let mut runner = Runner {
        settings: &settings,
        backend: &fake,
        clock: TokioClock::new(),
        supervisor: &mut group,
        signals: &mut intake,
        health: checker,
    };
    let checks = async move {
        if let Some((send, verdicts)) = verdicts {
            for (at, healthy) in verdicts {
                tokio::time::sleep_until(origin + at).await;
                let failures = u32::from(!healthy) * 3;
                send.send_replace(super::health::Verdict { healthy, failures });
            }
            // Kept open: a closed channel would read as a checker that is gone.
            std::future::pending::<()>().await;
        }
        std::future::pending::<()>().await
    };
    let sender = async move {
        for (at, signal) in signals {
            tokio::time::sleep_until(origin + at).await;
            send.send(signal).expect("the runner listens");
        }
        std::future::pending::<()>().await
    };
    let result = tokio::select! {
        result = tokio::time::timeout(600 * S, runner.run()) => result.expect("the run ended within 600 s"),
        () = sender => unreachable!(),
        () = checks => unreachable!(),
    };
    let ended = origin.elapsed();
    let (code, message) = match result {
        Ok(code) => (code, None),
        Err(e) => (exit::code_of(&e), Some(e.to_string())),
    };
    let signals = sent.borrow().clone();
    Ran {
        code,
        ended,
        signals,
        releases: fake.times(Call::Release),
        fake,
        message,
        spawned: group.spawned,
    }
}

fn behind() -> VecDeque<Step<Result<Turn, StoreError>>> {
    let ahead = Ahead {
        key: b"/leader-exec/test/1".to_vec(),
        revision: 3,
        expires_in: None,
        holders: Vec::new(),
    };
    std::iter::repeat_n(Step::now(Ok(Turn::Behind(ahead))), 10_000).collect()
}

fn renewals(
    steps: Vec<Step<Result<Renewal, StoreError>>>,
) -> VecDeque<Step<Result<Renewal, StoreError>>> {
    steps.into()
}

#[tokio::test(start_paused = true)]
async fn a_missed_deadline_signals_at_the_deadline_kills_after_the_grace_and_releases_after_the_group()
 {
    // The first renewal (sent at 2 s) never answers: the grant, sent at 0, proves the lease
    // until 10 s.
    let script = Script {
        renew_then: Step::Never,
        ..Script::default()
    };
    let ran = run(settings(), script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(
        ran.signals,
        [(10 * S, Signal::SIGTERM), (14 * S, Signal::SIGKILL)],
        "--kill-signal at the deadline, SIGKILL --kill-after later"
    );
    // Released once, only after the group died of SIGKILL.
    assert_eq!(ran.releases, [14 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_noticed_past_the_lease_sigkills_at_once() {
    // Healthy renewals, the last sent at 4 s (proving the lease until 19 s, the deadline 14 s);
    // then the whole process stops from 5 s to 25 s, past the TTL: the grace of 4 s could not end
    // inside the lease, so the group gets SIGKILL the moment the deadline is seen, no TERM.
    let ran = run(
        settings(),
        Script::default(),
        FakeGroup::new(Dies::OnKill).paused(5 * S, 20 * S),
        vec![],
    )
    .await;
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(ran.signals, [(25 * S, Signal::SIGKILL)]);
    assert_eq!(ran.releases, [25 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_noticed_late_keeps_the_grace_only_while_it_fits_in_the_lease() {
    // As above, resumed 250 ms after the deadline of 14 s: the grace ends at 18.25 s, exactly
    // the lease's end (19 s) less the margin (750 ms): it fits, and is given.
    let pause = 9 * S + 250 * MS;
    let group = FakeGroup::new(Dies::OnKill).paused(5 * S, pause);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(
        ran.signals,
        [
            (14 * S + 250 * MS, Signal::SIGTERM),
            (18 * S + 250 * MS, Signal::SIGKILL)
        ]
    );
    // One millisecond later it would not: SIGKILL at once.
    let group = FakeGroup::new(Dies::OnKill).paused(5 * S, pause + MS);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(ran.signals, [(14 * S + 251 * MS, Signal::SIGKILL)]);
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_noticed_late_counts_with_a_lease_shorter_than_the_ttl() {
    // The store keeps the lease 14.75 s from a proof's send instant, less than the TTL of 15 s
    // (a ZooKeeper server that clamped the session timeout to its maxSessionTimeout, still as
    // much as the flags need). The last proof was sent at 4 s: the lease may end at 18.75 s. A
    // stop noticed 250 ms after the deadline of 14 s would give a grace ending at 18.25 s, past
    // the lease's end less the margin (18 s): SIGKILL at once.
    let script = Script {
        lease_length: Some(14 * S + 750 * MS),
        ..Script::default()
    };
    let group = FakeGroup::new(Dies::OnKill).paused(5 * S, 9 * S + 250 * MS);
    let ran = run(settings(), script, group, vec![]).await;
    assert_eq!(ran.signals, [(14 * S + 250 * MS, Signal::SIGKILL)]);
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    // Noticed at the deadline itself, the grace fits that lease: TERM, SIGKILL 4 s later.
    let script = Script {
        lease_length: Some(14 * S + 750 * MS),
        ..Script::default()
    };
    let group = FakeGroup::new(Dies::OnKill).paused(5 * S, 9 * S);
    let ran = run(settings(), script, group, vec![]).await;
    assert_eq!(
        ran.signals,
        [(14 * S, Signal::SIGTERM), (18 * S, Signal::SIGKILL)]
    );
}

#[tokio::test(start_paused = true)]
async fn loss_while_campaigning_releases_the_candidacy_and_campaigns_again() {
    // In line behind another candidate; the candidacy's lease is reported expired at 2 s.
    let script = Script {
        check_turn: behind(),
        renew: renewals(vec![Step::now(Ok(Renewal::Expired))]),
        ..Script::default()
    };
    let mut settings = settings();
    settings.wait = Wait::Until(5 * S);
    let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
    // Campaigned again (after --retry-period), then --wait-timeout passed.
    assert_eq!(ran.fake.times(Call::Campaign), [Duration::ZERO, 4 * S]);
    assert_eq!(ran.releases, [2 * S, 5 * S], "one release per candidacy");
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
    assert!(ran.signals.is_empty(), "nothing ran: {:?}", ran.signals);
}

#[tokio::test(start_paused = true)]
async fn a_store_reported_loss_while_leading_sigkills_at_once_and_exits_75() {
    // The second renewal (sent at 4 s) says the lease is gone: no grace.
    let script = Script {
        renew: renewals(vec![
            Step::now(Ok(Renewal::Alive)),
            Step::now(Ok(Renewal::Expired)),
        ]),
        ..Script::default()
    };
    let ran = run(settings(), script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(ran.signals, [(4 * S, Signal::SIGKILL)]);
    assert_eq!(ran.releases, [4 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn loss_while_holding_releases_and_exits_with_the_commands_status() {
    let mut settings = settings();
    settings.hold_at_least = Some(60 * S);
    // The command exits 3 at 1 s; the lease is reported expired at 6 s, during the hold.
    let script = Script {
        renew: renewals(vec![
            Step::now(Ok(Renewal::Alive)),
            Step::now(Ok(Renewal::Alive)),
            Step::now(Ok(Renewal::Expired)),
        ]),
        ..Script::default()
    };
    let group = FakeGroup::new(Dies::OnTerm).exits_after(S, 3);
    let ran = run(settings, script, group, vec![]).await;
    assert_eq!(ran.code, 3);
    assert!(ran.signals.is_empty(), "{:?}", ran.signals);
    assert_eq!(ran.releases, [6 * S]);
}

#[tokio::test(start_paused = true)]
async fn a_key_deleted_while_stepping_down_ends_the_grace_with_sigkill() {
    // Deadline missed at 10 s (TERM, grace until 14 s); the key is deleted at 12 s.
    let script = Script {
        renew_then: Step::Never,
        key_gone: Step::After(12 * S, ()),
        ..Script::default()
    };
    let ran = run(settings(), script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(
        ran.signals,
        [(10 * S, Signal::SIGTERM), (12 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.releases, [12 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn a_group_that_survives_sigkill_is_given_up_on_and_the_lease_left_to_expire() {
    let script = Script {
        renew_then: Step::Never,
        ..Script::default()
    };
    let ran = run(settings(), script, FakeGroup::new(Dies::Never), vec![]).await;
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(
        ran.signals,
        [(10 * S, Signal::SIGTERM), (14 * S, Signal::SIGKILL)]
    );
    assert!(
        ran.releases.is_empty(),
        "released beside a live group: {:?}",
        ran.releases
    );
    assert_eq!(ran.ended, 14 * S + super::stop::KILL_WAIT);
}

#[tokio::test(start_paused = true)]
async fn a_command_that_exits_releases_once_and_passes_its_status_on() {
    let group = FakeGroup::new(Dies::OnTerm).exits_after(3 * S, 4);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(ran.code, 4);
    assert_eq!(ran.releases, [3 * S]);
    assert!(ran.signals.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_term_takes_the_same_stop_path_and_releases_once() {
    // A command that ignores TERM: forwarded at 5 s, SIGKILL --kill-after later.
    let ran = run(
        settings(),
        Script::default(),
        FakeGroup::new(Dies::OnKill),
        vec![(5 * S, Signal::SIGTERM)],
    )
    .await;
    assert_eq!(
        ran.signals,
        [(5 * S, Signal::SIGTERM), (9 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.code, 128 + Signal::SIGKILL as u8);
    assert_eq!(ran.releases, [9 * S + DYING]);
    // A command that obeys: its own status, released once it is gone.
    let ran = run(
        settings(),
        Script::default(),
        FakeGroup::new(Dies::OnTerm),
        vec![(5 * S, Signal::SIGTERM)],
    )
    .await;
    assert_eq!(ran.signals, [(5 * S, Signal::SIGTERM)]);
    assert_eq!(ran.code, 128 + Signal::SIGTERM as u8);
    assert_eq!(ran.releases, [5 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn a_dead_supervisor_releases_once_the_group_is_gone_and_exits_125() {
    let mut group = FakeGroup::new(Dies::OnTerm);
    group.supervisor_dies_after = Some(3 * S);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(ran.code, exit::FAILURE);
    // Released after the group was seen gone (the first look in /proc after it died).
    assert_eq!(ran.releases.len(), 1, "{:?}", ran.releases);
    assert!(
        ran.releases[0] >= 3 * S + DYING && ran.releases[0] < 3 * S + 100 * MS,
        "{:?}",
        ran.releases
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_timeout_withdraws_the_candidacy_once() {
    let script = Script {
        check_turn: behind(),
        ..Script::default()
    };
    let mut settings = settings();
    settings.wait = Wait::Until(5 * S);
    let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
    assert_eq!(ran.releases, [5 * S]);
}

#[tokio::test(start_paused = true)]
async fn no_wait_behind_a_leader_withdraws_once() {
    let script = Script {
        check_turn: behind(),
        ..Script::default()
    };
    let mut settings = settings();
    settings.wait = Wait::No;
    let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
    assert_eq!(ran.releases, [Duration::ZERO]);
    assert_eq!(ran.fake.times(Call::Campaign).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn term_while_campaigning_withdraws_once() {
    let script = Script {
        check_turn: behind(),
        ..Script::default()
    };
    let ran = run(
        settings(),
        script,
        FakeGroup::new(Dies::OnTerm),
        vec![(3 * S, Signal::SIGTERM)],
    )
    .await;
    assert_eq!(ran.code, 128 + Signal::SIGTERM as u8);
    assert_eq!(ran.releases, [3 * S]);
    assert!(ran.signals.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_handover_takes_the_same_stop_path_and_releases_once_the_group_is_gone() {
    // `resign` asks at 5 s; the command ignores --kill-signal.
    let script = Script {
        handover: Step::After(5 * S, ()),
        ..Script::default()
    };
    let ran = run(settings(), script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(
        ran.signals,
        [(5 * S, Signal::SIGTERM), (9 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.releases, [9 * S + DYING]);
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
}

#[tokio::test(start_paused = true)]
async fn a_second_term_while_stepping_down_ends_the_grace_at_once() {
    // Deadline missed at 10 s (TERM, grace until 14 s); the operator sends TERM at 11 s.
    let script = Script {
        renew_then: Step::Never,
        ..Script::default()
    };
    let ran = run(
        settings(),
        script,
        FakeGroup::new(Dies::OnKill),
        vec![(11 * S, Signal::SIGTERM)],
    )
    .await;
    assert_eq!(
        ran.signals,
        [
            (10 * S, Signal::SIGTERM),
            (11 * S, Signal::SIGTERM),
            (11 * S, Signal::SIGKILL)
        ]
    );
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(ran.releases, [11 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn with_recampaign_each_candidacy_is_released_once() {
    // Leading from 0; the lease is reported expired at 2 s; the second candidacy waits behind
    // another until --wait-timeout (counted again from the loss) passes at 7 s.
    let mut check_turn = VecDeque::from([Step::now(Ok(Turn::Leading { token: 7 }))]);
    check_turn.extend(behind());
    let script = Script {
        check_turn,
        renew: renewals(vec![Step::now(Ok(Renewal::Expired))]),
        ..Script::default()
    };
    let mut settings = settings();
    settings.recampaign = true;
    settings.wait = Wait::Until(5 * S);
    let ran = run(settings, script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(ran.signals, [(2 * S, Signal::SIGKILL)]);
    assert_eq!(
        ran.fake.times(Call::Campaign),
        [Duration::ZERO, 2 * S + DYING]
    );
    assert_eq!(ran.releases, [2 * S + DYING, 7 * S + DYING]);
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
}

/// Instances already in the election use `--max-holders 3`; this one says 2.
fn mismatched() -> (Settings, Script) {
    let mut settings = settings();
    settings.max_holders = 2;
    let script = Script {
        check_turn: VecDeque::from([Step::now(Ok(Turn::Mismatch { theirs: 3 }))]),
        ..Script::default()
    };
    (settings, script)
}

#[tokio::test(start_paused = true)]
async fn a_max_holders_mismatch_releases_the_candidacy_and_exits_125_without_starting() {
    for wait in [Wait::Forever, Wait::Until(5 * S), Wait::No] {
        let (mut settings, script) = mismatched();
        settings.wait = wait;
        let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
        assert_eq!(ran.code, exit::FAILURE, "{wait:?}");
        assert_eq!(
            ran.message.as_deref(),
            Some(
                "--max-holders 2 does not match the --max-holders 3 of the instances already in \
                 lease 'test': every instance of one lease must give the same value"
            ),
            "{wait:?}"
        );
        assert!(!ran.message.unwrap().contains('\n'), "one line");
        // Released at once (the candidacy takes no place: its release leaves nothing behind),
        // exactly once, after one look and one campaign; nothing started, nothing signalled.
        assert_eq!(ran.releases, [Duration::ZERO], "{wait:?}");
        assert_eq!(ran.fake.times(Call::Campaign), [Duration::ZERO], "{wait:?}");
        assert_eq!(
            ran.fake.times(Call::CheckTurn),
            [Duration::ZERO],
            "{wait:?}"
        );
        assert_eq!(ran.spawned, None, "{wait:?}");
        assert!(ran.signals.is_empty(), "{wait:?}: {:?}", ran.signals);
        assert_eq!(ran.ended, Duration::ZERO, "{wait:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_mismatch_met_after_waiting_in_line_also_releases_and_exits_125() {
    // Behind a holder for a while (300 ms: three looks); the next look meets instances with
    // another N (they joined meanwhile; the store found them when we were next to hold).
    let (settings, mut script) = mismatched();
    let ahead = Ahead {
        key: b"/leader-exec/test/1".to_vec(),
        revision: 3,
        expires_in: None,
        holders: Vec::new(),
    };
    script.check_turn = std::iter::repeat_n(Step::now(Ok(Turn::Behind(ahead))), 3)
        .chain([Step::now(Ok(Turn::Mismatch { theirs: 3 }))])
        .collect();
    let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
    assert_eq!(ran.code, exit::FAILURE);
    assert!(
        ran.message
            .as_deref()
            .is_some_and(|m| m.starts_with("--max-holders 2 does not match the --max-holders 3 ")),
        "{:?}",
        ran.message
    );
    assert_eq!(ran.releases, [300 * MS]);
    assert_eq!(ran.spawned, None);
    assert!(ran.signals.is_empty());
}

#[tokio::test(start_paused = true)]
async fn max_runtime_takes_the_stop_path_of_term_and_exits_79_once_the_group_is_gone() {
    // A command that ignores TERM: --kill-signal at the bound, SIGKILL --kill-after later,
    // released once the group is gone.
    let mut settings = settings();
    settings.max_runtime = Some(30 * S);
    let ran = run(
        settings,
        Script::default(),
        FakeGroup::new(Dies::OnKill),
        vec![],
    )
    .await;
    assert_eq!(
        ran.signals,
        [(30 * S, Signal::SIGTERM), (34 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.code, exit::MAX_RUNTIME);
    assert_eq!(ran.releases, [34 * S + DYING]);
    // --kill-signal is the first signal, as on TERM.
    let mut settings = self::settings();
    settings.max_runtime = Some(30 * S);
    settings.kill_signal = Signal::SIGKILL;
    let ran = run(
        settings,
        Script::default(),
        FakeGroup::new(Dies::OnKill),
        vec![],
    )
    .await;
    assert_eq!(ran.signals, [(30 * S, Signal::SIGKILL)]);
    assert_eq!(ran.code, exit::MAX_RUNTIME);
    assert_eq!(ran.releases, [30 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn a_command_that_ends_before_max_runtime_is_unaffected() {
    let mut settings = settings();
    settings.max_runtime = Some(30 * S);
    let group = FakeGroup::new(Dies::OnTerm).exits_after(3 * S, 4);
    let ran = run(settings, Script::default(), group, vec![]).await;
    assert_eq!(ran.code, 4);
    assert!(ran.signals.is_empty(), "{:?}", ran.signals);
    assert_eq!(ran.releases, [3 * S]);
}

#[tokio::test(start_paused = true)]
async fn max_runtime_keeps_the_hold() {
    let mut settings = settings();
    settings.max_runtime = Some(5 * S);
    settings.hold_at_least = Some(60 * S);
    let ran = run(
        settings,
        Script::default(),
        FakeGroup::new(Dies::OnTerm),
        vec![],
    )
    .await;
    assert_eq!(ran.signals, [(5 * S, Signal::SIGTERM)]);
    assert_eq!(ran.releases, [60 * S], "held until --hold-at-least");
    assert_eq!(ran.code, exit::MAX_RUNTIME);
}

#[tokio::test(start_paused = true)]
async fn max_runtime_with_recampaign_campaigns_again() {
    // Leading from 0, stopped at 5 s; the second candidacy waits behind another until
    // --wait-timeout passes.
    let mut check_turn = VecDeque::from([Step::now(Ok(Turn::Leading { token: 7 }))]);
    check_turn.extend(behind());
    let script = Script {
        check_turn,
        ..Script::default()
    };
    let mut settings = settings();
    settings.max_runtime = Some(5 * S);
    settings.recampaign = true;
    settings.wait = Wait::Until(5 * S);
    let ran = run(settings, script, FakeGroup::new(Dies::OnTerm), vec![]).await;
    assert_eq!(ran.signals, [(5 * S, Signal::SIGTERM)]);
    // Again after --retry-period, behind the next in line.
    assert_eq!(
        ran.fake.times(Call::Campaign),
        [Duration::ZERO, 7 * S + DYING]
    );
    assert_eq!(ran.releases, [5 * S + DYING, 12 * S + DYING]);
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
}

#[tokio::test(start_paused = true)]
async fn a_loss_during_a_max_runtime_stop_is_a_step_down() {
    // Stopped at 5 s (TERM ignored, grace until 9 s); the lease is reported gone at 6 s.
    let script = Script {
        renew: renewals(vec![
            Step::now(Ok(Renewal::Alive)),
            Step::now(Ok(Renewal::Alive)),
            Step::now(Ok(Renewal::Expired)),
        ]),
        ..Script::default()
    };
    let mut settings = settings();
    settings.max_runtime = Some(5 * S);
    let ran = run(settings, script, FakeGroup::new(Dies::OnKill), vec![]).await;
    assert_eq!(
        ran.signals,
        [(5 * S, Signal::SIGTERM), (6 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    assert_eq!(ran.releases, [6 * S + DYING]);
}

#[tokio::test(start_paused = true)]
async fn an_unhealthy_leader_hands_over_through_the_stop_path_and_exits_75() {
    let ran = run_checked(
        settings(),
        Script::default(),
        FakeGroup::new(Dies::OnKill),
        vec![],
        Some((true, vec![(5 * S, false)])),
    )
    .await;
    assert_eq!(
        ran.signals,
        [(5 * S, Signal::SIGTERM), (9 * S, Signal::SIGKILL)]
    );
    assert_eq!(ran.releases, [9 * S + DYING]);
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
}

#[tokio::test(start_paused = true)]
async fn the_first_campaign_waits_for_a_passing_check() {
    let group = FakeGroup::new(Dies::OnTerm).exits_after(S, 0);
    let ran = run_checked(
        settings(),
        Script::default(),
        group,
        vec![],
        Some((false, vec![(3 * S, true)])),
    )
    .await;
    assert_eq!(ran.fake.times(Call::Campaign), [3 * S]);
    assert_eq!(ran.spawned, Some(3 * S));
    assert_eq!(ran.code, 0);
}

#[tokio::test(start_paused = true)]
async fn an_unhealthy_waiter_leaves_the_line_and_rejoins_once_healthy() {
    let script = Script {
        check_turn: behind(),
        ..Script::default()
    };
    let mut settings = settings();
    settings.wait = Wait::Until(15 * S);
    let ran = run_checked(
        settings,
        script,
        FakeGroup::new(Dies::OnTerm),
        vec![],
        Some((true, vec![(4 * S, false), (10 * S, true)])),
    )
    .await;
    assert_eq!(ran.fake.times(Call::Campaign), [Duration::ZERO, 10 * S]);
    assert_eq!(ran.releases, [4 * S, 15 * S]);
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
    assert_eq!(ran.spawned, None);
}

#[tokio::test(start_paused = true)]
async fn no_wait_with_a_failing_first_check_exits_124_without_campaigning() {
    let mut settings = settings();
    settings.wait = Wait::No;
    let ran = run_checked(
        settings,
        Script::default(),
        FakeGroup::new(Dies::OnTerm),
        vec![],
        Some((false, vec![(S, false)])),
    )
    .await;
    assert!(ran.fake.times(Call::Campaign).is_empty());
    assert_eq!(ran.code, exit::NOT_ACQUIRED);
    assert_eq!(ran.ended, S);
}
