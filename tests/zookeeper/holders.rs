//! ZooKeeper only: `--max-holders N` above 1. At most N commands at once, tokens that rise,
//! every holder in `status` and `check`, a different N refused without a trace, the N = 1 layout
//! unchanged, a holder cut off stopped before a waiter starts, and waiters woken one at a time.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::harness::*;

/// A `sh -c` job that records its start (`start NAME TOKEN PID MAX_HOLDERS live=PIDS TIME`, where
/// PIDS are the pids of other jobs alive at that instant), runs `body`, and records its end.
///
/// Each job appends its pid to the scratch's `pids` file *before* it looks for the others: of
/// jobs that run at once, the one that looks last finds every other (each appended before its
/// own look, so before the last look), however close their starts.
fn job(scratch: &Scratch, name: &str, body: &str) -> Vec<String> {
    let script = format!(
        r#"h='{h}'; pids='{p}'
{JOB_FUNCTIONS}
register {name} $$
live=""
while read -r n p t; do
  if [ "$p" != $$ ] && started "$p" && [ "$st" = "$t" ]; then live="$live,$p"; fi
done < "$pids"
echo "start {name} $LEADER_TOKEN $$ $LEADER_MAX_HOLDERS live=$live $(date +%s%N)" >> "$h"
{body}
echo "end {name} $(date +%s%N)" >> "$h"
"#,
        h = scratch.history_path().display(),
        p = scratch.path("pids").display(),
    );
    vec!["sh".into(), "-c".into(), script]
}

/// The pids of earlier jobs alive when this `start` record's job started.
fn live_at_start(record: &Record) -> Vec<i32> {
    record
        .fields
        .iter()
        .find_map(|f| f.strip_prefix("live="))
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap())
        .collect()
}

/// No job started while `n` or more earlier jobs were alive (each job looked for itself), nor
/// while `n` or more started jobs had recorded no end (a job killed by a signal records none: it
/// counts until a later job found it gone); no job ran twice; each saw `LEADER_MAX_HOLDERS` = n.
fn assert_at_most(history: &[Record], n: usize) {
    let mut running = HashSet::new();
    let mut seen = HashSet::new();
    for record in history {
        match record.kind.as_str() {
            "start" => {
                let live = live_at_start(record);
                running.retain(|name: &String| {
                    history
                        .iter()
                        .find(|r| r.kind == "start" && &r.name == name)
                        .is_some_and(|r| live.contains(&r.pid()))
                });
                assert!(
                    live.len() < n,
                    "{} started beside {live:?}: {history:#?}",
                    record.name
                );
                assert!(
                    running.len() < n,
                    "{} started while {running:?} ran: {history:#?}",
                    record.name
                );
                assert_eq!(record.fields[2], n.to_string(), "LEADER_MAX_HOLDERS");
                assert!(
                    seen.insert(record.name.clone()),
                    "{} ran twice",
                    record.name
                );
                running.insert(record.name.clone());
            }
            "end" => {
                running.remove(&record.name);
            }
            _ => {}
        }
    }
}

fn starts(history: &[Record]) -> Vec<Record> {
    history
        .iter()
        .filter(|r| r.kind == "start")
        .cloned()
        .collect()
}

/// `leader-exec ARGS --max-holders N` on lease `lease` with the fast timing, as `name`.
fn holder_args<'a>(endpoint: &'a str, lease: &'a str, name: &'a str, n: &'a str) -> Vec<&'a str> {
    let mut args = lease_args(endpoint, lease);
    args.extend(["--identity", name, "--max-holders", n]);
    args
}

