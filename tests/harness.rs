//! Test harness: a real etcd on free loopback ports, a TCP proxy the test can cut or freeze,
//! leader-exec instances, and child scripts that report what happened to a history file.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

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
pub const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
pub const RETRY_PERIOD: Duration = Duration::from_millis(300);
pub const KILL_AFTER: Duration = Duration::from_secs(1);
pub const TTL: Duration = Duration::from_secs(3);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free port")
}

/// Wall-clock nanoseconds, the same clock `date +%s%N` prints in child scripts.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes. Returns whether it held.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

pub fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state too.
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The children of `pid` (from /proc/PID/task/PID/children).
pub fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A process's name as `pkill` and `killall` see it (/proc/PID/comm).
pub fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// A process's command line as `pkill -f` sees it (NULs shown as spaces).
pub fn cmdline_of(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
        .trim_end()
        .to_owned()
}

/// A process's state letter (R, S, T for stopped, Z…), from /proc/PID/stat.
pub fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// leader-exec's supervisor process: its child named `lx-supervisor`.
pub fn supervisor_of(leader_exec: i32) -> Option<i32> {
    children_of(leader_exec)
        .into_iter()
        .find(|&pid| comm_of(pid) == "lx-supervisor")
}

/// Whether any process of group `pgid` is alive, zombies not counted (a stopped parent leaves its
/// dead children as zombies, which still count as group members for `kill`).
pub fn group_has_live_member(pgid: i32) -> bool {
    if !group_alive(pgid) {
        return false;
    }
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    let mut fields = rest.split_whitespace();
                    let state = fields.next()?.to_owned();
                    let group: i32 = fields.nth(1)?.parse().ok()?;
                    Some(group == pgid && state != "Z" && state != "X")
                })
                .unwrap_or(false)
        })
}

pub fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(Pid::from_raw(pgid), None).is_ok()
}

/// An etcd member's command line: its name, data, client and peer URLs, the initial cluster, and
/// errors only on stderr.
fn etcd_member(name: &str, data_dir: &Path, client: &str, peer: &str, cluster: &str) -> Command {
    let mut command = Command::new("etcd");
    command
        .args(["--name", name, "--data-dir"])
        .arg(data_dir)
        .args(["--listen-client-urls", client])
        .args(["--advertise-client-urls", client])
        .args(["--listen-peer-urls", peer])
        .args(["--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", cluster])
        .args([
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "error",
        ]);
    command
}

