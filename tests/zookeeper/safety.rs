//! ZooKeeper only: the session timeout renegotiated on a reconnect, reads through a follower, and
//! the ACLs leader-exec gives its nodes when it has credentials.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use zookeeper_client::{Acls, CreateMode, Error, Permission};

use crate::harness::*;

/// The session ids whose connection negotiated `timeout_ms`, as `cons` lists them
/// (`…sid=0x…,…,to=4000,…`).
fn sessions_with_timeout(zk: &ZooKeeper, timeout_ms: u64) -> Vec<String> {
    let cons = zk.four_letter_word("cons").unwrap_or_default();
    cons.lines()
        .filter(|l| l.contains(&format!(",to={timeout_ms},")))
        .filter_map(|l| l.split("sid=").nth(1))
        .map(|s| s.split(',').next().unwrap_or_default().to_owned())
        .collect()
}

/// How many requests the server has received on `session`'s current connection (`cons`'s
/// `recved=`); None while it has none.
fn requests_received(zk: &ZooKeeper, session: &str) -> Option<u64> {
    let cons = zk.four_letter_word("cons")?;
    let line = cons
        .lines()
        .find(|l| l.contains(&format!("sid={session},")))?;
    line.split("recved=")
        .nth(1)?
        .split(',')
        .next()?
        .parse()
        .ok()
}

#[test]
fn a_reconnect_that_negotiates_a_shorter_session_timeout_kills_the_command_before_anyone_else_runs()
{
    let mut zk = ZooKeeper::start_with("maxSessionTimeout=20000\n");
    let scratch = Scratch::new();
    let proxy = Proxy::start(zk.addr());
    let via_proxy = zk.endpoint_via(&proxy);
    let endpoint = zk.endpoint();
    // 14 s + 3 s + a 1 s margin fit in the 20 s the server grants now, not in 4 s. The long
    // deadline outlasts the restart on a loaded machine.
    let a_args = [
        "-v",
        "--endpoints",
        &via_proxy,
        "--lease",
        "shrunk",
        "--identity",
        "host-a",
        "--ttl",
        "20s",
        "--renew-deadline",
        "14s",
        "--retry-period",
        "1s",
        "--kill-after",
        "3s",
    ];
    // a's command ignores TERM: only SIGKILL (at once, or after --kill-after) ends it.
    let mut a = Instance::start(
        &a_args,
        &scratch.job("a", "trap '' TERM; while :; do sleep 0.2; done"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(30))
        .expect("a leads");
    let lease_id = status_json(&endpoint, "shrunk")["leader"]["lease_id"]
        .as_str()
        .expect("a's session id")
        .to_owned();
    let session = format!("0x{}", lease_id.trim_start_matches("0x"));
    assert!(
        sessions_with_timeout(&zk, 20000).contains(&session),
        "a's session {session} did not negotiate 20 s: {:?}",
        zk.four_letter_word("cons")
    );

    // A rolling configuration change: the same server, the same data, a smaller maximum. a's
    // client reconnects through the proxy and the server grants its session only 4 s from now on.
    zk.restart_with("maxSessionTimeout=4000\n");
    let restarted = Instant::now();
    assert!(
        wait_for(Duration::from_secs(20), || !a.running()
            || sessions_with_timeout(&zk, 4000).contains(&session)),
        "a neither reconnected nor exited: {}",
        a.stderr()
    );
    // Should a keep leading on the new connection, let it renew there (a renewal is a `sync` and
    // an `exists`): then its deadline counts from a request the server took under 4 s.
    let received = requests_received(&zk, &session);
    if let Some(before) = received {
        wait_for(Duration::from_secs(10), || {
            !a.running() || requests_received(&zk, &session).is_some_and(|n| n >= before + 4)
        });
    }

    // b waits on the server directly, with flags that fit 4 s; then a is cut off.
    let b_args = [
        "-v",
        "--endpoints",
        &endpoint,
        "--lease",
        "shrunk",
        "--identity",
        "host-b",
        "--ttl",
        "4s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "500ms",
        "--kill-after",
        "1s",
    ];
    let mut b = Instance::start(&b_args, &scratch.job("b", "sleep 1"));
    proxy.cut();
    let cut = Instant::now();
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("b never led: {}", b.stderr()));

    // b's job looked for a's processes when it started (`overlap` otherwise): none was alive.
    assert_one_at_a_time(&scratch.history());
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert!(
        !group_has_live_member(a_start.pid()),
        "a's command still runs: {}",
        a.stderr()
    );
    assert!(b_start.token() > a_start.token());
    assert!(
        a.stderr().contains("renegotiated the session timeout")
            || a.stderr().contains("on the current connection"),
        "{}",
        a.stderr()
    );
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    eprintln!(
        "{:?} from the server serving again to the cut; b led {:?} after the cut",
        cut - restarted,
        cut.elapsed()
    );
}

