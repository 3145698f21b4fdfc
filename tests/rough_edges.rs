//! What a new operator runs into: `resign`, the release retried after an etcd outage, `status`
//! detail, the exit code of a refused occurrence, log lines, timing hints, `--no-wait` under
//! systemd's notify protocol.

use std::time::{Duration, Instant};

use crate::harness::*;

pub fn resign_moves_leadership_only_from_the_named_token<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // TTL 8 s: a handover within 4 s is the resignation, not an expiry.
    let mut args_a = patient_lease_args(&endpoint, "rs");
    args_a.extend(["--identity", "host-a:1"]);
    let mut a = Instance::start(&args_a, &scratch.job("a", "sleep 30"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut args_b = patient_lease_args(&endpoint, "rs");
    args_b.extend(["--identity", "host-b:2"]);
    let mut b = Instance::start(&args_b, &scratch.job("b", "sleep 30"));
    // A claim per candidate on every store: the leader and the waiter.
    let in_line = 2;
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)
        && etcd.claims("rs") == in_line));

    // A token that is not the leader's: nothing is asked, nothing happens.
    let wrong = (a_start.token() + 1000).to_string();
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rs", "--token", &wrong])
        .run();
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("is not the current leader's") && stderr.contains("host-a:1"),
        "{stderr}"
    );
    // Longer than the leader's retry period (500 ms), when it looks for requests.
    assert!(
        !wait_for(Duration::from_secs(2), || !a.running()
            || scratch.wait_record("start", "b", Duration::ZERO).is_some()),
        "a stale resign moved leadership: {}",
        a.stderr()
    );
    assert_eq!(etcd.claims("rs"), in_line);
    for bad in [
        &["--token", "x"][..],
        &["--timeout", "0s"],
        &["--force", "--timeout", "1s"],
    ] {
        let (code, _, stderr) = Cmd::at(&endpoint)
            .args([&["resign", "--lease", "rs"][..], bad].concat())
            .run();
        assert_eq!(code, 125, "{bad:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{bad:?}: {stderr}");
    }
    assert!(a.running());

    // The leader's own token: it stops its command and hands over; the waiter takes over.
    let token = a_start.token().to_string();
    let resigned_at = Instant::now();
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rs", "--token", &token])
        .run();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("resigned leader host-a:1 (token {token}"))
            && stdout.contains("handed over"),
        "{stdout}"
    );
    // The claim went only after the command: resign returns after both.
    assert!(
        !alive(a_start.pid()),
        "the claim was gone while a's command still ran"
    );
    assert_eq!(a.wait(Duration::from_secs(4)), Some(75), "{}", a.stderr());
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(4))
        .expect("b took over");
    assert!(
        resigned_at.elapsed() < Duration::from_secs(6),
        "handover took {:?}",
        resigned_at.elapsed()
    );
    assert!(b_start.token() > a_start.token());
    assert!(
        a.stderr().contains("resign asked for a handover"),
        "{}",
        a.stderr()
    );

    // Without --token: whoever leads now.
    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["resign", "--lease", "rs"]).run();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("resigned leader host-b:2"), "{stdout}");
    assert_eq!(b.wait(Duration::from_secs(4)), Some(75), "{}", b.stderr());

    // Nobody left.
    assert!(wait_for(Duration::from_secs(5), || etcd.claims("rs") == 0));
    let (code, _, stderr) = Cmd::at(&endpoint).args(["resign", "--lease", "rs"]).run();
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("no leader"), "{stderr}");
    // A handover never overlaps, on every store.
    assert_one_at_a_time(&scratch.history());
}

