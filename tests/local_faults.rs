//! Local faults: what happens on the leader's own host — a stderr nobody drains or nobody reads,
//! Ctrl-Z, a stopped supervisor, `pkill -9 leader-exec` — must not let two commands run at once,
//! exactly as a partition must not.

use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::harness::*;

/// A job that records the signal that stops it (and its end), then exits.
const STOPPABLE: &str = r#"trap 'echo "term a $(date +%s%N)" >> "$h"; echo "end a $(date +%s%N)" >> "$h"; exit 0' TERM
while :; do sleep 0.05; done"#;

/// Slack for a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(1);

/// Bytes waiting in a pipe.
fn pipe_fill(fd: &impl AsRawFd) -> i32 {
    let mut n: nix::libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::FIONREAD, &mut n) };
    n
}

/// Waits until B stands in line behind the leader.
fn wait_in_line(etcd: &Etcd, lease: &str) {
    let prefix = format!("/leader-exec/{lease}/");
    assert!(
        wait_for(Duration::from_secs(10), || etcd.keys(&prefix).len() == 2),
        "b did not join the line"
    );
}

#[test]
fn a_stderr_nobody_reads_cannot_delay_the_step_down() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // The command itself fills the pipe (64 KiB; full once less than a write fits) the moment
    // it starts; leader-exec logs at
    // debug level into the same pipe from then on.
    // (The job's own shell then writes elsewhere: it would block too, on a "Terminated" line.)
    let job = format!("head -c 300000 /dev/zero | tr '\\0' x >&2 &\nexec 2>/dev/null\n{STOPPABLE}");
    let proxied = proxy.endpoint();
    let mut args = lease_args(&proxied, "stalled");
    args.push("-vv");
    let mut a = Instance::start_with_stderr(
        leader_exec()
            .args(&args)
            .arg("--")
            .args(scratch.job("a", &job)),
        Stdio::from(write_end),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    assert!(
        wait_for(Duration::from_secs(5), || pipe_fill(&read_end) >= 60_000),
        "the pipe never filled: {} bytes",
        pipe_fill(&read_end)
    );
    let b = etcd.endpoint();
    let mut b = Instance::start(&lease_args(&b, "stalled"), &scratch.job("b", "true"));
    wait_in_line(&etcd, "stalled");

    let cut = Instant::now();
    proxy.cut();
    let term = scratch.wait_record("term", "a", RENEW_DEADLINE + KILL_AFTER + SLACK * 2);
    assert!(
        term.is_some(),
        "no TERM {:?} after the cut: the step-down is stuck behind a log write\n{:#?}",
        cut.elapsed(),
        scratch.history()
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75));
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
    drop(read_end);
}

#[test]
fn a_broken_stderr_neither_aborts_nor_keeps_the_lease() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // Nobody will ever read: every write to stderr fails with EPIPE.
    drop(read_end);
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "broken");
    args.push("-vv");
    let mut a = Instance::start_with_stderr(
        leader_exec()
            .args(&args)
            .arg("--")
            .args(scratch.job("a", STOPPABLE)),
        Stdio::from(write_end),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started although stderr is broken");
    let out = etcd.ctl(&["del", "--prefix", "/leader-exec/broken/"]);
    assert!(out.status.success());
    assert_eq!(a.wait(Duration::from_secs(5)), Some(75));
    // Released on the way out, not left to expire.
    assert!(etcd.leases().is_empty(), "{:?}", etcd.leases());
}

#[test]
fn job_control_stop_signals_do_not_stop_a_leader() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    // Runs longer than the TTL: a stopped leader would lose its lease meanwhile.
    let mut a = Cmd::bare()
        .args(lease_args(&endpoint, "tstp"))
        .arg("--")
        .args(scratch.job("a", "sleep 4.5"))
        .in_own_group()
        .start();
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let mut b = Instance::start(&lease_args(&endpoint, "tstp"), &scratch.job("b", "true"));
    wait_in_line(&etcd, "tstp");

    for signal in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        // To the process, and to its job's process group, as a terminal's Ctrl-Z does.
        kill(Pid::from_raw(a.pid()), signal).unwrap();
        killpg(Pid::from_raw(a.pid()), signal).unwrap();
    }
    let stopped = wait_for(Duration::from_millis(500), || {
        state_of(a.pid()) == Some('T')
    });
    assert!(!stopped, "leader-exec was stopped by a job-control signal");

    // It kept renewing: B waited for A's command to finish, however long past the TTL.
    assert_eq!(a.wait(Duration::from_secs(15)), Some(0), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    let history = scratch.history();
    assert_one_at_a_time(&history);
    assert!(history.iter().any(|r| r.kind == "end" && r.name == "a"));
}