#[test]
fn check_and_status_through_a_follower_answer_the_current_leader_right_after_a_change() {
    let ensemble = ZooKeeperEnsemble::start();
    let leader = ensemble.leader();
    let follower = (0..ensemble.size())
        .find(|&i| i != leader && ensemble.mode(i).as_deref() == Some("follower"))
        .expect("a follower");
    // The candidates write through the ensemble's leader; the operator reads through a follower.
    let on_leader = format!("zk://{}", ensemble.addr(leader));
    let on_follower = format!("zk://{}", ensemble.addr(follower));
    let scratch = Scratch::new();
    let check = |token: i64| {
        Cmd::bare()
            .args(["check", "--endpoints", &on_follower, "--lease", "synced"])
            .args(["--token", &token.to_string()])
            .output()
            .status
            .code()
    };
    let mut previous: Option<(Instance, Record)> = None;
    for name in ["a", "b", "c"] {
        let mut args = lease_args(&on_leader, "synced");
        args.extend(["--identity", name]);
        let mut next = Instance::start(&args, &scratch.job(name, "sleep 60"));
        if let Some((mut old, old_start)) = previous.take() {
            assert!(wait_for(Duration::from_secs(10), || ensemble
                .children("/leader-exec/synced")
                .len()
                == 2));
            // The change: the old leader hands over (its node is deleted on the ensemble's
            // leader before it exits); the first reads after it go to the follower.
            old.signal(Signal::SIGTERM);
            assert!(old.wait(Duration::from_secs(10)).is_some());
            assert_eq!(check(old_start.token()), Some(1), "stale token accepted");
            let status = status_json(&on_follower, "synced");
            assert_eq!(status["leader"]["identity"], name, "{status}");
            assert!(status["leader"]["token"].as_i64() > Some(old_start.token()));
        }
        let start = scratch
            .wait_record("start", name, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("{name} never led: {}", next.stderr()));
        assert_eq!(check(start.token()), Some(0));
        assert!(next.running());
        previous = Some((next, start));
    }
    assert_one_at_a_time(&scratch.history());
}

/// `path`'s ACL as an unauthenticated client reads it: `(scheme, id, permission)`.
fn acl_of(zk: &ZooKeeper, path: &str) -> Vec<(String, String, Permission)> {
    zk.session(false, async |client| {
        let (acls, _) = client
            .get_acl(path)
            .await
            .unwrap_or_else(|e| panic!("get_acl {path}: {e}"));
        acls.iter()
            .map(|a| (a.scheme().to_owned(), a.id().to_owned(), a.permission()))
            .collect()
    })
}

