//! The Runner on tokio's paused clock, against the scripted fake store
//! (`election::fake`) and a fake supervisor that records every signal with its instant and
//! lets a test script how the command's group ends, and a recorder of every event the Runner
//! reports. Instants are exact: nothing else moves the paused clock. The stop path's tests are
//! here; in_line.rs and limits.rs hold the rest.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::Event as Ev;
use super::{CandidacyLost, NotAcquired, Recampaign, Seen, Sigkill, Withdrawal};
use super::{Report, Reporter, Runner, Supervise};
use super::{Settings, Wait};
use crate::clock::TokioClock;
use crate::election::any::Connection;
use crate::election::fake::{Call, Fake, Script, Step};
use crate::election::flags::StoreFlags;
use crate::election::{Ahead, Renewal, StoreError, Turn};
use crate::ended::Ended;
use crate::exit::{self, ChildStatus};
use crate::lease::timing::Timing;
use crate::process::{Event, Group};
use crate::signals::Signals;

mod in_line;
mod limits;

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
    signals: Arc<Mutex<Vec<(Duration, Signal)>>>,
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
            signals: Arc::default(),
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
        self.signals.lock().unwrap().push((now, signal));
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

/// Records every event the Runner reports, and every barrier it asks for, with their instants
/// on the paused clock; and, for each event, how many signals the group had been sent by then.
#[derive(Clone)]
struct Recorder {
    origin: tokio::time::Instant,
    events: Arc<Mutex<Vec<(Duration, Ev)>>>,
    barriers: Arc<Mutex<Vec<Duration>>>,
    /// The fake group's signals.
    sent: Arc<Mutex<Vec<(Duration, Signal)>>>,
    signals_before: Arc<Mutex<Vec<usize>>>,
}

impl Report for Recorder {
    fn emit(&self, event: &Ev) {
        // Renewals are counted, not transitions: lease/renewal.rs tests what it reports.
        if matches!(event, Ev::Renewed { .. }) {
            return;
        }
        let at = self.origin.elapsed();
        let sent = self.sent.lock().unwrap().len();
        self.signals_before.lock().unwrap().push(sent);
        self.events.lock().unwrap().push((at, event.clone()));
    }

