//! PostgreSQL only: no wall clock decides a takeover, and tokens never reset.
//!
//! The server's `now()` is a wall clock; a held row is taken over only after the taker has seen
//! it unchanged for a full TTL on its own boot clock, and tokens come from a sequence the tables
//! do not own, with DELETE and TRUNCATE of lease rows refused.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// Slack for a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(2);

/// A job that waits for `go` and records a TERM it gets (it ignores it: only SIGKILL ends it
/// before `go`).
fn waiting_job(scratch: &Scratch, name: &str, go: &std::path::Path) -> Vec<String> {
    scratch.job(
        name,
        &format!(
            r#"trap 'echo "term {name} $(date +%s%N)" >> "$h"' TERM
while [ ! -e '{go}' ]; do sleep 0.05; done"#,
            go = go.display()
        ),
    )
}

fn starts(scratch: &Scratch) -> usize {
    scratch
        .history()
        .iter()
        .filter(|r| r.kind == "start")
        .count()
}

#[test]
fn a_server_clock_step_lets_no_waiter_and_no_fresh_instance_start_beside_the_leader() {
    let (pg, clock) = Postgres::start_with_faketime();
    let server_now = || pg.psql("SELECT extract(epoch FROM now())::bigint");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let go = scratch.path("go");
    let args = lease_args(&endpoint, "clock");
    let mut a = Instance::start(&args, &waiting_job(&scratch, "a", &go));
    let token_a = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let mut b = Instance::start(&args, &waiting_job(&scratch, "b", &go));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));
    // Let b see the row a few times.
    std::thread::sleep(2 * RETRY_PERIOD);

    // The server's wall clock jumps 30 s ahead (NTP or an operator stepping it): every lease
    // looks expired by `expires_at`.
    let before: i64 = server_now().trim().parse().unwrap();
    std::fs::write(clock.path(), "+30\n").unwrap();
    let after: i64 = server_now().trim().parse().unwrap();
    assert!(
        after - before >= 29,
        "the server clock did not step: {before} -> {after}"
    );
    // A fresh instance that cron starts now does not take the row: the leader is not gone.
    let mut c = Instance::start(
        &[args.as_slice(), &["--no-wait"]].concat(),
        &waiting_job(&scratch, "c", &go),
    );
    assert_eq!(c.wait(Duration::from_secs(10)), Some(124), "{}", c.stderr());
    // Nor does the waiter, for two TTLs; the leader keeps renewing and its command runs.
    let watch_until = Instant::now() + 2 * TTL + SLACK;
    while Instant::now() < watch_until {
        assert!(a.running(), "the leader exited: {}", a.stderr());
        assert!(b.running(), "the waiter exited: {}", b.stderr());
        assert_eq!(starts(&scratch), 1, "{:#?}", scratch.history());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Stepped back again (30 s backwards): nothing changes either.
    std::fs::write(clock.path(), "+0\n").unwrap();
    let back: i64 = server_now().trim().parse().unwrap();
    assert!(back < after, "the server clock did not step back");
    let watch_until = Instant::now() + TTL + SLACK;
    while Instant::now() < watch_until {
        assert!(a.running(), "the leader exited: {}", a.stderr());
        assert_eq!(starts(&scratch), 1, "{:#?}", scratch.history());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The leader's command ends: the waiter takes over at once, with a greater token.
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    let token_b = scratch
        .wait_record("start", "b", Duration::from_secs(5))
        .expect("b took over after the release")
        .token();
    assert!(token_b > token_a, "{token_b} after {token_a}");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    let history = scratch.history();
    assert!(!history.iter().any(|r| r.kind == "term"), "{history:#?}");
    assert_one_at_a_time(&history);
}

/// Long lease, slow renewals: after a renewal the row keeps its `expires_at` for 6 s.
const SLOW: [&str; 8] = [
    "--ttl",
    "30s",
    "--renew-deadline",
    "20s",
    "--retry-period",
    "6s",
    "--kill-after",
    "1s",
];

/// A server clock stepped ahead makes a leader's row look expired until its next renewal. An
/// instance with another --max-holders must not start beside the leader then, in either
/// direction: N = 1 holding and N = 3 joining, or N = 3 holding a slot row and N = 1 joining
/// for the free row `NAME`. A `--no-wait` joiner stands by (124), or is refused (125) once the
/// leader's renewal makes its row look live again; a waiting joiner is refused then too; no
/// joiner's command ever starts.
#[test]
fn a_server_clock_step_lets_no_instance_with_another_max_holders_start_beside_the_leader() {
    let (pg, clock) = Postgres::start_with_faketime();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let args = |lease: &'static str, n: &'static str, more: &[&'static str]| {
        let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", lease];
        args.extend(SLOW);
        args.extend(["--max-holders", n]);
        args.extend(more);
        args
    };
    let renewals = |row: &str| -> i64 {
        let sql = format!("SELECT renewals FROM leader_exec_leases WHERE name = '{row}'");
        pg.psql(&sql).trim().parse().unwrap()
    };
    // Steps the server's clock ahead right after `row`'s renewal: its row then looks expired
    // for a retry period (6 s), until the next renewal.
    let step_after_renewal = |row: &str, ahead: u32| {
        let seen = renewals(row);
        assert!(
            wait_for(Duration::from_secs(10), || renewals(row) > seen),
            "{row} was not renewed"
        );
        std::fs::write(clock.path(), format!("+{ahead}\n")).unwrap();
        let expired =
            format!("SELECT expires_at < now() FROM leader_exec_leases WHERE name = '{row}'");
        assert_eq!(pg.psql(&expired).trim(), "t", "the clock did not step");
    };
    let go = |name: &str| scratch.path(&format!("go-{name}"));
    let job = |name: &str| waiting_job(&scratch, name, &go(name));
    let started = |name: &str| {
        scratch
            .history()
            .iter()
            .any(|r| r.kind == "start" && r.name == name)
    };
    // Within two retry periods and slack: a waiter looks again every retry period.
    let stands_by_or_is_refused = |mut joiner: Instance, name: &str| {
        let code = joiner.wait(Duration::from_secs(20));
        assert!(
            matches!(code, Some(124 | 125)),
            "{name}: {code:?}: {}",
            joiner.stderr()
        );
        assert!(!started(name), "{name} started: {:#?}", scratch.history());
    };

    // N = 1 holds "one"; the clock steps; N = 3 joins, with --no-wait and waiting.
    let mut a = Instance::start(&args("one", "1", &[]), &job("a"));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    step_after_renewal("one", 60);
    let c = Instance::start(&args("one", "3", &["--no-wait"]), &job("c"));
    let d = Instance::start(&args("one", "2", &[]), &job("d"));
    stands_by_or_is_refused(c, "c");
    // The waiting one is refused once a's renewal makes its row look live again.
    stands_by_or_is_refused(d, "d");
    std::fs::write(clock.path(), "+0\n").unwrap();

    // N = 3 holds "three" with a slot row only (the row NAME released); the clock steps; N = 1
    // joins for the free row NAME.
    let mut b1 = Instance::start(&args("three", "3", &[]), &job("b1"));
    scratch
        .wait_record("start", "b1", Duration::from_secs(10))
        .expect("b1 started");
    let mut b2 = Instance::start(&args("three", "3", &[]), &job("b2"));
    scratch
        .wait_record("start", "b2", Duration::from_secs(10))
        .expect("b2 started");
    std::fs::write(go("b1"), "").unwrap();
    assert_eq!(b1.wait(Duration::from_secs(10)), Some(0), "{}", b1.stderr());
    step_after_renewal("three/2", 120);
    let e = Instance::start(&args("three", "1", &["--no-wait"]), &job("e"));
    stands_by_or_is_refused(e, "e");

    // The leaders ran throughout, alone.
    assert!(a.running(), "{}", a.stderr());
    assert!(b2.running(), "{}", b2.stderr());
    std::fs::write(clock.path(), "+0\n").unwrap();
    for (name, instance) in [("a", &mut a), ("b2", &mut b2)] {
        std::fs::write(go(name), "").unwrap();
        assert_eq!(
            instance.wait(Duration::from_secs(10)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    let starts = history.iter().filter(|r| r.kind == "start").count();
    assert_eq!(starts, 3, "{history:#?}");
}

/// A crashed holder's row is taken over only after the taker has itself seen it unchanged for a
/// full TTL: a waiter that watched the holder takes over about a TTL after the holder's last
/// renewal; one started after the crash a TTL after its own start, however long ago the holder's
/// lease ran out by `expires_at`; a `--no-wait` instance, or one whose `--wait-timeout` is
/// shorter than a TTL, finds the row held and exits 124.
#[test]
fn a_crashed_holder_is_taken_over_only_after_a_full_ttl_seen_by_the_taker() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let go = scratch.path("go");
    let args = lease_args(&endpoint, "crash");
    let a = Instance::start(&args, &waiting_job(&scratch, "a", &go));
    let token_a = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let mut b = Instance::start(&args, &waiting_job(&scratch, "b", &go));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));
    std::thread::sleep(2 * RETRY_PERIOD);

    // leader-exec dies without releasing (its supervisor kills the command's group).
    let killed = now_ns();
    a.signal(Signal::SIGKILL);
    let mut c = Instance::start(
        &[args.as_slice(), &["--no-wait"]].concat(),
        &waiting_job(&scratch, "c", &go),
    );
    // Nor does one whose --wait-timeout is shorter than a TTL: it gives up, exit 124.
    let mut e = Instance::start(
        &[args.as_slice(), &["--wait-timeout", "2s"]].concat(),
        &waiting_job(&scratch, "e", &go),
    );
    assert_eq!(c.wait(Duration::from_secs(10)), Some(124), "{}", c.stderr());
    assert_eq!(e.wait(Duration::from_secs(10)), Some(124), "{}", e.stderr());
    let start_b = scratch
        .wait_record("start", "b", TTL + RETRY_PERIOD + 2 * SLACK)
        .expect("the waiter took over");
    // The holder's last renewal was sent at most a retry period before it was killed; the
    // waiter counted a full TTL from after it.
    let took = Duration::from_nanos((start_b.time() - killed) as u64);
    assert!(
        took >= TTL - RETRY_PERIOD,
        "taken over {took:?} after the crash"
    );
    assert!(
        start_b.token() > token_a,
        "{} after {token_a}",
        start_b.token()
    );

    // Now b crashes, and d starts only afterwards: d counts a full TTL from its own first look,
    // whatever the row's `expires_at` says.
    std::thread::sleep(2 * RETRY_PERIOD);
    b.signal(Signal::SIGKILL);
    let _ = b.wait(Duration::from_secs(5));
    std::thread::sleep(RETRY_PERIOD);
    let launched = now_ns();
    let mut d = Instance::start(
        &[args.as_slice(), &["--wait-timeout", "30s"]].concat(),
        &waiting_job(&scratch, "d", &go),
    );
    let start_d = scratch
        .wait_record("start", "d", TTL + 3 * SLACK)
        .expect("the fresh waiter took over");
    let took = Duration::from_nanos((start_d.time() - launched) as u64);
    assert!(took >= TTL, "taken over {took:?} after the taker started");
    assert!(start_d.token() > start_b.token());
    std::fs::write(&go, "").unwrap();
    assert_eq!(d.wait(Duration::from_secs(10)), Some(0), "{}", d.stderr());
    let history = scratch.history();
    assert!(
        !history.iter().any(|r| r.name == "c" || r.name == "e"),
        "{history:#?}"
    );
    assert_one_at_a_time(&history);
}

/// Timing with a long grace, so that "stopped at once" (SIGKILL at the next renewal) and
/// "stopped after the deadline and the grace" are far apart: 3 s + 5 s + 0.5 s margin <= 10 s.
const LONG_GRACE: [&str; 8] = [
    "--ttl",
    "10s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "500ms",
    "--kill-after",
    "5s",
];

/// Runs `sql` against a leader: it must lose at once (exit 75, its command SIGKILLed, no TERM)
/// and the next leader's token must be greater.
fn vanish_under_a_leader(
    pg: &Postgres,
    scratch: &Scratch,
    name: &str,
    token: i64,
    sql: &str,
) -> i64 {
    let endpoint = Store::endpoint(pg);
    let go = scratch.path("go");
    let mut args = vec!["-v", "--endpoints", &endpoint, "--lease", "gone"];
    args.extend(LONG_GRACE);
    let mut leader = Instance::start(&args, &waiting_job(scratch, name, &go));
    let start = scratch
        .wait_record("start", name, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{name} started: {}", leader.stderr()));
    assert!(
        start.token() > token,
        "{name}: {} after {token}",
        start.token()
    );
    std::thread::sleep(Duration::from_secs(1));
    let done = Instant::now();
    pg.psql(sql);
    assert_eq!(
        leader.wait(Duration::from_secs(10)),
        Some(75),
        "{sql}: {}",
        leader.stderr()
    );
    let took = done.elapsed();
    // The next renewal (every 500 ms) finds the row gone: SIGKILL then, not TERM after the
    // 3 s deadline and the 5 s grace.
    assert!(
        took < Duration::from_millis(2500),
        "{sql}: stopped after {took:?}"
    );
    assert!(
        !group_alive(start.pid()),
        "{sql}: the command's group lives on"
    );
    let history = scratch.history();
    assert!(
        !history.iter().any(|r| r.kind == "term"),
        "{sql}: the command got a grace: {history:#?}"
    );
    start.token()
}

#[test]
fn deleted_rows_and_dropped_tables_never_reset_tokens_and_their_leader_stops_at_once() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let go = scratch.path("go");
    let mut args = vec!["-v", "--endpoints", &endpoint, "--lease", "gone"];
    args.extend(LONG_GRACE);
    let mut a = Instance::start(&args, &waiting_job(&scratch, "a", &go));
    let token_a = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    // DELETE and TRUNCATE are refused; the leader runs on.
    for sql in [
        "DELETE FROM leader_exec_leases WHERE name = 'gone'",
        "TRUNCATE leader_exec_leases",
    ] {
        let out = pg.try_psql(sql);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sql} was not refused");
        assert!(stderr.contains("leader-exec resign"), "{sql}: {stderr}");
    }
    assert_eq!(
        pg.psql("SELECT count(*) FROM leader_exec_leases").trim(),
        "1"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(a.running(), "{}", a.stderr());
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    std::fs::remove_file(&go).unwrap();

    // A superuser forces it: the guard dropped, the row deleted, the table truncated, the tables
    // dropped (the next instance makes them again, guard included).
    let guard_off = "DROP TRIGGER leader_exec_guard ON leader_exec_leases; ";
    let token_b = vanish_under_a_leader(
        &pg,
        &scratch,
        "b",
        token_a,
        &format!("{guard_off} DELETE FROM leader_exec_leases"),
    );
    let token_c = vanish_under_a_leader(
        &pg,
        &scratch,
        "c",
        token_b,
        &format!("{guard_off} TRUNCATE leader_exec_leases"),
    );
    let token_d = vanish_under_a_leader(
        &pg,
        &scratch,
        "d",
        token_c,
        "DROP TABLE leader_exec_leases, leader_exec_records",
    );
    // And after that, tokens still grow.
    let e = Instance::start(&args, &scratch.job("e", "true"));
    let token_e = scratch
        .wait_record("start", "e", Duration::from_secs(10))
        .expect("e started")
        .token();
    assert!(token_e > token_d, "{token_e} after {token_d}");
    drop(e);
    assert_one_at_a_time(&scratch.history());
}

/// Tables made by the previous version (no `renewals`, no sequence, no guard) are brought up to
/// date by the first instance, and tokens go on from the highest one in the table.
#[test]
fn tables_of_the_previous_version_are_migrated_and_their_tokens_go_on() {
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE leader_exec_leases (name text PRIMARY KEY, holder text, token bigint NOT NULL,
             expires_at timestamptz NOT NULL, ttl_ms bigint NOT NULL DEFAULT 0);
         CREATE TABLE leader_exec_records (key text PRIMARY KEY, value bytea NOT NULL,
             expires_at timestamptz, lease_name text, lease_token bigint);
         INSERT INTO leader_exec_leases VALUES ('old', NULL, 41, now(), 3000),
             ('other', NULL, 7, now(), 3000)",
    );
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    for (name, lease) in [("a", "old"), ("b", "new")] {
        let mut instance =
            Instance::start(&lease_args(&endpoint, lease), &scratch.job(name, "true"));
        assert_eq!(
            instance.wait(Duration::from_secs(10)),
            Some(0),
            "{}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    let token = |name: &str| {
        history
            .iter()
            .find(|r| r.kind == "start" && r.name == name)
            .unwrap()
            .token()
    };
    // The old row goes on from 41; a new name draws above every token in the table.
    assert!(token("a") > 41, "{history:#?}");
    assert!(token("b") > token("a"), "{history:#?}");
    assert_eq!(
        pg.psql("SELECT renewals > 0 FROM leader_exec_leases WHERE name = 'old'")
            .trim(),
        "t"
    );
    let out = pg.try_psql("DELETE FROM leader_exec_leases WHERE name = 'other'");
    assert!(!out.status.success(), "DELETE was not refused");
    // The fence index and the name's highest token are there as well.
    assert_eq!(
        pg.psql(
            "SELECT pg_get_indexdef('leader_exec_fence'::regclass) || ' ' || (
                 SELECT count(*) FROM pg_attribute WHERE attrelid = 'leader_exec_leases'::regclass
                 AND attname = 'top_token' AND NOT attisdropped)"
        )
        .trim(),
        "CREATE UNIQUE INDEX leader_exec_fence ON public.leader_exec_leases USING btree (name, holder, token) 1"
    );
}
