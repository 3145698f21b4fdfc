//! The operator subcommands with `--max-holders` 2, on every store: `resign` hands over exactly
//! the holder it names, `watch` reports each change of the holder set, `status --all` lists every
//! holder, `--no-wait` names the holders, and `--hold-at-least` and `--recampaign` keep their
//! single-leader meaning for each holder. Facts from outside: what the children recorded, exit
//! codes, what the subcommands print, how many claims the store holds.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::*;
// Their old home: tests that still import them from here keep building.
#[allow(unused_imports)]
pub(crate) use crate::harness::{lines_until, stop_watch, watch};
use crate::holders::{
    assert_at_most, holder_args, holder_job, start_holder, starts, waits_in_line, with_identity,
};

const TEN: Duration = Duration::from_secs(10);

/// A gated job body that records the TERM that stops it (`term NAME`) and its end, then exits.
fn stoppable(scratch: &Scratch, name: &str) -> String {
    format!(
        r#"trap 'echo "term {name} $(date +%s%N)" >> "$h"; echo "end {name} $(date +%s%N)" >> "$h"; exit 0' TERM
{}"#,
        gated(scratch, name)
    )
}

fn token_of(scratch: &Scratch, name: &str) -> i64 {
    scratch
        .wait_record("start", name, TEN)
        .unwrap_or_else(|| panic!("{name} started"))
        .token()
}

/// Two `gated` holders started in turn under `args`, `a` (identity `host-a`) holding before
/// `b` (`host-b`) starts, each with the token its command printed.
fn two_holding(args: &[&str], scratch: &Scratch) -> [(Instance, i64); 2] {
    [("a", "host-a"), ("b", "host-b")].map(|(name, identity)| {
        let instance = start_holder(args, scratch, name, identity, gated);
        (instance, token_of(scratch, name))
    })
}

