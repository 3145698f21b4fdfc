//! `--contain`: with `cgroup` a process that left the command's process group (a daemon started
//! with `setsid`) is dead before the next holder's command starts; with `group` (the default) it
//! survives, the hole docs/safety.md admits. An unavailable mode is refused with 125 before the
//! store is contacted.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::*;

/// A job that starts a daemon which leaves the job's process group (`setsid`), records the
/// daemon's pid, start time (field 22 of /proc/PID/stat) and cgroup, lists it (`NAME PID START`)
/// among the processes every later job checks at its start (the `overlap` record), holds a lock
/// on `$h.lock` for as long as it lives (what a job in another PID namespace can see of it), and
/// then ends on its own.
fn daemonizing_job(scratch: &Scratch, name: &str) -> Vec<String> {
    scratch.job(
        name,
        &format!(
            r#"setsid sh -c 'echo "daemon-{name} $$ $(cut -d" " -f22 /proc/$$/stat)" >> "$pids"
                 exec 9> "$h.lock"; flock 9
                 echo "daemon {name} $$ $(cut -d" " -f22 /proc/$$/stat) $(grep ^0:: /proc/$$/cgroup | cut -c4-) $(date +%s%N)" >> "$h"
                 exec sleep 300' < /dev/null > /dev/null 2>&1 &
               while ! grep -q "^daemon {name} " "$h"; do sleep 0.01; done
               sleep 0.2"#
        ),
    )
}

/// The daemon's pid and start time, as it recorded them.
fn daemon_of(scratch: &Scratch, name: &str) -> (i32, String, String) {
    let record = scratch
        .wait_record("daemon", name, Duration::from_secs(10))
        .expect("the daemon recorded itself");
    (
        record.fields[0].parse().unwrap(),
        record.fields[1].clone(),
        record.fields[2].clone(),
    )
}

/// Whether the process `pid` that started at `start` still runs (not a zombie): a pid reused by
/// another process does not count.
fn still_runs(pid: i32, start: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(after) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Field 3 (state) is the first after `comm`; field 22 (starttime) the twentieth.
    fields[0] != "Z" && fields.get(19) == Some(&start)
}

/// Where leader-exec with `pid`, run by this test process, makes its job's cgroup.
fn job_cgroup(pid: i32) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let relative = own.trim_start_matches('/');
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|mount| mount.join("cgroup.controllers").exists())
        .map(|mount| mount.join(relative).join(format!("leader-exec.{pid}")))
}

/// Two instances in turn, the first's job daemonizing; returns the daemon (pid, start time,
/// cgroup) and the first instance's pid.
fn in_turn<S: Store>(
    store: &S,
    scratch: &Scratch,
    lease: &str,
    contain: &[&str],
) -> ((i32, String, String), i32) {
    let endpoint = store.endpoint();
    let mut args = lease_args(&endpoint, lease);
    args.extend_from_slice(contain);
    let mut first = Instance::start(&args, &daemonizing_job(scratch, "a"));
    let daemon = daemon_of(scratch, "a");
    // The lock's state as the second job starts: `free` once the daemon is dead.
    let mut second = Instance::start(
        &args,
        &scratch.job(
            "b",
            r#"if flock -n "$h.lock" true; then s=free; else s=held; fi
               echo "$s b $(date +%s%N)" >> "$h""#,
        ),
    );
    assert_eq!(
        first.wait(Duration::from_secs(20)),
        Some(0),
        "{}",
        first.stderr()
    );
    assert_eq!(
        second.wait(Duration::from_secs(20)),
        Some(0),
        "{}",
        second.stderr()
    );
    let a_end = scratch.wait_record("end", "a", Duration::ZERO).unwrap();
    let b_start = scratch.wait_record("start", "b", Duration::ZERO).unwrap();
    assert!(a_end.time() < b_start.time());
    (daemon, first.pid())
}

pub fn with_cgroup_a_daemonized_grandchild_is_dead_before_the_next_holder_starts<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let ((pid, start, cgroup), first) =
        in_turn(&store, &scratch, "contain-cgroup", &["--contain", "cgroup"]);
    // The daemon ran in the first instance's own cgroup, beside nothing of leader-exec's.
    assert!(
        cgroup.ends_with(&format!("/leader-exec.{first}")),
        "the daemon's cgroup: {cgroup}"
    );
    // The second job looked at the daemon's pid as it started and found it dead or a zombie.
    let overlaps: Vec<Record> = scratch
        .history()
        .into_iter()
        .filter(|r| r.kind == "overlap")
        .collect();
    assert!(
        overlaps.is_empty(),
        "a process of the first job ran when the second started: {overlaps:?}"
    );
    assert!(
        !still_runs(pid, &start),
        "the daemon {pid} outlived its job"
    );
    // leader-exec removed the job's cgroup on its way out.
    let dir = job_cgroup(first).expect("a cgroup v2 hierarchy");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

