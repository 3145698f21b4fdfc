//! One trial: three leader-exec instances on one lease, each reaching the store through proxies of
//! its own (one per etcd member; one for a PostgreSQL, ZooKeeper or MariaDB server), running jobs
//! that write the history; and the teardown that stops
//! everything, sees every process of every job gone, and checks the history.

use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::harness::{Instance, Proxy, Store, alive, group_alive, leader_exec, now_ns, wait_for};
use crate::history::{self, Fault, Record, Verdict};

/// leader-exec's timing flags for a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub name: &'static str,
    pub ttl: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub kill_after: Duration,
}

/// The integration tests' timing: fast failovers. 1.5 s + 1 s + 0.25 s margin <= 3 s.
pub const FAST: Timing = Timing {
    name: "FAST",
    ttl: Duration::from_secs(3),
    renew_deadline: Duration::from_millis(1500),
    retry_period: Duration::from_millis(300),
    kill_after: Duration::from_secs(1),
};

/// For faults that leadership must survive (an etcd restart, a member killed, a raft
/// re-election): a renew deadline with room for them on a loaded machine. 4 s + 1 s + 0.3 s <= 6 s.
pub const STEADY: Timing = Timing {
    name: "STEADY",
    ttl: Duration::from_secs(6),
    renew_deadline: Duration::from_secs(4),
    retry_period: Duration::from_millis(500),
    kill_after: Duration::from_secs(1),
};

impl Timing {
    pub fn args(&self) -> Vec<String> {
        let flag = |d: Duration| match d.as_millis() {
            ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
            ms => format!("{ms}ms"),
        };
        vec![
            "--ttl".into(),
            flag(self.ttl),
            "--renew-deadline".into(),
            flag(self.renew_deadline),
            "--retry-period".into(),
            flag(self.retry_period),
            "--kill-after".into(),
            flag(self.kill_after),
        ]
    }

    /// The longest outage that leadership must survive: the last renewal before it may have been
    /// sent a retry period earlier, and after it a hung attempt may take a retry period to be
    /// abandoned and the next one another to be answered.
    pub fn short_fault(&self) -> Duration {
        self.renew_deadline - 3 * self.retry_period
    }

    /// Its name and flags: `FAST: --ttl 3s --renew-deadline 1500ms ...`.
    pub fn describe(&self) -> String {
        format!("{}: `{}`", self.name, self.args().join(" "))
    }
}

/// What each instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// Heartbeats every 50 ms; on SIGTERM records `stop` and exits.
    Stoppable,
    /// Like `Stoppable`, with a heartbeating grandchild in its process group.
    WithGrandchild,
    /// Records SIGTERM and runs on, with a grandchild that ignores SIGTERM: only SIGKILL ends it.
    IgnoresTerm,
}