pub fn resign_with_several_holders_hands_over_only_the_holder_it_names<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "rs", "2");
    let start = |name: &str, identity: &'static str| {
        start_holder(&args, &scratch, name, identity, stoppable)
    };
    let mut a = start("a", "host-a");
    let a_start = scratch.wait_record("start", "a", TEN).expect("a started");
    let mut b = start("b", "host-b");
    let b_token = token_of(&scratch, "b");
    let mut c = start("c", "host-c");
    waits_in_line(&store, "rs", 3, &c);

    // The newer holder, by its token: b's command is stopped, c takes b's place, a holds on.
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rs", "--token", &b_token.to_string()])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("resigned leader host-b") && stdout.contains(&format!("token {b_token}")),
        "{stdout}"
    );
    assert_eq!(b.wait(TEN), Some(75), "{}", b.stderr());
    let b_term = scratch
        .wait_record("term", "b", Duration::ZERO)
        .expect("b's command got TERM");
    let c_start = scratch
        .wait_record("start", "c", TEN)
        .expect("c took b's place");
    assert!(c_start.token() > b_token, "{:#?}", scratch.history());
    assert!(c_start.time() > b_term.time());
    assert!(a.running() && alive(a_start.pid()), "{}", a.stderr());
    assert!(scratch.wait_record("term", "a", Duration::ZERO).is_none());

    // b's token is no current holder's: nothing asked, the holders' tokens named.
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rs", "--token", &b_token.to_string()])
        .run();
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("token {b_token} is not a current holder's"))
            && stderr.contains(&a_start.token().to_string())
            && stderr.contains(&c_start.token().to_string()),
        "{stderr}"
    );
    assert!(a.running() && c.running());

    // Without --token: the oldest holder, a; d, waiting, takes its place; c holds on.
    let mut d = start("d", "host-d");
    waits_in_line(&store, "rs", 3, &d);
    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["resign", "--lease", "rs"]).run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("resigned leader host-a"), "{stdout}");
    assert_eq!(a.wait(TEN), Some(75), "{}", a.stderr());
    let d_start = scratch
        .wait_record("start", "d", TEN)
        .expect("d took a's place");
    assert!(d_start.token() > c_start.token());
    assert!(c.running() && alive(c_start.pid()), "{}", c.stderr());
    assert!(scratch.wait_record("term", "c", Duration::ZERO).is_none());

    // --force --token: c's claim alone is deleted; d holds on, and its command runs.
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args([
            "resign",
            "--lease",
            "rs",
            "--force",
            "--token",
            &c_start.token().to_string(),
        ])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("resigned leader host-c") && stdout.contains("--force"),
        "{stdout}"
    );
    // c learns its claim is gone and stops its command.
    assert!(c.wait(TEN).is_some(), "c held on after --force");
    assert!(!alive(c_start.pid()));
    assert!(d.running() && alive(d_start.pid()), "{}", d.stderr());
    assert!(scratch.wait_record("term", "d", Duration::ZERO).is_none());
    assert_eq!(store.claims("rs"), 1, "{:?}", store.held());
    let status = status_json(&endpoint, "rs");
    let holders: Vec<i64> = status["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["token"].as_i64().unwrap())
        .collect();
    assert_eq!(holders, [d_start.token()], "{status}");

    open_gate(&scratch, "d");
    assert_eq!(d.wait(TEN), Some(0), "{}", d.stderr());
    assert_at_most(&scratch.history(), 2);
    assert!(
        wait_for(TEN, || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn watch_reports_each_change_of_the_holder_set<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let (json_watch, json_lines) = watch(&endpoint, "ws", true);
    let (text_watch, text_lines) = watch(&endpoint, "ws", false);
    // Each prints the state it found first: nobody holds.
    let first: Value = serde_json::from_str(&lines_until(&json_lines, |_| true)[0]).unwrap();
    assert_eq!(first["leader"], Value::Null, "{first}");
    assert_eq!(first["holders"], serde_json::json!([]), "{first}");
    lines_until(&text_lines, |_| true);

    let args = holder_args(&endpoint, "ws", "2");
    let start =
        |name: &str, identity: &'static str| start_holder(&args, &scratch, name, identity, gated);
    let [(mut a, a_token), (mut b, b_token)] = two_holding(&args, &scratch);
    let mut c = start("c", "host-c");
    waits_in_line(&store, "ws", 3, &c);

    // a and b: a line when each came, then none for c joining the line.
    let json_of = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let came = lines_until(&json_lines, |l| {
        json_holder_tokens(&json_of(l)) == [a_token, b_token]
    });
    let both = json_of(came.last().unwrap());
    assert_eq!(both["max_holders"], 2, "{both}");
    assert_eq!(both["leader"]["token"], a_token, "{both}");
    assert_eq!(both["holders"][1]["identity"], "host-b", "{both}");
    let text_both = format!("holders 2 of 2: host-a token {a_token} key ");
    let came_text = lines_until(&text_lines, |l| l.contains(&text_both));
    assert!(
        came_text
            .last()
            .unwrap()
            .contains(&format!(", host-b token {b_token} key ")),
        "{came_text:#?}"
    );

    // a leaves: c takes its place. Between the two sets, at most the moment b held alone.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(TEN), Some(0), "{}", a.stderr());
    let c_token = token_of(&scratch, "c");
    assert!(c_token > b_token);
    let changed = lines_until(&json_lines, |l| {
        json_holder_tokens(&json_of(l)) == [b_token, c_token]
    });
    for line in &changed[..changed.len() - 1] {
        assert_eq!(
            json_holder_tokens(&json_of(line)),
            [b_token],
            "{changed:#?}"
        );
    }
    let now = json_of(changed.last().unwrap());
    assert_eq!(now["leader"]["token"], b_token, "the oldest holder: {now}");
    assert_eq!(now["leader"]["identity"], "host-b", "{now}");
    assert_eq!(now["holders"][1]["identity"], "host-c", "{now}");
    let text_now = format!("holders 2 of 2: host-b token {b_token} key ");
    let changed_text = lines_until(&text_lines, |l| l.contains(&text_now));
    let last = changed_text.last().unwrap();
    assert!(
        last.contains(&format!(", host-c token {c_token} key ")) && !last.contains("host-a"),
        "{changed_text:#?}"
    );
    for line in &changed_text[..changed_text.len() - 1] {
        assert!(
            line.contains(&format!("holders 1 of 2: host-b token {b_token} key ")),
            "{changed_text:#?}"
        );
    }

    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    for (name, instance) in [("b", &mut b), ("c", &mut c)] {
        assert_eq!(instance.wait(TEN), Some(0), "{name}: {}", instance.stderr());
    }
    // Both watches see everyone gone.
    lines_until(&json_lines, |l| json_holder_tokens(&json_of(l)).is_empty());
    lines_until(&text_lines, |l| {
        l.contains("holders 0 of 2") || l.contains("no leader")
    });
    stop_watch(json_watch);
    stop_watch(text_watch);
    assert_at_most(&scratch.history(), 2);
}

pub fn status_all_lists_every_holder<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "sa", "2");
    let start =
        |name: &str, identity: &'static str| start_holder(&args, &scratch, name, identity, gated);
    let [(mut a, a_token), (mut b, b_token)] = two_holding(&args, &scratch);
    let mut c = start("c", "host-c");
    waits_in_line(&store, "sa", 3, &c);
    // Each holder records its state once it holds.
    assert!(
        wait_for(TEN, || {
            let status = status_json(&endpoint, "sa");
            status["holders"]
                .as_array()
                .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["command"] == "running"))
        }),
        "{}",
        status_json(&endpoint, "sa")
    );

    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["status", "--all"]).run();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "2/2 holders: token {a_token} host-a, token {b_token} host-b"
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("host-c"), "{stdout}");

    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["status", "--all", "--json"]).run();
    assert_eq!(code, 0, "{stderr}");
    let all: Value = serde_json::from_str(&stdout).unwrap();
    let lease = all["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .find(|l| l["lease"] == "sa")
        .unwrap_or_else(|| panic!("sa not listed: {all}"))
        .clone();
    assert_eq!(lease["max_holders"], 2, "{lease}");
    assert_eq!(lease["candidates"], 3, "{lease}");
    assert_eq!(lease["leader"]["token"], a_token, "{lease}");
    let holders = lease["holders"].as_array().expect("holders");
    let seen: Vec<(&str, i64)> = holders
        .iter()
        .map(|h| {
            (
                h["identity"].as_str().unwrap(),
                h["token"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("host-a", a_token), ("host-b", b_token)], "{lease}");
    // Each holder's own record, as `status --json` shows it.
    let status = status_json(&endpoint, "sa");
    for (i, holder) in holders.iter().enumerate() {
        assert_eq!(holder["command"], "running", "{lease}");
        assert!(holder["since"].is_string(), "{lease}");
        for field in ["identity", "token", "since", "command", "hold_until"] {
            assert_eq!(
                holder[field], status["holders"][i][field],
                "{field}: {lease} vs {status}"
            );
        }
    }
    assert_ne!(holders[0]["since"], Value::Null);

    // Text status: a line per holder with its since and command.
    let (code, stdout, stderr) = Cmd::at(&endpoint).args(["status", "--lease", "sa"]).run();
    assert_eq!(code, 0, "{stderr}");
    for (identity, token) in [("host-a", a_token), ("host-b", b_token)] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&format!("token {token} "))
                    && l.contains(identity)
                    && l.contains("since ")
                    && l.contains("running")),
            "no line for {identity}: {stdout}"
        );
    }

    for name in ["a", "b", "c"] {
        open_gate(&scratch, name);
    }
    for (name, instance) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        assert_eq!(instance.wait(TEN), Some(0), "{name}: {}", instance.stderr());
    }
    assert_at_most(&scratch.history(), 2);
}

