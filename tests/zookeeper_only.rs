//! ZooKeeper only: the harness's standalone server (start, restart, freeze, the tree read from
//! outside) and the Curator LeaderLatch participant the interoperability tests run beside
//! leader-exec.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

#[test]
fn zookeeper_harness_starts_restarts_and_reads() {
    let started = Instant::now();
    let mut zk = ZooKeeper::start();
    let start_time = started.elapsed();
    assert!(zk.srvr().unwrap().contains("Mode: standalone"));
    assert_eq!(zk.four_letter_word("ruok").as_deref(), Some("imok"));
    assert_eq!(zk.endpoint(), format!("zk://127.0.0.1:{}", zk.port));
    assert_eq!(zk.addr().port(), zk.port);

    // Nothing yet.
    assert!(zk.children("/leader-exec").is_empty());
    assert_eq!(zk.data("/leader-exec"), None);
    assert_eq!(Store::claims(&zk, "job"), 0);
    assert!(Store::held(&zk).is_empty());

    // A persistent node with its parents; what it reads back.
    let record = "/leader-exec/.occurrences/job/1700000000";
    let czxid = zk.create(record, b"host-a", true);
    assert!(czxid > 0);
    assert_eq!(zk.data(record), Some((b"host-a".to_vec(), czxid, 0)));
    assert_eq!(zk.children("/leader-exec"), vec![".occurrences"]);
    // Not an election: neither held nor claimed.
    assert!(Store::held(&zk).is_empty());

    // Candidates in LeaderLatch's layout; czxids increase with creation.
    let first = "/leader-exec/job/_c_0f1e2d3c-latch-0000000000";
    let second = "/leader-exec/job/_c_4b5a6978-latch-0000000001";
    let first_czxid = zk.create(first, b"a", true);
    let second_czxid = zk.create(second, b"b", true);
    assert!(czxid < first_czxid && first_czxid < second_czxid);
    assert_eq!(Store::claims(&zk, "job"), 2);
    assert_eq!(Store::held(&zk), vec![first.to_owned(), second.to_owned()]);
    assert_eq!(latch_sequence("_c_0f1e2d3c-latch-0000000001"), Some(1));
    assert_eq!(latch_sequence("_c_a-latch-b-latch-0000000042"), Some(42));

    // An ephemeral node from an abandoned session: it has an owner, and goes when the server
    // expires that session.
    let ephemeral = "/leader-exec/other/_c_deadbeef-latch-0000000000";
    let abandoned = Instant::now();
    zk.create(ephemeral, b"gone", false);
    let (_, _, owner) = zk.data(ephemeral).expect("the ephemeral node");
    assert_ne!(owner, 0);
    assert_eq!(Store::claims(&zk, "other"), 1);
    assert!(
        wait_for(Duration::from_secs(15), || zk.data(ephemeral).is_none()),
        "the abandoned session's node stays"
    );
    let expiry = abandoned.elapsed();
    assert_eq!(Store::claims(&zk, "other"), 0);

    // A restart keeps the port and the data.
    let port = zk.port;
    let pid = zk.pid();
    let restarted = Instant::now();
    zk.restart();
    let restart_time = restarted.elapsed();
    assert_eq!(zk.port, port);
    assert_ne!(zk.pid(), pid);
    assert!(!alive(pid));
    assert!(zk.srvr().unwrap().contains("Mode: standalone"));
    assert_eq!(zk.data(record), Some((b"host-a".to_vec(), czxid, 0)));
    assert_eq!(zk.data(first), Some((b"a".to_vec(), first_czxid, 0)));
    assert_eq!(Store::claims(&zk, "job"), 2);

    assert!(zk.delete(first));
    assert!(!zk.delete(first));
    assert_eq!(zk.data(first), None);
    assert_eq!(Store::held(&zk), vec![second.to_owned()]);
    assert!(zk.delete(second));
    assert!(Store::held(&zk).is_empty());
    assert_eq!(Store::claims(&zk, "job"), 0);

    // Frozen: connections are accepted by the kernel but nothing answers.
    zk.freeze();
    assert!(wait_for(Duration::from_secs(2), || state_of(zk.pid()) == Some('T')));
    assert_eq!(zk.srvr(), None);
    zk.thaw();
    assert!(wait_for(Duration::from_secs(10), || zk
        .srvr()
        .is_some_and(|s| s.contains("Mode: standalone"))));

    // Killed: nothing listens.
    let pid = zk.pid();
    zk.kill();
    assert!(!alive(pid));
    assert_eq!(zk.srvr(), None);

    eprintln!(
        "ZooKeeper: start {start_time:?}, restart {restart_time:?}, abandoned session's ephemeral node gone after {expiry:?}"
    );
}

