//! Running the child so that it cannot outlive leader-exec.
//!
//! ```text
//! leader-exec (tokio, the store)     -- socket --  supervisor (single-threaded, subreaper)
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
//! This file is the supervising process's end of the socket (and the fork that makes it);
//! leader-exec's end is [`super::handle::Handle`], and the messages between them are
//! [`super::protocol`].

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

use crate::exit::ChildStatus;
use crate::process::contain::{self, Cgroup, PidNamespace};
use crate::process::environment::without_credentials;
use crate::process::title::rename_process;

/// A forked supervisor, before the async runtime exists.
pub struct Forked {
    pub(super) pid: Pid,
    pub(super) socket: UnixStream,
    pub(super) cgroup: Option<Cgroup>,
    pub(super) pidns: bool,
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
/// it is empty; `checks`, the `--health-cmd` checks' cgroup, is killed and removed with the
/// job's when leader-exec dies. With `pidns` (`--contain pidns`, unshared already) the
/// supervisor is PID 1 of that namespace; leader-exec waits for its word that the namespace is
/// ready before going on.
pub unsafe fn fork_supervisor(
    command: &[OsString],
    cgroup: Option<Cgroup>,
    checks: Option<Cgroup>,
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
            let code = Supervisor::new(theirs, command, seen_parent, cgroup, checks)
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
    /// `--contain cgroup` with `--health-cmd`: the checks' cgroup, killed when leader-exec dies.
    checks: Option<Cgroup>,
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
        checks: Option<Cgroup>,
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
            checks,
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
        // Whatever the state says, nothing of the job (nor of a check) may outlive leader-exec.
        for cgroup in [&self.cgroup, &self.checks].into_iter().flatten() {
            cgroup.kill_and_remove(contain::EXIT_WAIT);
        }
    }
}
