//! `--health-cmd`: a check run with `/bin/sh -c` every `--health-interval`, on a thread of its
//! own, in a process group of its own, killed (the whole group) at `--health-timeout`. Its
//! output goes to /dev/null. The runtime thread only reads the verdict from memory
//! ([`Checker`]): a check that hangs, is killed or floods its output can delay nothing on the
//! safety path, neither a renewal nor a step-down.
//!
//! A check is held as `--contain` holds the command ([`Containment`]), and when it ends
//! (passed, failed or killed) what it left is killed before the next: its process group; with
//! `cgroup` a cgroup of the checks' own beside the job's (`leader-exec.PID.health`), so that
//! what left the group (`setsid`) dies too; with `pidns` a PID namespace of its own whose init
//! is the check's shell, which the kernel empties when the shell ends. The shell carries
//! PDEATHSIG=SIGKILL: should leader-exec die, it dies, and with `pidns` its namespace; with
//! `cgroup` the supervisor kills the checks' cgroup on leader-exec's death.
//!
//! An instance is healthy once a check has passed and until `--health-retries` checks in a row
//! have failed; one that has not passed yet is not healthy, so the first campaign waits for a
//! pass and an unhealthy host never wins.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, getpid, getppid};
use tokio::sync::watch;

use super::{Event, Reporter};
use crate::process::contain::{self, Cgroup, PidNamespace};
use crate::records::published::Health;

/// `--health-cmd` and its timing, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    pub command: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub retries: u32,
}

/// How long the checker sleeps between looks at a running check.
const POLL: Duration = Duration::from_millis(10);

/// How checks are held: as `--contain` holds the command (see the module comment).
#[derive(Clone, Debug)]
pub enum Containment {
    Group,
    Cgroup(Cgroup),
    Pidns,
}

/// The check running now, if any, whether checks are over (leader-exec is exiting), and how
/// they are held. Spawning, reaping and killing all happen under this lock, so a group id read
/// here always names a check's group whose leader is not yet reaped (its pid cannot be reused).
struct Running {
    pid: Option<i32>,
    stopped: bool,
    containment: Containment,
}

static RUNNING: std::sync::Mutex<Running> = std::sync::Mutex::new(Running {
    pid: None,
    stopped: false,
    containment: Containment::Group,
});

fn running() -> std::sync::MutexGuard<'static, Running> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SIGKILL to a check's whole process group (never the command's).
fn kill_group(pid: i32) {
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}

/// How checks are held from now on: set before the checker starts.
pub fn contain(containment: Containment) {
    running().containment = containment;
}

/// leader-exec is exiting: the check running now is killed with its group (with `cgroup`, with
/// the checks' cgroup, which goes; with `pidns`, the kernel empties its namespace), and no
/// other starts, so that no check outlives leader-exec.
pub fn stop_checks() {
    let mut running = running();
    running.stopped = true;
    if let Some(pid) = running.pid.take() {
        kill_group(pid);
    }
    if let Containment::Cgroup(cgroup) = &running.containment {
        cgroup.kill_and_remove(contain::EXIT_WAIT);
    }
}

/// The verdict, as the runtime thread reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub healthy: bool,
    /// Checks failed in a row.
    pub failures: u32,
}

/// The runtime thread's side: the latest verdict.
#[derive(Clone, Debug)]
pub struct Checker {
    verdict: watch::Receiver<Verdict>,
    /// `--health-retries`, for what `status` shows.
    retries: u32,
}

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed(String),
}

impl Checker {
    /// Starts the checker thread; the first check runs at once. Its verdicts are reported
    /// through `report` from that thread (emitting never waits).
    pub fn start(check: HealthCheck, report: Reporter) -> std::io::Result<Checker> {
        let (send, verdict) = watch::channel(Verdict {
            healthy: false,
            failures: 0,
        });
        let retries = check.retries;
        std::thread::Builder::new()
            .name("health-check".into())
            .spawn(move || check_forever(&check, &send, &report))?;
        Ok(Checker { verdict, retries })
    }

    /// Tests: a checker whose verdicts the test sends.
    #[cfg(test)]
    pub fn scripted(healthy: bool) -> (Checker, watch::Sender<Verdict>) {
        let (send, verdict) = watch::channel(Verdict {
            healthy,
            failures: 0,
        });
        (
            Checker {
                verdict,
                retries: 3,
            },
            send,
        )
    }

    pub fn healthy(&self) -> bool {
        self.verdict.borrow().healthy
    }