/// The leader's command ends while etcd is down; etcd comes back (resetting every lease's TTL).
/// The leader has kept retrying its release, so its key goes as soon as etcd answers, not a
/// full TTL later.
#[test]
fn a_release_that_failed_during_an_outage_is_retried_when_etcd_is_back() {
    let mut etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    // TTL 8 s, renew deadline 5 s: the command ends well inside the deadline.
    let mut a = Instance::start(
        &patient_lease_args(&endpoint, "outage"),
        &scratch.job("a", &body),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    etcd.kill();
    std::fs::write(&go, "").unwrap();
    scratch
        .wait_record("end", "a", Duration::from_secs(5))
        .expect("a's command ended");
    // The first release fails (etcd is down); leader-exec is still there, retrying.
    assert!(
        wait_for(Duration::from_secs(5), || a
            .stderr()
            .contains("retrying the release")),
        "{}",
        a.stderr()
    );
    assert!(
        a.running(),
        "gave up on the release at once: {}",
        a.stderr()
    );
    etcd.restart();
    let back = Instant::now();
    // Gone within a few seconds of etcd answering again; without the retry it would stand for
    // the full 8 s TTL that etcd's restart gave it.
    assert!(
        wait_for(Duration::from_secs(4), || etcd
            .keys("/leader-exec/outage/")
            .is_empty()),
        "the key outlived etcd's return by {:?}",
        back.elapsed()
    );
    assert_eq!(a.wait(Duration::from_secs(3)), Some(0), "{}", a.stderr());
    assert!(
        a.stderr()
            .contains("lease released once etcd answered again"),
        "{}",
        a.stderr()
    );
}

/// TERM during the retry ends it at once, with the command's status.
#[test]
fn term_ends_the_release_retry_at_once() {
    let mut etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; exit 3",
        go.display()
    );
    let mut a = Instance::start(
        &patient_lease_args(&endpoint, "outage-term"),
        &scratch.job("a", &body),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    etcd.kill();
    std::fs::write(&go, "").unwrap();
    assert!(
        wait_for(Duration::from_secs(8), || a
            .stderr()
            .contains("retrying the release")),
        "{}",
        a.stderr()
    );
    let asked = Instant::now();
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(2)), Some(3), "{}", a.stderr());
    assert!(asked.elapsed() < Duration::from_secs(2));
    assert!(
        a.stderr().contains("stopped retrying the release"),
        "{}",
        a.stderr()
    );
}

/// Text logs name the instance on every line, print no Rust debug forms, give a candidate that
/// never led no token, and a `--no-wait` loser names who leads.
#[test]
fn text_logs_name_the_instance_and_who_leads() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut args_a = lease_args(&endpoint, "logs");
    args_a.extend(["--identity", "host-a:1", "--occurrence", "report:1"]);
    let mut a = Instance::start(&args_a, &scratch.job("a", &body));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");

    let mut args_b = lease_args(&endpoint, "logs");
    args_b.extend(["--identity", "host-b:2", "--no-wait"]);
    let mut b = Instance::start(&args_b, &scratch.job("b", "true"));
    assert_eq!(b.wait(Duration::from_secs(10)), Some(124), "{}", b.stderr());
    let b_log = b.stderr();
    assert!(!b_log.is_empty());
    for line in b_log.lines() {
        assert!(line.contains(" leader-exec[host-b:2] "), "{line}");
        // Never led: no token, only its place in line.
        assert!(!line.contains(" token="), "{line}");
    }
    let campaigning = b_log
        .lines()
        .find(|l| l.contains(" campaigning"))
        .expect("campaigning line");
    assert!(campaigning.contains("candidate_revision="), "{campaigning}");
    let lost = b_log
        .lines()
        .find(|l| l.contains("another instance leads"))
        .expect("not-acquired line");
    assert!(lost.contains("host-a:1"), "{lost}");
    assert!(
        lost.contains(&format!("leader_token={}", a_start.token())),
        "{lost}"
    );

    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    let a_log = a.stderr();
    for line in a_log.lines() {
        assert!(line.contains(" leader-exec[host-a:1] "), "{line}");
        for debug in ["Some(", "None", "Done", "Started", "Failed", "[", "\""] {
            let rest = line.split_once(" leader-exec[host-a:1] ").unwrap().1;
            assert!(!rest.contains(debug), "debug form {debug:?} in: {line}");
        }
    }
    assert!(
        a_log.contains("occurrence report:1 recorded as done") && a_log.contains("state=done"),
        "{a_log}"
    );
}

