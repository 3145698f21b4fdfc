//! `--max-holders` N above 1 on PostgreSQL (and through pgbouncer in transaction mode): N slot
//! rows per lease name (`NAME`, `NAME/2` … `NAME/N`). Never more than N commands at once,
//! tokens rising in start order, `status` and `check` on every holder, a mismatch refused
//! leaving nothing behind, a crashed holder's slot taken over only after a full TTL, a slot row
//! changed by hand stopping its holder, and a release waking one waiter.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::harness::*;

/// Slack for a loaded 2-core machine.
pub(super) const SLACK: Duration = Duration::from_secs(2);

pub(super) const TTL: Duration = Duration::from_secs(6);
pub(super) const RETRY: Duration = Duration::from_secs(1);

pub(super) const TIMING: [&str; 8] = [
    "--ttl",
    "6s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "1s",
    "--kill-after",
    "1s",
];

pub(super) fn args<'a>(endpoint: &'a str, lease: &'a str, n: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "-v",
        "--endpoints",
        endpoint,
        "--lease",
        lease,
        "--max-holders",
        n,
    ];
    args.extend(TIMING);
    args
}

/// A job that records its start (token, pid, time) and `LEADER_MAX_HOLDERS`, runs until its go
/// file exists, and records its end.
pub(super) fn job(scratch: &Scratch, name: &str) -> Vec<String> {
    let script = format!(
        r#"h='{h}'
echo "start {name} $LEADER_TOKEN $$ $(date +%s%N)" >> "$h"
echo "env {name} $LEADER_MAX_HOLDERS $(date +%s%N)" >> "$h"
while [ ! -e '{go}' ]; do sleep 0.05; done
echo "end {name} $(date +%s%N)" >> "$h"
"#,
        h = scratch.history_path().display(),
        go = scratch.path(&format!("go-{name}")).display(),
    );
    vec!["sh".into(), "-c".into(), script]
}

pub(super) fn go(scratch: &Scratch, name: &str) {
    std::fs::write(scratch.path(&format!("go-{name}")), "").unwrap();
}

pub(super) fn count(pg: &Postgres, sql: &str) -> i64 {
    pg.psql(sql).trim().parse().unwrap()
}

pub(super) fn waiter_rows(pg: &Postgres, lease: &str) -> i64 {
    count(
        pg,
        &format!("SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}'"),
    )
}

/// The rows of a lease name, `NAME` and its slot rows: (name, holder or '-', max_holders).
fn lease_rows(pg: &Postgres, lease: &str) -> Vec<String> {
    pg.psql(&format!(
        "SELECT name || ' ' || COALESCE(holder, '-') || ' ' || max_holders FROM leader_exec_leases
         WHERE name = '{lease}' OR starts_with(name, '{lease}/') ORDER BY name"
    ))
    .lines()
    .map(str::to_owned)
    .filter(|l| !l.is_empty())
    .collect()
}