pub fn a_waiter_with_no_wait_exits_124_naming_the_holders<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "nw", "2");
    let [(mut a, a_token), (mut b, b_token)] = two_holding(&args, &scratch);
    let mut held = store.held();
    held.sort();

    let mut no_wait = with_identity(&args, "host-c");
    no_wait.push("--no-wait");
    let mut c = Instance::start(&no_wait, &holder_job(&scratch, "c", "true"));
    assert_eq!(c.wait(Duration::from_secs(30)), Some(124), "{}", c.stderr());
    let stderr = c.stderr();
    assert!(
        stderr.contains("2 of 2 instances hold")
            && stderr.contains(&format!("host-a (token {a_token})"))
            && stderr.contains(&format!("host-b (token {b_token})")),
        "{stderr}"
    );
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());
    // c left nothing: the holders' claims alone.
    assert!(
        wait_for(TEN, || {
            let mut now = store.held();
            now.sort();
            now == held
        }),
        "{:?} vs {held:?}",
        store.held()
    );
    assert_eq!(store.claims("nw"), 2);

    // With one place free, --no-wait holds at once.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(TEN), Some(0), "{}", a.stderr());
    let mut d = Instance::start(&no_wait, &holder_job(&scratch, "d", "true"));
    assert_eq!(d.wait(TEN), Some(0), "{}", d.stderr());
    assert!(token_of(&scratch, "d") > b_token);

    open_gate(&scratch, "b");
    assert_eq!(b.wait(TEN), Some(0), "{}", b.stderr());
    assert_at_most(&scratch.history(), 2);
}

