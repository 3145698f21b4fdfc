//! leader-exec: run a command on exactly one host at a time, elected through etcd, PostgreSQL or ZooKeeper.

mod app;
mod assets;
mod cli;
mod clock;
mod election;
mod escape;
mod exit;
mod fleet;
mod http;
mod leadership;
mod logging;
mod metrics;
mod metrics_file;
mod notify;
mod observe;
mod occurrence;
mod redact;
mod release;
mod renewal;
mod resign;
mod run;
mod settings;
mod signals;
mod supervisor;

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(app::main())
}
