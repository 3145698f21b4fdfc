//! Test harness: a real etcd (or PostgreSQL, or ZooKeeper) on free loopback ports, a TCP proxy
//! the test can cut or freeze, leader-exec instances, child scripts that report what happened to
//! a history file, and a Curator LeaderLatch participant for ZooKeeper interoperability.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
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

/// Tests run three at a time (`.cargo/config.toml`), but a test that starts hundreds of
/// instances loads two cores so much that the timing of a test beside it breaks (a store
/// restart outlasting a renew deadline, a connection outlasting --connect-timeout). Such a test
/// calls [`alone`] first and runs with no other test of its binary beside it; every other test
/// shares the machine from the moment it starts a store until its thread ends.
static MACHINE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This test thread's share of [`MACHINE`], taken by the first store it starts.
    static SHARE: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
    /// Set while this thread's test runs [`alone`]: its stores take no share.
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// Called by every store's start: waits while a test runs alone, then holds a share of the
/// machine until this test's thread ends (libtest runs each test on a thread of its own).
pub fn share_machine() {
    if ALONE.with(Cell::get) {
        return;
    }
    SHARE.with(|share| {
        let mut share = share.borrow_mut();
        if share.is_none() {
            *share = Some(MACHINE.read().unwrap_or_else(PoisonError::into_inner));
        }
    });
}

/// The machine to this test alone, until the returned guard drops; waits for the tests
/// already running to end. Call it before starting any store.
#[must_use]
pub fn alone() -> Alone {
    assert!(
        SHARE.with(|share| share.borrow().is_none()),
        "alone() must come before the test starts a store"
    );
    let guard = MACHINE.write().unwrap_or_else(PoisonError::into_inner);
    ALONE.with(|alone| alone.set(true));
    Alone(guard)
}

pub struct Alone(RwLockWriteGuard<'static, ()>);

impl Drop for Alone {
    fn drop(&mut self) {
        ALONE.with(|alone| alone.set(false));
    }
}

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
        share_machine();
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
    /// The benchmarks' black hole (`black_hole_after_next_request`): set, the next HTTP/2 DATA
    /// frame a client sends goes through and then everything that client side sends is dropped.
    armed: AtomicBool,
    black_hole: AtomicBool,
    /// CLOCK_MONOTONIC ns (0: none yet): when the kernel received the last request let through
    /// (its receive timestamp: on loopback, stamped inside the sender's write), when the proxy
    /// read it, and when the first bytes came back after it.
    last_request_sent: AtomicU64,
    last_request_read: AtomicU64,
    first_answer: AtomicU64,
    /// `freeze_after_request_containing`: the bytes that trip the freeze, while armed.
    needle: Mutex<Option<Vec<u8>>>,
    tripped: AtomicBool,
}

impl ProxyState {
    fn new(mode: Mode, stopped: bool) -> ProxyState {
        ProxyState {
            mode: Mutex::new(mode),
            connections: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(stopped),
            forwarded: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            black_hole: AtomicBool::new(false),
            last_request_sent: AtomicU64::new(0),
            last_request_read: AtomicU64::new(0),
            first_answer: AtomicU64::new(0),
            needle: Mutex::new(None),
            tripped: AtomicBool::new(false),
        }
    }
}

