//! PostgreSQL's own tests, beyond the store-independent list: what a server may ask for (`auth`),
//! connections, URLs and standbys (`conn`), several holders (`holders`), the lease row and the server's clock (`lease`), the
//! line of waiters (`line`), the schema and other roles (`schema`), an uncontended start
//! (`start`). Here: what no other store has (sessions an administrator can terminate, fencing in
//! the same database, tables made on first use) and what it must not do (a waiter herd).

mod auth;
mod conn;
mod failover;
mod holders;
mod holders_fencing;
mod lease;
mod line;
mod schema;
mod start;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// Slack for a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(1);

#[test]
fn terminated_sessions_cost_the_leader_nothing_and_the_waiter_still_gets_the_handover() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let go = scratch.path("go");
    let job_a = format!(
        r#"while [ ! -e '{go}' ]; do sleep 0.05; done"#,
        go = go.display()
    );
    let mut a = Instance::start(&lease_args(&endpoint, "term"), &scratch.job("a", &job_a));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&lease_args(&endpoint, "term"), &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));

    // Every session of every instance, the leader's renewal session and the waiter's LISTEN
    // session among them.
    let killed = pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'leader-exec'",
    );
    assert!(
        killed.trim().parse::<i32>().unwrap() >= 3,
        "sessions terminated: {killed}"
    );
    // Longer than the renew deadline: the leader reconnected and renewed.
    std::thread::sleep(RENEW_DEADLINE + SLACK);
    assert!(a.running(), "leader-exec exited: {}", a.stderr());
    assert!(b.running(), "the waiter exited: {}", b.stderr());
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());

    // The waiter listens again: the release wakes it at once, not at the lease's expiry.
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    let handover = Duration::from_nanos((b_start.time() - a_end.time()) as u64);
    assert!(
        handover < Duration::from_millis(1000),
        "handover took {handover:?}"
    );
    assert_one_at_a_time(&scratch.history());
    assert!(pg.held().is_empty(), "{:?}", pg.held());
}

/// The recipe of docs/postgresql.md ("Fencing in the same database"), one statement: the job's
/// write commits only while the lease row still holds its token, and the row lock (FOR KEY
/// SHARE) makes a takeover wait for the write.
fn fenced_insert(lease: &str) -> String {
    format!(
        "INSERT INTO work (token) SELECT $LEADER_TOKEN FROM leader_exec_leases \
         WHERE name = '{lease}' AND token = $LEADER_TOKEN AND holder IS NOT NULL FOR KEY SHARE"
    )
}

/// A job body (for `Scratch::job`): the recipe of docs/postgresql.md ("Fencing in the same
/// database") as a transaction held open for `hold`. Its first statement writes `work` through
/// the fence on the job's row of `lease` (`NAME`, or a slot row `NAME/k` with several holders),
/// found by its token; once it is done the job records `fenced NAME TIME`, then the transaction
/// sleeps `hold` and commits, and the job records `committed NAME STATUS ROWS TIME` (psql's
/// exit status, the rows of `work` with its token).
pub(crate) fn fenced_transaction(
    endpoint: &str,
    lease: &str,
    name: &str,
    hold: Duration,
) -> String {
    format!(
        r#"psql -X -q -At -v ON_ERROR_STOP=1 -d '{endpoint}' <<SQL
BEGIN;
INSERT INTO work (token) SELECT $LEADER_TOKEN FROM leader_exec_leases
 WHERE token = $LEADER_TOKEN AND (name = '{lease}' OR starts_with(name, '{lease}/'))
   AND holder IS NOT NULL
   FOR KEY SHARE;
\! echo "fenced {name} \$(date +%s%N)" >> "$h"
SELECT pg_sleep({hold});
COMMIT;
SQL
status=$?
rows=$(psql -X -q -At -d '{endpoint}' -c "SELECT count(*) FROM work WHERE token = $LEADER_TOKEN")
echo "committed {name} $status $rows $(date +%s%N)" >> "$h""#,
        hold = hold.as_secs_f64(),
    )
}

