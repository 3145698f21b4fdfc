//! ZooKeeper only, `--max-holders` 2: a node among the first N of the line that has not yet
//! touched itself (a candidacy between the read that let it hold and the write that gives it its
//! token) is no holder for `status`, `check` and `watch`: its command has not started and its
//! zxid was given to nobody. From its touch on it is one, with the touch's zxid, and `watch`
//! reports it.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use crate::holders::{holder_args, holder_job};

const TEN: Duration = Duration::from_secs(10);

#[test]
fn a_node_that_has_not_touched_itself_is_no_holder_until_it_does() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let mut args = holder_args(&endpoint, "pend", "2");
    args.extend(["--identity", "host-a"]);
    let mut a = Instance::start(&args, &holder_job(&scratch, "a", &gated(&scratch, "a")));
    let a_token = scratch
        .wait_record("start", "a", TEN)
        .expect("a started")
        .token();

    // Second in line, so among the first N, written as a candidacy writes its node, never
    // touched: what a line shows while a candidacy that may hold has not yet taken its token.
    let path =
        "/leader-exec/pend/_c_0f0e0d0c-0b0a-4908-8706-050403020100-holders-2-latch-0000000009";
    let czxid = zk.create(path, b"host-b", true);
    let status = status_json(&endpoint, "pend");
    assert_eq!(status["candidates"], 2, "{status}");
    assert_eq!(json_holder_tokens(&status), [a_token], "{status}");
    assert_eq!(check_token(&endpoint, "pend", czxid), 1);
    assert_eq!(check_token(&endpoint, "pend", a_token), 0);

    let (mut watch, lines) = watch(&endpoint, "pend", true);
    let next = || -> Value {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .expect("watch printed nothing");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    assert_eq!(json_holder_tokens(&next()), [a_token]);

    // The touch (a setData of its own data): a holder now, with the touch's zxid as its token,
    // and watch (waiting on the line, which did not change) reports it.
    let mzxid = zk.session(false, async |client| {
        client.set_data(path, b"host-b", None).await.unwrap().mzxid
    });
    assert!(mzxid > a_token);
    let now = next();
    assert_eq!(json_holder_tokens(&now), [a_token, mzxid], "{now}");
    assert_eq!(now["holders"][1]["identity"], "host-b", "{now}");
    assert_eq!(check_token(&endpoint, "pend", mzxid), 0);
    assert_eq!(check_token(&endpoint, "pend", czxid), 1);

    zk.session(false, async |client| {
        client.delete(path, None).await.unwrap()
    });
    assert_eq!(json_holder_tokens(&next()), [a_token]);
    open_gate(&scratch, "a");
    assert_eq!(a.wait(TEN), Some(0), "{}", a.stderr());
    let _ = watch.0.kill();
    let _ = watch.0.wait();
}

/// With N > 1 `resign` asks each holder under a node of its own, `.resign/NAME/TOKEN`, a
/// persistent node (ZooKeeper has no TTL nodes by default): the holder that takes the request
/// deletes it, so holders resigned over and over leave no node per token behind.
#[test]
fn a_holder_deletes_the_request_it_takes() {
    let zk = ZooKeeper::start();
    let scratch = Scratch::new();
    let endpoint = zk.endpoint();
    let mut args = holder_args(&endpoint, "rq", "2");
    args.push("--recampaign");
    let mut a = Instance::start(&args, &holder_job(&scratch, "a", &gated(&scratch, "a")));
    let mut b = Instance::start(&args, &holder_job(&scratch, "b", &gated(&scratch, "b")));
    let mut tokens = Vec::new();
    for name in ["a", "b"] {
        tokens.push(
            scratch
                .wait_record("start", name, TEN)
                .unwrap_or_else(|| panic!("{name} started"))
                .token(),
        );
    }
    // Each resigned holder goes back in line and holds again with a new token.
    for (round, token) in tokens.iter().enumerate() {
        let out = Cmd::bare()
            .args(["resign", "--lease", "rq", "--endpoints", &endpoint])
            .args(["--token", &token.to_string()])
            .output();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let starts = || {
            scratch
                .history()
                .iter()
                .filter(|r| r.kind == "start")
                .count()
        };
        assert!(
            wait_for(TEN, || starts() == 3 + round),
            "the resigned holder did not hold again: {:#?}",
            scratch.history()
        );
    }
    assert!(
        wait_for(TEN, || zk.children("/leader-exec/.resign/rq").is_empty()),
        "left behind: {:?}",
        zk.children("/leader-exec/.resign/rq")
    );
    open_gate(&scratch, "a");
    open_gate(&scratch, "b");
    for instance in [&mut a, &mut b] {
        instance.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(instance.wait(TEN).is_some());
    }
}