#[test]
fn zookeeper_harness_start_with_sets_more_configuration() {
    let zk = ZooKeeper::start_with("maxSessionTimeout=4000\n");
    let conf = zk.four_letter_word("conf");
    // `conf` is not in the whitelist: ZooKeeper says so instead of answering.
    assert!(conf.is_some_and(|c| c.contains("not executed because it is not in the whitelist")));
    assert!(
        zk.four_letter_word("mntr")
            .unwrap()
            .contains("zk_server_state\tstandalone")
    );
}

#[test]
fn zookeeper_harness_curator_latches_take_turns() {
    let zk = ZooKeeper::start();
    let path = "/leader-exec/interop";
    let mut latches = [
        CuratorLatch::start(&zk.connect_string(), path, "a"),
        CuratorLatch::start(&zk.endpoint(), path, "b"),
    ];
    let slow = Duration::from_secs(30);
    for latch in &latches {
        assert!(
            latch.wait_for("started", slow),
            "{:?}\n{}",
            latch.lines(),
            latch.stderr()
        );
    }
    assert!(
        wait_for(slow, || latches.iter().any(|l| l.count("leader") > 0)),
        "nobody leads: {:?} {:?}",
        latches[0].lines(),
        latches[1].lines()
    );
    // Both stand in line before we look again.
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "interop"
    ) == 2));
    std::thread::sleep(Duration::from_secs(1));
    let leaders: Vec<usize> = (0..2).filter(|&i| latches[i].count("leader") > 0).collect();
    assert_eq!(
        leaders.len(),
        1,
        "{:?} {:?}",
        latches[0].lines(),
        latches[1].lines()
    );
    let leader = leaders[0];
    let other = 1 - leader;
    let ids = ["a", "b"];

    // The layout: `_c_<id>-latch-<10 digits>`, data the participant's id, ephemeral; the lowest
    // sequence leads.
    let mut nodes = zk.children(path);
    nodes.sort_by_key(|n| latch_sequence(n));
    assert_eq!(nodes.len(), 2);
    for node in &nodes {
        let (prefix, digits) = node.rsplit_once("-latch-").unwrap();
        assert!(prefix.starts_with("_c_"), "{node}");
        assert_eq!(digits.len(), 10, "{node}");
        let (_, _, owner) = zk.data(&format!("{path}/{node}")).unwrap();
        assert_ne!(owner, 0, "{node} is ephemeral");
    }
    let (data, _, _) = zk.data(&format!("{path}/{}", nodes[0])).unwrap();
    assert_eq!(String::from_utf8(data).unwrap(), ids[leader]);
    assert_eq!(Store::held(&zk).len(), 2);

    let (participants, leader_id) = latches[other].ask_participants();
    assert_eq!(participants, vec![ids[leader], ids[other]]);
    assert_eq!(leader_id, ids[leader]);

    // The leader closes: the other one leads, the first one's node is gone.
    let closed = Instant::now();
    latches[leader].close();
    assert!(
        latches[other].wait_for("leader", Duration::from_secs(10)),
        "{:?}\n{}",
        latches[other].lines(),
        latches[other].stderr()
    );
    let handover = closed.elapsed();
    assert_eq!(latches[other].count("leader"), 1);
    let (participants, leader_id) = latches[other].ask_participants();
    assert_eq!(participants, vec![ids[other]]);
    assert_eq!(leader_id, ids[other]);
    assert_eq!(Store::claims(&zk, "interop"), 1);

    latches[other].close();
    assert!(Store::held(&zk).is_empty());
    assert_eq!(Store::claims(&zk, "interop"), 0);
    eprintln!("Curator handover after close (JVM exit included): {handover:?}");
}

#[test]
fn deleting_the_leaders_node_kills_its_command_at_once() {
    let zk = ZooKeeper::start();
    crate::faults::a_deleted_claim_kills_its_command_at_once(&zk, || {
        let nodes = zk.children("/leader-exec/deleted");
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        assert!(zk.delete(&format!("/leader-exec/deleted/{}", nodes[0])));
    });
}

