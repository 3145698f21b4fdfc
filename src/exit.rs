//! The exit-code table, in one place: the run form's codes, then the subcommands'.
//!
//! leader-exec follows the conventions of timeout(1) and flock(1) so that service managers and
//! shell scripts can tell "the job failed" from "the wrapper failed" from "someone else leads".

use std::fmt;

/// Leadership was lost and the child was stopped (EX_TEMPFAIL): a service manager should restart us.
pub const LEADERSHIP_LOST: u8 = 75;
/// `--if-unfinished fail` refused an occurrence an earlier leader started and has no recorded
/// outcome (it died mid-run, or finished but could not record it): a human must decide whether
/// running it again is safe (distinct from 125, "misconfigured").
pub const UNFINISHED_OCCURRENCE: u8 = 76;
/// `--max-runtime` passed: the command was stopped as on TERM and the lease released. Outside
/// sysexits' 64-78 and the shell's 126-255, and used by no other outcome of leader-exec.
pub const MAX_RUNTIME: u8 = 79;
/// Not acquired: `--no-wait` found a leader, or `--wait-timeout` passed.
pub const NOT_ACQUIRED: u8 = 124;
/// leader-exec itself failed: usage or configuration error, store unreachable at start, TLS/auth error.
pub const FAILURE: u8 = 125;
/// The command exists but cannot be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

// The subcommands' own codes (besides 125 for an error of leader-exec's own).

/// `status`: a leader holds the lease.
pub const STATUS_LEADER: u8 = 0;
/// `status`: no leader.
pub const STATUS_NO_LEADER: u8 = 3;
/// `check`: the token is a current holder's.
pub const CHECK_CURRENT: u8 = 0;
/// `check`: the token is not a current holder's (or there is no holder).
pub const CHECK_STALE: u8 = 1;
/// `resign`: the leader handed over (or, with `--force`, its claim was deleted).
pub const RESIGNED: u8 = 0;
/// `resign`: `--token` is not the current leader's, or the leader changed while resigning.
pub const RESIGN_NOT_CURRENT: u8 = 1;
/// `resign`: there is no leader to resign (same as `status`).
pub const RESIGN_NO_LEADER: u8 = STATUS_NO_LEADER;
/// `resign`: the leader did not hand over within `--timeout` (timeout(1)'s code).
pub const RESIGN_TIMED_OUT: u8 = 124;
/// `release`: no slot `hold` took is held under the identity (as `status` says none: 3).
pub const RELEASE_NONE: u8 = STATUS_NO_LEADER;

/// How the child ended, as the shell reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildStatus {
    /// The child called exit(code).
    Exited(i32),
    /// The child was killed by signal N.
    Signaled(i32),
}

impl ChildStatus {
    /// The exit code leader-exec passes on: the child's own code, or 128+N for signal N.
    pub fn code(self) -> u8 {
        match self {
            ChildStatus::Exited(code) => (code & 0xff) as u8,
            ChildStatus::Signaled(signal) => (128 + signal).clamp(0, 255) as u8,
        }
    }
}

impl fmt::Display for ChildStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildStatus::Exited(code) => write!(f, "exited with status {code}"),
            ChildStatus::Signaled(signal) => {
                let name = nix::sys::signal::Signal::try_from(*signal)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown signal");
                write!(f, "killed by signal {signal} ({name})")
            }
        }
    }
}

/// An error that carries the exit code it must end the process with.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A usage or configuration error (exit 125).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(FAILURE, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The code for an error that reached the top: its own if it carries one, else 125.
pub fn code_of(error: &anyhow::Error) -> u8 {
    error
        .downcast_ref::<Failure>()
        .map(|f| f.code)
        .unwrap_or(FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_codes_follow_the_shell() {
        assert_eq!(ChildStatus::Exited(0).code(), 0);
        assert_eq!(ChildStatus::Exited(7).code(), 7);
        assert_eq!(ChildStatus::Exited(256 + 3).code(), 3);
        assert_eq!(ChildStatus::Signaled(15).code(), 143);
        assert_eq!(ChildStatus::Signaled(9).code(), 137);
    }

    #[test]
    fn failures_keep_their_code() {
        let e = anyhow::Error::new(Failure::new(NOT_FOUND, "x: command not found"));
        assert_eq!(code_of(&e), 127);
        assert_eq!(code_of(&anyhow::anyhow!("anything else")), 125);
    }
}
