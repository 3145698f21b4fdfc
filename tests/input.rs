//! Bad input: one clear line on stderr, exit 125 (126/127 for the command), in bounded time, and
//! nothing left behind in the store. TLS and authentication against a real etcd.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::harness::*;

fn run(args: &[&str]) -> Output {
    leader_exec().args(args).output().unwrap()
}

/// Asserts exit 125 with exactly one line on stderr that mentions `needle`.
fn assert_usage_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "expected one line, got: {stderr}"
    );
    assert!(stderr.starts_with("leader-exec: "), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

#[test]
fn help_and_version() {
    let help = run(&["--help"]);
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
    let version = run(&["--version"]);
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
        run(&args)
    };
    assert_usage_error(
        &with(&["--lease", "x", "--ttl", "15", "--", "true"]),
        "--ttl",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--kill-after", "soon", "--", "true"]),
        "--kill-after",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--kill-signal", "TERMINATE", "--", "true"]),
        "TERMINATE",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--max-runtime", "0", "--", "true"]),
        "--max-runtime",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--splay", "-1s", "--", "true"]),
        "--splay",
    );
    assert_usage_error(
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
    assert_usage_error(
        &with(&["--lease", "x", "--health-timeout", "1s", "--", "true"]),
        "--health-cmd",
    );
    assert_usage_error(&with(&["--lease", "", "--", "true"]), "--lease");
    assert_usage_error(&with(&["--lease", "a/b", "--", "true"]), "'/'");
    assert_usage_error(
        &with(&["--lease", "a\tb", "--", "true"]),
        "control characters",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--identity", "a\nb", "--", "true"]),
        "--identity",
    );
    assert_usage_error(&with(&["--", "true"]), "--lease");
    assert_usage_error(&with(&["--lease", "x"]), "missing command");
    assert_usage_error(&with(&["--lease", "x", "--"]), "missing command");
    assert_usage_error(&with(&["--lease", "x", "true"]), "true");
    assert_usage_error(
        &with(&["--lease", "x", "--no-such-flag", "--", "true"]),
        "--no-such-flag",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--ttl", "5s", "--", "true"]),
        "--renew-deadline",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--retry-period", "5s", "--", "true"]),
        "--retry-period",
    );
    assert_usage_error(
        &with(&["--lease", "x", "--ttl", "2500ms", "--", "true"]),
        "whole number",
    );
    assert_usage_error(
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
    assert_usage_error(
        &run(&["--endpoints", "http://", "--lease", "x", "--", "true"]),
        "--endpoints",
    );
    // An environment variable is checked like its flag.
    let out = leader_exec()
        .env("LEADER_EXEC_TTL", "forever")
        .args(["--endpoints", &endpoint, "--lease", "x", "--", "true"])
        .output()
        .unwrap();
    assert_usage_error(&out, "forever");
    assert!(etcd.held().is_empty(), "left: {:?}", etcd.held());
}

#[test]
fn an_unreachable_etcd_fails_within_the_connect_timeout() {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = run(&[
        "--endpoints",
        &nobody,
        "--connect-timeout",
        "1s",
        "--lease",
        "x",
        "--",
        "true",
    ]);
    let took = started.elapsed();
    // A refusal is an answer: no need to wait out the timeout.
    assert_usage_error(&out, "connection refused (is etcd running there?)");
    assert!(took < Duration::from_secs(4), "took {took:?}");

    // A black hole (accepts, never answers) is bounded the same way.
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    proxy.freeze();
    let started = Instant::now();
    let out = run(&[
        "--endpoints",
        &proxy.endpoint(),
        "--connect-timeout",
        "1s",
        "--lease",
        "x",
        "--",
        "true",
    ]);
    let took = started.elapsed();
    assert_usage_error(&out, "did not answer");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    proxy.heal();
    assert!(etcd.keys("").is_empty());
}

#[test]
fn unreadable_tls_files_are_named() {
    let scratch = Scratch::new();
    let missing = path_str(&scratch.path("missing.pem"));
    assert_usage_error(
        &run(&[
            "--endpoints",
            "https://127.0.0.1:1",
            "--cacert",
            &missing,
            "--lease",
            "x",
            "--",
            "true",
        ]),
        "--cacert",
    );
    let out = leader_exec()
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
        .output()
        .unwrap();
    assert_usage_error(&out, "--cert");
}

fn openssl(dir: &Scratch, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir.path(""))
        .args(args)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `scratch`.
pub(crate) fn make_certificates(scratch: &Scratch) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=leader-exec-test-ca",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(scratch, &ca);
    std::fs::write(
        scratch.path("ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    for name in ["server", "client"] {
        let mut req = vec!["req", "-subj"];
        let subject = format!("/CN={name}");
        req.push(&subject);
        req.extend(ec);
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        req.extend(["-keyout", &key, "-out", &csr]);
        openssl(scratch, &req);
        openssl(
            scratch,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "ext",
                "-out",
                &crt,
            ],
        );
    }
}

#[test]
fn tls_with_client_certificates() {
    let scratch = Scratch::new();
    make_certificates(&scratch);
    let file = |name: &str| path_str(&scratch.path(name));
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let etcd = Etcd::start_with(
        &[
            "--cert-file",
            &file("server.crt"),
            "--key-file",
            &file("server.key"),
            "--trusted-ca-file",
            &ca,
            "--client-cert-auth",
        ],
        "https",
        &["--cacert", &ca, "--cert", &cert, "--key", &key],
    );
    let endpoint = etcd.endpoint();
    let marker = scratch.path("ran");
    let touch = format!("touch '{}'", marker.display());
    let out = leader_exec()
        .args([
            "--endpoints",
            &endpoint,
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
        ])
        .args(["--lease", "tls", "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());

    // The same through etcdctl's environment variables.
    std::fs::remove_file(&marker).unwrap();
    let out = leader_exec()
        .env("ETCDCTL_ENDPOINTS", &endpoint)
        .env("ETCDCTL_CACERT", &ca)
        .env("ETCDCTL_CERT", &cert)
        .env("ETCDCTL_KEY", &key)
        .args(["--lease", "tls", "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());

    // Without a client certificate the server refuses: 125, one line.
    let started = Instant::now();
    let out = run(&[
        "--endpoints",
        &endpoint,
        "--cacert",
        &ca,
        "--connect-timeout",
        "2s",
        "--lease",
        "tls",
        "--",
        "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(etcd.keys("/leader-exec/").is_empty());
}

#[test]
fn authentication() {
    let etcd = Etcd::start();
    for args in [
        &["user", "add", "root:s3cret-pw"][..],
        &["user", "grant-role", "root", "root"][..],
        &["auth", "enable"][..],
    ] {
        let out = etcd.ctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let password_file = scratch.path("password");
    std::fs::write(&password_file, "s3cret-pw\n").unwrap();
    let pw = path_str(&password_file);

    let ok = run(&[
        "--endpoints",
        &endpoint,
        "--user",
        "root",
        "--password-file",
        &pw,
        "--lease",
        "auth",
        "--",
        "true",
    ]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = leader_exec()
        .env("ETCDCTL_USER", "root")
        .env("LEADER_EXEC_PASSWORD", "s3cret-pw")
        .args(["--endpoints", &endpoint, "--lease", "auth", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let started = Instant::now();
    // -q: without it, the warnings about a password on the command line and over plain http
    // come first (tested in credential_warnings).
    let bad = run(&[
        "-q",
        "--endpoints",
        &endpoint,
        "--user",
        "root:wrong-password-xyz",
        "--lease",
        "auth",
        "--",
        "true",
    ]);
    assert_usage_error(&bad, "auth");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("wrong-password-xyz"));

    let unknown = run(&[
        "-q",
        "--endpoints",
        &endpoint,
        "--user",
        "nobody:pw",
        "--lease",
        "auth",
        "--",
        "true",
    ]);
    assert_usage_error(&unknown, "auth");
    assert_usage_error(
        &run(&[
            "--endpoints",
            &endpoint,
            "--user",
            "root",
            "--lease",
            "auth",
            "--",
            "true",
        ]),
        "password",
    );

    // Nothing left behind, as seen by an authenticated etcdctl.
    let out = etcd.ctl(&[
        "--user",
        "root:s3cret-pw",
        "get",
        "--prefix",
        "--keys-only",
        "/leader-exec/",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
}
