//! Logs go to stderr only: stdout belongs to the command.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogFormat};

/// Sets up the global logger. `LEADER_EXEC_LOG` (RUST_LOG syntax) overrides -v/-q.
pub fn init(args: &LogArgs) {
    let level = match (args.verbose, args.quiet) {
        (0, 0) => "info",
        (1, _) => "debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    let filter = std::env::var("LEADER_EXEC_LOG")
        .ok()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("leader_exec={level}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