/// The most jobs running at any instant of the history, from their start and end records (an
/// end at the same nanosecond as a start counts first).
pub(super) fn most_at_once(history: &[Record]) -> usize {
    let mut events: Vec<(u128, i32)> = history
        .iter()
        .filter_map(|r| match r.kind.as_str() {
            "start" => Some((r.time(), 1)),
            "end" => Some((r.time(), -1)),
            _ => None,
        })
        .collect();
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// Tokens strictly rise in start order.
pub(super) fn assert_tokens_rise(history: &[Record]) {
    let starts: Vec<&Record> = history.iter().filter(|r| r.kind == "start").collect();
    for pair in starts.windows(2) {
        assert!(
            pair[1].token() > pair[0].token(),
            "token {} after {}: {history:#?}",
            pair[1].token(),
            pair[0].token()
        );
    }
}

fn holder_tokens(endpoint: &str, lease: &str) -> Vec<i64> {
    let status = status_json(endpoint, lease);
    let mut tokens: Vec<i64> = status["holders"]
        .as_array()
        .unwrap_or_else(|| panic!("no holders array: {status}"))
        .iter()
        .map(|h| h["token"].as_i64().unwrap())
        .collect();
    tokens.sort();
    tokens
}

/// Four instances with N = 2: a and b hold at once, c and d wait in line; each release lets
/// exactly the next one in. Never more than two commands run, tokens rise in start order,
/// `status --json` lists the tokens the children printed, `check` accepts each.
fn two_hold_and_two_wait(endpoint: &str, pg: &Postgres) {
    let scratch = Scratch::new();
    let lease = "sem";
    let a_args = args(endpoint, lease, "2");
    let mut instances = Vec::new();
    for name in ["a", "b"] {
        instances.push(Instance::start(&a_args, &job(&scratch, name)));
        scratch
            .wait_record("start", name, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{name} did not start: {:?}", scratch.history()));
    }
    let a = scratch.wait_record("start", "a", Duration::ZERO).unwrap();
    let b = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    let env = scratch
        .wait_record("env", "b", Duration::from_secs(5))
        .unwrap();
    assert_eq!(env.fields[0], "2", "LEADER_MAX_HOLDERS");
    assert_eq!(holder_tokens(endpoint, lease), vec![a.token(), b.token()]);
    let status = status_json(endpoint, lease);
    assert_eq!(status["max_holders"], 2, "{status}");
    assert_eq!(status["leader"]["token"], a.token(), "{status}");
    assert_eq!(check_token(endpoint, lease, a.token()), 0);
    assert_eq!(check_token(endpoint, lease, b.token()), 0);
    assert_ne!(check_token(endpoint, lease, b.token() + 1000), 0);
    assert_eq!(
        lease_rows(pg, lease).len(),
        2,
        "{:?}",
        lease_rows(pg, lease)
    );
    // The text form: a line per holder; `status --all`: one election per name, not per slot.
    let text = Cmd::bare()
        .args(["status", "--endpoints", endpoint, "--lease", lease])
        .output();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("holders:     2 of 2"), "{text}");
    let all = Cmd::bare()
        .args(["status", "--all", "--json", "--endpoints", endpoint])
        .output();
    let all: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    let names: Vec<&str> = all["leases"]
        .as_array()
        .unwrap_or_else(|| panic!("{all}"))
        .iter()
        .filter_map(|l| l["lease"].as_str())
        .collect();
    assert_eq!(names, vec![lease], "{all}");
    // c, then d, in line.
    for (i, name) in ["c", "d"].iter().enumerate() {
        instances.push(Instance::start(&a_args, &job(&scratch, name)));
        assert!(
            wait_for(Duration::from_secs(10), || waiter_rows(pg, lease)
                == i as i64 + 1),
            "{name} not in line"
        );
    }
    std::thread::sleep(RETRY * 2);
    assert!(
        scratch.wait_record("start", "c", Duration::ZERO).is_none(),
        "c started beside two holders: {:?}",
        scratch.history()
    );
    // Each release lets exactly the first waiter in, at once (woken, not polled or expired).
    for (leaving, next) in [("a", "c"), ("b", "d")] {
        go(&scratch, leaving);
        let start = scratch
            .wait_record("start", next, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{next} did not follow {leaving}: {:?}", scratch.history()));
        let end = scratch
            .wait_record("end", leaving, Duration::ZERO)
            .unwrap_or_else(|| {
                panic!(
                    "{next} started before {leaving} ended: {:?}",
                    scratch.history()
                )
            });
        let handover = Duration::from_nanos((start.time() - end.time()) as u64);
        assert!(handover < RETRY + SLACK, "{next}: {handover:?}");
    }
    let c = scratch.wait_record("start", "c", Duration::ZERO).unwrap();
    let d = scratch.wait_record("start", "d", Duration::ZERO).unwrap();
    assert_eq!(holder_tokens(endpoint, lease), vec![c.token(), d.token()]);
    assert_eq!(check_token(endpoint, lease, c.token()), 0);
    assert_ne!(
        check_token(endpoint, lease, a.token()),
        0,
        "a's token is stale"
    );
    go(&scratch, "c");
    go(&scratch, "d");
    for mut instance in instances {
        assert_eq!(instance.wait(Duration::from_secs(10)), Some(0));
    }
    let history = scratch.history();
    assert_eq!(most_at_once(&history), 2, "{history:#?}");
    assert_tokens_rise(&history);
    // Nothing held, nobody in line.
    assert_eq!(waiter_rows(pg, lease), 0);
    assert!(
        lease_rows(pg, lease).iter().all(|r| r.contains(" - ")),
        "{:?}",
        lease_rows(pg, lease)
    );
}

#[test]
fn two_hold_at_once_and_the_line_follows_on_postgres() {
    let pg = Postgres::start();
    two_hold_and_two_wait(&Store::endpoint(&pg), &pg);
}

#[test]
fn two_hold_at_once_and_the_line_follows_through_pgbouncer() {
    let bouncer = PgBouncer::start();
    two_hold_and_two_wait(&Store::endpoint(&bouncer), &bouncer.pg);
}

/// Runs leader-exec (no -v) to its end; (exit code, stderr).
fn run_to_end(
    endpoint: &str,
    lease: &str,
    n: &str,
    scratch: &Scratch,
    name: &str,
) -> (i32, String) {
    let mut command = leader_exec();
    command
        .args([
            "--endpoints",
            endpoint,
            "--lease",
            lease,
            "--max-holders",
            n,
        ])
        .args(TIMING)
        .arg("--")
        .args(job(scratch, name))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    let out = KillOnDrop(child);
    let mut child = out;
    let started = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            let mut stderr = String::new();
            use std::io::Read;
            child
                .0
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            return (status.code().unwrap_or(-1), stderr);
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "--max-holders {n} still running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mismatch_is_refused(endpoint: &str, pg: &Postgres) {
    let scratch = Scratch::new();
    let lease = "mm";
    let two = args(endpoint, lease, "2");
    let _a = Instance::start(&two, &job(&scratch, "a"));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let _b = Instance::start(&two, &job(&scratch, "b"));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let _c = Instance::start(&two, &job(&scratch, "c"));
    assert!(wait_for(Duration::from_secs(10), || waiter_rows(pg, lease) == 1));
    let rows_before = lease_rows(pg, lease);
    let tokens_before = holder_tokens(endpoint, lease);
    for n in ["3", "1"] {
        let (code, stderr) = run_to_end(endpoint, lease, n, &scratch, &format!("x{n}"));
        assert_eq!(code, 125, "--max-holders {n}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--max-holders {n} does not match the --max-holders 2"
            )),
            "{stderr}"
        );
        // Nothing left behind: the same rows (no slot 3), only c in line, the same holders.
        assert_eq!(lease_rows(pg, lease), rows_before);
        assert_eq!(waiter_rows(pg, lease), 1);
        assert_eq!(holder_tokens(endpoint, lease), tokens_before);
    }
    assert_eq!(
        scratch
            .history()
            .iter()
            .filter(|r| r.kind == "start")
            .count(),
        2
    );
    // Once every N = 2 instance is gone (their holder and waiter rows expired on the server's
    // clock: until then they count as there), N = 1 is the lease's again, its rows kept.
    drop((_a, _b, _c));
    assert!(wait_for(TTL + SLACK * 2, || count(
        pg,
        &format!(
            "SELECT (SELECT count(*) FROM leader_exec_leases WHERE starts_with(name, '{lease}')
                     AND holder IS NOT NULL AND expires_at > now())
                  + (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}'
                     AND expires_at > now())"
        )
    ) == 0));
    let (code, stderr) = run_to_end_patient(endpoint, lease, &scratch);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        scratch
            .history()
            .iter()
            .filter(|r| r.kind == "start" && r.name == "one")
            .count(),
        1
    );
}

