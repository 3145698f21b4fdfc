//! PostgreSQL: the schema leader-exec works in, and what other roles can do there. A schema
//! another role owns or may create objects in is refused before anything is read or made
//! there; another role's objects left in a safe one never run (every name leader-exec sends is
//! qualified with pg_catalog: the `postgres_hostile` store entry runs the whole store-independent
//! list that way); a table another role owns is refused before the first run reads it, and a
//! schema or table given away later before a run's attempt (sent with the checks) runs; and an
//! advisory lock any role can take does not hold up a first run.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;

/// A first run that prints its token: (exit code, stdout, stderr).
fn lead(endpoint: &str, lease: &str) -> (i32, String, String) {
    let mut args = vec!["--endpoints", endpoint, "--lease", lease];
    args.extend(FAST);
    args.extend(["--no-wait", "--", "sh", "-c", "echo $LEADER_TOKEN"]);
    Cmd::bare().args(&args).run()
}

/// A refusal: 125, one line, with every piece of `wanted` in it.
fn refused((code, stdout, stderr): (i32, String, String), wanted: &[&str]) {
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for piece in wanted {
        assert!(stderr.contains(piece), "{piece:?} not in {stderr}");
    }
}

#[test]
fn a_schema_another_role_owns_or_may_create_in_is_refused_before_anything_is_made_there() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let none_made = "SELECT to_regclass('leader_exec_leases') IS NULL \
                     AND to_regclass('mallorys.leader_exec_leases') IS NULL";
    // CREATE on public for everyone: the default before PostgreSQL 15, kept by upgrades.
    pg.psql("CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO PUBLIC");
    refused(
        lead(&endpoint, "s"),
        &[
            "role PUBLIC may create objects in schema public",
            "REVOKE CREATE ON SCHEMA \"public\" FROM PUBLIC",
            "a schema of its own",
        ],
    );
    // The read paths too, and nothing made by any of them.
    for sub in [
        vec!["status", "--endpoints", &endpoint, "--lease", "s"],
        vec![
            "check",
            "--endpoints",
            &endpoint,
            "--lease",
            "s",
            "--token",
            "1",
        ],
        vec!["resign", "--endpoints", &endpoint, "--lease", "s"],
    ] {
        refused(
            Cmd::bare().args(&sub).run(),
            &["role PUBLIC may create objects in schema public"],
        );
    }
    assert_eq!(pg.psql(none_made), "t\n");
    // One role granted CREATE is named.
    pg.psql("REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT CREATE ON SCHEMA public TO mallory");
    refused(
        lead(&endpoint, "s"),
        &[
            "role mallory may create objects in schema public",
            "FROM \"mallory\"",
        ],
    );
    // A schema another role owns, chosen in the URL.
    pg.psql(
        "REVOKE CREATE ON SCHEMA public FROM mallory; CREATE SCHEMA mallorys AUTHORIZATION mallory",
    );
    let theirs = format!("{endpoint}?options=-csearch_path%3Dmallorys");
    refused(
        lead(&theirs, "s"),
        &[
            "role mallory owns schema mallorys",
            "ALTER SCHEMA \"mallorys\" OWNER TO \"postgres\"",
        ],
    );
    assert_eq!(pg.psql(none_made), "t\n");
    // Trusted: a role the connecting one is a member of, and a member of the connecting role
    // (a superuser included: here, public's owner, pg_database_owner, is the database's owner
    // postgres; every other test runs in public as PostgreSQL 15 makes it).
    pg.psql("GRANT mallory TO postgres");
    let (code, _, stderr) = lead(&theirs, "s");
    assert_eq!(code, 0, "{stderr}");
    pg.psql(
        "REVOKE mallory FROM postgres; CREATE ROLE ops LOGIN; GRANT ops TO mallory;
         GRANT CREATE ON SCHEMA public TO mallory",
    );
    let as_ops = format!("postgres://ops@127.0.0.1:{}/postgres", pg.port);
    pg.psql("GRANT CREATE ON SCHEMA public TO ops");
    let (code, _, stderr) = lead(&as_ops, "s");
    assert_eq!(code, 0, "{stderr}");
    // But a role ops trusts is not one postgres trusts.
    refused(
        lead(&endpoint, "s"),
        &["may create objects in schema public"],
    );
}

