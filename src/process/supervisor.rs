//! Running the child so that it cannot outlive leader-exec.
//!
//! ```text
//! leader-exec (tokio, etcd)          -- socket --  supervisor (single-threaded, subreaper)
//!                                                    └─ COMMAND   (own process group, PDEATHSIG=KILL)
//!                                                         └─ grandchildren (same group)
//! ```
//!
//! PR_SET_PDEATHSIG reaches only the direct child, and `sh -c 'a; b'` runs the real work as a
//! grandchild; if leader-exec were the child's parent and died by SIGKILL, the grandchildren would
//! run on with nobody to stop them. So a small process of ours sits between: it is forked while
//! leader-exec still has one thread, and when leader-exec dies (its death signal, or EOF on the
//! socket) it SIGKILLs the child's whole process group. The child carries PDEATHSIG=SIGKILL too,
//! for the case where the supervisor itself is killed.
//!
//! The supervisor is a child subreaper: orphaned descendants are reparented to it and reaped by it,
//! so "the group is empty" is known at once instead of waiting for PID 1 to reap them (about a
//! second on these machines), and zombies do not keep the group looking alive.
//!
//! Protocol, one line per message, fields separated by tabs:
//! - leader-exec → supervisor: `spawn\tK=V\tK=V…` (environment added for the child), `signal\tN`
//! - supervisor → leader-exec: `started\tPID`, `failed\tERRNO\tMESSAGE`, `exited\tPGID\tCODE`,
//!   `killed\tPGID\tSIGNAL`, `empty\tPGID` (that process group has no process left); PGID is the
//!   command's pid, which names its group

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, getpid, getppid, setpgid};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::exit::{self, ChildStatus};
use crate::process::contain::{self, Cgroup, PidNamespace};
pub use crate::process::lookup::check_command;
pub use crate::process::procfs::members_of;
use crate::process::procfs::{children_of, process_group_of, stat_of};
use crate::process::title::rename_process;

/// What the supervisor reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The command is running with this pid (which is also its process group id).
    Started(i32),
    /// The command could not be started.
    SpawnFailed { errno: i32, message: String },
    /// The command itself ended; other processes of its group may still run.
    Exited(ChildStatus),
    /// No process of the command's group is left.
    GroupEmpty,
}

/// The exit code for a command that could not be started: 127 when it does not exist, else 126.
pub fn spawn_failure_code(errno: i32) -> u8 {
    if errno == Errno::ENOENT as i32 {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    }
}

/// A forked supervisor, before the async runtime exists.
pub struct Forked {
    pid: Pid,
    socket: UnixStream,
    cgroup: Option<Cgroup>,
    pidns: bool,
}

/// Forks the supervisor.
///
/// # Safety
/// The process must have exactly one thread: the forked supervisor goes on running Rust code,
/// which is only sound when no other thread could have held a lock (the allocator's, stdio's)
/// at the moment of the fork. Call this before the tokio runtime is built.
///
/// It is called from the main thread, which lives as long as the process: PR_SET_PDEATHSIG fires
/// when the *thread* that forked exits, not the process, so forking from a short-lived thread
/// would kill the supervisor (and with it the command) early.
///
/// With `cgroup` (`--contain cgroup`) the command runs in that cgroup, and the job ends only when
/// it is empty. With `pidns` (`--contain pidns`, unshared already) the supervisor is PID 1 of that
/// namespace; leader-exec waits for its word that the namespace is ready before going on.
pub unsafe fn fork_supervisor(
    command: &[OsString],
    cgroup: Option<Cgroup>,
    pidns: Option<PidNamespace>,
) -> io::Result<Forked> {
    let (ours, theirs) = UnixStream::pair()?;
    let parent = getpid();
    // SAFETY: single-threaded, per this function's contract.
    match unsafe { fork() }? {
        ForkResult::Child => {
            // Only leader-exec may hold the other end, so that its death reads as EOF here.
            drop(ours);
            // Out of leader-exec's process group and out of its name: `kill -9 -- -PGID` or
            // `kill -9 %1` of the job, `pkill -9 leader-exec`, `pkill -9 -f leader-exec` and
            // `killall -9 leader-exec` kill leader-exec but not the supervisor, which then
            // kills the command's group on leader-exec's death.
            let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
            rename_process(parent);
            // A parent outside our PID namespace is pid 0 to us.
            let mut theirs = theirs;
            let seen_parent = if pidns.is_some() {
                drop(pidns);
                let ready = contain::init_pid_namespace();
                let word = match &ready {
                    Ok(()) => "ready\n".to_owned(),
                    Err(e) => format!("error\t{e}\n"),
                };
                if theirs.write_all(word.as_bytes()).is_err() || ready.is_err() {
                    std::process::exit(1);
                }
                Pid::from_raw(0)
            } else {
                parent
            };
            let code = Supervisor::new(theirs, command, seen_parent, cgroup)
                .map(|mut s| s.run())
                .unwrap_or_else(|e| {
                    let _ = writeln!(io::stderr(), "leader-exec: supervisor: {e}");
                    1
                });
            std::process::exit(code);
        }
        ForkResult::Parent { child } => {
            drop(theirs);
            let Some(pidns) = pidns else {
                return Ok(Forked {
                    pid: child,
                    socket: ours,
                    cgroup,
                    pidns: false,
                });
            };
            let ready = pidns
                .restore()
                .and_then(|()| contain::namespace_ready(&ours));
            if let Err(e) = ready {
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                return Err(e);
            }
            Ok(Forked {
                pid: child,
                socket: ours,
                cgroup,
                pidns: true,
            })
        }
    }
}

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