/// A leader whose only server was down for several seconds reconnects within about a second
/// of the server's return, and keeps its command: the client's pause before each new round of
/// attempts is at most 1 s (vendor/zookeeper-client/PATCHES.md, change 2). Uncapped, the pauses
/// doubled (… 1.6 s, 3.2 s, 6.4 s): after 7 s down, the next attempt came about 13 s after the
/// loss, past the 12 s deadline, and the leader stopped its command with the server long back.
#[test]
fn a_leader_reconnects_within_a_second_of_a_server_back_after_a_long_outage() {
    // Alone: the outage is to be the server's, not the load of other tests.
    let _alone = alone();
    let mut zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let deadline = Duration::from_secs(12);
    let args = [
        "-v",
        "--endpoints",
        &endpoint,
        "--lease",
        "outage",
        "--ttl",
        "16s",
        "--renew-deadline",
        "12s",
        "--retry-period",
        "500ms",
        "--kill-after",
        "1s",
    ];
    let mut a = Instance::start(&args, &scratch.job("a", crate::faults::STOPPABLE));
    let child = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .pid();
    assert_eq!(zk.sessions_connected(), 1);

    let lost = Instant::now();
    zk.restart_after(Duration::from_secs(7));
    let back = Instant::now();
    assert!(
        back - lost < deadline - Duration::from_secs(3),
        "ZooKeeper took {:?} to come back",
        back - lost
    );
    // The session comes back at the client's next attempt: within the 1 s cap, its jitter and
    // slack for a loaded machine.
    assert!(
        wait_for(Duration::from_millis(2500), || zk.sessions_connected() == 1),
        "no session reconnected within 2.5 s of the server's return ({:?} after the loss): {}",
        back - lost,
        a.stderr()
    );
    let reconnected = back.elapsed();

    // Past the deadline counted from the loss: the command was never stopped.
    std::thread::sleep(
        (lost + deadline + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
    );
    assert!(a.running(), "leader-exec exited: {}", a.stderr());
    assert!(alive(child), "the command was stopped: {}", a.stderr());
    assert!(
        scratch.wait_record("term", "a", Duration::ZERO).is_none(),
        "the command got TERM (reconnected {reconnected:?} after the server's return): {}",
        a.stderr()
    );

    crate::faults::term_ends_the_one_run(&mut a, &scratch);
}

#[test]
fn a_session_that_expires_while_cut_off_is_replaced_and_recampaign_opens_a_new_one() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let proxy = Proxy::start(zk.addr());
    let via_proxy = zk.endpoint_via(&proxy);
    let endpoint = zk.endpoint();
    let mut args = lease_args(&via_proxy, "expiry");
    args.extend(["--recampaign", "--identity", "host-a"]);
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 30"));
    let a1 = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let first_session = status_json(&endpoint, "expiry")["leader"]["lease_id"].clone();
    assert!(first_session.is_string(), "{first_session}");
    let mut b_args = lease_args(&endpoint, "expiry");
    b_args.extend(["--identity", "host-b"]);
    let mut b = Instance::start(&b_args, &scratch.job("b", "sleep 2"));
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "expiry"
    ) == 2));

    // Cut off for longer than the session timeout: the server expires a's session (3 s after
    // the last request it received) and b leads; a stopped its command before that.
    proxy.cut();
    let cut = Instant::now();
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(15))
        .expect("b took over");
    assert!(
        cut.elapsed() >= RENEW_DEADLINE,
        "b started {:?} after the cut, before a's deadline",
        cut.elapsed()
    );
    assert!(!group_alive(a1.pid()), "a's command still runs beside b's");
    assert!(b_start.token() > a1.token());
    assert!(a.running(), "--recampaign: a campaigns again");
    proxy.heal();

    // a comes back with a new session, behind b, and leads again after b's command ends.
    let a2 = scratch
        .wait_record_nth("start", "a", 2, Duration::from_secs(20))
        .expect("a led again");
    assert!(a2.token() > b_start.token());
    let second_session = status_json(&endpoint, "expiry")["leader"]["lease_id"].clone();
    assert!(second_session.is_string(), "{second_session}");
    assert_ne!(
        first_session, second_session,
        "the expired session came back"
    );
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    // a's command runs twice (the same job), so the history is checked here rather than by
    // `assert_one_at_a_time`: no job started beside another, tokens grew with every start.
    let history = scratch.history();
    assert!(history.iter().all(|r| r.kind != "overlap"), "{history:#?}");
    let tokens: Vec<i64> = history
        .iter()
        .filter(|r| r.kind == "start")
        .map(|r| r.token())
        .collect();
    assert_eq!(tokens.len(), 3, "{history:#?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    a.signal(Signal::SIGTERM);
    assert!(a.wait(Duration::from_secs(10)).is_some());
}

