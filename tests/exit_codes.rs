//! The exit status is the command's own, or 128+N for a signal death, or 126/127 when the command
//! cannot run at all; and the lease is released in every case.

use std::os::unix::fs::PermissionsExt;

use crate::harness::*;

fn status_of<S: Store>(etcd: &S, command: &[&str]) -> (i32, String) {
    let (code, _, stderr) = Cmd::bare()
        .args(lease_args(&etcd.endpoint(), "codes"))
        .arg("--")
        .args(command)
        .run();
    (code, stderr)
}

pub fn the_commands_exit_status_is_passed_on<S: Store>() {
    let etcd = S::start();
    assert_eq!(status_of(&etcd, &["true"]).0, 0);
    assert_eq!(status_of(&etcd, &["sh", "-c", "exit 7"]).0, 7);
    assert_eq!(status_of(&etcd, &["sh", "-c", "exit 255"]).0, 255);
    // Died of a signal: 128+N, as a shell reports it.
    assert_eq!(status_of(&etcd, &["sh", "-c", "kill -TERM $$"]).0, 143);
    assert_eq!(status_of(&etcd, &["sh", "-c", "kill -KILL $$"]).0, 137);
    assert!(etcd.held().is_empty(), "{:?}", etcd.held());
}

pub fn a_missing_command_is_127_and_a_non_executable_one_126<S: Store>() {
    let etcd = S::start();
    let scratch = Scratch::new();
    let (code, stderr) = status_of(&etcd, &["no-such-command-anywhere"]);
    assert_eq!(code, 127, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no-such-command-anywhere"), "{stderr}");

    let script = scratch.path("not-executable");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, stderr) = status_of(&etcd, &[&path_str(&script)]);
    assert_eq!(code, 126, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    assert!(etcd.held().is_empty(), "{:?}", etcd.held());
}
