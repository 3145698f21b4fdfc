//! PostgreSQL only: what an instance does on the server before its command starts. Uncontended,
//! it opens one session and leads from it: no place in line, no LISTEN, no NOTIFY self-test
//! (they serve a waiter), and the renewal session only at the first renewal. A waiter still
//! joins the line and listens before it waits, so a release wakes it at once.

use std::time::Duration;

use crate::harness::*;

/// A renewal only every 5 s: the command's first look at the server comes long before the
/// renewal session is opened.
const SLOW_RENEWALS: [&str; 8] = [
    "--ttl",
    "30s",
    "--renew-deadline",
    "20s",
    "--retry-period",
    "5s",
    "--kill-after",
    "2s",
];

#[test]
fn an_uncontended_leader_starts_its_command_on_one_session_that_listens_on_nothing() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    let mut args = vec!["-v", "--endpoints", &endpoint, "--lease", "start"];
    args.extend(SLOW_RENEWALS);
    let sessions = scratch.path("sessions");
    let go = scratch.path("go");
    // The command's first act: count leader-exec's sessions on the server, and those whose
    // last statement was a LISTEN.
    let a_job = format!(
        r#"psql -X -At -d '{url}' -c "SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN%') FROM pg_stat_activity WHERE application_name = 'leader-exec'" > '{sessions}'
while [ ! -e '{go}' ]; do sleep 0.05; done"#,
        url = pg.url(pg.port),
        sessions = sessions.display(),
        go = go.display(),
    );
    let mut a = Instance::start(&args, &scratch.job("a", &a_job));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    assert!(
        wait_for(Duration::from_secs(10), || std::fs::read_to_string(
            &sessions
        )
        .is_ok_and(|s| s.ends_with('\n'))),
        "the command's psql wrote nothing: {}",
        a.stderr()
    );
    assert_eq!(
        std::fs::read_to_string(&sessions).unwrap().trim(),
        "1|0",
        "leader-exec's sessions (all, listening) when its command started: {}",
        a.stderr()
    );

    // A waiter joins the line and listens before it waits: the release wakes it within a
    // fraction of its 5 s --retry-period, at which it would otherwise look next.
    let mut b = Instance::start(&args, &scratch.job("b", "true"));
    assert!(
        wait_for(Duration::from_secs(10), || {
            pg.claims("start") == 2
            && pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leader-exec' AND query LIKE 'LISTEN%'"
            )
            .trim()
                == "1"
        }),
        "b did not join the line and listen: {}",
        b.stderr()
    );
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(b_start.time() > a_end.time());
    let handover = Duration::from_nanos((b_start.time() - a_end.time()) as u64);
    assert!(
        handover < Duration::from_millis(2500),
        "handover took {handover:?}: the waiter was not woken by the release"
    );
    assert_one_at_a_time(&scratch.history());
    assert!(pg.held().is_empty(), "{:?}", pg.held());
}