/// N = 1 after the N = 2 instances were killed: waits out their rows' TTL and runs.
fn run_to_end_patient(endpoint: &str, lease: &str, scratch: &Scratch) -> (i32, String) {
    let out = leader_exec()
        .args(["--endpoints", endpoint, "--lease", lease])
        .args(TIMING)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo \"start one $LEADER_TOKEN $$ $(date +%s%N)\" >> '{}'",
            scratch.history_path().display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn another_max_holders_is_refused_and_leaves_nothing_on_postgres() {
    let pg = Postgres::start();
    mismatch_is_refused(&Store::endpoint(&pg), &pg);
}

#[test]
fn another_max_holders_is_refused_and_leaves_nothing_through_pgbouncer() {
    let bouncer = PgBouncer::start();
    mismatch_is_refused(&Store::endpoint(&bouncer), &bouncer.pg);
}

/// A holder SIGKILLed with its group: its slot is taken by the first waiter, and only after it
/// has seen the row unchanged for a full TTL; the other holder runs on throughout.
#[test]
fn a_killed_holders_slot_is_taken_over_only_after_a_full_ttl() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "crash";
    let two = args(&endpoint, lease, "2");
    let a = Instance::start(&two, &job(&scratch, "a"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let _b = Instance::start(&two, &job(&scratch, "b"));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let _c = Instance::start(&two, &job(&scratch, "c"));
    assert!(wait_for(Duration::from_secs(10), || waiter_rows(
        &pg, lease
    ) == 1));
    // The wrapper and the command's group, at once.
    let group = nix::unistd::getpgid(Some(Pid::from_raw(a_start.pid()))).unwrap();
    a.signal(Signal::SIGKILL);
    let _ = killpg(group, Signal::SIGKILL);
    let killed = Instant::now();
    let c = scratch
        .wait_record("start", "c", TTL + RETRY * 2 + SLACK * 2)
        .unwrap_or_else(|| panic!("c never took the slot over: {:?}", scratch.history()));
    let waited = killed.elapsed();
    // The last renewal went out at most one retry period before the kill.
    assert!(waited >= TTL - RETRY, "taken over after {waited:?}");
    assert!(c.token() > a_start.token());
    let history = scratch.history();
    assert!(
        history.iter().all(|r| !(r.kind == "end" && r.name == "b")),
        "b stopped: {history:#?}"
    );
    assert_tokens_rise(&history);
    let mut tokens = holder_tokens(&endpoint, lease);
    tokens.retain(|t| *t == c.token());
    assert_eq!(tokens, vec![c.token()]);
}

/// A slot row changed by hand (another holder written in) stops its holder's command; DELETE
/// of a slot row is refused by the guard like any lease row's.
#[test]
fn a_slot_row_changed_by_hand_stops_its_holder() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "hand";
    let two = args(&endpoint, lease, "2");
    let _a = Instance::start(&two, &job(&scratch, "a"));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&two, &job(&scratch, "b"));
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let row = pg.psql(&format!(
        "SELECT name FROM leader_exec_leases WHERE token = {}",
        b_start.token()
    ));
    let row = row.trim();
    assert_eq!(row, "hand/2");
    let refused = pg.try_psql(&format!(
        "DELETE FROM leader_exec_leases WHERE name = '{row}'"
    ));
    assert!(
        !refused.status.success(),
        "DELETE of a slot row went through"
    );
    let changed = Instant::now();
    pg.psql(&format!(
        "UPDATE leader_exec_leases SET holder = 'someone else' WHERE name = '{row}'"
    ));
    // b's next renewal finds the row gone from it: its command is stopped.
    assert!(
        wait_for(RETRY * 3 + SLACK * 2, || !alive(b_start.pid())),
        "b's command still runs"
    );
    assert!(changed.elapsed() < RETRY * 3 + SLACK * 2);
    let _ = b.wait(Duration::from_secs(10));
    // a runs on.
    assert!(
        scratch.wait_record("end", "a", Duration::ZERO).is_none(),
        "{:?}",
        scratch.history()
    );
}

