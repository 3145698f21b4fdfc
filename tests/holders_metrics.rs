//! `--http` with `--max-holders` 2 (etcd): every holder's /metrics says it holds
//! (`leader_exec_leader 1`) with its own token, and every instance of the lease says
//! `leader_exec_max_holders 2`; /leader answers 200 on each holder, 503 on a waiter; a waiter
//! that takes a holder's place says so.

use std::time::Duration;

use crate::harness::*;
use crate::holders::{holder_args, holder_job, waits_in_line};
use crate::metrics::{get, sample, scrape};

const TEN: Duration = Duration::from_secs(10);

#[test]
fn every_holder_reports_itself_holding_and_the_max_holders() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let listens: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let start = |name: &str, i: usize| {
        let mut args = holder_args(&endpoint, "hm", "2");
        args.extend(["--http", &listens[i]]);
        Instance::start(&args, &holder_job(&scratch, name, &gated(&scratch, name)))
    };
    let mut a = start("a", 0);
    let a_token = scratch
        .wait_record("start", "a", TEN)
        .expect("a started")
        .token();
    let mut b = start("b", 1);
    let b_token = scratch
        .wait_record("start", "b", TEN)
        .expect("b started")
        .token();
    let mut c = start("c", 2);
    waits_in_line(&etcd, "hm", 3, &c);

    // Each holder: holding, its own token, its command running, N = 2.
    for (port, token) in [(ports[0], a_token), (ports[1], b_token)] {
        let mut text = String::new();
        assert!(
            wait_for(TEN, || {
                text = scrape(port);
                sample(&text, "leader_exec_command_running", "") == Some(1.0)
            }),
            "{text}"
        );
        assert_eq!(
            sample(&text, "leader_exec_leader", "lease=\"hm\""),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "leader_exec_max_holders", "lease=\"hm\""),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "leader_exec_token", ""),
            Some(token as f64),
            "{text}"
        );
        assert_eq!(
            sample(&text, "leader_exec_elections_won_total", ""),
            Some(1.0),
            "{text}"
        );
        assert_eq!(get(port, "/leader", None).map(|r| r.0), Some(200));
    }
    // The waiter: not holding, the same N.
    let waiting = scrape(ports[2]);
    assert_eq!(
        sample(&waiting, "leader_exec_leader", "lease=\"hm\""),
        Some(0.0),
        "{waiting}"
    );
    assert_eq!(
        sample(&waiting, "leader_exec_max_holders", "lease=\"hm\""),
        Some(2.0),
        "{waiting}"
    );
    assert_eq!(
        sample(&waiting, "leader_exec_command_running", ""),
        Some(0.0),
        "{waiting}"
    );
    assert_eq!(get(ports[2], "/leader", None).map(|r| r.0), Some(503));

    // a leaves: c holds, and says so; b still does.
    open_gate(&scratch, "a");
    assert_eq!(a.wait(TEN), Some(0), "{}", a.stderr());
    let c_token = scratch
        .wait_record("start", "c", TEN)
        .expect("c took a's place")
        .token();
    let mut text = String::new();
    assert!(
        wait_for(TEN, || {
            text = scrape(ports[2]);
            sample(&text, "leader_exec_command_running", "") == Some(1.0)
        }),
        "{text}"
    );
    assert_eq!(sample(&text, "leader_exec_leader", ""), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "leader_exec_token", ""),
        Some(c_token as f64),
        "{text}"
    );
    assert_eq!(get(ports[2], "/leader", None).map(|r| r.0), Some(200));
    let still = scrape(ports[1]);
    assert_eq!(
        sample(&still, "leader_exec_leader", ""),
        Some(1.0),
        "{still}"
    );
    assert_eq!(
        sample(&still, "leader_exec_token", ""),
        Some(b_token as f64),
        "{still}"
    );

    open_gate(&scratch, "b");
    open_gate(&scratch, "c");
    for (name, instance) in [("b", &mut b), ("c", &mut c)] {
        assert_eq!(instance.wait(TEN), Some(0), "{name}: {}", instance.stderr());
    }
    crate::holders::assert_at_most(&scratch.history(), 2);
}
