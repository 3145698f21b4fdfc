//! Finding the command on PATH before anything else happens.

use std::ffi::OsString;
use std::path::Path;

use crate::exit::{self, Failure};

/// Looks the command up before anything else happens, so that a typo costs no election.
/// The real exec can still fail later (the file changed); that is reported the same way.
pub fn check_command(command: &OsString) -> Result<(), Failure> {
    let shown = command.to_string_lossy();
    let name = Path::new(command);
    let executable = |path: &Path| {
        path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    if command.is_empty() {
        return Err(Failure::new(exit::NOT_FOUND, "empty command name"));
    }
    if command.as_encoded_bytes().contains(&b'/') {
        if !name.exists() {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!("{shown}: no such file or directory"),
            ));
        }
        if !executable(name) {
            return Err(Failure::new(
                exit::CANNOT_EXECUTE,
                format!("{shown}: permission denied (not an executable file)"),
            ));
        }
        return Ok(());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unexecutable = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(name);
        if executable(&candidate) {
            return Ok(());
        }
        found_unexecutable |= candidate.exists() && !candidate.is_dir();
    }
    if found_unexecutable {
        Err(Failure::new(
            exit::CANNOT_EXECUTE,
            format!("{shown}: permission denied"),
        ))
    } else {
        Err(Failure::new(
            exit::NOT_FOUND,
            format!("{shown}: command not found"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_looked_up_on_path() {
        assert!(check_command(&"sh".into()).is_ok());
        assert!(check_command(&"/bin/sh".into()).is_ok());
        assert_eq!(
            check_command(&"no-such-command-xyz".into())
                .unwrap_err()
                .code,
            127
        );
        assert_eq!(
            check_command(&"/no/such/file".into()).unwrap_err().code,
            127
        );
        assert_eq!(check_command(&"/etc/passwd".into()).unwrap_err().code, 126);
        assert_eq!(check_command(&"/tmp".into()).unwrap_err().code, 126);
    }
}
