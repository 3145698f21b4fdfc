//! leader-exec: run a command on exactly one host at a time, elected through etcd, PostgreSQL, ZooKeeper or MySQL/MariaDB.

mod app;
mod assets;
mod cli;
mod clock;
mod commands;
mod durations;
mod election;
mod ended;
mod escape;
mod exit;
mod lease;
mod notify;
mod process;
mod records;
mod redact;
mod run;
mod signals;
mod telemetry;
mod validate;

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(app::main())
}
