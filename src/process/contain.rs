//! `--contain cgroup`: the command runs in a cgroup v2 of its own, so that stopping the job
//! reaches every process of it, also those that left its process group (`setsid`, a double fork,
//! anything that daemonizes), which `killpg` never reaches.
//!
//! ```text
//! <leader-exec's own cgroup>/            (from /proc/self/cgroup's `0::` line)
//!   leader-exec.PID/                      created here, mode 0700; only the command is moved in
//!     COMMAND, its group, whatever left the group
//!   leader-exec.PID.health/               with `--health-cmd`: the checks (run/health.rs), each
//!                                         check's leftovers killed when it ends
//! ```
//!
//! leader-exec and its supervisor stay outside it: `cgroup.kill` must never take the processes
//! that are to report the job's end. The command is moved in between fork and exec (it writes
//! `0`, "myself", to `cgroup.procs`, opened before the fork), so there is no instant in which it
//! runs outside; should the move fail, the exec never happens and the spawn is reported failed.
//!
//! The job is over when the cgroup holds no process (`cgroup.events`: `populated 0`): after the
//! command's process group is empty, whatever is left in the cgroup escaped the group and is
//! killed with `cgroup.kill` (Linux 5.14 or later), which the kernel applies to every process of
//! the cgroup at once, new forks included.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the unified (v2) hierarchy is mounted: the whole of /sys/fs/cgroup on a unified host,
/// /sys/fs/cgroup/unified on a hybrid one (v1 controllers beside it).
const MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// How long leader-exec and its supervisor, on their way out, wait for a killed cgroup to empty
/// before removing it (SIGKILLed processes are gone in milliseconds unless stuck in the kernel).
pub const EXIT_WAIT: Duration = Duration::from_secs(1);