/// Statements leader-exec has run so far (pg_stat_statements), without the looks every waiter
/// makes once per --retry-period whatever happens (`WITH mine AS`: renewing its own row; the
/// first waiter's look at every slot row).
fn requests(pg: &Postgres) -> i64 {
    count(
        pg,
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%'
         AND query NOT LIKE 'LISTEN%' AND query NOT LIKE 'WITH mine AS%'
         AND query NOT LIKE 'SELECT s.slot%'",
    )
}

/// Attempts to take a slot so far (the decision statement of each, won or not).
fn attempts(pg: &Postgres) -> i64 {
    count(
        pg,
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'WITH cur AS%'",
    )
}

/// Two holders and `waiters` in line; each of `handovers` releases lets the first waiter in.
/// Returns (requests, attempts) per handover; checks that never more than two ran at once and
/// that tokens rose in start order.
fn handovers_with_waiters(waiters: usize, handovers: usize) -> Vec<(i64, i64)> {
    let pg = Postgres::start_with("-c shared_preload_libraries=pg_stat_statements");
    pg.psql("CREATE EXTENSION pg_stat_statements");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let lease = "herd";
    // A long TTL keeps the waiters' expiry look-ups out of the measured window.
    let args = [
        "--endpoints",
        endpoint.as_str(),
        "--lease",
        lease,
        "--max-holders",
        "2",
        "--ttl",
        "60s",
        "--renew-deadline",
        "40s",
        "--retry-period",
        "2s",
        "--kill-after",
        "4s",
    ];
    let mut instances = Vec::new();
    for name in ["w0", "w1"] {
        instances.push(Instance::start(&args, &job(&scratch, name)));
        scratch
            .wait_record("start", name, Duration::from_secs(10))
            .expect("a first holder started");
    }
    for i in 2..waiters + 2 {
        instances.push(Instance::start(&args, &job(&scratch, &format!("w{i}"))));
    }
    assert!(
        wait_for(Duration::from_secs(30 + waiters as u64 / 2), || {
            waiter_rows(&pg, lease) >= waiters as i64
        }),
        "not every waiter stands in line"
    );
    std::thread::sleep(Duration::from_secs(1));
    let mut holding = vec!["w0".to_owned(), "w1".to_owned()];
    let mut measured = Vec::new();
    for round in 0..handovers {
        let starts = |s: &Scratch| s.history().iter().filter(|r| r.kind == "start").count();
        let before = (requests(&pg), attempts(&pg));
        let leaving = holding.remove(0);
        go(&scratch, &leaving);
        assert!(
            wait_for(Duration::from_secs(30), || starts(&scratch) > round + 2),
            "no handover after {leaving}"
        );
        std::thread::sleep(Duration::from_millis(500));
        let after = (requests(&pg), attempts(&pg));
        measured.push((after.0 - before.0, after.1 - before.1));
        let history = scratch.history();
        holding.push(
            history
                .iter()
                .rfind(|r| r.kind == "start")
                .unwrap()
                .name
                .clone(),
        );
    }
    let history = scratch.history();
    assert_eq!(most_at_once(&history), 2, "{history:#?}");
    assert_tokens_rise(&history);
    measured
}

