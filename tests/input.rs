//! Bad input: one clear line on stderr, exit 125 (126/127 for the command), in bounded time, and
//! nothing left behind in the store. (TLS and authentication against etcd: etcd/access.rs.)

use std::time::{Duration, Instant};

use crate::harness::*;
// Its old home: tests that still import it from here keep building.
#[allow(unused_imports)]
pub(crate) use crate::harness::make_certificates;

#[test]
fn help_and_version() {
    let help = Cmd::bare().args(["--help"]).output();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "--lease",
        "--renew-deadline",
        "LEADER_TOKEN",
        "Exit status",
        "75",
        "124",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}");
    }
    let version = Cmd::bare().args(["--version"]).output();
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("leader-exec {}", env!("CARGO_PKG_VERSION"))
    );
}

pub fn malformed_flags_are_one_line_and_125<S: Store>() {
    let etcd = S::start();
    let endpoint = etcd.endpoint();
    let with = |extra: &[&str]| {
        let mut args = vec!["--endpoints", endpoint.as_str()];
        args.extend_from_slice(extra);
        Cmd::bare().args(&args).output()
    };
    assert_refused(
        &with(&["--lease", "x", "--ttl", "15", "--", "true"]),
        "--ttl",
    );
    assert_refused(
        &with(&["--lease", "x", "--kill-after", "soon", "--", "true"]),
        "--kill-after",
    );
    assert_refused(
        &with(&["--lease", "x", "--kill-signal", "TERMINATE", "--", "true"]),
        "TERMINATE",
    );
    assert_refused(
        &with(&["--lease", "x", "--max-runtime", "0", "--", "true"]),
        "--max-runtime",
    );
    assert_refused(
        &with(&["--lease", "x", "--splay", "-1s", "--", "true"]),
        "--splay",
    );
    assert_refused(
        &with(&[
            "--lease",
            "x",
            "--health-cmd",
            "true",
            "--health-interval",
            "0",
            "--",
            "true",
        ]),
        "--health-interval",
    );
    assert_refused(
        &with(&["--lease", "x", "--health-timeout", "1s", "--", "true"]),
        "--health-cmd",
    );
    assert_refused(&with(&["--lease", "", "--", "true"]), "--lease");
    assert_refused(&with(&["--lease", "a/b", "--", "true"]), "'/'");
    assert_refused(
        &with(&["--lease", "a\tb", "--", "true"]),
        "control characters",
    );
    assert_refused(
        &with(&["--lease", "x", "--identity", "a\nb", "--", "true"]),
        "--identity",
    );
    assert_refused(&with(&["--", "true"]), "--lease");
    assert_refused(&with(&["--lease", "x"]), "missing command");
    assert_refused(&with(&["--lease", "x", "--"]), "missing command");
    assert_refused(&with(&["--lease", "x", "true"]), "true");
    assert_refused(
        &with(&["--lease", "x", "--no-such-flag", "--", "true"]),
        "--no-such-flag",
    );
    assert_refused(
        &with(&["--lease", "x", "--ttl", "5s", "--", "true"]),
        "--renew-deadline",
    );
    assert_refused(
        &with(&["--lease", "x", "--retry-period", "5s", "--", "true"]),
        "--retry-period",
    );
    assert_refused(
        &with(&["--lease", "x", "--ttl", "2500ms", "--", "true"]),
        "whole number",
    );
    assert_refused(
        &with(&[
            "--lease",
            "x",
            "--no-wait",
            "--wait-timeout",
            "1s",
            "--",
            "true",
        ]),
        "--wait-timeout",
    );
    assert_refused(
        &Cmd::bare()
            .args(["--endpoints", "http://", "--lease", "x", "--", "true"])
            .output(),
        "--endpoints",
    );
    // An environment variable is checked like its flag.
    let out = Cmd::bare()
        .env("LEADER_EXEC_TTL", "forever")
        .args(["--endpoints", &endpoint, "--lease", "x", "--", "true"])
        .output();
    assert_refused(&out, "forever");
    assert!(etcd.held().is_empty(), "left: {:?}", etcd.held());
}

#[test]
fn an_unreachable_etcd_fails_within_the_connect_timeout() {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = Cmd::bare()
        .args([
            "--endpoints",
            &nobody,
            "--connect-timeout",
            "1s",
            "--lease",
            "x",
            "--",
            "true",
        ])
        .output();
    let took = started.elapsed();
    // A refusal is an answer: no need to wait out the timeout.
    assert_refused(&out, "connection refused (is etcd running there?)");
    assert!(took < Duration::from_secs(4), "took {took:?}");

    // A black hole (accepts, never answers) is bounded the same way.
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    proxy.freeze();
    let started = Instant::now();
    let out = Cmd::bare()
        .args([
            "--endpoints",
            &proxy.endpoint(),
            "--connect-timeout",
            "1s",
            "--lease",
            "x",
            "--",
            "true",
        ])
        .output();
    let took = started.elapsed();
    assert_refused(&out, "did not answer");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    proxy.heal();
    assert!(etcd.keys("").is_empty());
}

#[test]
fn unreadable_tls_files_are_named() {
    let scratch = Scratch::new();
    let missing = path_str(&scratch.path("missing.pem"));
    assert_refused(
        &Cmd::bare()
            .args([
                "--endpoints",
                "https://127.0.0.1:1",
                "--cacert",
                &missing,
                "--lease",
                "x",
                "--",
                "true",
            ])
            .output(),
        "--cacert",
    );
    let out = Cmd::bare()
        .env("ETCDCTL_CERT", &missing)
        .env("ETCDCTL_KEY", &missing)
        .args([
            "--endpoints",
            "https://127.0.0.1:1",
            "--lease",
            "x",
            "--",
            "true",
        ])
        .output();
    assert_refused(&out, "--cert");
}
