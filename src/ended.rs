//! Why leadership ended: one answer, shared by the renewal loop (which finds a loss), the run
//! state machine (which stops the command for it) and the metrics (which count it by `reason`).
//!
//! Imports nothing from the crate: every floor above may use it.

use std::fmt;
use std::time::Duration;

/// Why leadership (or a candidacy) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// No renewal sent within `renew_deadline` before now has succeeded: no proof either way,
    /// the lease may still be ours until its TTL runs out.
    DeadlineMissed { renew_deadline: Duration },
    /// The store says the lease is gone (etcd: a renewal answered TTL <= 0; ZooKeeper: the
    /// session expired; PostgreSQL: the row no longer holds our token, or its expiry passed; or a
    /// fenced write was rejected).
    Expired,
    /// Our election key was deleted.
    KeyDeleted,
    /// TERM or INT asked leader-exec to stop.
    Signal,
    /// The command's group ended on its own.
    CommandExited,
}

/// The `reason` label of `leader_exec_step_downs_total`, in the order of [`Ended::index`].
pub const REASONS: [&str; 5] = [
    "deadline",
    "expired",
    "key_deleted",
    "signal",
    "command_exited",
];

impl Ended {
    /// Whether the store itself says the claim is gone, so that another instance may already
    /// lead: then no grace is given, SIGKILL goes first.
    pub fn certain(self) -> bool {
        matches!(self, Ended::Expired | Ended::KeyDeleted)
    }

    /// Position of this reason in [`REASONS`].
    pub fn index(self) -> usize {
        match self {
            Ended::DeadlineMissed { .. } => 0,
            Ended::Expired => 1,
            Ended::KeyDeleted => 2,
            Ended::Signal => 3,
            Ended::CommandExited => 4,
        }
    }
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::DeadlineMissed { renew_deadline } => write!(
                f,
                "no renewal succeeded within the renew deadline ({})",
                humantime::format_duration(*renew_deadline)
            ),
            Ended::Expired => f.write_str("the store reports the lease expired"),
            Ended::KeyDeleted => f.write_str("our election key was deleted"),
            Ended::Signal => f.write_str("asked to stop (TERM or INT)"),
            Ended::CommandExited => f.write_str("the command ended"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_store_that_says_so_makes_a_loss_certain() {
        let unproven = Ended::DeadlineMissed {
            renew_deadline: Duration::from_secs(10),
        };
        assert!(!unproven.certain());
        assert!(Ended::Expired.certain());
        assert!(Ended::KeyDeleted.certain());
        assert!(!Ended::Signal.certain());
        assert!(!Ended::CommandExited.certain());
    }

    #[test]
    fn labels_and_messages_stay_as_dashboards_and_logs_know_them() {
        assert_eq!(REASONS[Ended::KeyDeleted.index()], "key_deleted");
        assert_eq!(REASONS[Ended::CommandExited.index()], "command_exited");
        let missed = Ended::DeadlineMissed {
            renew_deadline: Duration::from_secs(10),
        };
        assert_eq!(REASONS[missed.index()], "deadline");
        assert_eq!(
            missed.to_string(),
            "no renewal succeeded within the renew deadline (10s)"
        );
        assert_eq!(
            Ended::Expired.to_string(),
            "the store reports the lease expired"
        );
        assert_eq!(
            Ended::KeyDeleted.to_string(),
            "our election key was deleted"
        );
    }
}
