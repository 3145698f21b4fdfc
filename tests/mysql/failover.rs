//! MySQL failovers that a URL's hosts cannot see by themselves: a lagging asynchronous replica
//! promoted, a primary turned read-only under an account that writes through `read_only`, and a
//! trigger slipped in while a leader runs (docs/mysql.md, "Failover").

use std::time::Duration;

use crate::harness::*;

fn args<'a>(endpoint: &'a str, identity: &'a str) -> Vec<&'a str> {
    failover_args(endpoint, "fo", identity)
}

/// The row of lease `fo` on `db`: `holder token`, or nothing.
fn row(db: &MariaDb) -> String {
    db.sql("SELECT CONCAT(COALESCE(holder, '-'), ' ', token) FROM leader_exec.leader_exec_leases WHERE name = 'fo'")
        .trim()
        .to_owned()
}

/// A first run on `endpoint`: it makes the tables and lease `fo`'s row (token 1, released).
fn first_run(endpoint: &str) {
    let mut first = args(endpoint, "warm");
    first.extend(["--", "true"]);
    let (code, _, stderr) = Cmd::bare().args(&first).run();
    assert_eq!(code, 0, "{stderr}");
}

/// A replica that lags is promoted after its primary dies: the lease row it has is free (the
/// holder's acquisition never reached it). It was written by another server, so the first
/// instance there waits a full TTL on its own clock before it takes it — after the old holder,
/// cut off with the old primary, has stopped its command — and takes it with a token above the
/// old holder's. (Before: it took the free row at once, started beside the old command, and got
/// the old holder's token again.)
#[test]
fn a_lagging_replica_promoted_does_not_hand_over_before_the_old_holder_is_gone() {
    let (mut primary, replica) = MariaDb::start_primary_and_replica();
    let scratch = Scratch::new();
    let on_primary = primary.open_url(primary.port);
    let on_replica = replica.open_url(replica.port);
    // The first run's tables and row reach the replica.
    first_run(&on_primary);
    assert!(
        wait_for(Duration::from_secs(20), || replica
            .try_sql("SELECT token FROM leader_exec.leader_exec_leases WHERE name = 'fo'")
            .stdout
            .starts_with(b"1")),
        "the row never reached the replica"
    );
    assert_eq!(row(&replica), "- 1");

    // The replica lags from here; a leads on the primary.
    replica.stop_replication();
    let mut a = Instance::start(&args(&on_primary, "host-a"), &scratch.job("a", "sleep 60"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .expect("a started");
    assert_eq!(row(&primary), "host-a 2");
    assert_eq!(row(&replica), "- 1", "the replica should lag");

    // The primary dies with a's host cut off from everything else; the replica is promoted,
    // and b starts on it at once.
    primary.kill();
    replica.promote();
    let mut b = Instance::start(&args(&on_replica, "host-b"), &scratch.job("b", "sleep 60"));
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("b never led: {}", b.stderr()));
    assert_handed_over(&scratch, &a_start, &b_start);
    assert_ne!(a.wait(Duration::from_secs(15)), None, "a never exited");
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert_ne!(b.wait(Duration::from_secs(15)), None);
}

/// A primary turned read-only while its leader runs (a planned switchover), with an account that
/// writes through `read_only` (`GRANT ALL ON *.*`): the leader's renewals fail there as on an
/// unreachable server, so it stops its command within its renew deadline, and the row on the
/// old primary is left as it was. (Before: the renewals went on and the command never stopped.)
#[test]
fn a_leader_stops_when_its_primary_turns_read_only_even_for_an_account_that_writes_through() {
    let db = MariaDb::start();
    let admin = db.add_admin();
    let scratch = Scratch::new();
    let mut a = Instance::start(&args(&admin, "host-a"), &scratch.job("a", "sleep 60"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a never led: {}", a.stderr()));
    // The account can write through read_only: the check is leader-exec's, not the server's.
    db.sql("SET GLOBAL read_only = ON");
    let writes = db.sql(&format!(
        "SELECT COUNT(*) FROM information_schema.user_privileges WHERE grantee LIKE '%{MARIADB_ADMIN_USER}%' AND privilege_type = 'READ_ONLY ADMIN'"
    ));
    assert_eq!(
        writes.trim(),
        "1",
        "the account should write through read_only"
    );
    let before = row(&db);
    assert!(
        wait_for(Duration::from_secs(3 + 1 + 3), || !alive(a_start.pid())),
        "a's command ran on with its primary read-only: {}",
        a.stderr()
    );
    assert_eq!(row(&db), before, "a wrote to the read-only server");
    assert!(
        a.stderr().contains("read-only"),
        "the log should say why: {}",
        a.stderr()
    );
    assert_ne!(a.wait(Duration::from_secs(30)), None, "a never exited");
}

/// A trigger put on the leases table while a leader runs is refused by the leader's next
/// session (its connection killed, as a server restart or a proxy would): the renewals stop
/// there, naming the trigger, and the command is stopped. (Before: the tables were checked once
/// per process, and the renewals' own session was never checked.)
#[test]
fn a_trigger_slipped_in_while_a_leader_runs_is_refused_by_its_next_session() {
    let db = MariaDb::start();
    let scratch = Scratch::new();
    let url = db.open_url(db.port);
    let mut a = Instance::start(&args(&url, "host-a"), &scratch.job("a", "sleep 60"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a never led: {}", a.stderr()));
    db.sql(
        "CREATE TRIGGER leader_exec.sneaky BEFORE UPDATE ON leader_exec.leader_exec_leases
         FOR EACH ROW SET NEW.ttl_ms = NEW.ttl_ms",
    );
    // Every session of leader-exec's user ends; the next ones are new.
    let ids = db.sql(&format!(
        "SELECT id FROM information_schema.processlist WHERE user = '{MARIADB_OPEN_USER}'"
    ));
    for id in ids.split_whitespace() {
        let _ = db.try_sql(&format!("KILL {id}"));
    }
    assert!(
        wait_for(Duration::from_secs(3 + 1 + 5), || !alive(a_start.pid())),
        "a's command ran on with a trigger on its table: {}",
        a.stderr()
    );
    assert_ne!(a.wait(Duration::from_secs(30)), None, "a never exited");
    assert!(
        a.stderr().contains("trigger sneaky"),
        "the log should name the trigger: {}",
        a.stderr()
    );
}

/// Tokens the old primary issued after the replica stopped are lost with it: here b's token 2
/// on the second slot. a's claim on the first slot did reach the replica, so a renews it there
/// after the failover and then releases it; c takes that free row on the new primary. The name's
/// tokens were last issued by the old primary, so c's token jumps above every token it can have
/// issued (before: c got token 2 again, b's).
#[test]
fn the_first_token_after_a_failover_stays_above_those_the_old_primary_issued() {
    let (mut primary, replica) = MariaDb::start_primary_and_replica();
    let scratch = Scratch::new();
    let both = format!(
        "mysql://{MARIADB_OPEN_USER}@127.0.0.1:{},127.0.0.1:{}/{MARIADB_DATABASE}",
        primary.port, replica.port
    );
    let two = |identity: &'static str| {
        let mut args = args(&both, identity);
        args.extend(["--max-holders", "2"]);
        args
    };
    let mut a = Instance::start(&two("host-a"), &scratch.job("a", &gated(&scratch, "a")));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("a never led: {}", a.stderr()));
    assert!(
        wait_for(Duration::from_secs(20), || row(&replica)
            .starts_with("host-a")),
        "a's claim never reached the replica"
    );
    replica.stop_replication();
    let mut b = Instance::start(&two("host-b"), &scratch.job("b", "sleep 60"));
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("b never led: {}", b.stderr()));
    assert!(b_start.token() > a_start.token());

    primary.kill();
    replica.promote();
    // b's row is not on the new primary: its next renewal there finds none.
    assert!(
        wait_for(Duration::from_secs(15), || !alive(b_start.pid())),
        "b's command ran on without its row"
    );
    // a's is, renewed there; a's job ends and a releases it.
    assert!(alive(a_start.pid()), "a lost a claim the new primary has");
    open_gate(&scratch, "a");
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    let mut c = Instance::start(&two("host-c"), &scratch.job("c", "true"));
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("c never led: {}", c.stderr()));
    assert!(
        c_start.token() > b_start.token(),
        "c's token {} is not above b's {} (issued by the old primary)",
        c_start.token(),
        b_start.token()
    );
    assert_eq!(c.wait(Duration::from_secs(20)), Some(0), "{}", c.stderr());
    let _ = b.wait(Duration::from_secs(15));
}

/// The tokens table emptied by hand (a cleanup script's `TRUNCATE`), which reaches the replica;
/// then the replica lags, and on the primary the next session makes the table-wide row again and
/// three runs take tokens 2 to 4. The primary dies and the replica is promoted: its tokens table
/// is empty, its lease and fence rows remember token 1 only. Tables that remember a token but not
/// which server issued it are nobody's: c's token, the first the new primary issues, jumps above
/// the old primary's. (Before: c's session made the missing table-wide row naming the new
/// primary, as if it had issued every token, and c got one of tokens 2 to 4 again.)
#[test]
fn a_failover_after_the_tokens_table_was_emptied_by_hand_repeats_no_token() {
    let (mut primary, replica) = MariaDb::start_primary_and_replica();
    let scratch = Scratch::new();
    let on_primary = primary.open_url(primary.port);
    let on_replica = replica.open_url(replica.port);
    first_run(&on_primary);
    primary.sql("TRUNCATE TABLE leader_exec.leader_exec_tokens");
    let tokens_rows = |db: &MariaDb| {
        db.try_sql("SELECT COUNT(*) FROM leader_exec.leader_exec_tokens")
            .stdout
    };
    assert!(
        wait_for(Duration::from_secs(20), || row(&replica) == "- 1"
            && tokens_rows(&replica).starts_with(b"0")),
        "the row and the truncation never reached the replica"
    );

    replica.stop_replication();
    let mut last = 1;
    for run in ["a1", "a2", "a3"] {
        let mut a = Instance::start(&args(&on_primary, run), &scratch.job(run, "true"));
        let start = scratch
            .wait_record("start", run, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("{run} never led: {}", a.stderr()));
        assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
        assert!(start.token() > last);
        last = start.token();
    }
    assert_eq!(row(&replica), "- 1", "the replica should lag");

    primary.kill();
    replica.promote();
    let mut c = Instance::start(&args(&on_replica, "host-c"), &scratch.job("c", "true"));
    let c_start = scratch
        .wait_record("start", "c", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("c never led: {}", c.stderr()));
    assert!(
        c_start.token() > last,
        "c's token {} is not above {last}, the last the old primary issued",
        c_start.token()
    );
    assert_eq!(c.wait(Duration::from_secs(20)), Some(0), "{}", c.stderr());
}
