//! Turning parsed flags into validated settings.
//!
//! Every check here runs before leader-exec contacts the store, so a bad flag costs nothing and
//! leaves nothing behind. Each failure is one line naming the flag, and exit 125. The connection
//! flags are checked by the store they name (`election::any::Connection::parse`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::cli::{ElectionArgs, RunArgs, StoreArgs};
use crate::election::any::Connection;
use crate::election::flags::StoreFlags;
use crate::exit::Failure;

/// The longest duration any flag accepts: 9,000,000,000 s (about 285 years), the longest lease
/// etcd grants (`MaxLeaseTTL`). Longer values are refused before anything else happens, so no
/// arithmetic on durations can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(9_000_000_000);

/// The shortest `--retry-period`: one renewal round trip must fit in it.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);

/// Length limits, in bytes. They keep keys, log lines and the command's environment small: a
/// single environment string may not exceed 128 KiB, and an identity that large would let the
/// election be won and the command then fail to start.
pub const MAX_LEASE_NAME: usize = 255;
pub const MAX_PREFIX: usize = 255;
pub const MAX_IDENTITY: usize = 1024;
pub const MAX_OCCURRENCE_ID: usize = 1024;

/// The four durations the safety argument is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease duration on the server.
    pub ttl: Duration,
    /// Step down when no renewal sent within this long has succeeded.
    pub renew_deadline: Duration,
    /// Interval between renewals; also the time one renewal may take.
    pub retry_period: Duration,
    /// Grace between the first signal and SIGKILL.
    pub kill_after: Duration,
}

impl Timing {
    /// The slack left between "the child is dead" and "the lease may expire on the server".
    ///
    /// It absorbs what the arithmetic does not see: a timer that fires late on a loaded machine,
    /// the time between SIGKILL and the last process of the group being gone, and clocks that run
    /// at slightly different rates on this host and on the etcd leader.
    pub fn margin(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(250))
    }

    /// Checks the inequalities that make stepping down in time possible.
    pub fn validate(&self) -> Result<(), Failure> {
        let ms = |d: Duration| humantime::format_duration(d).to_string();
        if self.ttl < Duration::from_secs(1) || self.ttl.subsec_nanos() != 0 {
            return Err(Failure::usage(format!(
                "--ttl ({}) must be a whole number of seconds, at least 1s (etcd leases have 1s granularity)",
                ms(self.ttl)
            )));
        }
        if self.ttl > MAX_DURATION {
            return Err(Failure::usage(format!(
                "--ttl ({}) must be at most {}s, the longest lease etcd grants",
                ms(self.ttl),
                MAX_DURATION.as_secs()
            )));
        }
        if self.renew_deadline.is_zero() {
            return Err(Failure::usage("--renew-deadline must be greater than 0"));
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return Err(Failure::usage(format!(
                "--retry-period ({}) must be at least {}: one renewal must fit in it",
                ms(self.retry_period),
                ms(MIN_RETRY_PERIOD)
            )));
        }
        // Saturating: the flags are bounded, but this check must hold for any value.
        if self.retry_period.saturating_mul(3) > self.renew_deadline {
            return Err(Failure::usage(format!(
                "--retry-period ({}) must be at most a third of --renew-deadline ({}), so that several renewals fit in the deadline",
                ms(self.retry_period),
                ms(self.renew_deadline)
            )));
        }
        let needed = self
            .renew_deadline
            .saturating_add(self.kill_after)
            .saturating_add(self.margin());
        if needed > self.ttl {
            let fit = Timing::fitting(self.ttl);
            return Err(Failure::usage(format!(
                "--renew-deadline ({}) + --kill-after ({}) must be at most --ttl ({}) minus a margin of {}: the command must be dead before the lease can expire; with --ttl {} use, for example, --renew-deadline {} --kill-after {} --retry-period {}, or keep these and raise --ttl to {}",
                ms(self.renew_deadline),
                ms(self.kill_after),
                ms(self.ttl),
                ms(self.margin()),
                flag_value(self.ttl),
                flag_value(fit.renew_deadline),
                flag_value(fit.kill_after),
                flag_value(fit.retry_period),
                flag_value(self.ttl_needed()),
            )));
        }
        Ok(())
    }

    /// Timing that fits `ttl`, in the proportions of the defaults (10s + 4s in 15s, renewing
    /// every fifth of the deadline): what the error message suggests when only --ttl was changed.
    pub fn fitting(ttl: Duration) -> Timing {
        let available = ttl.saturating_sub(Timing::with_ttl(ttl).margin());
        // Round down to a readable step: 100ms from 2s on, else 1ms.
        let step: u128 = if available >= Duration::from_secs(2) {
            100
        } else {
            1
        };
        let part = |share: u32| {
            let ms = (available * share / 14).as_millis() / step * step;
            Duration::from_millis(ms as u64)
        };
        let renew_deadline = part(10);
        let retry_period =
            Duration::from_millis((renew_deadline / 5).as_millis() as u64).max(MIN_RETRY_PERIOD);
        Timing {
            ttl,
            renew_deadline,
            retry_period,
            kill_after: part(4),
        }
    }

    fn with_ttl(ttl: Duration) -> Timing {
        Timing {
            ttl,
            renew_deadline: Duration::ZERO,
            retry_period: Duration::ZERO,
            kill_after: Duration::ZERO,
        }
    }

    /// The shortest whole-second --ttl that fits this --renew-deadline and --kill-after.
    pub fn ttl_needed(&self) -> Duration {
        let busy = self.renew_deadline.saturating_add(self.kill_after);
        let mut ttl = Duration::from_secs(busy.as_secs().max(1));
        while ttl < MAX_DURATION && busy.saturating_add(Timing::with_ttl(ttl).margin()) > ttl {
            ttl += Duration::from_secs(1);
        }
        ttl
    }
}

