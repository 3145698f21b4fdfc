//! A store that cannot be reached at start: exit 125 within `--connect-timeout` (plus a small
//! constant) on every store, ended at once when every endpoint refuses the connection, in one
//! wording that names the store and the endpoint on every subcommand, and nothing left behind;
//! an endpoint that answers as something else than the store meant is named at once.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::harness::*;

/// What the bound allows beyond `--connect-timeout`: process start and exit on a loaded machine.
const SLACK: Duration = Duration::from_secs(1);

/// Runs leader-exec with `args`, returning its output and how long it took.
fn timed(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Cmd::bare().args(args).output();
    (out, started.elapsed())
}

/// The one stderr line of a start-up failure (exit 125).
fn failure_line(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{what}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{what}: one line expected: {stderr}"
    );
    stderr.trim_end().to_owned()
}

/// Every subcommand's arguments, and the run form's, against `endpoint`.
fn every_form<'a>(endpoint: &'a str, timeout: &'a str) -> Vec<(&'static str, Vec<&'a str>)> {
    let common = ["--endpoints", endpoint, "--connect-timeout", timeout];
    let with = |head: &[&'a str], tail: &[&'a str]| -> Vec<&'a str> {
        head.iter()
            .chain(common.iter())
            .chain(tail)
            .copied()
            .collect()
    };
    vec![
        ("run", with(&[], &["--lease", "reach", "--", "true"])),
        ("status", with(&["status"], &["--lease", "reach"])),
        ("status --all", with(&["status", "--all"], &[])),
        (
            "check",
            with(&["check"], &["--lease", "reach", "--token", "1"]),
        ),
        ("watch", with(&["watch"], &["--lease", "reach"])),
        ("resign", with(&["resign"], &["--lease", "reach"])),
    ]
}

/// `--connect-timeout` bounds the start on every store: nothing listening, or a black hole
/// (accepts TCP, never answers), several times each, exit 125 within the timeout plus a second.
/// Before, a failed attempt bought a backoff sleep the timeout did not cover, and the timer
/// raced the next attempt unbiased: 2.5–9.6 s for `--connect-timeout 2s` on PostgreSQL.
pub fn an_unreachable_store_fails_within_the_connect_timeout<S: Store>() {
    let store = S::start();
    let refusing = Proxy::nothing_listening();
    let black_hole = Proxy::start(store.addr());
    black_hole.freeze();
    let timeout = Duration::from_secs(2);
    for (kind, proxy) in [
        ("nothing listening", &refusing),
        ("black hole", &black_hole),
    ] {
        let endpoint = store.endpoint_via(proxy);
        for trial in 0..4 {
            let (out, took) = timed(&[
                "--endpoints",
                &endpoint,
                "--connect-timeout",
                "2s",
                "--lease",
                "reach",
                "--",
                "true",
            ]);
            let line = failure_line(&out, kind);
            assert!(
                took < timeout + SLACK,
                "{}: {kind}, trial {trial}: took {took:?}: {line}",
                S::NAME
            );
        }
    }
    // Dropped, not healed: a proxy that forwarded what it held back would deliver requests of
    // clients that have long exited, which no real network does.
    drop(black_hole);
    assert!(store.held().is_empty(), "left behind: {:?}", store.held());
}

/// A refused connection is an answer: every subcommand and the run form say so at once, in the
/// same words, naming the store and the endpoint; a black hole is reported in one wording too,
/// after `--connect-timeout`. Before, a refused etcd port waited the whole timeout and said
/// "tcp connect error", `status` and `check` said "the store did not answer" without the
/// endpoint, and ZooKeeper said "no answer".
pub fn unreachable_stores_are_named_the_same_way_by_every_subcommand<S: Store>() {
    let store = S::start();
    let refusing = Proxy::nothing_listening();
    let endpoint = store.endpoint_via(&refusing);
    let mut lines = Vec::new();
    for (form, args) in every_form(&endpoint, "20s") {
        let (out, took) = timed(&args);
        let line = failure_line(&out, form);
        // Far below the 20 s timeout: the refusal ends the wait.
        assert!(
            took < Duration::from_secs(5),
            "{form}: took {took:?}: {line}"
        );
        assert!(line.contains("connection refused"), "{form}: {line}");
        assert!(line.contains(" running there?"), "{form}: {line}");
        assert!(line.contains(&endpoint), "{form}: {line}");
        lines.push((form, line));
    }
    for (form, line) in &lines {
        assert_eq!(line, &lines[0].1, "{form} words it otherwise than run");
    }

    let black_hole = Proxy::start(store.addr());
    black_hole.freeze();
    let endpoint = store.endpoint_via(&black_hole);
    let mut lines = Vec::new();
    for (form, args) in every_form(&endpoint, "1s") {
        let (out, took) = timed(&args);
        let line = failure_line(&out, form);
        assert!(
            took < Duration::from_secs(1) + SLACK,
            "{form}: took {took:?}: {line}"
        );
        assert!(
            line.contains(" did not answer within --connect-timeout (1s)"),
            "{form}: {line}"
        );
        assert!(line.contains(&endpoint), "{form}: {line}");
        lines.push((form, line));
    }
    for (form, line) in &lines {
        assert_eq!(line, &lines[0].1, "{form} words it otherwise than run");
    }
    // Dropped, not healed: a proxy that forwarded what it held back would deliver requests of
    // clients that have long exited, which no real network does.
    drop(black_hole);
    assert!(store.held().is_empty(), "left behind: {:?}", store.held());
}

