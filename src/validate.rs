//! Turning parsed flags into validated settings.
//!
//! Every check here runs before leader-exec contacts the store, so a bad flag costs nothing and
//! leaves nothing behind. Each failure is one line naming the flag, and exit 125. The connection
//! flags are checked by the store they name (`election::any::Connection::parse`).

use std::time::Duration;

use crate::cli::{ElectionArgs, RunArgs, StoreArgs};
use crate::election::any::Connection;
use crate::election::flags::StoreFlags;
use crate::exit::Failure;
use crate::lease::timing::Timing;

/// Length limits, in bytes. They keep keys, log lines and the command's environment small: a
/// single environment string may not exceed 128 KiB, and an identity that large would let the
/// election be won and the command then fail to start.
pub const MAX_LEASE_NAME: usize = 255;
pub const MAX_PREFIX: usize = 255;
pub const MAX_IDENTITY: usize = 1024;
pub const MAX_OCCURRENCE_ID: usize = 1024;

/// A --hold-at-least longer than this is likely a typo (`10d` for `10m`): refused without
/// --allow-long-hold.
pub const LONGEST_HOLD: Duration = Duration::from_secs(24 * 3600);

use crate::election::Scope;
use crate::run::{Settings, Wait};

/// The lease name and prefix, validated.
pub fn scope_from_args(args: ElectionArgs) -> Result<Scope, Failure> {
    Ok(Scope {
        lease: validate_lease_name(args.lease.as_deref())?,
        prefix: validate_prefix(args.prefix)?,
    })
}

/// The run form's settings ([`crate::run::Settings`], defined beside the run that reads them),
/// every flag validated.
pub fn settings_from_args(
    election: ElectionArgs,
    run: RunArgs,
    store: StoreArgs,
) -> Result<Settings, Failure> {
    let Scope { lease, prefix } = scope_from_args(election)?;
    let identity = match run.identity {
        Some(id) if id.is_empty() => {
            return Err(Failure::usage("--identity must not be empty"));
        }
        Some(id) => validate_length("--identity", validate_text("--identity", id)?, MAX_IDENTITY)?,
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
        // An occurrence runs once, and N holders would each run it: refused rather than
        // given a meaning nobody would guess.
        Some(_) if run.max_holders > 1 => {
            return Err(Failure::usage(format!(
                "--occurrence needs --max-holders 1 (got {}): an occurrence runs once, on one leader",
                run.max_holders
            )));
        }
        Some(id) => {
            if id.is_empty() {
                return Err(Failure::usage("--occurrence must not be empty"));
            }
            let id = validate_length(
                "--occurrence",
                validate_text("--occurrence", id)?,
                MAX_OCCURRENCE_ID,
            )?;
            // Records are kept as long as a lease may last: the same bounds as --ttl (the upper one
            // is checked when the duration is parsed).
            if run.occurrence_retention < Duration::from_secs(1) {
                return Err(Failure::usage("--occurrence-retention must be at least 1s"));
            }
            let scope = Scope {
                lease: lease.clone(),
                prefix: prefix.clone(),
            };
            Some(crate::records::occurrence::Occurrence {
                key: crate::records::occurrence::record_key(&scope, &id),
                id,
                if_unfinished: run.if_unfinished,
                retention: run.occurrence_retention,
            })
        }
    };
    let http = run
        .http
        .as_deref()
        .map(crate::telemetry::http::Address::parse)
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
    if let Some(hold) = run.hold_at_least
        && hold > LONGEST_HOLD
        && !run.allow_long_hold
    {
        return Err(Failure::usage(format!(
            "--hold-at-least {} is longer than a day, likely a typo (10d for 10m): this instance would keep the lease, and every other wait or exit 124, that long after it was elected; give a shorter hold, or add --allow-long-hold",
            humantime::format_duration(hold)
        )));
    }
    // From here on every log line names this instance (the warnings below included).
    crate::telemetry::logging::set_context(&lease, &identity);
    let connection = connection(store)?;
    let (max_runtime, splay) = bounds_from_args(run.max_runtime, run.splay)?;
    let health = health_from_args(
        run.health_cmd,
        run.health_interval,
        run.health_timeout,
        run.health_retries,
    )?;
    Ok(Settings {
        max_runtime,
        splay,
        health,
        http,
        metrics_file,
        lease,
        prefix,
        identity,
        timing,
        kill_signal: run.kill_signal,
        wait,
        recampaign: run.recampaign,
        contain: run.contain,
        hold_at_least: run.hold_at_least.filter(|d| !d.is_zero()),
        occurrence,
        max_holders: run.max_holders,
        connection,
        command: run.command,
    })
}

/// `--max-runtime` and `--splay`. A zero bound would stop every command as it starts: refused.
/// A zero splay is no splay.
fn bounds_from_args(
    max_runtime: Option<Duration>,
    splay: Option<Duration>,
) -> Result<(Option<Duration>, Option<Duration>), Failure> {
    if max_runtime.is_some_and(|d| d.is_zero()) {
        return Err(Failure::usage(
            "--max-runtime must be more than 0 (leave it out for no bound)",
        ));
    }
    Ok((max_runtime, splay.filter(|d| !d.is_zero())))
}

/// `--health-cmd` and its timing. Zero durations would run checks back to back or kill each as
/// it starts: refused.
fn health_from_args(
    command: Option<String>,
    interval: Duration,
    timeout: Duration,
    retries: u32,
) -> Result<Option<crate::run::health::HealthCheck>, Failure> {
    let Some(command) = command else {
        return Ok(None);
    };
    if command.trim().is_empty() {
        return Err(Failure::usage("--health-cmd must not be empty"));
    }
    if interval.is_zero() {
        return Err(Failure::usage("--health-interval must be more than 0"));
    }
    if timeout.is_zero() {
        return Err(Failure::usage("--health-timeout must be more than 0"));
    }
    Ok(Some(crate::run::health::HealthCheck {
        command,
        interval,
        timeout,
        retries,
    }))
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

/// Names and values end up in store keys, rows and nodes, environment variables and log lines: no
/// control characters.
fn validate_text(flag: &str, value: String) -> Result<String, Failure> {
    if value.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "{flag} '{}' must not contain control characters",
            value.escape_debug()
        )));
    }
    Ok(value)
}

/// The identity of `hold` and `release`: `--identity`, checked as the run form's is, or the
/// host name alone (not `<hostname>:<pid>`), so that the host finds its slot after a reboot.
pub fn hold_identity(id: Option<String>) -> Result<String, Failure> {
    match id {
        Some(id) if id.is_empty() => Err(Failure::usage("--identity must not be empty")),
        Some(id) => validate_length("--identity", validate_text("--identity", id)?, MAX_IDENTITY),
        None => Ok(host_name()),
    }
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.chars().any(char::is_control))
        .unwrap_or_else(|| "localhost".to_owned())
}

fn default_identity() -> String {
    format!("{}:{}", host_name(), std::process::id())
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

    #[test]
    fn hold_and_release_default_to_the_host_name_alone() {
        let host = hold_identity(None).unwrap();
        assert!(!host.is_empty() && !host.contains(':'), "{host}");
        assert_eq!(hold_identity(Some("web-7".into())).unwrap(), "web-7");
        assert!(hold_identity(Some(String::new())).is_err());
        assert!(hold_identity(Some("a\nb".into())).is_err());
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
}