pub fn with_group_a_daemonized_grandchild_survives_as_documented<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let ((pid, start, _), _) = in_turn(&store, &scratch, "contain-group", &[]);
    let survived = still_runs(pid, &start);
    // Cleanup first, by pid and start time, so that a failing assertion leaves nothing running.
    if survived {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    assert!(
        survived,
        "the daemon {pid} died: the documented hole of --contain group is gone, update docs/safety.md"
    );
    // The second job saw it running as it started.
    let overlap = scratch.wait_record("overlap", "b", Duration::ZERO);
    assert_eq!(
        overlap.map(|r| r.fields[0].parse::<i32>().unwrap()),
        Some(pid)
    );
}

pub fn with_cgroup_term_kills_a_daemonized_grandchild_before_leader_exec_exits<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut args = lease_args(&endpoint, "contain-term");
    args.extend_from_slice(&["--contain", "cgroup"]);
    let job = scratch.job(
        "a",
        r#"setsid sh -c 'echo "daemon a $$ $(cut -d" " -f22 /proc/$$/stat) x $(date +%s%N)" >> "$h"
             exec sleep 300' < /dev/null > /dev/null 2>&1 &
           exec sleep 300"#,
    );
    let mut instance = Instance::start(&args, &job);
    let (pid, start, _) = daemon_of(&scratch, "a");
    assert!(still_runs(pid, &start));
    instance.signal(Signal::SIGTERM);
    let code = instance.wait(Duration::from_secs(10));
    let survived = still_runs(pid, &start);
    if survived {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    assert_eq!(code, Some(143), "{}", instance.stderr());
    assert!(!survived, "the daemon {pid} outlived leader-exec's TERM");
}

pub fn with_pidns_a_daemonized_grandchild_is_dead_before_the_next_holder_starts<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    // Each job has a PID namespace of its own, where pids (the `overlap` check's) mean nothing
    // to the other: the daemon's lock tells instead, looked at as the second job starts.
    let ((daemon, start, _), _) =
        in_turn(&store, &scratch, "contain-pidns", &["--contain", "pidns"]);
    // The command is pid 2 of its namespace (the supervisor is 1), and /proc is the
    // namespace's: the daemon read its start time from /proc/ITS_PID/stat.
    let a = scratch.wait_record("start", "a", Duration::ZERO).unwrap();
    assert_eq!(a.pid(), 2, "{a:?}");
    assert!(
        daemon > 2 && start.parse::<u64>().is_ok(),
        "{daemon} {start}"
    );
    assert!(
        scratch.wait_record("free", "b", Duration::ZERO).is_some(),
        "the first job's daemon held its lock when the second job started: {:?}",
        scratch.history()
    );
}

/// Host pids of `sleep ARG` processes started by the daemonizing jobs of this file.
fn sleepers(arg: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline == format!("sleep\0{arg}\0").as_bytes() {
            found.push(pid);
        }
    }
    found
}

pub fn with_pidns_leader_exec_and_its_supervisor_killed_together_leave_nothing_running<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut args = lease_args(&endpoint, "contain-pidns-kill");
    args.extend_from_slice(&["--contain", "pidns"]);
    // A grandchild in the group, a daemon out of it and the command, each with an argument of
    // its own (this test runs for every store at once) so that the host's /proc finds them.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let args_of: Vec<String> = (1..=3)
        .map(|i| (1_000_000_000u64 * i + u64::from(nanos)).to_string())
        .collect();
    let job = scratch.job(
        "a",
        &format!(
            r#"sleep {} &
               setsid sleep {} < /dev/null > /dev/null 2>&1 &
               echo "ready a $(date +%s%N)" >> "$h"
               exec sleep {}"#,
            args_of[0], args_of[1], args_of[2]
        ),
    );
    let mut instance = Instance::start(&args, &job);
    scratch
        .wait_record("ready", "a", Duration::from_secs(10))
        .expect("the job started");
    assert!(wait_for(Duration::from_secs(2), || {
        args_of.iter().all(|a| sleepers(a).len() == 1)
    }));
    let supervisor =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", instance.pid()))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse::<i32>().unwrap())
            .find(|&p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default()
                    == "lx-supervisor\n"
            })
            .expect("the supervisor");
    // Both at once, as `kill -9 PID1 PID2` does.
    instance.signal(Signal::SIGKILL);
    let _ = kill(Pid::from_raw(supervisor), Signal::SIGKILL);
    let gone = wait_for(Duration::from_secs(1), || {
        args_of.iter().all(|a| sleepers(a).is_empty())
    });
    let left: Vec<i32> = args_of.iter().flat_map(|a| sleepers(a)).collect();
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    assert!(gone, "left running: {left:?}");
    assert_eq!(instance.wait(Duration::from_secs(1)), Some(-1));
}

