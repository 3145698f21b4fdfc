//! The line of waiters on MySQL, twelve long: the waiters far back look less often than those
//! in front ([`look_spacing`](super::super::super::rows::line::look_spacing)), every row is still
//! renewed, and each waiter has its turn in the order it joined.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::*;

/// Each waiter's `renewals` (one per look), by identity.
fn renewals(db: &MariaDb) -> BTreeMap<String, i64> {
    db.sql("SELECT identity, renewals FROM leader_exec.leader_exec_waiters")
        .lines()
        .filter_map(|line| {
            let (identity, count) = line.split_once('\t')?;
            Some((identity.to_owned(), count.trim().parse().ok()?))
        })
        .collect()
}

/// With a 200 ms retry period and a 6 s TTL, the first waiter looks every 200 ms and the
/// twelfth (eleven ahead) every second, a third of the TTL. After the release each waiter
/// leads in the order it joined, with a greater token than the one before, and lets go at once.
#[tokio::test]
async fn a_waiter_far_back_looks_less_often_and_each_has_its_turn_in_order() {
    let db = MariaDb::start();
    let url = url(db.port);
    let make = |id: &str| {
        let open = opened(
            "jobs",
            id,
            Duration::from_secs(6),
            Duration::from_millis(200),
            1,
        );
        MySql::new(target_of(&url), open).unwrap()
    };
    let a = make("a");
    let first = leads(&a).await.unwrap();
    let waiters: Vec<MySql> = (0..12).map(|i| make(&format!("w{i:02}"))).collect();
    for w in &waiters {
        assert_eq!(leads(w).await, None);
    }
    let turns = RefCell::new(Vec::new());
    let released = RefCell::new(None);
    let waiting = futures_util::future::join_all(waiters.iter().map(async |w| {
        let candidacy = w.candidacy();
        loop {
            match w.check_turn(&candidacy).await.unwrap() {
                Turn::Leading { token } => {
                    turns
                        .borrow_mut()
                        .push((w.shared.identity.clone(), token, Instant::now()));
                    w.release_claim(&leading(token)).await.unwrap();
                    return;
                }
                Turn::Behind(ahead) => w.predecessor_gone(&candidacy, &ahead).await.unwrap(),
                other => panic!("{other:?}"),
            }
        }
    }));
    let watching = async {
        // Every waiter has looked at least once (the first look spaces the next); then three
        // seconds of looks, well inside the 6 s a takeover of a's silent row would take.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let before = renewals(&db);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = renewals(&db);
        a.release_claim(&leading(first)).await.unwrap();
        *released.borrow_mut() = Some(Instant::now());
        (before, after)
    };
    let ((before, after), _) = tokio::join!(watching, waiting);
    let looks = |id: &str| after[id] - before[id];
    let (front, back) = (looks("w00"), looks("w11"));
    // Every 200 ms: about 15 in 3 s; every second: about 3.
    assert!(
        (2..=5).contains(&back),
        "the last waiter looked {back} times in 3 s: {before:?} {after:?}"
    );
    assert!(
        front >= 2 * back,
        "the first waiter looked {front} times, the last {back}"
    );
    let turns = turns.into_inner();
    let order: Vec<&str> = turns.iter().map(|(id, _, _)| id.as_str()).collect();
    let joined: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    assert_eq!(order, joined, "{turns:?}");
    assert!(turns[0].1 > first);
    assert!(turns.windows(2).all(|t| t[1].1 > t[0].1), "{turns:?}");
    let took = turns[11].2 - released.into_inner().unwrap();
    assert!(took < Duration::from_secs(15), "twelve turns took {took:?}");
}

/// A join whose answer came too late may still have committed: a row of this identity that
/// never had a look. The next join of that identity deletes it, so that it does not stand in
/// line for a TTL; a row of the same identity that looked (another instance's, given the same
/// `--identity`) and other identities' rows stay.
#[tokio::test]
async fn a_join_deletes_the_rows_of_its_identity_that_never_looked() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    leads(&a).await.unwrap();
    db.sql(
        "INSERT INTO leader_exec.leader_exec_waiters
             (name, id, identity, renewals, ttl_ms, expires_at, max_holders)
         VALUES ('jobs', 1000, 'b', 0, 2000, NOW(6) + INTERVAL 1 HOUR, 1),
                ('jobs', 1001, 'b', 3, 2000, NOW(6) + INTERVAL 1 HOUR, 1),
                ('jobs', 1002, 'c', 0, 2000, NOW(6) + INTERVAL 1 HOUR, 1),
                ('other', 1003, 'b', 0, 2000, NOW(6) + INTERVAL 1 HOUR, 1)",
    );
    assert_eq!(leads(&b).await, None);
    let rows = db.sql(
        "SELECT name, id, identity, renewals FROM leader_exec.leader_exec_waiters ORDER BY id",
    );
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('\t').collect()).collect();
    let ids: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    assert!(
        !ids.contains(&"1000"),
        "the row that never looked stayed: {rows:?}"
    );
    for kept in ["1001", "1002", "1003"] {
        assert!(ids.contains(&kept), "{kept} deleted: {rows:?}");
    }
    let joined: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[0] == "jobs" && r[2] == "b" && !["1001"].contains(&r[1]))
        .collect();
    assert_eq!(joined.len(), 1, "b's new row: {rows:?}");
}