/// `(identity, token)` of every holder `status --json` shows, oldest first.
fn holders(endpoint: &str, lease: &str) -> Vec<(String, i64)> {
    let status = status_json(endpoint, lease);
    status["holders"]
        .as_array()
        .unwrap_or_else(|| panic!("no holders array: {status}"))
        .iter()
        .map(|h| {
            (
                h["identity"].as_str().unwrap().to_owned(),
                h["token"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The candidate nodes of `lease`, in line (by the sequence after the last `latch-`).
fn line(zk: &ZooKeeper, lease: &str) -> Vec<String> {
    let mut nodes = zk.children(&format!("/leader-exec/{lease}"));
    nodes.sort_by_key(|n| latch_sequence(n));
    nodes
}

#[test]
fn two_holders_of_four_run_at_once_with_rising_tokens_and_status_shows_both() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "pair";
    let long = Duration::from_secs(15);
    let mut instances = BTreeMap::new();
    // a, then b: both hold; c and d wait in line behind them.
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let args = holder_args(&endpoint, lease, name, "2");
        let body = gated(&scratch, name);
        instances.insert(name, Instance::start(&args, &job(&scratch, name, &body)));
        if i < 2 {
            scratch
                .wait_record("start", name, long)
                .unwrap_or_else(|| panic!("{name} never held: {}", instances[name].stderr()));
        } else {
            assert!(wait_for(long, || line(&zk, lease).len() == i + 1));
        }
    }
    let a = scratch.wait_record("start", "a", Duration::ZERO).unwrap();
    let b = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    let status = status_json(&endpoint, lease);
    assert_eq!(status["max_holders"], 2, "{status}");
    assert_eq!(status["candidates"], 4, "{status}");
    assert_eq!(status["leader"]["identity"], "a", "{status}");
    assert_eq!(status["leader"]["token"], a.token(), "{status}");
    assert_eq!(
        holders(&endpoint, lease),
        [("a".to_owned(), a.token()), ("b".to_owned(), b.token())]
    );
    assert_eq!(check_token(&endpoint, lease, a.token()), 0);
    assert_eq!(check_token(&endpoint, lease, b.token()), 0);
    // The waiters do not run (they had the time of several renewals to).
    std::thread::sleep(RETRY_PERIOD * 3);
    assert_eq!(
        starts(&scratch.history()).len(),
        2,
        "{:#?}",
        scratch.history()
    );

    // a's command ends: c, the first waiter, holds beside b; then b's: d holds.
    open_gate(&scratch, "a");
    assert_eq!(instances.get_mut("a").unwrap().wait(long), Some(0));
    let c = scratch
        .wait_record("start", "c", long)
        .unwrap_or_else(|| panic!("c never held: {}", instances["c"].stderr()));
    assert!(instances.get_mut("b").unwrap().running());
    assert_eq!(check_token(&endpoint, lease, a.token()), 1, "a's token");
    assert_eq!(
        holders(&endpoint, lease),
        [("b".to_owned(), b.token()), ("c".to_owned(), c.token())]
    );
    open_gate(&scratch, "b");
    let d = scratch
        .wait_record("start", "d", long)
        .unwrap_or_else(|| panic!("d never held: {}", instances["d"].stderr()));
    assert_eq!(check_token(&endpoint, lease, c.token()), 0);
    assert_eq!(check_token(&endpoint, lease, d.token()), 0);
    assert_eq!(check_token(&endpoint, lease, b.token()), 1, "b's token");
    open_gate(&scratch, "c");
    open_gate(&scratch, "d");
    for (name, instance) in instances.iter_mut() {
        assert_eq!(
            instance.wait(long),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }

    let history = scratch.history();
    assert_at_most(&history, 2);
    let tokens: Vec<i64> = starts(&history).iter().map(Record::token).collect();
    assert_eq!(tokens, [a.token(), b.token(), c.token(), d.token()]);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{history:#?}");
    assert!(line(&zk, lease).is_empty());
}

#[test]
fn a_different_max_holders_is_refused_with_one_line_and_leaves_no_node() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let long = Duration::from_secs(15);
    let mut running = Vec::new();
    for name in ["a", "b"] {
        let args = holder_args(&endpoint, "mixed", name, "2");
        running.push(Instance::start(&args, &job(&scratch, name, "sleep 60")));
        scratch.wait_record("start", name, long).expect("holds");
    }
    // A waiter with the same N, behind the two holders.
    let args = holder_args(&endpoint, "mixed", "w", "2");
    running.push(Instance::start(&args, &job(&scratch, "w", "sleep 60")));
    assert!(wait_for(long, || line(&zk, "mixed").len() == 3));
    let before = line(&zk, "mixed");

    for (theirs, ours) in [("2", "3"), ("2", "1")] {
        let mut args = vec!["--endpoints", &endpoint, "--lease", "mixed"];
        args.extend(FAST);
        args.extend(["--max-holders", ours]);
        let mut other = Instance::start(&args, &job(&scratch, "other", "true"));
        assert_eq!(other.wait(long), Some(125), "{}", other.stderr());
        let stderr = other.stderr();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("--max-holders {ours} "))
                && stderr.contains(&format!("--max-holders {theirs} ")),
            "{stderr}"
        );
        assert_eq!(line(&zk, "mixed"), before, "a node was left behind");
    }

    // The same N with --no-wait while two hold: 124, no node left either.
    let mut args = vec!["--endpoints", &endpoint, "--lease", "mixed", "--no-wait"];
    args.extend(FAST);
    args.extend(["--max-holders", "2"]);
    let mut late = Instance::start(&args, &job(&scratch, "late", "true"));
    assert_eq!(late.wait(long), Some(124), "{}", late.stderr());
    assert_eq!(line(&zk, "mixed"), before, "a node was left behind");

    // And the other way round: instances with N = 2 meet a leader with N = 1.
    let args = lease_args(&endpoint, "single");
    let mut single = Instance::start(&args, &job(&scratch, "s", "sleep 60"));
    scratch.wait_record("start", "s", long).expect("s leads");
    let mut args = vec!["--endpoints", &endpoint, "--lease", "single"];
    args.extend(FAST);
    args.extend(["--max-holders", "2"]);
    let mut other = Instance::start(&args, &job(&scratch, "other2", "true"));
    assert_eq!(other.wait(long), Some(125), "{}", other.stderr());
    let stderr = other.stderr();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--max-holders 2 ") && stderr.contains("--max-holders 1 "),
        "{stderr}"
    );
    assert_eq!(line(&zk, "single").len(), 1);

    // Nobody else ran, and everyone who did is still running.
    let names: Vec<String> = starts(&scratch.history())
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["a", "b", "s"]);
    for instance in running.iter_mut().chain([&mut single]) {
        assert!(instance.running(), "{}", instance.stderr());
    }
}