pub fn hold_at_least_and_recampaign_with_several_holders<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "hr", "2");
    let hold = Duration::from_secs(4);

    // a's command ends at once, but a holds its place for --hold-at-least.
    let mut args_a = with_identity(&args, "host-a");
    args_a.extend(["--hold-at-least", "4s"]);
    let mut a = Instance::start(&args_a, &holder_job(&scratch, "a", "true"));
    let a_start = scratch.wait_record("start", "a", TEN).expect("a started");
    // b holds with --recampaign.
    let mut args_b = with_identity(&args, "host-b");
    args_b.push("--recampaign");
    let mut b = Instance::start(
        &args_b,
        &holder_job(&scratch, "b", &stoppable(&scratch, "b")),
    );
    let b_first = scratch.wait_record("start", "b", TEN).expect("b started");
    let start = |name: &str, identity: &'static str| {
        start_holder(&args, &scratch, name, identity, stoppable)
    };
    let mut c = start("c", "host-c");
    waits_in_line(&store, "hr", 3, &c);
    scratch
        .wait_record("end", "a", Duration::ZERO)
        .expect("a's command ended");
    assert!(
        wait_for(
            TEN,
            || status_json(&endpoint, "hr")["holders"][0]["command"] == "holding"
        ),
        "{}",
        status_json(&endpoint, "hr")
    );

    // c takes a's place only once a's hold is over.
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(15))
        .expect("c took a's place");
    // a's hold counts from its taking, a few milliseconds before its command started: 500 ms
    // of slack for that, far below the 4 s hold.
    assert!(
        c_start.time() + 500_000_000 >= a_start.time() + hold.as_nanos(),
        "c started {} ms after a: before a's --hold-at-least",
        (c_start.time() - a_start.time()) / 1_000_000
    );
    assert_eq!(a.wait(TEN), Some(0), "{}", a.stderr());
    assert!(c_start.token() > b_first.token());

    // b resigned with --recampaign: to the back of the line, behind d.
    let mut d = start("d", "host-d");
    waits_in_line(&store, "hr", 3, &d);
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args([
            "resign",
            "--lease",
            "hr",
            "--token",
            &b_first.token().to_string(),
        ])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    scratch
        .wait_record("term", "b", TEN)
        .expect("b's command got TERM");
    let d_start = scratch
        .wait_record("start", "d", TEN)
        .expect("d took b's place");
    assert!(d_start.token() > c_start.token());
    assert!(!alive(b_first.pid()));
    assert!(b.running(), "b did not campaign again: {}", b.stderr());
    assert!(
        wait_for(TEN, || store.claims("hr") == 3),
        "b is not in line: {:?}",
        store.held()
    );
    assert!(
        scratch
            .wait_record_nth("start", "b", 2, Duration::ZERO)
            .is_none()
    );
    // c and d hold; b holds again once c leaves, with a greater token.
    open_gate(&scratch, "c");
    assert_eq!(c.wait(TEN), Some(0), "{}", c.stderr());
    let b_again = scratch
        .wait_record_nth("start", "b", 2, TEN)
        .expect("b held again after c");
    assert!(b_again.token() > d_start.token());
    let c_end = scratch.wait_record("end", "c", Duration::ZERO).unwrap();
    assert!(b_again.time() > c_end.time());
    assert!(d.running() && alive(d_start.pid()));
    // The same instance, a holder again: its new token is current, its first one stale.
    let check = |token: i64| {
        Cmd::at(&endpoint)
            .args(["check", "--lease", "hr", "--token", &token.to_string()])
            .run()
            .0
    };
    assert_eq!(check(b_again.token()), 0);
    assert_eq!(check(d_start.token()), 0);
    assert_eq!(check(b_first.token()), 1);

    open_gate(&scratch, "d");
    assert_eq!(d.wait(TEN), Some(0), "{}", d.stderr());
    b.signal(Signal::SIGTERM);
    assert!(b.wait(TEN).is_some());
    let history = scratch.history();
    assert_at_most(&history, 2);
    let order: Vec<&str> = starts(&history).iter().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["a", "b", "c", "d", "b"], "{history:#?}");
}