/// -q and -qq as documented: -qq prints no log line, but leader-exec's own failure is still one
/// line.
#[test]
fn quiet_levels_do_what_the_help_says() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "quiet"];
    args.extend(FAST);
    let out = Cmd::bare()
        .args(&args)
        .args(["--identity", "h:1", "-qq", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let out = Cmd::bare()
        .args([
            "--endpoints",
            &nobody,
            "--lease",
            "quiet",
            "--connect-timeout",
            "1s",
        ])
        .args(["-qq", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("leader-exec: "), "{stderr}");
}

/// A --hold-at-least longer than a day (`10d` meant as `10m`) is a usage error, one line, before
/// anything is written to the store; with --allow-long-hold it runs and holds, and TERM ends the
/// hold.
#[test]
fn a_hold_longer_than_a_day_is_refused_unless_allowed() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "long-hold");
    args.retain(|a| *a != "-v");
    args.extend(["--identity", "host-h:1", "--hold-at-least", "10days"]);
    let ran = scratch.path("ran");
    let mut refused = Instance::start(&args, &["touch".into(), path_str(&ran)]);
    // Bounded: a hold that is not refused lasts the ten days.
    let code = refused.wait(Duration::from_secs(5));
    let stderr = refused.stderr();
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--hold-at-least 10days is longer than a day")
            && stderr.contains("--allow-long-hold"),
        "{stderr}"
    );
    assert!(!ran.exists());
    assert!(etcd.keys("/leader-exec/").is_empty());
    // A day exactly is no typo.
    let mut day = lease_args(&endpoint, "day-hold");
    day.extend(["--hold-at-least", "1day", "--no-wait"]);
    let mut d = Instance::start(&day, &scratch.job("d", "true"));
    scratch
        .wait_record("end", "d", Duration::from_secs(10))
        .expect("a day's hold ran");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait(Duration::from_secs(5)), Some(0), "{}", d.stderr());

    args.push("--allow-long-hold");
    let mut a = Instance::start(&args, &scratch.job("a", "true"));
    scratch
        .wait_record("end", "a", Duration::from_secs(10))
        .expect("the command ran");
    assert!(a.running(), "{}", a.stderr());
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(0), "{}", a.stderr());
    assert_eq!(a.stderr(), "");
}

/// TERM while the command runs under --hold-at-least stops it and exits with its status: the
/// hold is not entered afterwards (as TERM during the hold, the lease is left to expire).
#[test]
fn term_while_the_command_runs_skips_the_hold() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "term-hold");
    args.extend([
        "--identity",
        "host-t:1",
        "--hold-at-least",
        "10days",
        "--allow-long-hold",
    ]);
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 30"));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("the command started");
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(143), "{}", a.stderr());
    assert!(
        !scratch.history().iter().any(|r| r.kind == "end"),
        "the command was not stopped"
    );
}

