//! leader-exec's end of the supervisor's socket: the [`Handle`] through which the run starts,
//! signals and watches the command's process group (the supervising process itself is
//! [`super::supervisor`]).

use std::io;
use std::time::Duration;

use nix::sys::prctl;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::process::contain::{self, Cgroup};
use crate::process::procfs::{children_of, members_of, process_group_of, stat_of};
use crate::process::protocol::{Event, parse_event};
use crate::process::supervisor::Forked;

/// leader-exec's side of the supervisor.
///
/// Signals for the command go **straight to its process group** (`killpg`) whenever leader-exec
/// knows the group, not through the supervisor: a supervisor that is stopped (SIGSTOP, a
/// debugger) or busy still takes messages into its socket buffer, and a signal sitting in a
/// buffer kills nothing. Only while the group is not yet known (the `started` message not yet
/// read) does the supervisor, which knows it, deliver the signal. Either way each signal is
/// delivered once. Nothing here waits on the supervisor: messages to it are written without
/// blocking, and what its socket cannot take at once is kept and sent with the next message.
///
/// Signalling a group id is safe while a member of the group lives (Linux does not reuse a pid
/// that is still some process's group id); leader-exec forgets the group when the supervisor
/// reports it empty, or when it finds no member left itself.
pub struct Handle {
    pid: Pid,
    lines: Lines<BufReader<OwnedReadHalf>>,
    writer: Option<OwnedWriteHalf>,
    /// Bytes for the supervisor that its socket could not take yet.
    outbox: Vec<u8>,
    /// The command's process group, once known.
    group: Option<Pid>,
    /// A spawn was requested and neither `started` nor `failed` has been read yet.
    spawn_pending: bool,
    /// The supervisor has died (EOF on its socket) or was killed by us.
    gone: bool,
    /// `--contain cgroup`: the job's cgroup, which SIGKILL and the look at what is left reach too.
    cgroup: Option<Cgroup>,
    /// `--contain pidns`: the supervisor names pids as its namespace sees them; this is the
    /// command's group as it names it (`group` is leader-exec's view).
    pidns: bool,
    inner_group: Option<i32>,
}

/// What is known of the command's process group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Group {
    /// No command was started, or its whole group has ended.
    Gone,
    /// These processes of the group are alive (zombies not counted).
    Alive(Vec<i32>),
}

impl Handle {
    /// Registers the socket with the runtime.
    pub fn new(forked: Forked) -> io::Result<Handle> {
        // Should the supervisor die, the command's processes are reparented to us rather than to
        // PID 1, so that we can reap them at once instead of waiting for PID 1.
        prctl::set_child_subreaper(true)?;
        forked.socket.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(forked.socket)?;
        let (read, write) = stream.into_split();
        Ok(Handle {
            pid: forked.pid,
            lines: BufReader::new(read).lines(),
            writer: Some(write),
            outbox: Vec::new(),
            group: None,
            spawn_pending: false,
            gone: false,
            cgroup: forked.cgroup,
            pidns: forked.pidns,
            inner_group: None,
        })
    }