/// A leader cut off from the store, with `--recampaign` so that it does not exit: its stop (TERM
/// to the group, which ends the command) must kill the daemon itself, while leader-exec runs on,
/// before the next holder's command starts.
fn a_lost_leadership_kills_a_daemonized_grandchild<S: Store>(mode: &str) {
    let store = S::start();
    let proxy = Proxy::start(store.addr());
    let scratch = Scratch::new();
    let lease = format!("contain-loss-{mode}");
    let proxied = store.endpoint_via(&proxy);
    let mut args = lease_args(&proxied, &lease);
    args.extend_from_slice(&["--recampaign", "--contain", mode]);
    let job = scratch.job(
        "a",
        r#"setsid sh -c 'exec 9> "$h.lock"; flock 9
             echo "daemon a $$ x x $(date +%s%N)" >> "$h"
             exec sleep 300' < /dev/null > /dev/null 2>&1 &
           exec sleep 300"#,
    );
    let mut a = Instance::start(&args, &job);
    daemon_of(&scratch, "a");
    let direct = store.endpoint();
    let mut b = Instance::start(
        &lease_args(&direct, &lease),
        &scratch.job(
            "b",
            r#"if flock -n "$h.lock" true; then s=free; else s=held; fi
               echo "$s b $(date +%s%N)" >> "$h""#,
        ),
    );
    assert!(
        wait_for(Duration::from_secs(10), || campaigning(&b)),
        "b did not join the line"
    );
    proxy.cut();
    assert_eq!(b.wait(Duration::from_secs(20)), Some(0), "{}", b.stderr());
    // The kill came from the stop, not from leader-exec's exit: it still runs (campaigning).
    assert!(a.running(), "a exited: {}", a.stderr());
    assert!(
        scratch.wait_record("free", "b", Duration::ZERO).is_some(),
        "a's daemon held its lock when b's command started: {:?}",
        scratch.history()
    );
}

pub fn with_cgroup_a_lost_leadership_kills_a_daemonized_grandchild<S: Store>() {
    a_lost_leadership_kills_a_daemonized_grandchild::<S>("cgroup");
}

pub fn with_pidns_a_lost_leadership_kills_a_daemonized_grandchild<S: Store>() {
    a_lost_leadership_kills_a_daemonized_grandchild::<S>("pidns");
}

/// As a user who may not create a cgroup or a PID namespace (nobody), `--contain cgroup` and
/// `--contain pidns` exit 125 at once with one
/// line naming what is missing, before any store is contacted: the endpoint here answers
/// nothing, and being reached would take the connect timeout and exit otherwise.
#[test]
fn an_unavailable_contain_mode_is_refused_with_125_before_the_store_is_contacted() {
    for (mode, says) in [
        ("cgroup", "--contain cgroup: cannot create a cgroup in "),
        ("pidns", "--contain pidns: cannot create a PID namespace: "),
    ] {
        refused(mode, says);
    }
}

