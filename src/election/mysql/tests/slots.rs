//! `--max-holders` N above 1 against a real MariaDB (`slots.rs`): N hold at once, each its own
//! slot row; a crashed slot holder is taken over a full TTL after it was first seen; another N
//! is refused while it is there, and kept out when the server's clock says it ran out; tokens
//! keep rising whichever row that remembers them is deleted by hand; the largest N works.

use super::*;

fn candidate_n(url: &str, identity: &str, n: u32) -> MySql {
    let open = opened("jobs", identity, TTL, Duration::from_millis(500), n);
    MySql::new(target_of(url), open).unwrap()
}

async fn turn(m: &MySql) -> Turn {
    let candidacy = m.campaign().await.expect("campaign");
    m.check_turn(&candidacy).await.expect("check_turn")
}

fn held_rows(db: &MariaDb) -> Vec<String> {
    db.sql("SELECT name FROM leader_exec.leader_exec_leases WHERE holder IS NOT NULL ORDER BY name")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Five at once with N = 3 on a new name: exactly three lead, each on its own slot row
/// (`jobs`, `jobs/2`, `jobs/3`) with its own token, each renews its own row, `status` shows
/// all three; a released slot goes to a waiter with a token above every earlier one.
#[tokio::test]
async fn of_five_with_three_slots_exactly_three_hold_distinct_rows() {
    let db = MariaDb::start();
    let url = url(db.port);
    let all: Vec<MySql> = (0..5)
        .map(|i| candidate_n(&url, &format!("c{i}"), 3))
        .collect();
    let turns = futures_util::future::join_all(all.iter().map(async |m| {
        for _ in 0..20 {
            let attempt = async {
                let candidacy = m.campaign().await?;
                m.check_turn(&candidacy).await
            };
            match attempt.await {
                Ok(turn) => return turn,
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no answer in 20 tries");
    }))
    .await;
    let mut tokens: Vec<(i64, usize)> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Turn::Leading { token } => Some((*token, i)),
            _ => None,
        })
        .collect();
    assert_eq!(tokens.len(), 3, "{turns:?}");
    assert!(
        turns
            .iter()
            .all(|t| matches!(t, Turn::Leading { .. } | Turn::Behind(_)))
    );
    tokens.sort();
    tokens.dedup_by_key(|(t, _)| *t);
    assert_eq!(tokens.len(), 3, "tokens shared: {turns:?}");
    assert_eq!(held_rows(&db), ["jobs", "jobs/2", "jobs/3"]);
    for (token, i) in &tokens {
        let mut keeper = all[*i].keeper(&leading(*token));
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    }
    let seen = all[0].read_election().await.unwrap();
    assert_eq!(seen.max_holders, 3);
    let mut keys: Vec<String> = seen
        .holders
        .iter()
        .map(|h| String::from_utf8(h.key.clone()).unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "leader_exec_leases/jobs",
            "leader_exec_leases/jobs/2",
            "leader_exec_leases/jobs/3"
        ]
    );
    let listed = all[0].list_elections("/leader-exec/").await.unwrap();
    assert_eq!(listed.len(), 1, "slot rows fold into their name");
    assert_eq!((listed[0].holders.len(), listed[0].max_holders), (3, 3));
    // The oldest holder leaves; one of the two waiters takes its slot, above every token.
    let (oldest, i) = tokens[0];
    all[i].release_claim(&leading(oldest)).await.unwrap();
    let waiters: Vec<&MySql> = (0..5)
        .filter(|j| !tokens.iter().any(|(_, i)| i == j))
        .map(|j| &all[j])
        .collect();
    let started = Instant::now();
    let token = loop {
        let mut won = None;
        for w in &waiters {
            if let Turn::Leading { token } = w.check_turn(&w.candidacy()).await.unwrap() {
                won = Some(token);
                break;
            }
        }
        if let Some(token) = won {
            break token;
        }
        assert!(
            started.elapsed() < TTL * 3,
            "the released slot was never taken"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(token > tokens[2].0, "{token} after {tokens:?}");
    assert_eq!(held_rows(&db).len(), 3);
}

/// A slot holder that stops renewing, whose `expires_at` says it ran out a day ago, is taken
/// over a full TTL after the taker first saw it, not before; the other two, renewing, keep
/// theirs; the old holder's next renewal answers "expired".
#[tokio::test]
async fn a_crashed_slot_holder_is_taken_over_after_a_full_ttl_seen() {
    let db = MariaDb::start();
    let url = url(db.port);
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|id| candidate_n(&url, id, 3));
    let mut tokens = Vec::new();
    for m in [&a, &b, &c] {
        match turn(m).await {
            Turn::Leading { token } => tokens.push(token),
            other => panic!("{other:?}"),
        }
    }
    let (mut ka, mut kb) = (a.keeper(&leading(tokens[0])), b.keeper(&leading(tokens[1])));
    let crashed = c.held_row();
    db.sql(&format!(
        "UPDATE leader_exec.leader_exec_leases SET expires_at = NOW(6) - INTERVAL 1 DAY \
         WHERE name = '{crashed}'"
    ));
    let seen = Instant::now();
    let candidacy = d.campaign().await.unwrap();
    let token = loop {
        assert_eq!(ka.renew().await.unwrap(), Renewal::Alive);
        assert_eq!(kb.renew().await.unwrap(), Renewal::Alive);
        match d.check_turn(&candidacy).await.unwrap() {
            Turn::Leading { token } => break token,
            Turn::Behind(_) => assert!(seen.elapsed() < TTL * 3, "never taken over"),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        seen.elapsed() >= TTL,
        "taken over after {:?}",
        seen.elapsed()
    );
    assert!(token > tokens[2], "{token} after {tokens:?}");
    assert_eq!(d.held_row(), crashed, "the crashed holder's slot");
    let mut kc = c.keeper(&leading(tokens[2]));
    assert_eq!(kc.renew().await.unwrap(), Renewal::Expired);
    assert_eq!(ka.renew().await.unwrap(), Renewal::Alive);
}

/// Another N is refused while its holders are there, both ways (N = 1 beside slots held with
/// N = 3, and N = 3 beside a holder with N = 1), and nothing is taken; once they are gone, the
/// other N takes the name. N = 1 does not take slot 1 (`jobs`) while it is free beside other
/// slots held with N = 3.
#[tokio::test]
async fn another_max_holders_is_refused_while_live() {
    let db = MariaDb::start();
    let url = url(db.port);
    let three = candidate_n(&url, "three", 3);
    let token = match turn(&three).await {
        Turn::Leading { token } => token,
        other => panic!("{other:?}"),
    };
    let one = candidate_n(&url, "one", 1);
    assert_eq!(turn(&one).await, Turn::Mismatch { theirs: 3 });
    assert_eq!(held_rows(&db), ["jobs"]);
    three.release_claim(&leading(token)).await.unwrap();
    let token = match turn(&one).await {
        Turn::Leading { token: t } if t > token => t,
        other => panic!("{other:?} after {token}"),
    };
    let again = candidate_n(&url, "three-again", 3);
    assert_eq!(turn(&again).await, Turn::Mismatch { theirs: 1 });
    one.release_claim(&leading(token)).await.unwrap();
    let first = match turn(&again).await {
        Turn::Leading { token: t } if t > token => t,
        other => panic!("{other:?} after {token}"),
    };
    // Slot 1 (`jobs`) free again beside two slots held with N = 3: N = 1 still may not take it.
    let (b, c) = (candidate_n(&url, "b", 3), candidate_n(&url, "c", 3));
    for m in [&b, &c] {
        assert!(matches!(turn(m).await, Turn::Leading { .. }));
    }
    again.release_claim(&leading(first)).await.unwrap();
    assert_eq!(held_rows(&db), ["jobs/2", "jobs/3"]);
    let late = candidate_n(&url, "late", 1);
    assert_eq!(turn(&late).await, Turn::Mismatch { theirs: 3 });
    assert_eq!(held_rows(&db), ["jobs/2", "jobs/3"]);
}

/// The server's clock stepped an hour ahead just after the holder with N = 1 renewed: its row
/// looks long expired, yet an instance with N = 3 trying every 100 ms never starts beside it;
/// it is kept out (behind) until the holder's next renewal, then refused again.
#[tokio::test]
async fn a_server_clock_step_lets_no_instance_with_another_max_holders_start() {
    let (db, clock) = MariaDb::start_with_faketime();
    let url = url(db.port);
    let one = candidate_n(&url, "one", 1);
    let token = leads(&one).await.unwrap();
    let mut keeper = one.keeper(&leading(token));
    let three = candidate_n(&url, "three", 3);
    let candidacy = three.campaign().await.unwrap();
    let started = Instant::now();
    let (mut behind, mut refused) = (0, 0);
    while started.elapsed() < TTL * 2 {
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        std::fs::write(clock.path(), "+1h\n").unwrap();
        // Ten tries within half a TTL of the renewal, on a clock that says it ran out.
        for _ in 0..5 {
            match three.check_turn(&candidacy).await.unwrap() {
                Turn::Behind(_) => behind += 1,
                Turn::Mismatch { theirs: 1 } => refused += 1,
                other => panic!("started beside the holder: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::fs::write(clock.path(), "+0\n").unwrap();
    }
    assert!(behind > 0, "the step never made the row look expired");
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    let _ = refused;
    assert_eq!(held_rows(&db), ["jobs"]);
}

/// Tokens keep rising with N = 3 (and an instance with N = 1 after them) whichever rows that
/// remember them are deleted by hand, as long as one kind is left: the tokens row with the lease
/// rows, the tokens row with the fence rows, the lease rows with the fence rows.
#[tokio::test]
async fn slot_tokens_never_go_back() {
    let db = MariaDb::start();
    let url = url(db.port);
    let mut last = 0;
    let mut step = async |what: &str, n: u32| {
        for sql in what.split(';').filter(|s| !s.trim().is_empty()) {
            db.sql(sql);
        }
        // Two holders at once, so that a slot beyond `jobs` is taken too.
        let (a, b) = (candidate_n(&url, "a", n), candidate_n(&url, "b", n));
        // Tables left with rows of no known server (fence rows without their lease rows)
        // make their table-wide row again naming none: a row is then taken a sighting later.
        let mut held = Vec::new();
        for (i, m) in [&a, &b].into_iter().enumerate() {
            if n == 1 && i == 1 {
                assert!(matches!(turn(m).await, Turn::Behind(_)), "after {what}");
                continue;
            }
            let (token, _) = super::wait_to_lead(m, 4 * super::TTL).await;
            assert!(token > last, "after {what}: {token} not above {last}");
            last = token;
            held.push((m.clone(), token));
        }
        for (m, token) in held {
            m.release_claim(&leading(token)).await.unwrap();
            m.leave_line().await.unwrap();
        }
        b.leave_line().await.unwrap();
    };
    let (tokens, leases, fences) = (
        "DELETE FROM leader_exec.leader_exec_tokens;",
        "DELETE FROM leader_exec.leader_exec_leases;",
        "DELETE FROM leader_exec.leader_exec_fences;",
    );
    step("", 3).await;
    step(&format!("{tokens}{leases}"), 3).await;
    step(&format!("{tokens}{fences}"), 3).await;
    step(&format!("{leases}{fences}"), 3).await;
    step(
        "DELETE FROM leader_exec.leader_exec_leases WHERE name = 'jobs/2'",
        3,
    )
    .await;
    // N = 1 after slot rows: above every slot row's token, also without the tokens row.
    step("", 3).await;
    step(tokens, 1).await;
    step(&format!("{tokens}{leases}"), 3).await;
}

/// The largest N (1000): the batch names every slot row as a literal, and still one round trip
/// takes a slot; a waiter's look reads all of them.
#[tokio::test]
async fn the_largest_n_takes_and_looks() {
    let db = MariaDb::start();
    let url = url(db.port);
    let (a, b) = (candidate_n(&url, "a", 1000), candidate_n(&url, "b", 1000));
    let started = Instant::now();
    assert!(matches!(turn(&a).await, Turn::Leading { .. }));
    assert!(matches!(turn(&b).await, Turn::Leading { .. }));
    assert_eq!(held_rows(&db), ["jobs", "jobs/2"]);
    assert_eq!(
        b.look_slots().await.unwrap(),
        Duration::ZERO,
        "998 slots free"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A job fences on its slot's fence row, found by its token among the name's rows and then
/// locked by its name (the recipe of docs/mysql.md): its holder's renewals go on, another slot
/// is released and taken again meanwhile, and a removal of the fenced slot waits for the job
/// (fails, transient) and leaves the row held. (A locking read over the name's range instead
/// would, at the mariadb client's REPEATABLE READ, lock every fence row it scanned, and hold up
/// the release of slot 1.)
#[tokio::test]
async fn a_job_fences_on_its_own_slot_alone() {
    let db = MariaDb::start();
    let url = url(db.port);
    let [a, b, c] = ["a", "b", "c"].map(|id| candidate_n(&url, id, 2));
    let mut tokens = Vec::new();
    for m in [&a, &b] {
        match turn(m).await {
            Turn::Leading { token } => tokens.push(token),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(b.held_row(), "jobs/2");
    let fence = format!(
        "SELECT name FROM leader_exec.leader_exec_fences
         WHERE (name = 'jobs' OR (name >= 'jobs/' AND name < 'jobs0')) AND token = {}",
        tokens[1]
    );
    assert_eq!(db.sql(&fence).trim(), "jobs/2");
    let mut job = db.sql_in_background(&format!(
        "BEGIN; SELECT token FROM leader_exec.leader_exec_fences
             WHERE name = 'jobs/2' AND token = {} LOCK IN SHARE MODE;
         SELECT SLEEP(4); COMMIT",
        tokens[1]
    ));
    let until = Instant::now() + Duration::from_secs(10);
    while !db.sql("SHOW PROCESSLIST").contains("SLEEP(4)") {
        assert!(Instant::now() < until, "the job did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut keeper = b.keeper(&leading(tokens[1]));
    for _ in 0..3 {
        let sent = Instant::now();
        assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
        assert!(
            sent.elapsed() < Duration::from_millis(400),
            "{:?}",
            sent.elapsed()
        );
    }
    // Slot 1 changes hands under the job's fence on slot 2.
    a.release_claim(&leading(tokens[0])).await.unwrap();
    let sent = Instant::now();
    let token = match turn(&c).await {
        Turn::Leading { token } => token,
        other => panic!("{other:?}"),
    };
    assert!(
        sent.elapsed() < Duration::from_millis(400),
        "{:?}",
        sent.elapsed()
    );
    assert!(token > tokens[1]);
    assert_eq!(c.held_row(), "jobs");
    let leader = b
        .read_election()
        .await
        .unwrap()
        .holders
        .into_iter()
        .find(|h| h.token == tokens[1])
        .unwrap();
    let e = b
        .remove_claim(&leader)
        .await
        .expect_err("removed under the job's fence");
    assert!(e.is_transient(), "{e}");
    assert_eq!(held_rows(&db), ["jobs", "jobs/2"]);
    assert!(job.wait().unwrap().success());
    // Renewed since (the job outlasted the TTL), then removed.
    assert_eq!(keeper.renew().await.unwrap(), Renewal::Alive);
    assert!(b.remove_claim(&leader).await.unwrap());
    assert_eq!(held_rows(&db), ["jobs"]);
}
