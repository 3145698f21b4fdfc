//! Running leader-exec: the binary under test, [`Instance`] (a running one, killed when dropped),
//! and the timing flags tests pass.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::wait_for;

/// Timing flags for tests: fast enough to keep the suite short, slack enough for a loaded
/// 2-core machine. 1.5 s + 1 s + 0.25 s margin <= 3 s.
pub const FAST: [&str; 8] = [
    "--ttl",
    "3s",
    "--renew-deadline",
    "1500ms",
    "--retry-period",
    "300ms",
    "--kill-after",
    "1s",
];
/// Timing for the failover tests: the holder stops its command within 3 s + 1 s of its last
/// renewal, well inside the 6 s a taker waits.
pub const FAILOVER: [&str; 8] = [
    "--ttl",
    "6s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "300ms",
    "--kill-after",
    "1s",
];

/// `--endpoints ENDPOINT --lease LEASE --identity IDENTITY` and the [`FAILOVER`] timing.
pub fn failover_args<'a>(endpoint: &'a str, lease: &'a str, identity: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "--endpoints",
        endpoint,
        "--lease",
        lease,
        "--identity",
        identity,
    ];
    args.extend(FAILOVER);
    args
}

pub const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
pub const RETRY_PERIOD: Duration = Duration::from_millis(300);
pub const KILL_AFTER: Duration = Duration::from_secs(1);
pub const TTL: Duration = Duration::from_secs(3);

/// A child process the test started, killed when the test ends however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A running leader-exec.
pub struct Instance {
    child: Option<Child>,
    stderr: PathBuf,
    _stderr_dir: tempfile::TempDir,
    pub status: Option<ExitStatus>,
}

/// The binary under test; outside a test binary (bench/servers.rs, which starts no instances)
/// cargo does not name it.
const LEADER_EXEC: &str = match option_env!("CARGO_BIN_EXE_leader-exec") {
    Some(path) => path,
    None => "leader-exec",
};

pub fn leader_exec() -> Command {
    let mut command = Command::new(LEADER_EXEC);
    for (name, _) in std::env::vars() {
        if name.starts_with("LEADER_EXEC_")
            || name.starts_with("ETCDCTL_")
            || name.starts_with("LEADER_")
        {
            command.env_remove(name);
        }
    }
    command
}

/// [`leader_exec`] run as `nobody` (through `runuser`), from a link to (or copy of) the binary
/// in a directory anyone may enter: the build's own directory may be private (a checkout under
/// a 0700 mktemp directory), and then `nobody` could not even start it. Made once per test
/// process; a hard link costs nothing when the temporary directory is on the build's file
/// system.
pub fn leader_exec_as_nobody() -> Command {
    use std::os::unix::fs::PermissionsExt;
    static SHARED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let binary = SHARED.get_or_init(|| {
        let shared =
            std::env::temp_dir().join(format!("leader-exec-nobody-{}", std::process::id()));
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let binary = shared.join("leader-exec");
        let _ = std::fs::remove_file(&binary);
        if std::fs::hard_link(LEADER_EXEC, &binary).is_err() {
            std::fs::copy(LEADER_EXEC, &binary).unwrap();
        }
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        binary
    });
    let mut runuser = Command::new("runuser");
    runuser.args(["-u", "nobody", "--"]).arg(binary);
    for (name, value) in leader_exec().get_envs() {
        match value {
            Some(value) => runuser.env(name, value),
            None => runuser.env_remove(name),
        };
    }
    runuser
}

impl Instance {
    /// Starts `command` with stderr going to `stderr` (a pipe the test holds, say) instead of a
    /// file; `Instance::stderr` is then empty.
    pub fn start_with_stderr(command: &mut Command, stderr: Stdio) -> Instance {
        let dir = tempfile::tempdir().unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Instance {
            child: Some(child),
            stderr: dir.path().join("stderr"),
            _stderr_dir: dir,
            status: None,
        }
    }

    /// Starts `leader-exec ARGS`, stdout to null, stderr kept for the test to read.
    pub fn start(args: &[&str], command: &[String]) -> Instance {
        Instance::start_command(leader_exec().args(args).arg("--").args(command))
    }

    pub fn start_command(command: &mut Command) -> Instance {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Instance {
            child: Some(child),
            stderr,
            _stderr_dir: dir,
            status: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// Waits up to `timeout` for leader-exec to exit; returns its exit code (None: still running).
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        if self.status.is_none() {
            let child = self.child.as_mut().unwrap();
            wait_for(timeout, || matches!(child.try_wait(), Ok(Some(_))));
            self.status = child.try_wait().unwrap();
        }
        self.status.map(|s| s.code().unwrap_or(-1))
    }

    pub fn running(&mut self) -> bool {
        self.wait(Duration::ZERO).is_none()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && child.try_wait().ok().flatten().is_none()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Timing with a renew deadline long enough to ride out an etcd restart on a loaded machine.
/// 5 s + 1 s + 0.4 s margin <= 8 s.
pub const PATIENT: [&str; 8] = [
    "--ttl",
    "8s",
    "--renew-deadline",
    "5s",
    "--retry-period",
    "500ms",
    "--kill-after",
    "1s",
];

pub fn patient_lease_args<'a>(etcd_endpoint: &'a str, lease: &'a str) -> Vec<&'a str> {
    let mut args = vec!["-v", "--endpoints", etcd_endpoint, "--lease", lease];
    args.extend(PATIENT);
    args
}

pub fn lease_args<'a>(etcd_endpoint: &'a str, lease: &'a str) -> Vec<&'a str> {
    let mut args = vec!["-v", "--endpoints", etcd_endpoint, "--lease", lease];
    args.extend(FAST);
    args
}

pub fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// Whether `instance` has joined the election (its log says it campaigns): a store-independent
/// "it stands in line".
pub fn campaigning(instance: &Instance) -> bool {
    instance.stderr().contains(" campaigning")
}
