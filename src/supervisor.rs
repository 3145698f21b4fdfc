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
//! - supervisor → leader-exec: `started\tPID`, `failed\tERRNO\tMESSAGE`, `exited\tCODE`,
//!   `killed\tSIGNAL`, `empty` (the child's process group has no process left)

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, getpid, getppid};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::exit::{self, ChildStatus, Failure};

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

/// Looks the command up before anything else happens, so that a typo costs no election.
/// The real exec can still fail later (the file changed); that is reported the same way.
pub fn check_command(command: &OsString) -> Result<(), Failure> {
    let shown = command.to_string_lossy();
    let name = Path::new(command);
    let executable = |path: &Path| {
        path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    if command.is_empty() {
        return Err(Failure::new(exit::NOT_FOUND, "empty command name"));
    }
    if command.as_encoded_bytes().contains(&b'/') {
        if !name.exists() {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!("{shown}: no such file or directory"),
            ));
        }
        if !executable(name) {
            return Err(Failure::new(
                exit::CANNOT_EXECUTE,
                format!("{shown}: permission denied (not an executable file)"),
            ));
        }
        return Ok(());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unexecutable = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(name);
        if executable(&candidate) {
            return Ok(());
        }
        found_unexecutable |= candidate.exists() && !candidate.is_dir();
    }
    if found_unexecutable {
        Err(Failure::new(
            exit::CANNOT_EXECUTE,
            format!("{shown}: permission denied"),
        ))
    } else {
        Err(Failure::new(
            exit::NOT_FOUND,
            format!("{shown}: command not found"),
        ))
    }
}

/// A forked supervisor, before the async runtime exists.
pub struct Forked {
    pid: Pid,
    socket: UnixStream,
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
pub unsafe fn fork_supervisor(command: &[OsString]) -> io::Result<Forked> {
    let (ours, theirs) = UnixStream::pair()?;
    let parent = getpid();
    // SAFETY: single-threaded, per this function's contract.
    match unsafe { fork() }? {
        ForkResult::Child => {
            // Only leader-exec may hold the other end, so that its death reads as EOF here.
            drop(ours);
            let code = Supervisor::new(theirs, command, parent)
                .map(|mut s| s.run())
                .unwrap_or_else(|e| {
                    eprintln!("leader-exec: supervisor: {e}");
                    1
                });
            std::process::exit(code);
        }
        ForkResult::Parent { child } => {
            drop(theirs);
            Ok(Forked {
                pid: child,
                socket: ours,
            })
        }
    }
}

/// leader-exec's side of the supervisor.
pub struct Handle {
    pid: Pid,
    lines: Lines<BufReader<OwnedReadHalf>>,
    writer: Option<OwnedWriteHalf>,
    /// The command's process group, once started; for the fallback if the supervisor dies.
    group: Option<Pid>,
}

impl Handle {
    /// Registers the socket with the runtime.
    pub fn new(forked: Forked) -> io::Result<Handle> {
        // Should the supervisor die, the command's processes are reparented to us rather than to
        // PID 1, so that the fallback below can reap them at once instead of waiting for PID 1.
        prctl::set_child_subreaper(true)?;
        forked.socket.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(forked.socket)?;
        let (read, write) = stream.into_split();
        Ok(Handle {
            pid: forked.pid,
            lines: BufReader::new(read).lines(),
            writer: Some(write),
            group: None,
        })
    }

    async fn send(&mut self, line: String) -> io::Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| io::Error::other("supervisor already shut down"))?;
        writer.write_all(line.as_bytes()).await
    }

    /// Starts the command with these variables added to leader-exec's environment.
    /// Names and values must not contain tabs or newlines (settings reject control characters).
    pub async fn spawn(&mut self, env: &[(&str, String)]) -> io::Result<()> {
        let mut line = String::from("spawn");
        for (name, value) in env {
            debug_assert!(!value.contains(['\t', '\n']), "{name}={value:?}");
            line.push('\t');
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
        line.push('\n');
        self.send(line).await
    }

    /// Sends a signal to the command's process group (ignored when no command runs).
    pub async fn signal(&mut self, signal: Signal) {
        if let Err(e) = self.send(format!("signal\t{}\n", signal as i32)).await {
            tracing::error!(error = %e, "cannot reach the supervisor; signalling the group directly");
            self.kill_group_directly(signal);
        }
    }

    /// The next event. Cancel-safe. An error means the supervisor is gone: leader-exec has
    /// already SIGKILLed the command's group itself by then.
    pub async fn next_event(&mut self) -> io::Result<Event> {
        let line = match self.lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => {
                self.kill_group_directly(Signal::SIGKILL);
                return Err(io::Error::other("the supervisor process died"));
            }
            Err(e) => {
                self.kill_group_directly(Signal::SIGKILL);
                return Err(e);
            }
        };
        let event = parse_event(&line)
            .ok_or_else(|| io::Error::other(format!("bad message from supervisor: {line:?}")))?;
        match &event {
            Event::Started(pid) => self.group = Some(Pid::from_raw(*pid)),
            Event::GroupEmpty => self.group = None,
            _ => {}
        }
        Ok(event)
    }

    /// Last resort when the supervisor died while the command runs: its death signal has
    /// killed the command, but not the command's children.
    fn kill_group_directly(&mut self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = killpg(group, signal);
            if signal == Signal::SIGKILL {
                // Reap what was reparented to us (the supervisor, the command, orphans) until
                // the group is gone; bounded, should a process hang in the kernel.
                for _ in 0..300 {
                    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                        if status == WaitStatus::StillAlive {
                            break;
                        }
                    }
                    if killpg(group, None) == Err(Errno::ESRCH) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                self.group = None;
            }
        }
    }

    /// Closes the socket and waits for the supervisor to exit. Should a command still run, the
    /// supervisor SIGKILLs its group first.
    pub fn shutdown(mut self) {
        self.writer = None;
        drop(self.lines);
        let _ = waitpid(self.pid, None);
    }
}