#[test]
fn a_schema_or_table_given_away_after_the_first_run_is_refused_before_the_attempt_runs() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    // The tables made and complete: later starts check them in the message of their first
    // attempt, which must stop before the attempt.
    let (code, _, stderr) = lead(&endpoint, "given");
    assert_eq!(code, 0, "{stderr}");
    let row = "SELECT token, renewals FROM leader_exec_leases WHERE name = 'given'";
    let before = pg.psql(row);
    pg.psql("CREATE ROLE mallory LOGIN; CREATE SCHEMA mallorys AUTHORIZATION mallory");
    // The schema opened to everyone.
    pg.psql("GRANT CREATE ON SCHEMA public TO PUBLIC");
    refused(
        lead(&endpoint, "given"),
        &["role PUBLIC may create objects in schema public"],
    );
    assert_eq!(pg.psql(row), before, "the attempt ran");
    pg.psql("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    // The leases table given to mallory, who adds a trigger that makes it a superuser as soon
    // as a superuser writes a row (a trigger runs as whoever writes).
    pg.psql(
        "ALTER TABLE leader_exec_leases OWNER TO mallory; SET ROLE mallory;
         CREATE FUNCTION mallorys.escalate() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN NEW; END $$;
         CREATE TRIGGER grab BEFORE INSERT OR UPDATE ON leader_exec_leases
             FOR EACH ROW EXECUTE FUNCTION mallorys.escalate();
         RESET ROLE",
    );
    refused(
        lead(&endpoint, "given"),
        &["table public.leader_exec_leases", "owned by role mallory"],
    );
    assert_eq!(
        pg.psql("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
        "f\n",
        "mallory became a superuser"
    );
    assert_eq!(pg.psql(row), before, "the attempt ran");
}

#[test]
fn an_operator_another_role_left_in_the_schema_never_runs() {
    // mallory had CREATE on public (before it was revoked) and left `*(bigint, interval)`,
    // which matches `$3::bigint * interval '…'` better than pg_catalog's `float8 * interval`:
    // unqualified, it ran as the connecting role (a superuser) at every acquisition.
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    pg.psql(
        "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;
         SET ROLE mallory;
         CREATE FUNCTION public.grab(bigint, interval) RETURNS interval LANGUAGE plpgsql AS $$
             BEGIN
                 BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; EXCEPTION WHEN others THEN NULL; END;
                 RETURN $1::float8 * $2;
             END $$;
         CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.grab);
         CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE sql AS 'SELECT 4242::bigint';
         RESET ROLE;
         REVOKE CREATE ON SCHEMA public FROM mallory",
    );
    let (code, stdout, stderr) = lead(&endpoint, "op");
    assert_eq!(code, 0, "{stderr}");
    assert_ne!(
        stdout.trim(),
        "4242",
        "mallory's nextval(text) chose the token"
    );
    assert_eq!(
        pg.psql("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
        "f\n",
        "mallory's operator ran as the connecting role"
    );
}

#[test]
fn a_table_another_role_owns_is_refused_before_the_first_run_reads_it() {
    // The tables incomplete (only the leases table, pre-created): before, the first run's DDL
    // read it (`max(token)`) and then refused. Its `token` is of mallory's domain, whose `max`
    // is mallory's aggregate: it ran as the connecting role. It bumps a sequence, which a
    // rollback does not undo.
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    pg.psql(
        "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;
         SET ROLE mallory;
         CREATE SEQUENCE public.mallory_ran;
         GRANT USAGE ON SEQUENCE public.mallory_ran TO PUBLIC;
         CREATE DOMAIN public.mtok AS bigint;
         CREATE FUNCTION public.mmax(mtok, mtok) RETURNS mtok LANGUAGE sql AS
             $$ SELECT pg_catalog.nextval('public.mallory_ran'); SELECT GREATEST($1, $2) $$;
         CREATE AGGREGATE public.max(mtok) (SFUNC = public.mmax, STYPE = mtok);
         CREATE TABLE public.leader_exec_leases (name text PRIMARY KEY, holder text,
             token mtok NOT NULL, expires_at timestamptz NOT NULL, ttl_ms bigint NOT NULL DEFAULT 0,
             renewals bigint NOT NULL DEFAULT 0, max_holders bigint NOT NULL DEFAULT 1);
         INSERT INTO public.leader_exec_leases VALUES ('x', NULL, 1, now(), 0, 0, 1);
         RESET ROLE;
         REVOKE CREATE ON SCHEMA public FROM mallory",
    );
    refused(
        lead(&endpoint, "t"),
        &["table public.leader_exec_leases is owned by role mallory"],
    );
    assert_eq!(
        pg.psql("SELECT is_called FROM public.mallory_ran"),
        "f\n",
        "mallory's aggregate ran"
    );
    assert_eq!(
        pg.psql("SELECT to_regclass('leader_exec_records') IS NULL"),
        "t\n"
    );
}

/// A session of `role` (trust authentication) that holds the session-level advisory lock on
/// `key` (an SQL expression) until it is killed.
fn hold_advisory_lock(pg: &Postgres, role: &str, key: &str) -> Child {
    let child = Command::new("psql")
        .env_remove("PGPASSWORD")
        .args(["-X", "-q", "-At", "-d"])
        .arg(format!("postgres://{role}@127.0.0.1:{}/postgres", pg.port))
        .args(["-c", &format!("SELECT pg_advisory_lock({key})")])
        .args(["-c", "SELECT pg_sleep(120)"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.psql(&format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND a.usename = '{role}'"
    )) != "1\n"
    {
        assert!(Instant::now() < deadline, "{role} never took the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn an_advisory_lock_any_role_can_take_does_not_hold_up_a_first_run() {
    // Advisory locks have no permissions: a role with only CONNECT takes the key the first
    // run's DDL used to wait for (computable by anyone).
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    pg.psql("CREATE ROLE nobody LOGIN");
    let key = "hashtext('leader-exec schema ' || 'public' || 'leader_exec_leases')";
    let mut holder = hold_advisory_lock(&pg, "nobody", key);
    let started = Instant::now();
    let (code, stdout, stderr) = lead(&endpoint, "lock");
    let took = started.elapsed();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.trim().parse::<i64>().unwrap() > 0, "{stdout}");
    assert!(took < Duration::from_secs(3), "the first run took {took:?}");
}

#[test]
fn a_lock_that_holds_up_bringing_the_tables_up_to_date_is_named_with_its_holder() {
    // A session of another role (with SELECT on the leases table) in an open transaction
    // that read it: the first run after an upgrade (here: the guard trigger dropped) needs
    // the table's exclusive lock. It is refused naming that session, not "did not answer".
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let (code, _, stderr) = lead(&endpoint, "up");
    assert_eq!(code, 0, "{stderr}");
    pg.psql(
        "CREATE ROLE reader LOGIN; GRANT SELECT ON leader_exec_leases TO reader;
         DROP TRIGGER leader_exec_guard ON leader_exec_leases",
    );
    let mut reader = Command::new("psql")
        .env_remove("PGPASSWORD")
        .args(["-X", "-q", "-At", "-d"])
        .arg(format!(
            "postgres://reader@127.0.0.1:{}/postgres?application_name=slow-report",
            pg.port
        ))
        .args([
            "-c",
            "BEGIN; SELECT count(*) FROM leader_exec_leases; SELECT pg_sleep(120)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.psql(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.relation = 'leader_exec_leases'::regclass AND a.usename = 'reader'",
    ) != "1\n"
    {
        assert!(Instant::now() < deadline, "the reader never read");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = pg.psql("SELECT pid FROM pg_stat_activity WHERE usename = 'reader'");
    let started = Instant::now();
    let mut args = vec![
        "--endpoints",
        &endpoint,
        "--lease",
        "up",
        "--connect-timeout",
        "3s",
    ];
    args.extend(FAST);
    args.extend(["--no-wait", "--", "true"]);
    let (code, stdout, stderr) = Cmd::bare().args(&args).run();
    let took = started.elapsed();
    let _ = reader.kill();
    let _ = reader.wait();
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for piece in [
        format!("pid {}", pid.trim()),
        "role reader".to_owned(),
        "slow-report".to_owned(),
    ] {
        assert!(stderr.contains(&piece), "{piece:?} not in {stderr}");
    }
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn first_runs_at_once_without_the_advisory_lock_all_make_the_tables_and_run() {
    // The lock held elsewhere, none of them gets it: their DDL races in the catalog, and the
    // ones that lose are rolled back and go again.
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    pg.psql("CREATE ROLE nobody LOGIN");
    let key = "hashtext('leader-exec schema ' || 'public' || 'leader_exec_leases')";
    let mut holder = hold_advisory_lock(&pg, "nobody", key);
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let endpoint = endpoint.clone();
            std::thread::spawn(move || lead(&endpoint, &format!("race{i}")))
        })
        .collect();
    let results: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let _ = holder.kill();
    let _ = holder.wait();
    for (code, stdout, stderr) in results {
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(stdout.trim().parse::<i64>().unwrap() > 0, "{stdout}");
    }
}