/// A single-member etcd on free loopback ports, killed when dropped.
pub struct Etcd {
    pub client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    scheme: &'static str,
    /// Arguments etcdctl needs to reach it (TLS, credentials).
    pub ctl_args: Vec<String>,
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(&[], "http", &[])
    }

    pub fn start_with(extra: &[&str], scheme: &'static str, ctl_args: &[&str]) -> Etcd {
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-etcd")
            .tempdir()
            .unwrap();
        let mut etcd = Etcd {
            client_port: 0,
            peer_port: 0,
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            scheme,
            ctl_args: ctl_args.iter().map(|s| s.to_string()).collect(),
        };
        // A free port can be taken between the probe and etcd's bind: try a few times.
        for _ in 0..5 {
            etcd.client_port = free_port();
            etcd.peer_port = free_port();
            etcd.spawn();
            if etcd.wait_ready(Duration::from_secs(15)) {
                return etcd;
            }
            etcd.kill();
            let _ = std::fs::remove_dir_all(etcd.data_dir());
        }
        panic!("etcd did not start");
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.client_port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    fn spawn(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = etcd_member("n", &self.data_dir(), &client, &peer, &format!("n={peer}"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd is installed (apt-get install etcd-server)");
        self.child = Some(child);
    }

    pub fn wait_ready(&self, timeout: Duration) -> bool {
        wait_for(timeout, || {
            self.ctl(&["endpoint", "health", "--command-timeout=1s"])
                .status
                .success()
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills etcd and starts it again on the same ports and data; returns once it answers.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_ready(Duration::from_secs(15)),
            "etcd did not come back"
        );
    }

    /// SIGSTOP: the process hangs, connections stay open and nothing answers.
    pub fn freeze(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGSTOP).unwrap();
    }

    pub fn thaw(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGCONT).unwrap();
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env_remove("ETCDCTL_ENDPOINTS")
            .arg(format!("--endpoints={}", self.endpoint()))
            .args(&self.ctl_args)
            .args(args)
            .output()
            .expect("etcdctl is installed (apt-get install etcd-client)")
    }

    /// Keys under a prefix.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self.ctl(&["get", "--prefix", "--keys-only", prefix]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Leases granted on this etcd.
    pub fn leases(&self) -> Vec<String> {
        let out = self.ctl(&["lease", "list"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    Frozen,
    Cut,
}

struct ProxyState {
    mode: Mutex<Mode>,
    connections: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
    /// Bytes forwarded so far, both directions.
    forwarded: AtomicU64,
}

/// A TCP proxy on a free loopback port in front of `target`.
/// `cut` resets every connection and refuses new ones; `freeze` keeps connections open but
/// forwards nothing (a black hole); `heal` forwards again.
pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState {
            mode: Mutex::new(Mode::Forward),
            connections: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            forwarded: AtomicU64::new(0),
        });
        let accept_state = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept_state.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if *accept_state.mode.lock().unwrap() == Mode::Cut {
                    reset(&client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(target) else {
                    reset(&client);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut connections = accept_state.connections.lock().unwrap();
                    connections.push(client.try_clone().unwrap());
                    connections.push(server.try_clone().unwrap());
                }
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let state = accept_state.clone();
                    thread::spawn(move || pump(from, to, state));
                }
            }
        });
        Proxy { port, state }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = mode;
    }

    pub fn cut(&self) {
        self.set(Mode::Cut);
        for connection in self.state.connections.lock().unwrap().drain(..) {
            reset(&connection);
        }
    }

    pub fn freeze(&self) {
        self.set(Mode::Frozen);
    }

    pub fn heal(&self) {
        self.set(Mode::Forward);
    }

    /// Bytes forwarded so far in both directions: shows which proxy carries a client's traffic.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Closes with RST rather than FIN, as a dropped route or a dead peer's kernel would.
