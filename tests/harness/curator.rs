//! A Curator LeaderLatch participant ([`CuratorLatch`], tests/zk/CuratorLatch.java): what a Java
//! service using Curator's recipe does on the same election node.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::wait_for;

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
