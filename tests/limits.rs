//! `--max-runtime` and `--splay`, on every store: a job that ignores TERM is stopped through
//! the stop path TERM takes, its whole group is gone, the lease is free at once and the exit
//! code names the reason; a splay spreads campaigns, and TERM during it leaves the store
//! untouched.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;
use crate::metrics::sample;

fn args<'a>(endpoint: &'a str, lease: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["-v", "--endpoints", endpoint, "--lease", lease];
    args.extend(FAST);
    args.extend(extra);
    args
}

pub fn max_runtime_stops_a_term_ignoring_group_and_frees_the_lease<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let file = path_str(&scratch.path("job.prom"));
    // FAST's --kill-after is 1 s: TERM at 1 s, SIGKILL at 2 s.
    let mut a = Instance::start(
        &args(
            &endpoint,
            "bound",
            &[
                "--max-runtime",
                "1s",
                "--occurrence",
                "nightly",
                "--metrics-file",
                &file,
            ],
        ),
        &scratch.job("a", &stubborn("a")),
    );
    let started = scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let grandchild = scratch.grandchild("a");
    let code = a.wait(Duration::from_secs(15));
    let ended = now_ns();
    let took = Duration::from_nanos((ended - started.time()) as u64);
    assert_eq!(code, Some(79), "{}", a.stderr());
    // TERM was ignored: the group lived through --kill-after, then SIGKILL ended it.
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "{}: exited {took:?} after the command started\n{}",
        S::NAME,
        a.stderr()
    );
    assert!(
        !alive(started.pid()) && !alive(grandchild),
        "the command's group outlived leader-exec"
    );
    let stderr = a.stderr();
    assert!(
        stderr.contains("max-runtime") && stderr.contains("SIGKILL"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(scratch.path("job.prom")).unwrap();
    assert_eq!(
        sample(&text, "leader_exec_max_runtime_stops_total", ""),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "leader_exec_run_exit_code", ""), Some(79.0));

    // The lease is free at once (--no-wait), and the occurrence is unfinished: the default
    // --if-unfinished refuses it, and `rerun` runs it with the earlier token.
    let mut b = Instance::start(
        &args(
            &endpoint,
            "bound",
            &["--no-wait", "--occurrence", "nightly"],
        ),
        &scratch.job("b", "true"),
    );
    assert_eq!(b.wait(Duration::from_secs(10)), Some(76), "{}", b.stderr());
    let mut c = Instance::start(
        &args(
            &endpoint,
            "bound",
            &[
                "--no-wait",
                "--occurrence",
                "nightly",
                "--if-unfinished",
                "rerun",
            ],
        ),
        &scratch.job("c", r#"echo "previous c $LEADER_PREVIOUS_TOKEN 0" >> "$h""#),
    );
    assert_eq!(c.wait(Duration::from_secs(10)), Some(0), "{}", c.stderr());
    let previous = scratch
        .wait_record("previous", "c", Duration::ZERO)
        .expect("c ran the occurrence again");
    assert_eq!(previous.token(), started.token());
    assert_one_at_a_time(&scratch.history());
}

pub fn a_command_that_ends_before_max_runtime_is_unaffected<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut a = Instance::start(
        &args(&endpoint, "short", &["--max-runtime", "30s"]),
        &scratch.job("a", "sleep 0.3; exit 3"),
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(3), "{}", a.stderr());
    assert!(!a.stderr().contains("max-runtime"), "{}", a.stderr());
    assert!(
        wait_for(Duration::from_secs(5), || store.held().is_empty()),
        "left behind: {:?}",
        store.held()
    );
}

pub fn term_during_splay_exits_at_once_and_leaves_the_store_untouched<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    // The splay is a uniform draw in [0, 1h): the TERM must land inside the draw, so the test
    // reads the draw from the log line and signals only an instance whose draw outlasts the
    // checks below by far (a draw under a minute, one in sixty, is ended and drawn again).
    let mut a = None;
    for draw in 0..5 {
        let mut instance = Instance::start(
            &args(&endpoint, "splayed", &["--splay", "1h"]),
            &scratch.job("a", "true"),
        );
        let announced = Instant::now();
        let mut delay = None;
        assert!(
            wait_for(Duration::from_secs(10), || {
                delay = splay_drawn(&instance.stderr());
                delay.is_some()
            }),
            "{}: no splay announced: {}",
            S::NAME,
            instance.stderr()
        );
        if delay.unwrap() > Duration::from_secs(60) + announced.elapsed() {
            a = Some(instance);
            break;
        }
        instance.signal(Signal::SIGTERM);
        assert_eq!(
            instance.wait(Duration::from_secs(5)),
            Some(143),
            "draw {draw}: {}",
            instance.stderr()
        );
    }
    let mut a = a.expect("five draws in a row under a minute out of an hour");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        store.claims("splayed"),
        0,
        "{}: campaigned during the splay",
        S::NAME
    );
    let asked = Instant::now();
    a.signal(Signal::SIGTERM);
    let code = a.wait(Duration::from_secs(5));
    let took = asked.elapsed();
    assert_eq!(code, Some(143), "{}", a.stderr());
    assert!(
        took < Duration::from_millis(900),
        "exited {took:?} after TERM"
    );
    assert!(scratch.wait_record("start", "a", Duration::ZERO).is_none());
    assert_eq!(store.claims("splayed"), 0);
    assert!(store.held().is_empty(), "left behind: {:?}", store.held());
}

/// The delay a `-v` log announces in "waiting 12m 3s 4ms before campaigning (--splay)".
fn splay_drawn(stderr: &str) -> Option<Duration> {
    let line = stderr
        .lines()
        .find(|l| l.contains("before campaigning (--splay)"))?;
    let (_, after) = line.split_once("waiting ")?;
    let (text, _) = after.split_once(" before campaigning")?;
    humantime::parse_duration(text).ok()
}

pub fn splay_delays_each_start_by_a_different_amount_below_the_bound<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let leases = ["splay-0", "splay-1", "splay-2", "splay-3"];
    let launched = now_ns();
    let mut instances: Vec<Instance> = leases
        .iter()
        .enumerate()
        .map(|(i, lease)| {
            Instance::start(
                &args(&endpoint, lease, &["--splay", "1s"]),
                &scratch.job(&format!("j{i}"), "true"),
            )
        })
        .collect();
    for (i, instance) in instances.iter_mut().enumerate() {
        assert_eq!(
            instance.wait(Duration::from_secs(15)),
            Some(0),
            "j{i}: {}",
            instance.stderr()
        );
    }
    let offsets: Vec<u128> = (0..leases.len())
        .map(|i| {
            let start = scratch
                .wait_record("start", &format!("j{i}"), Duration::ZERO)
                .expect("started");
            (start.time() - launched) / 1_000_000
        })
        .collect();
    // The splay is below 1 s; the rest is starting, connecting and campaigning on a loaded
    // machine.
    assert!(
        offsets.iter().all(|ms| *ms < 1000 + 4000),
        "{}: started after {offsets:?} ms",
        S::NAME
    );
    let spread = offsets.iter().max().unwrap() - offsets.iter().min().unwrap();
    assert!(
        spread >= 20,
        "{}: every splay the same: {offsets:?} ms",
        S::NAME
    );
}
