//! ZooKeeper only: occurrence retention is enforced (expired records are deleted whatever IDs
//! later runs use) and decided by the servers' clock, never by a host's wall clock.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::*;

/// Runs one leader-exec with `--occurrence ID --occurrence-retention RETENTION`, the job named
/// `name`, with `env` added (a wall-clock shim), and returns its exit code and stderr.
fn run_occurrence(
    zk: &ZooKeeper,
    scratch: &Scratch,
    lease: &str,
    (id, retention): (&str, &str),
    name: &str,
    env: &[(&str, String)],
) -> (Option<i32>, String) {
    let endpoint = zk.endpoint();
    let mut args = lease_args(&endpoint, lease);
    args.extend(["--occurrence", id, "--occurrence-retention", retention]);
    let mut command = leader_exec();
    command
        .args(&args)
        .arg("--")
        .args(scratch.job(name, "true"));
    for (key, value) in env {
        command.env(key, value);
    }
    let mut instance = Instance::start_command(&mut command);
    let code = instance.wait(Duration::from_secs(20));
    (code, instance.stderr())
}

#[test]
fn expired_records_are_deleted_whatever_ids_later_runs_use() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let lease = "per-minute";
    let records = format!("/leader-exec/.occurrences/{lease}");
    // One record kept for an hour: each record's own retention counts, not the sweeper's.
    let (code, stderr) = run_occurrence(&zk, &scratch, lease, ("kept", "1h"), "kept", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    // Time-based IDs, one a run, each kept for a second.
    let ids = ["t1", "t2", "t3", "t4"];
    for id in ids {
        let (code, stderr) = run_occurrence(&zk, &scratch, lease, (id, "1s"), id, &[]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(scratch.wait_record("start", id, Duration::ZERO).is_some());
    }
    let last_written = Instant::now();
    let present = zk.children(&records);
    assert!(present.contains(&"t4".to_owned()), "{present:?}");
    // Past their retention; one more run with yet another ID deletes them, although no later
    // run ever reads their IDs again.
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(last_written.elapsed()));
    let (code, stderr) = run_occurrence(&zk, &scratch, lease, ("t5", "1s"), "t5", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        zk.children(&records),
        vec!["kept".to_owned(), "t5".to_owned()],
        "records past their retention stayed after a later run wrote its own; {stderr}"
    );
}

/// A shared object that moves this process's wall clock (`CLOCK_REALTIME`, `time()`,
/// `gettimeofday()`) by `LEADER_EXEC_TEST_SKEW` seconds and leaves the monotonic clock alone
/// (libfaketime also moves the timers, and leader-exec's deadlines then fire at once). It takes
/// itself out of `LD_PRELOAD` at load, so only the process it was preloaded into is skewed, not
/// the command it runs.
fn wall_clock_shim(scratch: &Scratch) -> String {
    let source = scratch.path("skew.c");
    let shim = scratch.path("skew.so");
    std::fs::write(
        &source,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static long skew;
__attribute__((constructor)) static void init(void) {
    const char *s = getenv("LEADER_EXEC_TEST_SKEW");
    skew = s ? atol(s) : 0;
    unsetenv("LD_PRELOAD");
}
int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += skew;
    return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int r = real(tv, tz);
    if (r == 0 && tv) tv->tv_sec += skew;
    return r;
}
time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"#,
    )
    .unwrap();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("a C compiler (cc) to build the wall-clock shim");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    path_str(&shim)
}

#[test]
fn a_host_whose_clock_is_ahead_does_not_run_a_done_occurrence_again() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let shim = wall_clock_shim(&scratch);
    let skewed = [
        ("LD_PRELOAD", shim.clone()),
        ("LEADER_EXEC_TEST_SKEW", "40".to_owned()),
    ];
    // The shim moves the wall clock of the process it is preloaded into, by 40 s.
    let date = Command::new("date")
        .arg("+%s")
        .envs(skewed.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let shown: u64 = String::from_utf8_lossy(&date.stdout)
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        (now + 38..=now + 42).contains(&shown),
        "the shim did not skew: {shown} vs {now}"
    );

    let lease = "nightly";
    let occurrence = ("2026-12-06", "30s");
    let (code, stderr) = run_occurrence(&zk, &scratch, lease, occurrence, "a", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(scratch.wait_record("start", "a", Duration::ZERO).is_some());
    std::thread::sleep(Duration::from_secs(5));
    // Done 5 s ago, kept 30 s: a host 40 s ahead must see it done, as the servers' clock says.
    let (code, stderr) = run_occurrence(&zk, &scratch, lease, occurrence, "b", &skewed);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        scratch.wait_record("start", "b", Duration::ZERO).is_none(),
        "the host 40 s ahead ran an occurrence done 5 s ago (retention 30 s); {stderr}"
    );
    assert!(stderr.contains("was already done"), "{stderr}");
    // Nor does that host's sweep (after writing a record of another ID) delete it.
    let (code, stderr) = run_occurrence(&zk, &scratch, lease, ("other", "30s"), "c", &skewed);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(scratch.wait_record("start", "c", Duration::ZERO).is_some());
    let records = format!("/leader-exec/.occurrences/{lease}");
    assert_eq!(
        zk.children(&records),
        vec!["2026-12-06".to_owned(), "other".to_owned()],
        "{stderr}"
    );
}