#[test]
fn a_frozen_old_leaders_fenced_write_is_rejected_after_a_takeover() {
    let pg = Postgres::start();
    pg.psql("CREATE TABLE work (token bigint NOT NULL)");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let go = scratch.path("go");
    // Waits for the go file, then writes through the fence and records how many rows it wrote.
    let job = |name: &str| {
        scratch.job(
            name,
            &format!(
                r#"while [ ! -e '{go}' ]; do sleep 0.05; done
out=$(psql -X -q -At -v ON_ERROR_STOP=1 -d '{endpoint}' -c "{sql}" 2>&1)
echo "wrote {name} $(echo "$out" | tr ' ' _) $(date +%s%N)" >> "$h"
sleep 30"#,
                go = go.display(),
                sql = fenced_insert("fence"),
            ),
        )
    };
    let a = Instance::start(&lease_args(&endpoint, "fence"), &job("a"));
    let old = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let mut b = Instance::start(&lease_args(&endpoint, "fence"), &job("b"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));

    // The wrapper freezes (a VM pause, SIGSTOP): it can no longer stop its command, which runs
    // on, and its lease runs out on the server.
    let supervisor = supervisor_of(a.pid());
    a.signal(Signal::SIGSTOP);
    if let Some(s) = supervisor {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(s), Signal::SIGSTOP);
    }
    let new = scratch
        .wait_record("start", "b", TTL + Duration::from_secs(10))
        .expect("b took over")
        .token();
    assert!(new > old);

    // Both commands write now: only the current leader's write commits.
    std::fs::write(&go, "").unwrap();
    let wrote_a = scratch
        .wait_record("wrote", "a", Duration::from_secs(10))
        .expect("a tried");
    let wrote_b = scratch
        .wait_record("wrote", "b", Duration::from_secs(10))
        .expect("b tried");
    assert!(
        wrote_a.fields[0].is_empty() || wrote_a.fields.len() == 1,
        "{wrote_a:?}"
    );
    let rows = pg.psql("SELECT token FROM work ORDER BY token");
    assert_eq!(
        rows.trim(),
        new.to_string(),
        "a: {wrote_a:?} b: {wrote_b:?}"
    );

    if let Some(s) = supervisor {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(s), Signal::SIGCONT);
    }
    a.signal(Signal::SIGCONT);
    b.signal(Signal::SIGTERM);
    let _ = b.wait(Duration::from_secs(5));
}

#[test]
fn a_takeover_waits_for_a_fenced_transaction_that_began_before_it() {
    let pg = Postgres::start();
    pg.psql("CREATE TABLE work (token bigint NOT NULL)");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let a = Instance::start(
        &lease_args(&endpoint, "held"),
        &scratch.job("a", "sleep 30"),
    );
    let token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    // The old leader's job: its transaction took the fence, then the job froze.
    let mut psql = KillOnDrop(
        std::process::Command::new("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", &endpoint])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    use std::io::Write;
    let stdin = psql.0.stdin.as_mut().unwrap();
    writeln!(
        stdin,
        "BEGIN; {};",
        fenced_insert("held").replace("$LEADER_TOKEN", &token.to_string())
    )
    .unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));

    // The leader freezes; a new instance would take over at expiry, but the row is locked.
    a.signal(Signal::SIGSTOP);
    if let Some(s) = supervisor_of(a.pid()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(s), Signal::SIGSTOP);
    }
    let b = Instance::start(&lease_args(&endpoint, "held"), &scratch.job("b", "true"));
    std::thread::sleep(TTL + SLACK);
    assert!(
        scratch.wait_record("start", "b", Duration::ZERO).is_none(),
        "b took over while the old leader's fenced transaction was open"
    );
    // The old transaction commits: it began while its token held the row.
    writeln!(stdin, "COMMIT;").unwrap();
    stdin.flush().unwrap();
    let new = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b took over once the transaction ended")
        .token();
    assert!(new > token);
    assert_eq!(pg.psql("SELECT token FROM work").trim(), token.to_string());
    // After the takeover the old token writes nothing.
    let out = pg.psql(&fenced_insert("held").replace("$LEADER_TOKEN", &token.to_string()));
    assert!(out.trim().is_empty());
    assert_eq!(pg.psql("SELECT count(*) FROM work").trim(), "1");
    a.signal(Signal::SIGKILL);
    drop(b);
}