/// A TCP server on a free loopback port that answers every connection with `answer` and closes
/// it: an HTTP/1 server where etcd was meant.
fn answering(answer: &'static [u8]) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0u8; 512];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer);
        }
    });
    port
}

/// An HTTP/2 server (cleartext) on a free loopback port that answers every request with status
/// 404 and no gRPC trailers, as a web server or proxy on the port would.
fn http2_not_found() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut preface = [0u8; 24];
                if stream.read_exact(&mut preface).is_err() {
                    return;
                }
                let _ = stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                let mut header = [0u8; 9];
                while stream.read_exact(&mut header).is_ok() {
                    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]);
                    let mut payload = vec![0u8; length as usize];
                    if stream.read_exact(&mut payload).is_err() {
                        return;
                    }
                    let stream_id = &header[5..9];
                    match (header[3], header[4] & 1) {
                        // SETTINGS: acknowledged.
                        (4, 0) => {
                            let _ = stream.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]);
                        }
                        // HEADERS: `:status 404` (static table entry 13), END_STREAM | END_HEADERS.
                        (1, _) => {
                            let mut frame = vec![0, 0, 1, 1, 0x05];
                            frame.extend_from_slice(stream_id);
                            frame.push(0x8d);
                            let _ = stream.write_all(&frame);
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    port
}

/// An HTTP/2 server that answers 404 where etcd was meant: every form ends at once in one line
/// naming the endpoint and the status, not a bare "grpc-status header missing".
#[test]
fn an_http2_server_answering_404_is_named_with_its_endpoint() {
    let endpoint = format!("http://127.0.0.1:{}", http2_not_found());
    for (form, args) in every_form(&endpoint, "10s") {
        let (out, took) = timed(&args);
        let line = failure_line(&out, form);
        assert!(
            line.contains(&format!("etcd at {endpoint}: "))
                && line.contains("an HTTP server answered with status 404"),
            "{form}: {line}"
        );
        assert!(took < Duration::from_secs(5), "{form}: {took:?}");
    }
}

/// An etcd endpoint that is not the store meant ends every form at once, in one line naming the
/// endpoint and what answers there: `https://` to a plain etcd, an HTTP/1 server, a PostgreSQL
/// port without a scheme. Before, each waited out `--connect-timeout` and said "did not
/// answer".
#[test]
fn an_endpoint_that_is_not_the_store_meant_is_named_at_once() {
    let etcd = Etcd::start();
    let postgres = Postgres::start();
    let http = answering(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    let plain = etcd.addr();
    let cases = [
        (
            format!("https://{plain}"),
            format!("{plain} answers without TLS (a plain etcd?): use http://{plain}"),
        ),
        (
            format!("http://127.0.0.1:{http}"),
            "answered, but not as etcd does (gRPC over HTTP/2): \"HTTP/1.1 404 Not Found\""
                .to_owned(),
        ),
        (
            format!("127.0.0.1:{}", postgres.port),
            format!(
                "PostgreSQL answers at 127.0.0.1:{}, not etcd: give a postgres://",
                postgres.port
            ),
        ),
    ];
    for (endpoint, found) in &cases {
        for (form, args) in every_form(endpoint, "10s") {
            let (out, took) = timed(&args);
            let line = failure_line(&out, &format!("{form} {endpoint}"));
            assert!(
                line.contains(&format!("etcd at {endpoint}: ")) && line.contains(found.as_str()),
                "{form} {endpoint}: {line}"
            );
            assert!(took < Duration::from_secs(5), "{form} {endpoint}: {took:?}");
        }
    }
    // The endpoint meant still works.
    let (out, _) = timed(&[
        "--endpoints",
        &etcd.endpoint(),
        "--lease",
        "reach",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