#[test]
fn a_stopped_supervisor_cannot_keep_the_command_alive() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(etcd.addr());
    let scratch = Scratch::new();
    let proxied = proxy.endpoint();
    let mut a = Instance::start(
        &lease_args(&proxied, "stopsup"),
        &scratch.job("a", &stubborn("a")),
    );
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let grandchild = scratch.grandchild("a");
    let endpoint = etcd.endpoint();
    let mut b = Instance::start(&lease_args(&endpoint, "stopsup"), &scratch.job("b", "true"));
    wait_in_line(&etcd, "stopsup");

    let supervisor = supervisor_of(a.pid()).expect("a's supervisor");
    kill(Pid::from_raw(supervisor), Signal::SIGSTOP).unwrap();
    let cut = Instant::now();
    proxy.cut();
    // TERM is ignored; SIGKILL must reach the group without the supervisor's help.
    let limit = RENEW_DEADLINE + KILL_AFTER + SLACK * 2;
    assert!(
        wait_for(limit, || !alive(start.pid()) && !alive(grandchild)),
        "the command's group outlived the step-down by {:?} with its supervisor stopped",
        cut.elapsed()
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(75), "{}", a.stderr());
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
    // leader-exec does not leave its stopped supervisor behind.
    assert!(
        wait_for(Duration::from_secs(2), || !alive(supervisor)),
        "the supervisor outlived leader-exec"
    );
}

#[test]
fn killing_everything_named_leader_exec_still_kills_the_grandchild() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let mut a = Cmd::bare()
        .args(lease_args(&endpoint, "pkill"))
        .arg("--")
        .args(scratch.job("a", &stubborn("a")))
        .in_own_group()
        .start();
    let start = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let grandchild = scratch.grandchild("a");
    let mut b = Instance::start(&lease_args(&endpoint, "pkill"), &scratch.job("b", "true"));
    wait_in_line(&etcd, "pkill");

    // No name or command line of the supervisor matches `leader-exec`.
    let supervisor = supervisor_of(a.pid()).expect("a's supervisor, named lx-supervisor");
    assert!(!cmdline_of(supervisor).contains("leader-exec"));
    assert!(!comm_of(supervisor).contains("leader-exec"));
    assert_ne!(
        nix::unistd::getpgid(Some(Pid::from_raw(supervisor))).unwrap(),
        Pid::from_raw(a.pid()),
        "the supervisor is in leader-exec's job"
    );

    // What `pkill -9 leader-exec`, `pkill -9 -f leader-exec`, `killall -9 leader-exec` and
    // `kill -9 %1` would kill among this instance's processes, all at once.
    let mut victims = Vec::new();
    let mut todo = vec![a.pid()];
    while let Some(pid) = todo.pop() {
        todo.extend(children_of(pid));
        if comm_of(pid) == "leader-exec" || cmdline_of(pid).contains("leader-exec") {
            victims.push(pid);
        }
    }
    assert!(victims.contains(&a.pid()));
    for &pid in &victims {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = killpg(Pid::from_raw(a.pid()), Signal::SIGKILL);
    let killed = Instant::now();

    assert!(
        wait_for(SLACK * 2, || !alive(start.pid()) && !alive(grandchild)),
        "the command's group survived the kill of every leader-exec process"
    );
    assert!(killed.elapsed() < TTL, "took {:?}", killed.elapsed());
    a.wait(Duration::from_secs(5));
    assert_eq!(b.wait(Duration::from_secs(15)), Some(0), "{}", b.stderr());
    assert_one_at_a_time(&scratch.history());
}