#[test]
fn a_negotiated_timeout_too_short_for_the_flags_is_125_and_leaves_nothing() {
    // The harness's server clamps sessions to at most 30 s.
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let out = leader_exec()
        .args([
            "--endpoints",
            &endpoint,
            "--lease",
            "clamped",
            "--ttl",
            "60s",
            "--renew-deadline",
            "40s",
            "--retry-period",
            "5s",
            "--kill-after",
            "10s",
            "--",
            "touch",
        ])
        .arg(scratch.path("ran"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("negotiated a session timeout of 30s for --ttl 1m")
            && stderr.contains("need 53s"),
        "{stderr}"
    );
    assert!(!scratch.path("ran").exists());
    assert!(Store::held(&zk).is_empty(), "{:?}", Store::held(&zk));

    // A server that raises the timeout above --ttl: safe, said, and the job runs.
    let zk = ZooKeeper::start_with("minSessionTimeout=4000\n");
    let endpoint = zk.endpoint();
    let mut args = lease_args(&endpoint, "raised");
    args.retain(|a| *a != "-v");
    let out = leader_exec()
        .args(&args)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("negotiated a session timeout of 4s for --ttl 3s"),
        "{stderr}"
    );
}

/// A server that clamps the session timeout below `--ttl` (maxSessionTimeout 5 s for `--ttl 8s`,
/// still the 4.4 s the flags need) and a leader-exec stopped with its supervisor (SIGSTOP) for
/// 3 s: past its renew deadline (2 s after its last renewal, sent at most a retry period before
/// the stop), not past the session. Resumed, it notices the deadline 1–1.5 s late. Counted with
/// `--ttl`, a grace of 2 s would fit (it would end by the last renewal + 8 s − margin); the
/// session may end 5 s after that renewal, before such a grace: SIGKILL at once, no TERM.
#[test]
fn a_deadline_noticed_late_counts_with_a_session_timeout_clamped_below_the_ttl() {
    let zk = ZooKeeper::start_with("maxSessionTimeout=5000\n");
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let termed = scratch.path("termed");
    let deaf = format!(
        "trap 'touch {}' TERM\nwhile :; do sleep 0.05; done",
        termed.display()
    );
    let args = [
        "-v",
        "--endpoints",
        &endpoint,
        "--lease",
        "clamped",
        "--ttl",
        "8s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "400ms",
        "--kill-after",
        "2s",
    ];
    let mut a = Instance::start(&args, &scratch.job("a", &deaf));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let supervisor = supervisor_of(a.pid()).expect("a's supervisor");
    for pid in [a.pid(), supervisor] {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    }
    std::thread::sleep(Duration::from_secs(3));
    let resumed = now_ns();
    for pid in [supervisor, a.pid()] {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || !alive(a_start.pid())),
        "a's command survived"
    );
    let dead = now_ns();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    let stderr = a.stderr();
    assert!(
        stderr.contains("negotiated a session timeout of 5s for --ttl 8s"),
        "{stderr}"
    );
    assert!(
        !termed.exists(),
        "a's command got TERM: the grace was counted with --ttl, not the session's 5 s\n{stderr}"
    );
    assert!(
        dead - resumed < 1_000_000_000,
        "a's command died {} ms after a resumed",
        (dead - resumed) / 1_000_000
    );
    assert!(stderr.contains("too late for --kill-after"), "{stderr}");
}

