//! The Runner under `--max-runtime`, and a leader the health check hands over: both take the
//! stop path a forwarded TERM takes.

use super::*;

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
    let max_runtime = Ev::MaxRuntime {
        token: TOKEN,
        signal: Signal::SIGTERM,
    };
    let gone = 34 * S + DYING;
    let expected = [
        started(Duration::ZERO),
        vec![(30 * S, max_runtime), sigkill(34 * S, Sigkill::KillAfter)],
        stopped_by_max_runtime(gone),
    ];
    assert_eq!(ran.events, expected.concat());
    // Signal first, report after.
    let reported = ran.signals_before(|e| matches!(e, Ev::MaxRuntime { .. }));
    assert_eq!(reported, [1]);
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
    let max_runtime = Ev::MaxRuntime {
        token: TOKEN,
        signal: Signal::SIGKILL,
    };
    let gone = 30 * S + DYING;
    let expected = [
        started(Duration::ZERO),
        vec![(30 * S, max_runtime)],
        stopped_by_max_runtime(gone),
    ];
    assert_eq!(ran.events, expected.concat());
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
    let expected = [
        started(Duration::ZERO),
        command_ended(3 * S, ChildStatus::Exited(4)),
        vec![released(3 * S), (3 * S, Ev::LeadEnded { lost: false })],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let max_runtime = Ev::MaxRuntime {
        token: TOKEN,
        signal: Signal::SIGTERM,
    };
    let gone = 5 * S + DYING;
    let expected = [
        started(Duration::ZERO),
        vec![(5 * S, max_runtime)],
        command_ended(gone, ChildStatus::Signaled(15)),
        vec![
            (
                gone,
                Ev::MaxRuntimeStopped {
                    token: TOKEN,
                    code: 143,
                },
            ),
            (gone, Ev::Holding { token: TOKEN }),
            released(60 * S),
            (60 * S, Ev::LeadEnded { lost: false }),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let max_runtime = Ev::MaxRuntime {
        token: TOKEN,
        signal: Signal::SIGTERM,
    };
    let gone = 5 * S + DYING;
    let again = gone + 2 * S;
    let expected = [
        started(Duration::ZERO),
        vec![(5 * S, max_runtime)],
        command_ended(gone, ChildStatus::Signaled(15)),
        vec![
            (
                gone,
                Ev::MaxRuntimeStopped {
                    token: TOKEN,
                    code: 143,
                },
            ),
            released(gone),
            (gone, Ev::LeadEnded { lost: false }),
            (gone, Ev::Recampaigning(Recampaign::MaxRuntime)),
            campaigning(false, again),
            (again + 5 * S, Ev::NotAcquired(NotAcquired::TimeoutInLine)),
            released(again + 5 * S),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
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
    let max_runtime = Ev::MaxRuntime {
        token: TOKEN,
        signal: Signal::SIGTERM,
    };
    let expected = [
        started(Duration::ZERO),
        vec![(5 * S, max_runtime)],
        stepping_down(6 * S, Ended::Expired, Signal::SIGKILL),
        stepped_down(6 * S + DYING),
    ];
    assert_eq!(ran.events, expected.concat());
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
    assert_eq!(
        ran.events,
        handed_over_at_5s_killed_at_9s(
            "the health check failed --health-retries times in a row (--health-cmd)"
        )
    );
}

/// What follows a command that `--max-runtime` killed, once its group is gone at `gone`: its end
/// by SIGKILL, the stop reported, the release and the end of the lead.
fn stopped_by_max_runtime(gone: Duration) -> Events {
    let mut events = command_ended(gone, ChildStatus::Signaled(9));
    events.extend([
        (
            gone,
            Ev::MaxRuntimeStopped {
                token: TOKEN,
                code: 137,
            },
        ),
        released(gone),
        (gone, Ev::LeadEnded { lost: false }),
    ]);
    events
}