#[test]
fn with_credentials_an_unauthenticated_client_can_neither_delete_the_leader_nor_cut_in_line() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let mut args = lease_args(&endpoint, "guarded");
    args.extend(["--identity", "host-a", "--user", "ops:s3cret"]);
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 60"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .expect("a leads");
    let nodes = zk.children("/leader-exec/guarded");
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let leader_node = format!("/leader-exec/guarded/{}", nodes[0]);
    let state = "/leader-exec/.leaders/guarded";
    assert!(wait_for(Duration::from_secs(10), || zk
        .data(state)
        .is_some()));

    // A client without credentials tries to delete the leader's node and its state, and to
    // plant a persistent candidate that sorts ahead of every sequence.
    let planted = "/leader-exec/guarded/_c_00000000-0000-4000-8000-000000000000-latch-000000000";
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let tried = zk.session(false, async |client| {
        [
            client.delete(&leader_node, None).await,
            client.delete(state, None).await,
            client.set_data(state, b"forged", None).await.map(|_| ()),
            client.create(planted, b"intruder", &open).await.map(|_| ()),
            client
                .create("/leader-exec/.leaders/other", b"", &open)
                .await
                .map(|_| ()),
        ]
    });
    for (i, outcome) in tried.iter().enumerate() {
        assert_eq!(outcome, &Err(Error::NoAuth), "attempt {i}");
    }
    assert_eq!(zk.children("/leader-exec/guarded"), nodes);

    // The leader's command keeps running: a deleted node would have killed it within a
    // renewal or two.
    assert!(
        !wait_for(RENEW_DEADLINE * 2, || !a.running()),
        "{}",
        a.stderr()
    );
    assert!(group_has_live_member(a_start.pid()));
    // Every node on the way: all rights for ops's digest identity, read for everyone.
    for path in [
        "/leader-exec",
        "/leader-exec/guarded",
        &leader_node,
        "/leader-exec/.leaders",
        state,
    ] {
        let acl = acl_of(&zk, path);
        assert_eq!(acl.len(), 2, "{path}: {acl:?}");
        assert!(
            acl.iter()
                .any(|(s, id, p)| s == "digest" && id.starts_with("ops:") && *p == Permission::ALL),
            "{path}: {acl:?}"
        );
        assert!(
            acl.contains(&("world".into(), "anyone".into(), Permission::READ)),
            "{path}: {acl:?}"
        );
    }

    // Everyone can read who leads.
    let status = status_json(&endpoint, "guarded");
    assert_eq!(status["leader"]["identity"], "host-a", "{status}");

    // --no-wait with the credentials: another instance leads, 124, nothing left behind.
    let ran = scratch.path("ran");
    let no_wait = |credentials: &[&str]| {
        Cmd::bare()
            .args(["--endpoints", &endpoint, "--lease", "guarded", "--no-wait"])
            .args(credentials)
            .args(["--", "touch"])
            .arg(&ran)
            .output()
    };
    let out = no_wait(&["--user", "ops:s3cret"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    // Without them: refused (125, one line, no credential in it), nothing left behind.
    let out = no_wait(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!ran.exists());
    assert_eq!(zk.children("/leader-exec/guarded"), nodes);

    a.signal(Signal::SIGTERM);
    assert!(a.wait(Duration::from_secs(10)).is_some());
    assert!(!stderr.contains("s3cret") && !a.stderr().contains("s3cret"));
}

#[test]
fn with_credentials_open_nodes_on_the_elections_path_are_warned_about() {
    let zk = ZooKeeper::start();
    // Made without credentials: open to everyone.
    zk.create("/open/warned", b"", true);
    assert_eq!(
        acl_of(&zk, "/open/warned"),
        vec![("world".into(), "anyone".into(), Permission::ALL)]
    );
    let out = Cmd::bare()
        .args(["--endpoints", &zk.endpoint(), "--prefix", "/open/"])
        .args(["--lease", "warned", "--user", "ops:s3cret", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("/open, /open/warned") && stderr.contains("more than read"),
        "{stderr}"
    );
    // Nodes it created itself are not open: a second run with a fresh prefix says nothing.
    let out = Cmd::bare()
        .args(["--endpoints", &zk.endpoint(), "--prefix", "/closed/"])
        .args(["--lease", "quiet", "--user", "ops:s3cret", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("more than read"), "{stderr}");
}

#[test]
fn curator_with_the_same_credentials_shares_a_guarded_line() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let slow = Duration::from_secs(30);
    let mut args = lease_args(&endpoint, "curated");
    args.extend(["--identity", "le-1", "--user", "ops:s3cret"]);
    let release = scratch.path("release");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done",
        release.display()
    );
    let mut le = Instance::start(&args, &scratch.job("a", &body));
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .expect("leader-exec leads");

    // A Curator LeaderLatch authenticated as the same user joins the line behind it.
    let path = "/leader-exec/curated";
    let mut curator =
        CuratorLatch::start_with_auth(&zk.connect_string(), path, "curator-1", Some("ops:s3cret"));
    assert!(curator.wait_for("started", slow), "{:?}", curator.lines());
    assert!(wait_for(Duration::from_secs(15), || Store::claims(
        &zk, "curated"
    ) == 2));
    let (participants, leader) = curator.ask_participants();
    assert_eq!(participants, vec!["le-1", "curator-1"]);
    assert_eq!(leader, "le-1");
    assert_eq!(curator.count("leader"), 0, "{:?}", curator.lines());
    // Its node is as closed as leader-exec's.
    let curators = zk
        .children(path)
        .into_iter()
        .map(|n| format!("{path}/{n}"))
        .find(|n| zk.data(n).is_some_and(|(data, _, _)| data == b"curator-1"))
        .expect("Curator's node");
    let acl = acl_of(&zk, &curators);
    assert!(
        acl.contains(&("world".into(), "anyone".into(), Permission::READ)) && acl.len() == 2,
        "{acl:?}"
    );

    // leader-exec's command ends: Curator leads next.
    std::fs::write(&release, "").unwrap();
    assert_eq!(le.wait(Duration::from_secs(10)), Some(0), "{}", le.stderr());
    assert!(!group_has_live_member(start.pid()));
    assert!(
        curator.wait_for("leader", Duration::from_secs(10)),
        "{:?}",
        curator.lines()
    );
    curator.close();
}

#[test]
fn a_reconnect_during_the_grace_that_shrinks_the_session_timeout_sigkills_at_once() {
    let mut zk = ZooKeeper::start_with("maxSessionTimeout=12000\n");
    let scratch = Scratch::new();
    let proxy = Proxy::start(zk.addr());
    let via_proxy = zk.endpoint_via(&proxy);
    let endpoint = zk.endpoint();
    // A short deadline and a long grace: 3 s + 7 s + 600 ms fit in 12 s. The grace is safe only
    // while the session outlasts it.
    let a_args = [
        "-v",
        "--endpoints",
        &via_proxy,
        "--lease",
        "grace",
        "--identity",
        "host-a",
        "--ttl",
        "12s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
        "--kill-after",
        "7s",
    ];
    let mut a = Instance::start(
        &a_args,
        &scratch.job("a", "trap '' TERM; while :; do sleep 0.2; done"),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(30))
        .expect("a leads");
    let b_args = [
        "--endpoints",
        &endpoint,
        "--lease",
        "grace",
        "--identity",
        "host-b",
        "--ttl",
        "4s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "500ms",
        "--kill-after",
        "1s",
    ];
    let mut b = Instance::start(&b_args, &scratch.job("b", "sleep 1"));
    assert!(wait_for(Duration::from_secs(15), || Store::claims(
        &zk, "grace"
    ) == 2));

    // a hears nothing (a black hole) while the server restarts with a smaller maximum; its
    // deadline passes and it sends TERM, which the command ignores: the grace runs.
    proxy.freeze();
    zk.restart_with("maxSessionTimeout=4000\n");
    assert!(
        wait_for(Duration::from_secs(20), || a
            .stderr()
            .contains("leadership lost; stopping the command")),
        "{}",
        a.stderr()
    );
    assert!(group_has_live_member(a_start.pid()), "{}", a.stderr());
    // a reconnects: the server now expires its session 4 s after this, before the grace ends.
    proxy.heal();
    let healed = Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || !group_has_live_member(
            a_start.pid()
        )),
        "a's command outlived the reconnect: {}",
        a.stderr()
    );
    let dead_after = healed.elapsed();
    assert!(
        dead_after < Duration::from_secs(4),
        "a's command died {dead_after:?} after the reconnect, not before its session could expire: {}",
        a.stderr()
    );
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("b never led: {}", b.stderr()));
    assert_one_at_a_time(&scratch.history());
    assert!(b_start.token() > a_start.token());
    assert_eq!(a.wait(Duration::from_secs(15)), Some(75), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    eprintln!("a's command dead {dead_after:?} after the reconnect");
}

/// ZooKeeper warns about `--user NAME:PASS` on the command line as etcd does, without showing
/// it; a password from the environment draws no such warning.
#[test]
fn zookeeper_credential_warnings() {
    let zk = ZooKeeper::start();
    let endpoint = zk.endpoint();
    let out = Cmd::bare()
        .env_remove("LEADER_EXEC_PASSWORD")
        .args(["--endpoints", &endpoint, "--user", "jobs:s3cret-pw"])
        .args(["--lease", "warned", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("(ps, /proc)"))
        .collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].contains("--user NAME:PASS") && warned[0].contains("--password-file"),
        "{stderr}"
    );

    let out = Cmd::bare()
        .env("LEADER_EXEC_PASSWORD", "s3cret-pw")
        .args(["--endpoints", &endpoint, "--user", "jobs"])
        .args(["--lease", "warned", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("(ps, /proc)"), "{stderr}");
}
