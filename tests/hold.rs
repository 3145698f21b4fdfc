//! `leader-exec hold` / `leader-exec release`: a slot held with no process behind it (rolling
//! reboots). Store-neutral facts only: exit codes, the tokens `hold` printed and the commands
//! recorded, what `status` and `check` say, and when a waiting command started.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;
use crate::holders::{
    assert_at_most, gated, holder_args, holder_job, open_gate, starts, waits_in_line,
};

/// Runs a subcommand (`hold`, `release`, `status`, `check`) against `endpoint` to its end:
/// exit code, stdout, stderr.
fn run(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    Cmd::at(endpoint).args(args).run()
}

/// `hold --lease LEASE --max-holders N --for DUR --identity ID` plus `extra`: exit code, the
/// token it printed (0 when none), stderr.
fn hold(
    endpoint: &str,
    lease: &str,
    n: &str,
    dur: &str,
    id: &str,
    extra: &[&str],
) -> (i32, i64, String) {
    let mut args = vec![
        "hold",
        "--lease",
        lease,
        "--max-holders",
        n,
        "--for",
        dur,
        "--identity",
        id,
        "--ttl",
        "3s",
    ];
    args.extend(extra);
    let (code, out, err) = run(endpoint, &args);
    (code, out.trim().parse().unwrap_or(0), err)
}

fn release(endpoint: &str, lease: &str, id: &str) -> (i32, String) {
    let (code, _, err) = run(endpoint, &["release", "--lease", lease, "--identity", id]);
    (code, err)
}