/// A release with two holders and eight waiters wakes one waiter: one attempt per handover, and
/// a bounded number of statements in all (the old holder's release, the winner's transaction,
/// its status record, and, when they fall in the window, the new holder's renewal session and
/// the session of the waiter that moved up into the listening places).
#[test]
fn a_release_with_two_holders_wakes_one_of_eight_waiters() {
    let measured = handovers_with_waiters(8, 4);
    eprintln!("(requests, attempts) per handover with 8 waiters: {measured:?}");
    assert!(measured.iter().all(|(_, a)| *a == 1), "{measured:?}");
    assert!(measured.iter().all(|(r, _)| *r <= 40), "{measured:?}");
}

/// Both slots freed at once with a single wake-up, to the first waiter only (as one release
/// sends): the waiter that takes a slot while another is still free wakes the next one, so
/// both waiters hold within well under one --retry-period (5 s here: no waiter's own look at
/// the line lets it in that soon, as a rule).
#[test]
fn two_free_slots_and_one_wake_up_let_both_waiters_in_by_a_chain() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "chain";
    let args = [
        "--endpoints",
        endpoint.as_str(),
        "--lease",
        lease,
        "--max-holders",
        "2",
        "--ttl",
        "25s",
        "--renew-deadline",
        "15s",
        "--retry-period",
        "5s",
        "--kill-after",
        "2s",
    ];
    let mut holders = Vec::new();
    for name in ["a", "b"] {
        let instance = Instance::start(&args, &job(&scratch, name));
        let start = scratch
            .wait_record("start", name, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{name} did not start"));
        holders.push((instance, start.pid()));
    }
    let mut waiters = Vec::new();
    for (i, name) in ["c", "d"].iter().enumerate() {
        waiters.push(Instance::start(&args, &job(&scratch, name)));
        assert!(
            wait_for(Duration::from_secs(10), || waiter_rows(&pg, lease)
                == i as i64 + 1),
            "{name} not in line"
        );
    }
    // The holders gone (wrappers and groups), their commands with them.
    for (instance, pid) in &holders {
        let group = nix::unistd::getpgid(Some(Pid::from_raw(*pid))).unwrap();
        instance.signal(Signal::SIGKILL);
        let _ = killpg(group, Signal::SIGKILL);
    }
    assert!(wait_for(Duration::from_secs(5), || holders
        .iter()
        .all(|(_, pid)| !alive(*pid))));
    // Past the waiters' last looks, then both rows freed in one statement and one NOTIFY to
    // the first waiter's channel.
    std::thread::sleep(Duration::from_secs(1));
    pg.psql(&format!(
        "WITH freed AS (UPDATE leader_exec_leases SET holder = NULL, expires_at = now()
                        WHERE name IN ('{lease}', '{lease}/2') RETURNING 1)
         SELECT pg_notify('w' || (SELECT min(id) FROM leader_exec_waiters WHERE name = '{lease}')
                          || '_leader_exec', 'free' || chr(10) || '{lease}')
         FROM (SELECT count(*) FROM freed) f"
    ));
    let freed = Instant::now();
    for name in ["c", "d"] {
        scratch
            .wait_record("start", name, Duration::from_secs(12))
            .unwrap_or_else(|| panic!("{name} did not start: {:?}", scratch.history()));
    }
    let took = freed.elapsed();
    assert!(took < Duration::from_millis(1500), "both in after {took:?}");
    go(&scratch, "c");
    go(&scratch, "d");
    for mut instance in waiters {
        assert_eq!(instance.wait(Duration::from_secs(15)), Some(0));
    }
}

