//! The generative fault test, in the spirit of Jepsen's nemesis: one seeded random schedule of
//! operations per store — instances joining with `--max-holders` N drawn from {1, 2, 3} (N changes
//! over time; an instance whose N disagrees with the line's exits 125), commands ending,
//! SIGKILL and SIGSTOP/SIGCONT of leader-exec and of its supervisor, `resign` (now and then
//! `--force`), slots taken with `leader-exec hold` and given back with `release`, the store
//! restarted and paused, an instance's route cut or black-holed, a joiner
//! whose first claiming request's answer is held back while the others come and go, and each
//! store's own manipulations (etcd: a candidate key deleted by hand; ZooKeeper: a candidate node
//! deleted by hand, the server restarted with other session bounds so that sessions renegotiate
//! their timeout; PostgreSQL: the token sequence set back with `ALTER SEQUENCE … RESTART`,
//! waiter rows deleted, the server's clock stepped through libfaketime, the primary killed and its
//! synchronous standby promoted, every route moved to it) — checked by one history checker
//! (`check.rs`).
//!
//! ```text
//! LEADER_EXEC_NEMESIS_SEED=N LEADER_EXEC_NEMESIS_STEPS=K cargo test --locked --test chaos nemesis::
//! ```
//!
//! repeats a schedule (the seed is printed at the start and in a failure); K steps (default
//! `STEPS` in the fast tier's `nemesis::STORE`, `LONG_STEPS` in the full tier's
//! `nemesis::long::STORE`; about a second each) make a long soak. The choices come from the seed; what they
//! meet (which instance holds when a fault lands) depends on timing, so a seed repeats a schedule,
//! not an interleaving: a failure that depends on one is found again by running its seed a few
//! times. `LEADER_EXEC_NEMESIS_VERBOSE=1` prints the whole schedule as it ran (every record but
//! the heartbeats); `LEADER_EXEC_NEMESIS_BIAS=pause` makes every other step a pause of a holder
//! past the TTL (a frozen leader and the grace it gives its command once it runs again).
//! `LEADER_EXEC_NEMESIS_MINUTES=M` ends the schedule after the step that ends past M minutes (a
//! soak by the clock); the steps run are printed, and that many steps with the same seed repeat it.

mod check;
mod stores;

pub use stores::Nemesis;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::{Instance, Proxy, leader_exec, now_ns, supervisor_of};
use crate::trial::{Contender, Timing, Trial, die_with_the_runner};

/// 1.5 s + 2 s + 0.25 s margin <= 4 s. A `--kill-after` of 2 s makes a resumed leader that gives
/// its command the grace (issue 33, 5) stand out from one that SIGKILLs at once.
pub const TIMING: Timing = Timing {
    name: "NEMESIS",
    ttl: Duration::from_secs(4),
    renew_deadline: Duration::from_millis(1500),
    retry_period: Duration::from_millis(300),
    kill_after: Duration::from_secs(2),
};

/// Steps per store when `LEADER_EXEC_NEMESIS_STEPS` is not set, in the fast tier
/// (`nemesis::STORE`): about half a minute a store.
pub const STEPS: usize = 30;
/// The same in the full tier (`nemesis::long::STORE`, `-- --ignored`): a few minutes a store.
pub const LONG_STEPS: usize = 100;
/// The most instances alive at once.
const CROWD: usize = 6;
const LEASE: &str = "nemesis";

fn seed() -> u64 {
    std::env::var("LEADER_EXEC_NEMESIS_SEED")
        .ok()
        .map(|s| s.parse().expect("LEADER_EXEC_NEMESIS_SEED is a number"))
        .unwrap_or_else(|| now_ns() as u64)
}

fn steps(default: usize) -> usize {
    std::env::var("LEADER_EXEC_NEMESIS_STEPS")
        .ok()
        .map(|s| s.parse().expect("LEADER_EXEC_NEMESIS_STEPS is a number"))
        .unwrap_or(default)
}

/// `LEADER_EXEC_NEMESIS_MINUTES`: a soak by the clock; the schedule stops after the step that
/// ends past it (the steps run are printed: the same seed with that many steps repeats it).
fn minutes() -> Option<Duration> {
    std::env::var("LEADER_EXEC_NEMESIS_MINUTES").ok().map(|s| {
        Duration::from_secs(
            60 * s
                .parse::<u64>()
                .expect("LEADER_EXEC_NEMESIS_MINUTES is a number"),
        )
    })
}

