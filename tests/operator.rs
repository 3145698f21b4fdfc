//! The operator surface: status, watch, check, --recampaign, systemd notifications, JSON logs.

use std::os::unix::net::UnixDatagram;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::*;

pub fn status_shows_the_leader_or_exits_3<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();

    let (code, stdout, _) = Cmd::at(&endpoint).args(["status", "--lease", "stat"]).run();
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.contains("leader:      none"), "{stdout}");
    let (code, stdout, _) = Cmd::at(&endpoint)
        .args(["status", "--lease", "stat", "--json"])
        .run();
    assert_eq!(code, 3);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["leader"], Value::Null);
    assert_eq!(json["candidates"], 0);

    let mut args = lease_args(&endpoint, "stat");
    args.extend(["--identity", "host-a:1"]);
    let _leader = Instance::start(&args, &scratch.job("a", "sleep 30"));
    let token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let waiter = Instance::start(&lease_args(&endpoint, "stat"), &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&waiter)));
    // Every store counts every candidate: the leader and the one waiting.
    let candidates = 2;

    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["status", "--lease", "stat"]).run();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("leader:      host-a:1"), "{stdout}");
    assert!(
        stdout.contains(&format!("token:       {token}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("candidates:  {candidates}")),
        "{stdout}"
    );

    let (code, stdout, _) = Cmd::at(&endpoint)
        .args(["status", "--lease", "stat", "--json"])
        .run();
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["lease"], "stat");
    assert_eq!(json["candidates"], candidates);
    let leader = &json["leader"];
    assert_eq!(leader["identity"], "host-a:1");
    // The leader's state, written fenced beside the election, beside the command's start.
    assert!(
        wait_for(Duration::from_secs(5), || {
            status_json(&endpoint, "stat")["leader"]["since"].is_string()
        }),
        "no since: {json}"
    );
    let json = status_json(&endpoint, "stat");
    let leader = &json["leader"];
    assert_eq!(leader["command"], "running", "{json}");
    assert_eq!(leader["token"], token);
    match (S::NAME, leader["lease_id"].as_str()) {
        // The leader's ephemeral node, owned by its session; ZooKeeper cannot tell another
        // session's remaining time.
        ("zookeeper", Some(_)) => {
            let key = leader["key"].as_str().unwrap();
            let node = key.strip_prefix("/leader-exec/stat/_c_").unwrap();
            assert!(node.contains("-latch-"), "{json}");
            assert_eq!(leader["ttl_remaining_seconds"], Value::Null, "{json}");
        }
        (_, Some(lease_id)) => assert_eq!(leader["key"], format!("/leader-exec/stat/{lease_id}")),
        (_, None) => assert_eq!(leader["key"], "leader_exec_leases/stat"),
    }
    if S::NAME != "zookeeper" {
        assert_eq!(leader["ttl_granted_seconds"], 3);
        let left = leader["ttl_remaining_seconds"].as_u64().unwrap();
        assert!((1..=3).contains(&left), "{json}");
    }

    // Unreachable etcd: 125, bounded.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let out = Cmd::bare()
        .args([
            "status",
            "--lease",
            "stat",
            "--connect-timeout",
            "1s",
            "--endpoints",
            &nobody,
        ])
        .output();
    assert_eq!(out.status.code(), Some(125));
}

pub fn check_tells_current_from_stale_tokens<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // The job checks its own token, then waits; a second leader checks both tokens.
    let check_self = format!(
        r#"{exe} check --lease chk --endpoints {endpoint} --token "$LEADER_TOKEN"; echo "self a $? $(date +%s%N)" >> "$h"; sleep 30"#,
        exe = env!("CARGO_BIN_EXE_leader-exec"),
    );
    let mut a = Instance::start(
        &lease_args(&endpoint, "chk"),
        &scratch.job("a", &check_self),
    );
    let self_check = scratch
        .wait_record("self", "a", Duration::from_secs(10))
        .expect("a checked its token");
    assert_eq!(
        self_check.fields[0], "0",
        "the leader's own token must be current"
    );
    let old = scratch
        .wait_record("start", "a", Duration::ZERO)
        .unwrap()
        .token();

    let (code, _, _) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", &old.to_string()])
        .run();
    assert_eq!(code, 0);
    let (code, _, stderr) = Cmd::at(&endpoint)
        .args([
            "check",
            "--lease",
            "chk",
            "--token",
            &(old + 1000).to_string(),
        ])
        .run();
    assert_eq!(code, 1);
    assert!(stderr.contains("stale"), "{stderr}");

    // After a handover the old token is stale and the new one current.
    let mut b = Instance::start(&lease_args(&endpoint, "chk"), &scratch.job("b", "sleep 30"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(143));
    let new = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started")
        .token();
    assert!(new > old);
    let (code, _, _) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", &old.to_string()])
        .run();
    assert_eq!(code, 1, "the old leader's token must be stale");
    let (code, _, _) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", &new.to_string()])
        .run();
    assert_eq!(code, 0);
    b.signal(Signal::SIGTERM);
    assert_eq!(b.wait(Duration::from_secs(5)), Some(143));
    // No leader at all: stale.
    let (code, _, _) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", &new.to_string()])
        .run();
    assert_eq!(code, 1);

    let (code, _, stderr) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", ""])
        .run();
    assert_eq!(code, 125, "{stderr}");
    assert_eq!(stderr.lines().count(), 1);
    let (code, _, _) = Cmd::at(&endpoint)
        .args(["check", "--lease", "chk", "--token", "abc"])
        .run();
    assert_eq!(code, 125);
}

