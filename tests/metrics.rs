//! Observability: `--http` (/metrics, /leader, /healthz), `--metrics-file` and `status --all`,
//! against a real etcd; values are read from outside, as a scraper or a load balancer would.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

/// One GET over HTTP/1.1: (status, body), or None when nothing answers.
pub fn get(port: u16, path: &str, accept: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// The value of the sample `name` whose labels contain `labels` (e.g. `reason="deadline"`).
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split(['{', ' ']).next() == Some(name) && (labels.is_empty() || l.contains(labels))
        })?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

pub fn scrape(port: u16) -> String {
    let (status, body) = get(port, "/metrics", None).expect("/metrics answers");
    assert_eq!(status, 200, "{body}");
    body
}

fn http_args<'a>(endpoint: &'a str, lease: &'a str, listen: &'a str) -> Vec<&'a str> {
    let mut args = lease_args(endpoint, lease);
    args.extend(["--http", listen]);
    args
}

/// A job that records its start and end, and exits once `file` exists.
fn until_file(scratch: &Scratch, name: &str, file: &str) -> Vec<String> {
    let file = scratch.path(file);
    scratch.job(
        name,
        &format!("while [ ! -e '{}' ]; do sleep 0.02; done", file.display()),
    )
}

const STOPPABLE: &str = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;

#[test]
fn metrics_follow_waiting_leading_and_a_step_down() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let direct = etcd.endpoint();
    let proxied = proxy.endpoint();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");

    // X leads; A waits behind it, reaching etcd through the proxy.
    let _x = Instance::start(
        &lease_args(&direct, "m"),
        &until_file(&scratch, "x", "x-go"),
    );
    scratch
        .wait_record("start", "x", Duration::from_secs(10))
        .expect("x started");
    let mut args = http_args(&proxied, "m", &listen);
    args.push("--recampaign");
    let mut a = Instance::start(&args, &scratch.job("a", STOPPABLE));
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/m/")
            .len()
            == 2),
        "a did not join the line"
    );
    let waiting = scrape(port);
    assert_eq!(
        sample(&waiting, "leader_exec_leader", "lease=\"m\""),
        Some(0.0),
        "{waiting}"
    );
    assert_eq!(
        sample(&waiting, "leader_exec_elections_won_total", ""),
        Some(0.0)
    );
    assert_eq!(
        sample(&waiting, "leader_exec_command_running", ""),
        Some(0.0)
    );
    assert!(sample(&waiting, "leader_exec_waiting_seconds_total", "").unwrap() > 0.0);
    assert_eq!(
        sample(&waiting, "leader_exec_leading_seconds_total", ""),
        Some(0.0)
    );
    assert!(sample(&waiting, "leader_exec_build_info", "version=").is_some());

    // X's job ends: A leads.
    std::fs::write(scratch.path("x-go"), "").unwrap();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut leading = String::new();
    assert!(wait_for(Duration::from_secs(5), || {
        leading = scrape(port);
        sample(&leading, "leader_exec_command_running", "") == Some(1.0)
    }));
    assert_eq!(
        sample(&leading, "leader_exec_leader", ""),
        Some(1.0),
        "{leading}"
    );
    assert_eq!(
        sample(&leading, "leader_exec_token", ""),
        Some(start.token() as f64)
    );
    assert_eq!(
        sample(&leading, "leader_exec_elections_won_total", ""),
        Some(1.0)
    );
    assert_eq!(
        sample(&leading, "leader_exec_command_starts_total", ""),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &leading,
            "leader_exec_step_downs_total",
            "reason=\"deadline\""
        ),
        Some(0.0)
    );
    // The renewal age stays below the deadline and drops back each time a renewal succeeds.
    let mut ages = Vec::new();
    let mut renewals = Vec::new();
    assert!(
        wait_for(Duration::from_secs(5), || {
            let text = scrape(port);
            ages.push(sample(&text, "leader_exec_last_renewal_age_seconds", "").unwrap());
            renewals.push(sample(&text, "leader_exec_renewals_total", "outcome=\"ok\"").unwrap());
            ages.windows(2).any(|w| w[1] < w[0])
        }),
        "the renewal age never reset: {ages:?}"
    );
    assert!(
        ages.iter().all(|age| *age < RENEW_DEADLINE.as_secs_f64()),
        "{ages:?}"
    );
    assert!(renewals.last() > renewals.first(), "{renewals:?}");
    let text = scrape(port);
    assert!(sample(&text, "leader_exec_renewal_duration_seconds_count", "").unwrap() >= 1.0);
    assert!(sample(&text, "leader_exec_deadline_remaining_seconds", "").unwrap() > 0.0);

    // Cut off: A steps down at its deadline and (with --recampaign) stays up, campaigning.
    proxy.cut();
    scratch
        .wait_record("term", "a", Duration::from_secs(10))
        .expect("a's command was not stopped");
    let mut after = String::new();
    assert!(
        wait_for(Duration::from_secs(5), || {
            after = scrape(port);
            sample(&after, "leader_exec_leader", "") == Some(0.0)
                && sample(&after, "leader_exec_command_running", "") == Some(0.0)
        }),
        "{after}"
    );
    assert_eq!(
        sample(
            &after,
            "leader_exec_step_downs_total",
            "reason=\"deadline\""
        ),
        Some(1.0),
        "{after}"
    );
    for reason in ["expired", "key_deleted", "signal", "command_exited"] {
        assert_eq!(
            sample(
                &after,
                "leader_exec_step_downs_total",
                &format!("reason=\"{reason}\"")
            ),
            Some(0.0),
            "{reason}: {after}"
        );
    }
    assert!(
        sample(&after, "leader_exec_renewals_total", "outcome=\"error\"").unwrap()
            + sample(&after, "leader_exec_renewals_total", "outcome=\"timeout\"").unwrap()
            >= 1.0,
        "{after}"
    );
    assert!(sample(&after, "leader_exec_leading_seconds_total", "").unwrap() > 0.0);
    assert!(a.running(), "{}", a.stderr());
    // OpenMetrics when asked for.
    let (status, open) = get(port, "/metrics", Some("application/openmetrics-text")).unwrap();
    assert_eq!(status, 200);
    assert!(open.ends_with("# EOF\n"), "{open}");
}

