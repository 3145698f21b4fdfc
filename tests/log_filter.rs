//! `LEADER_EXEC_LOG` overrides `-v`/`-q` with `target=level` directives (RUST_LOG's form).

use std::time::Duration;

use crate::harness::*;

/// Runs one uncontended election on `etcd` with `LEADER_EXEC_LOG` set to `filter` (and `-q`,
/// which it overrides); returns stderr.
fn stderr_with(etcd: &Etcd, filter: &str) -> String {
    let out = Cmd::new(etcd)
        .args(["-q", "--lease", "log-filter", "--", "true"])
        .env("LEADER_EXEC_LOG", filter)
        .output();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_log_filter_takes_targets_and_levels_and_overrides_quiet() {
    let etcd = Etcd::start();
    let debug = stderr_with(&etcd, "leader_exec=debug");
    assert!(debug.contains(" INFO elected"), "{debug}");
    let info = stderr_with(&etcd, "warn,leader_exec=info");
    assert!(info.contains(" INFO elected"), "{info}");
    // Another target's directive does not reach leader-exec's events.
    let other = stderr_with(&etcd, "tokio=trace,leader_exec=warn");
    assert!(!other.contains(" INFO "), "{other}");
    let bare = stderr_with(&etcd, "info");
    assert!(bare.contains(" INFO elected"), "{bare}");
    // A waiter's debug line, with the filter at debug and not at info.
    let mut holder = Instance::start(
        &[
            "--endpoints",
            &etcd.endpoint(),
            "--lease",
            "log-filter-wait",
        ],
        &["sleep".to_owned(), "30".to_owned()],
    );
    assert!(wait_for(Duration::from_secs(10), || {
        etcd.keys("/leader-exec/log-filter-wait/").len() == 1
    }));
    let waiter = |filter: &str| {
        let out = Cmd::new(&etcd)
            .args([
                "-q",
                "--lease",
                "log-filter-wait",
                "--wait-timeout",
                "1s",
                "--",
                "true",
            ])
            .env("LEADER_EXEC_LOG", filter)
            .output();
        assert_eq!(out.status.code(), Some(124), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let debug = waiter("leader_exec=debug");
    assert!(
        debug.contains("DEBUG waiting for the candidate ahead to go"),
        "{debug}"
    );
    let info = waiter("leader_exec=info");
    assert!(!info.contains("DEBUG"), "{info}");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(holder.wait(Duration::from_secs(10)).is_some());
    let off = stderr_with(&etcd, "off");
    assert_eq!(off, "", "{off}");
    // A filter that does not parse leaves -q in force.
    let unparsed = stderr_with(&etcd, "leader_exec=[{");
    assert_eq!(unparsed, "", "{unparsed}");
}