fn refused(mode: &str, says: &str) {
    let started = Instant::now();
    let output = leader_exec_as_nobody()
        .args([
            "--endpoints",
            "http://127.0.0.1:1",
            "--lease",
            "contain-refused",
        ])
        .args(["--contain", mode, "--", "true"])
        .env_remove("LEADER_EXEC_CONTAIN")
        .stdin(Stdio::null())
        .output()
        .expect("runuser");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A `--health-cmd` check is held as the command is. Each check here leaves a background child
/// in its process group and a daemon that left it (`setsid`, holding a lock for as long as it
/// lives); when the check is over, what it left is gone: the background child in every mode,
/// the daemon with `cgroup` and `pidns` (with `group` it escapes, as the command's would, and the
/// test ends it). leader-exec has exited, and the checks' cgroup with it.
#[test]
fn a_checks_whole_tree_is_gone_when_the_check_is_done() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    for mode in ["group", "cgroup", "pidns"] {
        let scratch = Scratch::new();
        let started = path_str(&scratch.path("started"));
        let background = path_str(&scratch.path("background"));
        let daemon = path_str(&scratch.path("daemon"));
        let lock = path_str(&scratch.path("lock"));
        let shell = path_str(&scratch.path("shell"));
        // Only the first check starts them; every check passes.
        let check = format!(
            r#"echo $$ > '{shell}'
               if [ ! -e '{started}' ]; then
                 : > '{started}'
                 sleep 1000 & echo $! > '{background}'
                 setsid sh -c 'exec 9> "{lock}"; flock 9; echo $$ > "{daemon}"; exec sleep 1000' < /dev/null > /dev/null 2>&1 &
                 while [ ! -s '{daemon}' ]; do sleep 0.01; done
               fi"#
        );
        let lease = format!("check-{mode}");
        let mut args = lease_args(&endpoint, &lease);
        args.extend(["--contain", mode, "--health-cmd", &check]);
        args.extend(["--health-interval", "100ms", "--health-timeout", "5s"]);
        let mut leader = Instance::start(&args, &["true".to_owned()]);
        let pid = leader.pid();
        assert_eq!(
            leader.wait(Duration::from_secs(20)),
            Some(0),
            "{mode}: {}",
            leader.stderr()
        );
        let read_pid = |path: &str| -> i32 {
            std::fs::read_to_string(path)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let daemon = read_pid(&daemon);
        let lock_free = std::process::Command::new("flock")
            .args(["-n", &lock, "true"])
            .status()
            .unwrap()
            .success();
        if mode == "group" {
            // Its pids are the host's: the background child is dead, the daemon escaped.
            assert!(
                !alive(read_pid(&background)),
                "{mode}: the background child survived"
            );
            assert!(
                alive(daemon) && !lock_free,
                "{mode}: the daemon did not run on"
            );
            let _ = kill(Pid::from_raw(daemon), Signal::SIGKILL);
            continue;
        }
        // With pidns the pids written are the check's namespace's (its shell is the init): the
        // lock tells.
        assert!(lock_free, "{mode}: the daemon still holds its lock");
        if mode == "pidns" {
            let shell = std::fs::read_to_string(&shell).unwrap();
            assert_eq!(
                shell.trim(),
                "1",
                "{mode}: the check's shell is not its namespace's init"
            );
        }
        if mode == "cgroup" {
            assert!(
                !alive(read_pid(&background)),
                "{mode}: the background child survived"
            );
            assert!(!alive(daemon), "{mode}: the daemon survived");
            let checks = job_cgroup(pid).unwrap();
            let checks = checks.with_file_name(format!("leader-exec.{pid}.health"));
            assert!(!checks.exists(), "{mode}: {} is left", checks.display());
        }
    }
}

/// A check still running when leader-exec ends leaves nothing either: on TERM (leader-exec
/// exits) and on SIGKILL (with `cgroup` the supervisor kills the checks' cgroup, with `pidns`
/// the check's shell dies by its death signal and the kernel empties its namespace), the
/// daemon the check started with `setsid` is dead.
#[test]
fn a_check_running_when_leader_exec_ends_leaves_nothing() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    for mode in ["cgroup", "pidns"] {
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            let scratch = Scratch::new();
            let daemon = path_str(&scratch.path("daemon"));
            let lock = path_str(&scratch.path("lock"));
            let ready = scratch.path("ready");
            // Never passes: it hangs (past no timeout of this test) once its daemon runs.
            let check = format!(
                r#"setsid sh -c 'exec 9> "{lock}"; flock 9; echo $$ > "{daemon}"; exec sleep 1000' < /dev/null > /dev/null 2>&1 &
                   while [ ! -s '{daemon}' ]; do sleep 0.01; done
                   : > '{}'
                   sleep 1000"#,
                ready.display()
            );
            let lease = format!("ends-{mode}");
            let mut args = lease_args(&endpoint, &lease);
            args.extend(["--contain", mode, "--health-cmd", &check]);
            args.extend(["--health-timeout", "60s"]);
            let mut leader = Instance::start(&args, &["true".to_owned()]);
            let pid = leader.pid();
            assert!(
                wait_for(Duration::from_secs(10), || ready.exists()),
                "{mode}: the check did not start its daemon: {}",
                leader.stderr()
            );
            leader.signal(signal);
            assert!(
                leader.wait(Duration::from_secs(10)).is_some(),
                "{mode} {signal}: leader-exec did not exit"
            );
            let lock_free = || {
                std::process::Command::new("flock")
                    .args(["-n", &lock, "true"])
                    .status()
                    .unwrap()
                    .success()
            };
            assert!(
                wait_for(Duration::from_secs(3), lock_free),
                "{mode} {signal}: the check's daemon outlived leader-exec"
            );
            if mode == "cgroup" {
                let checks = job_cgroup(pid).unwrap();
                let checks = checks.with_file_name(format!("leader-exec.{pid}.health"));
                assert!(
                    wait_for(Duration::from_secs(3), || !checks.exists()),
                    "{mode} {signal}: {} is left",
                    checks.display()
                );
            }
        }
    }
}
