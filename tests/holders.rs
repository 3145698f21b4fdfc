//! `--max-holders N`: up to N instances of one lease run their command at once, never more;
//! every holder keeps a single leader's rules; tokens strictly increase; instances that
//! disagree on N are refused. Store-neutral facts only: what the children recorded, exit codes,
//! what `status` and `check` say, how many claims the store holds.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
// Their old home: tests that still import them from here keep building.
#[allow(unused_imports)]
pub use crate::harness::{gated, open_gate};

/// `lease_args` with `--max-holders n`.
pub fn holder_args<'a>(endpoint: &'a str, lease: &'a str, n: &'a str) -> Vec<&'a str> {
    let mut args = lease_args(endpoint, lease);
    args.extend(["--max-holders", n]);
    args
}

/// A `sh -c` job for holders: records `start NAME TOKEN PID MAX_HOLDERS NS`, and `overlap NAME
/// COUNT NS` if at that instant `$LEADER_MAX_HOLDERS` or more earlier jobs still have a process
/// alive (zombies aside; `$pids` lists `NAME PID START` lines, a job may add its own children
/// with `register NAME PID`, see `JOB_FUNCTIONS`); runs `body`; records `end NAME NS`.
pub fn holder_job(scratch: &Scratch, name: &str, body: &str) -> Vec<String> {
    let script = format!(
        r#"h='{h}'; pids='{p}'; export h pids
{JOB_FUNCTIONS}
echo "start {name} $LEADER_TOKEN $$ $LEADER_MAX_HOLDERS $(date +%s%N)" >> "$h"
alive=$(touch "$pids"; while read -r n p t; do
  if started "$p" && [ "$st" = "$t" ]; then echo "$n"; fi
done < "$pids" | sort -u | wc -l)
if [ "$alive" -ge "$LEADER_MAX_HOLDERS" ]; then echo "overlap {name} $alive $(date +%s%N)" >> "$h"; fi
register {name} $$
{body}
echo "end {name} $(date +%s%N)" >> "$h"
"#,
        h = scratch.history_path().display(),
        p = scratch.path("pids").display(),
    );
    vec!["sh".into(), "-c".into(), script]
}

/// `args` with `--identity identity`.
pub fn with_identity<'a>(args: &[&'a str], identity: &'a str) -> Vec<&'a str> {
    let mut args = args.to_vec();
    args.extend(["--identity", identity]);
    args
}

/// A holder candidate `name` started with `args` and `--identity identity`, its job the body
/// `body` makes for it (`gated`, say).
pub fn start_holder(
    args: &[&str],
    scratch: &Scratch,
    name: &str,
    identity: &str,
    body: fn(&Scratch, &str) -> String,
) -> Instance {
    Instance::start(
        &with_identity(args, identity),
        &holder_job(scratch, name, &body(scratch, name)),
    )
}

/// The safety property with `n` holders, on a history of `holder_job` records: no job found `n`
/// earlier jobs alive at its start; by the recorded times never more than `n` commands ran at
/// once; tokens strictly increase in start order; every command saw `LEADER_MAX_HOLDERS=n`.
pub fn assert_at_most(history: &[Record], n: usize) {
    let mut last_token = 0;
    for record in starts(history) {
        assert!(
            record.token() > last_token,
            "token {} after {last_token}: {history:#?}",
            record.token()
        );
        last_token = record.token();
    }
    assert_at_most_running(history, n);
}

/// `assert_at_most` but for token order: where several holders are let in at one instant,
/// their commands' start records may come in any order.
pub fn assert_at_most_running(history: &[Record], n: usize) {
    let overlaps: Vec<_> = history.iter().filter(|r| r.kind == "overlap").collect();
    assert!(overlaps.is_empty(), "more than {n} at once: {history:#?}");
    let mut events: Vec<(u128, i32)> = Vec::new();
    for record in history {
        match record.kind.as_str() {
            "start" => {
                assert_eq!(
                    record.fields[2],
                    n.to_string(),
                    "LEADER_MAX_HOLDERS: {record:?}"
                );
                events.push((record.time(), 1));
            }
            "end" => events.push((record.time(), -1)),
            _ => {}
        }
    }
    // Ends before starts at one instant: an end recorded at the same nanosecond came first.
    events.sort();
    let mut running = 0;
    for (time, step) in events {
        running += step;
        assert!(
            running <= n as i32,
            "{running} commands at {time}: {history:#?}"
        );
    }
}