/// `--ttl 5s` alone cannot work with the default deadline and grace: the one line says which
/// values would.
#[test]
fn a_short_ttl_alone_gets_values_that_fit() {
    let out = Cmd::bare()
        .args(["--lease", "hint", "--ttl", "5s", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let suggested = "--renew-deadline 3300ms --kill-after 1300ms --retry-period 660ms";
    assert!(stderr.contains(suggested), "{stderr}");
    assert!(stderr.contains("raise --ttl to 15s"), "{stderr}");
    // The suggestion works.
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let mut args = vec!["--endpoints", endpoint.as_str()];
    args.extend(["--lease", "hint", "--ttl", "5s"]);
    args.extend(suggested.split(' '));
    let out = Cmd::bare().args(&args).args(["--", "true"]).output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `status` says since when the leader leads and whether its command runs or it only holds the
/// lease; the record of that lies outside the election's keys.
#[test]
fn status_shows_since_when_and_running_or_holding() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut args = lease_args(&endpoint, "detail");
    args.extend(["--identity", "host-a:1", "--hold-at-least", "1h"]);
    let before = std::time::SystemTime::now();
    let mut a = Instance::start(&args, &scratch.job("a", &body));
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");

    let mut json = serde_json::Value::Null;
    assert!(
        wait_for(Duration::from_secs(5), || {
            json = status_json(&endpoint, "detail");
            json["leader"]["command"] == "running"
        }),
        "{json}"
    );
    let since_text = json["leader"]["since"].as_str().unwrap().to_owned();
    let since = humantime::parse_rfc3339(&since_text).unwrap();
    // Millisecond precision: compare to the millisecond below `before`.
    assert!(since + Duration::from_millis(1) >= before, "{since_text}");
    assert!(since <= std::time::SystemTime::now(), "{since_text}");
    assert_eq!(json["leader"]["token"], start.token());
    assert_eq!(json["leader"]["hold_until"], serde_json::Value::Null);
    let (_, text, _) = Cmd::at(&endpoint)
        .args(["status", "--lease", "detail"])
        .run();
    assert!(
        text.contains(&format!("since:       {since_text} (")),
        "{text}"
    );
    assert!(text.contains("command:     running"), "{text}");
    // Outside the election: `etcdctl elect -l` and the candidates count see one key.
    assert_eq!(etcd.keys("/leader-exec/detail/").len(), 1);
    assert_eq!(
        etcd.keys("/leader-exec/.leaders/detail"),
        ["/leader-exec/.leaders/detail"]
    );
    assert_eq!(json["candidates"], 1);

    std::fs::write(&go, "").unwrap();
    scratch
        .wait_record("end", "a", Duration::from_secs(5))
        .expect("a's command ended");
    assert!(
        wait_for(Duration::from_secs(5), || {
            json = status_json(&endpoint, "detail");
            json["leader"]["command"] == "holding"
        }),
        "{json}"
    );
    assert_eq!(json["leader"]["since"], since_text.as_str());
    let until = humantime::parse_rfc3339(json["leader"]["hold_until"].as_str().unwrap()).unwrap();
    let hour = Duration::from_secs(3600);
    assert!(
        until > before + hour - Duration::from_secs(1)
            && until < before + hour + Duration::from_secs(30)
    );
    let (_, text, _) = Cmd::at(&endpoint)
        .args(["status", "--lease", "detail"])
        .run();
    assert!(
        text.contains("command:     ended; holding the lease until "),
        "{text}"
    );
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(0), "{}", a.stderr());
}

/// Under `Type=notify`, a `--no-wait` loser reports READY=1 and, before it exits 124, waits
/// (bounded) for systemd to confirm it has read it (sd_notify_barrier: BARRIER=1 with a pipe
/// that the manager closes), so that the notification of a process that is already gone is not
/// dropped.
#[test]
fn a_no_wait_loser_is_ready_before_it_exits() {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::net::UnixDatagram;

    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let _a = Instance::start(
        &lease_args(&endpoint, "sd-nowait"),
        &scratch.job("a", "sleep 30"),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");

    let socket_path = scratch.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let mut args = lease_args(&endpoint, "sd-nowait");
    args.push("--no-wait");
    let mut b = Instance::start_command(
        leader_exec()
            .env("NOTIFY_SOCKET", &socket_path)
            .args(&args)
            .args(["--", "true"]),
    );
    // Read datagrams in order, keeping any fd passed with them.
    let receive = || -> (String, Option<OwnedFd>) {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buffer = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buffer)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
        let message = recvmsg::<UnixAddr>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        )
        .expect("a notification");
        let mut fd = None;
        for cmsg in message.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                fd = fds.first().map(|&raw| unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        let n = message.bytes;
        (String::from_utf8_lossy(&buffer[..n]).into_owned(), fd)
    };
    let (first, _) = receive();
    assert!(first.contains("READY=1"), "{first}");
    let (second, fd) = receive();
    assert_eq!(second, "BARRIER=1\n");
    let fd = fd.expect("the barrier carries a pipe");
    // Until the manager closes the pipe, the loser waits.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        b.running(),
        "exited before its READY=1 was confirmed: {}",
        b.stderr()
    );
    let closed = Instant::now();
    drop(fd);
    assert_eq!(b.wait(Duration::from_secs(2)), Some(124), "{}", b.stderr());
    assert!(closed.elapsed() < Duration::from_millis(900));
}

/// The release retry gives up when it said it would: "retrying the release for up to D" is the
/// time between that line and "gave up", within scheduling slack (D was rounded down to whole
/// seconds, and the last backoff carried the retry up to a second past its bound).
#[test]
fn the_release_retry_lasts_as_long_as_it_announces() {
    let mut etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let go = scratch.path("go");
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut args = patient_lease_args(&endpoint, "retry-bound");
    args.extend(["--log-format", "json"]);
    let mut a = Instance::start(&args, &scratch.job("a", &body));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    etcd.kill();
    std::fs::write(&go, "").unwrap();
    // TTL 8 s: the retry ends by 8 s after the command did, plus slack.
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    let stderr = a.stderr();
    // The last one: the first release, before the retry, reports its failure as well.
    let event = |name: &str| {
        stderr
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event: {stderr}"))
    };
    let time = |v: &serde_json::Value| {
        humantime::parse_rfc3339(v["time"].as_str().expect("a time")).expect("RFC 3339")
    };
    let retrying = event("release-retrying");
    let gave_up = event("release-failed");
    let message = retrying["message"].as_str().unwrap();
    let announced = message
        .split_once("for up to ")
        .and_then(|(_, rest)| rest.split([';', '(']).next())
        .map(|d| humantime::parse_duration(d.trim()).expect("a duration"))
        .unwrap_or_else(|| panic!("no bound in: {message}"));
    let took = time(&gave_up).duration_since(time(&retrying)).unwrap();
    assert!(
        announced > Duration::from_secs(3),
        "the first release took most of the TTL: {message}"
    );
    assert!(
        took + Duration::from_millis(100) >= announced
            && took <= announced + Duration::from_millis(300),
        "announced {announced:?}, gave up after {took:?}: {stderr}"
    );
}
