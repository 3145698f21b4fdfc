//! The command's environment: what leader-exec consumed is taken out of it.

/// Takes out of `command`'s environment what leader-exec consumed: the command (and a
/// `--health-cmd` check) gets no credential of leader-exec's.
pub fn without_credentials(command: &mut std::process::Command) {
    // What leader-exec consumed is not the command's: the store password, and systemd's
    // notification socket (systemd's own convention; the notifications are leader-exec's).
    command.env_remove("LEADER_EXEC_PASSWORD");
    command.env_remove(crate::notify::NOTIFY_SOCKET);
    // `ETCDCTL_USER=NAME:PASS` (read as `--user`) keeps its user name only, as an endpoint
    // keeps its host: which user is no secret, its password is leader-exec's. A value that
    // is not text cannot be split and goes.
    match std::env::var("ETCDCTL_USER") {
        Ok(value) => {
            if let Some((name, _)) = value.split_once(':') {
                command.env("ETCDCTL_USER", name);
            }
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            command.env_remove("ETCDCTL_USER");
        }
        Err(std::env::VarError::NotPresent) => {}
    }
    // The endpoints stay (the command may run `leader-exec check`), without any password
    // they hold: the command gets no credential of leader-exec's. A value that is not text
    // cannot be redacted and goes.
    for name in ["LEADER_EXEC_ENDPOINTS", "ETCDCTL_ENDPOINTS"] {
        match std::env::var(name) {
            Ok(value) => {
                let shown = crate::redact::redact_password(&value);
                if shown != value {
                    command.env(name, shown);
                }
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                command.env_remove(name);
            }
            Err(std::env::VarError::NotPresent) => {}
        }
    }
}