#[test]
fn concurrent_first_use_of_an_empty_database_makes_the_tables_once() {
    let pg = Postgres::start();
    pg.psql("CREATE DATABASE fresh");
    let scratch = Scratch::new();
    let endpoint = format!("postgres://postgres@127.0.0.1:{}/fresh", pg.port);
    let mut instances: Vec<Instance> = (0..8)
        .map(|i| {
            Instance::start(
                &lease_args(&endpoint, "first"),
                &scratch.job(&format!("i{i}"), "sleep 0.1"),
            )
        })
        .collect();
    for instance in &mut instances {
        assert_eq!(
            instance.wait(Duration::from_secs(30)),
            Some(0),
            "{}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_one_at_a_time(&history);
    let mut tokens: Vec<i64> = history
        .iter()
        .filter(|r| r.kind == "start")
        .map(Record::token)
        .collect();
    // From the token sequence, which starts at 1 and which an INSERT that lost the race to
    // create the row also draws from (each newcomer sends one with its first attempt): eight
    // distinct tokens, not necessarily 1 to 8, the first of them at most 8 — one sequence,
    // made once, never set back.
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "{tokens:?}");
    assert!(tokens[0] <= 8, "{tokens:?}");
    let url = format!("postgres://postgres@127.0.0.1:{}/fresh", pg.port);
    let out = std::process::Command::new("psql")
        .args(["-X", "-At", "-d", &url, "-c"])
        .arg("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'leader_exec_%'")
        .output()
        .unwrap();
    // Leases, records, waiters.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
}

#[test]
fn a_database_that_does_not_exist_is_refused_with_125_and_not_created() {
    let pg = Postgres::start();
    let endpoint = format!("postgres://postgres@127.0.0.1:{}/nosuchdb", pg.port);
    let started = Instant::now();
    let out = Cmd::bare()
        .args(lease_args(&endpoint, "x"))
        .args(["--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("nosuchdb"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let dbs = pg.psql("SELECT datname FROM pg_database");
    assert!(!dbs.contains("nosuchdb"));
    // A password in the URL is never echoed.
    let endpoint = format!("postgres://postgres:hunter2@127.0.0.1:{}/nosuchdb", pg.port);
    let out = Cmd::bare()
        .args(lease_args(&endpoint, "x"))
        .args(["--", "true"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// Statements leader-exec has run so far (pg_stat_statements counts each call as it ends),
/// without the look at the line every waiter makes once per --retry-period whatever happens
/// (renewing its own row, watching for a crashed holder): those are counted by `polls`.
fn requests(pg: &Postgres) -> i64 {
    pg.psql(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' AND query NOT LIKE 'LISTEN%' AND query NOT LIKE 'WITH mine AS%'",
    )
    .trim()
    .parse()
    .unwrap()
}

/// The waiters' periodic looks at the line so far.
fn polls(pg: &Postgres) -> i64 {
    pg.psql(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'WITH mine AS%'",
    )
    .trim()
    .parse()
    .unwrap()
}

/// Attempts to take a lease row so far (won or not).
fn attempts(pg: &Postgres) -> i64 {
    pg.psql(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'WITH won AS%UPDATE%'",
    )
    .trim()
    .parse()
    .unwrap()
}

#[test]
fn two_hundred_waiters_make_a_bounded_number_of_requests_per_handover() {
    const WAITERS: usize = 200;
    const HANDOVERS: usize = 5;
    let _alone = alone();
    let pg = Postgres::start_with("-c shared_preload_libraries=pg_stat_statements");
    pg.psql("CREATE EXTENSION pg_stat_statements");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    // A long TTL keeps the waiters' expiry look-ups out of the measured window.
    let args = [
        "--endpoints",
        endpoint.as_str(),
        "--lease",
        "herd",
        "--ttl",
        "60s",
        "--renew-deadline",
        "40s",
        "--retry-period",
        "2s",
        "--kill-after",
        "4s",
    ];
    let go = |name: &str| scratch.path(&format!("go-{name}"));
    let job = |name: &str| {
        scratch.job(
            name,
            &format!(
                "while [ ! -e '{}' ]; do sleep 0.05; done",
                go(name).display()
            ),
        )
    };
    let _first = Instance::start(&args, &job("w0"));
    scratch
        .wait_record("start", "w0", Duration::from_secs(10))
        .expect("the first leader started");
    let mut waiters: Vec<Instance> = (1..=WAITERS)
        .map(|i| Instance::start(&args, &job(&format!("w{i}"))))
        .collect();
    // Every waiter stands in line.
    assert!(
        wait_for(Duration::from_secs(120), || {
            pg.psql("SELECT count(*) FROM leader_exec_waiters WHERE name = 'herd'")
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
                >= WAITERS
        }),
        "not every waiter stands in line"
    );
    std::thread::sleep(Duration::from_secs(1));
    // Only the first few listen (PostgreSQL wakes every listening session on each NOTIFY): the
    // leader's session and four waiters'.
    let listening: usize = pg
        .psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leader-exec' AND query LIKE 'LISTEN%'")
        .trim()
        .parse()
        .unwrap();
    assert!((2..=5).contains(&listening), "{listening} sessions listen");
    let mut per_handover = Vec::new();
    let mut attempts_per_handover = Vec::new();
    let mut leader = "w0".to_owned();
    for _ in 0..HANDOVERS {
        let before = requests(&pg);
        let attempts_before = attempts(&pg);
        let ended = Instant::now();
        std::fs::write(go(&leader), "").unwrap();
        let next = wait_for(Duration::from_secs(30), || {
            scratch
                .history()
                .iter()
                .filter(|r| r.kind == "start")
                .count()
                > per_handover.len() + 1
        });
        assert!(next, "no handover");
        let took = ended.elapsed();
        std::thread::sleep(Duration::from_millis(500));
        let requests = requests(&pg) - before;
        attempts_per_handover.push(attempts(&pg) - attempts_before);
        let history = scratch.history();
        leader = history
            .iter()
            .rfind(|r| r.kind == "start")
            .unwrap()
            .name
            .clone();
        eprintln!("handover with {WAITERS} waiters: {requests} requests, {took:?}");
        per_handover.push(requests);
    }
    // The release wakes the first waiter in line only: one attempt per handover, whatever the
    // number of waiters. In all, the old leader's release, the winner's acquisition and its
    // status record; and, if they fall in the window, the new leader's renewal session's setup
    // and first renewal, and the session setup and NOTIFY check of the waiter that moved up into
    // the listening places, each session's setup a few statements (measured here: 4 to 20
    // statements per handover with 200 waiters; never more attempts than one).
    eprintln!("requests per handover with {WAITERS} waiters: {per_handover:?}");
    eprintln!("attempts per handover with {WAITERS} waiters: {attempts_per_handover:?}");
    assert!(
        attempts_per_handover.iter().all(|a| *a == 1),
        "attempts per handover with {WAITERS} waiters: {attempts_per_handover:?}"
    );
    for requests in &per_handover {
        assert!(
            *requests <= 30,
            "{requests} requests for one handover with {WAITERS} waiters: {per_handover:?}"
        );
    }
    // Besides, each waiter looks at the line about once per --retry-period (2 s), no more.
    let (before, since) = (polls(&pg), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let rate = (polls(&pg) - before) as f64 / since.elapsed().as_secs_f64();
    eprintln!("reads of the row with {WAITERS} waiters: {rate:.1}/s");
    assert!(
        rate <= 1.5 * WAITERS as f64 / 2.0,
        "{rate:.1} reads/s with {WAITERS} waiters"
    );
    assert_one_at_a_time(&scratch.history());
    for w in &mut waiters {
        w.signal(Signal::SIGTERM);
    }
}

#[test]
fn sslmode_is_understood_as_libpq_does() {
    let mut pg = Postgres::start();
    let scratch = Scratch::new();
    make_certificates(&scratch);
    pg.enable_tls(&scratch.path("server.crt"), &scratch.path("server.key"));
    let ca = scratch.path("ca.crt");
    let run = |host: &str, query: &str| {
        let endpoint = format!("postgres://postgres@{host}:{}/postgres?{query}", pg.port);
        let out = Cmd::bare()
            .args(lease_args(&endpoint, "tls"))
            .args(["--", "sh", "-c", "echo $LEADER_TOKEN"])
            .output();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ca_query = |mode: &str| format!("sslmode={mode}&sslrootcert={}", ca.display());
    // Encrypted without checking the certificate, as libpq does.
    for query in ["sslmode=prefer", "sslmode=require", ""] {
        let (code, stderr) = run("127.0.0.1", query);
        assert_eq!(code, Some(0), "{query}: {stderr}");
    }
    // The chain, from the CA file given.
    let (code, stderr) = run("127.0.0.1", &ca_query("verify-full"));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = run("localhost", &ca_query("verify-ca"));
    assert_eq!(code, Some(0), "{stderr}");
    // The certificate names 127.0.0.1, not localhost.
    let (code, stderr) = run("localhost", &ca_query("verify-full"));
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    // Without the CA file the platform's trust store does not know this CA.
    let (code, stderr) = run("127.0.0.1", "sslmode=verify-full");
    assert_eq!(code, Some(125), "{stderr}");
    // The sessions are encrypted: the server says so.
    let endpoint = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?{}",
        pg.port,
        ca_query("verify-full")
    );
    let scratch_job = Scratch::new();
    let _leader = Instance::start(
        &lease_args(&endpoint, "tls"),
        &scratch_job.job("a", "sleep 30"),
    );
    scratch_job
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    // The leader's request session and its renewal session (opened at the first renewal).
    let query = "SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'leader-exec'";
    let mut ssl = String::new();
    wait_for(Duration::from_secs(10), || {
        ssl = pg.psql(query);
        ssl.trim()
            .split_once('|')
            .is_some_and(|(n, _)| n.parse::<i32>().unwrap_or(0) >= 2)
    });
    let (sessions, all_ssl) = ssl.trim().split_once('|').unwrap();
    assert!(sessions.parse::<i32>().unwrap() >= 2, "{ssl}");
    assert_eq!(all_ssl, "t", "{ssl}");
}

#[test]
fn a_server_frozen_longer_than_the_deadline_makes_the_leader_step_down_first() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let job = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; echo "end a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;
    let mut a = Instance::start(&lease_args(&endpoint, "frozen"), &scratch.job("a", job));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&lease_args(&endpoint, "frozen"), &scratch.job("b", "true"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));

    // The whole server (postmaster and every backend) stops answering for longer than the TTL.
    let frozen = Instant::now();
    pg.freeze();
    let term = scratch.wait_record("term", "a", Duration::from_secs(10));
    let stepped_down = frozen.elapsed();
    std::thread::sleep((TTL + SLACK).saturating_sub(frozen.elapsed()));
    pg.thaw();
    let term = term.expect("a's command got no signal");
    assert!(
        stepped_down <= RENEW_DEADLINE + SLACK,
        "stepped down {stepped_down:?} after the freeze"
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(b_start.time() > term.time());
    assert_one_at_a_time(&scratch.history());
}

/// A timing whose TTL (10 s) is far longer than its retry period (2 s, the polling interval of
/// a waiter that does not listen): a handover in well under the TTL cannot be the expiry.
const SLOW_TTL: [&str; 8] = [
    "--ttl",
    "10s",
    "--renew-deadline",
    "6s",
    "--retry-period",
    "2s",
    "--kill-after",
    "1s",
];

/// Sessions of leader-exec whose last statement was a LISTEN.
fn listening_sessions(pg: &Postgres) -> i64 {
    pg.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leader-exec' AND query LIKE 'LISTEN%'",
    )
    .trim()
    .parse()
    .unwrap()
}

/// Leader a waits for a go file; b and c wait behind it. Returns the handover from a's end to
/// the next start, the LISTEN sessions seen while b and c waited, and every stderr.
fn handover_with(endpoint: &str, lease: &str, pg: &Postgres) -> (Duration, i64, Vec<String>) {
    let scratch = Scratch::new();
    let go = scratch.path("go");
    let job_a = format!(
        r#"while [ ! -e '{go}' ]; do sleep 0.05; done"#,
        go = go.display()
    );
    let mut args = vec!["-v", "--endpoints", endpoint, "--lease", lease];
    args.extend(SLOW_TTL);
    let mut a = Instance::start(&args, &scratch.job("a", &job_a));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&args, &scratch.job("b", "sleep 0.3"));
    let mut c = Instance::start(&args, &scratch.job("c", "sleep 0.3"));
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)
        && campaigning(&c)));
    // Past the first attempt of both and a probe's wait.
    std::thread::sleep(Duration::from_millis(1500));
    let listening = listening_sessions(pg);

    std::fs::write(&go, "").unwrap();
    for (name, instance) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        assert_eq!(
            instance.wait(Duration::from_secs(30)),
            Some(0),
            "{name}: {}",
            instance.stderr()
        );
    }
    let history = scratch.history();
    assert_one_at_a_time(&history);
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    let next = history
        .iter()
        .filter(|r| r.kind == "start" && r.name != "a")
        .map(Record::time)
        .min()
        .expect("b or c started");
    let handover = Duration::from_nanos((next - a_end.time()) as u64);
    eprintln!("{endpoint}: handover {handover:?}, LISTEN sessions {listening}");
    (
        handover,
        listening,
        vec![a.stderr(), b.stderr(), c.stderr()],
    )
}

