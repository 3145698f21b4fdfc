//! A test's directory ([`Scratch`]): the history file the job scripts append to, scratch files,
//! and the shell functions every job defines for its own overlap check.

use std::path::PathBuf;
use std::time::Duration;

use super::{Record, parse_history, wait_for};

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

/// A job body that runs until the file `go-NAME` exists ([`open_gate`]).
pub fn gated(scratch: &Scratch, name: &str) -> String {
    let go = scratch.path(&format!("go-{name}"));
    format!(r#"while [ ! -e '{}' ]; do sleep 0.05; done"#, go.display())
}

/// Lets a [`gated`] job end.
pub fn open_gate(scratch: &Scratch, name: &str) {
    std::fs::write(scratch.path(&format!("go-{name}")), "").unwrap();
}

/// After a failover: `b`'s command (its `start` record) started after `a`'s was gone, beside no
/// earlier job's process, more than the [`FAILOVER`](super::FAILOVER) TTL after `a`'s started,
/// and with a greater token.
pub fn assert_handed_over(scratch: &Scratch, a: &super::Record, b: &super::Record) {
    assert!(
        !super::alive(a.pid()),
        "a's command still ran as b's started"
    );
    assert!(
        !scratch.history().iter().any(|r| r.kind == "overlap"),
        "b's command started beside a's: {:?}",
        scratch.history()
    );
    assert!(
        b.time() > a.time() + 6_000_000_000,
        "b took the row less than a TTL after a led"
    );
    assert!(
        b.token() > a.token(),
        "b's token {} is not above a's {}",
        b.token(),
        a.token()
    );
}
