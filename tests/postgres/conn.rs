//! PostgreSQL: which server and which tables leader-exec trusts. Never a standby (it answers
//! from the past), never a table, sequence or function another role owns (its owner could
//! rewrite tokens or run code as the connecting role), and never a password used without a
//! verified certificate unsaid.

use std::time::Duration;

use crate::harness::*;

/// A lease timing that keeps a claim live on a lagging standby for the whole test.
const LONG: [&str; 8] = [
    "--ttl",
    "60s",
    "--renew-deadline",
    "20s",
    "--retry-period",
    "1s",
    "--kill-after",
    "1s",
];

#[test]
fn a_lagging_standby_first_in_the_url_is_passed_over_by_check_status_and_run() {
    let primary = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&primary);
    let with = |identity: &'static str| {
        let mut args = vec![
            "--endpoints",
            endpoint.as_str(),
            "--lease",
            "standby",
            "--identity",
            identity,
        ];
        args.extend(LONG);
        args
    };
    let mut a = Instance::start(&with("host-a"), &scratch.job("a", &gated(&scratch, "a")));
    let a_token = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();

    // The standby has replayed a's claim, then stops replaying: what an old primary that
    // rejoined as a standby after a failover shows.
    let standby = primary.start_standby();
    let row = "SELECT holder || ' ' || token FROM leader_exec_leases WHERE name = 'standby'";
    assert!(
        wait_for(Duration::from_secs(20), || {
            standby.try_psql(row).stdout == format!("host-a {a_token}\n").into_bytes()
        }),
        "the standby never showed a's claim: {}",
        String::from_utf8_lossy(&standby.try_psql(row).stdout)
    );
    standby.pause_replay();

    // a hands over to b on the primary.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(Duration::from_secs(10)), Some(0), "{}", a.stderr());
    let mut b = Instance::start(&with("host-b"), &scratch.job("b", &gated(&scratch, "b")));
    let b_token = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started")
        .token();
    assert!(b_token > a_token, "{a_token} then {b_token}");
    // The standby still shows the deposed leader's claim, live.
    assert_eq!(
        standby.psql(
            "SELECT holder || ' ' || token || ' ' || (expires_at > now()) FROM leader_exec_leases WHERE name = 'standby'"
        ),
        format!("host-a {a_token} true\n")
    );

    // The standby first, as libpq lists hosts: every operation goes to the primary.
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        standby.port, primary.port
    );
    let check = |token: i64| {
        Cmd::bare()
            .args([
                "check",
                "--endpoints",
                &both,
                "--lease",
                "standby",
                "--token",
                &token.to_string(),
            ])
            .run()
    };
    let (code, _, stderr) = check(a_token);
    assert_eq!(code, 1, "the deposed token passed the check: {stderr}");
    let (code, _, stderr) = check(b_token);
    assert_eq!(code, 0, "the current token failed the check: {stderr}");
    // The standby alone: no answer from it, whatever it holds (retried as an unreachable
    // server would be, until --connect-timeout).
    let only_standby = Store::endpoint(&standby);
    let (code, stdout, stderr) = Cmd::bare()
        .args([
            "check",
            "--endpoints",
            &only_standby,
            "--lease",
            "standby",
            "--token",
            &a_token.to_string(),
            "--connect-timeout",
            "2s",
        ])
        .run();
    assert_eq!(code, 125, "{stdout}{stderr}");
    let (code, stdout, stderr) = Cmd::bare()
        .args(["status", "--endpoints", &both, "--lease", "standby"])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("host-b"), "{stdout}");
    assert!(!stdout.contains("host-a"), "{stdout}");
    let mut args = vec!["--endpoints", both.as_str(), "--lease", "standby"];
    args.extend(FAST);
    args.extend(["--no-wait", "--", "sh", "-c", "echo $LEADER_TOKEN"]);
    let (code, _, stderr) = Cmd::bare().args(&args).run();
    assert_eq!(code, 124, "b leads on the primary: {stderr}");

    open_gate(&scratch, "b");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    // libpq's names for "only a primary" are accepted too.
    for attrs in ["read-write", "primary"] {
        let url = format!("{both}?target_session_attrs={attrs}");
        let mut args = vec!["--endpoints", url.as_str(), "--lease", "standby"];
        args.extend(FAST);
        args.extend(["--no-wait", "--", "sh", "-c", "echo $LEADER_TOKEN"]);
        let (code, stdout, stderr) = Cmd::bare().args(&args).run();
        assert_eq!(code, 0, "{attrs}: {stderr}");
        assert!(stdout.trim().parse::<i64>().unwrap() > b_token, "{stdout}");
    }
    // The standby never caught up: it was there to be asked all along.
    assert_eq!(
        standby.psql(row),
        format!("host-a {a_token}\n"),
        "the standby replayed after all"
    );
}

