//! leader-exec: run a command on exactly one host at a time, elected through etcd, PostgreSQL or ZooKeeper.

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
mod leader;
mod notify;
mod redact;
mod run;
mod settings;
mod signals;
mod telemetry;

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(app::main())
}
