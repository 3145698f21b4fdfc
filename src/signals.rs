//! Signal intake: the signals leader-exec forwards to the child's process group.
//!
//! Handlers are installed before leader-exec contacts etcd, so a TERM while campaigning withdraws
//! the candidacy instead of killing the process with its candidate key still standing in line.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// The signals forwarded to the child while it runs.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// TERM and INT stop the child gracefully after forwarding.
pub fn stops_the_child(signal: Signal) -> bool {
    matches!(signal, Signal::SIGTERM | Signal::SIGINT)
}

/// While campaigning there is no child: these signals withdraw the candidacy and end leader-exec;
/// USR1 and USR2 are ignored.
pub fn withdraws_candidacy(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
    )
}

pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Installs the handlers. Needs a running tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s as i32))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received. Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (signal, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*signal);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}