    fn barrier(&self, _limit: Duration) {
        let at = self.origin.elapsed();
        self.barriers.lock().unwrap().push(at);
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
    /// Every event reported, in order, with its instant.
    events: Vec<(Duration, Ev)>,
    /// When the Runner waited for systemd to read what it was sent (on its way out).
    barriers: Vec<Duration>,
    /// For each event, how many signals had gone to the group when it was reported.
    signals_before: Vec<usize>,
}

impl Ran {
    /// How many signals had gone to the group when each event that is `wanted` was reported.
    fn signals_before(&self, wanted: impl Fn(&Ev) -> bool) -> Vec<usize> {
        let events = self.events.iter().zip(&self.signals_before);
        events
            .filter(|((_, event), _)| wanted(event))
            .map(|(_, sent)| *sent)
            .collect()
    }
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
    let recorder = Recorder {
        origin,
        events: Arc::default(),
        barriers: Arc::default(),
        sent: Arc::clone(&sent),
        signals_before: Arc::default(),
    };
    let report = Reporter::new(recorder.clone());
    let mut runner = Runner {
        settings: &settings,
        backend: &fake,
        clock: TokioClock::new(),
        supervisor: &mut group,
        signals: &mut intake,
        health: checker,
        report,
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
    let signals = sent.lock().unwrap().clone();
    Ran {
        code,
        ended,
        signals,
        releases: fake.times(Call::Release),
        fake,
        message,
        spawned: group.spawned,
        events: std::mem::take(&mut *recorder.events.lock().unwrap()),
        barriers: std::mem::take(&mut *recorder.barriers.lock().unwrap()),
        signals_before: std::mem::take(&mut *recorder.signals_before.lock().unwrap()),
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

/// The fake store's candidacy: its place in line, and its token once it leads.
const TOKEN: i64 = 7;

/// Events, as the Runner reported them, with their instants.
type Events = Vec<(Duration, Ev)>;

/// A candidacy joins the line at `at` (its grant sent then, its renew deadline 10 s later).
fn campaigning(first: bool, at: Duration) -> (Duration, Ev) {
    let event = Ev::Campaigning {
        first,
        place: TOKEN,
        key: "/leader-exec/test/2a".into(),
        confirmed: at,
        deadline: at + 10 * S,
    };
    (at, event)
}

/// The first candidacy leads at once at `at`, and asks for the command to start.
fn elected(at: Duration) -> Events {
    vec![
        campaigning(true, at),
        (at, Ev::Elected { token: TOKEN }),
        (at, Ev::Starting { token: TOKEN }),
    ]
}

/// [`elected`], and the command started.
fn started(at: Duration) -> Events {
    let mut events = elected(at);
    events.push((
        at,
        Ev::Started {
            token: TOKEN,
            pid: PID,
        },
    ));
    events
}

fn released(at: Duration) -> (Duration, Ev) {
    let lease_id = Some("2a".to_owned());
    (at, Ev::Released { lease_id })
}

/// Leadership lost at `at` for `reason`; `first` went to the group.
fn stepping_down(at: Duration, reason: Ended, first: Signal) -> Events {
    let signal = Some(first);
    vec![
        (at, Ev::LeadershipLost { reason }),
        (
            at,
            Ev::SteppingDown {
                token: TOKEN,
                reason,
                signal,
            },
        ),
    ]
}

/// A step-down's group died of SIGKILL at `at`; the claim is released.
fn stepped_down(at: Duration) -> Events {
    let status = ChildStatus::Signaled(9);
    vec![
        (
            at,
            Ev::ExitedWhileStopping {
                token: TOKEN,
                status,
            },
        ),
        (at, Ev::SteppedDown { token: TOKEN }),
        (at, Ev::GroupGone { code: None }),
        released(at),
        (at, Ev::LeadEnded { lost: true }),
    ]
}

/// The command ended at `at` with `status` while leading (its group with it).
fn command_ended(at: Duration, status: ChildStatus) -> Events {
    let code = Some(status.code());
    vec![
        (
            at,
            Ev::Exited {
                token: TOKEN,
                status,
            },
        ),
        (at, Ev::GroupGone { code }),
    ]
}

/// The events of a handover the run starts at 5 s whose command ignores TERM: `why` it handed
/// over, SIGKILL at 9 s (`--kill-after` 4 s), then the release and the handover's end.
fn handed_over_at_5s_killed_at_9s(why: &'static str) -> Events {
    let handing_over = Ev::HandingOver {
        token: TOKEN,
        signal: Signal::SIGTERM,
        why,
        stop: true,
    };
    let gone = 9 * S + DYING;
    [
        started(Duration::ZERO),
        vec![(5 * S, handing_over), sigkill(9 * S, Sigkill::KillAfter)],
        command_ended(gone, ChildStatus::Signaled(9)),
        vec![
            (gone, Ev::HandedOver { token: TOKEN }),
            released(gone),
            (gone, Ev::LeadEnded { lost: true }),
            (gone, Ev::HandoverComplete),
        ],
    ]
    .concat()
}

fn sigkill(at: Duration, why: Sigkill) -> (Duration, Ev) {
    (at, Ev::Sigkill { token: TOKEN, why })
}

fn deadline_missed() -> Ended {
    Ended::DeadlineMissed {
        renew_deadline: 10 * S,
    }
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
    let expected = [
        started(Duration::ZERO),
        stepping_down(10 * S, deadline_missed(), Signal::SIGTERM),
        vec![sigkill(14 * S, Sigkill::KillAfter)],
        stepped_down(14 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
    // The step-down is counted before the first signal goes, and said after it; SIGKILL is
    // said after it went.
    let lost = ran.signals_before(|e| matches!(e, Ev::LeadershipLost { .. }));
    assert_eq!(lost, [0]);
    let stepping = ran.signals_before(|e| matches!(e, Ev::SteppingDown { .. }));
    assert_eq!(stepping, [1]);
    assert_eq!(ran.signals_before(|e| matches!(e, Ev::Sigkill { .. })), [2]);
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
    // The pause began before the supervisor's report of the start was read.
    let expected = [
        elected(Duration::ZERO),
        stepping_down(25 * S, deadline_missed(), Signal::SIGKILL),
        vec![sigkill(25 * S, Sigkill::Late(11 * S))],
        stepped_down(25 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
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
    let expected = [
        elected(Duration::ZERO),
        stepping_down(14 * S + 250 * MS, deadline_missed(), Signal::SIGTERM),
        vec![sigkill(18 * S + 250 * MS, Sigkill::KillAfter)],
        stepped_down(18 * S + 250 * MS + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
    // One millisecond later it would not: SIGKILL at once.
    let group = FakeGroup::new(Dies::OnKill).paused(5 * S, pause + MS);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(ran.signals, [(14 * S + 251 * MS, Signal::SIGKILL)]);
    assert_eq!(ran.code, exit::LEADERSHIP_LOST);
    let expected = [
        elected(Duration::ZERO),
        stepping_down(14 * S + 251 * MS, deadline_missed(), Signal::SIGKILL),
        vec![sigkill(14 * S + 251 * MS, Sigkill::Late(251 * MS))],
        stepped_down(14 * S + 251 * MS + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
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
    let lost = CandidacyLost::Renewal(Ended::Expired);
    let expected = [
        campaigning(true, Duration::ZERO),
        (2 * S, Ev::CandidacyLost(lost)),
        released(2 * S),
        campaigning(false, 4 * S),
        (5 * S, Ev::NotAcquired(NotAcquired::TimeoutInLine)),
        released(5 * S),
    ];
    assert_eq!(ran.events, expected);
    // systemd reads READY=1 before this process is gone.
    assert_eq!(ran.barriers, [5 * S]);
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
    let expected = [
        started(Duration::ZERO),
        stepping_down(4 * S, Ended::Expired, Signal::SIGKILL),
        stepped_down(4 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
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
    let seen = Seen::Renewal(Ended::Expired);
    let expected = [
        started(Duration::ZERO),
        command_ended(S, ChildStatus::Exited(3)),
        vec![
            (S, Ev::Holding { token: TOKEN }),
            (6 * S, Ev::HoldLost { token: TOKEN, seen }),
            released(6 * S),
            (6 * S, Ev::LeadEnded { lost: false }),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let expected = [
        started(Duration::ZERO),
        stepping_down(10 * S, deadline_missed(), Signal::SIGTERM),
        vec![sigkill(12 * S, Sigkill::ClaimEnded)],
        stepped_down(12 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
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
    let given_up = 14 * S + super::stop::KILL_WAIT;
    let stuck = Ev::GroupStuck {
        token: TOKEN,
        pids: vec![PID],
        waited: super::stop::KILL_WAIT,
    };
    let expected = [
        started(Duration::ZERO),
        stepping_down(10 * S, deadline_missed(), Signal::SIGTERM),
        vec![
            sigkill(14 * S, Sigkill::KillAfter),
            (given_up, stuck),
            (given_up, Ev::GroupGone { code: None }),
            (given_up, Ev::LeadEnded { lost: true }),
        ],
    ];
    assert_eq!(ran.events, expected.concat(), "no release");
}

#[tokio::test(start_paused = true)]
async fn a_command_that_exits_releases_once_and_passes_its_status_on() {
    let group = FakeGroup::new(Dies::OnTerm).exits_after(3 * S, 4);
    let ran = run(settings(), Script::default(), group, vec![]).await;
    assert_eq!(ran.code, 4);
    assert_eq!(ran.releases, [3 * S]);
    assert!(ran.signals.is_empty());
    let expected = [
        started(Duration::ZERO),
        command_ended(3 * S, ChildStatus::Exited(4)),
        vec![released(3 * S), (3 * S, Ev::LeadEnded { lost: false })],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let forwarded = Ev::SignalForwarded {
        token: TOKEN,
        signal: Signal::SIGTERM,
        stop: true,
    };
    let reported = ran.signals_before(|e| matches!(e, Ev::SignalForwarded { .. }));
    assert_eq!(reported, [1], "forwarded first, reported after");
    let expected = [
        started(Duration::ZERO),
        vec![
            (5 * S, forwarded.clone()),
            sigkill(9 * S, Sigkill::KillAfter),
        ],
        command_ended(9 * S + DYING, ChildStatus::Signaled(9)),
        vec![
            released(9 * S + DYING),
            (9 * S + DYING, Ev::LeadEnded { lost: false }),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let expected = [
        started(Duration::ZERO),
        vec![(5 * S, forwarded)],
        command_ended(5 * S + DYING, ChildStatus::Signaled(15)),
        vec![
            released(5 * S + DYING),
            (5 * S + DYING, Ev::LeadEnded { lost: false }),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
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
    // Failed: not counted as a leadership that ended.
    let died = Ev::SupervisorDied {
        token: TOKEN,
        error: "the supervisor process died".into(),
    };
    let expected = [
        started(Duration::ZERO),
        vec![(3 * S, died), released(ran.releases[0])],
    ];
    assert_eq!(ran.events, expected.concat());
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
    assert_eq!(
        ran.events,
        handed_over_at_5s_killed_at_9s("resign asked for a handover")
    );
    // Signal first, report after.
    let handing = ran.signals_before(|e| matches!(e, Ev::HandingOver { .. }));
    assert_eq!(handing, [1]);
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
    // The second TERM's SIGKILL is reported by the signals it sent, as before: no event.
    let expected = [
        started(Duration::ZERO),
        stepping_down(10 * S, deadline_missed(), Signal::SIGTERM),
        stepped_down(11 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
}