/// The job's cgroup. Cloned into the supervisor by the fork; both sides may kill and remove it.
#[derive(Clone, Debug)]
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Creates the job's cgroup beneath leader-exec's own. The error is one line naming what is
    /// missing; it comes before the instance joins the line.
    pub fn create() -> Result<Cgroup, String> {
        Cgroup::create_named(&format!("leader-exec.{}", std::process::id()))
    }

    /// Creates the cgroup of the `--health-cmd` checks, beside the job's: `cgroup.kill` of the
    /// job's never reaches a check, nor a check's the job.
    pub fn create_for_checks() -> Result<Cgroup, String> {
        Cgroup::create_named(&format!("leader-exec.{}.health", std::process::id()))
    }

    fn create_named(name: &str) -> Result<Cgroup, String> {
        let mount = unified_mount().ok_or(
            "--contain cgroup: no cgroup v2 hierarchy is mounted (at /sys/fs/cgroup or /sys/fs/cgroup/unified)",
        )?;
        let own = own_cgroup().ok_or(
            "--contain cgroup: /proc/self/cgroup has no cgroup v2 entry (a 0:: line) for this process",
        )?;
        let parent = match own.strip_prefix("/") {
            Ok(relative) if !relative.as_os_str().is_empty() => mount.join(relative),
            _ => mount,
        };
        let dir = parent.join(name);
        match make_dir(&dir) {
            Ok(()) => {}
            // A cgroup of an earlier leader-exec that had this pid and was SIGKILLed with its
            // supervisor: that leader-exec is certainly dead (we have its pid), so its job is
            // an orphan. Kill it and take the name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let stale = Cgroup { dir: dir.clone() };
                stale.kill_and_remove(Duration::from_secs(1));
                make_dir(&dir).map_err(|e| cannot_create(&parent, &e))?;
            }
            Err(e) => return Err(cannot_create(&parent, &e)),
        }
        let cgroup = Cgroup { dir };
        if !cgroup.file("cgroup.kill").exists() {
            cgroup.remove();
            return Err(format!(
                "--contain cgroup: {} has no cgroup.kill (Linux 5.14 or later is needed)",
                parent.display()
            ));
        }
        if let Err(e) = cgroup.open_procs() {
            cgroup.remove();
            return Err(format!(
                "--contain cgroup: cannot write {}: {e}",
                cgroup.file("cgroup.procs").display()
            ));
        }
        Ok(cgroup)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `cgroup.procs`, opened for the command to move itself in between fork and exec. CLOEXEC:
    /// the command never keeps it.
    pub fn open_procs(&self) -> io::Result<OwnedFd> {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(self.file("cgroup.procs"))?;
        Ok(file.into())
    }

    /// Kills every process in the cgroup (no effect on an empty one). Never waits.
    pub fn kill(&self) {
        if let Ok(mut file) = OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(self.file("cgroup.kill"))
        {
            let _ = file.write_all(b"1");
        }
    }

    /// Whether a process (zombies not counted) is in the cgroup. A cgroup that cannot be read
    /// (removed) holds nothing.
    pub fn populated(&self) -> bool {
        fs::read_to_string(self.file("cgroup.events"))
            .map(|events| events.lines().any(|line| line == "populated 1"))
            .unwrap_or(false)
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.file("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Removes the (empty) cgroup; nothing when it is gone already or still holds a process.
    pub fn remove(&self) {
        let _ = fs::remove_dir(&self.dir);
    }

    /// Kills what is left, waits (at most `budget`) for the cgroup to empty, and removes it.
    /// For ends where nobody else waits for the job: leader-exec's exit, the supervisor's.
    pub fn kill_and_remove(&self, budget: Duration) {
        let start = Instant::now();
        while self.populated() {
            self.kill();
            if start.elapsed() >= budget {
                break;
            }
            // Children of the caller that were killed are reaped by the caller's own loop; the
            // cgroup counts a zombie as gone already.
            std::thread::sleep(Duration::from_millis(2));
        }
        self.remove();
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`. Between fork and
/// exec: only `write(2)`, which is async-signal-safe.
pub fn enter(procs: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: a valid fd and a buffer of the length given.
    let written = unsafe { nix::libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
    if written == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn make_dir(dir: &Path) -> io::Result<()> {
    // mkdir never follows a symlink in its last component (it fails with EEXIST), and a cgroup
    // file system cannot hold symlinks: nothing below the mount point is followed.
    fs::DirBuilder::new().mode(0o700).create(dir)
}

fn cannot_create(parent: &Path, e: &io::Error) -> String {
    let hint = if e.kind() == io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(nix::libc::EROFS)
    {
        " (needs root, or a delegated cgroup: Delegate=yes under systemd)"
    } else {
        ""
    };
    format!(
        "--contain cgroup: cannot create a cgroup in {}: {e}{hint}",
        parent.display()
    )
}

/// The first of [`MOUNTS`] that is a cgroup2 file system.
fn unified_mount() -> Option<PathBuf> {
    MOUNTS.iter().map(PathBuf::from).find(|path| {
        nix::sys::statfs::statfs(path)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    })
}

/// leader-exec's own cgroup v2 path, from /proc/self/cgroup (`0::/PATH`); refused when it could
/// leave the hierarchy (`..`) or names a removed cgroup.
fn own_cgroup() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    let path = PathBuf::from(path);
    let clean = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !path.to_string_lossy().ends_with(" (deleted)");
    clean.then_some(path)
}

/// `--contain pidns`: the supervisor is PID 1 of a new PID namespace, the command and everything
/// it starts live in it, and when the supervisor dies, for any reason (SIGKILL of leader-exec and
/// the supervisor together included), the kernel SIGKILLs every process of the namespace.
///
/// Made by `unshare(CLONE_NEWPID)` in leader-exec just before the supervisor's fork (the next
/// child is the namespace's init), after which leader-exec joins its own namespace again for its
/// children (`setns`), so that nothing else it might start lands in the job's namespace.
pub struct PidNamespace {
    own: std::os::fd::OwnedFd,
}

impl PidNamespace {
    /// The error is one line naming what is missing; it comes before the store is contacted.
    pub fn prepare() -> Result<PidNamespace, String> {
        let own = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_CLOEXEC)
            .open("/proc/self/ns/pid")
            .map_err(|e| format!("--contain pidns: cannot open /proc/self/ns/pid: {e}"))?;
        // SAFETY: a plain system call with flags.
        if unsafe { nix::libc::unshare(nix::libc::CLONE_NEWPID) } != 0 {
            let e = io::Error::last_os_error();
            return Err(format!(
                "--contain pidns: cannot create a PID namespace: {e} (needs CAP_SYS_ADMIN: root)"
            ));
        }
        Ok(PidNamespace { own: own.into() })
    }

    /// In leader-exec after the fork: its later children are born in its own namespace again.
    pub fn restore(self) -> io::Result<()> {
        // SAFETY: a valid namespace fd of the kind named.
        if unsafe { nix::libc::setns(self.own.as_raw_fd(), nix::libc::CLONE_NEWPID) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// In the supervisor, PID 1 of the new namespace: a mount namespace of its own, in which /proc
/// is the new PID namespace's, so that `ps` in the job shows the job (and /proc/PID names the
/// pids the command sees). Nothing is mounted or changed outside: the mounts are made private
/// first, so the new /proc does not propagate to the host.
pub fn init_pid_namespace() -> io::Result<()> {
    own_proc()
        .map_err(|(what, e)| io::Error::new(e.kind(), format!("--contain pidns: {what}: {e}")))
}

/// [`init_pid_namespace`] for a `--health-cmd` check, PID 1 of a namespace of its own, between
/// fork and exec of a multi-threaded leader-exec: system calls only, no allocation.
pub fn init_check_namespace() -> io::Result<()> {
    own_proc().map_err(|(_, e)| e)
}

/// A mount namespace with the calling process's PID namespace's /proc; what failed, and why.
/// System calls only (async-signal-safe).
fn own_proc() -> Result<(), (&'static str, io::Error)> {
    let check = |what: &'static str, result: i32| {
        if result == 0 {
            Ok(())
        } else {
            Err((what, io::Error::last_os_error()))
        }
    };
    // SAFETY: plain system calls with constant, NUL-terminated arguments.
    unsafe {
        check(
            "cannot create a mount namespace",
            nix::libc::unshare(nix::libc::CLONE_NEWNS),
        )?;
        check(
            "cannot make the mounts private",
            nix::libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                nix::libc::MS_REC | nix::libc::MS_PRIVATE,
                std::ptr::null(),
            ),
        )?;
        check(
            "cannot mount /proc",
            nix::libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                nix::libc::MS_NOSUID | nix::libc::MS_NODEV | nix::libc::MS_NOEXEC,
                std::ptr::null(),
            ),
        )?;
    }
    Ok(())
}

/// The pid, in leader-exec's namespace, of the child of `parent` whose pid in the innermost
/// namespace is `inner` (the last field of `NSpid:` in /proc/PID/status).
pub fn outer_pid(parent: i32, inner: i32) -> Option<i32> {
    crate::process::procfs::children_of(parent)
        .into_iter()
        .find(|&pid| {
            fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| {
                    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
                    line.split_whitespace().last()?.parse::<i32>().ok()
                })
                == Some(inner)
        })
}

/// The supervisor's first line with `--contain pidns`: `ready`, or `error\tWHY` (read a byte at a
/// time, so that nothing after it is taken from the socket; bounded, the supervisor may hang).
pub fn namespace_ready(socket: &std::os::unix::net::UnixStream) -> io::Result<()> {
    socket.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while std::io::Read::read(&mut &*socket, &mut byte)? == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    socket.set_read_timeout(None)?;
    match String::from_utf8_lossy(&line).as_ref() {
        "ready" => Ok(()),
        other => Err(io::Error::other(
            other
                .strip_prefix("error\t")
                .unwrap_or("--contain pidns: the supervisor did not start")
                .to_owned(),
        )),
    }
}
