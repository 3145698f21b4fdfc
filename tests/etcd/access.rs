//! TLS and authentication against a real etcd: client certificates, and a user and password
//! (from the command line, the environment or a file) on an etcd with auth enabled.

use std::time::{Duration, Instant};

use crate::harness::*;

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
    let out = Cmd::bare()
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
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());

    // The same through etcdctl's environment variables.
    std::fs::remove_file(&marker).unwrap();
    let out = Cmd::bare()
        .env("ETCDCTL_ENDPOINTS", &endpoint)
        .env("ETCDCTL_CACERT", &ca)
        .env("ETCDCTL_CERT", &cert)
        .env("ETCDCTL_KEY", &key)
        .args(["--lease", "tls", "--", "sh", "-c", &touch])
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());

    // Without a client certificate the server refuses: 125, one line.
    let started = Instant::now();
    let out = Cmd::bare()
        .args([
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
        ])
        .output();
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

    let ok = Cmd::bare()
        .args([
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
        ])
        .output();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = Cmd::bare()
        .env("ETCDCTL_USER", "root")
        .env("LEADER_EXEC_PASSWORD", "s3cret-pw")
        .args(["--endpoints", &endpoint, "--lease", "auth", "--", "true"])
        .output();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let started = Instant::now();
    // -q: without it, the warnings about a password on the command line and over plain http
    // come first (tested in credential_warnings).
    let bad = Cmd::bare()
        .args([
            "-q",
            "--endpoints",
            &endpoint,
            "--user",
            "root:wrong-password-xyz",
            "--lease",
            "auth",
            "--",
            "true",
        ])
        .output();
    assert_refused(&bad, "auth");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("wrong-password-xyz"));

    let unknown = Cmd::bare()
        .args([
            "-q",
            "--endpoints",
            &endpoint,
            "--user",
            "nobody:pw",
            "--lease",
            "auth",
            "--",
            "true",
        ])
        .output();
    assert_refused(&unknown, "auth");
    assert_refused(
        &Cmd::bare()
            .args([
                "--endpoints",
                &endpoint,
                "--user",
                "root",
                "--lease",
                "auth",
                "--",
                "true",
            ])
            .output(),
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
