//! `status --all --json`: each leader object holds what `status --json` shows about it.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

fn status_all_json(endpoint: &str) -> Value {
    let out = Cmd::at(endpoint)
        .args(["status", "--all", "--json"])
        .output();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One lease whose command runs, one whose command ended while the lease is held on
/// (`--hold-at-least`): `since`, `command` and `hold_until` in `status --all --json` are those of
/// `status --json`.
pub fn status_all_json_shows_since_command_and_hold_until_as_status_does<S: Store>() {
    let store = S::start();
    let scratch = Scratch::new();
    let endpoint = store.endpoint();
    let mut running = Instance::start(
        &lease_args(&endpoint, "all-running"),
        &scratch.job("r", "sleep 30"),
    );
    let mut args = lease_args(&endpoint, "all-holding");
    args.extend(["--hold-at-least", "60s"]);
    let mut holding = Instance::start(&args, &scratch.job("h", "true"));
    scratch
        .wait_record("start", "r", Duration::from_secs(15))
        .expect("r started");
    scratch
        .wait_record("end", "h", Duration::from_secs(15))
        .expect("h's command ended");
    // Each leader records its state beside the election once it leads and when its command ends.
    assert!(
        wait_for(Duration::from_secs(10), || {
            status_json(&endpoint, "all-running")["leader"]["command"] == "running"
                && status_json(&endpoint, "all-holding")["leader"]["command"] == "holding"
        }),
        "{} {}",
        status_json(&endpoint, "all-running"),
        status_json(&endpoint, "all-holding")
    );
    let all = status_all_json(&endpoint);
    let leases = all["leases"].as_array().expect("leases");
    for name in ["all-holding", "all-running"] {
        let one = status_json(&endpoint, name)["leader"].clone();
        let listed = leases
            .iter()
            .find(|l| l["lease"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {all}"))["leader"]
            .clone();
        for field in ["identity", "token", "since", "command", "hold_until"] {
            assert!(listed.get(field).is_some(), "{name}: no {field}: {all}");
            assert_eq!(listed[field], one[field], "{name}: {field}: {all} vs {one}");
        }
        assert!(listed["since"].is_string(), "{name}: {all}");
    }
    let holding_leader = &leases.iter().find(|l| l["lease"] == "all-holding").unwrap()["leader"];
    assert!(holding_leader["hold_until"].is_string(), "{all}");
    running.signal(nix::sys::signal::Signal::SIGTERM);
    holding.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(running.wait(Duration::from_secs(15)).is_some());
    assert!(holding.wait(Duration::from_secs(15)).is_some());
}
