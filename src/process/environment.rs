//! The environment: what leader-exec consumed is taken out of the command's, and the secrets out
//! of leader-exec's own.
//!
//! Three readers could see a credential leader-exec was given in its environment: the command
//! (and a `--health-cmd` check), which inherit the environment; any process of the same user,
//! through `/proc/PID/environ` and `/proc/PID/mem` of leader-exec and of its supervisor (a fork,
//! which holds the same environment); and root (or a core dump). [`keep_private`] shuts out the
//! second, [`without_credentials`] the first, and [`scrub_own`] takes the secrets out of the
//! environment block `/proc/PID/environ` shows even to root, once they are read. All three work
//! from the one list, [`CONSUMED`].

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// What the command gets of a variable leader-exec consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// Nothing: a secret, or leader-exec's own configuration that may hold one (a check's
    /// command line: `curl -u user:PASS …`). Scrubbed from leader-exec's own environment too
    /// once it is read.
    Removed,
    /// Nothing, but leader-exec keeps it: its own channel (systemd's `NOTIFY_SOCKET`, read
    /// after the supervisor's fork).
    Own,
    /// `NAME:PASS` as `NAME`: which user is no secret, its password is leader-exec's.
    UserName,
    /// The endpoints without any password they hold, so that `leader-exec check` in the command
    /// finds the same store.
    WithoutPassword,
}

/// Every variable the command does not get as leader-exec was given it (docs/security.md,
/// "Credentials and the command's environment", is the table of the same list).
const CONSUMED: [(&str, Rule); 6] = [
    ("LEADER_EXEC_PASSWORD", Rule::Removed),
    ("LEADER_EXEC_HEALTH_CMD", Rule::Removed),
    (crate::notify::NOTIFY_SOCKET, Rule::Own),
    ("ETCDCTL_USER", Rule::UserName),
    ("LEADER_EXEC_ENDPOINTS", Rule::WithoutPassword),
    ("ETCDCTL_ENDPOINTS", Rule::WithoutPassword),
];

/// What the command gets of `value` under `rule`: `None` for nothing. A value that is not text
/// cannot be split or redacted, and goes.
fn given(rule: Rule, value: &OsStr) -> Option<OsString> {
    match rule {
        Rule::Removed | Rule::Own => None,
        Rule::UserName => {
            let value = value.to_str()?;
            Some(value.split_once(':').map_or(value, |(name, _)| name).into())
        }
        Rule::WithoutPassword => Some(crate::redact::redact_password(value.to_str()?).into()),
    }
}

/// Takes out of `command`'s environment what leader-exec consumed: the command (and a
/// `--health-cmd` check) gets no credential of leader-exec's.
pub fn without_credentials(command: &mut std::process::Command) {
    for (name, rule) in CONSUMED {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        match given(rule, &value) {
            None => {
                command.env_remove(name);
            }
            Some(shown) if shown != value => {
                command.env(name, shown);
            }
            Some(_) => {}
        }
    }
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0), before anything is read from the
/// environment, a file or the command line: `/proc/PID/environ`, `mem`, `fd/` and the rest
/// that show a process's memory then belong to root, so that a process of the same user (the
/// command among them) cannot read the credentials leader-exec holds, and no core dump is
/// written. The supervisor's fork inherits it. A program started with execve (the command, a
/// check) is dumpable again as usual.
pub fn keep_private() {
    // It fails only on an argument the kernel does not know; nothing to do then.
    let _ = nix::sys::prctl::set_dumpable(false);
}

unsafe extern "C" {
    static mut environ: *mut *mut std::ffi::c_char;
}

/// Takes the secrets out of leader-exec's own environment block, once the settings are read:
/// each variable of [`CONSUMED`] but leader-exec's own channel is overwritten in place with what
/// the command gets of it (NUL bytes after it), or with NULs and removed when the command gets
/// nothing. The bytes are overwritten, not only unlinked, because `/proc/PID/environ` shows
/// the block the process started with, whatever `environ` points to later. The command, forked
/// after, inherits the scrubbed environment ([`without_credentials`] then finds nothing left
/// to take).
///
/// # Safety
/// The process must have exactly one thread (it changes the environment).
pub unsafe fn scrub_own() {
    for (name, rule) in CONSUMED {
        if rule == Rule::Own {
            continue;
        }
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let shown = given(rule, &value);
        if shown.as_ref() == Some(&value) {
            continue;
        }
        let fits = shown.as_ref().is_none_or(|s| s.len() <= value.len());
        // SAFETY: single-threaded, per this function's contract.
        unsafe { overwrite(name, fits.then_some(shown.as_deref()).flatten()) };
        // SAFETY: as above.
        unsafe {
            match shown {
                Some(shown) if !fits => std::env::set_var(name, shown),
                Some(_) => {}
                None => std::env::remove_var(name),
            }
        }
    }
}

/// Overwrites the value of `NAME=` in the environment block in place: with `shown` (which is
/// not longer) and NULs after it, or with NULs only.
///
/// # Safety
/// Single-threaded; nothing may hold a pointer into the environment.
unsafe fn overwrite(name: &str, shown: Option<&OsStr>) {
    let prefix = OsString::from_vec([name.as_bytes(), b"="].concat());
    // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated strings,
    // read and changed by this thread alone (per the contract); each string is writable (the
    // initial stack, or the C library's own copies).
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = std::ffi::CStr::from_ptr(*entry).to_bytes();
            if text.starts_with(prefix.as_bytes()) {
                let value = (*entry).add(prefix.len()).cast::<u8>();
                let length = text.len() - prefix.len();
                std::ptr::write_bytes(value, 0, length);
                if let Some(shown) = shown {
                    let shown = shown.as_bytes();
                    std::ptr::copy_nonoverlapping(shown.as_ptr(), value, shown.len().min(length));
                }
            }
            entry = entry.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_gets_user_names_and_endpoints_without_passwords() {
        let given = |rule, value: &str| given(rule, OsStr::new(value));
        assert_eq!(given(Rule::Removed, "pw"), None);
        assert_eq!(given(Rule::Own, "/run/notify"), None);
        assert_eq!(given(Rule::UserName, "root:pw:x"), Some("root".into()));
        assert_eq!(given(Rule::UserName, "root"), Some("root".into()));
        assert_eq!(
            given(Rule::WithoutPassword, "http://u:pw@h:2379"),
            Some("http://u@h:2379".into())
        );
        let not_text = OsStr::from_bytes(b"root:\xff");
        assert_eq!(super::given(Rule::UserName, not_text), None);
    }
}