/// An event, and the process group it is about (for `exited`, `killed` and `empty`).
fn parse_event(line: &str) -> Option<(Option<i32>, Event)> {
    let mut fields = line.split('\t');
    let kind = fields.next()?;
    let mut group = || -> Option<i32> { fields.next()?.parse().ok() };
    let parsed = match kind {
        "started" => (None, Event::Started(group()?)),
        "failed" => {
            let errno = group()?;
            let message = fields.next().unwrap_or("").to_owned();
            (None, Event::SpawnFailed { errno, message })
        }
        "exited" => {
            let about = group()?;
            let code = fields.next()?.parse().ok()?;
            (Some(about), Event::Exited(ChildStatus::Exited(code)))
        }
        "killed" => {
            let about = group()?;
            let signal = fields.next()?.parse().ok()?;
            (Some(about), Event::Exited(ChildStatus::Signaled(signal)))
        }
        "empty" => (Some(group()?), Event::GroupEmpty),
        _ => return None,
    };
    Some(parsed)
}

/// Kills every process of the PID namespace but its init, the caller. Only ever called by the
/// supervisor as PID 1 of the job's namespace: `kill(-1)` anywhere else would reach every process
/// the caller may signal, so the pid is checked here, not trusted.
fn kill_rest_of_namespace() {
    if getpid().as_raw() == 1 {
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
    }
}

/// The supervisor process's state.
struct Supervisor<'a> {
    socket: UnixStream,
    signals: SignalFd,
    command: &'a [OsString],
    parent: Pid,
    input: Vec<u8>,
    /// A spawn that came while the previous group was still draining (leader-exec may see a
    /// group gone in /proc a moment before this process has reaped it): run once idle.
    pending_spawn: Option<String>,
    state: State,
    /// `--contain cgroup`: the job is over only when this cgroup is empty too.
    cgroup: Option<Cgroup>,
    /// `--contain pidns`: this process is PID 1 of the job's namespace.
    pidns: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No command running.
    Idle,
    /// The command runs; its pid is its process group id.
    Running(Pid),
    /// The command exited; other processes of its group may still run.
    Draining(Pid),
}

/// How often to look whether the group is empty while it drains. Descendants reparented to us
/// are reaped at once via SIGCHLD; this catches a last process whose parent was not us.
const DRAIN_POLL: Duration = Duration::from_millis(20);

impl<'a> Supervisor<'a> {
    fn new(
        socket: UnixStream,
        command: &'a [OsString],
        parent: Pid,
        cgroup: Option<Cgroup>,
    ) -> io::Result<Self> {
        // Signals arrive through a signalfd, read in the poll loop. TERM, INT and the rest reach
        // us only as bystanders (a terminal's Ctrl-C goes to the whole foreground group);
        // leader-exec decides what the command gets. The child starts with an empty mask again
        // (std resets it before exec, and pre_exec below does too).
        let mut mask = SigSet::empty();
        for signal in [
            Signal::SIGCHLD,
            Signal::SIGTSTP,
            Signal::SIGTTIN,
            Signal::SIGTTOU,
        ]
        .into_iter()
        .chain(crate::signals::FORWARDED)
        {
            mask.add(signal);
        }
        mask.thread_block()?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // Wake up when leader-exec dies, whatever kills it; the check below closes the race with
        // a parent that died before the prctl.
        prctl::set_pdeathsig(Signal::SIGTERM)?;
        if getppid() != parent {
            std::process::exit(0);
        }
        prctl::set_child_subreaper(true)?;
        Ok(Supervisor {
            socket,
            signals,
            command,
            parent,
            input: Vec::new(),
            pending_spawn: None,
            state: State::Idle,
            pidns: getpid().as_raw() == 1,
            cgroup,
        })
    }

