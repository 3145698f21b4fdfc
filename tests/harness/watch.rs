//! `leader-exec watch` in the background, its lines read on a thread so that a test waits for
//! each with a timeout instead of blocking on a watcher that printed nothing.

use std::io::{BufRead, BufReader};
use std::process::{ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Cmd, KillOnDrop};

/// Reads a child's stdout lines on a thread, so the test can wait for them with a timeout.
pub fn lines_of(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

/// `leader-exec watch` of `lease` (with `--json` if `json`), and the lines it prints.
pub fn watch(endpoint: &str, lease: &str, json: bool) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut cmd = Cmd::at(endpoint).args(["watch", "--lease", lease]);
    if json {
        cmd = cmd.arg("--json");
    }
    let mut child = KillOnDrop(
        cmd.command()
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(child.0.stdout.take().unwrap());
    (child, lines)
}

/// The lines `watch` prints up to and including the first for which `done` holds (15 s at most).
pub fn lines_until(lines: &mpsc::Receiver<String>, done: impl Fn(&str) -> bool) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("watch printed no further line after {seen:#?}"));
        let last = done(&line);
        seen.push(line);
        if last {
            return seen;
        }
    }
}

/// SIGINT to a `watch`: it must end with 0.
pub fn stop_watch(mut watch: KillOnDrop) {
    kill(Pid::from_raw(watch.0.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(watch.0.wait().unwrap().code(), Some(0));
}
