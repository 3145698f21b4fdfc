//! The supervisor's socket, one line per message, fields separated by tabs:
//! - leader-exec → supervisor: `spawn\tK=V\tK=V…` (environment added for the child), `signal\tN`
//! - supervisor → leader-exec: `started\tPID`, `failed\tERRNO\tMESSAGE`, `exited\tPGID\tCODE`,
//!   `killed\tPGID\tSIGNAL`, `empty\tPGID` (that process group has no process left); PGID is the
//!   command's pid, which names its group
//!
//! What leader-exec reads from it is an [`Event`].

use nix::errno::Errno;

use crate::exit::{self, ChildStatus};

/// What the supervisor reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The command is running with this pid (which is also its process group id).
    Started(i32),
    /// The command could not be started.
    SpawnFailed { errno: i32, message: String },
    /// The command itself ended; other processes of its group may still run.
    Exited(ChildStatus),
    /// No process of the command's group is left.
    GroupEmpty,
}

/// The exit code for a command that could not be started: 127 when it does not exist, else 126.
pub fn spawn_failure_code(errno: i32) -> u8 {
    if errno == Errno::ENOENT as i32 {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    }
}

/// An event, and the process group it is about (for `exited`, `killed` and `empty`).
pub(super) fn parse_event(line: &str) -> Option<(Option<i32>, Event)> {
    let mut fields = line.split('\t');
    let kind = fields.next()?;
    let mut group = || -> Option<i32> { fields.next()?.parse().ok() };
    let parsed = match kind {
        "started" => (None, Event::Started(group()?)),
        "failed" => {
            let errno = group()?;
            let message = fields.next().unwrap_or("").to_owned();
            (None, Event::SpawnFailed { errno, message })
        }
        "exited" => {
            let about = group()?;
            let code = fields.next()?.parse().ok()?;
            (Some(about), Event::Exited(ChildStatus::Exited(code)))
        }
        "killed" => {
            let about = group()?;
            let signal = fields.next()?.parse().ok()?;
            (Some(about), Event::Exited(ChildStatus::Signaled(signal)))
        }
        "empty" => (Some(group()?), Event::GroupEmpty),
        _ => return None,
    };
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse() {
        assert_eq!(parse_event("started\t42"), Some((None, Event::Started(42))));
        assert_eq!(
            parse_event("exited\t42\t7"),
            Some((Some(42), Event::Exited(ChildStatus::Exited(7))))
        );
        assert_eq!(
            parse_event("killed\t42\t15"),
            Some((Some(42), Event::Exited(ChildStatus::Signaled(15))))
        );
        assert_eq!(
            parse_event("empty\t42"),
            Some((Some(42), Event::GroupEmpty))
        );
        assert_eq!(
            parse_event("failed\t2\tNo such file"),
            Some((
                None,
                Event::SpawnFailed {
                    errno: 2,
                    message: "No such file".into()
                }
            ))
        );
        assert_eq!(parse_event("empty"), None);
        assert_eq!(parse_event("nonsense"), None);
    }

    #[test]
    fn spawn_failures_map_to_126_and_127() {
        assert_eq!(spawn_failure_code(Errno::ENOENT as i32), 127);
        assert_eq!(spawn_failure_code(Errno::EACCES as i32), 126);
        assert_eq!(spawn_failure_code(Errno::ENOEXEC as i32), 126);
    }
}