/// With N = 1 (the default or given), the node is exactly what earlier versions and Curator's
/// LeaderLatch write: `_c_<UUID>-latch-<10 digits>`, the identity as data, never rewritten; the
/// token is the zxid of the leader mark (`/leader-exec/.tokens/NAME`, naming the node), written
/// after the node. With N = 2 the name records N and the holder's token is the zxid of its touch.
#[test]
fn one_holder_keeps_the_latch_layout_and_more_record_n_in_the_name() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let long = Duration::from_secs(15);
    let stat = |path: &str| {
        zk.session(false, async |client| {
            let (data, stat) = client.get_data(path).await.unwrap();
            (data, stat.czxid, stat.mzxid, stat.version)
        })
    };
    let uuid = |s: &str| {
        s.len() == 36
            && s.char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    for (name, extra) in [("d", None), ("one", Some("1")), ("two", Some("2"))] {
        let mut args = lease_args(&endpoint, name);
        args.extend(["--identity", name]);
        if let Some(n) = extra {
            args.extend(["--max-holders", n]);
        }
        let mut instance = Instance::start(&args, &job(&scratch, name, "sleep 60"));
        let start = scratch
            .wait_record("start", name, long)
            .unwrap_or_else(|| panic!("{name} never led: {}", instance.stderr()));
        let nodes = line(&zk, name);
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        let node = &nodes[0];
        let (head, digits) = node.rsplit_once("-latch-").unwrap();
        assert!(digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()));
        let id = head.strip_prefix("_c_").unwrap();
        let (data, czxid, mzxid, version) = stat(&format!("/leader-exec/{name}/{node}"));
        assert_eq!(data, name.as_bytes());
        if extra == Some("2") {
            let id = id.strip_suffix("-holders-2").expect(node);
            assert!(uuid(id), "{node}");
            assert_eq!(version, 1, "touched once");
            assert_eq!(start.token(), mzxid);
            assert!(mzxid > czxid);
        } else {
            assert!(uuid(id), "{node}");
            assert_eq!(version, 0, "never rewritten");
            let mark = zk.session(false, async |client| {
                let (data, stat) = client
                    .get_data(&format!("/leader-exec/.tokens/{name}"))
                    .await
                    .unwrap();
                (data, stat.mzxid)
            });
            assert_eq!(mark.0, node.as_bytes());
            assert_eq!(start.token(), mark.1);
            assert!(mark.1 > czxid);
            assert_eq!(mzxid, czxid);
        }
        assert_eq!(
            status_json(&endpoint, name)["leader"]["token"],
            start.token()
        );
        instance.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(instance.wait(long).is_some());
    }
}