#[test]
fn czxid_tokens_grow_across_a_deleted_and_recreated_parent() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let run = |name: &str| -> (i64, String) {
        let keys = scratch.path(&format!("key-{name}"));
        let body = format!("echo \"$LEADER_KEY\" > '{}'", keys.display());
        let mut instance = Instance::start(
            &lease_args(&endpoint, "reparent"),
            &scratch.job(name, &body),
        );
        assert_eq!(
            instance.wait(Duration::from_secs(20)),
            Some(0),
            "{}",
            instance.stderr()
        );
        let token = scratch
            .wait_record("start", name, Duration::ZERO)
            .unwrap()
            .token();
        let key = std::fs::read_to_string(keys).unwrap().trim().to_owned();
        (token, key)
    };
    let (first_token, first_key) = run("a");
    // The election node is empty once a released; deleting it restarts the sequence.
    assert!(zk.children("/leader-exec/reparent").is_empty());
    assert!(zk.delete("/leader-exec/reparent"));
    let (second_token, second_key) = run("b");
    // The same sequence suffix twice, the czxid token still strictly greater.
    assert_eq!(
        latch_sequence(&first_key),
        latch_sequence(&second_key),
        "{first_key} {second_key}"
    );
    assert!(
        second_token > first_token,
        "{second_token} <= {first_token}"
    );
}

#[test]
fn curator_and_leader_exec_share_one_line_both_ways() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let path = "/leader-exec/interop";
    let slow = Duration::from_secs(30);

    // Curator leads first: leader-exec waits behind it and runs only once it closes.
    let mut curator = CuratorLatch::start(&zk.connect_string(), path, "curator-1");
    assert!(curator.wait_for("leader", slow), "{:?}", curator.lines());
    let mut args = lease_args(&endpoint, "interop");
    args.extend(["--identity", "le-1"]);
    let release = scratch.path("release");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done",
        release.display()
    );
    let mut le = Instance::start(&args, &scratch.job("a", &body));
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "interop"
    ) == 2));
    let status = status_json(&endpoint, "interop");
    assert_eq!(status["leader"]["identity"], "curator-1", "{status}");
    std::thread::sleep(RETRY_PERIOD * 3);
    assert!(
        scratch.wait_record("start", "a", Duration::ZERO).is_none(),
        "leader-exec ran beside Curator's leader"
    );
    let (participants, leader) = curator.ask_participants();
    assert_eq!(participants, vec!["curator-1", "le-1"]);
    assert_eq!(leader, "curator-1");
    curator.close();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("leader-exec leads once Curator's latch closed");

    // leader-exec leads: a new Curator latch sees it as the leader and waits behind it.
    let mut curator = CuratorLatch::start(&zk.connect_string(), path, "curator-2");
    assert!(curator.wait_for("started", slow), "{:?}", curator.lines());
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "interop"
    ) == 2));
    let (participants, leader) = curator.ask_participants();
    assert_eq!(participants, vec!["le-1", "curator-2"]);
    assert_eq!(leader, "le-1");
    assert_eq!(curator.count("leader"), 0, "{:?}", curator.lines());
    std::fs::write(&release, "").unwrap();
    assert_eq!(le.wait(Duration::from_secs(10)), Some(0), "{}", le.stderr());
    assert!(
        !group_alive(start.pid()),
        "leader-exec's command outlived it"
    );
    assert!(
        curator.wait_for("leader", Duration::from_secs(10)),
        "{:?}",
        curator.lines()
    );
    curator.close();
}

/// A Curator waiter that set its watch on a leader-exec candidate's node while that candidate
/// still waited (Curator watches the node ahead with a `getData` watch and acts only on its
/// deletion) still takes over after it: becoming leader writes the leader mark, never that node.
/// And the leader-exec leader's token, as its command and `status` see it, is above Curator's
/// leader's czxid.
#[test]
fn a_curator_waiter_behind_a_leader_exec_waiter_leads_after_it() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let path = "/leader-exec/behind";
    let slow = Duration::from_secs(30);
    let mut first = CuratorLatch::start(&zk.connect_string(), path, "curator-1");
    assert!(first.wait_for("leader", slow), "{:?}", first.lines());
    let curator_token = status_json(&endpoint, "behind")["leader"]["token"]
        .as_i64()
        .expect("Curator's leader has a token");
    let mut args = lease_args(&endpoint, "behind");
    args.extend(["--identity", "le-1"]);
    let release = scratch.path("release");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done",
        release.display()
    );
    let mut le = Instance::start(&args, &scratch.job("a", &body));
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "behind"
    ) == 2));
    let mut second = CuratorLatch::start(&zk.connect_string(), path, "curator-2");
    assert!(second.wait_for("started", slow), "{:?}", second.lines());
    assert!(wait_for(Duration::from_secs(10), || Store::claims(
        &zk, "behind"
    ) == 3));
    let (participants, _) = second.ask_participants();
    assert_eq!(participants, vec!["curator-1", "le-1", "curator-2"]);

    first.close();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("leader-exec leads once the first latch closed");
    assert!(start.token() > curator_token);
    assert_eq!(
        status_json(&endpoint, "behind")["leader"]["token"],
        start.token()
    );
    std::fs::write(&release, "").unwrap();
    assert_eq!(le.wait(Duration::from_secs(10)), Some(0), "{}", le.stderr());
    assert!(
        second.wait_for("leader", Duration::from_secs(10)),
        "the Curator waiter behind leader-exec never led: {:?}",
        second.lines()
    );
    second.close();
}

