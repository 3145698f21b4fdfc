//! The store against a real MariaDB (the test harness's, [`testdb`](super::testdb)): a lease
//! with N = 1 (acquire, renew, release, take over, the line of waiters, tokens that never go
//! back, a server clock step) here; the sessions (`session.rs`: hosts, read-only servers,
//! objects leader-exec did not make, the session's own settings, the client-side timer, TLS)
//! and what is read and written beside the lease (`records.rs`: readers, holds, fenced records,
//! a job's fence) beside it.

mod line;
mod records;
mod session;
mod slots;

use std::time::{Duration, Instant};

use super::super::flags::tests::flags;
use super::super::{
    Campaign, Handover, Keeper, Leader, LeaseTiming, Open, Read, Records, Renewal, Scope, Turn,
};
use super::testdb::*;
use super::*;

const TTL: Duration = Duration::from_secs(2);

fn url(port: u16) -> String {
    format!("mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{port}/{MARIADB_DATABASE}")
}

fn target_of(url: &str) -> Target {
    let flags = flags(&["--endpoints", url]);
    target::parse(flags.endpoints.clone(), flags).expect("a valid URL")
}

fn candidate(url: &str, identity: &str, ttl: Duration) -> MySql {
    candidate_for(url, "jobs", identity, ttl)
}

fn candidate_for(url: &str, name: &str, identity: &str, ttl: Duration) -> MySql {
    let open = opened(name, identity, ttl, Duration::from_millis(500), 1);
    MySql::new(target_of(url), open).unwrap()
}

/// What a candidate of lease `name` under `/leader-exec/` is opened with: `--ttl` `ttl`,
/// `--retry-period` `retry_period`, `--max-holders` `max_holders`.
fn opened(
    name: &str,
    identity: &str,
    ttl: Duration,
    retry_period: Duration,
    max_holders: u32,
) -> Open {
    Open {
        scope: Scope {
            lease: name.into(),
            prefix: "/leader-exec/".into(),
        },
        identity: identity.into(),
        timing: LeaseTiming {
            ttl,
            retry_period,
            needed: Duration::ZERO,
        },
        connect_timeout: Duration::from_secs(5),
        max_holders,
    }
}

/// A reader of lease `jobs` (`status`, `check`, `resign --force`).
fn reader_of(url: &str) -> MySql {
    let open = opened("jobs", "", Duration::ZERO, Duration::ZERO, 1);
    MySql::reader(target_of(url), open).unwrap()
}

/// Waits behind the row until this candidate leads; its token, and how long that took.
async fn wait_to_lead(m: &MySql, limit: Duration) -> (i64, Duration) {
    let started = Instant::now();
    let candidacy = m.campaign().await.unwrap();
    loop {
        match m.check_turn(&candidacy).await.unwrap() {
            Turn::Leading { token } => return (token, started.elapsed()),
            Turn::Behind(ahead) => {
                assert!(started.elapsed() < limit, "never took the row");
                let wait = ahead.expires_in.unwrap();
                tokio::time::sleep(wait.min(Duration::from_millis(100))).await;
            }
            other => panic!("{other:?}"),
        }
    }
}

async fn leads(m: &MySql) -> Option<i64> {
    let candidacy = m.campaign().await.expect("campaign");
    match m.check_turn(&candidacy).await.expect("check_turn") {
        Turn::Leading { token } => Some(token),
        Turn::Behind(_) => None,
        other => panic!("{other:?}"),
    }
}

fn leading(token: i64) -> Candidacy {
    Candidacy {
        lease_id: None,
        key: "leader_exec_leases/jobs".into(),
        place: 0,
        token,
    }
}

/// One leads, the other waits behind it (named); renewals answer alive, also many within one
/// millisecond; a release lets the other in with a greater token; a row taken away (another
/// holder written by hand) is a renewal answering "expired".
#[tokio::test]
async fn one_leads_renews_and_hands_over_with_a_greater_token() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.expect("a leads a new name");
    assert!(first >= 1);
    let candidacy = b.campaign().await.unwrap();
    match b.check_turn(&candidacy).await.unwrap() {
        Turn::Behind(ahead) => assert_eq!(ahead.key, b"a"),
        other => panic!("{other:?}"),
    }
    let mut keeper = a.keeper(&leading(first));
    for _ in 0..5 {
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    }
    a.release_claim(&leading(first)).await.unwrap();
    let second = leads(&b).await.expect("b leads once a released");
    assert!(second > first, "{second} after {first}");
    let mut keeper = b.keeper(&leading(second));
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    db.sql("UPDATE leader_exec.leader_exec_leases SET holder = 'x', token = token + 1");
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Expired);
}