/// A duration as a flag value: `3s`, `3300ms`.
fn flag_value(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        humantime::format_duration(d).to_string().replace(' ', "")
    }
}

/// A --hold-at-least longer than this is likely a typo (`10d` for `10m`): warned about.
pub const HOLD_WARNING: Duration = Duration::from_secs(24 * 3600);

/// How long to wait for our turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Forever,
    Until(Duration),
    No,
}

pub use crate::election::Scope;

/// The lease name and prefix, validated.
pub fn scope_from_args(args: ElectionArgs) -> Result<Scope, Failure> {
    Ok(Scope {
        lease: validate_lease_name(args.lease.as_deref())?,
        prefix: validate_prefix(args.prefix)?,
    })
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
    pub hold_at_least: Option<Duration>,
    pub occurrence: Option<crate::occurrence::Occurrence>,
    pub connection: Connection,
    pub command: Vec<OsString>,
    /// `--http`.
    pub http: Option<crate::http::Address>,
    /// `--metrics-file`.
    pub metrics_file: Option<PathBuf>,
}

impl Settings {
    pub fn from_args(
        election: ElectionArgs,
        run: RunArgs,
        store: StoreArgs,
    ) -> Result<Settings, Failure> {
        let Scope { lease, prefix } = scope_from_args(election)?;
        let identity = match run.identity {
            Some(id) if id.is_empty() => {
                return Err(Failure::usage("--identity must not be empty"));
            }
            Some(id) => {
                validate_length("--identity", validate_text("--identity", id)?, MAX_IDENTITY)?
            }
            None => default_identity(),
        };
        let timing = Timing {
            ttl: run.ttl,
            renew_deadline: run.renew_deadline,
            retry_period: run.retry_period,
            kill_after: run.kill_after,
        };
        timing.validate()?;
        let wait = match (run.no_wait, run.wait_timeout) {
            (true, _) => Wait::No,
            // No time to wait at all: look once, like --no-wait.
            (false, Some(d)) if d.is_zero() => Wait::No,
            (false, Some(d)) => Wait::Until(d),
            (false, None) => Wait::Forever,
        };
        if run.command.is_empty() {
            return Err(Failure::usage(
                "missing command: give it after `--`, as in: leader-exec --lease NAME -- COMMAND [ARG]...",
            ));
        }
        let occurrence = match run.occurrence {
            None => None,
            Some(id) => {
                if id.is_empty() {
                    return Err(Failure::usage("--occurrence must not be empty"));
                }
                let id = validate_length(
                    "--occurrence",
                    validate_text("--occurrence", id)?,
                    MAX_OCCURRENCE_ID,
                )?;
                // Records are kept on etcd leases: the same bounds as --ttl (the upper one is
                // checked when the duration is parsed).
                if run.occurrence_retention < Duration::from_secs(1) {
                    return Err(Failure::usage("--occurrence-retention must be at least 1s"));
                }
                let scope = Scope {
                    lease: lease.clone(),
                    prefix: prefix.clone(),
                };
                Some(crate::occurrence::Occurrence {
                    key: crate::occurrence::record_key(&scope, &id),
                    id,
                    if_unfinished: run.if_unfinished,
                    retention: run.occurrence_retention,
                })
            }
        };
        let http = run
            .http
            .as_deref()
            .map(crate::http::Address::parse)
            .transpose()?;
        let metrics_file = match run.metrics_file {
            Some(path) if path.as_os_str().is_empty() || path.file_name().is_none() => {
                return Err(Failure::usage(format!(
                    "--metrics-file '{}' must name a file",
                    path.display()
                )));
            }
            other => other,
        };
        // From here on every log line names this instance (the warnings below included).
        crate::logging::set_context(&lease, &identity);
        if let Some(hold) = run.hold_at_least
            && hold > HOLD_WARNING
        {
            tracing::warn!(
                event = "long-hold",
                "--hold-at-least {} is longer than a day: this instance keeps the lease (and every other instance waits or exits 124) that long after it was elected; running anyway",
                humantime::format_duration(hold)
            );
        }
        let connection = connection(store)?;
        Ok(Settings {
            http,
            metrics_file,
            lease,
            prefix,
            identity,
            timing,
            kill_signal: run.kill_signal,
            wait,
            recampaign: run.recampaign,
            hold_at_least: run.hold_at_least.filter(|d| !d.is_zero()),
            occurrence,
            connection,
            command: run.command,
        })
    }

