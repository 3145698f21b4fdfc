//! Turning parsed flags into validated settings.
//!
//! Every check here runs before leader-exec contacts etcd, so a bad flag costs nothing and leaves
//! nothing behind. Each failure is one line naming the flag, and exit 125.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::cli::{ElectionArgs, EtcdArgs, RunArgs};
use crate::exit::Failure;

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

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
        if self.retry_period.is_zero() {
            return Err(Failure::usage("--retry-period must be greater than 0"));
        }
        if self.renew_deadline.is_zero() {
            return Err(Failure::usage("--renew-deadline must be greater than 0"));
        }
        if self.retry_period * 3 > self.renew_deadline {
            return Err(Failure::usage(format!(
                "--retry-period ({}) must be at most a third of --renew-deadline ({}), so that several renewals fit in the deadline",
                ms(self.retry_period),
                ms(self.renew_deadline)
            )));
        }
        if self.renew_deadline + self.kill_after + self.margin() > self.ttl {
            return Err(Failure::usage(format!(
                "--renew-deadline ({}) + --kill-after ({}) must be at most --ttl ({}) minus a margin of {}: the command must be dead before the lease can expire",
                ms(self.renew_deadline),
                ms(self.kill_after),
                ms(self.ttl),
                ms(self.margin())
            )));
        }
        Ok(())
    }
}

/// How long to wait for our turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Forever,
    Until(Duration),
    No,
}

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct Connection {
    pub endpoints: Vec<String>,
    pub connect_timeout: Duration,
    pub tls: Option<Tls>,
    pub credentials: Option<Credentials>,
}

#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Which election: the lease name and the key prefix, validated.
#[derive(Clone, Debug)]
pub struct Scope {
    pub lease: String,
    pub prefix: String,
}

impl Scope {
    pub fn from_args(args: ElectionArgs) -> Result<Scope, Failure> {
        Ok(Scope {
            lease: validate_lease_name(args.lease.as_deref())?,
            prefix: validate_text("--prefix", args.prefix)?,
        })
    }

    /// The election prefix: candidate keys are this plus the lease id in hex.
    pub fn election_prefix(&self) -> String {
        format!("{}{}/", self.prefix, self.lease)
    }
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
}