    /// The latest verdict, as a holder records it for `status`.
    pub fn published(&self) -> Health {
        let verdict = *self.verdict.borrow();
        Health {
            healthy: verdict.healthy,
            failures: verdict.failures,
            retries: self.retries,
        }
    }

    /// Resolves once a check has passed or failed (the first verdict); never, should the
    /// checker be gone.
    pub async fn decided(&self) -> Verdict {
        let mut verdict = self.verdict.clone();
        match verdict.wait_for(|v| v.healthy || v.failures > 0).await {
            Ok(v) => *v,
            Err(_) => std::future::pending().await,
        }
    }

    /// Resolves once the instance is (or is already) `healthy`; never, should the checker be
    /// gone.
    pub async fn until(&self, healthy: bool) -> Verdict {
        let mut verdict = self.verdict.clone();
        match verdict.wait_for(|v| v.healthy == healthy).await {
            Ok(v) => *v,
            Err(_) => std::future::pending().await,
        }
    }
}

/// Resolves when `checker` finds the instance unhealthy; never without a checker.
pub async fn unhealthy(checker: Option<&Checker>) -> Verdict {
    match checker {
        Some(checker) => checker.until(false).await,
        None => std::future::pending().await,
    }
}

/// What a holder records about its health: `None` without a checker.
pub fn published(checker: Option<&Checker>) -> Option<Health> {
    checker.map(Checker::published)
}

/// Resolves with the verdict once it differs from `seen` (what the holder last recorded);
/// never without a checker. Read from memory, like every verdict.
pub async fn changed(checker: Option<&Checker>, seen: Option<Health>) -> Option<Health> {
    let Some(checker) = checker else {
        return std::future::pending().await;
    };
    let mut verdict = checker.verdict.clone();
    let retries = checker.retries;
    let health = |v: &Verdict| Health {
        healthy: v.healthy,
        failures: v.failures,
        retries,
    };
    let found = match verdict.wait_for(|v| Some(health(v)) != seen).await {
        Ok(v) => health(&v),
        Err(_) => return std::future::pending().await,
    };
    Some(found)
}

fn check_forever(check: &HealthCheck, send: &watch::Sender<Verdict>, report: &Reporter) {
    let mut failures: u32 = 0;
    let mut passed_once = false;
    let mut healthy = false;
    while !send.is_closed() && !running().stopped {
        match check_once(check) {
            Outcome::Passed => {
                failures = 0;
                passed_once = true;
            }
            Outcome::Failed(why) => {
                failures = failures.saturating_add(1);
                report.emit(Event::HealthCheckFailed { failures, why });
            }
        }
        let now_healthy = passed_once && failures < check.retries;
        if now_healthy != healthy {
            if now_healthy {
                report.emit(Event::Healthy);
            } else if passed_once {
                report.emit(Event::Unhealthy { failures });
            }
        }
        healthy = now_healthy;
        report.emit(Event::HealthVerdict { healthy });
        send.send_replace(Verdict { healthy, failures });
        std::thread::sleep(check.interval);
    }
}