#[test]
fn a_holder_cut_off_from_zookeeper_stops_before_a_waiter_takes_its_place() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let proxy = Proxy::start(zk.addr());
    let via_proxy = zk.endpoint_via(&proxy);
    let endpoint = zk.endpoint();
    let lease = "cut";
    let long = Duration::from_secs(15);
    // a holds through the proxy and ignores TERM: only the SIGKILL after --kill-after ends it.
    let args = holder_args(&via_proxy, lease, "a", "2");
    let mut a = Instance::start(
        &args,
        &job(&scratch, "a", "trap '' TERM; while :; do sleep 0.05; done"),
    );
    let a_start = scratch.wait_record("start", "a", long).expect("a holds");
    let args = holder_args(&endpoint, lease, "b", "2");
    let mut b = Instance::start(&args, &job(&scratch, "b", &gated(&scratch, "b")));
    let b_start = scratch.wait_record("start", "b", long).expect("b holds");
    let args = holder_args(&endpoint, lease, "c", "2");
    let mut c = Instance::start(&args, &job(&scratch, "c", &gated(&scratch, "c")));
    assert!(wait_for(long, || line(&zk, lease).len() == 3));

    proxy.cut();
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("c never held: {}", c.stderr()));
    // a's command was gone (its whole group) when c's started; b's ran on.
    let live = live_at_start(&c_start);
    assert!(!live.contains(&a_start.pid()), "{:#?}", scratch.history());
    assert!(live.contains(&b_start.pid()), "{:#?}", scratch.history());
    assert!(!group_has_live_member(a_start.pid()));
    assert_eq!(a.wait(long), Some(75), "{}", a.stderr());
    assert!(b.running(), "{}", b.stderr());
    assert!(c_start.token() > b_start.token() && b_start.token() > a_start.token());
    assert_eq!(
        holders(&endpoint, lease),
        [
            ("b".to_owned(), b_start.token()),
            ("c".to_owned(), c_start.token())
        ]
    );
    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    assert_eq!(b.wait(long), Some(0), "{}", b.stderr());
    assert_eq!(c.wait(long), Some(0), "{}", c.stderr());
    assert_at_most(&scratch.history(), 2);
}

/// How many times an instance logged (at -vv) that it looked at the line and waits.
fn looks(instance: &Instance) -> usize {
    instance
        .stderr()
        .matches("waiting for the candidate ahead to go")
        .count()
}

