//! A standalone ZooKeeper server ([`ZooKeeper`]), the launching and four-letter words an ensemble
//! shares with it, reading its tree from outside ([`ZooKeeperTree`]), and its [`Store`] impl.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Proxy, Store, first_line_of, free_port, monotonic_ns, share_machine, wait_for};

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
pub(super) fn write_zookeeper_log4j(dir: &Path) {
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
pub(super) fn zookeeper_config(data_dir: &Path, client_port: u16) -> String {
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
pub(super) fn launch_zookeeper(dir: &Path, main_class: &str) -> Child {
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
pub(super) fn zookeeper_log(dir: &Path) -> String {
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
pub(super) fn srvr_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// Whether `child` (a server JVM) runs (stopped counts as running).
pub(super) fn child_running(child: &mut Option<Child>) -> bool {
    child
        .as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// SIGKILL to a server JVM (SIGCONT first, should it be stopped); returns once it is reaped.
pub(super) fn kill_child(child: &mut Option<Child>) {
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