#[test]
fn occurrence_records_are_fenced_nodes_pruned_on_read_after_their_retention() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let id = "statements/2026-11-29";
    let run = |name: &str| {
        let mut args = lease_args(&endpoint, "pruned");
        args.extend(["--occurrence", id, "--occurrence-retention", "2s"]);
        let mut instance = Instance::start(&args, &scratch.job(name, "true"));
        assert_eq!(
            instance.wait(Duration::from_secs(20)),
            Some(0),
            "{}",
            instance.stderr()
        );
    };
    run("a");
    // One node per ID ('/' encoded), its data the expiry line then the record.
    let records = "/leader-exec/.occurrences/pruned";
    assert_eq!(zk.children(records), vec!["statements%2F2026-11-29"]);
    let (data, _, owner) = zk
        .data(&format!("{records}/statements%2F2026-11-29"))
        .expect("the record");
    assert_eq!(owner, 0, "records outlive the session");
    let text = String::from_utf8(data).unwrap();
    let (expiry, record) = text.split_once('\n').unwrap();
    assert!(expiry.starts_with("leader-exec-expires-ms="), "{text}");
    let record: serde_json::Value = serde_json::from_str(record).unwrap();
    assert_eq!(record["state"], "done");
    let status = status_json(&endpoint, "pruned");
    assert_eq!(status["occurrences"][0]["id"], id, "{status}");

    // Within the retention the occurrence does not run again.
    run("b");
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());
    // After it, the record reads as absent: status lists nothing and the occurrence runs again.
    std::thread::sleep(Duration::from_millis(2500));
    let status = status_json(&endpoint, "pruned");
    assert_eq!(status["occurrences"], serde_json::json!([]), "{status}");
    run("c");
    let c = scratch
        .wait_record("start", "c", Duration::ZERO)
        .expect("the occurrence ran again after its record expired");
    let a = scratch.wait_record("start", "a", Duration::ZERO).unwrap();
    assert!(c.token() > a.token());
}

/// The patient timing's renew deadline and kill-after (`PATIENT`: ttl 8 s, renew-deadline 5 s,
/// retry-period 500 ms, kill-after 1 s).
const PATIENT_RENEW_DEADLINE: Duration = Duration::from_secs(5);
const PATIENT_KILL_AFTER: Duration = Duration::from_secs(1);