#[test]
fn a_holder_leaving_wakes_the_first_waiter_and_the_one_behind_it_only() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "herd";
    let long = Duration::from_secs(15);
    let names: Vec<String> = (0..10).map(|i| format!("i{i}")).collect();
    let mut instances = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut args = holder_args(&endpoint, lease, name, "2");
        args.push("-vv");
        let body = gated(&scratch, name);
        instances.push(Instance::start(&args, &job(&scratch, name, &body)));
        if i < 2 {
            scratch.wait_record("start", name, long).expect("holds");
        } else {
            // In line in this order, each having looked once.
            assert!(wait_for(long, || line(&zk, lease).len() == i + 1
                && looks(&instances[i]) == 1));
        }
    }
    let before: Vec<usize> = instances.iter().map(looks).collect();

    // i0 leaves: i2 (the first waiter) holds, and its touch moves i3 up to first waiter.
    open_gate(&scratch, "i0");
    scratch.wait_record("start", "i2", long).expect("i2 holds");
    assert!(wait_for(long, || looks(&instances[3]) == 2));
    // i1 leaves: i3 holds, i4 moves up.
    open_gate(&scratch, "i1");
    scratch.wait_record("start", "i3", long).expect("i3 holds");
    assert!(wait_for(long, || looks(&instances[4]) == 2));
    // The instance a holder's leaving wakes looks again at once; give any other the time of
    // several looks.
    std::thread::sleep(Duration::from_millis(500));
    let after: Vec<usize> = instances.iter().map(looks).collect();
    assert_eq!(after[2], before[2], "i2 held at its next look");
    assert_eq!(after[3], before[3] + 1);
    assert_eq!(after[4], before[4] + 1);
    assert_eq!(&after[5..], &before[5..], "later waiters woke");
    assert_eq!(starts(&scratch.history()).len(), 4);
    for name in &names {
        open_gate(&scratch, name);
    }
    for instance in instances.iter_mut() {
        assert_eq!(instance.wait(long), Some(0), "{}", instance.stderr());
    }
    assert_at_most(&scratch.history(), 2);
}

#[test]
fn fifty_waiters_with_three_holders_all_hold_in_turn() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "fifty";
    let mut instances: Vec<Instance> = (0..50)
        .map(|i| {
            let name = format!("i{i}");
            let mut args = vec!["--endpoints", &endpoint, "--lease", lease];
            args.extend(PATIENT);
            args.extend(["--max-holders", "3"]);
            Instance::start(&args, &job(&scratch, &name, "sleep 0.1"))
        })
        .collect();
    for (i, instance) in instances.iter_mut().enumerate() {
        assert_eq!(
            instance.wait(Duration::from_secs(120)),
            Some(0),
            "i{i}: {}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_at_most(&history, 3);
    let tokens: HashSet<i64> = starts(&history).iter().map(Record::token).collect();
    assert_eq!(tokens.len(), 50, "{history:#?}");
    assert!(line(&zk, lease).is_empty());
}

/// Both holders ride out a server restart shorter than their deadline, a waiter stays waiting;
/// then one holder's leader-exec is SIGKILLed: its command's group dies with it, and the waiter
/// holds only once the server has expired the dead holder's session.
#[test]
fn holders_ride_out_a_restart_and_a_killed_holder_is_replaced_after_its_group_died() {
    let mut zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "restart";
    let long = Duration::from_secs(15);
    let start = |name: &str| {
        let mut args = patient_lease_args(&endpoint, lease);
        args.extend(["--identity", name, "--max-holders", "2"]);
        Instance::start(&args, &job(&scratch, name, &gated(&scratch, name)))
    };
    let mut a = start("a");
    let a_start = scratch.wait_record("start", "a", long).expect("a holds");
    let mut b = start("b");
    let b_start = scratch.wait_record("start", "b", long).expect("b holds");
    let mut c = start("c");
    assert!(wait_for(long, || line(&zk, lease).len() == 3));

    let down = std::time::Instant::now();
    zk.restart();
    let outage = down.elapsed();
    assert!(outage < Duration::from_secs(4), "{outage:?}");
    // Past the moment the 5 s deadline would have stopped them without renewals after it.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(outage) + Duration::from_secs(1));
    assert!(a.running() && b.running(), "{}\n{}", a.stderr(), b.stderr());
    assert!(alive(a_start.pid()) && alive(b_start.pid()));
    assert_eq!(starts(&scratch.history()).len(), 2, "c held beside a and b");
    assert_eq!(line(&zk, lease).len(), 3);

    // a's leader-exec dies; its command's group with it, at once; its node with its session.
    a.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = std::time::Instant::now();
    assert!(wait_for(long, || !group_has_live_member(a_start.pid())));
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("c never held: {}", c.stderr()));
    let live = live_at_start(&c_start);
    assert!(!live.contains(&a_start.pid()), "{:#?}", scratch.history());
    assert!(live.contains(&b_start.pid()), "{:#?}", scratch.history());
    assert!(c_start.token() > b_start.token());
    eprintln!("c held {:?} after a was killed", killed.elapsed());
    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    assert_eq!(b.wait(long), Some(0), "{}", b.stderr());
    assert_eq!(c.wait(long), Some(0), "{}", c.stderr());
    assert_at_most(&scratch.history(), 2);
}