/// N = 3: three hold at once on rows `NAME`, `NAME/2`, `NAME/3`; a fourth with --no-wait exits
/// 124 leaving no waiter row; a fifth waits and takes the slot the first leaves.
#[test]
fn three_hold_at_once_and_no_wait_leaves_no_waiter_row() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "three";
    let three = args(&endpoint, lease, "3");
    let mut instances = Vec::new();
    for name in ["a", "b", "c"] {
        instances.push(Instance::start(&three, &job(&scratch, name)));
        scratch
            .wait_record("start", name, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{name} did not start: {:?}", scratch.history()));
    }
    assert_eq!(
        lease_rows(&pg, lease)
            .iter()
            .map(|r| r.split(' ').next().unwrap().to_owned())
            .collect::<Vec<_>>(),
        vec!["three", "three/2", "three/3"]
    );
    let mut no_wait = three.clone();
    no_wait.push("--no-wait");
    let mut d = Instance::start(&no_wait, &job(&scratch, "d"));
    assert_eq!(d.wait(Duration::from_secs(15)), Some(124), "{}", d.stderr());
    assert_eq!(waiter_rows(&pg, lease), 0);
    instances.push(Instance::start(&three, &job(&scratch, "e")));
    assert!(wait_for(Duration::from_secs(10), || waiter_rows(
        &pg, lease
    ) == 1));
    go(&scratch, "b");
    scratch
        .wait_record("start", "e", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("e did not follow b: {:?}", scratch.history()));
    for name in ["a", "c", "e"] {
        go(&scratch, name);
    }
    for mut instance in instances {
        assert_eq!(instance.wait(Duration::from_secs(15)), Some(0));
    }
    let history = scratch.history();
    assert!(history.iter().all(|r| r.name != "d"), "{history:#?}");
    assert_eq!(most_at_once(&history), 3, "{history:#?}");
    assert_tokens_rise(&history);
}

