//! `--health-cmd`: a check run with `/bin/sh -c` every `--health-interval`, on a thread of its
//! own, in a process group of its own, killed (the whole group) at `--health-timeout`. Its
//! output goes to /dev/null. The runtime thread only reads the verdict from memory
//! ([`Checker`]): a check that hangs, is killed or floods its output can delay nothing on the
//! safety path, neither a renewal nor a step-down.
//!
//! An instance is healthy once a check has passed and until `--health-retries` checks in a row
//! have failed; one that has not passed yet is not healthy, so the first campaign waits for a
//! pass and an unhealthy host never wins.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::watch;

use super::{Event, Reporter};
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

/// The check running now, if any, and whether checks are over (leader-exec is exiting).
/// Spawning, reaping and killing all happen under this lock, so a group id read here always
/// names a check's group whose leader is not yet reaped (its pid cannot be reused).
struct Running {
    pid: Option<i32>,
    stopped: bool,
}

static RUNNING: std::sync::Mutex<Running> = std::sync::Mutex::new(Running {
    pid: None,
    stopped: false,
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

/// leader-exec is exiting: the check running now is killed with its group, and no other
/// starts, so that no check outlives leader-exec.
pub fn stop_checks() {
    let mut running = running();
    running.stopped = true;
    if let Some(pid) = running.pid.take() {
        kill_group(pid);
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

/// Runs the check once, bounded by its timeout.
fn check_once(check: &HealthCheck) -> Outcome {
    let mut slot = running();
    if slot.stopped {
        return Outcome::Failed("leader-exec is exiting".into());
    }
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&check.command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    crate::process::environment::without_credentials(&mut command);
    let child = command.spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return Outcome::Failed(format!("cannot run /bin/sh: {e}")),
    };
    let pid = child.id() as i32;
    slot.pid = Some(pid);
    drop(slot);
    let deadline = Instant::now() + check.timeout;
    loop {
        let mut slot = running();
        let outcome = match child.try_wait() {
            Ok(Some(status)) if status.success() => Outcome::Passed,
            Ok(Some(status)) => Outcome::Failed(status.to_string()),
            // Killed by `stop_checks` meanwhile.
            Ok(None) if slot.stopped => Outcome::Failed("leader-exec is exiting".into()),
            Ok(None) if Instant::now() >= deadline => {
                // Before reaping: the unreaped shell keeps its pid, so the group id still
                // names this check's group and no other.
                kill_group(pid);
                let _ = child.wait();
                Outcome::Failed(format!(
                    "no answer within --health-timeout {}; its process group was killed",
                    humantime::format_duration(check.timeout)
                ))
            }
            Ok(None) => {
                drop(slot);
                std::thread::sleep(POLL);
                continue;
            }
            // Reaped by someone else (leader-exec reaps orphans once its supervisor is gone).
            Err(e) => Outcome::Failed(format!("lost track of the check: {e}")),
        };
        slot.pid = None;
        return outcome;
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
