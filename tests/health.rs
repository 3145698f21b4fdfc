//! `--health-cmd`, on every store: an instance whose check fails never stands in line, a leader
//! whose check fails hands over as on `resign` (its whole group gone before the next command
//! starts), and a check that hangs while the store is cut off does not delay the step-down.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::harness::*;

fn health_args<'a>(endpoint: &'a str, lease: &'a str, check: &'a str) -> Vec<&'a str> {
    let mut args = lease_args(endpoint, lease);
    args.extend([
        "--health-cmd",
        check,
        "--health-interval",
        "200ms",
        "--health-timeout",
        "1s",
        "--health-retries",
        "2",
    ]);
    args
}

pub fn an_unhealthy_instance_never_stands_in_line_and_a_failing_leader_hands_over<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let sick = path_str(&scratch.path("a-sick"));
    let a_check = format!("test ! -e '{sick}'");
    let mut a = Instance::start(
        &health_args(&endpoint, "healthy", &a_check),
        &scratch.job("a", &stubborn("a")),
    );
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let grandchild = scratch.grandchild("a");
    let b_sick = path_str(&scratch.path("b-sick"));
    let b_check = format!("test ! -e '{b_sick}'");
    let mut b = Instance::start(
        &health_args(&endpoint, "healthy", &b_check),
        &scratch.job("b", "true"),
    );
    let c_file = path_str(&scratch.path("c.prom"));
    let mut c_args = health_args(&endpoint, "healthy", "false");
    c_args.extend(["--metrics-file", &c_file]);
    let mut c = Instance::start(&c_args, &scratch.job("c", "true"));
    assert!(
        wait_for(Duration::from_secs(10), || store.claims("healthy") == 2),
        "{}: b did not join the line: {}",
        S::NAME,
        b.stderr()
    );
    // c's check never passes: it never joins the line.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(store.claims("healthy"), 2, "{}", c.stderr());
    assert!(c.running());
    let text = std::fs::read_to_string(scratch.path("c.prom")).unwrap();
    assert_eq!(
        crate::metrics::sample(&text, "leader_exec_healthy", ""),
        Some(0.0),
        "{text}"
    );
    // b leaves the line while its check fails, and rejoins once it passes.
    std::fs::write(&b_sick, "").unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || store.claims("healthy") == 1),
        "{}: b stayed in line: {}",
        S::NAME,
        b.stderr()
    );
    std::fs::remove_file(&b_sick).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || store.claims("healthy") == 2),
        "{}: b did not rejoin: {}",
        S::NAME,
        b.stderr()
    );

    std::fs::write(&sick, "").unwrap();
    // Two failures 200 ms apart, then TERM (ignored), SIGKILL --kill-after (1 s) later.
    assert_eq!(a.wait(Duration::from_secs(15)), Some(75), "{}", a.stderr());
    assert!(!alive(a_start.pid()) && !alive(grandchild));
    assert!(a.stderr().contains("health check failed"), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(b_start.token() > a_start.token());
    assert_one_at_a_time(&scratch.history());

    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_none());
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait(Duration::from_secs(5)), Some(143), "{}", c.stderr());
    assert!(
        wait_for(Duration::from_secs(5), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn a_hanging_check_does_not_delay_the_step_down_when_the_store_is_cut_off<S: Store>() {
    let store = S::start();
    let proxy = Proxy::start(store.addr());
    let scratch = Scratch::new();
    let proxied = store.endpoint_via(&proxy);
    let hang = path_str(&scratch.path("hang"));
    let checks = scratch.path("checks");
    // Hangs (past its 5 s timeout) once `hang` exists, its pid and its child's recorded.
    let check = format!(
        "if [ -e '{hang}' ]; then sleep 1000 & echo \"$$ $!\" >> '{}'; wait; fi",
        checks.display()
    );
    let mut args = lease_args(&proxied, "hung");
    args.extend([
        "--health-cmd",
        &check,
        "--health-interval",
        "100ms",
        "--health-timeout",
        "5s",
    ]);
    let job = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;
    let mut a = Instance::start(&args, &scratch.job("a", job));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    std::fs::write(&hang, "").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cut = now_ns();
    proxy.cut();
    let term = scratch
        .wait_record("term", "a", Duration::from_secs(10))
        .expect("a's command got no signal");
    // As without a check: at the renew deadline (1.5 s), with slack for load.
    let after = (term.time() - cut) / 1_000_000;
    assert!(
        after <= (RENEW_DEADLINE.as_millis() + 1000),
        "{}: stepped down {after} ms after the cut",
        S::NAME
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    // The hanging check does not outlive leader-exec.
    let pids: Vec<i32> = std::fs::read_to_string(&checks)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(!pids.is_empty());
    assert!(
        wait_for(Duration::from_secs(2), || pids.iter().all(|&p| !alive(p))),
        "{}: a health check outlived leader-exec: {pids:?}",
        S::NAME
    );
}

/// Runs until TERM.
const UNTIL_TERM: &str = r#"trap 'exit 0' TERM
while :; do sleep 0.05; done"#;

/// `status` for `lease` as text.
fn status_text(endpoint: &str, lease: &str) -> String {
    Cmd::at(endpoint).args(["status", "--lease", lease]).run().1
}

pub fn status_shows_the_leaders_health<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    // A leader without --health-cmd: `health` is null. (A scratch of its own: its job runs
    // beside the other lease's.)
    let unchecked_scratch = Scratch::new();
    let mut n = Instance::start(
        &lease_args(&endpoint, "unchecked"),
        &unchecked_scratch.job("n", UNTIL_TERM),
    );
    let n_start = unchecked_scratch
        .wait_record("start", "n", Duration::from_secs(10))
        .expect("n started");
    assert!(
        wait_for(Duration::from_secs(10), || {
            status_json(&endpoint, "unchecked")["leader"]["command"] == "running"
        }),
        "{}: n's record never showed",
        S::NAME
    );
    let unchecked = status_json(&endpoint, "unchecked");
    assert_eq!(unchecked["leader"]["token"], n_start.token(), "{unchecked}");
    assert!(unchecked["leader"]["health"].is_null(), "{unchecked}");
    assert!(unchecked["holders"][0]["health"].is_null(), "{unchecked}");
    assert!(!status_text(&endpoint, "unchecked").contains("health:"));
    let (unchecked_watch, lines) = watch(&endpoint, "unchecked", true);
    let line: serde_json::Value = serde_json::from_str(&lines_until(&lines, |_| true)[0]).unwrap();
    assert_eq!(line["leader"]["token"], n_start.token(), "{line}");
    assert!(line["leader"]["health"].is_null(), "{line}");
    assert!(line["holders"][0]["health"].is_null(), "{line}");
    stop_watch(unchecked_watch);

    // a leads while `ok` exists; 10 failures in a row 200 ms apart (about 2 s) hand over.
    let ok = path_str(&scratch.path("ok"));
    std::fs::write(&ok, "").unwrap();
    let a_check = format!("test -e '{ok}'");
    let mut args = lease_args(&endpoint, "checked");
    args.extend([
        "--health-cmd",
        &a_check,
        "--health-interval",
        "200ms",
        "--health-retries",
        "10",
    ]);
    let mut a = Instance::start(&args, &scratch.job("a", UNTIL_TERM));
    let a_start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let healthy = serde_json::json!({"healthy": true, "failures": 0, "retries": 10});
    assert!(
        wait_for(Duration::from_secs(10), || {
            status_json(&endpoint, "checked")["leader"]["health"] == healthy
        }),
        "{}: a's health never showed: {}",
        S::NAME,
        status_json(&endpoint, "checked")
    );
    let seen = status_json(&endpoint, "checked");
    assert_eq!(seen["leader"]["token"], a_start.token(), "{seen}");
    assert_eq!(seen["holders"][0]["health"], healthy, "{seen}");
    let text = status_text(&endpoint, "checked");
    assert!(text.contains("health:      healthy\n"), "{text}");
    let (checked_watch, lines) = watch(&endpoint, "checked", true);
    let first: serde_json::Value = serde_json::from_str(&lines_until(&lines, |_| true)[0]).unwrap();
    assert_eq!(first["leader"]["token"], a_start.token(), "{first}");
    assert_eq!(first["leader"]["health"], healthy, "{first}");

    // b waits in line with a check that passes.
    let mut b_args = lease_args(&endpoint, "checked");
    b_args.extend(["--health-cmd", "true", "--health-interval", "200ms"]);
    let mut b = Instance::start(&b_args, &scratch.job("b", UNTIL_TERM));
    assert!(
        wait_for(Duration::from_secs(10), || store.claims("checked") == 2),
        "{}: b did not join the line: {}",
        S::NAME,
        b.stderr()
    );

    // While a's check fails, and before it hands over, status counts the failures.
    std::fs::remove_file(&ok).unwrap();
    let mut failing = None;
    assert!(
        wait_for(Duration::from_secs(10), || {
            let seen = status_json(&endpoint, "checked");
            let leader = &seen["leader"];
            if leader["token"] == a_start.token()
                && leader["health"]["healthy"] == true
                && leader["health"]["failures"].as_u64().is_some_and(|f| f > 0)
            {
                failing = Some(seen);
                return true;
            }
            false
        }),
        "{}: no failures shown before the handover: {}",
        S::NAME,
        status_json(&endpoint, "checked")
    );
    let failing = failing.unwrap();
    assert_eq!(failing["leader"]["health"]["retries"], 10, "{failing}");
    assert_eq!(failing["holders"][0]["health"], failing["leader"]["health"]);
    assert!(scratch.wait_record("start", "b", Duration::ZERO).is_none());

    // Then a hands over, and status shows b, healthy.
    assert_eq!(a.wait(Duration::from_secs(15)), Some(75), "{}", a.stderr());
    let b_start = scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    assert!(b_start.token() > a_start.token());
    let b_healthy = serde_json::json!({"healthy": true, "failures": 0, "retries": 3});
    assert!(
        wait_for(Duration::from_secs(10), || {
            let seen = status_json(&endpoint, "checked");
            seen["leader"]["token"] == b_start.token() && seen["leader"]["health"] == b_healthy
        }),
        "{}: b's health never showed: {}",
        S::NAME,
        status_json(&endpoint, "checked")
    );
    assert_one_at_a_time(&scratch.history());
    // watch printed a line when a's health changed, before the one that names b, healthy.
    let json = |line: &str| serde_json::from_str::<serde_json::Value>(line).unwrap();
    let seen = lines_until(&lines, |line| {
        let line = json(line);
        line["leader"]["token"] == b_start.token() && line["leader"]["health"] == b_healthy
    });
    let failing_at = seen.iter().position(|line| {
        let line = json(line);
        line["leader"]["token"] == a_start.token()
            && line["leader"]["health"]["failures"]
                .as_u64()
                .is_some_and(|f| f > 0)
    });
    let b_at = seen
        .iter()
        .position(|line| json(line)["leader"]["token"] == b_start.token());
    assert!(
        failing_at.is_some() && failing_at < b_at,
        "{}: watch showed no failures before b: {seen:#?}",
        S::NAME
    );
    stop_watch(checked_watch);

    for instance in [&mut b, &mut n] {
        instance.signal(Signal::SIGTERM);
        assert!(instance.wait(Duration::from_secs(10)).is_some());
    }
}

/// `LEADER_EXEC_HEALTH_CMD`, a check's command line (which may hold a credential), reaches
/// neither the command nor the check: both see the environment without it.
#[test]
fn the_health_cmd_variable_reaches_neither_the_command_nor_the_check() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let marker = "hcSecret7";
    let check_env = scratch.path("check.env");
    let command_env = scratch.path("command.env");
    let check = format!(
        "cat /proc/self/environ > '{}' # curl -u user:{marker}",
        check_env.display()
    );
    let record = format!("cat /proc/self/environ > '{}'", command_env.display());
    let endpoint = etcd.endpoint();
    let status = leader_exec()
        .env("LEADER_EXEC_HEALTH_CMD", &check)
        .args(lease_args(&endpoint, "health-env"))
        .args(["--", "sh", "-c", &record])
        .status()
        .unwrap();
    assert!(status.success());
    for (who, path) in [("the check", &check_env), ("the command", &command_env)] {
        let environ = std::fs::read(path).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        let vars: Vec<&str> = environ.split('\0').collect();
        assert!(
            !vars
                .iter()
                .any(|v| v.starts_with("LEADER_EXEC_HEALTH_CMD="))
                && !environ.contains(marker),
            "{who} saw the check's command line: {vars:?}"
        );
    }
    let command = std::fs::read(&command_env).unwrap();
    assert!(String::from_utf8_lossy(&command).contains("LEADER_TOKEN="));
}