/// `args` with `--max-holders 2` and a TTL (8 s) that outlasts a frozen holder's few seconds.
fn patient_holder_args<'a>(endpoint: &'a str, lease: &'a str) -> Vec<&'a str> {
    let mut args = patient_lease_args(endpoint, lease);
    args.extend(["--max-holders", "2"]);
    args
}

pub fn resign_ends_one_holders_hold_at_least<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = holder_args(&endpoint, "rh", "2");
    let mut args_a = with_identity(&args, "host-a");
    args_a.extend(["--hold-at-least", "10m"]);
    let mut a = Instance::start(&args_a, &holder_job(&scratch, "a", "true"));
    let a_token = token_of(&scratch, "a");
    let mut args_b = with_identity(&args, "host-b");
    args_b.extend(["--hold-at-least", "10m"]);
    let mut b = Instance::start(&args_b, &holder_job(&scratch, "b", "true"));
    let b_token = token_of(&scratch, "b");
    let mut c = Instance::start(
        &with_identity(&args, "host-c"),
        &holder_job(&scratch, "c", &gated(&scratch, "c")),
    );
    waits_in_line(&store, "rh", 3, &c);
    // Both commands ended; both hold on, and status says until when.
    for name in ["a", "b"] {
        scratch
            .wait_record("end", name, TEN)
            .unwrap_or_else(|| panic!("{name}'s command ran"));
    }
    let mut text = String::new();
    assert!(
        wait_for(TEN, || {
            text = Cmd::at(&endpoint).args(["status", "--lease", "rh"]).run().1;
            [("host-a", a_token), ("host-b", b_token)]
                .iter()
                .all(|(identity, token)| {
                    text.lines().any(|l| {
                        l.contains(&format!("token {token} "))
                            && l.contains(identity)
                            && l.contains("holding until ")
                    })
                })
        }),
        "{text}"
    );

    // resign --token b ends b's hold alone: c holds, a holds on.
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rh", "--token", &b_token.to_string()])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(b.wait(TEN), Some(75), "{}", b.stderr());
    let c_token = token_of(&scratch, "c");
    assert!(c_token > b_token);
    assert!(a.running(), "{}", a.stderr());
    // c's state record is written a moment after its command started.
    let holders = |status: &Value| -> Vec<(i64, String)> {
        status["holders"]
            .as_array()
            .expect("holders")
            .iter()
            .map(|h| {
                (
                    h["token"].as_i64().unwrap(),
                    h["command"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let expected = [
        (a_token, "holding".to_owned()),
        (c_token, "running".to_owned()),
    ];
    let mut status = Value::Null;
    assert!(
        wait_for(TEN, || {
            status = status_json(&endpoint, "rh");
            holders(&status) == expected
        }),
        "{status}"
    );

    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args(["resign", "--lease", "rh", "--token", &a_token.to_string()])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(a.wait(TEN), Some(75), "{}", a.stderr());
    open_gate(&scratch, "c");
    assert_eq!(c.wait(TEN), Some(0), "{}", c.stderr());
    assert_at_most(&scratch.history(), 2);
    assert!(
        wait_for(TEN, || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn resign_names_a_frozen_holder_and_force_removes_it_alone<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let args = patient_holder_args(&endpoint, "rf");
    let mut a = Cmd::bare()
        .args(with_identity(&args, "host-a"))
        .arg("--")
        .args(holder_job(&scratch, "a", &gated(&scratch, "a")))
        .in_own_group()
        .start();
    let a_start = scratch.wait_record("start", "a", TEN).expect("a started");
    let mut b = Instance::start(
        &with_identity(&args, "host-b"),
        &holder_job(&scratch, "b", &stoppable(&scratch, "b")),
    );
    let b_start = scratch.wait_record("start", "b", TEN).expect("b started");
    let mut c = Instance::start(
        &with_identity(&args, "host-c"),
        &holder_job(&scratch, "c", &gated(&scratch, "c")),
    );
    waits_in_line(&store, "rf", 3, &c);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(a.pid()), Signal::SIGSTOP).unwrap();
    assert!(
        wait_for(Duration::from_secs(2), || state_of(a.pid()) == Some('T')),
        "leader-exec did not stop"
    );
    // Well within the TTL (8 s): a's claim stands, nobody answers for it.
    let asked = std::time::Instant::now();
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args([
            "resign",
            "--lease",
            "rf",
            "--token",
            &a_start.token().to_string(),
            "--timeout",
            "2s",
        ])
        .run();
    let took = asked.elapsed();
    assert_eq!(code, 124, "{stdout}{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "gave up after {took:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("host-a")
            && stderr.contains(&format!("token {}", a_start.token()))
            && stderr.contains("did not hand over")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());
    assert!(alive(a_start.pid()) && alive(b_start.pid()));

    // --force: a's claim alone goes; c takes its place while b holds on.
    let (code, stdout, stderr) = Cmd::at(&endpoint)
        .args([
            "resign",
            "--lease",
            "rf",
            "--token",
            &a_start.token().to_string(),
            "--force",
        ])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("resigned leader host-a") && stdout.contains("--force"),
        "{stdout}"
    );
    let c_start = scratch
        .wait_record("start", "c", TEN)
        .expect("c took a's place after --force");
    assert!(c_start.token() > b_start.token());
    assert!(b.running() && alive(b_start.pid()), "{}", b.stderr());
    assert!(scratch.wait_record("term", "b", Duration::ZERO).is_none());
    // The overlap --force warns about: a's command still runs, its leader-exec frozen.
    assert!(alive(a_start.pid()));

    // Thawed, a finds its claim gone, stops its command and exits 75.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(a.pid()), Signal::SIGCONT).unwrap();
    assert_eq!(a.wait(TEN), Some(75), "{}", a.stderr());
    assert!(!alive(a_start.pid()));
    assert!(b.running() && c.running());
    b.signal(Signal::SIGTERM);
    assert!(b.wait(TEN).is_some());
    open_gate(&scratch, "c");
    assert_eq!(c.wait(TEN), Some(0), "{}", c.stderr());
}

pub fn watch_with_several_holders_survives_a_store_restart<S: Store>() {
    let mut store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let (json_watch, lines) = watch(&endpoint, "wr", true);
    lines_until(&lines, |_| true);
    let args = patient_holder_args(&endpoint, "wr");
    let start =
        |name: &str, identity: &'static str| start_holder(&args, &scratch, name, identity, gated);
    let [(mut a, a_token), (mut b, b_token)] = two_holding(&args, &scratch);
    let json_of = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    lines_until(&lines, |l| {
        json_holder_tokens(&json_of(l)) == [a_token, b_token]
    });
    let mut c = start("c", "host-c");
    waits_in_line(&store, "wr", 3, &c);

    store.restart();
    // After the restart: a leaves, c takes its place, and watch (still running) reports it;
    // the holders were the same throughout the outage, so any line in between names them.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(Duration::from_secs(15)), Some(0), "{}", a.stderr());
    let c_token = token_of(&scratch, "c");
    let changed = lines_until(&lines, |l| {
        json_holder_tokens(&json_of(l)) == [b_token, c_token]
    });
    for line in &changed[..changed.len() - 1] {
        let tokens = json_holder_tokens(&json_of(line));
        assert!(
            tokens == [a_token, b_token] || tokens == [b_token],
            "{changed:#?}"
        );
    }
    assert_eq!(json_of(changed.last().unwrap())["leader"]["token"], b_token);

    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    for (name, instance) in [("b", &mut b), ("c", &mut c)] {
        assert_eq!(
            instance.wait(Duration::from_secs(15)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    stop_watch(json_watch);
    assert_at_most(&scratch.history(), 2);
}
