//! The test harness's MariaDB (tests/harness/mariadb.rs, the same file the integration tests
//! use), for this folder's tests, which drive the store's statements one by one.

#[path = "../../../tests/harness/mariadb.rs"]
#[allow(dead_code)]
mod mariadb;

pub use mariadb::*;

/// The integration harness's own helpers that the server's file uses, as this binary has them.
/// Unit tests share no machine lock: each server here is one process on a port of its own.
pub fn share_machine() {}

/// A free loopback port (the kernel's pick; the server is started again on another if lost).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free port")
}

pub fn first_line_of(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default()
}