fn parse_event(line: &str) -> Option<Event> {
    let mut fields = line.split('\t');
    let event = match fields.next()? {
        "started" => Event::Started(fields.next()?.parse().ok()?),
        "failed" => Event::SpawnFailed {
            errno: fields.next()?.parse().ok()?,
            message: fields.next().unwrap_or("").to_owned(),
        },
        "exited" => Event::Exited(ChildStatus::Exited(fields.next()?.parse().ok()?)),
        "killed" => Event::Exited(ChildStatus::Signaled(fields.next()?.parse().ok()?)),
        "empty" => Event::GroupEmpty,
        _ => return None,
    };
    Some(event)
}

/// The supervisor process's state.
struct Supervisor<'a> {
    socket: UnixStream,
    signals: SignalFd,
    command: &'a [OsString],
    parent: Pid,
    input: Vec<u8>,
    state: State,
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
    fn new(socket: UnixStream, command: &'a [OsString], parent: Pid) -> io::Result<Self> {
        // Signals arrive through a signalfd, read in the poll loop. TERM, INT and the rest reach
        // us only as bystanders (a terminal's Ctrl-C goes to the whole foreground group);
        // leader-exec decides what the command gets. The child starts with an empty mask again
        // (std resets it before exec, and pre_exec below does too).
        let mut mask = SigSet::empty();
        for signal in [Signal::SIGCHLD, Signal::SIGTSTP]
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
            state: State::Idle,
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
                        eprintln!("leader-exec: supervisor: poll: {e}");
                        self.parent_gone();
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
                ChildStatus::Exited(code) => format!("exited\t{code}\n"),
                ChildStatus::Signaled(signal) => format!("killed\t{signal}\n"),
            };
            // Usually the command was alone in its group: say both in one message, so that
            // leader-exec wakes up once and releases the lease at once (the handover path).
            if killpg(pid, None) == Err(Errno::ESRCH) {
                self.state = State::Idle;
                line.push_str("empty\n");
            }
            self.tell(&line)?;
        }
        Ok(())
    }

    fn check_drained(&mut self) -> Result<(), ()> {
        if let State::Draining(group) = self.state {
            // Reap first: a zombie still counts as a member of its group.
            self.reap()?;
            if killpg(group, None) == Err(Errno::ESRCH) {
                self.state = State::Idle;
                self.tell("empty\n")?;
            }
        }
        Ok(())
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
        command.envs(env.iter().copied());
        // Its own process group, so that stopping it reaches everything it started.
        command.process_group(0);
        let supervisor = getpid();
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
            let _ = killpg(group, Signal::SIGKILL);
            for _ in 0..500 {
                let _ = self.reap();
                if killpg(group, None) == Err(Errno::ESRCH) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse() {
        assert_eq!(parse_event("started\t42"), Some(Event::Started(42)));
        assert_eq!(
            parse_event("exited\t7"),
            Some(Event::Exited(ChildStatus::Exited(7)))
        );
        assert_eq!(
            parse_event("killed\t15"),
            Some(Event::Exited(ChildStatus::Signaled(15)))
        );
        assert_eq!(parse_event("empty"), Some(Event::GroupEmpty));
        assert_eq!(
            parse_event("failed\t2\tNo such file"),
            Some(Event::SpawnFailed {
                errno: 2,
                message: "No such file".into()
            })
        );
        assert_eq!(parse_event("nonsense"), None);
    }

    #[test]
    fn spawn_failures_map_to_126_and_127() {
        assert_eq!(spawn_failure_code(Errno::ENOENT as i32), 127);
        assert_eq!(spawn_failure_code(Errno::EACCES as i32), 126);
        assert_eq!(spawn_failure_code(Errno::ENOEXEC as i32), 126);
    }

    #[test]
    fn commands_are_looked_up_on_path() {
        assert!(check_command(&"sh".into()).is_ok());
        assert!(check_command(&"/bin/sh".into()).is_ok());
        assert_eq!(
            check_command(&"no-such-command-xyz".into())
                .unwrap_err()
                .code,
            127
        );
        assert_eq!(
            check_command(&"/no/such/file".into()).unwrap_err().code,
            127
        );
        assert_eq!(check_command(&"/etc/passwd".into()).unwrap_err().code, 126);
        assert_eq!(check_command(&"/tmp".into()).unwrap_err().code, 126);
    }
}