/// The job's bash script. Every record carries a time from `$EPOCHREALTIME` (no fork, so a
/// heartbeat costs one `sleep` process); its decimal separator depends on the locale, so only
/// its digits (microseconds) are kept and `000` makes them nanoseconds.
///
/// At its start the job checks every pid that earlier jobs of this trial registered and records
/// `overlap` for any that is still alive (not a zombie): the heartbeats show an earlier job that
/// ran on after this one started, this check one that died silently a moment too late.
fn job_script(history: &Path, pids: &Path, name: &str, kind: JobKind) -> String {
    const NOW: &str = "${EPOCHREALTIME//[!0-9]/}000";
    // Bounded: at least 2 minutes, far longer than any trial, should the runner itself die.
    let beat_loop = format!(
        r#"for ((i = 0; i < 2400; i++)); do echo "beat $n {NOW}" >> "$h"; sleep 0.05; done"#
    );
    // `$pids` lists `PID START` lines, START the process's start time (clock ticks since boot,
    // field 22 of /proc/PID/stat): a listed pid counts as alive only while it names the process
    // that was listed, since the kernel hands a freed pid to the next process (pid_max is 32768
    // on common systems, and a loaded machine goes round it within minutes).
    let mut script = format!(
        r#"h='{h}'; pids='{p}'; n='{name}'
register() {{ local stat f; {{ read -r stat < "/proc/$1/stat"; }} 2>/dev/null || return 0; f=(${{stat##*) }}); echo "$1 ${{f[19]}}" >> "$pids"; }}
echo "start $n $LEADER_TOKEN $$ {NOW}" >> "$h"
if [ -f "$pids" ]; then
  while read -r p t; do
    if {{ read -r stat < "/proc/$p/stat"; }} 2>/dev/null; then
      f=(${{stat##*) }})
      if [[ ${{f[0]}} != Z && ${{f[19]}} == "$t" ]]; then echo "overlap $n $p {NOW}" >> "$h"; fi
    fi
  done < "$pids"
fi
register $$
"#,
        h = history.display(),
        p = pids.display(),
    );
    let grandchild = |ignore_term: bool| {
        format!(
            r#"( {trap}{beat_loop} ) &
echo "spawn $n $! {NOW}" >> "$h"; register $!
"#,
            trap = if ignore_term { "trap '' TERM; " } else { "" },
        )
    };
    match kind {
        JobKind::Stoppable => {}
        JobKind::WithGrandchild => script.push_str(&grandchild(false)),
        JobKind::IgnoresTerm => script.push_str(&grandchild(true)),
    }
    let trap = match kind {
        JobKind::IgnoresTerm => format!(r#"trap 'echo "term $n {NOW}" >> "$h"' TERM"#),
        _ => format!(r#"trap 'echo "stop $n {NOW}" >> "$h"; exit 0' TERM"#),
    };
    script.push_str(&trap);
    script.push('\n');
    script.push_str(&beat_loop);
    script.push('\n');
    script
}

/// A job's start, as recorded.
#[derive(Clone, Debug)]
pub struct Start {
    pub name: String,
    pub token: i64,
    pub pid: i32,
    pub time: u128,
}

/// One leader-exec instance and its proxies, one per store server (etcd member).
pub struct Contender {
    pub name: String,
    pub proxies: Vec<Proxy>,
    pub instance: Instance,
}

impl Contender {
    pub fn cut(&self) {
        self.proxies.iter().for_each(Proxy::cut);
    }

    pub fn freeze(&self) {
        self.proxies.iter().for_each(Proxy::freeze);
    }

    pub fn heal(&self) {
        self.proxies.iter().for_each(Proxy::heal);
    }

    /// Signals leader-exec unless it has exited (a reaped pid could be someone else's by now).
    pub fn signal(&mut self, signal: Signal) {
        if self.instance.running() {
            self.instance.signal(signal);
        }
    }
}

pub struct Trial {
    dir: Option<tempfile::TempDir>,
    pub lease: String,
    pub timing: Timing,
    /// The store's own endpoints (for etcdctl, when it is etcd).
    endpoints: String,
    pub contenders: Vec<Contender>,
    /// `--max-holders` of every instance (1: a single leader).
    pub holders: usize,
}

pub const NAMES: [&str; 3] = ["a", "b", "c"];

impl Trial {
    /// Starts one instance per name at once, each through a proxy of its own to `store`, named in
    /// the store's own `--endpoints` form.
    pub fn start<S: Store>(store: &S, lease: &str, timing: Timing, kind: JobKind) -> Trial {
        Trial::start_via(
            &[store.addr()],
            |proxy| store.endpoint_via(proxy),
            &store.endpoint(),
            lease,
            timing,
            kind,
        )
    }

    /// Starts one instance per name at once, each through its own proxy to every target; `via`
    /// gives a proxy's `--endpoints` form, and an instance gets its proxies' joined by commas.
    pub fn start_via(
        targets: &[SocketAddr],
        via: impl Fn(&Proxy) -> String,
        endpoints: &str,
        lease: &str,
        timing: Timing,
        kind: JobKind,
    ) -> Trial {
        let mut trial = Trial::empty(endpoints, lease, timing);
        for name in NAMES {
            trial.add(
                name,
                targets,
                |proxies| proxies.iter().map(&via).collect::<Vec<_>>().join(","),
                timing,
                kind,
            );
        }
        trial
    }

    /// Starts `names` instances with `--max-holders holders` at once, each through a proxy of
    /// its own to `store`.
    pub fn start_holders<S: Store>(
        store: &S,
        lease: &str,
        timing: Timing,
        kind: JobKind,
        holders: usize,
        names: &[&str],
    ) -> Trial {
        let mut trial = Trial::empty(&store.endpoint(), lease, timing);
        trial.holders = holders;
        for name in names {
            trial.add(
                name,
                &[store.addr()],
                |proxies| store.endpoint_via(&proxies[0]),
                timing,
                kind,
            );
        }
        trial
    }

    /// A trial with no instance yet (`add` starts them): `timing` is the one its waits use.
    pub fn empty(endpoints: &str, lease: &str, timing: Timing) -> Trial {
        let dir = tempfile::Builder::new()
            .prefix("leader-exec-chaos")
            .tempdir()
            .unwrap();
        Trial {
            dir: Some(dir),
            lease: lease.to_owned(),
            timing,
            endpoints: endpoints.to_owned(),
            contenders: Vec::new(),
            holders: 1,
        }
    }

    /// Starts one instance `name` with timing flags of its own, through its own proxy to every
    /// target; `endpoints` gives its `--endpoints` value from its proxies.
    pub fn add(
        &mut self,
        name: &str,
        targets: &[SocketAddr],
        endpoints: impl FnOnce(&[Proxy]) -> String,
        timing: Timing,
        kind: JobKind,
    ) {
        let proxies: Vec<Proxy> = targets.iter().map(|t| Proxy::start(*t)).collect();
        let through = endpoints(&proxies);
        let script = job_script(&self.history_path(), &self.path("pids"), name, kind);
        let mut command = leader_exec();
        command
            .args(["-v", "--endpoints", &through, "--lease", &self.lease])
            .args(["--identity", name])
            .args(["--max-holders", &self.holders.to_string()])
            .args(timing.args())
            .args(["--", "bash", "-c", &script]);
        die_with_the_runner(&mut command);
        let instance = Instance::start_command(&mut command);
        self.contenders.push(Contender {
            name: name.to_owned(),
            proxies,
            instance,
        });
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.as_ref().unwrap().path().join(name)
    }

    pub fn history_path(&self) -> PathBuf {
        self.path("history")
    }

    pub fn history_text(&self) -> String {
        std::fs::read_to_string(self.history_path()).unwrap_or_default()
    }

    /// The records so far, complete lines only: jobs still append to the history, each record
    /// one write of a whole line, and a last line without its `\n` may be a write caught half
    /// done (its time cut short).
    pub fn records(&self) -> Vec<Record> {
        let text = self.history_text();
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        history::parse(&text[..complete]).0
    }

    /// Waits until a record matching `pred` is in the history, and returns it.
    pub fn wait_record(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&Record) -> bool,
    ) -> Option<Record> {
        let mut found = None;
        wait_for(timeout, || {
            found = self.records().into_iter().find(&mut pred);
            found.is_some()
        });
        found
    }

    /// Waits for a job's start, of any job not named in `except`.
    pub fn wait_start(&self, except: &[&str], timeout: Duration) -> Option<Start> {
        match self.wait_record(
            timeout,
            |r| matches!(r, Record::Start { name, .. } if !except.contains(&name.as_str())),
        )? {
            Record::Start {
                name,
                token,
                pid,
                time,
            } => Some(Start {
                name,
                token,
                pid,
                time,
            }),
            _ => unreachable!(),
        }
    }

    /// The pid of the grandchild that job `name` started.
    pub fn wait_spawn(&self, name: &str, timeout: Duration) -> i32 {
        match self.wait_record(
            timeout,
            |r| matches!(r, Record::Spawn { name: n, .. } if n == name),
        ) {
            Some(Record::Spawn { pid, .. }) => pid,
            _ => self.fail(format!("{name} started no grandchild")),
        }
    }

    /// Waits for the first leader's job to start and for every instance to stand in line, as
    /// `store` counts its candidates (the leader and its waiters, on every store).
    pub fn elected<S: Store>(&self, store: &S) -> Start {
        self.elected_when(|| Some(store.claims(&self.lease)))
    }

    /// Waits for the first `holders` jobs to start and for every instance to stand in line;
    /// returns the holders' starts, oldest first.
    pub fn holding<S: Store>(&self, store: &S) -> Vec<Start> {
        let mut starts: Vec<Start> = Vec::new();
        while starts.len() < self.holders {
            let except: Vec<&str> = starts.iter().map(|s| s.name.as_str()).collect();
            let next = self
                .wait_start(&except, Duration::from_secs(15))
                .unwrap_or_else(|| self.fail(format!("only {} holders started", starts.len())));
            starts.push(next);
        }
        let all = self.contenders.len();
        if !wait_for(Duration::from_secs(15), || store.claims(&self.lease) == all) {
            self.fail(format!("not all {all} instances joined the line"));
        }
        starts
    }

    /// The same on an etcd cluster: etcdctl counts the candidate keys through the trial's
    /// endpoints.
    pub fn elected_in_cluster(&self) -> Start {
        self.elected_when(|| self.candidates())
    }

    fn elected_when(&self, mut candidates: impl FnMut() -> Option<usize>) -> Start {
        let first = self
            .wait_start(&[], Duration::from_secs(15))
            .unwrap_or_else(|| self.fail("no instance was elected"));
        let all = self.contenders.len();
        if !wait_for(Duration::from_secs(15), || candidates() == Some(all)) {
            self.fail(format!("not all {all} instances joined the line"));
        }
        first
    }

    /// The number of candidate keys in etcd (None when etcd does not answer).
    pub fn candidates(&self) -> Option<usize> {
        let out = etcdctl(
            &self.endpoints,
            &["get", "--prefix", "--keys-only", &prefix(&self.lease)],
        );
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .count()
        })
    }

    pub fn contender(&self, name: &str) -> &Contender {
        self.contenders.iter().find(|c| c.name == name).unwrap()
    }

    pub fn contender_mut(&mut self, name: &str) -> &mut Contender {
        self.contenders.iter_mut().find(|c| c.name == name).unwrap()
    }

    /// Waits up to 10 s for `name`'s leader-exec to exit and fails the trial unless it exits
    /// with `code`.
    pub fn expect_exit(&mut self, name: &str, code: i32) {
        let got = self
            .contender_mut(name)
            .instance
            .wait(Duration::from_secs(10));
        if got != Some(code) {
            self.fail(format!(
                "{name}'s leader-exec exited with {got:?}, expected {code}"
            ));
        }
    }

    /// Appends a runner's record to the history.
    pub fn note(&self, record: &Record) {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.history_path())
            .unwrap();
        file.write_all(format!("{}\n", record.line()).as_bytes())
            .unwrap();
    }

    pub fn fault(&self, kind: &str, begin: u128, end: u128, short: bool) {
        self.note(&Record::Fault(Fault {
            kind: kind.to_owned(),
            begin,
            end,
            short,
        }));
    }

    /// Fails the trial with everything needed to understand it: the history, each instance's
    /// log, and the trial's directory, which is kept.
    pub fn fail(&self, message: impl Display) -> ! {
        panic!("{message}\n{}", self.context())
    }

    pub fn context(&self) -> String {
        let mut out = format!(
            "--- trial {} in {}\n--- history:\n{}",
            self.lease,
            self.dir.as_ref().unwrap().path().display(),
            history::compact(&self.history_text())
        );
        for c in &self.contenders {
            let log = c.instance.stderr();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!(
                "--- {} (pid {}, {:?}):\n{}\n",
                c.name,
                c.instance.pid(),
                c.instance.status,
                tail.join("\n")
            ));
        }
        out
    }

    /// Ends the trial: records the teardown, heals every proxy, resumes and stops every instance,
    /// waits (bounded) until every process of every job is dead and records that, and checks the
    /// history.
    pub fn finish(&mut self) -> Verdict {
        let problems = self.stop_everything();
        let mut verdict = history::check_text_holders(&self.history_text(), self.holders);
        verdict.violations.extend(problems);
        verdict
    }

    /// The teardown without the check: records it, heals, resumes and stops every instance,
    /// records every job seen gone; returns what went wrong on the way.
    pub fn stop_everything(&mut self) -> Vec<String> {
        self.note(&Record::Teardown { time: now_ns() });
        let mut problems = Vec::new();
        for c in &mut self.contenders {
            c.heal();
            c.signal(Signal::SIGCONT);
            c.signal(Signal::SIGTERM);
        }
        for c in &mut self.contenders {
            // TERM, --kill-after for the group, at most 2 s to release the lease.
            if c.instance.wait(Duration::from_secs(15)).is_none() {
                problems.push(format!("{}'s leader-exec did not exit on SIGTERM", c.name));
                c.signal(Signal::SIGKILL);
            }
        }
        let mut jobs: Vec<(String, Vec<i32>)> = Vec::new();
        for record in self.records() {
            match record {
                Record::Start { name, pid, .. } => jobs.push((name, vec![pid])),
                Record::Spawn { name, pid, .. } => {
                    if let Some((_, pids)) = jobs.iter_mut().find(|(n, _)| *n == name) {
                        pids.push(pid);
                    }
                }
                _ => {}
            }
        }
        // Every job lists its shell and its grandchild as `PID START` in `$pids` (see
        // `job_script`). A long run goes round pid_max, so a listed pid (or the process group
        // the shell led) may name a later process by the teardown: a process counts as the job's
        // only while its start time is the one listed for its pid.
        let listed = std::fs::read_to_string(self.path("pids")).unwrap_or_default();
        let listed: Vec<(i32, &str)> = listed
            .lines()
            .filter_map(|line| {
                let (pid, start) = line.split_once(' ')?;
                Some((pid.parse().ok()?, start))
            })
            .collect();
        let same_process = |pid: i32| match start_time_of(pid) {
            // Not listed (its shell could not read /proc): taken as the job's, to be safe.
            Some(start) => {
                listed.iter().all(|&(p, _)| p != pid)
                    || listed.iter().any(|&(p, s)| p == pid && s == start)
            }
            None => false,
        };
        for (name, pids) in jobs {
            // The command's pid is its process group's id. While any process is in that group,
            // Linux hands its number to no new process; so a live process with that pid and
            // another start time means the job's group emptied and the number was reused.
            let group = pids[0];
            let group_alive =
                |group: i32| group_alive(group) && (!alive(group) || same_process(group));
            if wait_for(Duration::from_secs(5), || {
                pids.iter().all(|&p| !(alive(p) && same_process(p))) && !group_alive(group)
            }) {
                self.note(&Record::Gone {
                    name,
                    time: now_ns(),
                });
            }
        }
        problems
    }

    /// Fails the trial unless the verdict is clean.
    pub fn assert_safe(&self, verdict: &Verdict) {
        if !verdict.is_safe() {
            self.fail(verdict.problems());
        }
    }
}

impl Drop for Trial {
    fn drop(&mut self) {
        // Keep the evidence of a failed trial.
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!("chaos: kept {}", kept.display());
        }
    }
}

/// Should the runner die (a CI timeout), its instances die with it, and their commands with them.
/// The death signal fires when the spawning thread ends: a scenario's thread outlives its trials.
pub fn die_with_the_runner(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
}

pub fn prefix(lease: &str) -> String {
    format!("/leader-exec/{lease}/")
}

pub fn etcdctl(endpoints: &str, args: &[&str]) -> std::process::Output {
    Command::new("etcdctl")
        .env_remove("ETCDCTL_ENDPOINTS")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--command-timeout=2s")
        .args(args)
        .output()
        .expect("etcdctl is installed (apt-get install etcd-client)")
}

/// The current leader's token: the lowest create-revision under the election's prefix.
pub fn current_token(endpoints: &str, lease: &str) -> Option<i64> {
    let out = etcdctl(
        endpoints,
        &[
            "get",
            "--prefix",
            &prefix(lease),
            "--sort-by=CREATE",
            "--order=ASCEND",
            "--limit=1",
            "-w",
            "json",
        ],
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    answer["kvs"][0]["create_revision"].as_i64()
}

/// Whether `token` is the current leader's, as `leader-exec check` answers it (exit 0: current,
/// 1: stale; anything else is a failure of the check itself).
pub fn token_is_current(endpoints: &str, lease: &str, token: i64) -> bool {
    let status = leader_exec()
        .args(["check", "-q", "--endpoints", endpoints, "--lease", lease])
        .args(["--token", &token.to_string()])
        .status()
        .unwrap();
    match status.code() {
        Some(0) => true,
        Some(1) => false,
        other => panic!("leader-exec check failed: {other:?}"),
    }
}

/// Field 22 of /proc/PID/stat (the start time, in clock ticks since boot), as the job scripts
/// list it; `None` when the process is gone.
fn start_time_of(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19).map(str::to_owned)
}
