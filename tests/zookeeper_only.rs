//! ZooKeeper only: the harness's standalone server (start, restart, freeze, the tree read from
//! outside) and the Curator LeaderLatch participant the interoperability tests run beside
//! leader-exec.

use std::time::{Duration, Instant};

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