/// Polls /leader every few milliseconds on a thread, recording (wall-clock ns, status) at each
/// change of status, until it has seen 503, 200, 503 (or `stop` is set).
/// Polls /leader and records each change of its status, starting from `first` (a status the
/// caller saw before starting it, so that a watcher thread scheduled late on a loaded machine
/// still has the first status), until three statuses are recorded or `stop` is set.
fn watch_leader(
    port: u16,
    first: (u128, u16),
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(u128, u16)>> {
    std::thread::spawn(move || {
        let mut changes: Vec<(u128, u16)> = vec![first];
        while !stop.load(Ordering::SeqCst) && changes.len() < 3 {
            let before = now_ns();
            if let Some((status, body)) = get(port, "/leader", None) {
                let json: Value = serde_json::from_str(body.trim()).expect("one JSON line");
                assert_eq!(json["lease"], "flip");
                let role = json["role"].as_str().unwrap();
                assert_eq!(status == 200, role == "leader", "{status} {body}");
                if changes.last().map(|c| c.1) != Some(status) {
                    // The status held at some instant between sending and reading the answer.
                    changes.push((before, status));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        changes
    })
}

#[test]
fn the_leader_endpoint_flips_when_the_command_starts_and_stops() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");

    let _x = Instance::start(
        &lease_args(&endpoint, "flip"),
        &until_file(&scratch, "x", "x-go"),
    );
    scratch
        .wait_record("start", "x", Duration::from_secs(10))
        .expect("x started");
    // A holds the lease a while after its command ends, so /leader can be seen answering 503.
    let mut args = http_args(&endpoint, "flip", &listen);
    args.extend(["--identity", "host-a:1", "--hold-at-least", "30s"]);
    let mut a = Instance::start(&args, &until_file(&scratch, "a", "a-go"));
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/flip/")
            .len()
            == 2),
        "a did not join the line"
    );
    let asked = now_ns();
    let (status, body) = get(port, "/leader", None).unwrap();
    assert_eq!(status, 503, "{body}");
    let json: Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(json["role"], "candidate");
    assert_eq!(json["identity"], "host-a:1");
    assert_eq!(json["token"], Value::Null);

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_leader(port, (asked, status), stop.clone());
    std::fs::write(scratch.path("x-go"), "").unwrap();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    assert!(wait_for(Duration::from_secs(5), || get(
        port, "/leader", None
    )
    .is_some_and(|(s, _)| s == 200)));
    let (_, body) = get(port, "/leader", None).unwrap();
    let json: Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(json["token"], start.token());
    assert_eq!(json["role"], "leader");

    std::fs::write(scratch.path("a-go"), "").unwrap();
    let end = scratch
        .wait_record("end", "a", Duration::from_secs(10))
        .expect("a ended");
    assert!(wait_for(Duration::from_secs(5), || get(
        port, "/leader", None
    )
    .is_some_and(|(s, _)| s == 503)));
    let (_, body) = get(port, "/leader", None).unwrap();
    let json: Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(json["role"], "elected", "holding the lease, command gone");
    // The watcher ends by itself once it has seen the 503; a watcher that missed a change would
    // poll for ever: it is stopped after a bound, and the assertion below names what it saw.
    wait_for(Duration::from_secs(5), || watcher.is_finished());
    stop.store(true, Ordering::SeqCst);
    let changes = watcher.join().unwrap();

    let statuses: Vec<u16> = changes.iter().map(|c| c.1).collect();
    assert_eq!(statuses, [503, 200, 503], "{changes:?}");
    let window = RETRY_PERIOD.as_nanos();
    let (up, down) = (changes[1].0, changes[2].0);
    assert!(
        up + window >= start.time() && up <= start.time() + window,
        "200 from {} ms after the command started",
        (up as i128 - start.time() as i128) / 1_000_000
    );
    assert!(
        down + window >= end.time() && down <= end.time() + window,
        "503 from {} ms after the command ended",
        (down as i128 - end.time() as i128) / 1_000_000
    );
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(a.wait(Duration::from_secs(10)).is_some());
}

#[test]
fn healthz_fails_while_a_black_holed_leader_is_still_stopping_its_command() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let proxied = proxy.endpoint();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // A command that ignores TERM: the leader is stepping down for the whole --kill-after.
    let args = [
        "-v",
        "--endpoints",
        &proxied,
        "--lease",
        "health",
        "--ttl",
        "6s",
        "--renew-deadline",
        "1500ms",
        "--retry-period",
        "300ms",
        "--kill-after",
        "4s",
        "--http",
        &listen,
    ];
    let ignores_term = "trap '' TERM; while :; do sleep 0.05; done";
    let mut a = Instance::start(&args, &scratch.job("a", ignores_term));
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    assert!(wait_for(Duration::from_secs(5), || get(
        port, "/healthz", None
    )
    .is_some_and(|(s, _)| s == 200)));
    let (_, body) = get(port, "/healthz", None).unwrap();
    assert!(body.contains("\"status\":\"ok\""), "{body}");

    proxy.freeze();
    let mut unhealthy = None;
    assert!(
        wait_for(Duration::from_secs(10), || {
            unhealthy = get(port, "/healthz", None).filter(|(s, _)| *s == 500);
            unhealthy.is_some()
        }),
        "/healthz never failed: {}",
        a.stderr()
    );
    // Seen while the command was still running: before the SIGKILL at the end of --kill-after.
    assert!(group_alive(start.pid()), "the command was already gone");
    let body = unhealthy.unwrap().1;
    let json: Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(json["status"], "renewal overdue");
    assert_eq!(json["role"], "stepping-down");
    assert!(
        json["last_renewal_age_seconds"].as_f64().unwrap() > 1.5,
        "{body}"
    );
    assert_eq!(a.wait(Duration::from_secs(15)), Some(75), "{}", a.stderr());
}

