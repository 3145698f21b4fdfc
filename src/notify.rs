//! systemd readiness and status (sd_notify), when NOTIFY_SOCKET is set; a no-op otherwise.
//!
//! `READY=1` is sent once leader-exec has joined the election (a unit with `Type=notify` is then
//! "started", whether it leads or stands by); `STATUS=` tells `systemctl status` what it is doing.

use sd_notify::NotifyState;

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}