/// A holder that stops renewing is taken over only once the taker has seen its row unchanged
/// for a full TTL on its own clock: not at once when `expires_at` on the server's clock says
/// the row ran out long ago (a step of that clock is such a write), and not before.
#[tokio::test]
async fn a_silent_holder_is_taken_over_after_a_full_ttl_seen_not_by_the_servers_clock() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.unwrap();
    // The server's clock says the row ran out a day ago.
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    let seen = Instant::now();
    assert_eq!(leads(&b).await, None, "taken by the server's clock");
    let candidacy = b.candidacy();
    let token = loop {
        match b.check_turn(&candidacy).await.unwrap() {
            Turn::Leading { token } => break token,
            Turn::Behind(ahead) => {
                assert!(seen.elapsed() < TTL * 3, "never taken over");
                tokio::time::sleep(ahead.expires_in.unwrap().min(Duration::from_millis(100))).await;
            }
            other => panic!("{other:?}"),
        }
    };
    assert!(
        seen.elapsed() >= TTL,
        "taken over after {:?}",
        seen.elapsed()
    );
    assert!(token > first);
    let mut keeper = a.keeper(&leading(first));
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Expired);
}

/// Tokens only grow: not reset by a deleted row, a truncated or dropped leases table, or a
/// deleted tokens row (the lease row remembers), nor by a server restart.
#[tokio::test]
async fn tokens_never_go_back() {
    let mut db = MariaDb::start();
    let url = url(db.port);
    let mut last = 0;
    let mut step = async |what: &str, db: &MariaDb| {
        if !what.is_empty() {
            db.sql(what);
        }
        let m = candidate(&url, "a", TTL);
        let token = leads(&m)
            .await
            .unwrap_or_else(|| panic!("after {what}: not free"));
        assert!(token > last, "after {what}: {token} not above {last}");
        m.release_claim(&leading(token)).await.unwrap();
        last = token;
    };
    step("", &db).await;
    step("", &db).await;
    step("DELETE FROM leader_exec.leader_exec_leases", &db).await;
    step("TRUNCATE TABLE leader_exec.leader_exec_leases", &db).await;
    step("DROP TABLE leader_exec.leader_exec_leases", &db).await;
    step("DELETE FROM leader_exec.leader_exec_tokens", &db).await;
    db.restart();
    step("", &db).await;
}