#[test]
fn target_session_attrs_that_allow_a_standby_are_refused_with_125() {
    let pg = Postgres::start();
    for attrs in ["any", "read-only", "standby", "prefer-standby"] {
        let url = format!("{}?target_session_attrs={attrs}", Store::endpoint(&pg));
        let (code, stdout, stderr) = Cmd::bare()
            .args(["--endpoints", &url, "--lease", "x", "--", "echo", "ran"])
            .run();
        assert_eq!(code, 125, "{attrs}: {stdout}{stderr}");
        assert_eq!(stdout, "", "{attrs}: the command ran");
        assert_eq!(stderr.lines().count(), 1, "{attrs}: {stderr}");
        assert!(
            stderr.contains(&format!("target_session_attrs={attrs}")) && stderr.contains("standby"),
            "{stderr}"
        );
        let (code, _, stderr) = Cmd::bare()
            .args(["check", "--endpoints", &url, "--lease", "x", "--token", "1"])
            .run();
        assert_eq!(code, 125, "{attrs}: {stderr}");
    }
    // Nothing was made in the store.
    assert_eq!(
        pg.psql("SELECT to_regclass('leader_exec_leases') IS NULL"),
        "t\n"
    );
}

/// The leases table as leader-exec makes it.
const LEASES: &str = "CREATE TABLE leader_exec_leases (name text PRIMARY KEY, holder text, \
    token bigint NOT NULL, expires_at timestamptz NOT NULL, ttl_ms bigint NOT NULL DEFAULT 0)";
const RECORDS: &str = "CREATE TABLE leader_exec_records (key text PRIMARY KEY, value bytea NOT NULL, \
    expires_at timestamptz, lease_name text, lease_token bigint)";