    pub fn scope(&self) -> Scope {
        Scope {
            lease: self.lease.clone(),
            prefix: self.prefix.clone(),
        }
    }
}

pub fn validate_lease_name(name: Option<&str>) -> Result<String, Failure> {
    let Some(name) = name else {
        return Err(Failure::usage(
            "missing --lease NAME (or LEADER_EXEC_LEASE): the name of the election",
        ));
    };
    if name.is_empty() {
        return Err(Failure::usage("--lease must not be empty"));
    }
    if name.starts_with('.') {
        // PREFIX + ".occurrences/" holds the occurrence records of every lease.
        return Err(Failure::usage(format!(
            "--lease '{}' must not start with '.': such names are reserved for leader-exec's own records",
            name.escape_debug()
        )));
    }
    if name.contains('/') {
        // prefix + "a/b" would nest one election inside the key range of election "a".
        return Err(Failure::usage(format!(
            "--lease '{}' must not contain '/': it would nest one election inside another's keys",
            name.escape_debug()
        )));
    }
    validate_length(
        "--lease",
        validate_text("--lease", name.to_owned())?,
        MAX_LEASE_NAME,
    )
}

/// The prefix is exactly one path segment between slashes: `/leader-exec/`, `/team-a.jobs/`.
///
/// Election keys are PREFIX NAME "/" ID and lease names hold no '/', so every election's key
/// range is two segments deep. A deeper prefix could sit inside another election's range
/// (`--prefix /leader-exec/x/` lies in `--lease x`'s), and that election would then see the other's
/// keys as its own candidates. With one segment no election's range can contain another's.
pub fn validate_prefix(prefix: String) -> Result<String, Failure> {
    let prefix = validate_text("--prefix", prefix)?;
    let prefix = validate_length("--prefix", prefix, MAX_PREFIX)?;
    let segment = prefix
        .strip_prefix('/')
        .and_then(|rest| rest.strip_suffix('/'));
    match segment {
        Some(segment)
            if !segment.is_empty()
                && !segment.contains('/')
                && segment != "."
                && segment != ".." =>
        {
            Ok(prefix)
        }
        _ => Err(Failure::usage(format!(
            "--prefix '{}' must be one path segment between slashes, like /leader-exec/: a prefix that is empty, relative or deeper could overlap another election's keys",
            prefix.escape_debug()
        ))),
    }
}

fn validate_length(flag: &str, value: String, max: usize) -> Result<String, Failure> {
    if value.len() > max {
        return Err(Failure::usage(format!(
            "{flag} is {} bytes long; at most {max} are allowed",
            value.len()
        )));
    }
    Ok(value)
}

/// Names and values end up in etcd keys, environment variables and log lines: no control characters.
fn validate_text(flag: &str, value: String) -> Result<String, Failure> {
    if value.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "{flag} '{}' must not contain control characters",
            value.escape_debug()
        )));
    }
    Ok(value)
}