/// A Curator `LeaderLatch` node has no N in its name: it counts as N = 1, so an instance with
/// N = 2 behind it leaves with the mismatch, and one with N = 1 waits behind it as before.
#[test]
fn a_curator_latch_counts_as_one_holder() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let mut curator = CuratorLatch::start(&zk.connect_string(), "/leader-exec/latch", "curator");
    assert!(
        curator.wait_for("leader", Duration::from_secs(30)),
        "{:?}",
        curator.lines()
    );
    let mut args = vec!["--endpoints", &endpoint, "--lease", "latch"];
    args.extend(FAST);
    args.extend(["--max-holders", "2"]);
    let mut two = Instance::start(&args, &job(&scratch, "two", "true"));
    assert_eq!(
        two.wait(Duration::from_secs(15)),
        Some(125),
        "{}",
        two.stderr()
    );
    let stderr = two.stderr();
    assert!(
        stderr.contains("--max-holders 2 ") && stderr.contains("--max-holders 1 "),
        "{stderr}"
    );
    assert_eq!(line(&zk, "latch").len(), 1, "a node was left behind");
    let status = status_json(&endpoint, "latch");
    assert_eq!(status["max_holders"], 1, "{status}");
    assert_eq!(status["leader"]["identity"], "curator", "{status}");
    assert!(scratch.history().is_empty());
    curator.close();
}

/// CPU time (user + system, in clock ticks) `pid` has used so far.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the whole line: utime, stime.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// `watch` with N holders waits on the line and on each holder's node (a holder's touch changes
/// its token without changing the line): idle, it uses no CPU; when the oldest holder leaves, it
/// reports the next one.
#[test]
fn watch_with_two_holders_sleeps_until_the_holders_change() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let lease = "watched";
    let long = Duration::from_secs(15);
    let mut instances = Vec::new();
    for name in ["a", "b"] {
        let args = holder_args(&endpoint, lease, name, "2");
        let body = gated(&scratch, name);
        instances.push(Instance::start(&args, &job(&scratch, name, &body)));
        scratch.wait_record("start", name, long).expect("holds");
    }
    let (watch, lines) = watch(&endpoint, lease, true);
    let leader_of = |line: String| -> String {
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        value["leader"]["identity"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(leader_of(lines.recv_timeout(long).unwrap()), "a");
    let pid = watch.0.id() as i32;
    let before = cpu_ticks(pid);
    // An idle second: a watch that looked again and again would use most of it.
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(pid) - before;
    assert!(used <= 5, "watch used {used} ticks while nothing changed");

    open_gate(&scratch, "a");
    let reported = wait_for(long, || {
        lines
            .recv_timeout(Duration::from_millis(100))
            .is_ok_and(|line| leader_of(line) == "b")
    });
    assert!(reported, "watch did not report b");
    open_gate(&scratch, "b");
    for instance in instances.iter_mut() {
        assert_eq!(instance.wait(long), Some(0), "{}", instance.stderr());
    }
}
