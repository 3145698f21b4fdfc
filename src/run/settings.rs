//! What one run is told to do: the run form's settings. They are defined here, beside the run
//! that reads them, and built from the command line by the top floor
//! (`validate::settings_from_args`), every one validated before anything is contacted: the run
//! floor knows nothing of flags.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::election::Scope;
use crate::election::any::Connection;
use crate::lease::timing::Timing;
use crate::records::occurrence::Occurrence;
use crate::telemetry::http::Address;

/// How long to wait for our turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Forever,
    Until(Duration),
    No,
}

/// `--contain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Contain {
    /// Its own process group (the default).
    Group,
    /// A cgroup v2 of its own as well, killed with cgroup.kill.
    Cgroup,
    /// A PID namespace of its own as well, whose init is the supervisor.
    Pidns,
}

/// Everything the run form needs, validated.
#[derive(Debug)]
pub struct Settings {
    pub lease: String,
    pub prefix: String,
    pub identity: String,
    pub timing: Timing,
    pub kill_signal: Signal,
    pub wait: Wait,
    pub recampaign: bool,
    /// `--contain`.
    pub contain: Contain,
    /// `--max-holders`: up to this many instances hold at once (1: a single leader).
    pub max_holders: u32,
    pub hold_at_least: Option<Duration>,
    /// `--max-runtime`: the command is stopped (as on TERM) this long after it started.
    pub max_runtime: Option<Duration>,
    /// `--splay`: a random delay in [0, this) before the first campaign.
    pub splay: Option<Duration>,
    /// `--health-cmd` and its timing.
    pub health: Option<super::health::HealthCheck>,
    pub occurrence: Option<Occurrence>,
    pub connection: Connection,
    pub command: Vec<OsString>,
    /// `--http`.
    pub http: Option<Address>,
    /// `--metrics-file`.
    pub metrics_file: Option<PathBuf>,
}

impl Settings {
    pub fn scope(&self) -> Scope {
        Scope {
            lease: self.lease.clone(),
            prefix: self.prefix.clone(),
        }
    }
}
