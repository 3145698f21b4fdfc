//! Common first mistakes get a hint in their one line (exit 125): a command without `--`, a
//! misspelt subcommand, an endpoint without a port or with a misspelt scheme, a PostgreSQL
//! password missing or wrong.

use std::time::{Duration, Instant};

use crate::harness::*;

/// Runs leader-exec with `args`; returns (exit code, stderr). No store is needed for these.
fn run(args: &[&str]) -> (i32, String) {
    let (code, _, stderr) = Cmd::bare()
        .args(args)
        .env_remove("PGPASSWORD")
        .env_remove("LEADER_EXEC_PASSWORD")
        .run();
    (code, stderr)
}

fn assert_one_line_125(code: i32, stderr: &str) {
    assert_eq!(code, 125, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_command_without_dashes_is_told_to_put_dashes_before_it() {
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let marker = path_str(&marker);
    let (code, stderr) = run(&["--lease", "x", "touch", &marker]);
    assert_one_line_125(code, &stderr);
    assert!(
        stderr.contains("unexpected argument 'touch'")
            && stderr.contains("put -- before it")
            && stderr.contains("-- touch"),
        "{stderr}"
    );
    assert!(!std::path::Path::new(&marker).exists(), "the command ran");
    // A stray argument of a subcommand is not a command: no hint about `--` there.
    let (code, stderr) = run(&["status", "--lease", "x", "extra"]);
    assert_one_line_125(code, &stderr);
    assert!(
        stderr.contains("'extra'") && !stderr.contains("put --"),
        "{stderr}"
    );
}

#[test]
fn a_misspelt_subcommand_gets_a_did_you_mean() {
    for (typed, meant) in [
        ("stauts", "status"),
        ("wacth", "watch"),
        ("chek", "check"),
        ("resing", "resign"),
    ] {
        let (code, stderr) = run(&[typed, "--lease", "x"]);
        assert_one_line_125(code, &stderr);
        assert!(
            stderr.contains(&format!("did you mean the subcommand `{meant}`?")),
            "{typed}: {stderr}"
        );
    }
}

/// Runs with `endpoint` and a 3 s `--connect-timeout`; asserts one line and exit 125 well before
/// that timeout (no connection was tried), and returns the line.
fn refused_at_once(endpoint: &str) -> String {
    let started = Instant::now();
    let (code, stderr) = run(&[
        "--lease",
        "x",
        "--endpoints",
        endpoint,
        "--connect-timeout",
        "3s",
        "--",
        "true",
    ]);
    assert_one_line_125(code, &stderr);
    assert!(started.elapsed() < Duration::from_secs(2), "{endpoint}");
    stderr
}

#[test]
fn an_endpoint_without_a_port_is_refused_at_once() {
    // Without the check, etcd-client tries port 80 and the run fails only after
    // --connect-timeout, with a message about connecting.
    for endpoint in ["http://127.0.0.1", "127.0.0.1", "https://localhost/"] {
        let stderr = refused_at_once(endpoint);
        assert!(
            stderr.contains("has no port") && stderr.contains("http://127.0.0.1:2379"),
            "{endpoint}: {stderr}"
        );
    }
}

/// A scheme typo is refused at once in one line naming the nearest scheme, whichever store it
/// is nearest to (not only etcd's form), without trying to connect anywhere.
#[test]
fn a_scheme_typo_names_the_nearest_scheme_at_once() {
    for (endpoint, meant) in [
        ("postgre://postgres@127.0.0.1:5432/postgres", "postgres://"),
        ("zookeeper://127.0.0.1:2181", "zk://"),
        ("htp://127.0.0.1:2379", "http://"),
    ] {
        let stderr = refused_at_once(endpoint);
        assert!(
            stderr.contains(&format!("did you mean {meant}")) && stderr.contains(endpoint),
            "{endpoint}: {stderr}"
        );
    }
}

/// A PostgreSQL server that asks for a password over TCP (scram-sha-256) from user `postgres`,
/// whose password is `pw-right-9`. The harness's psql no longer works on it afterwards.
pub fn password_protected() -> Postgres {
    let pg = Postgres::start();
    let hba = pg.psql("SHOW hba_file").trim().to_owned();
    pg.psql("ALTER USER postgres PASSWORD 'pw-right-9'");
    std::fs::write(
        &hba,
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    pg.psql("SELECT pg_reload_conf()");
    // The reload is asynchronous: wait until a connection without a password is refused.
    assert!(wait_for(Duration::from_secs(10), || !pg
        .try_psql("SELECT 1")
        .status
        .success()));
    pg
}

#[test]
fn a_missing_or_wrong_postgres_password_names_where_a_password_goes() {
    let pg = password_protected();
    let endpoint = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
    let lease = ["--lease", "x", "--endpoints", endpoint.as_str()];
    let (code, stderr) = run(&[&lease[..], &["--no-wait", "--", "true"]].concat());
    assert_one_line_125(code, &stderr);
    for name in ["--password-file", "LEADER_EXEC_PASSWORD", "PGPASSWORD"] {
        assert!(stderr.contains(name), "no {name}: {stderr}");
    }

    let scratch = Scratch::new();
    let file = scratch.path("password");
    std::fs::write(&file, "pw-wrong-7\n").unwrap();
    let file = path_str(&file);
    let (code, stderr) = run(&[
        &lease[..],
        &["--password-file", &file, "--no-wait", "--", "true"],
    ]
    .concat());
    // The warning about a password without a verified certificate comes before the login.
    let (warning, refusal) = stderr.split_once('\n').unwrap_or_default();
    assert!(
        warning.contains(" WARN ") && warning.contains("without a verified certificate"),
        "{stderr}"
    );
    assert_one_line_125(code, refusal);
    assert!(!stderr.contains("pw-wrong-7"), "{stderr}");
    assert!(
        stderr.contains("password authentication failed")
            && stderr.contains(&format!("127.0.0.1:{}", pg.port)),
        "the host is not named: {stderr}"
    );

    // The right password works: the hints are about the password, not the server.
    std::fs::write(&file, "pw-right-9\n").unwrap();
    let out = Cmd::bare()
        .args(lease)
        .args(["--password-file", &file, "--no-wait", "--", "sh", "-c"])
        .arg("echo token $LEADER_TOKEN")
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("token "), "{stdout}");
}