#[test]
fn an_ensemble_losing_its_leader_keeps_one_command_at_a_time() {
    let began = Instant::now();
    let mut zk = ZooKeeperEnsemble::start();
    let ensemble_start = began.elapsed();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "ensemble";
    let election_path = format!("/leader-exec/{lease}");
    let release_a = scratch.path("release-a");
    let a_body = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done",
        release_a.display()
    );
    let mut a = Instance::start(
        &patient_lease_args(&endpoint, lease),
        &scratch.job("a", &a_body),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a did not start: {}", a.stderr()));
    let mut b = Instance::start(
        &patient_lease_args(&endpoint, lease),
        &scratch.job("b", "while :; do sleep 0.1; done"),
    );
    assert!(
        wait_for(Duration::from_secs(10), || zk
            .children(&election_path)
            .len()
            == 2),
        "b does not stand in line: {:?}\n{}",
        zk.children(&election_path),
        b.stderr()
    );

    // The ZooKeeper leader dies: the other two elect a new one, well within a's renew deadline,
    // and a rides it out.
    let first_leader = zk.leader();
    let killed = Instant::now();
    zk.kill(first_leader);
    assert!(
        wait_for(Duration::from_secs(10), || zk
            .current_leader()
            .is_some_and(|l| l != first_leader)
            && zk.members_ready()),
        "no new ZooKeeper leader within 10 s:\n{}",
        zk.log()
    );
    let election = killed.elapsed();
    let new_leader = zk.leader();
    assert_ne!(new_leader, first_leader);
    assert!(
        election < PATIENT_RENEW_DEADLINE,
        "the ensemble took {election:?} to elect a leader"
    );
    let watch_until = PATIENT_RENEW_DEADLINE + Duration::from_secs(2);
    let disturbed = wait_for(watch_until.saturating_sub(killed.elapsed()), || {
        !group_alive(a_start.pid())
            || !a.running()
            || scratch.wait_record("start", "b", Duration::ZERO).is_some()
    });
    assert!(
        !disturbed,
        "a stepped down or b started {:?} after the ZooKeeper leader died (new leader after \
         {election:?}): {:#?}\n--- a:\n{}\n--- b:\n{}",
        killed.elapsed(),
        scratch.history(),
        a.stderr(),
        b.stderr()
    );
    let a_renewals_failed = a
        .stderr()
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("renewal"))
        .count();

    // a's command ends: b takes over, with a greater token.
    std::fs::write(&release_a, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("b did not take over: {}", b.stderr()));
    assert!(b_start.token() > a_start.token());
    assert_one_at_a_time(&scratch.history());

    // A second member dies: no quorum. b's renewals fail, it steps down (its group dead, exit 75)
    // after its renew deadline and kill-after; c, waiting behind it, does not start while there
    // is no quorum.
    let mut c = Instance::start(
        &patient_lease_args(&endpoint, lease),
        &scratch.job("c", "sleep 0.5"),
    );
    assert!(
        wait_for(Duration::from_secs(10), || zk
            .children(&election_path)
            .len()
            == 2),
        "c does not stand in line: {:?}\n{}",
        zk.children(&election_path),
        c.stderr()
    );
    let quorum_lost = Instant::now();
    zk.kill(new_leader);
    let step_down_bound = PATIENT_RENEW_DEADLINE + PATIENT_KILL_AFTER + Duration::from_secs(3);
    assert!(
        wait_for(step_down_bound, || !group_alive(b_start.pid())),
        "b's command outlived {step_down_bound:?} without a quorum:\n{}",
        b.stderr()
    );
    let step_down = quorum_lost.elapsed();
    assert!(
        step_down >= PATIENT_RENEW_DEADLINE - Duration::from_millis(500),
        "b stepped down {step_down:?} after the quorum was lost, before its deadline"
    );
    // Still no quorum a moment after b gave up: c waits. (b itself keeps trying to release its
    // node for a while, then exits 75.)
    std::thread::sleep(Duration::from_secs(1));
    let survivor = (0..zk.size())
        .find(|&i| i != first_leader && i != new_leader)
        .unwrap();
    assert_eq!(zk.mode(survivor), None, "the last member serves alone");
    assert!(
        scratch.wait_record("start", "c", Duration::ZERO).is_none(),
        "c started without a quorum: {:#?}",
        scratch.history()
    );
    assert!(c.running(), "{}", c.stderr());

    // One member back: a quorum again. The member that led last comes back: it has every
    // transaction the survivor has, so the new leader syncs it at once. (Measured with Debian's
    // ZooKeeper 3.8.0: bringing back the member killed first, which missed the transactions of
    // the second epoch, sometimes fails its first sync — the leader logs "NEWLEADER ACK from
    // sid: 3 is from a different epoch" — and the quorum forms only after initLimit, 6–22 s
    // instead of about 1 s.) b's session expires a session timeout later and c leads,
    // with a token greater than every earlier one.
    let quorum_back_ns = now_ns();
    let restarting = Instant::now();
    zk.restart(new_leader);
    let restart = restarting.elapsed();
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("c did not take over: {}", c.stderr()));
    let handover = restarting.elapsed();
    assert!(c_start.time() > quorum_back_ns);
    assert!(c_start.token() > b_start.token() && c_start.token() > a_start.token());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(75), "{}", b.stderr());
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
    assert_one_at_a_time(&scratch.history());

    eprintln!(
        "ZooKeeper ensemble: start {ensemble_start:?}; leader {first_leader} killed, member \
         {new_leader} leads after {election:?} (a logged {a_renewals_failed} failed renewals, kept \
         running); second member killed: b's command dead after \
         {step_down:?}; member {new_leader} restarted in {restart:?}, c led {handover:?} after \
         the restart began; test {:?}",
        began.elapsed()
    );
}