#[test]
fn with_listening_off_in_the_url_waiters_poll_and_a_handover_comes_within_the_retry_period() {
    let pg = Postgres::start();
    // Only on and off are understood.
    let bad = Cmd::bare()
        .args(["--endpoints"])
        .arg(format!("{}?leader_exec_listen=maybe", Store::endpoint(&pg)))
        .args(["--lease", "polled", "--", "true"])
        .output();
    assert_eq!(bad.status.code(), Some(125));
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(message.contains("leader_exec_listen=maybe"), "{message}");

    let endpoint = format!("{}?leader_exec_listen=off", Store::endpoint(&pg));
    let (handover, listening, stderrs) = handover_with(&endpoint, "polled", &pg);
    assert_eq!(listening, 0, "no session LISTENs");
    // The waiters read the row every --retry-period (2 s): not at the 10 s expiry they saw.
    assert!(
        handover < Duration::from_secs(2) + SLACK,
        "handover took {handover:?}"
    );
    for stderr in &stderrs {
        assert!(!stderr.contains("did not arrive"), "{stderr}");
    }
    assert!(pg.held().is_empty(), "{:?}", pg.held());
}

#[test]
fn with_listening_on_the_notify_self_test_passes_and_a_handover_is_fast() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let (handover, listening, stderrs) = handover_with(&endpoint, "listened", &pg);
    // a's session and the two waiters' at least.
    assert!(listening >= 2, "LISTEN sessions: {listening}");
    // Woken by the release: well under the 2 s a poll could take.
    assert!(
        handover < Duration::from_millis(1000),
        "handover took {handover:?}"
    );
    for stderr in &stderrs {
        assert!(!stderr.contains("did not arrive"), "{stderr}");
    }
    assert!(pg.held().is_empty(), "{:?}", pg.held());
}

