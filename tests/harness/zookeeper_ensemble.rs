//! A ZooKeeper ensemble of three servers ([`ZooKeeperEnsemble`]), members killed and restarted
//! one at a time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use super::{
    ZooKeeperTree, child_running, free_port, kill_child, launch_zookeeper, share_machine,
    srvr_mode, wait_for, write_zookeeper_log4j, zookeeper_config, zookeeper_four_letter_word,
    zookeeper_log,
};

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
