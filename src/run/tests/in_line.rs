//! The Runner while it waits: in line (`--wait-timeout`, `--no-wait`, TERM), campaigning again
//! (`--recampaign`), meeting another `--max-holders`, and behind the `--health-cmd` gate.

use super::*;

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
    let expected = [
        campaigning(true, Duration::ZERO),
        (5 * S, Ev::NotAcquired(NotAcquired::TimeoutInLine)),
        released(5 * S),
    ];
    assert_eq!(ran.events, expected);
    assert_eq!(ran.barriers, [5 * S]);
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
    let leader = NotAcquired::Leader {
        identity: "unknown".into(),
        token: None,
        predecessor: "/leader-exec/test/1".into(),
    };
    let expected = [
        campaigning(true, Duration::ZERO),
        (Duration::ZERO, Ev::NotAcquired(leader)),
        released(Duration::ZERO),
    ];
    assert_eq!(ran.events, expected);
    assert_eq!(ran.barriers, [Duration::ZERO]);
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
    let withdrawn = Ev::Withdrawn {
        signal: Signal::SIGTERM,
        when: Withdrawal::Campaigning,
    };
    let expected = [
        campaigning(true, Duration::ZERO),
        (3 * S, withdrawn),
        released(3 * S),
    ];
    assert_eq!(ran.events, expected);
    assert!(ran.barriers.is_empty());
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
    let again = 2 * S + DYING;
    let expected = [
        started(Duration::ZERO),
        stepping_down(2 * S, Ended::Expired, Signal::SIGKILL),
        stepped_down(again),
        vec![
            (again, Ev::Recampaigning(Recampaign::Loss)),
            campaigning(false, again),
            (again + 5 * S, Ev::NotAcquired(NotAcquired::TimeoutInLine)),
            released(again + 5 * S),
        ],
    ];
    assert_eq!(ran.events, expected.concat());
    assert_eq!(ran.barriers, [again + 5 * S]);
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
        let expected = [campaigning(true, Duration::ZERO), released(Duration::ZERO)];
        assert_eq!(ran.events, expected, "{wait:?}");
        assert!(ran.barriers.is_empty(), "{wait:?}");
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
    let expected = [campaigning(true, Duration::ZERO), released(300 * MS)];
    assert_eq!(ran.events, expected);
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
    let expected = [
        vec![(Duration::ZERO, Ev::WaitingForHealth)],
        started(3 * S),
        command_ended(4 * S, ChildStatus::Exited(0)),
        vec![released(4 * S), (4 * S, Ev::LeadEnded { lost: false })],
    ];
    assert_eq!(ran.events, expected.concat());
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
    // Out of line from 4 s; the gate is looked at again after --retry-period.
    let expected = [
        campaigning(true, Duration::ZERO),
        (4 * S, Ev::LeftLine { failures: Some(3) }),
        released(4 * S),
        (6 * S, Ev::WaitingForHealth),
        campaigning(false, 10 * S),
        (15 * S, Ev::NotAcquired(NotAcquired::TimeoutInLine)),
        released(15 * S),
    ];
    assert_eq!(ran.events, expected);
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
    let expected = [
        (Duration::ZERO, Ev::WaitingForHealth),
        (S, Ev::NotAcquired(NotAcquired::HealthFailed)),
    ];
    assert_eq!(ran.events, expected);
    // READY=1 never went: nothing to wait for.
    assert!(ran.barriers.is_empty());
}
