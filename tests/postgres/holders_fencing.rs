//! A fenced transaction (docs/postgresql.md) with `--max-holders` 2: it holds up the takeover of
//! its own slot alone, never another slot's.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::holders::{
    RETRY, SLACK, TTL, args, assert_tokens_rise, count, go, job, most_at_once, waiter_rows,
};
use crate::harness::*;

/// With N = 2, the holder of slot 1 (the row `NAME`, which every acquisition of the name locks)
/// holds the documented fence open for 3 s while the other holder ends: the waiter takes the
/// freed slot at once, not when the fenced transaction ends, and that transaction's write
/// commits.
#[test]
fn a_fenced_transaction_on_slot_one_leaves_the_other_slots_free_to_take() {
    let pg = Postgres::start();
    pg.psql("CREATE TABLE work (token bigint NOT NULL)");
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "busy";
    let two = args(&endpoint, lease, "2");
    let hold = Duration::from_secs(3);
    let body = format!(
        "while [ ! -e '{fence}' ]; do sleep 0.05; done\n{transaction}\n\
         while [ ! -e '{go}' ]; do sleep 0.05; done",
        fence = scratch.path("go-fence").display(),
        transaction = crate::postgres_only::fenced_transaction(&endpoint, lease, "a", hold),
        go = scratch.path("go-a").display(),
    );
    let mut instances = vec![Instance::start(&two, &scratch.job("a", &body))];
    let a = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    assert_eq!(
        pg.psql(&format!(
            "SELECT name FROM leader_exec_leases WHERE token = {}",
            a.token()
        ))
        .trim(),
        lease,
        "a holds slot 1"
    );
    instances.push(Instance::start(&two, &job(&scratch, "b")));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    instances.push(Instance::start(&two, &job(&scratch, "c")));
    assert!(
        wait_for(Duration::from_secs(10), || waiter_rows(&pg, lease) == 1),
        "c not in line"
    );
    std::fs::write(scratch.path("go-fence"), "").unwrap();
    scratch
        .wait_record("fenced", "a", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("a's fence: {:?}", scratch.history()));
    go(&scratch, "b");
    let c = scratch
        .wait_record("start", "c", hold + Duration::from_secs(10))
        .unwrap_or_else(|| panic!("c did not follow b: {:?}", scratch.history()));
    let b_end = scratch.wait_record("end", "b", Duration::ZERO).unwrap();
    let handover = Duration::from_nanos((c.time() - b_end.time()) as u64);
    assert!(
        handover < Duration::from_secs(1),
        "the free slot was taken {handover:?} after b ended: {:?}",
        scratch.history()
    );
    let committed = scratch
        .wait_record("committed", "a", hold + Duration::from_secs(10))
        .expect("a's transaction ended");
    assert!(committed.time() > c.time(), "{:?}", scratch.history());
    assert_eq!(committed.fields[..2], ["0", "1"], "{committed:?}");
    go(&scratch, "a");
    go(&scratch, "c");
    for mut instance in instances {
        assert_eq!(instance.wait(Duration::from_secs(10)), Some(0));
    }
    let history = scratch.history();
    assert_eq!(most_at_once(&history), 2, "{history:#?}");
    assert_tokens_rise(&history);
}

/// With N = 2, a frozen holder's job holds the documented fence on its slot row (`NAME/2`): the
/// other slot, freed, is taken at once, while the takeover of the frozen holder's slot waits for
/// the fenced transaction, whose write commits; after the takeover its token writes nothing.
#[test]
fn a_fenced_transaction_holds_up_the_takeover_of_its_slot_alone() {
    let pg = Postgres::start();
    pg.psql("CREATE TABLE work (token bigint NOT NULL)");
    let endpoint = Store::endpoint(&pg);
    let scratch = Scratch::new();
    let lease = "slot";
    let two = args(&endpoint, lease, "2");
    let mut a = Instance::start(&two, &job(&scratch, "a"));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let b = Instance::start(&two, &job(&scratch, "b"));
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let mut waiters = Vec::new();
    for (i, name) in ["c", "d"].iter().enumerate() {
        waiters.push(Instance::start(&two, &job(&scratch, name)));
        assert!(
            wait_for(Duration::from_secs(10), || waiter_rows(&pg, lease)
                == i as i64 + 1),
            "{name} not in line"
        );
    }
    // b's job: its transaction took the fence on b's row, then the job froze, and so did b.
    let fenced = format!(
        "INSERT INTO work (token) SELECT {t} FROM leader_exec_leases
         WHERE token = {t} AND (name = '{lease}' OR starts_with(name, '{lease}/'))
           AND holder IS NOT NULL FOR KEY SHARE",
        t = b_start.token()
    );
    let mut psql = KillOnDrop(
        std::process::Command::new("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", &endpoint])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    use std::io::Write;
    let stdin = psql.0.stdin.as_mut().unwrap();
    writeln!(stdin, "BEGIN; {fenced};").unwrap();
    stdin.flush().unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        count(
            &pg,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND granted
               AND pid IN (SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction')",
        ) > 0
    }));
    b.signal(Signal::SIGSTOP);
    if let Some(s) = supervisor_of(b.pid()) {
        let _ = nix::sys::signal::kill(Pid::from_raw(s), Signal::SIGSTOP);
    }
    let frozen = Instant::now();
    // The other slot, freed, goes to the first waiter at once.
    go(&scratch, "a");
    let c = scratch
        .wait_record("start", "c", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("c did not follow a: {:?}", scratch.history()));
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    let handover = Duration::from_nanos((c.time() - a_end.time()) as u64);
    assert!(handover < Duration::from_secs(1), "c after {handover:?}");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0));
    // b's slot is ripe for d a TTL after b froze, but its fence holds the takeover up.
    std::thread::sleep((TTL + RETRY * 2 + SLACK).saturating_sub(frozen.elapsed()));
    assert!(
        scratch.wait_record("start", "d", Duration::ZERO).is_none(),
        "d took b's slot over while b's fenced transaction was open: {:?}",
        scratch.history()
    );
    writeln!(stdin, "COMMIT;").unwrap();
    stdin.flush().unwrap();
    let d = scratch
        .wait_record("start", "d", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("d never took b's slot: {:?}", scratch.history()));
    assert!(d.token() > c.token() && c.token() > b_start.token());
    assert_eq!(
        pg.psql("SELECT token FROM work").trim(),
        b_start.token().to_string()
    );
    // After the takeover b's token writes nothing.
    assert!(pg.psql(&fenced).trim().is_empty());
    assert_eq!(count(&pg, "SELECT count(*) FROM work"), 1);
    b.signal(Signal::SIGKILL);
    let _ = killpg(
        nix::unistd::getpgid(Some(Pid::from_raw(b_start.pid()))).unwrap(),
        Signal::SIGKILL,
    );
    go(&scratch, "c");
    go(&scratch, "d");
    for mut waiter in waiters {
        assert_eq!(waiter.wait(Duration::from_secs(10)), Some(0));
    }
}
