//! MySQL through the command line: which server leader-exec trusts (only a writable primary, for
//! the run form and for `check` and `status` alike) and fencing inside a job's own transaction
//! (the fence row, `LOCK IN SHARE MODE`).

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::*;

/// A claim that stays live on the read-only server for the whole test, and a leader that learns
/// of the read-only flag within two seconds.
const LONG: [&str; 8] = [
    "--ttl",
    "60s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "500ms",
    "--kill-after",
    "1s",
];

/// An old primary turned read-only while a leader held a claim on it (what a failover leaves):
/// its leader steps down (its renewals are refused), and the claim stays on it, live by its
/// clock. Named first in the URL, the read-only server is passed over by `check`, `status` and
/// the run form, which all answer from the writable one; alone, it answers nothing (125).
#[test]
fn a_read_only_server_showing_a_deposed_claim_is_passed_over_by_check_status_and_run() {
    let old = MariaDb::start();
    let primary = MariaDb::start();
    let scratch = Scratch::new();
    let with = |endpoint: &str, identity: &str, lease_args: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["--endpoints", endpoint, "--lease", "ro", "--identity"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        args.push(identity.to_owned());
        args.extend(lease_args.iter().map(|s| (*s).to_owned()));
        args
    };
    let on_old = old.open_url(old.port);
    // Two runs on the old server first, so that its claim's token (3) is one the primary never
    // gives in this test. (Without --no-wait: on a busy machine a release can be lost, and the
    // next run then takes the row over a TTL later.)
    for _ in 0..2 {
        let mut args = with(&on_old, "warm", &FAST);
        args.extend(["--", "true"].map(str::to_owned));
        let (code, _, stderr) = Cmd::bare().args(&args).run();
        assert_eq!(code, 0, "{stderr}");
    }
    let args = with(&on_old, "host-a", &LONG);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = Instance::start(&args, &scratch.job("a", "sleep 60"));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let a_token = a_start.token();
    assert_eq!(a_token, 3);

    // The failover: the old primary is read-only now. Its leader's renewals are refused, so it
    // stops its command within its renew deadline; the claim stays, live by the old server.
    // Its release is refused too, and retried (for up to a TTL, as through an outage: the URL
    // may list the new primary) until TERM ends it; never reported as done.
    old.sql("SET GLOBAL read_only = ON");
    assert!(
        wait_for(Duration::from_secs(15), || !alive(a_start.pid())),
        "a's command outlived its refused renewals"
    );
    assert!(
        wait_for(Duration::from_secs(15), || a
            .stderr()
            .contains("retrying the release")),
        "a's release on a read-only server: {}",
        a.stderr()
    );
    a.signal(Signal::SIGTERM);
    assert!(
        a.wait(Duration::from_secs(15)).is_some(),
        "a never exited: {}",
        a.stderr()
    );
    assert!(
        !a.stderr().contains("lease released"),
        "a release the server refused was reported as done: {}",
        a.stderr()
    );
    let row = "SELECT CONCAT(holder, ' ', token, ' ', expires_at > NOW(6)) FROM leader_exec.leader_exec_leases WHERE name = 'ro'";
    assert_eq!(old.sql(row).trim(), "host-a 3 1");

    // b leads on the primary, with token 1.
    let on_primary = primary.open_url(primary.port);
    let args = with(&on_primary, "host-b", &LONG);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut b = Instance::start(&args, &scratch.job("b", &gated(&scratch, "b")));
    let b_token = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started")
        .token();
    assert_eq!(b_token, 1);

    // The old server first in the URL: every operation goes to the primary.
    let both = format!(
        "mysql://{MARIADB_OPEN_USER}@127.0.0.1:{},127.0.0.1:{}/{MARIADB_DATABASE}",
        old.port, primary.port
    );
    let check = |endpoint: &str, token: i64| {
        Cmd::bare()
            .args(["check", "--endpoints", endpoint, "--lease", "ro"])
            .args(["--token", &token.to_string(), "--connect-timeout", "2s"])
            .run()
    };
    let (code, _, stderr) = check(&both, a_token);
    assert_eq!(code, 1, "the deposed token passed the check: {stderr}");
    let (code, _, stderr) = check(&both, b_token);
    assert_eq!(code, 0, "the current token failed the check: {stderr}");
    let (code, stdout, stderr) = Cmd::bare()
        .args(["status", "--endpoints", &both, "--lease", "ro"])
        .run();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("host-b") && !stdout.contains("host-a"),
        "{stdout}"
    );
    let mut args = with(&both, "host-c", &FAST);
    args.extend(["--no-wait", "--", "true"].map(str::to_owned));
    let (code, _, stderr) = Cmd::bare().args(&args).run();
    assert_eq!(code, 124, "b leads on the primary: {stderr}");

    // The old server alone: no answer from it, whatever it holds (retried as an unreachable
    // server would be, until --connect-timeout), naming why in one line.
    let (code, stdout, stderr) = check(&on_old, a_token);
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert!(
        stderr.contains("read-only") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let (code, stdout, stderr) = Cmd::bare()
        .args(["status", "--endpoints", &on_old, "--lease", "ro"])
        .args(["--connect-timeout", "2s"])
        .run();
    assert_eq!(code, 125, "{stdout}{stderr}");
    let mut args = with(&on_old, "host-d", &FAST);
    args.extend(["--connect-timeout", "2s", "--", "echo", "ran"].map(str::to_owned));
    let (code, stdout, stderr) = Cmd::bare().args(&args).run();
    assert_eq!(code, 125, "{stdout}{stderr}");
    assert_eq!(stdout, "", "the command ran on a read-only server");

    open_gate(&scratch, "b");
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert_eq!(old.sql(row).trim(), "host-a 3 1", "the old server changed");
}