    /// Queues `line` for the supervisor and writes what its socket takes now; never waits.
    fn send(&mut self, line: &str) -> io::Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| io::Error::other("supervisor already shut down"))?;
        self.outbox.extend_from_slice(line.as_bytes());
        while !self.outbox.is_empty() {
            match writer.try_write(&self.outbox) {
                Ok(0) => return Err(io::Error::other("the supervisor closed its socket")),
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Starts the command with these variables added to leader-exec's environment.
    /// Names and values must not contain tabs or newlines (settings reject control characters).
    pub fn spawn(&mut self, env: &[(&str, String)]) -> io::Result<()> {
        let mut line = String::from("spawn");
        for (name, value) in env {
            debug_assert!(!value.contains(['\t', '\n']), "{name}={value:?}");
            line.push('\t');
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
        line.push('\n');
        self.spawn_pending = true;
        self.send(&line)
    }

    /// Sends a signal to the command's process group (nothing when no command runs): directly
    /// when the group is known, else through the supervisor. Never waits.
    pub fn signal(&mut self, signal: Signal) {
        if self.group.is_none() && self.spawn_pending {
            self.discover_group();
        }
        // SIGKILL reaches the whole cgroup too: what left the process group is killed with it.
        if signal == Signal::SIGKILL
            && let Some(cgroup) = &self.cgroup
        {
            cgroup.kill();
        }
        if let Some(group) = self.group {
            let _ = killpg(group, signal);
        } else if self.spawn_pending
            && !self.gone
            && self.send(&format!("signal\t{}\n", signal as i32)).is_err()
        {
            tracing::debug!("cannot reach the supervisor");
        }
    }

    /// The group of a command the supervisor started but has not told us about yet (it may be
    /// stopped): the child of the supervisor that leads its own process group.
    fn discover_group(&mut self) {
        // A supervisor that is gone has no children to look at (and, once reaped, its pid may
        // belong to someone else).
        if self.gone {
            return;
        }
        for pid in children_of(self.pid.as_raw()) {
            if process_group_of(pid) == Some(pid) {
                self.group = Some(Pid::from_raw(pid));
                return;
            }
        }
    }

    /// What is left of the command's group, looked up in /proc (independent of the supervisor).
    /// Reaps what was reparented to us first: a zombie still counts as a member of its group.
    ///
    /// With `--contain cgroup`, once the process group is gone whatever is left in the cgroup
    /// escaped the group: it is killed here (`cgroup.kill`) and counted until it is gone.
    pub fn group(&mut self) -> Group {
        match (self.process_group(), self.cgroup.clone()) {
            (Group::Gone, Some(cgroup)) if cgroup.populated() => {
                cgroup.kill();
                self.reap_orphans();
                match cgroup.pids() {
                    pids if pids.is_empty() => Group::Gone,
                    pids => Group::Alive(pids),
                }
            }
            // With a PID namespace every process of the job is a descendant of the supervisor,
            // and one that left the group was reparented to it: its children are what is left.
            (Group::Gone, None) if self.pidns && !self.gone => {
                let left: Vec<i32> = children_of(self.pid.as_raw())
                    .into_iter()
                    .filter(|&pid| {
                        matches!(stat_of(pid), Some((state, _)) if state != 'Z' && state != 'X')
                    })
                    .collect();
                for &pid in &left {
                    // Not reaped yet (alive), so the pid is still the process's.
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                if left.is_empty() {
                    Group::Gone
                } else {
                    Group::Alive(left)
                }
            }
            (group, _) => group,
        }
    }

    fn process_group(&mut self) -> Group {
        self.reap_orphans();
        if self.group.is_none() && self.spawn_pending {
            self.discover_group();
        }
        let Some(group) = self.group else {
            return Group::Gone;
        };
        let alive = members_of(group.as_raw());
        if alive.is_empty() {
            // Forgotten: what the supervisor still has to say about it is stale (see
            // `next_event`), and its number may be reused.
            self.group = None;
            Group::Gone
        } else {
            Group::Alive(alive)
        }
    }

    /// Called when leader-exec stops waiting for the command: a supervisor that was asked to
    /// spawn and never said it did cannot be trusted not to spawn later (it may be stopped with
    /// the request in its buffer). It is killed; should it have started the command meanwhile,
    /// the command's death signal and the group kill below take care of it.
    pub fn cancel_pending_spawn(&mut self) {
        if !self.spawn_pending || self.gone {
            return;
        }
        self.discover_group();
        // Not reaped yet (`gone` is false): the pid is still the supervisor's.
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        self.gone = true;
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }

    /// The next event. Cancel-safe. An error means the supervisor is gone: leader-exec has
    /// already SIGKILLed the command's group itself by then (its processes are reparented to us
    /// and reaped by [`Handle::group`]). Never completes once the supervisor is gone.
    ///
    /// `exited` and `empty` name the group they are about. Those about a group leader-exec has
    /// already seen gone in /proc (a step-down that did not wait for the supervisor's word) are
    /// stale and skipped: with `--recampaign` they would otherwise be taken for news of the next
    /// command.
    pub async fn next_event(&mut self) -> io::Result<Event> {
        if self.gone {
            return std::future::pending().await;
        }
        loop {
            let line = match self.lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.supervisor_died();
                    return Err(io::Error::other("the supervisor process died"));
                }
                Err(e) => {
                    self.supervisor_died();
                    return Err(e);
                }
            };
            let (about, event) = parse_event(&line).ok_or_else(|| {
                io::Error::other(format!("bad message from supervisor: {line:?}"))
            })?;
            let known = match self.pidns {
                true => self.inner_group,
                false => self.group.map(Pid::as_raw),
            };
            if about.is_some() && about != known {
                continue;
            }
            match event {
                Event::Started(pid) if self.pidns => {
                    // Looked up among the supervisor's children; a command that has ended and
                    // been reaped already is not found, and only the supervisor's word about
                    // it (by its inner pid) counts then.
                    let outer = contain::outer_pid(self.pid.as_raw(), pid);
                    self.group = outer.map(Pid::from_raw);
                    self.inner_group = Some(pid);
                    self.spawn_pending = false;
                    return Ok(Event::Started(outer.unwrap_or(pid)));
                }
                Event::Started(pid) => {
                    self.group = Some(Pid::from_raw(pid));
                    self.spawn_pending = false;
                }
                Event::SpawnFailed { .. } => self.spawn_pending = false,
                Event::GroupEmpty => {
                    self.group = None;
                    self.inner_group = None;
                }
                Event::Exited(_) => {}
            }
            return Ok(event);
        }
    }

    /// The supervisor died while the command may run: its death signal has killed the command,
    /// but not the command's children. Signal first; the caller waits (bounded) for the group.
    fn supervisor_died(&mut self) {
        if self.group.is_none() && self.spawn_pending {
            self.discover_group();
        }
        self.gone = true;
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }

    /// Reaps processes reparented to leader-exec (it is a subreaper) once the supervisor is gone.
    /// The supervisor itself may be among them: once reaped its pid is free for reuse, so it is
    /// marked gone and never signalled or looked up again.
    fn reap_orphans(&mut self) {
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
            if status.pid() == Some(self.pid) {
                self.gone = true;
            }
        }
    }

    /// Closes the socket and waits (at most a second) for the supervisor to exit; should a
    /// command still run, the supervisor SIGKILLs its group first. A supervisor that does not
    /// exit in time (stopped) is SIGKILLed.
    pub fn shutdown(mut self) {
        self.writer = None;
        let cgroup = self.cgroup.take();
        drop(self.lines);
        for _ in 0..100 {
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(10)),
                _ => return remove_cgroup(cgroup),
            }
        }
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
        remove_cgroup(cgroup);
    }
}

/// leader-exec ends: nothing of the job may outlive it, and the cgroup goes with it. What was
/// killed and reparented to leader-exec (a subreaper) is reaped.
fn remove_cgroup(cgroup: Option<Cgroup>) {
    if let Some(cgroup) = cgroup {
        cgroup.kill_and_remove(contain::EXIT_WAIT);
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
}