fn next_json(lines: &mpsc::Receiver<String>) -> Value {
    let line = lines
        .recv_timeout(Duration::from_secs(15))
        .expect("watch printed nothing");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

pub fn watch_reports_each_change_and_survives_a_store_restart<S: Store>() {
    let mut etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let (watch, lines) = watch(&endpoint, "w", true);
    assert_eq!(next_json(&lines)["leader"], Value::Null);

    // The leader must ride out the restart: a renew deadline longer than the store takes to
    // come back, even on a loaded machine (the watch is the subject here, not the deadline).
    let args = [
        "-v",
        "--endpoints",
        &endpoint,
        "--lease",
        "w",
        "--ttl",
        "20s",
        "--renew-deadline",
        "15s",
        "--retry-period",
        "500ms",
        "--kill-after",
        "1s",
        "--identity",
        "first",
    ];
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 30"));
    let first = next_json(&lines);
    assert_eq!(first["lease"], "w");
    assert_eq!(first["leader"]["identity"], "first");
    let first_token = first["leader"]["token"].as_i64().unwrap();

    etcd.restart();

    let mut args = lease_args(&endpoint, "w");
    args.extend(["--identity", "second"]);
    let b = Instance::start(&args, &scratch.job("b", "sleep 30"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));
    a.signal(Signal::SIGTERM);
    // Its command ends at once; the release after it may find a's own session still
    // reconnecting after the restart, and is retried for up to a TTL (`run/release.rs`).
    assert_eq!(a.wait(Duration::from_secs(25)), Some(143), "{}", a.stderr());
    // On PostgreSQL the release frees the row before b takes it: watch may report that moment
    // (no leader) first. Nothing else may come between the two leaders.
    let mut second = next_json(&lines);
    if second["leader"].is_null() {
        second = next_json(&lines);
    }
    assert_eq!(second["leader"]["identity"], "second", "{second}");
    assert!(second["leader"]["token"].as_i64().unwrap() > first_token);

    stop_watch(watch);
}

#[test]
fn recampaign_restarts_the_command_after_a_cut_is_healed() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let endpoint = proxy.endpoint();
    let mut args = lease_args(&endpoint, "again");
    args.push("--recampaign");
    let job = r#"trap 'echo "term a $LEADER_TOKEN $(date +%s%N)" >> "$h"; exit 0' TERM
                 echo "ready a $LEADER_TOKEN $(date +%s%N)" >> "$h"
                 while :; do sleep 0.05; done"#;
    let mut a = Instance::start(&args, &scratch.job("a", job));
    let first = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    proxy.cut();
    let term = scratch
        .wait_record("term", "a", Duration::from_secs(10))
        .expect("the command was not stopped");
    assert!(a.running(), "--recampaign must not exit: {}", a.stderr());
    proxy.heal();
    // Re-elected once its old lease has expired; a fresh command with a larger token.
    assert!(
        wait_for(Duration::from_secs(20), || scratch
            .history()
            .iter()
            .filter(|r| r.kind == "ready")
            .count()
            == 2),
        "not re-elected: {}",
        a.stderr()
    );
    let second = scratch
        .history()
        .into_iter()
        .filter(|r| r.kind == "start")
        .nth(1)
        .unwrap();
    assert!(second.token() > first.token());
    assert!(second.time() > term.time());
    assert_ne!(second.pid(), first.pid());
    assert!(scratch.history().iter().all(|r| r.kind != "overlap"));
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(0), "{}", a.stderr());
}

#[test]
fn systemd_notifications_arrive_on_the_notify_socket() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let socket_path = scratch.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let status = leader_exec()
        .env("NOTIFY_SOCKET", &socket_path)
        .args(lease_args(&etcd.endpoint(), "sd"))
        .args(["--", "true"])
        .status()
        .unwrap();
    assert!(status.success());
    let mut messages = Vec::new();
    socket.set_nonblocking(true).unwrap();
    let mut buffer = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buffer) {
        messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
    }
    let all = messages.join("");
    assert!(messages[0].contains("READY=1"), "{messages:?}");
    assert!(
        messages[0].contains("STATUS=campaigning for lease sd"),
        "{messages:?}"
    );
    assert!(
        all.contains("STATUS=leader of lease sd (token "),
        "{messages:?}"
    );
    assert_eq!(all.matches("READY=1").count(), 1, "{messages:?}");
}

#[test]
fn json_logs_carry_lease_identity_token_and_event() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "logs");
    args.extend(["--log-format", "json", "--identity", "host-j:9"]);
    let out = Cmd::bare()
        .args(&args)
        .args(["--", "sh", "-c", "exit 4"])
        .output();
    assert_eq!(out.status.code(), Some(4));
    let events: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    for event in &events {
        assert_eq!(event["lease"], "logs");
        assert_eq!(event["identity"], "host-j:9");
        assert!(event["time"].is_string() && event["level"].is_string());
        assert!(event["event"].is_string(), "{event}");
    }
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for expected in ["campaigning", "elected", "started", "exited", "released"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let elected = events.iter().find(|e| e["event"] == "elected").unwrap();
    assert!(elected["token"].as_i64().unwrap() > 0);
    let exited = events.iter().find(|e| e["event"] == "exited").unwrap();
    assert_eq!(exited["status"], 4);
}