    fn run(&mut self) -> i32 {
        loop {
            let timeout = match self.state {
                State::Draining(_) => {
                    PollTimeout::try_from(DRAIN_POLL).unwrap_or(PollTimeout::NONE)
                }
                _ => PollTimeout::NONE,
            };
            let (socket_ready, signal_ready) = {
                let mut fds = [
                    PollFd::new(self.socket.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        self.parent_gone();
                        let _ = writeln!(io::stderr(), "leader-exec: supervisor: poll: {e}");
                        return 1;
                    }
                }
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), ready(&fds[1]))
            };
            if signal_ready && self.read_signals().is_err() {
                self.parent_gone();
                return 0;
            }
            if socket_ready && self.read_commands().is_err() {
                self.parent_gone();
                return 0;
            }
            if self.check_drained().is_err() {
                self.parent_gone();
                return 0;
            }
            if self.state == State::Idle
                && let Some(line) = self.pending_spawn.take()
                && self.command(&line).is_err()
            {
                self.parent_gone();
                return 0;
            }
        }
    }

    /// Err when leader-exec is gone.
    fn read_signals(&mut self) -> Result<(), ()> {
        while let Ok(Some(info)) = self.signals.read_signal() {
            if info.ssi_signo == Signal::SIGCHLD as u32 {
                self.reap()?;
            } else if getppid() != self.parent {
                return Err(());
            }
        }
        Ok(())
    }

    /// Reaps every child that has ended: the command and any orphan reparented to us.
    fn reap(&mut self) -> Result<(), ()> {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => self.ended(pid, ChildStatus::Exited(code))?,
                Ok(WaitStatus::Signaled(pid, signal, _)) => {
                    self.ended(pid, ChildStatus::Signaled(signal as i32))?
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(()),
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                Err(_) => return Ok(()),
            }
        }
    }

    fn ended(&mut self, pid: Pid, status: ChildStatus) -> Result<(), ()> {
        if self.state == State::Running(pid) {
            self.state = State::Draining(pid);
            let mut line = match status {
                ChildStatus::Exited(code) => format!("exited\t{pid}\t{code}\n"),
                ChildStatus::Signaled(signal) => format!("killed\t{pid}\t{signal}\n"),
            };
            // Usually the command was alone in its group: say both in one message, so that
            // leader-exec wakes up once and releases the lease at once (the handover path).
            if self.job_gone(pid) {
                self.state = State::Idle;
                line.push_str(&format!("empty\t{pid}\n"));
            }
            self.tell(&line)?;
        }
        Ok(())
    }

    fn check_drained(&mut self) -> Result<(), ()> {
        if let State::Draining(group) = self.state {
            // Reap first: a zombie still counts as a member of its group.
            self.reap()?;
            if self.job_gone(group) {
                self.state = State::Idle;
                self.tell(&format!("empty\t{group}\n"))?;
            }
        }
        Ok(())
    }

    /// Whether nothing of the job is left: its process group is empty and, with a cgroup, so is
    /// the cgroup. What is left in the cgroup after the group ended escaped the group; it is
    /// killed now and looked at again on the next drain poll.
    fn job_gone(&self, group: Pid) -> bool {
        if killpg(group, None) != Err(Errno::ESRCH) {
            return false;
        }
        if self.pidns {
            // Every process of the namespace is our descendant, and one whose parent died is
            // our child: no child at all means nothing of the job is left.
            return match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Err(Errno::ECHILD) => true,
                _ => {
                    kill_rest_of_namespace();
                    false
                }
            };
        }
        match &self.cgroup {
            Some(cgroup) if cgroup.populated() => {
                cgroup.kill();
                false
            }
            _ => true,
        }
    }

    fn tell(&mut self, line: &str) -> Result<(), ()> {
        self.socket.write_all(line.as_bytes()).map_err(|_| ())
    }

    /// Err when leader-exec is gone (EOF).
    fn read_commands(&mut self) -> Result<(), ()> {
        let mut buffer = [0u8; 4096];
        let n = match self.socket.read(&mut buffer) {
            Ok(0) => return Err(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(_) => return Err(()),
        };
        self.input.extend_from_slice(&buffer[..n]);
        while let Some(end) = self.input.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.input.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            self.command(&line)?;
        }
        Ok(())
    }

    fn command(&mut self, line: &str) -> Result<(), ()> {
        let mut fields = line.split('\t');
        match fields.next() {
            Some("spawn") if self.state == State::Idle => {
                let env: Vec<(&str, &str)> = fields.filter_map(|f| f.split_once('=')).collect();
                self.spawn(&env)
            }
            Some("spawn") => {
                self.pending_spawn = Some(line.to_owned());
                Ok(())
            }
            Some("signal") => {
                let signal = fields.next().and_then(|n| n.parse::<i32>().ok());
                if let (Some(signal), State::Running(group) | State::Draining(group)) =
                    (signal.and_then(|n| Signal::try_from(n).ok()), self.state)
                {
                    let _ = killpg(group, signal);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn spawn(&mut self, env: &[(&str, &str)]) -> Result<(), ()> {
        let mut command = std::process::Command::new(&self.command[0]);
        command.args(&self.command[1..]);
        without_credentials(&mut command);
        command.envs(env.iter().copied());
        // Its own process group, so that stopping it reaches everything it started.
        command.process_group(0);
        let supervisor = getpid();
        // Opened before the fork: between fork and exec there is only the write.
        let procs = match self.cgroup.as_ref().map(Cgroup::open_procs).transpose() {
            Ok(procs) => procs,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                return self.tell(&format!(
                    "failed\t{errno}\tcannot enter the job's cgroup: {e}\n"
                ));
            }
        };
        // SAFETY: only async-signal-safe calls (prctl, getppid, sigprocmask) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // Set between fork and exec: there is no instant in which the command runs
                // without it.
                prctl::set_pdeathsig(Signal::SIGKILL)?;
                // If the supervisor died before the prctl, the signal will never come.
                if getppid() != supervisor {
                    return Err(io::Error::other("supervisor exited during spawn"));
                }
                SigSet::empty().thread_set_mask()?;
                // Into the job's cgroup before exec: the command never runs outside it.
                if let Some(procs) = &procs {
                    contain::enter(procs)?;
                }
                Ok(())
            });
        }
        match command.spawn() {
            Ok(child) => {
                let pid = Pid::from_raw(child.id() as i32);
                // Reaped by waitpid(-1) in `reap`, not through `child`.
                drop(child);
                self.state = State::Running(pid);
                self.tell(&format!("started\t{pid}\n"))
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                let message = e.to_string().replace(['\t', '\n'], " ");
                self.tell(&format!("failed\t{errno}\t{message}\n"))
            }
        }
    }

    /// leader-exec is gone: nobody can vouch for the lease any more. Kill the whole group and
    /// wait (bounded) until it is gone.
    fn parent_gone(&mut self) {
        if let State::Running(group) | State::Draining(group) = self.state {
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
            let _ = killpg(group, Signal::SIGKILL);
            for _ in 0..500 {
                let _ = self.reap();
                if self.job_gone(group) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // Whatever the state says, nothing of the job may outlive leader-exec.
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill_and_remove(contain::EXIT_WAIT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse() {
        assert_eq!(parse_event("started\t42"), Some((None, Event::Started(42))));
        assert_eq!(
            parse_event("exited\t42\t7"),
            Some((Some(42), Event::Exited(ChildStatus::Exited(7))))
        );
        assert_eq!(
            parse_event("killed\t42\t15"),
            Some((Some(42), Event::Exited(ChildStatus::Signaled(15))))
        );
        assert_eq!(
            parse_event("empty\t42"),
            Some((Some(42), Event::GroupEmpty))
        );
        assert_eq!(
            parse_event("failed\t2\tNo such file"),
            Some((
                None,
                Event::SpawnFailed {
                    errno: 2,
                    message: "No such file".into()
                }
            ))
        );
        assert_eq!(parse_event("empty"), None);
        assert_eq!(parse_event("nonsense"), None);
    }

    #[test]
    fn spawn_failures_map_to_126_and_127() {
        assert_eq!(spawn_failure_code(Errno::ENOENT as i32), 127);
        assert_eq!(spawn_failure_code(Errno::EACCES as i32), 126);
        assert_eq!(spawn_failure_code(Errno::ENOEXEC as i32), 126);
    }
}
