//! Hostile input and hostile data: absurd flag values never crash leader-exec and are refused
//! before anything is written to etcd; keys and values that any client with access to the prefix
//! can write (not UTF-8, terminal escapes) never hang a waiter or forge output; TLS uses the
//! platform's trust store and fails at once with its cause.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// etcdctl with arguments that may be any bytes (keys that are not UTF-8).
fn ctl_bytes(etcd: &Etcd, args: &[&[u8]]) -> Output {
    let out = Command::new("etcdctl")
        .env_remove("ETCDCTL_ENDPOINTS")
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .output()
        .expect("etcdctl is installed");
    assert!(
        out.status.success(),
        "etcdctl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A new lease of `ttl` seconds; returns its id in hex.
fn grant(etcd: &Etcd, ttl: u32) -> String {
    let out = etcd.ctl(&["lease", "grant", &ttl.to_string()]);
    assert!(out.status.success());
    // "lease 694d8f2c1a0b3e07 granted with TTL(60s)"
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned()
}

/// Every duration flag gets its boundary values; none makes leader-exec panic, each ends as
/// documented (0: it ran; 125: refused with one line naming the flag), and nothing refused
/// leaves a key behind.
#[test]
fn every_duration_flag_at_its_boundaries() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    const RAN: Option<i32> = Some(0);
    const REFUSED: Option<i32> = Some(125);
    const EITHER: Option<i32> = None;
    let values = [
        "0",
        "1ns",
        "9000000000s",
        "9000000001s",
        "584000000000years",
        "18446744073709551615s",
        "-5s",
        "-1ns",
        "",
    ];
    // What each value does, in the order of `values`.
    let flags: [(&str, [Option<i32>; 9]); 8] = [
        (
            "--ttl",
            [
                REFUSED, REFUSED, RAN, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
        ("--renew-deadline", [REFUSED; 9]),
        ("--retry-period", [REFUSED; 9]),
        (
            "--kill-after",
            [
                RAN, RAN, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
        (
            "--wait-timeout",
            [
                RAN, RAN, RAN, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
        // 9000000000s holds the lease for 285 years: checked separately below.
        (
            "--hold-at-least",
            [
                RAN, RAN, EITHER, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
        (
            "--occurrence-retention",
            [
                REFUSED, REFUSED, RAN, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
        // 1ns cannot cover a round trip: "did not answer within --connect-timeout", or it ran.
        (
            "--connect-timeout",
            [
                REFUSED, EITHER, RAN, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED,
            ],
        ),
    ];
    let timing = [
        ("--ttl", "3s"),
        ("--renew-deadline", "1500ms"),
        ("--retry-period", "300ms"),
        ("--kill-after", "1s"),
    ];
    let mut case = 0;
    for (flag, expected) in flags {
        for (value, expected) in values.iter().zip(expected) {
            case += 1;
            if flag == "--hold-at-least" && *value == "9000000000s" {
                continue;
            }
            let lease = format!("bound-{case}");
            let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", lease.as_str()];
            for (name, default) in timing {
                if name != flag {
                    args.extend([name, default]);
                }
            }
            if flag == "--occurrence-retention" {
                args.extend(["--occurrence", lease.as_str()]);
            }
            args.extend([flag, value, "--", "true"]);
            let out = Cmd::bare().args(&args).output();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            let what = format!("{flag} {value:?}: exit {code:?}, stderr: {stderr}");
            assert!(!stderr.contains("panicked"), "{what}");
            assert!(matches!(code, Some(0) | Some(125)), "{what}");
            if let Some(expected) = expected {
                assert_eq!(code, Some(expected), "{what}");
            }
            if code == Some(125) {
                assert_eq!(stderr.lines().count(), 1, "{what}");
                if expected == REFUSED {
                    assert!(stderr.contains(flag), "{what}");
                }
                let left = etcd.keys(&format!("/leader-exec/{lease}/"));
                assert!(left.is_empty(), "{what}: keys left {left:?}");
            } else {
                assert!(stderr.is_empty(), "{what}");
            }
        }
    }

    // The longest hold: the command runs, leader-exec holds the lease, and TERM ends the hold
    // at once with the command's status.
    let scratch = Scratch::new();
    let marker = scratch.path("held");
    let touch = format!("touch '{}'", marker.display());
    let mut args = lease_args(&endpoint, "bound-hold");
    args.extend(["--hold-at-least", "9000000000s", "--allow-long-hold"]);
    let mut held = Instance::start(&args, &["sh".into(), "-c".into(), touch]);
    assert!(wait_for(Duration::from_secs(10), || marker.exists()));
    // Once the command is done and the hold has begun (a TERM before that would go to the
    // command instead).
    assert!(
        wait_for(Duration::from_secs(10), || held
            .stderr()
            .contains("holding the lease")),
        "{}",
        held.stderr()
    );
    assert!(held.running(), "{}", held.stderr());
    held.signal(Signal::SIGTERM);
    assert_eq!(
        held.wait(Duration::from_secs(5)),
        Some(0),
        "{}",
        held.stderr()
    );
}

/// Values that used to slip through or crash: each is refused with one line naming the flag and
/// its limit, before etcd is contacted.
#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let with = |extra: &[&str]| {
        let mut args = vec!["--endpoints", endpoint.as_str()];
        args.extend_from_slice(extra);
        Cmd::bare().args(&args).output()
    };
    for signal in [
        "STOP", "sigstop", "19", "CHLD", "CONT", "TSTP", "TTIN", "TTOU", "URG", "WINCH",
    ] {
        let out = with(&["--lease", "x", "-s", signal, "--", "true"]);
        assert_refused(&out, "--kill-signal");
        assert_refused(&out, "cannot end a process");
    }
    assert_refused(
        &with(&["--lease", "x", "-s", "0", "--", "true"]),
        "--kill-signal",
    );

    for prefix in [
        "",
        "/",
        "leader-exec/",
        "/leader-exec",
        "/leader-exec/x/",
        "/a//",
    ] {
        let out = with(&["--prefix", prefix, "--lease", "y", "--", "true"]);
        assert_refused(&out, "--prefix");
        assert_refused(&out, "one path segment");
    }
    // The nested prefix of the report cannot block another election any more.
    assert_eq!(
        with(&["--lease", "x", "--no-wait", "--", "true"])
            .status
            .code(),
        Some(0)
    );

    // Below the kernel's 128 KiB limit for one argument, far above the identity limit.
    let identity = "i".repeat(100 * 1024);
    assert_refused(
        &with(&["--lease", "x", "--identity", &identity, "--", "true"]),
        "--identity is 102400 bytes long; at most 1024",
    );
    let occurrence = "o".repeat(2000);
    assert_refused(
        &with(&["--lease", "x", "--occurrence", &occurrence, "--", "true"]),
        "--occurrence is 2000 bytes long; at most 1024",
    );
    let name = "n".repeat(300);
    assert_refused(&with(&["--lease", &name, "--", "true"]), "at most 255");

    // Negative durations are named as such, not taken for flags.
    let out = with(&["--lease", "x", "--ttl", "-5s", "--", "true"]);
    assert_refused(&out, "--ttl");
    assert_refused(&out, "negative");
    // A missing required argument is named.
    assert_refused(&with(&["check", "--lease", "x"]), "--token");

    // A password in an endpoint is refused and never shown.
    let out = Cmd::bare()
        .args(["--endpoints", "http://root:hunter2-secret@127.0.0.1:2379"])
        .args(["--lease", "x", "--", "true"])
        .output();
    assert_refused(&out, "--endpoints");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
    let out = Cmd::bare()
        .env(
            "ETCDCTL_ENDPOINTS",
            "https://root:hunter2-secret@127.0.0.1:2379",
        )
        .args(["status", "--lease", "x"])
        .output();
    assert_refused(&out, "--endpoints");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));

    // Plain http next to https is refused, whichever comes first.
    let mixed = format!("https://127.0.0.1:1,{endpoint}");
    assert_refused(
        &with(&["--endpoints", &mixed, "--lease", "x", "--", "true"]),
        "mixes https",
    );

    assert_eq!(etcd.keys(""), Vec::<String>::new());
    assert!(etcd.leases().is_empty());
}

/// With `--log-format json`, the last line is one JSON object too, whether clap, validation or
/// etcd failed.
#[test]
fn the_fatal_line_follows_the_log_format() {
    let parse = |out: &Output| -> serde_json::Value {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        serde_json::from_str(stderr.trim()).unwrap_or_else(|e| panic!("{e}: {stderr}"))
    };
    let out = Cmd::bare()
        .args([
            "--log-format",
            "json",
            "--lease",
            "x",
            "--ttl",
            "-5s",
            "--",
            "true",
        ])
        .output();
    let line = parse(&out);
    assert_eq!(line["level"], "ERROR");
    assert!(
        line["message"].as_str().unwrap().contains("--ttl"),
        "{line}"
    );
    assert_eq!(line["exit_code"], 125);

    let out = Cmd::bare()
        .args([
            "--log-format=json",
            "--lease",
            "x",
            "--prefix",
            "/a/b/",
            "--",
            "true",
        ])
        .output();
    assert!(
        parse(&out)["message"]
            .as_str()
            .unwrap()
            .contains("--prefix")
    );

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let out = Cmd::bare()
        .env("LEADER_EXEC_LOG_FORMAT", "json")
        .args(["--endpoints", &nobody, "--connect-timeout", "300ms"])
        .args(["--lease", "x", "--", "true"])
        .output();
    assert!(
        parse(&out)["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
}

/// `--wait-timeout 0` tries once, like `--no-wait`; a timeout shorter than the first look still
/// gets that look.
#[test]
fn wait_timeout_zero_tries_once() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let scratch = Scratch::new();
    for timeout in ["0", "0s", "1ns", "1ms"] {
        let marker = scratch.path(&format!("ran-{timeout}"));
        let touch = format!("touch '{}'", marker.display());
        let mut args = lease_args(&endpoint, "once");
        args.extend(["--wait-timeout", timeout, "--", "sh", "-c", &touch]);
        let out = Cmd::bare().args(&args).output();
        assert_eq!(
            out.status.code(),
            Some(0),
            "--wait-timeout {timeout}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            marker.exists(),
            "--wait-timeout {timeout} did not run the command"
        );
    }

    // Behind a leader: 124 at once, and the candidacy is withdrawn.
    let leader = Instance::start(
        &lease_args(&endpoint, "once"),
        &scratch.job("leader", "sleep 30"),
    );
    assert!(
        scratch
            .wait_record("start", "leader", Duration::from_secs(10))
            .is_some(),
        "{}",
        leader.stderr()
    );
    let started = Instant::now();
    let mut args = lease_args(&endpoint, "once");
    args.extend(["--wait-timeout", "0", "--", "true"]);
    let out = Cmd::bare().args(&args).output();
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(etcd.keys("/leader-exec/once/").len(), 1);
}

/// A candidate key that is not UTF-8, ahead in line: the waiter watches that exact key and leads
/// once it is deleted.
#[test]
fn a_non_utf8_key_ahead_does_not_hang_a_waiter() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let lease = grant(&etcd, 60);
    let squatter: &[u8] = b"/leader-exec/bytes/\xff\xfe";
    ctl_bytes(
        &etcd,
        &[
            b"put",
            format!("--lease={lease}").as_bytes(),
            squatter,
            b"squatter",
        ],
    );
    let scratch = Scratch::new();
    let marker = scratch.path("led");
    let touch = format!("touch '{}'", marker.display());
    let mut waiter = Instance::start(
        &lease_args(&endpoint, "bytes"),
        &["sh".into(), "-c".into(), touch],
    );
    // In line behind the squatter, not leading.
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/bytes/")
            .len()
            == 2),
        "{}",
        waiter.stderr()
    );
    assert!(waiter.running());
    assert!(!marker.exists());
    ctl_bytes(&etcd, &[b"del", squatter]);
    assert_eq!(
        waiter.wait(Duration::from_secs(10)),
        Some(0),
        "the waiter did not lead: {}",
        waiter.stderr()
    );
    assert!(marker.exists());
}

const HOSTILE_IDENTITY: &[u8] =
    b"\x1b]0;owned\x07\x1b[2J\nleader: forged\r\xe2\x80\xaeevil\xc2\x9b\xff";

/// Puts a hostile leader (a non-UTF-8 key with terminal escapes, an identity full of them).
fn plant_hostile_leader(etcd: &Etcd, lease_name: &str) {
    let lease = grant(etcd, 60);
    let key = format!("/leader-exec/{lease_name}/\x1b[31m");
    let mut key = key.into_bytes();
    key.push(0xff);
    ctl_bytes(
        etcd,
        &[
            b"put",
            format!("--lease={lease}").as_bytes(),
            &key,
            HOSTILE_IDENTITY,
        ],
    );
}

/// Nothing a terminal would act on: no C0/C1 control but the line ends, no bidi override.
fn assert_inert(output: &[u8]) {
    let text = std::str::from_utf8(output).expect("text output is valid UTF-8");
    for c in text.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{c:?} in output: {text}"
        );
    }
}

#[test]
fn hostile_identities_and_keys_are_escaped_in_status_and_watch() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    plant_hostile_leader(&etcd, "hostile");

    let out = Cmd::bare()
        .args(["status", "--endpoints", &endpoint, "--lease", "hostile"])
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_inert(&out.stdout);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 9, "forged lines? {text}");
    assert!(
        !lines.iter().any(|l| l.starts_with("leader: forged")),
        "{text}"
    );
    assert!(
        lines[1].contains(r"\x1b]0;owned\x07\x1b[2J\nleader: forged\r\u{202e}evil\u{9b}\xff"),
        "{text}"
    );
    assert!(
        lines[3].contains(r"/leader-exec/hostile/\x1b[31m\xff"),
        "{text}"
    );

    // JSON escapes by itself: the identity reads back as it was written (lossy where not UTF-8).
    let out = Cmd::bare()
        .args([
            "status",
            "--json",
            "--endpoints",
            &endpoint,
            "--lease",
            "hostile",
        ])
        .output();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["leader"]["identity"],
        String::from_utf8_lossy(HOSTILE_IDENTITY).as_ref()
    );

    // watch: the first line shows the leader, on one line, escaped.
    let child = leader_exec()
        .args(["watch", "--endpoints", &endpoint, "--lease", "hostile"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut watch = KillOnDrop(child);
    let stdout = watch.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = Vec::new();
        let _ = BufReader::new(stdout).read_until(b'\n', &mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("watch printed its first line");
    assert_inert(&line);
    let line = String::from_utf8(line).unwrap();
    assert!(
        line.contains(r"leader \x1b]0;owned\x07\x1b[2J\nleader: forged\r\u{202e}evil"),
        "{line}"
    );
    assert!(
        line.contains(r"key /leader-exec/hostile/\x1b[31m\xff"),
        "{line}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.0.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = watch.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A value under the occurrence records that is not a record: `status` lists it as unreadable.
#[test]
fn an_unreadable_occurrence_record_is_shown() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "occ");
    args.extend(["--occurrence", "good", "--", "true"]);
    assert_eq!(Cmd::bare().args(&args).output().status.code(), Some(0));
    ctl_bytes(
        &etcd,
        &[
            b"put",
            b"/leader-exec/.occurrences/occ/bad\x1b[2J",
            b"not json \x1b[2J",
        ],
    );

    let out = Cmd::bare()
        .args(["status", "--endpoints", &endpoint, "--lease", "occ"])
        .output();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_inert(&out.stdout);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains(r"bad\x1b[2J") && l.contains("unreadable")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("good") && l.contains("done")),
        "{text}"
    );

    let out = Cmd::bare()
        .args([
            "status",
            "--json",
            "--endpoints",
            &endpoint,
            "--lease",
            "occ",
        ])
        .output();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let occurrences = status["occurrences"].as_array().unwrap();
    assert_eq!(occurrences.len(), 2, "{status}");
    assert!(
        occurrences
            .iter()
            .any(|o| o["state"] == "unreadable" && o["id"] == "bad\u{1b}[2J"),
        "{status}"
    );
}

/// https without --cacert verifies etcd against the platform's trust store (here a temporary
/// bundle named by SSL_CERT_FILE); a certificate it does not trust fails at once with the cause,
/// in the run form and in `status`.
#[test]
fn https_uses_the_platform_trust_store_and_fails_fast_with_the_cause() {
    let scratch = Scratch::new();
    make_certificates(&scratch);
    let file = |name: &str| path_str(&scratch.path(name));
    let ca = file("ca.crt");
    let etcd = Etcd::start_with(
        &[
            "--cert-file",
            &file("server.crt"),
            "--key-file",
            &file("server.key"),
        ],
        "https",
        &["--cacert", &ca],
    );
    let endpoint = etcd.endpoint();
    let empty_dir = scratch.path("no-certs");
    std::fs::create_dir(&empty_dir).unwrap();
    let trusting = |bundle: &str| {
        let mut command = leader_exec();
        command
            .env("SSL_CERT_FILE", bundle)
            .env("SSL_CERT_DIR", &empty_dir)
            .args(["--endpoints", &endpoint, "--connect-timeout", "5s"]);
        command
    };

    let marker = scratch.path("ran");
    let touch = format!("touch '{}'", marker.display());
    let out = trusting(&ca)
        .args(["--lease", "roots", "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());

    // Another CA in the trust store: etcd's certificate does not verify.
    let other = Scratch::new();
    make_certificates(&other);
    let other_ca = path_str(&other.path("ca.crt"));
    let started = Instant::now();
    let out = trusting(&other_ca)
        .args(["--lease", "roots", "--", "true"])
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_refused(&out, "certificate");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("did not answer"));

    let started = Instant::now();
    let out = trusting(&other_ca)
        .args(["status", "--lease", "roots"])
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_refused(&out, "certificate");
    assert!(etcd.keys("/leader-exec/").is_empty());
}

/// TLS files that are not what their flag says are refused before connecting.
#[test]
fn tls_files_are_checked() {
    let scratch = Scratch::new();
    make_certificates(&scratch);
    let file = |name: &str| path_str(&scratch.path(name));
    let not_pem = scratch.path("not.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let run = |args: &[&str]| {
        Cmd::bare()
            .args(["--endpoints", "https://127.0.0.1:1"])
            .args(args)
            .args(["--lease", "x", "--", "true"])
            .output()
    };
    assert_refused(&run(&["--cacert", &path_str(&not_pem)]), "--cacert");
    // A private key given as the CA is not a certificate either.
    assert_refused(&run(&["--cacert", &file("ca.key")]), "no PEM certificate");
    let swapped = run(&[
        "--cacert",
        &file("ca.crt"),
        "--cert",
        &file("client.key"),
        "--key",
        &file("client.crt"),
    ]);
    assert_refused(&swapped, "swapped");
    assert_refused(
        &run(&["--cert", &file("client.crt"), "--key", &path_str(&not_pem)]),
        "--key",
    );
}

/// A password on the command line or over plain http works, with a warning that never shows it.
#[test]
fn credential_warnings() {
    let etcd = Etcd::start();
    for args in [
        &["user", "add", "root:s3cret-pw"][..],
        &["user", "grant-role", "root", "root"][..],
        &["auth", "enable"][..],
    ] {
        assert!(etcd.ctl(args).status.success());
    }
    let endpoint = etcd.endpoint();
    let out = Cmd::bare()
        .args(["--endpoints", &endpoint, "--user", "root:s3cret-pw"])
        .args(["--lease", "warned", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(
        stderr.contains("ps") && stderr.contains("--password-file"),
        "{stderr}"
    );
    assert!(stderr.contains("plain http://"), "{stderr}");

    // From the environment: not visible in ps, so only the clear-text warning.
    let out = Cmd::bare()
        .env("ETCDCTL_USER", "root")
        .env("LEADER_EXEC_PASSWORD", "s3cret-pw")
        .args(["--endpoints", &endpoint, "--lease", "warned", "--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("plain http://"), "{stderr}");
}

/// An occurrence record left `started` by an earlier leader whose identity is hostile.
fn plant_hostile_record(etcd: &Etcd, key: &str) {
    let identity = "\u{1b}]0;owned\u{7}\u{1b}[2J\nleader: forged\r\u{202e}evil";
    let record = serde_json::json!({
        "state": "started",
        "token": 1,
        "identity": identity,
        "started_at": "2026-12-01T00:00:00.000Z",
    });
    let out = etcd.ctl(&["put", key, &record.to_string()]);
    assert!(out.status.success());
}

#[test]
fn hostile_record_fields_are_escaped_in_text_logs() {
    let etcd = Etcd::start();
    plant_hostile_record(&etcd, "/leader-exec/.occurrences/logs/nightly");
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "logs");
    args.extend(["--occurrence", "nightly", "--if-unfinished", "skip"]);
    let out = Cmd::bare().args(&args).args(["--", "true"]).output();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("skipping"), "{stderr}");
    assert!(stderr.contains("\\x1b]0;owned"), "{stderr}");
    assert_inert(&out.stderr);
    // One line per event: the identity's newline forged none.
    assert!(
        !stderr.lines().any(|l| l.starts_with("leader: forged")),
        "{stderr}"
    );
}

#[test]
fn the_suggested_recovery_command_is_shell_quoted() {
    let etcd = Etcd::start();
    let id = "it's; touch pwned; '";
    let key = format!("/leader-exec/.occurrences/quote/{id}");
    plant_hostile_record(&etcd, &key);
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "quote");
    args.extend(["--occurrence", id, "--if-unfinished", "fail"]);
    let out = Cmd::bare().args(&args).args(["--", "true"]).output();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let suggestion = stderr
        .split("to run it again: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no suggestion: {stderr}"))
        .split(" occurrence=")
        .next()
        .unwrap()
        .to_owned();
    // Run exactly what an operator would paste, with an etcdctl that only prints its argument.
    let fake = scratch.path("bin");
    std::fs::create_dir_all(&fake).unwrap();
    let etcdctl = fake.join("etcdctl");
    // The key is the last argument, after --endpoints and `del`.
    std::fs::write(
        &etcdctl,
        "#!/bin/sh\nfor a in \"$@\"; do last=$a; done\nprintf '%s\\n' \"$last\"\n",
    )
    .unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&etcdctl).unwrap().permissions(),
        0o755,
    );
    let mut permissions = std::fs::metadata(&etcdctl).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&etcdctl, permissions).unwrap();
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(&suggestion)
        .current_dir(scratch.path(""))
        .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&pasted.stdout).trim_end(),
        key,
        "{suggestion}"
    );
    assert!(!scratch.path("pwned").exists(), "{suggestion}");
}
