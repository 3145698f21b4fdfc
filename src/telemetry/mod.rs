//! What wires the telemetry together for one run: the metrics registry, the `--http` server and
//! the `--metrics-file` writer, each only when asked for.

pub mod event;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod metrics_file;
pub mod report;
use std::path::PathBuf;

use crate::exit::Failure;
use http::Address;
use metrics::{Config, Metrics};

/// What `--http` and `--metrics-file` set up for one run.
#[derive(Clone)]
pub struct Telemetry {
    http: Option<Address>,
    metrics: Option<&'static Metrics>,
}

/// Initialises the metrics when `--http` (`http`) or `--metrics-file` (`metrics_file`) asks for
/// them, and writes the metrics file once (exit 125 when it cannot be written). Call after the
/// supervisor's fork. `config` is built only when one of them is asked for.
pub fn setup(
    http: Option<Address>,
    metrics_file: Option<PathBuf>,
    config: impl FnOnce() -> Config,
) -> Result<Telemetry, Failure> {
    if http.is_none() && metrics_file.is_none() {
        return Ok(Telemetry {
            http: None,
            metrics: None,
        });
    }
    let metrics = metrics::init(config());
    if let Some(path) = metrics_file {
        metrics_file::init(path, metrics)?;
    }
    Ok(Telemetry {
        http,
        metrics: Some(metrics),
    })
}

impl Telemetry {
    /// On the runtime, before campaigning: listens (exit 125 when it cannot) and starts the
    /// metrics file's task.
    pub fn start(&self) -> Result<(), Failure> {
        let Some(metrics) = self.metrics else {
            return Ok(());
        };
        if let Some(address) = &self.http {
            http::serve(address, metrics)?;
        }
        metrics_file::spawn_task();
        Ok(())
    }

    /// After the run: the final metrics file, and the unix socket removed.
    pub fn finish(&self, result: &anyhow::Result<u8>) {
        if self.metrics.is_none() {
            return;
        }
        metrics::exiting();
        let code = match result {
            Ok(code) => *code,
            Err(e) => crate::exit::code_of(e),
        };
        metrics_file::finish(code);
        http::cleanup(self.http.as_ref());
    }
}