#[test]
fn a_port_that_cannot_be_bound_is_exit_125_before_campaigning() {
    let etcd = Etcd::start();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let endpoint = etcd.endpoint();
    let mut a = Instance::start(&http_args(&endpoint, "bind", &listen), &["true".into()]);
    assert_eq!(a.wait(Duration::from_secs(10)), Some(125));
    assert!(a.stderr().contains("--http"), "{}", a.stderr());
    assert!(etcd.keys("/leader-exec/").is_empty());
}

#[test]
fn the_metrics_file_is_always_whole_and_keeps_the_last_outcome() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let file = scratch.path("job.prom");
    let file_arg = path_str(&file);

    // A reader races the writer for the whole test: every read is a whole file.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    assert!(
                        text.starts_with("# HELP leader_exec_")
                            && text.ends_with("\n")
                            && text.contains("leader_exec_last_success_timestamp_seconds{"),
                        "a partial file: {text:?}"
                    );
                    reads += 1;
                }
            }
            reads
        })
    };
    let run = |command: &[&str], extra: &[&str]| {
        let mut args = lease_args(&endpoint, "file");
        args.extend(["--metrics-file", &file_arg]);
        args.extend(extra);
        let mut instance = Instance::start(
            &args,
            &command.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        );
        let code = instance.wait(Duration::from_secs(20));
        (
            code,
            std::fs::read_to_string(&file).unwrap(),
            instance.stderr(),
        )
    };

    // A failed run: led, exit 3, no success yet.
    let (code, text, stderr) = run(&["sh", "-c", "sleep 0.3; exit 3"], &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(
        sample(&text, "leader_exec_run_exit_code", "lease=\"file\""),
        Some(3.0),
        "{text}"
    );
    assert_eq!(sample(&text, "leader_exec_run_led", ""), Some(1.0));
    assert!(sample(&text, "leader_exec_run_token", "").unwrap() > 0.0);
    assert_eq!(
        sample(&text, "leader_exec_last_success_timestamp_seconds", ""),
        Some(0.0)
    );
    assert_eq!(sample(&text, "leader_exec_last_exit_code", ""), Some(3.0));
    let start = sample(&text, "leader_exec_run_start_timestamp_seconds", "").unwrap();
    let end = sample(&text, "leader_exec_run_end_timestamp_seconds", "").unwrap();
    let duration = sample(&text, "leader_exec_run_duration_seconds", "").unwrap();
    assert!(
        end >= start && duration >= 0.3 && (end - start - duration).abs() < 0.01,
        "{text}"
    );

    // A successful run sets the last success.
    let before = now_ns() as f64 / 1e9;
    let (code, text, stderr) = run(&["true"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let success = sample(&text, "leader_exec_last_success_timestamp_seconds", "").unwrap();
    assert!(success >= before - 1.0, "{text}");
    assert_eq!(sample(&text, "leader_exec_run_exit_code", ""), Some(0.0));

    // A run that stands by (another instance leads, --no-wait) keeps that success time.
    let _holder = Instance::start(
        &lease_args(&endpoint, "file"),
        &scratch.job("h", "sleep 30"),
    );
    scratch
        .wait_record("start", "h", Duration::from_secs(10))
        .expect("holder started");
    let (code, text, stderr) = run(&["true"], &["--no-wait"]);
    assert_eq!(code, Some(124), "{stderr}");
    assert_eq!(
        sample(&text, "leader_exec_run_led", ""),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "leader_exec_run_token", ""), Some(0.0));
    assert_eq!(sample(&text, "leader_exec_run_exit_code", ""), Some(124.0));
    assert_eq!(
        sample(&text, "leader_exec_last_success_timestamp_seconds", ""),
        Some(success)
    );

    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn an_unwritable_metrics_file_is_exit_125_before_campaigning() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let missing = path_str(&scratch.path("no-such-dir/job.prom"));
    let mut args = lease_args(&endpoint, "nofile");
    args.extend(["--metrics-file", &missing]);
    let mut a = Instance::start(&args, &["true".into()]);
    assert_eq!(a.wait(Duration::from_secs(10)), Some(125));
    assert!(a.stderr().contains("--metrics-file"), "{}", a.stderr());
    assert!(etcd.keys("/leader-exec/").is_empty());
}

#[test]
fn status_all_lists_every_lease_with_its_leader() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut tokens = Vec::new();
    let mut instances = Vec::new();
    for (lease, identity) in [
        ("charlie", "host-c:3"),
        ("alpha", "host-a:1"),
        ("bravo", "host-b\x1b[2J:2"),
    ] {
        let mut args = lease_args(&endpoint, lease);
        args.extend(["--identity", identity]);
        if lease == "bravo" {
            // Control characters cannot be given as --identity: write such a candidate directly.
            args.retain(|a| *a != identity && *a != "--identity");
        }
        instances.push(Instance::start(&args, &scratch.job(lease, "sleep 30")));
        tokens.push(
            scratch
                .wait_record("start", lease, Duration::from_secs(10))
                .expect("started")
                .token(),
        );
    }
    // A waiter in line for alpha, and a hostile identity on bravo's leader key.
    instances.push(Instance::start(
        &lease_args(&endpoint, "alpha"),
        &scratch.job("w", "true"),
    ));
    assert!(wait_for(Duration::from_secs(10), || etcd
        .keys("/leader-exec/alpha/")
        .len()
        == 2));
    let bravo_key = etcd.keys("/leader-exec/bravo/").pop().unwrap();
    let lease_id = bravo_key.rsplit('/').next().unwrap();
    let out = etcd.ctl(&["put", &bravo_key, "host-b\x1b[2J:2", "--lease", lease_id]);
    assert!(out.status.success(), "{out:?}");
    // An occurrence of charlie that an earlier leader started and never finished.
    let record = r#"{"state":"started","token":1,"identity":"old-host:9","started_at":"2026-11-29T02:00:00Z"}"#;
    let out = etcd.ctl(&["put", "/leader-exec/.occurrences/charlie/night-1", record]);
    assert!(out.status.success(), "{out:?}");

    let out = Cmd::bare()
        .args(["status", "--all", "--endpoints", &endpoint])
        .output();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("LEASE"), "{text}");
    assert!(
        lines[1].starts_with("alpha ") && lines[1].contains("host-a:1"),
        "{text}"
    );
    assert!(lines[1].contains(&format!(" {} ", tokens[1])), "{text}");
    assert!(
        lines[1].split_whitespace().nth(4) == Some("2"),
        "two candidates: {text}"
    );
    assert!(
        lines[2].starts_with("bravo ") && lines[2].contains("host-b\\x1b[2J:2"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "unescaped: {text:?}");
    assert!(
        lines[3].starts_with("charlie ") && lines[3].contains("host-c:3"),
        "{text}"
    );
    assert!(lines[3].ends_with("1 !"), "{text}");
    assert!(
        lines[4].contains("! night-1 unfinished: started by token 1 (old-host:9)"),
        "{text}"
    );
    assert_eq!(lines.len(), 5, "{text}");

    let out = Cmd::bare()
        .args(["status", "--all", "--json", "--endpoints", &endpoint])
        .output();
    assert_eq!(out.status.code(), Some(0));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let leases = json["leases"].as_array().unwrap();
    let names: Vec<&str> = leases
        .iter()
        .map(|l| l["lease"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "bravo", "charlie"]);
    assert_eq!(leases[0]["leader"]["identity"], "host-a:1");
    assert_eq!(leases[0]["leader"]["token"], tokens[1]);
    assert_eq!(leases[0]["candidates"], 2);
    assert_eq!(leases[1]["leader"]["identity"], "host-b\x1b[2J:2");
    assert_eq!(leases[1]["leader"]["token"], tokens[2]);
    assert_eq!(leases[2]["leader"]["token"], tokens[0]);
    let left = leases[2]["leader"]["ttl_remaining_seconds"]
        .as_u64()
        .unwrap();
    assert!((1..=3).contains(&left), "{json}");
    assert_eq!(leases[2]["occurrences"], 1);
    assert_eq!(leases[2]["unfinished_occurrences"][0]["id"], "night-1");
    assert_eq!(leases[0]["unfinished_occurrences"], serde_json::json!([]));
}