/// The server's clock stepped an hour ahead, then back, while one leads and renews and another
/// waits: neither step hands the row to the waiter or takes it from the leader (no clock is in
/// a renewal's condition, and a takeover waits for a row seen unchanged for a full TTL).
#[tokio::test]
async fn a_server_clock_step_neither_hands_over_nor_ends_the_lease() {
    let (db, clock) = MariaDb::start_with_faketime();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let token = leads(&a).await.unwrap();
    let mut keeper = a.keeper(&leading(token));
    let candidacy = b.campaign().await.unwrap();
    let started = Instant::now();
    let mut stepped = (false, false);
    // The server's clock less this test's, in seconds.
    let offset = || {
        let server: i64 = db.sql("SELECT UNIX_TIMESTAMP()").trim().parse().unwrap();
        let here = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        server - here
    };
    while started.elapsed() < TTL * 3 {
        if !stepped.0 && started.elapsed() > TTL / 2 {
            std::fs::write(clock.path(), "+1h\n").unwrap();
            assert!((offset() - 3600).abs() < 60, "the clock was not stepped");
            stepped.0 = true;
        }
        if !stepped.1 && started.elapsed() > TTL * 2 {
            std::fs::write(clock.path(), "+0\n").unwrap();
            stepped.1 = true;
        }
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        match b.check_turn(&candidacy).await.unwrap() {
            Turn::Behind(_) => {}
            other => panic!("the waiter got {other:?} after {:?}", started.elapsed()),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(offset().abs() < 60, "the clock was not stepped back");
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
}

/// Waiters stand in line: a released row goes to the first in line, not to a later waiter that
/// happens to try first; a waiter that stops looking is skipped by the one behind it once seen
/// unchanged for a full TTL, and that one then takes the free row.
#[tokio::test]
async fn a_released_row_goes_to_the_first_in_line_and_a_dead_waiter_is_skipped() {
    let db = MariaDb::start();
    let url = url(db.port);
    let [a, b, c] = ["a", "b", "c"].map(|id| candidate(&url, id, TTL));
    let first = leads(&a).await.unwrap();
    assert_eq!(leads(&b).await, None);
    assert_eq!(leads(&c).await, None);
    let line = db.sql("SELECT identity FROM leader_exec.leader_exec_waiters ORDER BY id");
    assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["b", "c"]);
    a.release_claim(&leading(first)).await.unwrap();
    // c tries first, yet b is ahead of it, alive.
    let c_candidacy = c.candidacy();
    let ahead = match c.check_turn(&c_candidacy).await.unwrap() {
        Turn::Behind(ahead) => ahead,
        other => panic!("c jumped the line: {other:?}"),
    };
    // b never looks again (dead, say): c skips it after a TTL and then takes the free row.
    let started = Instant::now();
    c.predecessor_gone(&c_candidacy, &ahead).await.unwrap();
    let token = match c.check_turn(&c_candidacy).await.unwrap() {
        Turn::Leading { token } => token,
        other => panic!("{other:?}"),
    };
    assert!(
        started.elapsed() >= TTL - Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    assert!(token > first);
    assert_eq!(
        db.sql("SELECT COUNT(*) FROM leader_exec.leader_exec_waiters")
            .trim(),
        "0",
        "b's dead row and c's own are gone"
    );
}

/// A holder whose identity is not UTF-8 (written by another tool) that stops renewing is taken
/// over like any other, a full TTL after it was first seen: its bytes are compared as they are.
#[tokio::test]
async fn a_holder_that_is_not_utf8_is_taken_over_too() {
    let db = MariaDb::start();
    let url = url(db.port);
    let first = leads(&candidate(&url, "a", TTL)).await.unwrap();
    db.sql("UPDATE leader_exec.leader_exec_leases SET holder = X'FF00FE', token = token + 1");
    let (token, took) = wait_to_lead(&candidate(&url, "b", TTL), TTL * 3).await;
    assert!(
        took >= TTL - Duration::from_millis(200),
        "taken over after {took:?}"
    );
    assert!(token > first + 1);
}

/// Eight first runs at once on an empty database (tables made by all of them, a new name):
/// exactly one leads; every other stands behind it, after transient errors at most.
#[tokio::test]
async fn of_eight_first_runs_at_once_exactly_one_leads() {
    let db = MariaDb::start();
    let url = url(db.port);
    let candidates: Vec<MySql> = (0..8)
        .map(|i| candidate(&url, &format!("c{i}"), TTL))
        .collect();
    let turns = futures_util::future::join_all(candidates.iter().map(async |m| {
        for _ in 0..20 {
            let turn = async {
                let candidacy = m.campaign().await?;
                m.check_turn(&candidacy).await
            };
            match turn.await {
                Ok(turn) => return turn,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no answer in 20 tries");
    }))
    .await;
    let leading: Vec<_> = turns
        .iter()
        .filter(|t| matches!(t, Turn::Leading { .. }))
        .collect();
    assert_eq!(leading.len(), 1, "{turns:?}");
    assert!(
        turns
            .iter()
            .all(|t| matches!(t, Turn::Leading { .. } | Turn::Behind(_)))
    );
    let waiting = db.sql("SELECT COUNT(*) FROM leader_exec.leader_exec_waiters");
    assert_eq!(waiting.trim(), "7");
}

/// Nothing tells a waiter of a release: the first in line finds the released row at its next
/// look, within one --retry-period (500 ms here) and a round trip or two.
#[tokio::test]
async fn a_waiter_takes_a_released_row_within_a_retry_period() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let first = leads(&a).await.unwrap();
    let candidacy = b.campaign().await.unwrap();
    let Turn::Behind(ahead) = b.check_turn(&candidacy).await.unwrap() else {
        panic!("b leads beside a");
    };
    let waiting = async {
        b.predecessor_gone(&candidacy, &ahead).await.unwrap();
        let turn = b.check_turn(&candidacy).await.unwrap();
        (turn, Instant::now())
    };
    let releasing = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        a.release_claim(&leading(first)).await.unwrap();
        Instant::now()
    };
    let ((turn, won), released) = tokio::join!(waiting, releasing);
    assert!(
        matches!(turn, Turn::Leading { token } if token > first),
        "{turn:?}"
    );
    let took = won.duration_since(released);
    assert!(took < Duration::from_millis(900), "handed over in {took:?}");
}