#[test]
fn a_garbage_occurrence_record_releases_the_candidacy_at_once() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let out = etcd.ctl(&[
        "put",
        "/leader-exec/.occurrences/garbage/nightly",
        "not json",
    ]);
    assert!(out.status.success());
    let endpoint = etcd.endpoint();
    let mut args = lease_args(&endpoint, "garbage");
    args.extend(["--occurrence", "nightly"]);
    let mut a = Instance::start(&args, &scratch.job("a", "true"));
    assert_eq!(a.wait(Duration::from_secs(10)), Some(125), "{}", a.stderr());
    assert!(
        a.stderr().contains("not an occurrence record"),
        "{}",
        a.stderr()
    );
    // Released before exiting, not left for the TTL: the next waiter is not held up.
    assert!(
        etcd.keys("/leader-exec/garbage/").is_empty(),
        "{:?}",
        etcd.keys("/leader-exec/garbage/")
    );
    assert!(scratch.wait_record("start", "a", Duration::ZERO).is_none());
}

/// A datagram socket whose queue is full: every further blocking send to it would block.
fn full_notify_socket(name: &[u8]) -> std::os::unix::net::UnixDatagram {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let address = SocketAddr::from_abstract_name(name).unwrap();
    let receiver = UnixDatagram::bind_addr(&address).unwrap();
    let sender = UnixDatagram::unbound().unwrap();
    sender.set_nonblocking(true).unwrap();
    let mut sent = 0;
    while sender.send_to_addr(b"STATUS=filler\n", &address).is_ok() {
        sent += 1;
        assert!(sent < 100_000, "the notify socket never filled");
    }
    receiver
}

#[test]
fn a_stalled_notify_socket_cannot_delay_anything() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let name = format!("leader-exec-test-{}-stalled", std::process::id());
    let _receiver = full_notify_socket(name.as_bytes());
    let endpoint = etcd.endpoint();
    let mut a = Instance::start_command(
        leader_exec()
            .env("NOTIFY_SOCKET", format!("@{name}"))
            .args(lease_args(&endpoint, "notify"))
            .arg("--")
            .args(scratch.job("a", STOPPABLE)),
    );
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a never started: stuck on sd_notify");
    let out = etcd.ctl(&["del", "--prefix", "/leader-exec/notify/"]);
    assert!(out.status.success());
    assert_eq!(a.wait(Duration::from_secs(5)), Some(75), "{}", a.stderr());
}

#[test]
fn notifications_reach_an_abstract_socket_and_consumed_secrets_do_not_reach_the_command() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let name = format!("leader-exec-test-{}-abstract", std::process::id());
    let receiver =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    receiver.set_nonblocking(true).unwrap();
    let env_file = scratch.path("env");
    let status = leader_exec()
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env("LEADER_EXEC_PASSWORD", "s3cret-password")
        .env("KEEP_ME", "kept")
        .args(lease_args(&etcd.endpoint(), "abstract"))
        .args(["--", "sh", "-c", "env > \"$0\""])
        .arg(&env_file)
        .status()
        .unwrap();
    assert!(status.success());
    let mut buffer = [0u8; 4096];
    let mut all = String::new();
    while let Ok(n) = receiver.recv(&mut buffer) {
        all.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    assert!(all.contains("READY=1"), "{all:?}");
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(env.contains("KEEP_ME=kept"), "{env}");
    assert!(env.contains("LEADER_TOKEN="), "{env}");
    assert!(!env.contains("s3cret-password"), "{env}");
    assert!(!env.contains("NOTIFY_SOCKET"), "{env}");
}

#[test]
fn a_password_on_the_command_line_is_not_in_the_supervisors() {
    let scratch = Scratch::new();
    // An etcd that never answers is enough: the supervisor exists from the start. A listener
    // that never accepts (the kernel completes the handshake, nobody answers), not a closed
    // port: a refused connection would end the start at once.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut a = Instance::start(
        &[
            "-q",
            "--endpoints",
            &endpoint,
            "--lease",
            "pw",
            "--user",
            "root:visible-pass",
            "--connect-timeout",
            "5s",
        ],
        &scratch.job("a", "true"),
    );
    let mut supervisor = None;
    assert!(wait_for(Duration::from_secs(3), || {
        supervisor = supervisor_of(a.pid());
        supervisor.is_some()
    }));
    let supervisor = supervisor.unwrap();
    assert!(
        cmdline_of(a.pid()).contains("visible-pass"),
        "leader-exec's own argv is not ours to change"
    );
    let shown = cmdline_of(supervisor);
    assert!(!shown.contains("visible-pass"), "{shown}");
    assert_eq!(shown, format!("lx-supervisor {}", a.pid()));
    a.signal(Signal::SIGTERM);
    a.wait(Duration::from_secs(5));
}