#[test]
fn tables_another_role_owns_are_refused_before_its_trigger_can_fire() {
    let pg = Postgres::start();
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&pg);
    // CREATE on public for everyone: the default before PostgreSQL 15, kept by upgrades.
    pg.psql("CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO PUBLIC");
    // mallory pre-creates the tables, with a trigger that makes it a superuser as soon as a
    // superuser writes a row (a trigger runs as whoever writes). Then CREATE is revoked (a
    // schema where others may create is refused as a whole: tests/postgres/schema.rs); what
    // mallory made stays, and stays mallory's.
    pg.psql(&format!(
        "SET ROLE mallory; {LEASES}; {RECORDS};
         CREATE FUNCTION escalate() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN NEW; END $$;
         CREATE TRIGGER grab BEFORE INSERT OR UPDATE ON leader_exec_leases
             FOR EACH ROW EXECUTE FUNCTION escalate();
         RESET ROLE; REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    ));
    let ran = scratch.path("ran");
    let job = format!("echo $LEADER_TOKEN > '{}'", ran.display());
    let lead = || {
        let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "own"];
        args.extend(FAST);
        args.extend(["--no-wait", "--", "sh", "-c", job.as_str()]);
        Cmd::bare().args(&args).run()
    };
    let refused = |(code, stdout, stderr): (i32, String, String), object: &str| {
        assert_eq!(code, 125, "{stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(object) && stderr.contains("owned by role mallory"),
            "{stderr}"
        );
    };
    let superuser = "SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'";
    let first = lead();
    assert_eq!(pg.psql(superuser), "f\n", "mallory became a superuser");
    refused(first, "table public.leader_exec_leases");
    assert!(!ran.exists(), "the command ran");
    refused(
        Cmd::bare()
            .args([
                "check",
                "--endpoints",
                &endpoint,
                "--lease",
                "own",
                "--token",
                "1",
            ])
            .run(),
        "leader_exec_leases",
    );
    refused(
        Cmd::bare()
            .args(["status", "--endpoints", &endpoint, "--lease", "own"])
            .run(),
        "leader_exec_leases",
    );
    assert_eq!(pg.psql(superuser), "f\n", "mallory became a superuser");
    assert_eq!(pg.psql("SELECT count(*) FROM leader_exec_leases"), "0\n");

    // Only the leases table pre-created: the records table leader-exec would make is not
    // left behind when it refuses.
    pg.psql("DROP TABLE leader_exec_records");
    refused(lead(), "table public.leader_exec_leases");
    assert_eq!(
        pg.psql("SELECT to_regclass('leader_exec_records') IS NULL"),
        "t\n"
    );
    assert_eq!(pg.psql(superuser), "f\n", "mallory became a superuser");

    // Its own tables, made on first use: used.
    pg.psql("DROP TABLE leader_exec_leases; DROP FUNCTION escalate()");
    let (code, _, stderr) = lead();
    assert_eq!(code, 0, "{stderr}");
    let first_token: i64 = std::fs::read_to_string(&ran)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::remove_file(&ran).unwrap();

    // Anything else named with the table prefix (the token sequence, say) is covered too.
    pg.psql("ALTER SEQUENCE leader_exec_tokens OWNER TO mallory");
    refused(lead(), "sequence public.leader_exec_tokens");
    assert!(!ran.exists(), "the command ran");
    // And a function named with the prefix that nothing uses (looked up by name range).
    pg.psql(
        "ALTER SEQUENCE leader_exec_tokens OWNER TO postgres;
         CREATE FUNCTION leader_exec_extra() RETURNS int LANGUAGE sql AS 'SELECT 1';
         ALTER FUNCTION leader_exec_extra() OWNER TO mallory",
    );
    refused(lead(), "function public.leader_exec_extra()");
    assert!(!ran.exists(), "the command ran");
    pg.psql("DROP FUNCTION leader_exec_extra()");
    // So is the function of a trigger on leader-exec's own table.
    pg.psql(
        "ALTER SEQUENCE leader_exec_tokens OWNER TO postgres;
         CREATE FUNCTION harmless() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         ALTER FUNCTION harmless() OWNER TO mallory;
         CREATE TRIGGER t AFTER UPDATE ON leader_exec_leases FOR EACH ROW EXECUTE FUNCTION harmless()",
    );
    refused(lead(), "harmless()");
    assert!(!ran.exists(), "the command ran");

    // A role the connecting one is explicitly a member of may own them.
    pg.psql("GRANT mallory TO postgres");
    let (code, _, stderr) = lead();
    assert_eq!(code, 0, "{stderr}");
    let token: i64 = std::fs::read_to_string(&ran)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token > first_token, "{first_token} then {token}");
}

/// A password with a server whose certificate is not verified (no TLS, or TLS unchecked) is
/// warned about once, before the login; a verified certificate, or no password, is not.
#[test]
fn a_password_used_without_a_verified_certificate_is_warned_about_once_and_never_shown() {
    let mut pg = Postgres::start();
    let scratch = Scratch::new();
    let lead = |url: &str| {
        let mut args = vec!["--endpoints", url, "--lease", "pw"];
        args.extend(FAST);
        args.extend(["--no-wait", "--", "true"]);
        Cmd::bare().args(&args).run()
    };
    let warnings = |stderr: &str| {
        assert!(!stderr.contains("hunter2"), "{stderr}");
        stderr
            .lines()
            .filter(|l| l.contains("without a verified certificate"))
            .count()
    };
    let port = pg.port;
    let with_password =
        |query: &str| format!("postgres://postgres:hunter2@127.0.0.1:{port}/postgres{query}");
    // The server offers no TLS: prefer (the default) falls back to plain TCP.
    for query in ["", "?sslmode=prefer", "?sslmode=disable"] {
        let (code, _, stderr) = lead(&with_password(query));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(warnings(&stderr), 1, "{query}: {stderr}");
    }
    // No password: nothing to warn about.
    let (code, _, stderr) = lead(&Store::endpoint(&pg));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(warnings(&stderr), 0, "{stderr}");
    // TLS on the server: prefer and require get it, but nothing checks the certificate.
    make_certificates(&scratch);
    pg.enable_tls(&scratch.path("server.crt"), &scratch.path("server.key"));
    for query in ["", "?sslmode=require", "?sslmode=disable"] {
        let (code, _, stderr) = lead(&with_password(query));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(warnings(&stderr), 1, "{query}: {stderr}");
    }
    let ca = scratch.path("ca.crt");
    let query = format!("?sslmode=verify-full&sslrootcert={}", ca.display());
    let (code, _, stderr) = lead(&with_password(&query));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(warnings(&stderr), 0, "{stderr}");
}