/// Runs the check once, bounded by its timeout; what it left is gone when this returns.
fn check_once(check: &HealthCheck) -> Outcome {
    let mut slot = running();
    if slot.stopped {
        return Outcome::Failed("leader-exec is exiting".into());
    }
    let containment = slot.containment.clone();
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&check.command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    crate::process::environment::without_credentials(&mut command);
    // Opened before the fork: between fork and exec there is only the write.
    let procs = match &containment {
        Containment::Cgroup(cgroup) => match cgroup.open_procs() {
            Ok(procs) => Some(procs),
            Err(e) => {
                return Outcome::Failed(format!("cannot enter the checks' cgroup: {e}"));
            }
        },
        Containment::Group | Containment::Pidns => None,
    };
    let pidns = matches!(containment, Containment::Pidns);
    let parent = getpid();
    // SAFETY: leader-exec has other threads: between fork and exec only system calls, and
    // errors made without allocating.
    unsafe {
        command.pre_exec(move || {
            // Dies with leader-exec (with this thread, which lives as long as checks run).
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            // Should leader-exec have died before the prctl, the signal never comes. In a PID
            // namespace of its own the parent is outside it: pid 0.
            if !pidns && getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            if let Some(procs) = &procs {
                contain::enter(procs)?;
            }
            if pidns {
                contain::init_check_namespace()?;
            }
            Ok(())
        });
    }
    // With `pidns`, this thread's next child is the init of a new PID namespace; its later
    // children are born in leader-exec's own again.
    let namespace = if pidns {
        match PidNamespace::prepare() {
            Ok(namespace) => Some(namespace),
            Err(e) => return Outcome::Failed(e),
        }
    } else {
        None
    };
    let child = command.spawn();
    let restored = namespace.map_or(Ok(()), PidNamespace::restore);
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return Outcome::Failed(format!("cannot run /bin/sh: {e}")),
    };
    let pid = child.id() as i32;
    if let Err(e) = restored {
        kill_group(pid);
        let _ = child.wait();
        return Outcome::Failed(format!(
            "--contain pidns: cannot return to leader-exec's own PID namespace: {e}"
        ));
    }
    slot.pid = Some(pid);
    drop(slot);
    let deadline = Instant::now() + check.timeout;
    loop {
        let mut slot = running();
        // Not reaped yet: until the end of what it left, its pid names its group and no other.
        let timed_out = match waitid(
            Id::Pid(Pid::from_raw(pid)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        ) {
            Ok(WaitStatus::StillAlive) if slot.stopped => {
                // Killed by `stop_checks` meanwhile.
                slot.pid = None;
                return Outcome::Failed("leader-exec is exiting".into());
            }
            Ok(WaitStatus::StillAlive) if Instant::now() >= deadline => {
                kill_group(pid);
                true
            }
            Ok(WaitStatus::StillAlive) => {
                drop(slot);
                std::thread::sleep(POLL);
                continue;
            }
            Ok(_) => false,
            // Reaped by someone else (leader-exec reaps orphans once its supervisor is gone).
            Err(e) => {
                slot.pid = None;
                return Outcome::Failed(format!("lost track of the check: {e}"));
            }
        };
        end_of_check(pid, &containment);
        let status = child.wait();
        slot.pid = None;
        return match status {
            _ if timed_out => Outcome::Failed(format!(
                "no answer within --health-timeout {}; its process group was killed",
                humantime::format_duration(check.timeout)
            )),
            Ok(status) if status.success() => Outcome::Passed,
            Ok(status) => Outcome::Failed(status.to_string()),
            Err(e) => Outcome::Failed(format!("lost track of the check: {e}")),
        };
    }
}

/// A check's shell `pid` has ended or was killed, and is not reaped yet (so that its pid still
/// names its group): what it left is SIGKILLed, its process group and, with `cgroup`, what is
/// in the checks' cgroup (with `pidns` the kernel emptied its namespace when the shell ended).
/// Bounded: a process stuck in the kernel is left after [`contain::EXIT_WAIT`]. What was killed
/// and had become leader-exec's child (it is a subreaper) is reaped, by pid: never
/// `waitpid(-1)`, which could take the supervisor's status from its handle.
fn end_of_check(pid: i32, containment: &Containment) {
    let cgroup = match containment {
        Containment::Cgroup(cgroup) => Some(cgroup),
        Containment::Group | Containment::Pidns => None,
    };
    let mut left = Vec::new();
    let start = Instant::now();
    loop {
        let members = crate::process::procfs::members_of(pid);
        let populated = cgroup.is_some_and(Cgroup::populated);
        if members.is_empty() && !populated {
            break;
        }
        left.extend(members.iter().copied().filter(|&p| p != pid));
        kill_group(pid);
        if let Some(cgroup) = cgroup {
            left.extend(cgroup.pids());
            cgroup.kill();
        }
        if start.elapsed() >= contain::EXIT_WAIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    left.sort_unstable();
    left.dedup();
    for other in left.into_iter().filter(|&p| p != pid) {
        while matches!(
            waitpid(Pid::from_raw(other), Some(WaitPidFlag::WNOHANG)),
            Err(Errno::EINTR)
        ) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str, timeout: Duration) -> HealthCheck {
        HealthCheck {
            command: command.into(),
            interval: Duration::from_millis(10),
            timeout,
            retries: 2,
        }
    }

    #[test]
    fn a_check_passes_fails_or_is_killed_at_its_timeout() {
        assert_eq!(
            check_once(&check("true", Duration::from_secs(5))),
            Outcome::Passed
        );
        assert!(matches!(
            check_once(&check("exit 3", Duration::from_secs(5))),
            Outcome::Failed(_)
        ));
        let started = Instant::now();
        let outcome = check_once(&check("sleep 30", Duration::from_millis(200)));
        assert!(matches!(outcome, Outcome::Failed(ref why) if why.contains("--health-timeout")));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
