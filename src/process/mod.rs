//! The process layer: the command's process group and the small supervising process that keeps
//! it from outliving leader-exec. The socket between them has two ends: the supervising process
//! ([`supervisor`], forked before the runtime exists) and leader-exec's [`handle::Handle`]; the
//! lines between them are [`protocol`]. Beside them: `--contain` ([`contain`]), the /proc
//! look-ups both ends make ([`procfs`]), the environment the command gets ([`environment`]), the
//! command found on PATH before anything else happens ([`lookup`]) and the supervisor's name in
//! `ps` ([`title`]).
//!
//! [`Supervise`] is what the run state machine needs of the process that starts and watches the
//! command: the real one is [`Handle`] (a forked supervising process, the command's group led by
//! the command); the Runner's paused-clock tests use a double that records signals with their
//! instants and lets a test script the group's life.

pub mod contain;
pub mod environment;
pub mod handle;
pub mod lookup;
pub mod procfs;
pub mod protocol;
pub mod supervisor;
pub mod title;

use std::future::Future;
use std::io;

use nix::sys::signal::Signal;

pub use handle::{Group, Handle};
pub use protocol::Event;

/// What the run needs of the process layer (see above); [`Handle`] is the real one.
pub trait Supervise {
    /// Starts the command with these variables added to leader-exec's environment.
    fn spawn(&mut self, env: &[(&str, String)]) -> io::Result<()>;
    /// Sends a signal to the command's process group; never waits.
    fn signal(&mut self, signal: Signal);
    /// What is left of the command's group, looked up independently of the supervisor.
    fn group(&mut self) -> Group;
    /// Leader-exec stops waiting for the command: a spawn not yet confirmed must never happen.
    fn cancel_pending_spawn(&mut self);
    /// The next event. Cancel-safe. An error means the supervisor is gone (and has SIGKILLed the
    /// group on its way out).
    fn next_event(&mut self) -> impl Future<Output = io::Result<Event>>;
}

impl Supervise for Handle {
    fn spawn(&mut self, env: &[(&str, String)]) -> io::Result<()> {
        Handle::spawn(self, env)
    }

    fn signal(&mut self, signal: Signal) {
        Handle::signal(self, signal)
    }

    fn group(&mut self) -> Group {
        Handle::group(self)
    }

    fn cancel_pending_spawn(&mut self) {
        Handle::cancel_pending_spawn(self)
    }

    fn next_event(&mut self) -> impl Future<Output = io::Result<Event>> {
        Handle::next_event(self)
    }
}
