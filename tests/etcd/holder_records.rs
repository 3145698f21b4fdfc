//! Where a holder records its state for `status` (etcd, as the store to look into): with
//! `--max-holders` 1 under `PREFIX .leaders/NAME`, exactly as earlier versions wrote it; above 1
//! under `PREFIX .leaders/NAME/TOKEN`, its own key, on its own lease (gone with it).

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::*;

const TEN: Duration = Duration::from_secs(10);

fn value(etcd: &Etcd, key: &str) -> Value {
    let out = etcd.ctl(&["get", "--print-value-only", key]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(out.stdout.trim_ascii()).unwrap_or(Value::Null)
}

#[test]
fn each_holder_records_its_state_under_its_own_token() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();

    // One holder: the key earlier versions wrote, and nothing beneath it.
    let mut one = Instance::start(
        &lease_args(&endpoint, "rec1"),
        &scratch.job("one", "sleep 30"),
    );
    let token = scratch
        .wait_record("start", "one", TEN)
        .expect("one started")
        .token();
    let key = "/leader-exec/.leaders/rec1";
    assert!(
        wait_for(TEN, || etcd.keys(key) == [key]),
        "{:?}",
        etcd.keys(key)
    );
    let state = value(&etcd, key);
    assert_eq!(state["token"], token, "{state}");
    assert_eq!(state["command"], "running", "{state}");

    // --max-holders 2: under the holder's own token.
    let mut args = lease_args(&endpoint, "rec2");
    args.extend(["--max-holders", "2"]);
    let mut two = Instance::start(&args, &scratch.job("two", "sleep 30"));
    let token = scratch
        .wait_record("start", "two", TEN)
        .expect("two started")
        .token();
    let key = format!("/leader-exec/.leaders/rec2/{token}");
    let prefix = "/leader-exec/.leaders/rec2";
    assert!(
        wait_for(TEN, || etcd.keys(prefix) == [key.clone()]),
        "{:?}",
        etcd.keys(prefix)
    );
    let state = value(&etcd, &key);
    assert_eq!(state["token"], token, "{state}");
    assert_eq!(state["command"], "running", "{state}");

    // Each goes with its holder's lease.
    for instance in [&mut one, &mut two] {
        instance.signal(Signal::SIGTERM);
        assert!(instance.wait(TEN).is_some(), "ended on TERM");
    }
    assert!(
        wait_for(TEN, || etcd.keys("/leader-exec/.leaders/").is_empty()),
        "{:?}",
        etcd.keys("/leader-exec/.leaders/")
    );
}
