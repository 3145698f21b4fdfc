//! What is read and written beside the lease, against MariaDB: readers, holds, fenced records,
//! a job's fence in the same database.

use super::*;

/// What `status` reads: the holder with its identity, key and token, and its time left; every
/// name in the table, sorted; nothing once released.
#[tokio::test]
async fn readers_see_the_holder_its_time_and_every_name() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let reader = reader_of(&url);
    let seen = reader.read_election().await.unwrap();
    let leader = seen.leader().expect("a holder").clone();
    assert_eq!(
        (
            leader.key.as_slice(),
            leader.identity.as_slice(),
            leader.token
        ),
        (&b"leader_exec_leases/jobs"[..], &b"a"[..], token)
    );
    assert_eq!((seen.candidates, seen.max_holders), (1, 1));
    let time = reader
        .lease_time(&leader)
        .await
        .unwrap()
        .expect("time left");
    assert_eq!(time.granted, TTL);
    assert!(
        time.remaining <= TTL && time.remaining > TTL / 2,
        "{time:?}"
    );
    let b = candidate_for(&url, "backup", "b", TTL);
    leads(&b).await.unwrap();
    let all = reader.list_elections("/leader-exec/").await.unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|e| (e.name.clone(), e.leader().map(|l| l.identity.clone())))
        .collect();
    assert_eq!(
        names,
        [
            (b"backup".to_vec(), Some(b"b".to_vec())),
            (b"jobs".to_vec(), Some(b"a".to_vec()))
        ]
    );
    a.release_claim(&leading(token)).await.unwrap();
    assert!(reader.read_election().await.unwrap().holders.is_empty());
    assert_eq!(reader.lease_time(&leader).await.unwrap(), None);
}

/// A held claim (`leader-exec hold`) stays with its token and nobody renewing it, for its
/// bound as `status` shows it; a waiter takes it over only once it has seen it unchanged for
/// that bound (longer than its own TTL), with a greater token.
#[tokio::test]
async fn a_held_claim_stays_for_its_bound() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let bound = Duration::from_secs(3);
    let held = a.hold_claim(&leading(token), bound).await.unwrap();
    assert_eq!(held, Some(leading(token)));
    let seen = a.read_election().await.unwrap();
    let leader = seen.leader().expect("still held");
    assert_eq!(leader.token, token);
    assert_eq!(a.lease_time(leader).await.unwrap().unwrap().granted, bound);
    let (taken, took) = wait_to_lead(&candidate(&url, "b", TTL), bound * 3).await;
    assert!(took >= bound, "taken over after {took:?}");
    assert!(taken > token);
    // A claim no longer there is not held.
    assert_eq!(a.hold_claim(&leading(token), bound).await.unwrap(), None);
}