pub fn starts(history: &[Record]) -> Vec<&Record> {
    history.iter().filter(|r| r.kind == "start").collect()
}

pub fn waits_in_line<S: Store>(store: &S, lease: &str, claims: usize, waiter: &Instance) {
    assert!(
        wait_for(Duration::from_secs(15), || campaigning(waiter)
            && store.claims(lease) == claims),
        "{}: {} claims on {lease}, not {claims}: {:?}\n{}",
        S::NAME,
        store.claims(lease),
        store.held(),
        waiter.stderr()
    );
}

pub fn two_hold_at_once_the_third_waits_and_tokens_rise<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "pair", "2");
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut a = start("a");
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = start("b");
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started while a holds");
    let mut c = start("c");
    waits_in_line(&store, "pair", 3, &c);
    let mut d = start("d");
    waits_in_line(&store, "pair", 4, &d);
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());
    assert!(scratch.wait_record("start", "d", Duration::ZERO).is_none());
    assert!(c.running() && d.running());

    // a ends: c, first in line, takes its place; d waits behind b and c.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    scratch
        .wait_record("start", "c", Duration::from_secs(10))
        .expect("c started after a ended");
    assert!(scratch.wait_record("start", "d", Duration::ZERO).is_none());
    open_gate(&scratch, "b");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    scratch
        .wait_record("start", "d", Duration::from_secs(10))
        .expect("d started after b ended");
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
    assert_eq!(order, ["a", "b", "c", "d"], "{history:#?}");
    let end = |name: &str| {
        scratch
            .wait_record("end", name, Duration::ZERO)
            .unwrap()
            .time()
    };
    let start_of = |name: &str| {
        scratch
            .wait_record("start", name, Duration::ZERO)
            .unwrap()
            .time()
    };
    // Two ran at once: b started before a ended.
    assert!(start_of("b") < end("a"), "{history:#?}");
    assert!(start_of("c") > end("a"), "{history:#?}");
    assert!(start_of("d") > end("b"), "{history:#?}");
    assert!(
        wait_for(Duration::from_secs(5), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

/// Runs `leader-exec` with `--max-holders n` to its end (at most 30 s: then -1, and it is
/// killed); returns its exit code and stderr.
pub fn run_with(
    endpoint: &str,
    lease: &str,
    n: &str,
    scratch: &Scratch,
    name: &str,
) -> (i32, String) {
    let mut args = vec!["--endpoints", endpoint, "--lease", lease];
    args.extend(FAST);
    args.extend(["--max-holders", n]);
    let mut instance = Instance::start(&args, &holder_job(scratch, name, "true"));
    let code = instance.wait(Duration::from_secs(30)).unwrap_or(-1);
    (code, instance.stderr())
}

pub fn a_different_max_holders_exits_125_naming_both_values_and_leaves_nothing<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "mix", "2");
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut a = start("a");
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = start("b");
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let claims = store.claims("mix");
    assert_eq!(claims, 2, "{:?}", store.held());
    let mut held = store.held();
    held.sort();

    for n in ["3", "1"] {
        let (code, stderr) = run_with(&endpoint, "mix", n, &scratch, &format!("n{n}"));
        assert_eq!(code, 125, "--max-holders {n}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "--max-holders {n}: {stderr}");
        assert!(
            lines[0].contains(&format!("--max-holders {n}"))
                && lines[0].contains("--max-holders 2"),
            "{stderr}"
        );
        assert_eq!(
            store.claims("mix"),
            claims,
            "--max-holders {n}: {:?}",
            store.held()
        );
        let mut now = store.held();
        now.sort();
        assert_eq!(now, held, "--max-holders {n} left something behind");
    }
    // The holders' commands were untouched: still running, the same processes.
    assert!(a.running() && b.running());
    assert!(alive(a_start.pid()) && alive(b_start.pid()));
    let history = scratch.history();
    assert_eq!(starts(&history).len(), 2, "{history:#?}");
    assert!(!history.iter().any(|r| r.kind == "end"), "{history:#?}");

    open_gate(&scratch, "a");
    open_gate(&scratch, "b");
    for (name, instance) in [("a", &mut a), ("b", &mut b)] {
        assert_eq!(
            instance.wait(Duration::from_secs(10)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    assert_at_most(&scratch.history(), 2);
    assert!(
        wait_for(Duration::from_secs(5), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn status_and_check_know_every_holder<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    // An earlier holder, ended: its token is stale.
    let (code, stderr) = run_with(&endpoint, "seen", "2", &scratch, "old");
    assert_eq!(code, 0, "{stderr}");
    let old = scratch
        .wait_record("start", "old", Duration::ZERO)
        .unwrap()
        .token();

    let args = holder_args(&endpoint, "seen", "2");
    let start =
        |name: &str, identity: &'static str| start_holder(&args, &scratch, name, identity, gated);
    let mut a = start("a", "host-a");
    let a_token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let mut b = start("b", "host-b");
    let b_token = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started")
        .token();
    let mut c = start("c", "host-c");
    waits_in_line(&store, "seen", 3, &c);

    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["status", "--lease", "seen", "--json"])
        .run();
    assert_eq!(code, 0, "{stderr}");
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["max_holders"], 2, "{json}");
    assert_eq!(json["candidates"], 3, "{json}");
    let holders = json["holders"].as_array().expect("a holders array");
    let seen: Vec<(&str, i64)> = holders
        .iter()
        .map(|h| {
            (
                h["identity"].as_str().unwrap(),
                h["token"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("host-a", a_token), ("host-b", b_token)], "{json}");
    assert_eq!(json["leader"]["identity"], "host-a", "{json}");
    assert_eq!(json["leader"]["token"], a_token, "{json}");

    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["status", "--lease", "seen"]).run();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("holders:     2 of 2"), "{stdout}");
    for (identity, token) in [("host-a", a_token), ("host-b", b_token)] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&format!("token {token} ")) && l.contains(identity)),
            "no line for {identity}: {stdout}"
        );
    }
    assert!(!stdout.contains("host-c"), "{stdout}");

    let check = |token: i64| {
        Cmd::at(&endpoint)
            .args(["check", "--lease", "seen", "--token", &token.to_string()])
            .run()
            .0
    };
    assert_eq!(check(a_token), 0);
    assert_eq!(check(b_token), 0);
    assert_eq!(check(old), 1);

    for name in ["a", "b", "c"] {
        open_gate(&scratch, name);
    }
    for (name, instance) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        assert_eq!(
            instance.wait(Duration::from_secs(10)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    assert_at_most(&scratch.history(), 2);
}

/// A job that records the signal that stops it (and its end), then exits.
const STOPPABLE: &str = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; echo "end a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;

pub fn a_holder_cut_off_from_the_store_stops_before_a_waiter_takes_its_place<S: Store>() {
    let store = S::start();
    let proxy = Proxy::start(store.addr());
    let scratch = Scratch::new();
    let proxied = store.endpoint_via(&proxy);
    let direct = store.endpoint();
    let mut a = Instance::start(
        &holder_args(&proxied, "cut", "2"),
        &holder_job(&scratch, "a", STOPPABLE),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let args = holder_args(&direct, "cut", "2");
    let mut b = Instance::start(&args, &holder_job(&scratch, "b", &gated(&scratch, "b")));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let mut c = Instance::start(&args, &holder_job(&scratch, "c", "true"));
    waits_in_line(&store, "cut", 3, &c);

    proxy.cut();
    let term = scratch
        .wait_record("term", "a", Duration::from_secs(10))
        .expect("a's command got no signal");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    // c takes a's place once a's claim is gone on the server, never before a's command is.
    assert_eq!(c.wait(Duration::from_secs(15)), Some(0), "{}", c.stderr());
    let c_start = scratch.wait_record("start", "c", Duration::ZERO).unwrap();
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    assert!(c_start.time() > term.time() && c_start.time() > a_end.time());
    // b, the other holder, held throughout.
    assert!(b.running());
    assert!(scratch.wait_record("end", "b", Duration::ZERO).is_none());
    open_gate(&scratch, "b");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert_at_most(&scratch.history(), 2);
}

/// The fast tier's line: 40 instances, beside the tests running at the same time.
pub fn forty_waiters_behind_two_holders_all_hold_in_turn<S: Store>() {
    let store = S::start();
    waiters_behind_two_holders_all_hold_in_turn(&store, 40);
}

/// The full tier's: 200 instances, with the machine to this test alone.
pub fn two_hundred_waiters_behind_two_holders_all_hold_in_turn<S: Store>() {
    let _alone = alone();
    let store = S::start();
    waiters_behind_two_holders_all_hold_in_turn(&store, 200);
}

/// `n` instances with `--max-holders 2` start at once, each running a command that ends at
/// once: every one holds in turn, never more than two at a time, each with its own token, and
/// nothing is left held.
fn waiters_behind_two_holders_all_hold_in_turn<S: Store>(store: &S, n: usize) {
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    // Patient timing: 200 instances share two cores. They all connect at once, and a server
    // that forks a backend per connection (PostgreSQL) may answer the last of them only after
    // the default --connect-timeout; the fact here is the turns, not how fast 200 connect.
    let mut args = patient_lease_args(&endpoint, "crowd");
    args.extend(["--max-holders", "2", "--connect-timeout", "60s"]);
    let mut instances: Vec<Instance> = (0..n)
        .map(|i| Instance::start(&args, &holder_job(&scratch, &format!("j{i}"), "true")))
        .collect();
    for (i, instance) in instances.iter_mut().enumerate() {
        assert_eq!(
            instance.wait(Duration::from_secs(300)),
            Some(0),
            "j{i}: {}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    // Holders let in at one instant may record their starts in either order: the count of
    // commands at once is the fact here, token order is the other tests'.
    assert_at_most_running(&history, 2);
    let mut tokens: Vec<i64> = starts(&history).iter().map(|r| r.token()).collect();
    assert_eq!(tokens.len(), n, "{} started", tokens.len());
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "every holder its own token");
    assert!(
        wait_for(Duration::from_secs(10), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn a_store_restart_leaves_both_holders_holding_and_the_waiter_waiting<S: Store>() {
    // Alone: the premise is a restart the holders outlive, and on two cores shared with two
    // other tests a restarted ZooKeeper (a new JVM) has been seen to answer its first requests
    // only after the 5 s deadline had run out (the holder then stepped down, as it must).
    let _alone = alone();
    let mut store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    // A deadline long enough to cover a restart on a loaded machine.
    let mut args = patient_lease_args(&endpoint, "restart");
    args.extend(["--max-holders", "2"]);
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut a = start("a");
    let a_pid = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .pid();
    let mut b = start("b");
    let b_pid = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started")
        .pid();
    let mut c = start("c");
    waits_in_line(&store, "restart", 3, &c);

    let down = std::time::Instant::now();
    store.restart();
    let outage = down.elapsed();
    assert!(
        outage < Duration::from_secs(4),
        "{} took {outage:?} to restart",
        S::NAME
    );
    // Past the moment the 5 s deadline would have fired without renewals after the restart.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(outage) + Duration::from_secs(2));
    assert!(a.running() && b.running(), "{}\n{}", a.stderr(), b.stderr());
    assert!(
        alive(a_pid) && alive(b_pid),
        "a holder's command was stopped"
    );
    assert!(c.running(), "{}", c.stderr());
    assert!(
        scratch.wait_record("start", "c", Duration::ZERO).is_none(),
        "c ran beside both holders"
    );

    open_gate(&scratch, "a");
    scratch
        .wait_record("start", "c", Duration::from_secs(15))
        .expect("c took a's place");
    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    for (name, instance) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        assert_eq!(
            instance.wait(Duration::from_secs(15)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    assert_at_most(&scratch.history(), 2);
}

pub fn a_holder_killed_with_its_wrapper_is_gone_before_a_waiter_holds<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "crash", "2");
    // a's command leaves a grandchild, listed with the pids every later start checks.
    let orphan = r#"sleep 1000 & register a $!; echo "ready a $! $(date +%s%N)" >> "$h"; wait"#;
    let mut a = Instance::start(&args, &holder_job(&scratch, "a", orphan));
    let ready = scratch
        .wait_record("ready", "a", Duration::from_secs(10))
        .expect("a ready");
    let child = scratch
        .wait_record("start", "a", Duration::ZERO)
        .unwrap()
        .pid();
    let grandchild: i32 = ready.fields[0].parse().unwrap();
    let mut b = Instance::start(&args, &holder_job(&scratch, "b", &gated(&scratch, "b")));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let mut c = Instance::start(&args, &holder_job(&scratch, "c", "true"));
    waits_in_line(&store, "crash", 3, &c);

    a.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_for(Duration::from_secs(2), || !alive(child)
            && !alive(grandchild)),
        "a's group outlived its leader-exec"
    );
    assert_eq!(a.wait(Duration::from_secs(5)), Some(-1));
    // a's command records no end of its own: the instant it was seen gone (at or after the
    // real one) stands in.
    scratch.append(&format!("end a {}", now_ns()));
    // c holds once a's claim is gone on the server (its start checked that none of a's
    // processes was alive: no `overlap` record).
    assert_eq!(c.wait(Duration::from_secs(20)), Some(0), "{}", c.stderr());
    assert!(b.running(), "{}", b.stderr());
    open_gate(&scratch, "b");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert_at_most(&scratch.history(), 2);
    assert!(
        wait_for(Duration::from_secs(10), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

/// Tokens rise across a change of N even for a candidate whose first look comes late. x
/// (`--max-holders` 1) joins the line behind two holders and a waiter with N = 2, and its create's
/// answer is held back (the proxy lets the create through, then freezes: a lost answer, a stall,
/// a paused process); meanwhile the waiter p holds in a holder's place and then every one of them
/// leaves. Once x hears from the store again it finds nobody ahead and leads: with a token above
/// every token handed out before, p's included, although x joined the line before p held.
pub fn a_late_first_look_after_a_change_of_n_leads_with_a_higher_token<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let proxy = Proxy::start(store.addr());
    let lease = "late";
    let args = holder_args(&endpoint, lease, "2");
    let long = Duration::from_secs(10);
    let start =
        |name: &str| Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)));
    let mut a = start("a");
    scratch.wait_record("start", "a", long).expect("a holds");
    let mut b = start("b");
    scratch.wait_record("start", "b", long).expect("b holds");
    let mut p = start("p");
    waits_in_line(&store, lease, 3, &p);

    // x's lease outlasts the freeze: its candidacy stays in line, created before p holds.
    let via = store.endpoint_via(&proxy);
    let identity = "late-x-7f3e9c";
    let x_args = [
        "-v",
        "--endpoints",
        &via,
        "--lease",
        lease,
        "--identity",
        identity,
        "--ttl",
        "20s",
        "--renew-deadline",
        "12s",
        "--retry-period",
        "1s",
        "--kill-after",
        "2s",
    ];
    // MySQL writes an identity as hex (`X'…'`), so its requests carry it that way.
    let needle = match S::NAME {
        "mysql" => identity
            .bytes()
            .map(|b| format!("{b:02X}"))
            .collect::<String>(),
        _ => identity.to_owned(),
    };
    proxy.freeze_after_request_containing(needle.as_bytes());
    let mut x = Instance::start(&x_args, &holder_job(&scratch, "x", &gated(&scratch, "x")));
    assert!(
        wait_for(long, || proxy.tripped()),
        "x's candidacy never reached the store: {}",
        x.stderr()
    );
    // x stands in line behind a, b and p, its create done, its answer held back. (On
    // PostgreSQL the first request that carries the identity is not the one that puts x in
    // line: there x joins once the proxy heals, and the test checks the token rule alone.)
    let joins_first = matches!(S::NAME, "etcd" | "zookeeper");
    assert!(
        !joins_first || wait_for(Duration::from_secs(5), || store.claims(lease) == 4),
        "{}: {} claims on {lease}, not 4: {:?}",
        S::NAME,
        store.claims(lease),
        store.held()
    );

    open_gate(&scratch, "a");
    assert_eq!(a.wait(long), Some(0), "{}", a.stderr());
    let p_start = scratch
        .wait_record("start", "p", long)
        .expect("p took a's place");
    open_gate(&scratch, "b");
    open_gate(&scratch, "p");
    for (name, instance) in [("b", &mut b), ("p", &mut p)] {
        assert_eq!(
            instance.wait(long),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    proxy.heal();

    let x_start = scratch
        .wait_record("start", "x", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("x never led: {}", x.stderr()));
    let history = scratch.history();
    for earlier in starts(&history).iter().filter(|r| r.name != "x") {
        assert!(
            x_start.token() > earlier.token(),
            "x led with token {} after {} had held with {}: {history:#?}",
            x_start.token(),
            earlier.name,
            earlier.token()
        );
    }
    assert!(p_start.token() > 0);
    open_gate(&scratch, "x");
    assert_eq!(x.wait(long), Some(0), "{}", x.stderr());
}