/// Sets the token sequence back to 1, as a schema-only restore or a logical-replication cutover
/// leaves it.
fn set_back_tokens(pg: &Postgres) {
    pg.psql("ALTER SEQUENCE leader_exec_tokens RESTART");
}

/// The token sequence set back under two holders: every later token is above every earlier one
/// of the name, whichever slot held it, so that no two live holders share one; and so once N
/// has changed to 1, with the sequence set back again.
#[test]
fn a_set_back_token_sequence_reissues_no_token_of_the_name() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "reset";
    let two = args(&endpoint, lease, "2");
    let mut instances = Vec::new();
    for name in ["a", "b"] {
        instances.push(Instance::start(&two, &job(&scratch, name)));
        scratch
            .wait_record("start", name, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{name} did not start: {:?}", scratch.history()));
    }
    // Each of c, d, e waits in line, then takes the slot of the holder that ends.
    for (next, leaving) in [("c", "a"), ("d", "b"), ("e", "c")] {
        set_back_tokens(&pg);
        instances.push(Instance::start(&two, &job(&scratch, next)));
        assert!(
            wait_for(Duration::from_secs(10), || waiter_rows(&pg, lease) == 1),
            "{next} not in line"
        );
        go(&scratch, leaving);
        let started = scratch
            .wait_record("start", next, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{next} did not follow {leaving}: {:?}", scratch.history()));
        // The two live holders' tokens: distinct, the newcomer's the greater.
        let tokens = holder_tokens(&endpoint, lease);
        assert_eq!(tokens.len(), 2, "{tokens:?}");
        assert!(tokens[0] < tokens[1], "{tokens:?}: {:?}", scratch.history());
        assert_eq!(tokens[1], started.token(), "{:?}", scratch.history());
    }
    for name in ["d", "e"] {
        go(&scratch, name);
    }
    for mut instance in instances {
        assert_eq!(instance.wait(Duration::from_secs(10)), Some(0));
    }
    // N = 1 now: the first instance finds the rows of N = 2 (nobody there), the second the row
    // NAME alone; the sequence set back before each.
    for name in ["f", "g"] {
        set_back_tokens(&pg);
        std::fs::write(scratch.path(&format!("go-{name}")), "").unwrap();
        let mut one = Instance::start(&args(&endpoint, lease, "1"), &job(&scratch, name));
        assert_eq!(
            one.wait(Duration::from_secs(10)),
            Some(0),
            "{}",
            one.stderr()
        );
    }
    let history = scratch.history();
    assert_eq!(most_at_once(&history), 2, "{history:#?}");
    assert_tokens_rise(&history);
}