/// A job body (for `Scratch::job`) that waits for the file `go`, then writes one row to `work`
/// through the recipe of docs/mysql.md ("Fencing in the same database") with the `mariadb`
/// client, and records `wrote NAME ROWS` (the rows of `work` with its token afterwards), then
/// sleeps.
fn fenced_writer(port: u16, go: &std::path::Path, name: &str) -> String {
    format!(
        r#"while [ ! -e '{go}' ]; do sleep 0.05; done
mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P {port} -u {user} -N -B {db} -e "
START TRANSACTION;
SELECT COUNT(*) INTO @fenced FROM leader_exec_fences
 WHERE name = 'fence' AND token = $LEADER_TOKEN AND holder IS NOT NULL LOCK IN SHARE MODE;
INSERT INTO work (token) SELECT $LEADER_TOKEN FROM DUAL WHERE @fenced = 1;
COMMIT;"
rows=$(mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P {port} -u {user} -N -B {db} \
  -e "SELECT COUNT(*) FROM work WHERE token = $LEADER_TOKEN")
echo "wrote {name} $rows $(date +%s%N)" >> "$h"
sleep 30"#,
        go = go.display(),
        user = MARIADB_OPEN_USER,
        db = MARIADB_DATABASE,
    )
}

/// A frozen old leader cannot stop its command, which writes after a takeover: through the fence
/// row, only the current leader's write commits.
#[test]
fn a_frozen_old_leaders_fenced_write_is_rejected_after_a_takeover() {
    let db = MariaDb::start();
    db.sql("CREATE TABLE leader_exec.work (token BIGINT NOT NULL)");
    let scratch = Scratch::new();
    let endpoint = Store::endpoint(&db);
    let go = scratch.path("go");
    let a = Instance::start(
        &lease_args(&endpoint, "fence"),
        &scratch.job("a", &fenced_writer(db.port, &go, "a")),
    );
    let old = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started")
        .token();
    let mut b = Instance::start(
        &lease_args(&endpoint, "fence"),
        &scratch.job("b", &fenced_writer(db.port, &go, "b")),
    );
    assert!(wait_for(Duration::from_secs(10), || campaigning(&b)));

    // The wrapper freezes (a VM pause, SIGSTOP): it can no longer stop its command, which runs
    // on, and b takes the row over once it has seen it unchanged for a TTL.
    let supervisor = supervisor_of(a.pid());
    a.signal(Signal::SIGSTOP);
    if let Some(s) = supervisor {
        let _ = kill(Pid::from_raw(s), Signal::SIGSTOP);
    }
    let new = scratch
        .wait_record("start", "b", TTL + Duration::from_secs(10))
        .expect("b took over")
        .token();
    assert!(new > old, "{old} then {new}");

    // Both commands write now: only the current leader's write commits.
    std::fs::write(&go, "").unwrap();
    let wrote_a = scratch
        .wait_record("wrote", "a", Duration::from_secs(10))
        .expect("a tried");
    let wrote_b = scratch
        .wait_record("wrote", "b", Duration::from_secs(10))
        .expect("b tried");
    assert_eq!(wrote_a.fields[0], "0", "{wrote_a:?}");
    assert_eq!(wrote_b.fields[0], "1", "{wrote_b:?}");
    assert_eq!(
        db.sql("SELECT token FROM leader_exec.work ORDER BY token")
            .trim(),
        new.to_string()
    );

    if let Some(s) = supervisor {
        let _ = kill(Pid::from_raw(s), Signal::SIGCONT);
    }
    a.signal(Signal::SIGCONT);
    b.signal(Signal::SIGTERM);
    let _ = b.wait(Duration::from_secs(5));
}

/// A password user on a server without TLS: the password comes from `LEADER_EXEC_PASSWORD` and
/// reaches neither a message nor the command's environment; leader-exec says once that it is
/// used without a verified certificate (`PREFERRED`), and not with the password-less user.
#[test]
fn a_password_used_without_tls_is_warned_about_once_and_never_shown_or_handed_on() {
    let db = MariaDb::start();
    let url = db.url(db.port);
    let (code, stdout, stderr) = Cmd::bare()
        .args(["--endpoints", &url, "--lease", "pw"])
        .args(FAST)
        .args(["--", "sh", "-c", "env; echo ran"])
        .env("LEADER_EXEC_PASSWORD", MARIADB_PASSWORD)
        .run();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ran"), "{stdout}");
    assert!(
        !stdout.contains(MARIADB_PASSWORD),
        "the command got it: {stdout}"
    );
    assert!(!stderr.contains(MARIADB_PASSWORD), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("without a verified certificate"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("ssl-mode=VERIFY_IDENTITY"), "{stderr}");

    // A wrong password: one line, naming the server, not the password.
    let (code, _, stderr) = Cmd::bare()
        .args([
            "--endpoints",
            &url,
            "--lease",
            "pw",
            "--connect-timeout",
            "2s",
        ])
        .args(FAST)
        .args(["--", "echo", "ran"])
        .env("LEADER_EXEC_PASSWORD", "wrong-pass-9")
        .run();
    assert_eq!(code, 125, "{stderr}");
    let refusal: Vec<&str> = stderr.lines().filter(|l| !l.contains(" WARN ")).collect();
    assert_eq!(refusal.len(), 1, "{stderr}");
    assert!(!stderr.contains("wrong-pass-9"), "{stderr}");

    let (code, _, stderr) = Cmd::bare()
        .args(["--endpoints", &Store::endpoint(&db), "--lease", "pw"])
        .args(FAST)
        .args(["--", "true"])
        .run();
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("without TLS"), "{stderr}");
}
