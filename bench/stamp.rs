//! The benchmark's child process: it reports its own timestamps so that every figure is measured
//! from outside the tools under test.
//!
//!     stamp NAME exit    record `start`, then `end`, and exit 0
//!     stamp NAME hold    record `start`, then wait: SIGUSR1 records `end` and exits 0 (the job
//!                        finished); TERM, INT, HUP, QUIT or USR2 records `signal` and exits 128+N
//!
//! Records are appended to the file named by $BENCH_HISTORY, one `write` each:
//!
//!     start NAME PID TOKEN T        TOKEN: $LEADER_TOKEN, else $ETCD_LOCK_REV (etcdctl lock)
//!     end NAME T
//!     signal NAME SIGNO T
//!
//! T is CLOCK_MONOTONIC in nanoseconds, the clock of Python's `time.monotonic_ns()`. The start
//! record is the child's first output. Standard library only, so `rustc -O` builds it.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::raw::{c_int, c_long};

#[repr(C)]
struct Timespec {
    tv_sec: c_long,
    tv_nsec: c_long,
}

/// glibc's `sigset_t`: 1024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

const CLOCK_MONOTONIC: c_int = 1;
const SIG_BLOCK: c_int = 0;
const SIGHUP: c_int = 1;
const SIGINT: c_int = 2;
const SIGQUIT: c_int = 3;
const SIGUSR1: c_int = 10;
const SIGUSR2: c_int = 12;
const SIGTERM: c_int = 15;

unsafe extern "C" {
    fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int;
    fn sigemptyset(set: *mut SigSet) -> c_int;
    fn sigaddset(set: *mut SigSet, signo: c_int) -> c_int;
    fn sigprocmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
    fn sigwait(set: *const SigSet, signo: *mut c_int) -> c_int;
}

fn now() -> u128 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

fn record(line: String) {
    let path = std::env::var_os("BENCH_HISTORY").expect("BENCH_HISTORY is set");
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("open the history file");
    file.write_all(line.as_bytes()).expect("write the history");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (name, mode) = match &args[..] {
        [_, name, mode] => (name.as_str(), mode.as_str()),
        _ => {
            eprintln!("usage: stamp NAME exit|hold");
            std::process::exit(2);
        }
    };
    let mut set = SigSet([0; 16]);
    // SAFETY: plain libc calls on a valid sigset.
    unsafe {
        sigemptyset(&mut set);
        for signo in [SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM] {
            sigaddset(&mut set, signo);
        }
        // Blocked before the start record: a signal sent after it is always recorded.
        sigprocmask(SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let token = std::env::var("LEADER_TOKEN")
        .or_else(|_| std::env::var("ETCD_LOCK_REV"))
        .unwrap_or_else(|_| "-".into());
    let start = now();
    record(format!(
        "start {name} {} {token} {start}\n",
        std::process::id()
    ));
    match mode {
        "exit" => record(format!("end {name} {}\n", now())),
        "hold" => {
            let mut signo: c_int = 0;
            // SAFETY: valid sigset and out-pointer.
            unsafe { sigwait(&set, &mut signo) };
            let at = now();
            if signo == SIGUSR1 {
                record(format!("end {name} {at}\n"));
            } else {
                record(format!("signal {name} {signo} {at}\n"));
                std::process::exit(128 + signo);
            }
        }
        other => {
            eprintln!("stamp: unknown mode {other}");
            std::process::exit(2);
        }
    }
}
