//! etcd: a single member ([`Etcd`]) and a cluster of several ([`Cluster`]), on free loopback
//! ports, and etcd's [`Store`] impl.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{KillOnDrop, Proxy, Store, first_line_of, free_port, share_machine, wait_for};

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
        if !self.wait_ready(Duration::from_secs(15)) {
            let log = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "etcd did not come back on port {}; the end of its log:\n{}",
                self.client_port,
                tail.join("\n")
            );
        }
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

    /// `etcdctl elect ELECTION PROPOSAL`: etcd's own election client campaigning on the same
    /// prefix as leader-exec (and leading once elected, until SIGINT makes it resign); killed
    /// when dropped.
    pub fn elect(&self, election: &str, proposal: &str) -> KillOnDrop {
        KillOnDrop(
            Command::new("etcdctl")
                .env_remove("ETCDCTL_ENDPOINTS")
                .arg(format!("--endpoints={}", self.endpoint()))
                .args(&self.ctl_args)
                .args(["elect", election, proposal])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("etcdctl is installed (apt-get install etcd-client)"),
        )
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