#[test]
fn a_chroot_that_does_not_exist_is_125_naming_it_for_status_as_for_a_run() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = format!("{}/typo", zk.endpoint());
    let one_line_125 = |args: &[&str]| {
        let out = leader_exec().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("the chroot /typo of") && stderr.contains("does not exist"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("create '/typo'"), "{args:?}: {stderr}");
    };
    let run = scratch.path("ran");
    let run = run.to_str().unwrap();
    one_line_125(&[
        "--endpoints",
        &endpoint,
        "--lease",
        "job",
        "--",
        "touch",
        run,
    ]);
    assert!(!scratch.path("ran").exists());
    // A monitor reading a typo'd chroot is told so, not "no leader".
    for command in [
        &["status", "--lease", "job"][..],
        &["status", "--all"],
        &["check", "--lease", "job", "--token", "1"],
        &["watch", "--lease", "job"],
        &["resign", "--lease", "job"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--endpoints", &endpoint]);
        one_line_125(&args);
    }
    // Below a chroot that exists, an election nobody stands in is still "no leader".
    let out = leader_exec()
        .args(["status", "--lease", "job", "--endpoints", &zk.endpoint()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// `watch` prints one line per change of leader, with the token the leader's command is given: a
/// leader-exec leader seen before its leader mark (its create done, the answer and so its look and
/// its mark held back) is not shown with its node's czxid first. A Curator leader, which never
/// marks, is still shown once the grace is over, with its czxid, which `check` refuses.
#[test]
fn watch_shows_each_leader_once_with_its_commands_token_and_a_curator_leader_too() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let proxy = Proxy::start(zk.addr());
    let via_proxy = zk.endpoint_via(&proxy);
    let endpoint = zk.endpoint();
    let (_watch, lines) = crate::holders_ops::watch(&endpoint, "marked", true);
    let next = |what: &str| -> serde_json::Value {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("watch printed no line for {what}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    assert_eq!(next("the start")["leader"], serde_json::Value::Null);

    proxy.freeze_after_request_containing(b"le-1");
    let mut args = lease_args(&via_proxy, "marked");
    args.extend(["--identity", "le-1"]);
    let mut le = Instance::start(&args, &scratch.job("a", "sleep 30"));
    assert!(
        wait_for(Duration::from_secs(10), || proxy.tripped()),
        "le-1's candidacy never reached the store: {}",
        le.stderr()
    );
    assert!(wait_for(Duration::from_secs(5), || Store::claims(
        &zk, "marked"
    ) == 1));
    // le-1's node is first in line and not marked yet: long enough for a watch to see it so.
    std::thread::sleep(Duration::from_millis(300));
    proxy.heal();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("le-1 leads once its answers come");
    let shown = next("le-1");
    assert_eq!(shown["leader"]["identity"], "le-1", "{shown}");
    assert_eq!(shown["leader"]["token"], start.token(), "{shown}");
    // One change, one line.
    if let Ok(line) = lines.recv_timeout(Duration::from_secs(2)) {
        panic!("a second line for one change of leader: {line} after {shown}");
    }

    le.signal(Signal::SIGTERM);
    assert_eq!(
        le.wait(Duration::from_secs(5)),
        Some(143),
        "{}",
        le.stderr()
    );
    assert_eq!(next("le-1's release")["leader"], serde_json::Value::Null);

    let mut curator = CuratorLatch::start(&zk.connect_string(), "/leader-exec/marked", "curator-1");
    assert!(
        curator.wait_for("leader", Duration::from_secs(30)),
        "{:?}",
        curator.lines()
    );
    let led = Instant::now();
    let shown = next("Curator's leader");
    // The grace (1 s) and slack for a loaded machine.
    assert!(
        led.elapsed() < Duration::from_secs(3),
        "{:?}",
        led.elapsed()
    );
    assert_eq!(shown["leader"]["identity"], "curator-1", "{shown}");
    let czxid = status_json(&endpoint, "marked")["leader"]["token"].clone();
    assert_eq!(shown["leader"]["token"], czxid, "{shown}");
    let check = leader_exec()
        .args(["check", "--lease", "marked", "--endpoints", &endpoint])
        .args(["--token", &czxid.to_string()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    curator.close();
}
