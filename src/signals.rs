//! Signal intake: the signals leader-exec forwards to the child's process group.
//!
//! Handlers are installed before leader-exec contacts the store, so a TERM while campaigning
//! withdraws the candidacy instead of killing the process with its candidate key still standing in
//! line.

use nix::sys::signal::{SigSet, Signal};
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

/// Job-control stop signals: Ctrl-Z (TSTP), and TTIN/TTOU for a background job that touches the
/// terminal.
pub const STOPS: [Signal; 3] = [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU];

/// Keeps job-control stop signals from stopping leader-exec. A stopped leader stops renewing, its
/// lease expires and another host's command starts while ours, in its own process group, runs
/// on; a stopped waiter loses its place in line. So these signals are blocked, first thing, on
/// the only thread (every later thread and the forked supervisor inherit the mask): they stay
/// pending and never take effect. They are not forwarded to the command either — pausing the
/// command while the lease is held helps nobody; `kill -STOP -- -PGID` can still pause the
/// command's group on purpose. The command starts with an empty mask (the supervisor clears it
/// between fork and exec), so its own job control works as usual.
///
/// SIGSTOP cannot be blocked: a frozen leader-exec (SIGSTOP, a debugger, a paused VM) is the case
/// where the fencing token is the defence.
pub fn block_stop_signals() {
    let mut mask = SigSet::empty();
    for signal in STOPS {
        mask.add(signal);
    }
    let _ = mask.thread_block();
}

pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    /// Tests: signals sent through a channel instead of delivered by the kernel (a real signal
    /// would reach every test of the process).
    #[cfg(test)]
    scripted: Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>,
}

impl Signals {
    /// Installs the handlers. Needs a running tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s as i32))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals {
            streams,
            #[cfg(test)]
            scripted: None,
        })
    }

    /// Signals that a test sends through the returned channel.
    #[cfg(test)]
    pub fn scripted() -> (Signals, tokio::sync::mpsc::UnboundedSender<Signal>) {
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        let signals = Signals {
            streams: Vec::new(),
            scripted: Some(receive),
        };
        (signals, send)
    }

    /// The next signal received. Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(test)]
        if let Some(scripted) = &mut self.scripted {
            return match scripted.recv().await {
                Some(signal) => signal,
                None => std::future::pending().await,
            };
        }
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