fn reset(stream: &TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::Linger, &linger);
    let _ = stream.shutdown(Shutdown::Both);
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<ProxyState>) {
    let mut buffer = [0u8; 16384];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        loop {
            match *state.mode.lock().unwrap() {
                Mode::Forward => break,
                Mode::Frozen => {}
                Mode::Cut => {
                    reset(&from);
                    reset(&to);
                    return;
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
        state.forwarded.fetch_add(n as u64, Ordering::SeqCst);
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// A directory for one test: the history file children append to, and scratch files.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("leader-exec-test")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn history_path(&self) -> PathBuf {
        self.path("history")
    }

    /// The history so far.
    pub fn history(&self) -> Vec<Record> {
        std::fs::read_to_string(self.history_path())
            .unwrap_or_default()
            .lines()
            .filter_map(Record::parse)
            .collect()
    }

    /// Waits until a record of `kind` from `name` is in the history, and returns it.
    pub fn wait_record(&self, kind: &str, name: &str, timeout: Duration) -> Option<Record> {
        let mut found = None;
        wait_for(timeout, || {
            found = self
                .history()
                .into_iter()
                .find(|r| r.kind == kind && r.name == name);
            found.is_some()
        });
        found
    }

    /// A `sh -c` job that records its start (token, pid, time), checks that no process of an
    /// earlier job is still alive at that instant (recording `overlap` otherwise), runs `body`,
    /// and records its end. `$h` is the history file and `$pids` the file of every job pid.
    pub fn job(&self, name: &str, body: &str) -> Vec<String> {
        let script = format!(
            r#"h='{h}'; pids='{p}'; export h pids
echo "start {name} $LEADER_TOKEN $$ $(date +%s%N)" >> "$h"
for p in $(cat "$pids" 2>/dev/null); do
  if [ -d "/proc/$p" ] && ! grep -q '^[^)]*) Z' "/proc/$p/stat" 2>/dev/null; then echo "overlap {name} $p $(date +%s%N)" >> "$h"; fi
done
echo $$ >> "$pids"
{body}
echo "end {name} $(date +%s%N)" >> "$h"
"#,
            h = self.history_path().display(),
            p = self.path("pids").display(),
        );
        vec!["sh".into(), "-c".into(), script]
    }
}

/// One line of history: `KIND NAME FIELD...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: String,
    pub name: String,
    pub fields: Vec<String>,
}

impl Record {
    fn parse(line: &str) -> Option<Record> {
        let mut words = line.split_whitespace();
        Some(Record {
            kind: words.next()?.to_owned(),
            name: words.next()?.to_owned(),
            fields: words.map(str::to_owned).collect(),
        })
    }

    /// For `start`: the token.
    pub fn token(&self) -> i64 {
        self.fields[0].parse().unwrap()
    }

    /// For `start`: the pid.
    pub fn pid(&self) -> i32 {
        self.fields[1].parse().unwrap()
    }

    /// The record's timestamp (its last field), wall-clock nanoseconds.
    pub fn time(&self) -> u128 {
        self.fields.last().unwrap().parse().unwrap()
    }
}

/// Checks the safety property on a history: no job started while a process of an earlier job
/// was alive (each job checks this itself at its start, see `Scratch::job`), no job started before
/// an earlier job's recorded end, and tokens strictly increase in start order.
pub fn assert_one_at_a_time(history: &[Record]) {
    let overlaps: Vec<_> = history.iter().filter(|r| r.kind == "overlap").collect();
    assert!(
        overlaps.is_empty(),
        "jobs overlapped: {overlaps:?}\n{history:#?}"
    );
    let mut last_token = 0;
    let mut last_end = 0;
    let mut seen = HashSet::new();
    for record in history {
        match record.kind.as_str() {
            "start" => {
                assert!(
                    record.token() > last_token,
                    "token {} after {last_token}: {history:#?}",
                    record.token()
                );
                assert!(
                    record.time() > last_end,
                    "{} started before an earlier end: {history:#?}",
                    record.name
                );
                assert!(
                    seen.insert(record.name.clone()),
                    "{} started twice",
                    record.name
                );
                last_token = record.token();
            }
            "end" => {
                assert!(
                    seen.contains(&record.name),
                    "{} ended without a start",
                    record.name
                );
                last_end = last_end.max(record.time());
            }
            _ => {}
        }
    }
}

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

pub fn leader_exec() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leader-exec"));
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

/// An etcd cluster of several members on free loopback ports, with fast raft timing (heartbeat
/// 50 ms, election timeout 500 ms: a new raft leader within about 0.5–1.5 s). Members can be
/// killed and restarted one at a time; every member is killed when the cluster is dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    token: String,
    members: Vec<Member>,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Cluster {
    pub fn start(size: usize) -> Cluster {
        // A free port can be taken between the probe and etcd's bind: try a few times.
        for attempt in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("leader-exec-cluster")
                .tempdir()
                .unwrap();
            let members = (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port: free_port(),
                    child: None,
                })
                .collect();
            let mut cluster = Cluster {
                dir,
                token: format!("leader-exec-{}-{attempt}", std::process::id()),
                members,
            };
            for i in 0..size {
                cluster.spawn(i);
            }
            if cluster.wait_healthy(Duration::from_secs(20)) {
                return cluster;
            }
        }
        panic!("etcd cluster did not start");
    }

    fn spawn(&mut self, i: usize) {
        let initial = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let member = &self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", member.name)))
            .unwrap();
        // On a restart the data directory exists and etcd ignores the --initial-* flags.
        let mut command = etcd_member(
            &member.name,
            &self.dir.path().join(&member.name),
            &client,
            &peer,
            &initial,
        );
        // Should the test process die, its members die with it. (The death signal fires when the
        // spawning thread ends; a test's thread outlives the cluster it started.)
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                Ok(())
            });
        }
        let child = command
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd is installed (apt-get install etcd-server)");
        self.members[i].child = Some(child);
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Every member's endpoint, comma-separated.
    pub fn endpoints(&self) -> String {
        (0..self.size())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The endpoints of the members that run, comma-separated.
    pub fn live_endpoints(&self) -> String {
        (0..self.size())
            .filter(|&i| self.members[i].child.is_some())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port))
    }

    /// SIGKILL to member `i`; returns once it is reaped.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its ports and data; returns once every member answers.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        assert!(
            self.wait_healthy(Duration::from_secs(20)),
            "member {i} did not come back"
        );
    }

    fn ctl_at(&self, endpoints: &str, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env_remove("ETCDCTL_ENDPOINTS")
            .arg(format!("--endpoints={endpoints}"))
            .args(args)
            .output()
            .expect("etcdctl is installed (apt-get install etcd-client)")
    }

    /// etcdctl against the members that run.
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_at(&self.live_endpoints(), args)
    }

    /// Whether member `i` answers a health check (a linearizable read through raft).
    pub fn member_healthy(&self, i: usize) -> bool {
        self.ctl_at(
            &self.endpoint(i),
            &["endpoint", "health", "--command-timeout=1s"],
        )
        .status
        .success()
    }

    pub fn wait_healthy(&self, timeout: Duration) -> bool {
        wait_for(timeout, || {
            (0..self.size()).all(|i| self.members[i].child.is_some() && self.member_healthy(i))
        })
    }

    /// The member that is the raft leader, as the running members report it.
    pub fn raft_leader(&self) -> Option<usize> {
        let out = self.ctl(&["endpoint", "status", "-w", "json", "--command-timeout=1s"]);
        let statuses: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let statuses = statuses.as_array()?;
        let leader = statuses
            .iter()
            .find_map(|s| s["Status"]["leader"].as_u64())?;
        statuses.iter().find_map(|s| {
            if s["Status"]["header"]["member_id"].as_u64()? != leader {
                return None;
            }
            let endpoint = s["Endpoint"].as_str()?;
            (0..self.size()).find(|&i| self.endpoint(i) == endpoint)
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.size() {
            self.kill(i);
        }
    }
}

/// A store the store-independent tests run against: a real server on free loopback ports,
/// stopped when dropped.
pub trait Store: Sized {
    /// A name for messages.
    const NAME: &'static str;

    fn start() -> Self;

    /// The `--endpoints` value that reaches it.
    fn endpoint(&self) -> String;

    /// Its TCP address (for a proxy in front of it).
    fn addr(&self) -> SocketAddr;

    /// The `--endpoints` value that reaches it through `proxy`.
    fn endpoint_via(&self, proxy: &Proxy) -> String;

    /// Kills it and starts it again on the same port and data; returns once it answers.
    fn restart(&mut self);

    /// How many instances hold a claim on `lease` as the store sees it: etcd, the candidate keys
    /// (leader and waiters); PostgreSQL, 1 while the row has an unexpired holder (waiters hold
    /// nothing there).
    fn claims(&self, lease: &str) -> usize;

    /// Whatever is still held anywhere: etcd, election keys and leases; PostgreSQL, rows with an
    /// unexpired holder. Empty once every instance has released.
    fn held(&self) -> Vec<String>;
}

impl Store for Etcd {
    const NAME: &'static str = "etcd";

    fn start() -> Self {
        Etcd::start()
    }

    fn endpoint(&self) -> String {
        Etcd::endpoint(self)
    }

    fn addr(&self) -> SocketAddr {
        Etcd::addr(self)
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        proxy.endpoint()
    }

    fn restart(&mut self) {
        Etcd::restart(self)
    }

    fn claims(&self, lease: &str) -> usize {
        self.keys(&format!("/leader-exec/{lease}/")).len()
    }

    fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self
            .keys("/leader-exec/")
            .into_iter()
            .filter(|k| !k.starts_with("/leader-exec/."))
            .collect();
        held.extend(self.leases().into_iter().map(|l| format!("lease {l}")));
        held
    }
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server on a free loopback port, run as the `postgres` user (initdb refuses root)
/// on a temporary directory it owns; stopped (immediate mode) when dropped.
pub struct Postgres {
    pub port: u16,
    dir: tempfile::TempDir,
    running: bool,
    /// More server options (`-c name=value …`).
    extra: String,
}

fn as_postgres(program: &str) -> Command {
    let mut command = Command::new("runuser");
    command.args(["-u", "postgres", "--", &format!("{PG_BIN}/{program}")]);
    command
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with("")
    }

    /// Starts with more server options, e.g. `-c shared_preload_libraries=pg_stat_statements`.
    pub fn start_with(extra: &str) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pg")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        let out = as_postgres("initdb")
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .output()
            .expect("PostgreSQL is installed (apt-get install postgresql)");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            port: 0,
            dir,
            running: false,
            extra: extra.to_owned(),
        };
        // A free port can be taken between the probe and the server's bind: try a few times.
        for _ in 0..5 {
            pg.port = free_port();
            if pg.spawn() {
                return pg;
            }
        }
        panic!("PostgreSQL did not start");
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c max_connections=600 {}",
            self.port,
            self.data_dir().display(),
            self.extra
        );
        let status = as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "30", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        self.running = status.success();
        self.running
    }

    /// `pg_ctl stop -m immediate`: like a crash, nothing is flushed or said goodbye.
    pub fn kill(&mut self) {
        if self.running {
            self.thaw();
            let _ = as_postgres("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            self.running = false;
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "PostgreSQL did not come back");
    }

    /// Restarts with TLS on, serving `cert` and `key` (PEM files the test made).
    pub fn enable_tls(&mut self, cert: &Path, key: &Path) {
        for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
            let target = self.data_dir().join(to);
            std::fs::copy(from, &target).unwrap();
            let ok = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&target)
                .status()
                .unwrap()
                .success();
            assert!(ok);
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        self.extra.push_str(" -c ssl=on");
        self.restart();
    }

    /// The postmaster and every backend (SIGSTOP of the postmaster alone leaves established
    /// sessions serving).
    fn pids(&self) -> Vec<i32> {
        let Ok(text) = std::fs::read_to_string(self.data_dir().join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(main) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![main];
        pids.extend(children_of(main));
        pids
    }

    pub fn freeze(&self) {
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
    }

    pub fn thaw(&self) {
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }

    pub fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    /// Runs SQL with psql; returns stdout (unaligned, tuples only). Panics on failure.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.try_psql(sql);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_psql(&self, sql: &str) -> Output {
        Command::new("psql")
            .env_remove("PGPASSWORD")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url(self.port))
            .args(["-c", sql])
            .output()
            .expect("psql is installed (apt-get install postgresql)")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Store for Postgres {
    const NAME: &'static str = "postgres";

    fn start() -> Self {
        Postgres::start()
    }

    fn endpoint(&self) -> String {
        self.url(self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.url(proxy.port)
    }

    fn restart(&mut self) {
        Postgres::restart(self)
    }

    fn claims(&self, lease: &str) -> usize {
        let sql = format!(
            "SELECT count(*) FROM leader_exec_leases WHERE name = '{lease}' AND holder IS NOT NULL AND expires_at > now()"
        );
        match self.try_psql(&sql) {
            out if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(0),
            // No table yet: nobody has run.
            _ => 0,
        }
    }

    fn held(&self) -> Vec<String> {
        let out = self.try_psql(
            "SELECT name || ' ' || holder FROM leader_exec_leases WHERE holder IS NOT NULL AND expires_at > now()",
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// Whether `instance` has joined the election (its log says it campaigns): a store-independent
/// "it stands in line".
pub fn campaigning(instance: &Instance) -> bool {
    instance.stderr().contains(" campaigning")
}