/// The documented fence held open longer than --renew-deadline, the store healthy: the leader's
/// renewals go on beside it (a renewal changes neither holder nor token), so the leader keeps
/// leading, its command ends as it likes (exit 0), and its write commits.
#[test]
fn a_fenced_transaction_longer_than_the_renew_deadline_leaves_the_leader_leading() {
    let pg = Postgres::start();
    pg.psql("CREATE TABLE work (token bigint NOT NULL)");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let hold = RENEW_DEADLINE + Duration::from_secs(2);
    let body = fenced_transaction(&endpoint, "long", "a", hold);
    let mut a = Instance::start(&lease_args(&endpoint, "long"), &scratch.job("a", &body));
    let token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let fenced = scratch
        .wait_record("fenced", "a", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("a's fence: {:?} {}", scratch.history(), a.stderr()));
    assert_eq!(
        a.wait(hold + Duration::from_secs(10)),
        Some(0),
        "{:?} {}",
        scratch.history(),
        a.stderr()
    );
    let committed = scratch
        .wait_record("committed", "a", Duration::ZERO)
        .expect("a's transaction ended");
    assert_eq!(committed.fields[..2], ["0", "1"], "{committed:?}");
    // The transaction was open as long as asked.
    let open = Duration::from_nanos((committed.time() - fenced.time()) as u64);
    assert!(open >= hold, "open for {open:?}");
    assert_eq!(pg.psql("SELECT token FROM work").trim(), token.to_string());
    assert!(
        scratch.wait_record("end", "a", Duration::ZERO).is_some(),
        "{:?}",
        scratch.history()
    );
}