fn status_json(endpoint: &str, lease: &str) -> Value {
    let (code, out, err) = run(endpoint, &["status", "--lease", lease, "--json"]);
    assert!(code == 0 || code == 3, "status: {code} {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Two hosts hold (N = 2) and exit; with no process behind them the slots stay held (a third
/// host's `hold --no-wait` and a run-form waiter are kept out, past several --ttl); holding
/// again is a no-op; `status` shows both with identity and bound; `check` accepts a held
/// token; `release` lets the waiter in, with a higher token; a second `release` says none (3).
pub fn two_hosts_hold_a_third_waits_and_release_lets_it_in<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let (code, a, err) = hold(&endpoint, "reboot", "2", "120s", "host-a", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let (code, b, err) = hold(&endpoint, "reboot", "2", "120s", "host-b", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    assert!(a > 0 && b > a, "{}: tokens {a} then {b}", S::NAME);

    // Idempotent: the same slot, the same token.
    let (code, again, err) = hold(&endpoint, "reboot", "2", "120s", "host-b", &[]);
    assert_eq!((code, again), (0, b), "{}: {err}", S::NAME);

    // Both full: a third host is refused at once, and keeps nothing.
    let (code, _, err) = hold(&endpoint, "reboot", "2", "120s", "host-c", &["--no-wait"]);
    assert_eq!(code, 124, "{}: {err}", S::NAME);
    let (code, _, err) = hold(
        &endpoint,
        "reboot",
        "2",
        "120s",
        "host-c",
        &["--wait-timeout", "1s"],
    );
    assert_eq!(code, 124, "{}: {err}", S::NAME);

    // A run-form waiter stays out while nobody runs behind the slots, past several --ttl.
    let args = holder_args(&endpoint, "reboot", "2");
    let mut c = Instance::start(&args, &holder_job(&scratch, "c", &gated(&scratch, "c")));
    waits_in_line(&store, "reboot", 3, &c);
    std::thread::sleep(TTL * 3);
    assert!(
        scratch.wait_record("start", "c", Duration::ZERO).is_none(),
        "{}: c started beside two held slots",
        S::NAME
    );

    let status = status_json(&endpoint, "reboot");
    let holders = status["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{}: {status}", S::NAME);
    let ids: Vec<&str> = holders
        .iter()
        .map(|h| h["identity"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"host-a") && ids.contains(&"host-b"),
        "{status}"
    );
    for holder in holders {
        assert_eq!(holder["held_for_seconds"], 120, "{}: {status}", S::NAME);
        assert_eq!(holder["command"], "held", "{}: {status}", S::NAME);
    }
    let (code, out, err) = run(&endpoint, &["status", "--all", "--json"]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let all: Value = serde_json::from_str(&out).unwrap();
    let lease = &all["leases"][0];
    assert_eq!(lease["lease"], "reboot", "{out}");
    for holder in lease["holders"].as_array().unwrap() {
        assert_eq!(holder["held_for_seconds"], 120, "{}: {out}", S::NAME);
    }
    let (code, _, err) = run(
        &endpoint,
        &["check", "--lease", "reboot", "--token", &a.to_string()],
    );
    assert_eq!(code, 0, "{}: check of a held token: {err}", S::NAME);

    // A plain resign cannot be answered by a slot with no process: it says so at once.
    let asked = Instant::now();
    let (code, _, err) = run(&endpoint, &["resign", "--lease", "reboot"]);
    assert_eq!(code, 124, "{}: {err}", S::NAME);
    assert!(err.contains("leader-exec release"), "{}: {err}", S::NAME);
    assert!(asked.elapsed() < Duration::from_secs(8), "{}", S::NAME);

    // host-a is back: its release lets c in.
    let (code, err) = release(&endpoint, "reboot", "host-a");
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let started = scratch
        .wait_record("start", "c", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("{}: c did not start after the release", S::NAME));
    assert!(
        started.token() > b,
        "{}: c's token {} after {b}",
        S::NAME,
        started.token()
    );
    // The election still reads as N = 2 with host-b's slot among its holders: nothing of the
    // released slot is left (on etcd, its --max-holders marker went with its key).
    let status = status_json(&endpoint, "reboot");
    assert_eq!(status["max_holders"], 2, "{}: {status}", S::NAME);
    let held: Vec<&Value> = status["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["held_for_seconds"] == 120)
        .collect();
    assert_eq!(held.len(), 1, "{}: {status}", S::NAME);
    assert_eq!(held[0]["identity"], "host-b", "{}: {status}", S::NAME);
    let (code, err) = release(&endpoint, "reboot", "host-a");
    assert_eq!(code, 3, "{}: a second release: {err}", S::NAME);
    let (code, err) = release(&endpoint, "reboot", "host-never");
    assert_eq!(code, 3, "{}: {err}", S::NAME);

    open_gate(&scratch, "c");
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
    // resign --force clears a held slot too; nothing is left to release then.
    let (code, _, err) = run(
        &endpoint,
        &[
            "resign",
            "--lease",
            "reboot",
            "--token",
            &b.to_string(),
            "--force",
        ],
    );
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let (code, err) = release(&endpoint, "reboot", "host-b");
    assert_eq!(code, 3, "{}: {err}", S::NAME);
    let status = status_json(&endpoint, "reboot");
    assert_eq!(
        status["holders"].as_array().map(Vec::len),
        Some(0),
        "{}: {status}",
        S::NAME
    );
}

/// A held slot whose bound runs out lets a waiting command in after DUR and not before; its
/// token is above the held one.
pub fn an_expired_bound_lets_the_waiter_in_after_dur_and_not_before<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let dur = Duration::from_secs(8);
    let before = now_ns();
    // Trying once takes a free slot.
    let (code, held, err) = hold(&endpoint, "bounded", "1", "8s", "host-a", &["--no-wait"]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let after = now_ns();
    let mut w = Instance::start(
        &lease_args(&endpoint, "bounded"),
        &holder_job(&scratch, "w", "true"),
    );
    let started = scratch
        .wait_record("start", "w", dur + Duration::from_secs(20))
        .unwrap_or_else(|| panic!("{}: the waiter never started: {}", S::NAME, w.stderr()));
    assert!(
        started.time() >= before + dur.as_nanos(),
        "{}: started {} ms after hold began, before --for 8s",
        S::NAME,
        (started.time() - before) / 1_000_000
    );
    assert!(
        started.time() <= after + (dur + Duration::from_secs(12)).as_nanos(),
        "{}: started {} ms after hold ended",
        S::NAME,
        (started.time() - after) / 1_000_000
    );
    assert!(
        started.token() > held,
        "{}: {} after {held}",
        S::NAME,
        started.token()
    );
    assert_eq!(w.wait(Duration::from_secs(10)), Some(0), "{}", w.stderr());
    // Ended by its bound: nothing to release.
    let (code, err) = release(&endpoint, "bounded", "host-a");
    assert_eq!(code, 3, "{}: {err}", S::NAME);
}

/// N counts held slots and run-form holders alike: with one command running and one slot
/// held (N = 2) the next command waits; it starts when the command ends, the next one when
/// the slot is released; tokens rise across both kinds.
pub fn held_slots_and_run_form_holders_never_exceed_n<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "mixed", "2");
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut a = start("a");
    let a_started = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let (_watch, lines) = crate::holders_ops::watch(&endpoint, "mixed", true);
    let (code, x, err) = hold(&endpoint, "mixed", "2", "120s", "host-x", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    // watch shows the held slot with its identity and bound, beside the running holder.
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let shown = loop {
        let Ok(line) = lines.recv_timeout(until.saturating_duration_since(Instant::now())) else {
            break false;
        };
        let value: Value = serde_json::from_str(&line).unwrap();
        let held = value["holders"].as_array().is_some_and(|holders| {
            holders.iter().any(|h| {
                h["identity"] == "host-x" && h["held_for_seconds"] == 120 && h["token"] == x
            })
        });
        seen.push(line);
        if held {
            break true;
        }
    };
    assert!(
        shown,
        "{}: watch never showed the held slot: {seen:#?}",
        S::NAME
    );
    assert!(
        x > a_started.token(),
        "{}: {x} after {}",
        S::NAME,
        a_started.token()
    );
    let mut c = start("c");
    waits_in_line(&store, "mixed", 3, &c);
    let (code, _, err) = hold(&endpoint, "mixed", "2", "120s", "host-y", &["--no-wait"]);
    assert_eq!(code, 124, "{}: {err}", S::NAME);
    std::thread::sleep(Duration::from_secs(2));
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());

    let t = Instant::now();
    open_gate(&scratch, "a");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    let c_started = scratch
        .wait_record("start", "c", Duration::from_secs(10))
        .expect("c started after a ended");
    assert!(
        c_started.token() > x,
        "{}: {} after {x}",
        S::NAME,
        c_started.token()
    );
    let mut d = start("d");
    waits_in_line(&store, "mixed", 3, &d);
    std::thread::sleep(Duration::from_secs(1));
    assert!(scratch.wait_record("start", "d", Duration::ZERO).is_none());
    let released_at = now_ns();
    let (code, err) = release(&endpoint, "mixed", "host-x");
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let d_started = scratch
        .wait_record("start", "d", Duration::from_secs(10))
        .expect("d started after the release");
    assert!(d_started.token() > c_started.token());
    assert!(
        d_started.time() > released_at,
        "{}: d started before the release",
        S::NAME
    );
    assert!(t.elapsed() < Duration::from_secs(60));
    open_gate(&scratch, "c");
    open_gate(&scratch, "d");
    for (name, instance) in [("c", &mut c), ("d", &mut d)] {
        assert_eq!(
            instance.wait(Duration::from_secs(10)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_at_most(&history, 2);
    let order: Vec<&str> = starts(&history).iter().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["a", "c", "d"], "{history:#?}");
    // a, c and d each ran alone beside the held slot: none overlapped another.
    let end = |name: &str| {
        scratch
            .wait_record("end", name, Duration::ZERO)
            .unwrap()
            .time()
    };
    assert!(c_started.time() > end("a"), "{history:#?}");
}

/// A held slot is in the store, not in a session or a process: a store restart leaves it held
/// (a second host is refused, `status` and `check` still know it), and `release` still finds it.
pub fn a_store_restart_leaves_a_held_slot_held<S: Store>() {
    let mut store = S::start();
    let endpoint = store.endpoint();
    let (code, token, err) = hold(&endpoint, "kept", "1", "120s", "host-a", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    store.restart();
    let (code, _, err) = hold(&endpoint, "kept", "1", "120s", "host-b", &["--no-wait"]);
    assert_eq!(code, 124, "{}: after the restart: {err}", S::NAME);
    let status = status_json(&endpoint, "kept");
    assert_eq!(
        status["leader"]["identity"],
        "host-a",
        "{}: {status}",
        S::NAME
    );
    assert_eq!(status["leader"]["token"], token, "{}: {status}", S::NAME);
    let (code, _, err) = run(
        &endpoint,
        &["check", "--lease", "kept", "--token", &token.to_string()],
    );
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let (code, err) = release(&endpoint, "kept", "host-a");
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let (code, next, err) = hold(&endpoint, "kept", "1", "120s", "host-b", &["--no-wait"]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    assert!(next > token, "{}: {next} after {token}", S::NAME);
}

/// With N = 2 and both slots held, one with a short bound: the waiter (the first behind both
/// holders, which times held slots) starts after that bound and not before, while the other
/// slot stays held.
pub fn with_two_slots_the_shorter_bound_lets_the_waiter_in<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let dur = Duration::from_secs(6);
    let (code, long, err) = hold(&endpoint, "pair", "2", "120s", "host-a", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let before = now_ns();
    let (code, short, err) = hold(&endpoint, "pair", "2", "6s", "host-b", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let args = holder_args(&endpoint, "pair", "2");
    let mut w = Instance::start(&args, &holder_job(&scratch, "w", "true"));
    let started = scratch
        .wait_record("start", "w", dur + Duration::from_secs(20))
        .unwrap_or_else(|| panic!("{}: the waiter never started: {}", S::NAME, w.stderr()));
    assert!(
        started.time() >= before + dur.as_nanos(),
        "{}: started {} ms after the 6s hold began",
        S::NAME,
        (started.time() - before) / 1_000_000
    );
    assert!(started.token() > short && short > long, "{}", S::NAME);
    assert_eq!(w.wait(Duration::from_secs(10)), Some(0), "{}", w.stderr());
    let (code, err) = release(&endpoint, "pair", "host-b");
    assert_eq!(
        code,
        3,
        "{}: host-b's slot ended by its bound: {err}",
        S::NAME
    );
    let (code, err) = release(&endpoint, "pair", "host-a");
    assert_eq!(code, 0, "{}: host-a's slot still held: {err}", S::NAME);
}

/// A held slot nobody waited behind, past its bound: on etcd its lease ran out on etcd's clock
/// and the slot is gone (`release` answers 3); on PostgreSQL and ZooKeeper it still keeps
/// waiters out until one has seen it unchanged for DUR, so `status` still shows it and `release`
/// still removes it (0), whatever the server's wall clock says. Either way a fresh `--no-wait`
/// instance then gets in at once.
pub fn release_after_the_bound_frees_a_slot_that_still_blocks<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let (code, token, err) = hold(&endpoint, "late", "1", "2s", "host-a", &["--no-wait"]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    std::thread::sleep(Duration::from_millis(3500));
    let gone = S::NAME == "etcd";
    let status = status_json(&endpoint, "late");
    if gone {
        assert!(status["leader"].is_null(), "{}: {status}", S::NAME);
    } else {
        assert_eq!(status["leader"]["token"], token, "{}: {status}", S::NAME);
        assert_eq!(status["leader"]["command"], "held", "{}: {status}", S::NAME);
        assert_eq!(
            status["leader"]["held_for_seconds"],
            2,
            "{}: {status}",
            S::NAME
        );
    }
    let (code, err) = release(&endpoint, "late", "host-a");
    assert_eq!(code, if gone { 3 } else { 0 }, "{}: {err}", S::NAME);
    let mut args = lease_args(&endpoint, "late");
    args.push("--no-wait");
    let mut fresh = Instance::start(&args, &holder_job(&scratch, "f", "true"));
    let started = scratch
        .wait_record("start", "f", Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "{}: the fresh instance never started: {}",
                S::NAME,
                fresh.stderr()
            )
        });
    assert!(
        started.token() > token,
        "{}: {} after {token}",
        S::NAME,
        started.token()
    );
    assert_eq!(
        fresh.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        fresh.stderr()
    );
}

/// A held slot has no /metrics of its own: a run-form instance of the lease with `--http`
/// exports it as `leader_exec_held_slot{identity,token}` with its bound in seconds, and drops it
/// once `release` gave it back.
pub fn metrics_show_a_held_slot_until_it_is_released<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let (code, a, err) = hold(&endpoint, "rm", "2", "120s", "host-a", &[]);
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = holder_args(&endpoint, "rm", "2");
    args.extend(["--http", &listen]);
    let mut c = Instance::start(&args, &holder_job(&scratch, "c", &gated(&scratch, "c")));
    scratch
        .wait_record("start", "c", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("{}: c did not take the second slot", S::NAME));

    let series = format!("identity=\"host-a\",lease=\"rm\",token=\"{a}\"");
    let held = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("leader_exec_held_slot{"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut text = String::new();
    assert!(
        wait_for(TTL * 4, || {
            text = crate::metrics::scrape(port);
            !held(&text).is_empty()
        }),
        "{}: no held slot on /metrics:\n{text}",
        S::NAME
    );
    let lines = held(&text);
    assert_eq!(lines.len(), 1, "{}: {lines:?}", S::NAME);
    let line = &lines[0];
    let labels = line
        .strip_prefix("leader_exec_held_slot{")
        .and_then(|l| l.split_once('}'))
        .map(|(labels, value)| {
            let mut labels: Vec<&str> = labels.split(',').collect();
            labels.sort_unstable();
            (labels.join(","), value.trim().parse::<f64>().ok())
        });
    assert_eq!(labels, Some((series, Some(120.0))), "{}: {line}", S::NAME);

    let (code, err) = release(&endpoint, "rm", "host-a");
    assert_eq!(code, 0, "{}: {err}", S::NAME);
    assert!(
        wait_for(TTL * 4, || {
            text = crate::metrics::scrape(port);
            held(&text).is_empty()
        }),
        "{}: the released slot stays on /metrics:\n{text}",
        S::NAME
    );
    open_gate(&scratch, "c");
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
}