/// One instance of the schedule: one leader-exec, at most one job.
struct Member {
    name: String,
    n: usize,
    ignores_term: bool,
    paused: bool,
    supervisor_paused: Option<i32>,
    exited: bool,
}

/// Something the schedule does later.
enum Later {
    Resume(String),
    ResumeSupervisor(String, i32),
    Heal(String),
    Thaw,
    /// The server's clock back to the real one.
    ClockBack,
    /// The server restarted with the harness's own session bounds.
    SessionBoundsBack,
}

struct Run<S: Nemesis> {
    store: S,
    trial: Trial,
    members: Vec<Member>,
    rng: fastrand::Rng,
    later: Vec<(Instant, Later)>,
    frozen: bool,
    /// The N that joiners mostly take; it changes now and then.
    phase: usize,
    resigns: Vec<Child>,
    joined: usize,
    /// The joiners whose first claiming request was held back (their logs go with a verbose run).
    stalled: Vec<String>,
    /// `LEADER_EXEC_NEMESIS_BIAS=pause`: every other step pauses a holder past the TTL.
    bias_pause: bool,
    /// Slots `leader-exec hold` took and the schedule has not released yet.
    held: Vec<String>,
    /// The server's libfaketime offset file, where its clock (and its standby's) can be stepped.
    clock: Option<tempfile::NamedTempFile>,
    /// The server's clock stands stepped (a `ClockBack` is due).
    clock_stepped: bool,
    /// The server runs with session bounds below what the flags need (a `SessionBoundsBack`
    /// is due).
    bounds_too_short: bool,
}