impl Settings {
    pub fn from_args(
        election: ElectionArgs,
        run: RunArgs,
        etcd: EtcdArgs,
    ) -> Result<Settings, Failure> {
        let Scope { lease, prefix } = Scope::from_args(election)?;
        let identity = match run.identity {
            Some(id) if id.is_empty() => {
                return Err(Failure::usage("--identity must not be empty"));
            }
            Some(id) => validate_text("--identity", id)?,
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
                let id = validate_text("--occurrence", id)?;
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
        let connection = Connection::from_args(etcd)?;
        Ok(Settings {
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
    validate_text("--lease", name.to_owned())
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

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_path(names: &[&str]) -> Option<PathBuf> {
    names
        .iter()
        .find_map(|n| env_nonempty(n))
        .map(PathBuf::from)
}

impl Connection {
    pub fn from_args(args: EtcdArgs) -> Result<Connection, Failure> {
        connection(args)
    }
}

fn connection(args: EtcdArgs) -> Result<Connection, Failure> {
    let endpoints: Vec<String> = if !args.endpoints.is_empty() {
        args.endpoints
    } else if let Some(list) =
        env_nonempty("LEADER_EXEC_ENDPOINTS").or_else(|| env_nonempty("ETCDCTL_ENDPOINTS"))
    {
        list.split(',').map(str::to_owned).collect()
    } else {
        vec![DEFAULT_ENDPOINT.to_owned()]
    };
    let endpoints: Vec<String> = endpoints
        .into_iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    if endpoints.is_empty() {
        return Err(Failure::usage("--endpoints is empty"));
    }
    for e in &endpoints {
        validate_endpoint(e)?;
    }
    if args.connect_timeout.is_zero() {
        return Err(Failure::usage("--connect-timeout must be greater than 0"));
    }

    let cacert = args
        .cacert
        .or_else(|| env_path(&["LEADER_EXEC_CACERT", "ETCDCTL_CACERT"]));
    let cert = args
        .cert
        .or_else(|| env_path(&["LEADER_EXEC_CERT", "ETCDCTL_CERT"]));
    let key = args
        .key
        .or_else(|| env_path(&["LEADER_EXEC_KEY", "ETCDCTL_KEY"]));
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((read_file("--cert", &cert)?, read_file("--key", &key)?)),
        (None, None) => None,
        (Some(_), None) => return Err(Failure::usage("--cert needs --key")),
        (None, Some(_)) => return Err(Failure::usage("--key needs --cert")),
    };
    let ca = cacert.map(|p| read_file("--cacert", &p)).transpose()?;
    let tls = if ca.is_some() || identity.is_some() {
        if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
            return Err(Failure::usage(format!(
                "TLS files given but endpoint {plain} is plain http://; use https://"
            )));
        }
        Some(Tls { ca, identity })
    } else {
        None
    };

    let credentials = credentials(args.user, args.password_file)?;
    Ok(Connection {
        endpoints,
        connect_timeout: args.connect_timeout,
        tls,
        credentials,
    })
}

/// host[:port] with an optional http:// or https:// scheme; the client library checks the rest.
fn validate_endpoint(endpoint: &str) -> Result<(), Failure> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or("");
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(_, after)| after.strip_prefix(':')),
        None => Some(authority.rsplit_once(':').map(|(_, port)| port)),
    };
    let valid = !authority.is_empty()
        && !endpoint
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        && match port {
            None => false,
            Some(None) => true,
            Some(Some(port)) => port.parse::<u16>().is_ok(),
        };
    if !valid {
        return Err(Failure::usage(format!(
            "--endpoints: '{}' is not an endpoint like http://127.0.0.1:2379",
            endpoint.escape_debug()
        )));
    }
    Ok(())
}

fn read_file(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|e| Failure::usage(format!("{flag} {}: cannot read: {e}", path.display())))
}

fn credentials(
    user: Option<String>,
    password_file: Option<PathBuf>,
) -> Result<Option<Credentials>, Failure> {
    let Some(user) = user.or_else(|| env_nonempty("ETCDCTL_USER")) else {
        if password_file.is_some() {
            return Err(Failure::usage("--password-file needs --user"));
        }
        return Ok(None);
    };
    let (name, inline_password) = match user.split_once(':') {
        Some((name, password)) => (name.to_owned(), Some(password.to_owned())),
        None => (user, None),
    };
    if name.is_empty() {
        return Err(Failure::usage("--user: the user name is empty"));
    }
    let password = if let Some(path) = password_file {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Failure::usage(format!(
                "--password-file {}: cannot read: {e}",
                path.display()
            ))
        })?;
        text.lines().next().unwrap_or("").to_owned()
    } else if let Some(password) = inline_password {
        password
    } else if let Ok(password) = std::env::var("LEADER_EXEC_PASSWORD") {
        password
    } else {
        return Err(Failure::usage(format!(
            "--user {name}: no password; give --user NAME:PASS, --password-file FILE or LEADER_EXEC_PASSWORD"
        )));
    };
    Ok(Some(Credentials {
        user: name,
        password,
    }))
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
    fn endpoints() {
        assert!(validate_endpoint("http://127.0.0.1:2379").is_ok());
        assert!(validate_endpoint("https://etcd.example:2379").is_ok());
        assert!(validate_endpoint("127.0.0.1:2379").is_ok());
        assert!(validate_endpoint("http://[::1]:2379").is_ok());
        assert!(validate_endpoint("http://").is_err());
        assert!(validate_endpoint("http://host:99999").is_err());
        assert!(validate_endpoint("http://a b").is_err());
    }
}