/// Fenced writes pass while the writer holds its token and write nothing once it does not; a
/// record on the lease goes with it; a handover request and a removal reach only the token
/// they name. The store has every capability the run form and the subcommands use.
#[tokio::test]
async fn records_are_fenced_by_the_lease_row() {
    fn is_a_store<S: crate::election::Store>(_: &S) {}
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    is_a_store(&a);
    let first = leads(&a).await.unwrap();
    let hour = Duration::from_secs(3600);
    assert!(
        a.write_fenced(&leading(first), "occ/1", b"one".to_vec(), hour)
            .await
            .unwrap()
    );
    assert!(
        a.put_on_lease_fenced(&leading(first), "state/jobs", b"s".to_vec())
            .await
            .unwrap()
    );
    assert_eq!(
        a.read_record("occ/1").await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        a.read_record("state/jobs").await.unwrap().as_deref(),
        Some(&b"s"[..])
    );
    let listed = b.list_records("occ/").await.unwrap();
    assert_eq!(listed, [(b"1".to_vec(), b"one".to_vec())]);
    let leader = b.read_election().await.unwrap().leader().unwrap().clone();
    assert!(
        b.request_handover(&leader, ".resign/jobs", hour)
            .await
            .unwrap()
    );
    let request = b.read_record(".resign/jobs").await.unwrap().unwrap();
    assert!(crate::election::is_request_for(&request, first));

    // Removed by its token (`resign --force`): the record on the lease goes with it, and no
    // fenced write of the old holder's passes.
    let stale = Leader {
        token: first - 1,
        ..leader.clone()
    };
    assert!(!b.remove_claim(&stale).await.unwrap());
    assert!(b.remove_claim(&leader).await.unwrap());
    assert_eq!(a.read_record("state/jobs").await.unwrap(), None);
    assert!(
        !a.write_fenced(&leading(first), "occ/1", b"two".to_vec(), hour)
            .await
            .unwrap()
    );
    assert_eq!(
        a.read_record("occ/1").await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    let second = leads(&b).await.unwrap();
    assert!(second > first);
    // A request for the old token reaches nobody.
    assert!(
        !a.request_handover(&leader, ".resign/jobs", hour)
            .await
            .unwrap()
    );
    assert!(!b.remove_claim(&leader).await.unwrap());
}

/// A job that fences itself in the same database (its transaction reads the fence row `LOCK IN
/// SHARE MODE`) holds up a removal of the claim until it commits, and does not hold up the
/// leader's renewals.
#[tokio::test]
async fn a_jobs_fence_holds_up_a_removal_not_the_renewals() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate(&url, "a", TTL), candidate(&url, "b", TTL));
    let token = leads(&a).await.unwrap();
    let fence = db.sql("SELECT holder, token FROM leader_exec.leader_exec_fences");
    assert_eq!(fence.trim(), format!("a\t{token}"));
    let mut job = db.sql_in_background(&format!(
        "BEGIN; SELECT token FROM leader_exec.leader_exec_fences
             WHERE name = 'jobs' AND token = {token} LOCK IN SHARE MODE;
         SELECT SLEEP(4); COMMIT"
    ));
    let until = Instant::now() + Duration::from_secs(10);
    while !db.sql("SHOW PROCESSLIST").contains("SLEEP(4)") {
        assert!(Instant::now() < until, "the job did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut keeper = a.keeper(&leading(token));
    for _ in 0..3 {
        let sent = Instant::now();
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        assert!(
            sent.elapsed() < Duration::from_millis(400),
            "{:?}",
            sent.elapsed()
        );
    }
    let leader = b.read_election().await.unwrap().leader().unwrap().clone();
    let e = b
        .remove_claim(&leader)
        .await
        .expect_err("removed under the job's fence");
    assert!(e.is_transient(), "{e}");
    assert_eq!(
        db.sql("SELECT holder FROM leader_exec.leader_exec_leases")
            .trim(),
        "a"
    );
    assert!(job.wait().unwrap().success());
    // Renewed since (the job outlasted the TTL), then removed.
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    assert!(b.remove_claim(&leader).await.unwrap());
    let fence = db.sql("SELECT holder IS NULL, token FROM leader_exec.leader_exec_fences");
    assert_eq!(fence.trim(), format!("1\t{token}"));
}

/// The hint for deleting a record is a client command that deletes exactly that record.
#[tokio::test]
async fn the_delete_hint_deletes_the_record() {
    use crate::election::Describe;
    let db = MariaDb::start();
    let a = candidate(&url(db.port), "a", TTL);
    let token = leads(&a).await.unwrap();
    let hour = Duration::from_secs(3600);
    for key in ["occ/it's", "occ/other"] {
        assert!(
            a.write_fenced(&leading(token), key, b"x".to_vec(), hour)
                .await
                .unwrap()
        );
    }
    let hint = a.delete_record_hint("occ/it's");
    assert!(
        hint.starts_with("mariadb --protocol=TCP -h '127.0.0.1' -P ") && hint.contains(" -p "),
        "{hint}"
    );
    // The hint with the password given as the client reads it from the environment (`-p`
    // would ask for it on the terminal).
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(hint.replace(" -p ", " "))
        .env("MYSQL_PWD", MARIADB_PASSWORD)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.read_record("occ/it's").await.unwrap(), None);
    assert!(a.read_record("occ/other").await.unwrap().is_some());
}

/// A held slot whose state record says `held_for_ms` counts as held past its `expires_at`, as
/// on PostgreSQL: `status` shows it and `release` (a removal by its token) reaches it; the same
/// row without that record counts as held only until its `expires_at`.
#[tokio::test]
async fn a_held_slot_is_shown_and_removable_past_its_expiry() {
    let db = MariaDb::start();
    let url = url(db.port);
    let a = candidate(&url, "a", TTL);
    let token = leads(&a).await.unwrap();
    let state = br#"{"held_for_ms":60000}"#.to_vec();
    assert!(
        a.put_on_lease_fenced(&leading(token), "state/jobs", state)
            .await
            .unwrap()
    );
    assert!(
        a.hold_claim(&leading(token), Duration::from_secs(60))
            .await
            .unwrap()
            .is_some()
    );
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    let reader = reader_of(&url);
    let seen = reader.read_election().await.unwrap();
    let leader = seen.leader().expect("a held slot is shown").clone();
    assert_eq!(leader.token, token);
    assert!(reader.read_record("state/jobs").await.unwrap().is_some());
    assert!(reader.remove_claim(&leader).await.unwrap());
    assert!(reader.read_election().await.unwrap().holders.is_empty());

    // Without the record: held only until expires_at.
    let b = candidate(&url, "b", TTL);
    let token = leads(&b).await.unwrap();
    db.sql("UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY");
    assert!(reader.read_election().await.unwrap().holders.is_empty());
    let gone = Leader { token, ..leader };
    assert!(!reader.remove_claim(&gone).await.unwrap());
}
