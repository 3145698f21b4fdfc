//! The process layer: the command's process group and the small supervising process that keeps
//! it from outliving leader-exec ([`supervisor`]), `--contain` ([`contain`]), the /proc look-ups
//! both ends of the supervisor make ([`procfs`]), the command found on PATH before anything else
//! happens ([`lookup`]) and the supervisor's name in `ps` ([`title`]).
//!
//! [`Supervise`] is what the run state machine needs of the process that starts and watches the
//! command: the real one is [`supervisor::Handle`] (a forked supervising process, the command's
//! group led by the command); the Runner's paused-clock tests use a double that records signals
//! with their instants and lets a test script the group's life.

pub mod contain;
pub mod lookup;
pub mod procfs;
pub mod supervisor;
pub mod title;

use std::future::Future;
use std::io;

use nix::sys::signal::Signal;

use supervisor::{Event, Group};

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

impl Supervise for supervisor::Handle {
    fn spawn(&mut self, env: &[(&str, String)]) -> io::Result<()> {
        supervisor::Handle::spawn(self, env)
    }

    fn signal(&mut self, signal: Signal) {
        supervisor::Handle::signal(self, signal)
    }

    fn group(&mut self) -> Group {
        supervisor::Handle::group(self)
    }

    fn cancel_pending_spawn(&mut self) {
        supervisor::Handle::cancel_pending_spawn(self)
    }

    fn next_event(&mut self) -> impl Future<Output = io::Result<Event>> {
        supervisor::Handle::next_event(self)
    }
}