/// CLOCK_MONOTONIC in ns: the clock bench/stamp.rs records on, so the benchmark runner can compare
/// the proxy's instants with the child's.
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn realtime_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Follows the HTTP/2 frames a client sends, to tell where a DATA frame (a gRPC message, such as
/// an etcd lease renewal) ends.
#[derive(Default)]
struct FrameScanner {
    preface_seen: usize,
    header: Vec<u8>,
    payload_left: usize,
    current: (u8, usize),
}

impl FrameScanner {
    const PREFACE: usize = 24;

    /// The end offsets in `data` of the non-empty DATA frames that end in it.
    fn data_frame_ends(&mut self, data: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut i = 0;
        while i < data.len() {
            if self.preface_seen < Self::PREFACE {
                let take = (Self::PREFACE - self.preface_seen).min(data.len() - i);
                self.preface_seen += take;
                i += take;
            } else if self.payload_left > 0 {
                let take = self.payload_left.min(data.len() - i);
                self.payload_left -= take;
                i += take;
                if self.payload_left == 0 && self.current.0 == 0 && self.current.1 > 0 {
                    ends.push(i);
                }
            } else {
                let take = (9 - self.header.len()).min(data.len() - i);
                self.header.extend_from_slice(&data[i..i + take]);
                i += take;
                if self.header.len() == 9 {
                    let h = std::mem::take(&mut self.header);
                    let length = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    self.current = (h[3], length);
                    self.payload_left = length;
                }
            }
        }
        ends
    }
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
        let state = Arc::new(ProxyState::new(Mode::Forward, false));
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
                // Receive timestamps on what the client sends (for the benchmarks' black hole).
                let _ = nix::sys::socket::setsockopt(
                    &client,
                    nix::sys::socket::sockopt::ReceiveTimestampns,
                    &true,
                );
                for (from, to, upstream) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        true,
                    ),
                    (server, client, false),
                ] {
                    let state = accept_state.clone();
                    thread::spawn(move || pump(from, to, state, upstream));
                }
            }
        });
        Proxy { port, state }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A "proxy" on a free loopback port where nothing listens: every connection is refused.
    /// `Store::endpoint_via` turns it into an endpoint of the store's kind.
    pub fn nothing_listening() -> Proxy {
        Proxy {
            port: free_port(),
            state: Arc::new(ProxyState::new(Mode::Cut, true)),
        }
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

    /// Lets the next chunk a client sends that carries `needle` (a ZooKeeper path, SQL text, a
    /// gRPC key: all travel as they are) through to the server, then freezes: the answer to that
    /// request never comes back until `heal`. A write whose answer is lost, and a client stalled
    /// between a write and its next step.
    pub fn freeze_after_request_containing(&self, needle: &[u8]) {
        self.state.tripped.store(false, Ordering::SeqCst);
        *self.state.needle.lock().unwrap() = Some(needle.to_vec());
    }

    /// Whether the armed request went through (and the proxy froze after it).
    pub fn tripped(&self) -> bool {
        self.state.tripped.load(Ordering::SeqCst)
    }

    /// Bytes forwarded so far in both directions: shows which proxy carries a client's traffic.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// Lets the next HTTP/2 DATA frame a client sends (a gRPC message: an etcd lease renewal)
    /// through, and the answers to it, then drops everything clients send, as a black-holed route
    /// would. `last_request` tells when that request was sent.
    pub fn black_hole_after_next_request(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// After `black_hole_after_next_request`: (when the kernel received the last request let
    /// through, when the proxy read it, when the first answer to it came back), CLOCK_MONOTONIC
    /// ns; None for what has not happened.
    pub fn last_request(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let get = |a: &AtomicU64| Some(a.load(Ordering::SeqCst)).filter(|&t| t != 0);
        (
            get(&self.state.last_request_sent),
            get(&self.state.last_request_read),
            get(&self.state.first_answer),
        )
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

/// Reads what the client sent, with the kernel's receive timestamp as CLOCK_MONOTONIC ns.
fn read_stamped(from: &TcpStream, buffer: &mut [u8]) -> std::io::Result<(usize, Option<u64>)> {
    use std::os::fd::AsRawFd;
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let message = nix::sys::socket::recvmsg::<()>(
        from.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        nix::sys::socket::MsgFlags::empty(),
    )?;
    let stamp = message.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            nix::sys::socket::ControlMessageOwned::ScmTimestampns(t) => {
                let real = t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64;
                // On CLOCK_REALTIME; moved onto CLOCK_MONOTONIC by the clocks' offset now.
                Some((monotonic_ns() + real).saturating_sub(realtime_ns()))
            }
            _ => None,
        })
    });
    Ok((message.bytes, stamp))
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<ProxyState>, upstream: bool) {
    let mut buffer = [0u8; 16384];
    let mut frames = FrameScanner::default();
    loop {
        let (mut n, stamp) = match if upstream {
            read_stamped(&from, &mut buffer)
        } else {
            from.read(&mut buffer).map(|n| (n, None))
        } {
            Ok((0, _)) | Err(_) => break,
            Ok(read) => read,
        };
        if upstream {
            if state.black_hole.load(Ordering::SeqCst) {
                continue;
            }
            let ends = frames.data_frame_ends(&buffer[..n]);
            if let Some(&end) = ends.first()
                && state.armed.swap(false, Ordering::SeqCst)
            {
                // Recorded before forwarding: the answer may come back while this thread writes.
                state
                    .last_request_sent
                    .store(stamp.unwrap_or_else(monotonic_ns), Ordering::SeqCst);
                state
                    .last_request_read
                    .store(monotonic_ns(), Ordering::SeqCst);
                state.black_hole.store(true, Ordering::SeqCst);
                n = end;
            }
        }
        if !upstream && state.black_hole.load(Ordering::SeqCst) {
            let _ = state.first_answer.compare_exchange(
                0,
                monotonic_ns(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
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
        if upstream {
            let mut needle = state.needle.lock().unwrap();
            if needle
                .as_ref()
                .is_some_and(|w| buffer[..n].windows(w.len()).any(|c| c == w.as_slice()))
            {
                // Frozen before the request is written: its answer cannot get back first.
                *needle = None;
                *state.mode.lock().unwrap() = Mode::Frozen;
                state.tripped.store(true, Ordering::SeqCst);
            }
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
        state.forwarded.fetch_add(n as u64, Ordering::SeqCst);
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// A job body whose shell and whose grandchild both ignore TERM (an ignored signal stays ignored
/// across fork and exec): only SIGKILL ends them. The grandchild's pid is recorded (`child NAME
/// PID TIME`, read back by [`Scratch::grandchild`]) and listed in `$pids`, so that a later job's
/// overlap check looks at it too.
pub fn stubborn(name: &str) -> String {
    format!(
        r#"trap '' TERM
sleep 1000 &
register {name} $!
echo "child {name} $! $(date +%s%N)" >> "$h"
wait"#
    )
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

    /// The history so far: its complete records (see [`parse_history`]).
    pub fn history(&self) -> Vec<Record> {
        parse_history(&std::fs::read_to_string(self.history_path()).unwrap_or_default())
    }

    /// Appends `record` to the history as the jobs do, in one write of the whole line: a record
    /// written in pieces could be read half done, or interleave with a job's.
    pub fn append(&self, record: &str) {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.history_path())
            .unwrap()
            .write_all(format!("{record}\n").as_bytes())
            .unwrap();
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

    /// The pid of the grandchild a [`stubborn`] job of `name` recorded.
    pub fn grandchild(&self, name: &str) -> i32 {
        self.wait_record("child", name, Duration::from_secs(10))
            .expect("the grandchild started")
            .fields[0]
            .parse()
            .unwrap()
    }

    /// Waits until the `n`th (from 1) record of `kind` from `name` is in the history.
    pub fn wait_record_nth(
        &self,
        kind: &str,
        name: &str,
        n: usize,
        timeout: Duration,
    ) -> Option<Record> {
        let mut found = None;
        wait_for(timeout, || {
            found = self
                .history()
                .into_iter()
                .filter(|r| r.kind == kind && r.name == name)
                .nth(n - 1);
            found.is_some()
        });
        found
    }

    /// A `sh -c` job that records its start (token, pid, time), checks that no process of an
    /// earlier job is still alive at that instant (recording `overlap` otherwise), runs `body`,
    /// and records its end. `$h` is the history file and `$pids` the file of every job process
    /// (a body adds its own children with `register NAME PID`, see [`JOB_FUNCTIONS`]).
    pub fn job(&self, name: &str, body: &str) -> Vec<String> {
        let script = format!(
            r#"h='{h}'; pids='{p}'; export h pids
{JOB_FUNCTIONS}
echo "start {name} $LEADER_TOKEN $$ $(date +%s%N)" >> "$h"
touch "$pids"
while read -r n p t; do
  if started "$p" && [ "$st" = "$t" ]; then echo "overlap {name} $p $(date +%s%N)" >> "$h"; fi
done < "$pids"
register {name} $$
{body}
echo "end {name} $(date +%s%N)" >> "$h"
"#,
            h = self.history_path().display(),
            p = self.path("pids").display(),
        );
        vec!["sh".into(), "-c".into(), script]
    }
}

/// Shell functions every job script defines before its body, for the overlap checks a job makes
/// at its start against the processes earlier jobs listed in `$pids` (one `NAME PID START` line
/// each).
///
/// `started PID` succeeds if PID is a live process, not a zombie, and sets `$st` to its start
/// time (clock ticks since boot, field 22 of /proc/PID/stat), read in one read: a process that
/// exits between two reads of /proc is not taken for alive. `register NAME PID` appends
/// `NAME PID START` to `$pids` in one write of a whole line.
///
/// A listed process counts as alive only if its pid is live *and* started at the recorded tick:
/// the kernel hands a freed pid to the next process (pid_max is 32768 on common systems, and a
/// long test run goes round it), so a pid alone may name a process that is none of the jobs'.
/// A reader of `$pids` takes only whole lines (`read` fails on a last line without its `\n`,
/// a write still under way), and a line without all three fields names no process.
pub const JOB_FUNCTIONS: &str = r#"started() { st=; case $1 in ''|*[!0-9]*) return 1;; esac
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s=${s##*) }; set -- $s; [ "$1" != Z ] || return 1; st=${20}; [ -n "$st" ]; }
register() { started "$2" && echo "$1 $2 $st" >> "$pids"; }"#;

/// The complete lines of `text`, a file that other processes may still be appending to. Every
/// writer appends a record as one `write` of a whole line ending in `\n`, but a reader may catch
/// such a write half done (the first bytes of a line visible before the rest, as when a line
/// crosses a page): a last line without its `\n` is no record yet, and is left to the next read.
pub fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
}

/// The records of a history file's text, complete lines only (see [`complete_lines`]): a record
/// cut short would carry a wrong last field, a time, and so count as an overlap that never was.
pub fn parse_history(text: &str) -> Vec<Record> {
    complete_lines(text).filter_map(Record::parse).collect()
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
        share_machine();
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

    /// How many instances hold a claim on `lease` as the store sees it, leader and waiters:
    /// etcd, the candidate keys; ZooKeeper, the candidate nodes; PostgreSQL, the row while it
    /// has an unexpired holder, and the waiter rows in line whose TTL has not run out.
    fn claims(&self, lease: &str) -> usize;

    /// Whatever is still held anywhere: etcd, election keys and leases; PostgreSQL, rows with an
    /// unexpired holder and unexpired waiter rows. Empty once every instance has released.
    fn held(&self) -> Vec<String>;

    /// SIGSTOP: the server hangs, connections stay open and nothing answers.
    fn freeze(&self);

    /// SIGCONT after `freeze`.
    fn thaw(&self);

    // What the benchmarks (bench/servers.rs) read besides; the defaults fit a store that cannot
    // count its requests.

    /// Starts it for measuring: as `start`, with whatever counts its requests switched on.
    fn start_measured() -> Self {
        Self::start()
    }

    /// The server's name and version, for the report.
    fn version(&self) -> String {
        Self::NAME.to_owned()
    }

    /// How many instances stand in line for `lease` (the leader and its waiters).
    fn in_line(&self, lease: &str) -> usize {
        self.claims(lease)
    }

    /// The requests the server has received so far from clients, where it counts them
    /// (less the harness's own reads of the count).
    fn requests(&self) -> Option<f64> {
        None
    }

    /// Of those, the waiters' periodic requests, where the store has any apart from renewals.
    fn periodic_requests(&self) -> Option<f64> {
        None
    }

    /// For `count` leases of `ttl` that a client takes and then abandons without a word (at
    /// random instants within a second): seconds from the taking's answer to the claim being
    /// gone, sorted. None where the store has no reaper of its own (a waiter ends the lease).
    fn expiry_lag(&self, _count: usize, _ttl: Duration) -> Option<Vec<f64>> {
        None
    }
}

/// The first line of `program --version`-like output.
fn first_line_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(if o.stdout.is_empty() {
                &o.stderr
            } else {
                &o.stdout
            })
            .into_owned();
            text.lines().next().unwrap_or_default().trim().to_owned()
        })
        .unwrap_or_else(|e| format!("{program}: {e}"))
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

    fn freeze(&self) {
        Etcd::freeze(self)
    }

    fn version(&self) -> String {
        first_line_of("etcd", &["--version"])
    }

    fn thaw(&self) {
        Etcd::thaw(self)
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
    /// More environment for the server (e.g. libfaketime's).
    env: Vec<(String, String)>,
    /// `search_path` for the harness's own psql sessions, when the role's own must not be used
    /// (`PgHostile`: there it finds the hostile role's overloads before pg_catalog's).
    psql_search_path: Option<&'static str>,
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
        Postgres::start_with_env(extra, &[])
    }

    /// Starts under libfaketime (Debian's `faketime`): the server's clock is offset by what the
    /// returned file says (`+0` at first; write `+30s`, say, to step it while the server runs).
    pub fn start_with_faketime() -> (Postgres, tempfile::NamedTempFile) {
        const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        let clock = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(clock.path(), "+0\n").unwrap();
        // The server runs as the `postgres` user and reads the file the test writes.
        std::fs::set_permissions(
            clock.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let file = path_str(clock.path());
        let pg = Postgres::start_with_env(
            "",
            &[
                ("LD_PRELOAD", FAKETIME),
                ("FAKETIME_TIMESTAMP_FILE", &file),
                ("FAKETIME_NO_CACHE", "1"),
            ],
        );
        (pg, clock)
    }

    /// Starts with more environment for the server, e.g. `LD_PRELOAD` of libfaketime.
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Postgres {
        share_machine();
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
            psql_search_path: None,
            extra: extra.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
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
            .envs(self.env.iter().map(|(k, v)| (k, v)))
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
        let mut command = Command::new("psql");
        if let Some(path) = self.psql_search_path {
            command.env("PGOPTIONS", format!("-c search_path={path}"));
        }
        command
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

    /// The holders' rows (`NAME`, and with --max-holders above 1 its slot rows `NAME/k`) and
    /// the waiters in line (`leader_exec_waiters`, whose rows a waiter renews every
    /// --retry-period: one whose TTL ran out by the server's clock is a dead waiter's, as an
    /// etcd key goes with its lease).
    fn claims(&self, lease: &str) -> usize {
        let holder = format!(
            "SELECT count(*) FROM leader_exec_leases WHERE (name = '{lease}' OR starts_with(name, '{lease}/')) AND holder IS NOT NULL AND expires_at > now()"
        );
        let sql = format!(
            "SELECT ({holder}) + (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}' AND expires_at > now())"
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
            "SELECT name || ' ' || holder FROM leader_exec_leases WHERE holder IS NOT NULL AND expires_at > now() \
             UNION ALL SELECT 'waiter ' || name || ' ' || identity FROM leader_exec_waiters WHERE expires_at > now()",
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn freeze(&self) {
        Postgres::freeze(self)
    }

    fn thaw(&self) {
        Postgres::thaw(self)
    }

    /// With pg_stat_statements, which counts the statements the server runs.
    fn start_measured() -> Self {
        let pg = Postgres::start_with("-c shared_preload_libraries=pg_stat_statements");
        pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        pg
    }

    fn version(&self) -> String {
        first_line_of(&format!("{PG_BIN}/postgres"), &["--version"])
    }

    /// The waiter rows of the lease and its holders (the lease row and, with --max-holders
    /// above 1, the slot rows `NAME/k`): one per instance in line (or holding).
    fn in_line(&self, lease: &str) -> usize {
        let out = self.try_psql(&format!(
            "SELECT (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}') + \
             (SELECT count(*) FROM leader_exec_leases WHERE (name = '{lease}' OR starts_with(name, '{lease}/')) AND holder IS NOT NULL)"
        ));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// Statements run so far (pg_stat_statements), less the harness's own (each of which reads a
    /// pg_stat_ view) and the waiters' periodic looks at the line (`periodic_requests`), as
    /// etcd's counts leave out lease renewals.
    fn requests(&self) -> Option<f64> {
        self.statements("query NOT LIKE '%pg_stat%' AND query NOT LIKE 'WITH mine AS%'")
    }

    /// The waiters' looks at the line (one per waiter per retry period).
    fn periodic_requests(&self) -> Option<f64> {
        self.statements("query LIKE 'WITH mine AS%'")
    }
}

impl Postgres {
    fn statements(&self, filter: &str) -> Option<f64> {
        let out = self.try_psql(&format!(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE {filter}"
        ));
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

/// What the standalone ZooKeeper server needs on its class path besides its configuration
/// directory (log4j.properties): zookeeper.jar, whose manifest names the rest (zookeeper-jute,
/// netty, metrics-core, snappy-java, commons-io, slf4j-api, ...), and the log4j binding for slf4j.
pub const ZOOKEEPER_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar";

/// JVM options for short-lived test servers: C1 only and the serial collector start and restart
/// faster on a small machine; a small heap.
const JVM_OPTIONS: [&str; 3] = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"];

/// Writes `log4j.properties` into a ZooKeeper server's configuration directory `dir`: warnings and
/// errors to `dir/zookeeper.log`.
fn write_zookeeper_log4j(dir: &Path) {
    std::fs::write(
        dir.join("log4j.properties"),
        format!(
            "log4j.rootLogger=WARN, FILE\n\
             log4j.appender.FILE=org.apache.log4j.FileAppender\n\
             log4j.appender.FILE.File={}\n\
             log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n\n",
            dir.join("zookeeper.log").display()
        ),
    )
    .unwrap();
}

/// The zoo.cfg lines every test server has: short ticks, loopback only, sessions from 1 s to
/// 30 s, no fsync, the four-letter words the harness uses, and no limit on connections from one
/// address (ZooKeeper's default is 60: every instance holds a session, and the benchmark's 200
/// waiters all come from 127.0.0.1). A standalone server's whole
/// configuration; an ensemble member's before its `server.N` lines.
fn zookeeper_config(data_dir: &Path, client_port: u16) -> String {
    format!(
        "tickTime=500\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr,mntr,cons,stat\n\
         minSessionTimeout=1000\n\
         maxSessionTimeout=30000\n\
         maxClientCnxns=0\n\
         forceSync=no\n",
        data = data_dir.display(),
    )
}

/// Launches a ZooKeeper server JVM from the configuration directory `dir` (its `zoo.cfg`, and its
/// `log4j.properties` on the class path) with `main_class` (`ZooKeeperServerMain` for a
/// standalone server, `quorum.QuorumPeerMain` for an ensemble member). The JVM's own output is
/// appended to `dir/zookeeper.out`. It dies with the test process.
fn launch_zookeeper(dir: &Path, main_class: &str) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("zookeeper.out"))
        .unwrap();
    let mut command = Command::new("java");
    command
        .args(JVM_OPTIONS)
        .arg("-cp")
        .arg(format!("{}:{ZOOKEEPER_CLASSPATH}", dir.display()))
        .arg(format!("org.apache.zookeeper.server.{main_class}"))
        .arg(dir.join("zoo.cfg"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    // Should the test process die, the server dies with it (the signal fires when the spawning
    // thread ends; a test's thread outlives the server it started).
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
    command
        .spawn()
        .expect("java is installed (apt-get install openjdk-17-jdk-headless zookeeper)")
}

/// The log of the server whose configuration directory is `dir` (warnings and errors, and the
/// JVM's own output).
fn zookeeper_log(dir: &Path) -> String {
    let mut log = std::fs::read_to_string(dir.join("zookeeper.log")).unwrap_or_default();
    log.push_str(&std::fs::read_to_string(dir.join("zookeeper.out")).unwrap_or_default());
    log
}

/// A four-letter word (`srvr`, `ruok`, `mntr`, `cons`, `stat`) to the server at `addr`: sends it,
/// reads the answer to EOF. None if the server cannot be reached or does not answer within a
/// second.
pub fn zookeeper_four_letter_word(addr: SocketAddr, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// The `Mode:` a `srvr` answer gives (`standalone`, `leader`, `follower`); None without one (a
/// member without a quorum answers that it is not serving requests).
fn srvr_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// Whether `child` (a server JVM) runs (stopped counts as running).
fn child_running(child: &mut Option<Child>) -> bool {
    child
        .as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// SIGKILL to a server JVM (SIGCONT first, should it be stopped); returns once it is reaped.
fn kill_child(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A node's data, czxid (the zxid of its creation) and ephemeral owner (0 for a persistent node).
pub type ZNode = (Vec<u8>, i64, i64);

/// Reading and writing a ZooKeeper tree from outside, each call on a fresh session: shared by the
/// standalone server and the ensemble, which say where to connect and what to show on a failure.
pub trait ZooKeeperTree {
    /// A connect string for ZooKeeper clients (`127.0.0.1:PORT[,127.0.0.1:PORT…]`).
    fn connect_string(&self) -> String;

    /// The servers' logs, for failure messages.
    fn log(&self) -> String;

    /// Runs `body` with a fresh session (2 s timeout) on a current-thread runtime. The session is
    /// closed afterwards, unless `detached`: then it is abandoned and expires on the server after
    /// its timeout, as a crashed client's would.
    fn session<T>(
        &self,
        detached: bool,
        body: impl AsyncFnOnce(&zookeeper_client::Client) -> T,
    ) -> T {
        let connect = self.connect_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut connector =
                zookeeper_client::Client::connector().with_session_timeout(Duration::from_secs(2));
            if detached {
                connector = connector.with_detached();
            }
            let client = tokio::time::timeout(Duration::from_secs(10), connector.connect(&connect))
                .await
                .unwrap_or_else(|_| panic!("no ZooKeeper session within 10 s:\n{}", self.log()))
                .unwrap_or_else(|e| panic!("ZooKeeper session: {e}\n{}", self.log()));
            let out = body(&client).await;
            let mut state = client.state_watcher();
            drop(client);
            if !detached {
                // Dropping the client queues the close; let it reach the server before the
                // runtime (and the session's task) goes away.
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while !state.peek_state().is_terminated() {
                        state.changed().await;
                    }
                })
                .await;
            }
            out
        })
    }

    /// The children of `path`, sorted; empty if there is no such node.
    fn children(&self, path: &str) -> Vec<String> {
        self.session(false, async |client| {
            match client.list_children(path).await {
                Ok(mut children) => {
                    children.sort();
                    children
                }
                Err(zookeeper_client::Error::NoNode) => Vec::new(),
                Err(e) => panic!("list_children {path}: {e}"),
            }
        })
    }

    /// `path`'s data, czxid and ephemeral owner (a session id, 0 for a persistent node); None if
    /// there is no such node.
    fn data(&self, path: &str) -> Option<ZNode> {
        self.session(false, async |client| match client.get_data(path).await {
            Ok((data, stat)) => Some((data, stat.czxid, stat.ephemeral_owner)),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => panic!("get_data {path}: {e}"),
        })
    }

    /// Deletes `path` (any version); false if there was no such node.
    fn delete(&self, path: &str) -> bool {
        self.session(false, async |client| {
            match client.delete(path, None).await {
                Ok(()) => true,
                Err(zookeeper_client::Error::NoNode) => false,
                Err(e) => panic!("delete {path}: {e}"),
            }
        })
    }

    /// Creates `path` with `data`, and its missing parents (persistent, empty); returns its czxid.
    /// Not `persistent`: an ephemeral node of a session that is abandoned, not closed, so the node
    /// stays until the server expires that session (2 s after this returns), as a crashed
    /// client's node would.
    fn create(&self, path: &str, data: &[u8], persistent: bool) -> i64 {
        use zookeeper_client::{Acls, CreateMode};
        let mode = if persistent {
            CreateMode::Persistent
        } else {
            CreateMode::Ephemeral
        };
        self.session(!persistent, async |client| {
            let parent = &path[..path.rfind('/').expect("an absolute path")];
            if !parent.is_empty() {
                client
                    .mkdir(
                        parent,
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("mkdir {parent}: {e}"));
            }
            let (stat, _) = client
                .create(path, data, &mode.with_acls(Acls::anyone_all()))
                .await
                .unwrap_or_else(|e| panic!("create {path}: {e}"));
            stat.czxid
        })
    }
}

/// A standalone ZooKeeper server (Debian's zookeeper 3.8) on a free loopback port, with its data in
/// a temporary directory; killed when dropped. Its log (warnings and errors) goes to
/// `zookeeper.log` in that directory, and shows in the panic message when it does not start.
pub struct ZooKeeper {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// More zoo.cfg lines (a later line overrides an earlier one).
    extra: String,
}

impl ZooKeeper {
    pub fn start() -> ZooKeeper {
        ZooKeeper::start_with("")
    }

    /// Starts with more zoo.cfg lines, e.g. `"maxSessionTimeout=4000\n"`; they come after the
    /// defaults, and ZooKeeper keeps the last value of a key.
    pub fn start_with(extra_cfg_lines: &str) -> ZooKeeper {
        share_machine();
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-zk")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        write_zookeeper_log4j(dir.path());
        let mut zk = ZooKeeper {
            port: 0,
            dir,
            child: None,
            extra: extra_cfg_lines.to_owned(),
        };
        // A free port can be taken between the probe and the server's bind: try a few times. A
        // server that cannot bind exits; one that neither serves nor exits is a failure.
        for _ in 0..5 {
            zk.port = free_port();
            zk.write_config();
            zk.spawn();
            if zk.wait_ready(Duration::from_secs(30)) {
                return zk;
            }
            if zk.running() {
                let log = zk.log();
                zk.kill();
                panic!("ZooKeeper did not serve within 30 s:\n{log}");
            }
            zk.kill();
        }
        panic!("ZooKeeper did not start:\n{}", zk.log());
    }

    fn write_config(&self) {
        let config = format!(
            "{}{}\n",
            zookeeper_config(&self.dir.path().join("data"), self.port),
            self.extra
        );
        std::fs::write(self.dir.path().join("zoo.cfg"), config).unwrap();
    }

    fn spawn(&mut self) {
        self.child = Some(launch_zookeeper(self.dir.path(), "ZooKeeperServerMain"));
    }

    /// Whether the JVM runs (stopped counts as running).
    pub fn running(&mut self) -> bool {
        child_running(&mut self.child)
    }

    /// Waits until `srvr` says `Mode: standalone`; false at the timeout or if the JVM exits.
    pub fn wait_ready(&mut self, timeout: Duration) -> bool {
        wait_for(timeout, || {
            self.srvr().is_some_and(|s| s.contains("Mode: standalone")) || !self.running()
        }) && self.running()
    }

    /// A four-letter word (`srvr`, `ruok`, `mntr`, `cons`, `stat`): sends it, reads the answer to
    /// EOF. None if the server cannot be reached or does not answer within a second.
    pub fn four_letter_word(&self, word: &str) -> Option<String> {
        zookeeper_four_letter_word(self.addr(), word)
    }

    pub fn srvr(&self) -> Option<String> {
        self.four_letter_word("srvr")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// `zk://127.0.0.1:PORT`, the `--endpoints` value leader-exec takes.
    pub fn endpoint(&self) -> String {
        format!("zk://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// SIGKILL; returns once the JVM is reaped.
    pub fn kill(&mut self) {
        kill_child(&mut self.child);
    }

    /// Kills the server and starts it again on the same port and data; returns once it serves.
    /// Sessions survive (their timeouts restart when the server loads them), so do their
    /// ephemeral nodes until a session expires.
    pub fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }

    /// Like [`ZooKeeper::restart`], with the server down for `down` first: an outage as long as
    /// that and the server's own start. Returns once it serves again.
    pub fn restart_after(&mut self, down: Duration) {
        self.kill();
        std::thread::sleep(down);
        self.spawn();
        if !self.wait_ready(Duration::from_secs(30)) {
            panic!("ZooKeeper did not come back:\n{}", self.log());
        }
    }

    /// The client connections the server holds a session for (`cons`: a line with `sid=`; the
    /// four-letter word's own connection has none).
    pub fn sessions_connected(&self) -> usize {
        self.four_letter_word("cons").map_or(0, |cons| {
            cons.lines().filter(|l| l.contains("sid=0x")).count()
        })
    }

    /// SIGSTOP: the process hangs, connections stay open and nothing answers.
    pub fn freeze(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGSTOP).unwrap();
    }

    pub fn thaw(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGCONT).unwrap();
    }

    /// Like [`ZooKeeper::restart`] (same port, same data), with `extra_cfg_lines` in place of the
    /// zoo.cfg lines given so far: a rolling configuration change, e.g.
    /// `"maxSessionTimeout=4000\n"`. Sessions survive; each renegotiates its timeout under the
    /// new bounds when its client reconnects.
    pub fn restart_with(&mut self, extra_cfg_lines: &str) {
        self.kill();
        extra_cfg_lines.clone_into(&mut self.extra);
        self.write_config();
        self.spawn();
        if !self.wait_ready(Duration::from_secs(30)) {
            panic!("ZooKeeper did not come back:\n{}", self.log());
        }
    }
}

impl ZooKeeperTree for ZooKeeper {
    /// `127.0.0.1:PORT`.
    fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's log so far (warnings and errors, and the JVM's own output).
    fn log(&self) -> String {
        zookeeper_log(self.dir.path())
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A ZooKeeper ensemble of three servers (Debian's zookeeper 3.8, `QuorumPeerMain`) on free
/// loopback ports, each with its own configuration and data directory (`m1`, `m2`, `m3` in a
/// temporary directory, `myid` 1 to 3) and the standalone server's settings (tickTime 500 ms):
/// a new leader about 0.4 s after the leader is killed (measured). A member brought back after it
/// missed an epoch's transactions can fail its first sync with ZooKeeper 3.8.0 (the leader logs
/// "NEWLEADER ACK ... from a different epoch"); the quorum then forms only after initLimit, 6 s or
/// more instead of about 1 s. Members are killed and restarted one at a time
/// by index (0, 1, 2); every member is killed when the ensemble is dropped.
pub struct ZooKeeperEnsemble {
    dir: tempfile::TempDir,
    members: Vec<ZooKeeperMember>,
}

struct ZooKeeperMember {
    client_port: u16,
    peer_port: u16,
    election_port: u16,
    child: Option<Child>,
}

impl ZooKeeperEnsemble {
    pub const SIZE: usize = 3;

    /// Starts three members; returns once each says `Mode: leader` or `Mode: follower`.
    pub fn start() -> ZooKeeperEnsemble {
        share_machine();
        // A free port can be taken between the probe and a member's bind: a member that cannot
        // bind exits, and the ensemble starts again on new ports. Members that all run but do not
        // form a quorum are a failure.
        let mut last_log = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("leader-exec-zk-ensemble")
                .tempdir()
                .unwrap();
            let members = (0..Self::SIZE)
                .map(|_| ZooKeeperMember {
                    client_port: free_port(),
                    peer_port: free_port(),
                    election_port: free_port(),
                    child: None,
                })
                .collect();
            let mut ensemble = ZooKeeperEnsemble { dir, members };
            for i in 0..Self::SIZE {
                ensemble.write_config(i);
                ensemble.spawn(i);
            }
            let all_running = |e: &mut ZooKeeperEnsemble| (0..Self::SIZE).all(|i| e.running(i));
            wait_for(Duration::from_secs(40), || {
                ensemble.members_ready() || !all_running(&mut ensemble)
            });
            if ensemble.members_ready() && all_running(&mut ensemble) {
                return ensemble;
            }
            last_log = ensemble.log();
            if all_running(&mut ensemble) {
                panic!("the ZooKeeper ensemble did not form within 40 s:\n{last_log}");
            }
        }
        panic!("the ZooKeeper ensemble did not start:\n{last_log}");
    }

    fn member_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{}", i + 1))
    }

    fn write_config(&self, i: usize) {
        let dir = self.member_dir(i);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("myid"), format!("{}\n", i + 1)).unwrap();
        write_zookeeper_log4j(&dir);
        let mut config = zookeeper_config(&data, self.members[i].client_port);
        config.push_str("initLimit=10\nsyncLimit=5\n");
        for (n, member) in self.members.iter().enumerate() {
            config.push_str(&format!(
                "server.{}=127.0.0.1:{}:{}\n",
                n + 1,
                member.peer_port,
                member.election_port
            ));
        }
        std::fs::write(dir.join("zoo.cfg"), config).unwrap();
    }

    fn spawn(&mut self, i: usize) {
        let child = launch_zookeeper(&self.member_dir(i), "quorum.QuorumPeerMain");
        self.members[i].child = Some(child);
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Whether member `i`'s JVM runs.
    pub fn running(&mut self, i: usize) -> bool {
        child_running(&mut self.members[i].child)
    }

    pub fn pid(&self, i: usize) -> i32 {
        self.members[i].child.as_ref().unwrap().id() as i32
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port))
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`: every member, the `--endpoints` value
    /// leader-exec takes.
    pub fn endpoint(&self) -> String {
        let hosts = (0..self.size())
            .map(|i| self.addr(i).to_string())
            .collect::<Vec<_>>()
            .join(",");
        format!("zk://{hosts}")
    }

    /// A four-letter word to member `i`; None if it cannot be reached or does not answer.
    pub fn four_letter_word(&self, i: usize, word: &str) -> Option<String> {
        zookeeper_four_letter_word(self.addr(i), word)
    }

    /// Member `i`'s `Mode:` as `srvr` gives it (`leader`, `follower`); None if it is down or
    /// does not serve (no quorum).
    pub fn mode(&self, i: usize) -> Option<String> {
        self.members[i].child.as_ref()?;
        srvr_mode(&self.four_letter_word(i, "srvr")?)
    }

    /// The member that says `Mode: leader` now, if any.
    pub fn current_leader(&self) -> Option<usize> {
        (0..self.size()).find(|&i| self.mode(i).as_deref() == Some("leader"))
    }

    /// The member that says `Mode: leader`, waiting up to 20 s for one; panics with the logs.
    pub fn leader(&self) -> usize {
        let mut leader = None;
        wait_for(Duration::from_secs(20), || {
            leader = self.current_leader();
            leader.is_some()
        });
        leader.unwrap_or_else(|| panic!("no ZooKeeper member leads:\n{}", self.log()))
    }

    /// Whether every running member serves as the leader or a follower (and at least two run).
    pub fn members_ready(&self) -> bool {
        let running: Vec<usize> = (0..self.size())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        running.len() > self.size() / 2
            && running
                .iter()
                .all(|&i| matches!(self.mode(i).as_deref(), Some("leader") | Some("follower")))
    }

    /// SIGKILL to member `i`; returns once its JVM is reaped.
    pub fn kill(&mut self, i: usize) {
        kill_child(&mut self.members[i].child);
    }

    /// Starts member `i` again on its ports and data; returns once every running member serves
    /// (within 30 s, or panics with the logs).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        if !wait_for(Duration::from_secs(30), || self.members_ready()) {
            panic!("ZooKeeper member {i} did not come back:\n{}", self.log());
        }
    }
}

impl ZooKeeperTree for ZooKeeperEnsemble {
    /// The members that run.
    fn connect_string(&self) -> String {
        (0..self.size())
            .filter(|&i| self.members[i].child.is_some())
            .map(|i| self.addr(i).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every member's log, one after another.
    fn log(&self) -> String {
        (0..self.size())
            .map(|i| format!("--- member {i}:\n{}", zookeeper_log(&self.member_dir(i))))
            .collect()
    }
}

impl Drop for ZooKeeperEnsemble {
    fn drop(&mut self) {
        for i in 0..self.size() {
            self.kill(i);
        }
    }
}

/// The sequence number of a LeaderLatch candidate node (`_c_<id>-latch-<10 digits>`): the digits
/// after the last `latch-`. The lowest leads.
pub fn latch_sequence(node: &str) -> Option<u64> {
    node.rsplit_once("latch-")?.1.parse().ok()
}

impl Store for ZooKeeper {
    const NAME: &'static str = "zookeeper";

    fn start() -> Self {
        ZooKeeper::start()
    }

    fn endpoint(&self) -> String {
        ZooKeeper::endpoint(self)
    }

    fn addr(&self) -> SocketAddr {
        ZooKeeper::addr(self)
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        format!("zk://127.0.0.1:{}", proxy.port)
    }

    fn restart(&mut self) {
        ZooKeeper::restart(self)
    }

    /// The candidates (Curator LeaderLatch layout: ephemeral-sequential children of
    /// `/leader-exec/LEASE`), leader and waiters.
    fn claims(&self, lease: &str) -> usize {
        self.children(&format!("/leader-exec/{lease}")).len()
    }

    /// Every candidate node of every election (`/leader-exec/*/*`; the `.occurrences` and
    /// `.leaders` trees are not elections).
    fn held(&self) -> Vec<String> {
        self.session(false, async |client| {
            let mut held = Vec::new();
            let elections = match client.list_children("/leader-exec").await {
                Ok(elections) => elections,
                Err(zookeeper_client::Error::NoNode) => return held,
                Err(e) => panic!("list_children /leader-exec: {e}"),
            };
            for election in elections.iter().filter(|e| !e.starts_with('.')) {
                let path = format!("/leader-exec/{election}");
                match client.list_children(&path).await {
                    Ok(candidates) => {
                        held.extend(candidates.into_iter().map(|c| format!("{path}/{c}")))
                    }
                    Err(zookeeper_client::Error::NoNode) => {}
                    Err(e) => panic!("list_children {path}: {e}"),
                }
            }
            held.sort();
            held
        })
    }

    fn freeze(&self) {
        ZooKeeper::freeze(self)
    }

    fn version(&self) -> String {
        let srvr = self.srvr().unwrap_or_default();
        let line = srvr
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version:"))
            .map(|v| {
                // Debian's build leaves a placeholder for the commit: "3.8.0-${mvngit.commit.id}".
                let v = v.trim();
                match (v.find("-${"), v.find('}')) {
                    (Some(a), Some(b)) if a < b => format!("ZooKeeper {}{}", &v[..a], &v[b + 1..]),
                    _ => format!("ZooKeeper {v}"),
                }
            })
            .unwrap_or_else(|| "ZooKeeper (version unknown)".to_owned());
        format!("{line} on {}", first_line_of("java", &["-version"]))
    }

    /// Packets received from clients (`zk_packets_received`: requests and pings), less the
    /// four-letter words this harness sent to read it.
    fn requests(&self) -> Option<f64> {
        static READS: AtomicU64 = AtomicU64::new(0);
        let reads = READS.fetch_add(1, Ordering::SeqCst) + 1;
        let mntr = self.four_letter_word("mntr")?;
        let packets: f64 = mntr
            .lines()
            .find_map(|l| l.strip_prefix("zk_packets_received\t"))?
            .trim()
            .parse()
            .ok()?;
        Some(packets - reads as f64)
    }

    /// Sessions of `ttl`, each with an ephemeral node, whose connection goes away right after
    /// the create (nothing else is sent): the server expires them on tick boundaries.
    fn expiry_lag(&self, count: usize, ttl: Duration) -> Option<Vec<f64>> {
        self.create("/bench-expiry/.keep", b"", true);
        let connect = self.connect_string();
        let threads: Vec<_> = (0..count)
            .map(|i| {
                let connect = connect.clone();
                let delay = Duration::from_millis(fastrand::u64(0..1000));
                thread::spawn(move || {
                    expire_one(&connect, &format!("/bench-expiry/{i}"), ttl, delay)
                })
            })
            .collect();
        let mut lags: Vec<f64> = threads
            .into_iter()
            .filter_map(|t| t.join().ok().flatten())
            .collect();
        lags.sort_by(f64::total_cmp);
        Some(lags)
    }

    fn thaw(&self) {
        ZooKeeper::thaw(self)
    }
}

/// One session of `ttl` that creates the ephemeral `path` and is then abandoned (its connection
/// dropped, no close); seconds from the create's answer until another session no longer sees the
/// node. None if it was not gone within ttl + 5 s.
fn expire_one(connect: &str, path: &str, ttl: Duration, delay: Duration) -> Option<f64> {
    use zookeeper_client::{Acls, CreateMode};
    thread::sleep(delay);
    let created = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = zookeeper_client::Client::connector()
                .with_session_timeout(ttl)
                .with_detached()
                .connect(connect)
                .await
                .ok()?;
            client
                .create(
                    path,
                    b"",
                    &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
                )
                .await
                .ok()?;
            Some(monotonic_ns())
        })?
        // The runtime goes here, and the session's connection with it: a crashed client.
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let watcher = zookeeper_client::Client::connect(connect).await.ok()?;
        let until = Instant::now() + ttl + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(None) = watcher.check_stat(path).await {
                return Some((monotonic_ns() - created) as f64 / 1e9);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    })
}

/// The class path of tests/zk/CuratorLatch.java: curator-recipes.jar, whose manifest names
/// curator-framework, curator-client, guava, zookeeper and zookeeper-jute (and zookeeper.jar's
/// manifest the rest), and slf4j-nop to keep Curator's and ZooKeeper's logging quiet.
pub const CURATOR_CLASSPATH: &str =
    "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";

/// A Curator LeaderLatch participant (tests/zk/CuratorLatch.java, run by the JDK's source
/// launcher): what a Java service using Curator's recipe would do on the same election node.
/// Its stdout lines (`started`, `leader`, `notleader`, `participants ...`, `leaderid ...`) are
/// collected as they come; closing its stdin closes the latch and ends it. Killed when dropped.
///
/// Measured with Curator 5.4 against this harness's server (3 s sessions): every connection loss,
/// even a 1 s restart, prints `notleader` then `leader` again (Curator's standard error policy
/// treats SUSPENDED as lost leadership). With the server down longer than the session timeout,
/// the latch reconnects on a new session and prints `leader` while its node still belongs to the
/// old session, which the restarted server expires a few seconds later: the node is gone, the latch
/// still says it leads, and getParticipants() is empty.
pub struct CuratorLatch {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl CuratorLatch {
    /// Starts a participant with id `id` on election node `path` (e.g. `/leader-exec/NAME`),
    /// connecting to `connect` (`127.0.0.1:PORT`; a `zk://` prefix is accepted). Returns at once;
    /// `wait_for("started", ..)` to know it runs (the JVM compiles the source first, ≈ 2 s).
    pub fn start(connect: &str, path: &str, id: &str) -> CuratorLatch {
        CuratorLatch::start_with_auth(connect, path, id, None)
    }

    /// Like [`CuratorLatch::start`]; with `auth` (`NAME:PASSWORD`) the client authenticates with
    /// the digest scheme and creates its nodes with all rights for itself, read for anyone.
    pub fn start_with_auth(
        connect: &str,
        path: &str,
        id: &str,
        auth: Option<&str>,
    ) -> CuratorLatch {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let mut child = Command::new("java")
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m"])
            .args(["-cp", CURATOR_CLASSPATH])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zk/CuratorLatch.java"))
            .args([connect, path, id])
            .args(auth)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("java is installed (apt-get install openjdk-17-jdk-headless libcurator-recipes-java)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        CuratorLatch {
            child,
            stdin,
            lines,
            reader: Some(reader),
            stderr,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Every line it printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// What it wrote to stderr (Java exceptions).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until it has printed `line`; false after `timeout`.
    pub fn wait_for(&self, line: &str, timeout: Duration) -> bool {
        wait_for(timeout, || {
            self.lines.lock().unwrap().iter().any(|l| l == line)
        })
    }

    /// How many times it printed `line`.
    pub fn count(&self, line: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| *l == line)
            .count()
    }

    /// Asks for `LeaderLatch.getParticipants()` and `getLeader()`: the participants' ids in the
    /// latch's order, and the leader's id (empty if none). Panics after 10 s without an answer.
    pub fn ask_participants(&mut self) -> (Vec<String>, String) {
        let before = self.lines.lock().unwrap().len();
        let stdin = self.stdin.as_mut().expect("not closed");
        stdin.write_all(b"participants\n").unwrap();
        stdin.flush().unwrap();
        let mut answer = None;
        wait_for(Duration::from_secs(10), || {
            let lines = self.lines.lock().unwrap();
            let new = &lines[before.min(lines.len())..];
            if let Some(error) = new.iter().find(|l| l.starts_with("error ")) {
                panic!("CuratorLatch: {error}");
            }
            let participants = new.iter().find_map(|l| l.strip_prefix("participants"));
            let leader = new.iter().find_map(|l| l.strip_prefix("leaderid"));
            if let (Some(participants), Some(leader)) = (participants, leader) {
                answer = Some((
                    participants
                        .split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    leader.trim().to_owned(),
                ));
            }
            answer.is_some()
        });
        answer.unwrap_or_else(|| {
            panic!(
                "CuratorLatch did not answer: {:?}\n{}",
                self.lines(),
                self.stderr()
            )
        })
    }

    /// Closes its stdin (it closes the latch, deleting its node, and the client) and waits for it
    /// to exit (killed after 20 s).
    pub fn close(&mut self) -> Option<ExitStatus> {
        drop(self.stdin.take());
        wait_for(Duration::from_secs(20), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        let status = self.child.try_wait().ok().flatten();
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        status
    }
}

impl Drop for CuratorLatch {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `leader-exec status --json` for `lease` (exit 0 with a leader, 3 without; the JSON either way).
pub fn status_json(endpoint: &str, lease: &str) -> serde_json::Value {
    let out = leader_exec()
        .args([
            "status",
            "--json",
            "--lease",
            lease,
            "--endpoints",
            endpoint,
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Whether `instance` has joined the election (its log says it campaigns): a store-independent
/// "it stands in line".
pub fn campaigning(instance: &Instance) -> bool {
    instance.stderr().contains(" campaigning")
}

impl Postgres {
    /// A hot standby of this server: `pg_basebackup -R` (streaming from this one), started on
    /// a free port of its own; stopped when dropped.
    pub fn start_standby(&self) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pg-standby")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        let out = as_postgres("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "--no-sync"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut standby = Postgres {
            port: 0,
            dir,
            running: false,
            extra: String::new(),
            env: Vec::new(),
            psql_search_path: None,
        };
        for _ in 0..5 {
            standby.port = free_port();
            if standby.spawn() {
                return standby;
            }
        }
        panic!("the standby did not start");
    }

    /// Stops a standby's WAL replay (SIGSTOP of its startup process): it lags, yet still
    /// answers reads. Dropping the standby lets it go on (`kill` thaws every process first).
    pub fn pause_replay(&self) {
        let startup = self
            .pids()
            .into_iter()
            .find(|&pid| cmdline_of(pid).contains("startup"))
            .expect("a standby has a startup process");
        kill(Pid::from_raw(startup), Signal::SIGSTOP).unwrap();
    }
}

/// pgbouncer (Debian's, 1.18) in transaction mode in front of a [`Postgres`], on free loopback
/// ports: every transaction may run on another server connection, named prepared statements
/// collide across clients, session state (`SET`, `LISTEN`) does not stay with a client. The
/// `options` startup parameter (leader-exec's `statement_timeout` and `lock_timeout`) is ignored,
/// as a fleet's pgbouncer must be configured to accept libpq-style clients. `server_login_retry`
/// is 1 s (default 15 s: after PostgreSQL restarts, pgbouncer would hold every client that long
/// before it tries to log in again). Stopped by pid when dropped, before its PostgreSQL.
pub struct PgBouncer {
    pub port: u16,
    /// The server behind it (`psql` and `claims` go to it directly).
    pub pg: Postgres,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PgBouncer {
    pub fn start() -> PgBouncer {
        PgBouncer::start_in_front_of(Postgres::start())
    }

    /// Starts in front of `pg` (already running).
    pub fn start_in_front_of(pg: Postgres) -> PgBouncer {
        // pgbouncer refuses to run as root: `-u postgres`, from a directory only it can read.
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-pgbouncer")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let mut bouncer = PgBouncer {
            port: 0,
            pg,
            dir,
            child: None,
        };
        for _ in 0..5 {
            bouncer.port = free_port();
            if bouncer.spawn() {
                return bouncer;
            }
        }
        panic!("pgbouncer did not start: {}", bouncer.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    fn spawn(&mut self) -> bool {
        let ini = self.dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={pg} user=postgres\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = transaction\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 max_client_conn = 2000\n\
                 default_pool_size = 100\n\
                 server_login_retry = 1\n\
                 logfile = {log}\n\
                 pidfile = {pid}\n",
                pg = self.pg.port,
                port = self.port,
                log = self.dir.path().join("log").display(),
                pid = self.dir.path().join("pid").display(),
            ),
        )
        .unwrap();
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&ini)
            .status();
        let child = Command::new("pgbouncer")
            .args(["-q", "-u", "postgres"])
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer is installed (apt-get install pgbouncer)");
        self.child = Some(child);
        let url = self.pg.url(self.port);
        let ready = wait_for(Duration::from_secs(10), || {
            if self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some())
            {
                return true;
            }
            Command::new("psql")
                .args(["-X", "-q", "-At", "-d", &url, "-c", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let exited = self
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some());
        if !ready || exited {
            self.stop();
            return false;
        }
        true
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Store for PgBouncer {
    const NAME: &'static str = "pgbouncer";

    fn start() -> Self {
        PgBouncer::start()
    }

    fn endpoint(&self) -> String {
        self.pg.url(self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.pg.url(proxy.port)
    }

    /// PostgreSQL restarts behind a running pgbouncer, which reconnects to it.
    fn restart(&mut self) {
        self.pg.restart()
    }

    fn claims(&self, lease: &str) -> usize {
        self.pg.claims(lease)
    }

    fn in_line(&self, lease: &str) -> usize {
        self.pg.in_line(lease)
    }

    fn held(&self) -> Vec<String> {
        self.pg.held()
    }

    /// The server hangs; pgbouncer still accepts connections and queues their transactions.
    fn freeze(&self) {
        self.pg.freeze()
    }

    fn thaw(&self) {
        self.pg.thaw()
    }

    /// In front of a PostgreSQL with pg_stat_statements, which counts the statements that
    /// reach the server through pgbouncer.
    fn start_measured() -> Self {
        PgBouncer::start_in_front_of(Postgres::start_measured())
    }

    fn version(&self) -> String {
        format!(
            "{} in front of {}",
            first_line_of("pgbouncer", &["--version"]),
            self.pg.version()
        )
    }

    fn requests(&self) -> Option<f64> {
        self.pg.requests()
    }

    fn periodic_requests(&self) -> Option<f64> {
        self.pg.periodic_requests()
    }
}

/// PostgreSQL under a hostile schema (`tests/pg_hostile.sql`): a role `hostile` owns, in
/// `public` (leader-exec's schema), overloads of every operator and function name leader-exec's
/// SQL uses and more, over every combination of a set of argument types, each of which records
/// that it ran in `hostile_log.ran`; and the connecting role's `search_path` is
/// `public, pg_catalog`, so that before leader-exec pins its schema even an overload of exactly
/// pg_catalog's types wins. The schema passes leader-exec's secure-schema check (the hostile role
/// can create nothing there). Every store-independent test runs on it (`postgres_hostile::NAME`),
/// and when it ends the record must be empty: a statement of leader-exec's that leaves an
/// operator, a function or a type name to `search_path` fails the test that sends it.
pub struct PgHostile {
    pub pg: Postgres,
}

impl PgHostile {
    pub fn start() -> PgHostile {
        let mut pg = Postgres::start();
        // The harness's own statements find pg_catalog's names first.
        pg.psql_search_path = Some("pg_catalog,public");
        let out = Command::new("psql")
            .env_remove("PGPASSWORD")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(pg.url(pg.port))
            .args([
                "-f",
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pg_hostile.sql"),
            ])
            .output()
            .expect("psql is installed");
        assert!(
            out.status.success(),
            "tests/pg_hostile.sql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PgHostile { pg }
    }

    /// What of the hostile role's ran, and in which statement (a run whose statement was
    /// rolled back shows only in the sequence the overloads bump).
    pub fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = self
            .pg
            .psql(
                "SELECT what || ' in: ' || regexp_replace(query, '\\s+', ' ', 'g') \
                 FROM hostile_log.ran ORDER BY at",
            )
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if ran.is_empty() && self.pg.psql("SELECT is_called FROM hostile_log.runs") == "t\n" {
            ran.push("an overload, in a statement that was rolled back".into());
        }
        ran
    }
}

impl Drop for PgHostile {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let ran = self.ran();
        assert!(
            ran.is_empty(),
            "the hostile role's overloads ran {} times, first: {}",
            ran.len(),
            ran.iter().take(5).cloned().collect::<Vec<_>>().join(" | ")
        );
    }
}

impl Store for PgHostile {
    const NAME: &'static str = "postgres_hostile";

    fn start() -> Self {
        PgHostile::start()
    }

    fn endpoint(&self) -> String {
        self.pg.endpoint()
    }

    fn addr(&self) -> SocketAddr {
        self.pg.addr()
    }

    fn endpoint_via(&self, proxy: &Proxy) -> String {
        self.pg.endpoint_via(proxy)
    }

    fn restart(&mut self) {
        self.pg.restart()
    }

    fn claims(&self, lease: &str) -> usize {
        self.pg.claims(lease)
    }

    fn in_line(&self, lease: &str) -> usize {
        self.pg.in_line(lease)
    }

    fn held(&self) -> Vec<String> {
        self.pg.held()
    }

    fn freeze(&self) {
        self.pg.freeze()
    }

    fn thaw(&self) {
        self.pg.thaw()
    }

    fn version(&self) -> String {
        format!("{} with a hostile schema", self.pg.version())
    }
}