fn default_identity() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.chars().any(char::is_control))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// The connection flags, checked by the store they name.
pub fn connection(args: StoreArgs) -> Result<Connection, Failure> {
    Connection::parse(StoreFlags {
        endpoints: args.endpoints,
        connect_timeout: args.connect_timeout,
        cacert: args.cacert,
        cert: args.cert,
        key: args.key,
        user: args.user,
        password_file: args.password_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ttl: u64, renew_ms: u64, retry_ms: u64, kill_ms: u64) -> Timing {
        Timing {
            ttl: Duration::from_secs(ttl),
            renew_deadline: Duration::from_millis(renew_ms),
            retry_period: Duration::from_millis(retry_ms),
            kill_after: Duration::from_millis(kill_ms),
        }
    }

    #[test]
    fn defaults_are_valid() {
        assert!(timing(15, 10_000, 2_000, 4_000).validate().is_ok());
    }

    #[test]
    fn the_margin_is_five_percent_at_least_250ms() {
        assert_eq!(timing(15, 0, 0, 0).margin(), Duration::from_millis(750));
        assert_eq!(timing(3, 0, 0, 0).margin(), Duration::from_millis(250));
    }

    #[test]
    fn deadline_plus_grace_must_fit_in_the_ttl() {
        let err = timing(15, 10_000, 2_000, 5_000).validate().unwrap_err();
        assert!(err.message.contains("--renew-deadline"), "{err}");
        assert!(err.message.contains("--kill-after"), "{err}");
        assert!(err.message.contains("--ttl"), "{err}");
        // Exactly at the margin is allowed; one millisecond over is not.
        assert!(timing(15, 10_000, 2_000, 4_250).validate().is_ok());
        assert!(timing(15, 10_000, 2_000, 4_251).validate().is_err());
    }

    #[test]
    fn retry_period_must_be_well_below_the_deadline() {
        let err = timing(15, 6_000, 2_001, 1_000).validate().unwrap_err();
        assert!(err.message.contains("--retry-period"), "{err}");
        assert!(timing(15, 6_000, 2_000, 1_000).validate().is_ok());
    }

    #[test]
    fn suggested_timing_fits_every_ttl() {
        for secs in (1..=120).chain([300, 3600, 86_400]) {
            let ttl = Duration::from_secs(secs);
            let fit = Timing::fitting(ttl);
            assert!(fit.validate().is_ok(), "{fit:?}: {:?}", fit.validate());
        }
        let fit = Timing::fitting(Duration::from_secs(5));
        assert_eq!(fit.renew_deadline, Duration::from_millis(3300));
        assert_eq!(fit.kill_after, Duration::from_millis(1300));
        let err = timing(5, 10_000, 2_000, 4_000).validate().unwrap_err();
        assert!(
            err.message
                .contains("--renew-deadline 3300ms --kill-after 1300ms --retry-period 660ms"),
            "{err}"
        );
        assert!(err.message.contains("raise --ttl to 15s"), "{err}");
        assert_eq!(
            timing(15, 10_000, 2_000, 4_000).ttl_needed(),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn ttl_is_whole_seconds() {
        let mut t = timing(3, 1_500, 300, 1_000);
        t.ttl = Duration::from_millis(2_500);
        assert!(t.validate().unwrap_err().message.contains("--ttl"));
    }

    #[test]
    fn lease_names() {
        assert_eq!(
            validate_lease_name(Some("statement-job")).unwrap(),
            "statement-job"
        );
        assert!(validate_lease_name(None).is_err());
        assert!(validate_lease_name(Some("")).is_err());
        assert!(validate_lease_name(Some("a/b")).is_err());
        assert!(validate_lease_name(Some("a\nb")).is_err());
        assert!(validate_lease_name(Some("a\u{7f}")).is_err());
        assert!(validate_lease_name(Some(".occurrences")).is_err());
        assert!(validate_lease_name(Some("a.b")).is_ok());
    }

    #[test]
    fn prefixes_are_one_segment_between_slashes() {
        for ok in ["/leader-exec/", "/team-a.jobs/", "/x/"] {
            assert_eq!(validate_prefix(ok.into()).unwrap(), ok);
        }
        for bad in [
            "",
            "/",
            "//",
            "leader-exec/",
            "/leader-exec",
            "/leader-exec/x/",
            "/a//",
            "/./",
            "/../",
            "/a\nb/",
        ] {
            let err = validate_prefix(bad.into()).unwrap_err();
            assert!(err.message.contains("--prefix"), "{bad:?}: {err}");
        }
        let long = format!("/{}/", "a".repeat(MAX_PREFIX));
        assert!(
            validate_prefix(long)
                .unwrap_err()
                .message
                .contains("at most")
        );
    }

    #[test]
    fn lengths_are_bounded() {
        let name = "a".repeat(MAX_LEASE_NAME);
        assert!(validate_lease_name(Some(&name)).is_ok());
        let err = validate_lease_name(Some(&format!("{name}a"))).unwrap_err();
        assert!(err.message.contains("at most 255"), "{err}");
    }

    #[test]
    fn timing_arithmetic_saturates() {
        let huge = Duration::MAX;
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.retry_period = huge;
        assert!(t.validate().unwrap_err().message.contains("--retry-period"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.kill_after = huge;
        assert!(t.validate().unwrap_err().message.contains("--kill-after"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.ttl = Duration::from_secs(9_000_000_001);
        assert!(t.validate().unwrap_err().message.contains("9000000000s"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.retry_period = Duration::from_nanos(1);
        assert!(t.validate().unwrap_err().message.contains("at least 10ms"));
    }
}