/// The job: records its start with its token, lists its shell as `PID START` in `$d/pids` (START
/// from /proc/PID/stat, so that the teardown tells it from a later process given the same pid:
/// a long run goes round pid_max), beats every 50 ms, ends when the runner creates `end-NAME`
/// (exit 0); on SIGTERM records `stop` and exits, or records `term` and runs on.
fn job_script(history: &Path, dir: &Path, name: &str, ignores_term: bool) -> String {
    const NOW: &str = "${EPOCHREALTIME//[!0-9]/}000";
    let trap = if ignores_term {
        format!(r#"trap 'echo "term $n {NOW}" >> "$h"' TERM"#)
    } else {
        format!(r#"trap 'echo "stop $n {NOW}" >> "$h"; exit 0' TERM"#)
    };
    format!(
        r#"h='{h}'; d='{d}'; n='{name}'
echo "start $n $LEADER_TOKEN $$ {NOW}" >> "$h"
if {{ read -r stat < "/proc/$$/stat"; }} 2>/dev/null; then f=(${{stat##*) }}); echo "$$ ${{f[19]}}" >> "$d/pids"; fi
{trap}
for ((i = 0; i < 6000; i++)); do
  echo "beat $n {NOW}" >> "$h"
  if [ -e "$d/end-$n" ]; then exit 0; fi
  sleep 0.05
done
"#,
        h = history.display(),
        d = dir.display(),
    )
}

/// Appends one line to the history.
fn note(history: &Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(history)
        .unwrap();
    // One write with its newline: jobs append to the same file (O_APPEND keeps one write whole;
    // `writeln!` may take two).
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

impl<S: Nemesis> Run<S> {
    fn note(&self, line: &str) {
        note(&self.trial.history_path(), line);
    }

    fn dir(&self) -> std::path::PathBuf {
        self.trial.history_path().parent().unwrap().to_owned()
    }

    fn contender(&mut self, name: &str) -> &mut Contender {
        self.trial.contender_mut(name)
    }

    fn join(&mut self, n: usize, stall: bool) -> String {
        let name = format!("i{}", self.joined);
        self.joined += 1;
        let ignores_term = self.rng.bool();
        let no_wait = !stall && self.rng.u8(..10) == 0;
        let proxy = Proxy::start(self.store.addr());
        if stall {
            proxy.freeze_after_request_containing(&S::needle(LEASE));
        }
        let script = job_script(&self.trial.history_path(), &self.dir(), &name, ignores_term);
        let mut command = leader_exec();
        command
            .args(["-v", "--endpoints", &self.store.endpoint_via(&proxy)])
            .args(["--lease", LEASE, "--identity", &name])
            .args(["--max-holders", &n.to_string()])
            .args(TIMING.args());
        if no_wait {
            command.arg("--no-wait");
        }
        command.args(["--", "bash", "-c", &script]);
        die_with_the_runner(&mut command);
        self.note(&format!("join {name} {n} {}", now_ns()));
        let instance = Instance::start_command(&mut command);
        self.trial.contenders.push(Contender {
            name: name.clone(),
            proxies: vec![proxy],
            instance,
        });
        self.members.push(Member {
            name: name.clone(),
            n,
            ignores_term,
            paused: false,
            supervisor_paused: None,
            exited: false,
        });
        self.note(&format!(
            "op join {name} N={n}{}{}{}",
            if ignores_term { " ignores-TERM" } else { "" },
            if no_wait { " --no-wait" } else { "" },
            if stall {
                " (its first claiming request's answer held back)"
            } else {
                ""
            }
        ));
        name
    }

    /// Names of members whose job runs (started, not ended by the runner, leader-exec alive).
    fn running_jobs(&self) -> Vec<String> {
        let text = self.trial.history_text();
        let mut started: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("start ") {
                started.push(rest.split(' ').next().unwrap_or_default().to_owned());
            }
        }
        started
            .into_iter()
            .filter(|n| {
                !self.dir().join(format!("end-{n}")).exists()
                    && self.members.iter().any(|m| &m.name == n && !m.exited)
            })
            .collect()
    }

    fn live(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| !self.members[i].exited)
            .collect()
    }

    /// A live member, holders twice as likely as waiters.
    fn pick(&mut self) -> Option<usize> {
        let running = self.running_jobs();
        let mut pool = Vec::new();
        for i in self.live() {
            pool.push(i);
            if running.contains(&self.members[i].name) {
                pool.push(i);
            }
        }
        (!pool.is_empty()).then(|| pool[self.rng.usize(..pool.len())])
    }

    fn end(&mut self, name: &str) {
        std::fs::write(self.dir().join(format!("end-{name}")), b"").unwrap();
        self.note(&format!("op end {name}"));
    }

    fn pid_of(&mut self, name: &str) -> i32 {
        self.contender(name).instance.pid()
    }

    fn after(&mut self, wait: Duration, what: Later) {
        self.later.push((Instant::now() + wait, what));
    }

    fn between(&mut self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(self.rng.u64(low_ms..high_ms))
    }

    fn run_later(&mut self, what: Later) {
        match what {
            Later::Resume(name) => {
                let c = self.trial.contender_mut(&name);
                c.signal(Signal::SIGCONT);
                self.note(&format!("resume {name} {}", now_ns()));
                if let Some(m) = self.members.iter_mut().find(|m| m.name == name) {
                    m.paused = false;
                }
            }
            Later::ResumeSupervisor(name, pid) => {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                self.note(&format!("op supervisor of {name} resumed"));
                if let Some(m) = self.members.iter_mut().find(|m| m.name == name) {
                    m.supervisor_paused = None;
                }
            }
            Later::Heal(name) => {
                self.contender(&name).heal();
                self.note(&format!("op heal {name}"));
            }
            Later::Thaw => {
                self.store.thaw();
                self.frozen = false;
                self.note("op store thawed");
            }
            Later::ClockBack => {
                self.set_clock(0);
                self.clock_stepped = false;
                self.note("op server clock back");
            }
            // Not while the server is stopped: its thaw is due and would find another process.
            Later::SessionBoundsBack if self.frozen => {
                self.after(Duration::from_millis(200), Later::SessionBoundsBack);
            }
            Later::SessionBoundsBack => {
                self.note("op session bounds back to the harness's (restart)");
                self.store.restart_with_session_bounds("");
                self.bounds_too_short = false;
                self.note("op store back");
            }
        }
    }

    /// Runs what is due and records exits, for `wait`.
    fn tick(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        loop {
            let now = Instant::now();
            let due: Vec<usize> = (0..self.later.len())
                .filter(|&i| self.later[i].0 <= now)
                .collect();
            for i in due.into_iter().rev() {
                let (_, what) = self.later.remove(i);
                self.run_later(what);
            }
            for i in 0..self.members.len() {
                if self.members[i].exited {
                    continue;
                }
                let name = self.members[i].name.clone();
                if let Some(code) = self.contender(&name).instance.wait(Duration::ZERO) {
                    self.members[i].exited = true;
                    let code = if code < 0 {
                        "sig".to_owned()
                    } else {
                        code.to_string()
                    };
                    self.note(&format!("exit {name} {code} {}", now_ns()));
                }
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One step of the schedule.
    fn step(&mut self) {
        if self.bias_pause && self.rng.bool() {
            self.step_pause(true);
            return;
        }
        let live = self.live().len();
        // A failover, where the store keeps a standby: one step in 16 while an instance lives,
        // so that a 50-step run mostly has one or more.
        if S::STANDBY && live > 0 && !self.frozen && self.rng.u8(..16) == 0 {
            self.step_failover();
            return;
        }
        let roll = if live < 2 { 0 } else { self.rng.u32(..100) };
        match roll {
            // Join, mostly at the phase's N.
            0..=21 if live < CROWD => {
                let n = if self.rng.u8(..10) < 8 {
                    self.phase
                } else {
                    self.rng.usize(1..=3)
                };
                self.join(n, false);
            }
            0..=21 => self.step_end(),
            22..=33 => self.step_end(),
            34..=37 => {
                self.phase = self.rng.usize(1..=3);
                self.note(&format!("op phase N={}", self.phase));
            }
            // A joiner whose first claiming request is answered late, while every job ends as
            // soon as it starts (issue 33, 1: a late first look over holders that came and went).
            38..=43 if live < CROWD => self.step_stalled_joiner(),
            38..=53 => {
                let long = self.rng.bool();
                self.step_pause(long);
            }
            // SIGKILL of leader-exec (not a paused one: its job is left to meet its resume).
            54..=57 => {
                if let Some(i) = self.pick()
                    && self.members[i].supervisor_paused.is_none()
                    && !self.members[i].paused
                {
                    let name = self.members[i].name.clone();
                    self.note(&format!("kill {name} {}", now_ns()));
                    self.contender(&name).signal(Signal::SIGKILL);
                }
            }
            58..=61 => self.step_supervisor(),
            62..=65 => self.step_resign(),
            66..=68 if !self.frozen => {
                self.note("op store restart");
                self.store.restart();
                self.note("op store back");
            }
            69..=72 if !self.frozen => {
                let wait = self.between(100, 3000);
                self.note(&format!("op store paused for {wait:?}"));
                self.store.freeze();
                self.frozen = true;
                self.after(wait, Later::Thaw);
            }
            73..=82 => {
                if let Some(i) = self.pick() {
                    let name = self.members[i].name.clone();
                    let wait = self.between(200, 6000);
                    let cut = self.rng.bool();
                    if cut {
                        self.contender(&name).cut();
                    } else {
                        self.contender(&name).freeze();
                    }
                    let how = if cut { "cut" } else { "black-holed" };
                    self.note(&format!("op {name}'s route {how} for {wait:?}"));
                    self.after(wait, Later::Heal(name));
                }
            }
            83..=88 if !self.frozen => {
                let from = now_ns();
                if let Some((what, deposes)) = self.store.by_hand(&mut self.rng, LEASE) {
                    self.note(&format!("op {what}"));
                    if deposes {
                        self.note(&format!("deposed {from} {}", now_ns()));
                    }
                }
            }
            89..=92 if !self.frozen => {
                if self.clock.is_some() {
                    self.step_clock();
                } else {
                    self.step_session_bounds();
                }
            }
            93..=96 if !self.frozen => self.step_hold(),
            _ => {
                let wait = self.between(300, 2000);
                self.note(&format!("op sleep {wait:?}"));
                self.tick(wait);
            }
        }
    }

    /// The store fails over to its standby; every proxy of every instance is pointed at the new
    /// primary when the store moves the route (an instance that joins later gets a proxy to it).
    fn step_failover(&mut self) {
        let history = self.trial.history_path();
        let contenders = &self.trial.contenders;
        let mut move_route = |addr: SocketAddr| {
            contenders
                .iter()
                .flat_map(|c| &c.proxies)
                .for_each(|proxy| proxy.retarget(addr));
            note(&history, &format!("op every route moved to {addr}"));
        };
        if let Some(what) = self.store.failover(&mut self.rng, &mut move_route) {
            self.note(&format!("op {what}"));
        }
    }

    /// Writes the server's libfaketime offset: `seconds` ahead of the real clock (behind when
    /// negative). The server reads the file on every clock call (`FAKETIME_NO_CACHE`).
    fn set_clock(&self, seconds: i64) {
        if let Some(clock) = &self.clock {
            std::fs::write(clock.path(), format!("{seconds:+}\n")).unwrap();
        }
    }

    /// The server's clock stepped ahead (or, a third of the time, back) by 5–60 s, and back to
    /// the real one after 0.5 s to two TTLs. The server's clock decides nothing (a taker must
    /// see a lease unchanged for a TTL on its own clock), so the checker's rules stand as they are.
    fn step_clock(&mut self) {
        if self.clock_stepped {
            return;
        }
        let size = self.rng.i64(5..=60);
        let seconds = if self.rng.u8(..3) == 0 { -size } else { size };
        let hold = self.between(500, 2 * TIMING.ttl.as_millis() as u64);
        self.set_clock(seconds);
        self.clock_stepped = true;
        self.note(&format!(
            "op server clock stepped {seconds:+} s for {hold:?}"
        ));
        self.after(hold, Later::ClockBack);
    }

    /// The server restarted on its data with other session bounds, so that every session
    /// renegotiates its timeout on reconnect (and every new one gets it):
    ///
    /// - `maxSessionTimeout` below `--ttl` but not below what the flags need
    ///   (`--renew-deadline + --kill-after + margin`): sessions get less than they asked and
    ///   still enough; holders keep holding;
    /// - `minSessionTimeout` above `--ttl`: sessions get more than they asked;
    /// - `maxSessionTimeout` below what the flags need: every holder that reconnects stops its
    ///   command at once (SIGKILL, exit 75) and every campaign exits 125, until the harness's
    ///   bounds come back 1–4 s later. Every cut route is healed and every stopped leader-exec
    ///   resumed first, and every reconnect finishes before the next fault: a reconnect whose
    ///   answer is lost leaves its leader counting with the old timeout, which no client can see
    ///   (docs/zookeeper.md: never lower the maximum while leaders hold longer sessions);
    /// - back to the harness's bounds (1–30 s).
    fn step_session_bounds(&mut self) {
        if self.bounds_too_short {
            return;
        }
        let margin = (TIMING.ttl / 20).max(Duration::from_millis(250));
        let needed = (TIMING.renew_deadline + TIMING.kill_after + margin).as_millis() as u64;
        let ttl = TIMING.ttl.as_millis() as u64;
        let (cfg, what, too_short) = match self.rng.u8(..10) {
            0..=3 => {
                let max = self.rng.u64(needed..ttl);
                (
                    format!("maxSessionTimeout={max}\n"),
                    format!(
                        "maxSessionTimeout={max} ms (below --ttl {ttl} ms, not below the {needed} ms the flags need)"
                    ),
                    false,
                )
            }
            4..=5 => {
                let min = self.rng.u64(ttl + 500..=3 * ttl);
                (
                    format!("minSessionTimeout={min}\n"),
                    format!("minSessionTimeout={min} ms (above --ttl {ttl} ms)"),
                    false,
                )
            }
            6..=7 => {
                // Every cut route healed and every stopped leader-exec resumed first.
                let pending = std::mem::take(&mut self.later);
                for (at, what) in pending {
                    match what {
                        Later::Heal(_) | Later::Resume(_) => self.run_later(what),
                        what => self.later.push((at, what)),
                    }
                }
                let max = self.rng.u64(1000..needed - 250);
                (
                    format!("maxSessionTimeout={max}\n"),
                    format!(
                        "maxSessionTimeout={max} ms (below the {needed} ms the flags need: every holder stops, every campaign exits 125)"
                    ),
                    true,
                )
            }
            _ => (String::new(), "the harness's (1–30 s)".to_owned(), false),
        };
        self.note(&format!("op store restarted with session bounds {what}"));
        if !self.store.restart_with_session_bounds(&cfg) {
            return;
        }
        self.note("op store back");
        if too_short {
            self.bounds_too_short = true;
            let wait = self.between(1000, 4000);
            self.after(wait, Later::SessionBoundsBack);
            // Every client reconnects (a pause of at most about a second before each round)
            // before anything can cut its route.
            self.tick(Duration::from_millis(2500));
        }
    }

    /// Ends a running job, not one whose leader-exec is paused: that one is left to run on
    /// (the job of a frozen leader, issue 33, 5); the stalled joiner's turnover ends those too.
    fn step_end(&mut self) {
        let running: Vec<String> = self
            .running_jobs()
            .into_iter()
            .filter(|n| !self.members.iter().any(|m| &m.name == n && m.paused))
            .collect();
        if !running.is_empty() {
            let name = running[self.rng.usize(..running.len())].clone();
            self.end(&name);
        }
    }

    /// The line turns over while a joiner's first claiming request goes unanswered: first the
    /// line is filled (N holders of the phase's N and a waiter), then the joiner comes, mostly
    /// with another N, and with N = 1 after a line of N > 1 (a single leader's token and a
    /// holder's are made differently: where tokens went backwards), and every job ends as soon as
    /// it starts until the answer comes back.
    fn step_stalled_joiner(&mut self) {
        let in_line = self
            .members
            .iter()
            .filter(|m| !m.exited && m.n == self.phase)
            .count();
        for _ in in_line..self.phase + 1 {
            if self.live().len() < CROWD + 2 {
                self.join(self.phase, false);
            }
        }
        self.tick(Duration::from_millis(700));
        let n = match self.phase {
            1 => self.rng.usize(2..=3),
            _ if self.rng.u8(..3) == 0 => self.phase,
            _ => 1,
        };
        let stalled = self.join(n, true);
        self.stalled.push(stalled.clone());
        // The held-back answer must come back before the client gives its connection up (on
        // ZooKeeper, two thirds of the session timeout: then it starts over with a new session).
        let hold = self.between(600, 1800);
        let until = Instant::now() + hold;
        let proxy_tripped = |run: &mut Self| run.contender(&stalled).proxies[0].tripped();
        while Instant::now() < until && !proxy_tripped(self) {
            self.tick(Duration::from_millis(20));
        }
        while Instant::now() < until {
            for name in self.running_jobs() {
                let paused = self.members.iter().any(|m| m.name == name && m.paused);
                if name != stalled && !paused {
                    self.end(&name);
                }
            }
            let pause = self.between(60, 200);
            self.tick(pause);
        }
        let tripped = proxy_tripped(self);
        self.contender(&stalled).heal();
        self.note(&format!(
            "op heal {stalled} ({})",
            if tripped {
                "its request had gone through"
            } else {
                "its request had not come"
            }
        ));
    }

    fn step_pause(&mut self, long: bool) {
        // Half brief, half past the TTL (a stopped VM) and of a holder: then a waiter takes over
        // meanwhile, and on SIGCONT the old one must stop its command at once (issue 33, 5).
        let i = if long {
            // Mostly a holder whose command ignores TERM: the one a late grace lets run on.
            let mut running = self.running_jobs();
            let deaf: Vec<String> = running
                .iter()
                .filter(|n| self.members.iter().any(|m| &m.name == *n && m.ignores_term))
                .cloned()
                .collect();
            if !deaf.is_empty() && self.rng.u8(..3) > 0 {
                running = deaf;
            }
            let Some(name) =
                (!running.is_empty()).then(|| running[self.rng.usize(..running.len())].clone())
            else {
                return;
            };
            self.members.iter().position(|m| m.name == name).unwrap()
        } else {
            let Some(i) = self.pick() else { return };
            i
        };
        if self.members[i].paused {
            return;
        }
        let name = self.members[i].name.clone();
        if long && self.live().len() < CROWD + 2 {
            // Someone to take over while it is frozen.
            self.join(self.members[i].n, false);
        }
        let wait = if long {
            TIMING.ttl + self.between(1000, 3500)
        } else {
            self.between(100, 1200)
        };
        self.note(&format!(
            "op pause {name} for {wait:?}{}",
            if self.members[i].ignores_term {
                " (its command ignores TERM)"
            } else {
                ""
            }
        ));
        self.note(&format!("pause {name} {}", now_ns()));
        self.contender(&name).signal(Signal::SIGSTOP);
        self.members[i].paused = true;
        self.after(wait, Later::Resume(name));
    }

    fn step_supervisor(&mut self) {
        let Some(i) = self.pick() else { return };
        let name = self.members[i].name.clone();
        let pid = self.pid_of(&name);
        let Some(supervisor) = supervisor_of(pid) else {
            return;
        };
        if self.rng.bool() {
            self.note(&format!("op supervisor of {name} SIGKILLed"));
            let _ = kill(Pid::from_raw(supervisor), Signal::SIGKILL);
        } else if self.members[i].supervisor_paused.is_none() {
            let wait = self.between(200, 3000);
            self.note(&format!("op supervisor of {name} paused for {wait:?}"));
            let _ = kill(Pid::from_raw(supervisor), Signal::SIGSTOP);
            self.members[i].supervisor_paused = Some(supervisor);
            self.after(wait, Later::ResumeSupervisor(name, supervisor));
        }
    }

    /// `leader-exec hold` a slot at the phase's N (`--for` 30 s, waiting at most 2 s), or
    /// `release` one held. A held slot is a job with no process in the history: `join` before the
    /// hold, `start` with the token it printed once it exited 0 (its pid one no process can
    /// have), and a `beat` at the instant a `release` that answered 0 was sent (the slot stood
    /// until then; a slot gone otherwise — its bound, a deletion by hand, `resign --force` —
    /// shows no later sign of life). It counts against N in rule 1 and its token in rule 2.
    fn step_hold(&mut self) {
        if !self.held.is_empty() && self.rng.bool() {
            let name = self.held.remove(self.rng.usize(..self.held.len()));
            let sent = now_ns();
            let code = self.leader_exec_status(&["release", "--identity", &name]);
            if code == Some(0) {
                self.note(&format!("beat {name} {sent}"));
            }
            self.note(&format!("op release {name}: {code:?}"));
            return;
        }
        let name = format!("h{}", self.joined);
        self.joined += 1;
        let n = self.phase;
        self.note(&format!("join {name} {n} {}", now_ns()));
        let mut command = leader_exec();
        command
            .args(["hold", "--endpoints", &self.store.endpoint()])
            .args(["--lease", LEASE, "--identity", &name, "--ttl", "4s"])
            .args(["--max-holders", &n.to_string(), "--for", "30s"])
            .args(["--wait-timeout", "2s"]);
        let out = command.output().unwrap();
        let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let code = out.status.code();
        if code == Some(0) {
            // Past pid_max (at most 2^22): no process ever has it.
            self.note(&format!("start {name} {token} {} {}", 4_194_305, now_ns()));
            self.held.push(name.clone());
        }
        let last = String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        self.note(&format!("op hold {name} N={n}: {code:?} {last}"));
    }

    /// Releases every held slot (the teardown).
    fn step_hold_release_all(&mut self) {
        for name in std::mem::take(&mut self.held) {
            let sent = now_ns();
            let code = self.leader_exec_status(&["release", "--identity", &name]);
            if code == Some(0) {
                self.note(&format!("beat {name} {sent}"));
            }
            self.note(&format!("op release {name}: {code:?}"));
        }
    }

    /// Runs a subcommand on the lease to its end; its exit code.
    fn leader_exec_status(&self, args: &[&str]) -> Option<i32> {
        leader_exec()
            .args(args)
            .args(["--endpoints", &self.store.endpoint(), "--lease", LEASE])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .code()
    }

    fn step_resign(&mut self) {
        let force = self.rng.u8(..10) < 2;
        let mut command = leader_exec();
        command
            .args(["resign", "--endpoints", &self.store.endpoint()])
            .args(["--lease", LEASE, "--timeout", "5s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if force {
            command.arg("--force");
            let from = now_ns();
            let _ = command.status();
            self.note("op resign --force");
            self.note(&format!("deposed {from} {}", now_ns()));
        } else {
            self.note("op resign");
            self.resigns.push(command.spawn().unwrap());
        }
    }

    /// Ends every fault, stops everything and checks the history.
    fn finish(&mut self) -> Vec<String> {
        let pending: Vec<Later> = self.later.drain(..).map(|(_, l)| l).collect();
        for what in pending {
            self.run_later(what);
        }
        for i in 0..self.members.len() {
            if let Some(pid) = self.members[i].supervisor_paused.take() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
        }
        self.tick(Duration::from_millis(100));
        self.step_hold_release_all();
        let mut problems = self.trial.stop_everything();
        for mut resign in self.resigns.drain(..) {
            let _ = resign.kill();
            let _ = resign.wait();
        }
        problems.extend(check::check(
            &self.trial.history_text(),
            TIMING.renew_deadline + TIMING.kill_after,
        ));
        problems
    }
}

/// Runs one schedule of `default_steps` (unless `LEADER_EXEC_NEMESIS_STEPS` says otherwise)
/// against a fresh server of `S`.
pub fn run<S: Nemesis>(store_name: &str, default_steps: usize) {
    let _serial = crate::SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seed = seed();
    let steps = steps(default_steps);
    let repeat = format!(
        "LEADER_EXEC_NEMESIS_SEED={seed} LEADER_EXEC_NEMESIS_STEPS={steps} cargo test --locked --test chaos nemesis::{store_name}"
    );
    eprintln!("nemesis: {store_name}, seed {seed}, {steps} steps (repeat: {repeat})");
    let started = Instant::now();
    let (store, clock) = S::start_nemesis();
    let trial = Trial::empty(&store.endpoint(), LEASE, TIMING);
    let mut run = Run {
        store,
        trial,
        members: Vec::new(),
        rng: fastrand::Rng::with_seed(seed),
        later: Vec::new(),
        frozen: false,
        phase: 1,
        resigns: Vec::new(),
        joined: 0,
        stalled: Vec::new(),
        bias_pause: std::env::var("LEADER_EXEC_NEMESIS_BIAS").is_ok_and(|b| b == "pause"),
        held: Vec::new(),
        clock,
        clock_stepped: false,
        bounds_too_short: false,
    };
    run.phase = run.rng.usize(1..=3);
    run.note(&format!(
        "op seed {seed}, {steps} steps, phase N={}",
        run.phase
    ));
    let until = minutes().map(|m| started + m);
    let mut ran = 0;
    for _ in 0..steps {
        run.step();
        let pause = run.between(100, 700);
        run.tick(pause);
        ran += 1;
        if until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
    }
    let repeat = format!(
        "LEADER_EXEC_NEMESIS_SEED={seed} LEADER_EXEC_NEMESIS_STEPS={ran} cargo test --locked --test chaos nemesis::{store_name}"
    );
    let problems = run.finish();
    if std::env::var_os("LEADER_EXEC_NEMESIS_VERBOSE").is_some() {
        let text = run.trial.history_text();
        for line in text.lines().filter(|l| !l.starts_with("beat ")) {
            eprintln!("  {line}");
        }
        for name in &run.stalled {
            eprintln!(
                "--- {name}:\n{}",
                run.trial.contender(name).instance.stderr()
            );
        }
    }
    eprintln!(
        "nemesis: {store_name}, seed {seed}: {ran} steps, {} instances, {:?}, {}",
        run.joined,
        started.elapsed(),
        if problems.is_empty() {
            "clean".to_owned()
        } else {
            format!("{} violations", problems.len())
        }
    );
    if !problems.is_empty() {
        run.trial.fail(format!(
            "nemesis on {store_name}, seed {seed}, {ran} steps: {} violations:\n{}\nrepeat: {repeat}",
            problems.len(),
            problems.join("\n")
        ));
    }
}

/// One test per store of the store list marked for the chaos suite: `nemesis::etcd`, … (the
/// fast tier's schedule), and `nemesis::long::etcd`, … (the full tier's).
macro_rules! nemesis_tests {
    ({} $($store:ident : $ty:ident [$($chaos:tt)*] [$($bench:tt)*];)*) => {
        $( nemesis_test! { $store $ty [$($chaos)*] STEPS } )*
        mod long {
            use super::{LONG_STEPS, run};
            $( nemesis_test! { $store $ty [$($chaos)*] LONG_STEPS #[ignore = "full tier: cargo test --locked -- --ignored"] } )*
        }
    };
}

macro_rules! nemesis_test {
    ($store:ident $ty:ident [chaos $prefix:literal] $steps:ident $(#[$tier:meta])?) => {
        #[test]
        $(#[$tier])?
        fn $store() {
            run::<crate::harness::$ty>(stringify!($store), $steps);
        }
    };
    ($store:ident $ty:ident [] $steps:ident $(#[$tier:meta])?) => {};
}

with_stores! { nemesis_tests! {} }
