//! Curator's LeaderLatch beside leader-exec on the same election node: the harness's latch
//! participant itself, then one line shared both ways (either leads, the other waits its turn).

use std::time::{Duration, Instant};

use crate::harness::*;

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