#[test]
fn tables_found_further_down_search_path_are_not_made_again_in_the_first_schema() {
    let pg = Postgres::start();
    let endpoint = Store::endpoint(&pg);
    let lead = |url: &str| {
        let mut args = vec!["--endpoints", url, "--lease", "path"];
        args.extend(FAST);
        args.extend(["--no-wait", "--", "sh", "-c", "echo $LEADER_TOKEN"]);
        Cmd::bare().args(&args).run()
    };
    let (code, stdout, stderr) = lead(&endpoint);
    assert_eq!(code, 0, "{stderr}");
    let first_token: i64 = stdout.trim().parse().unwrap();
    // A schema named after the role: "$user" now comes before public in the default
    // search_path, and is where new tables would go.
    pg.psql("CREATE SCHEMA postgres");
    let (code, stdout, stderr) = lead(&endpoint);
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("schema public") && stderr.contains("search_path"),
        "{stderr}"
    );
    assert_eq!(
        pg.psql("SELECT to_regclass('postgres.leader_exec_leases') IS NULL"),
        "t\n"
    );
    // Told which schema, it goes on where it was: the token does not start again.
    let (code, stdout, stderr) = lead(&format!("{endpoint}?options=-csearch_path%3Dpublic"));
    assert_eq!(code, 0, "{stderr}");
    let token: i64 = stdout.trim().parse().unwrap();
    assert!(token > first_token, "{first_token} then {token}");
}

#[test]
fn a_role_and_a_schema_named_with_capitals_are_looked_up_as_they_are_written() {
    // The ownership check finds the connecting role and the schema by name: a lookup that
    // folded case would find no role (every object foreign: refused) or no schema (no object
    // looked at: nothing refused).
    let pg = Postgres::start();
    let endpoint = format!("postgres://Ops@127.0.0.1:{}/postgres", pg.port);
    pg.psql(
        "CREATE ROLE \"Ops\" LOGIN; CREATE SCHEMA \"Ops\" AUTHORIZATION \"Ops\";
         CREATE ROLE mallory LOGIN; GRANT USAGE ON SCHEMA \"Ops\" TO mallory",
    );
    let lead = || {
        let mut args = vec!["--endpoints", endpoint.as_str(), "--lease", "caps"];
        args.extend(FAST);
        args.extend(["--no-wait", "--", "sh", "-c", "echo $LEADER_TOKEN"]);
        Cmd::bare().args(&args).run()
    };
    let (code, stdout, stderr) = lead();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.trim().parse::<i64>().unwrap() > 0, "{stdout}");
    assert_eq!(
        pg.psql("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass('\"Ops\".leader_exec_leases')"),
        "Ops\n"
    );
    // Made by a superuser for mallory (mallory may not create there: that would refuse the
    // schema as a whole).
    pg.psql(
        "CREATE FUNCTION \"Ops\".leader_exec_extra() RETURNS int LANGUAGE sql AS 'SELECT 1';
         ALTER FUNCTION \"Ops\".leader_exec_extra() OWNER TO mallory",
    );
    let (code, stdout, stderr) = lead();
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert!(
        stderr.contains("function Ops.leader_exec_extra()")
            && stderr.contains("owned by role mallory"),
        "{stderr}"
    );
}
