//! systemd readiness and status (sd_notify), when NOTIFY_SOCKET is set; a no-op otherwise.
//!
//! `READY=1` is sent once leader-exec has joined the election (a unit with `Type=notify` is then
//! "started", whether it leads or stands by); `STATUS=` tells `systemctl status` what it is doing.
//!
//! Sending never blocks: a datagram socket blocks when the receiver's queue is full (a stalled
//! service manager), and these calls sit on the path of the step-down. The socket is
//! non-blocking and a message that cannot be sent at once is dropped. Both forms of
//! NOTIFY_SOCKET are understood: a path, and `@name` for an abstract socket, as sd_notify(3)
//! describes. NOTIFY_SOCKET is read once, at start, and is not passed on to the command (systemd's
//! own convention: the notifications are leader-exec's, not the command's).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::OnceLock;

/// The variable systemd sets for `Type=notify` units.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

fn target() -> Option<&'static (UnixDatagram, SocketAddr)> {
    static TARGET: OnceLock<Option<(UnixDatagram, SocketAddr)>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let name = std::env::var_os(NOTIFY_SOCKET)?;
            let address = parse_address(name.as_encoded_bytes())?;
            let socket = UnixDatagram::unbound().ok()?;
            socket.set_nonblocking(true).ok()?;
            Some((socket, address))
        })
        .as_ref()
}

/// `/path` or `@abstract-name`.
fn parse_address(name: &[u8]) -> Option<SocketAddr> {
    match name {
        [] => None,
        [b'@', abstract_name @ ..] => SocketAddr::from_abstract_name(abstract_name).ok(),
        path => {
            SocketAddr::from_pathname(std::path::Path::new(std::ffi::OsStr::from_bytes(path))).ok()
        }
    }
}

/// Reads NOTIFY_SOCKET now, so that later sends do not depend on the environment.
pub fn init() {
    let _ = target();
}

pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}\n", one_line(status)));
}

pub fn status(status: &str) {
    send(&format!("STATUS={}\n", one_line(status)));
}

/// sd_notify_barrier(3): sends `BARRIER=1` with the write end of a pipe and waits, at most
/// `limit`, until the service manager closes it — by then it has processed every message sent
/// before. Used before exiting right after `READY=1` (a `--no-wait` loser, a `--wait-timeout`
/// that passed): systemd attributes a notification to its unit by the sender's pid, and one from
/// a process that has already exited may be dropped, which `Type=notify` would count as a
/// start that never became ready. Only on exit paths: it blocks for up to `limit`.
pub fn barrier(limit: std::time::Duration) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
    use std::os::fd::{AsFd, AsRawFd};
    let Some((socket, address)) = target() else {
        return;
    };
    let address = match (address.as_pathname(), address.as_abstract_name()) {
        (Some(path), _) => UnixAddr::new(path),
        (None, Some(name)) => UnixAddr::new_abstract(name),
        _ => return,
    };
    let Ok(address) = address else { return };
    let Ok((read, write)) = nix::unistd::pipe() else {
        return;
    };
    let fds = [write.as_raw_fd()];
    let sent = sendmsg(
        socket.as_raw_fd(),
        &[std::io::IoSlice::new(b"BARRIER=1\n")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_DONTWAIT,
        Some(&address),
    );
    drop(write);
    if sent.is_err() {
        return;
    }
    let until = std::time::Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let timeout =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(read.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => return,
            Ok(_) => return,
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
            Err(_) => return,
        }
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

fn send(message: &str) {
    if let Some((socket, address)) = target()
        && let Err(e) = socket.send_to_addr(message.as_bytes(), address)
    {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_paths_or_abstract_names() {
        let path = parse_address(b"/run/systemd/notify").unwrap();
        assert_eq!(
            path.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        let abstract_address = parse_address(b"@leader-exec/test").unwrap();
        assert_eq!(
            abstract_address.as_abstract_name(),
            Some(&b"leader-exec/test"[..])
        );
        assert!(parse_address(b"").is_none());
    }
}
