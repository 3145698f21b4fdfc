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
use crate::leader::timing::Timing;

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

/// Length limits, in bytes. They keep keys, log lines and the command's environment small: a
/// single environment string may not exceed 128 KiB, and an identity that large would let the
/// election be won and the command then fail to start.
pub const MAX_LEASE_NAME: usize = 255;
pub const MAX_PREFIX: usize = 255;
pub const MAX_IDENTITY: usize = 1024;
pub const MAX_OCCURRENCE_ID: usize = 1024;

/// A --hold-at-least longer than this is likely a typo (`10d` for `10m`): warned about.
pub const HOLD_WARNING: Duration = Duration::from_secs(24 * 3600);

/// How long to wait for our turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Forever,
    Until(Duration),
    No,
}

/// Which store `--endpoints` names, by its scheme.
#[derive(Clone, Debug)]
pub enum Store {
    /// No scheme, `http://`, `https://`.
    Etcd,
    /// `postgres://` or `postgresql://`.
    Postgres(Box<crate::election::postgres::Target>),
    /// `zk://HOST:PORT[,HOST:PORT…][/chroot]`.
    ZooKeeper(Box<crate::election::zookeeper::Target>),
}

/// How to reach the store.
#[derive(Clone, Debug)]
pub struct Connection {
    pub store: Store,
    /// As shown in messages (for PostgreSQL: the URL without any password).
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
            prefix: validate_prefix(args.prefix)?,
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
    pub occurrence: Option<crate::leader::occurrence::Occurrence>,
    pub connection: Connection,
    pub command: Vec<OsString>,
    /// `--http`.
    pub http: Option<crate::telemetry::http::Address>,
    /// `--metrics-file`.
    pub metrics_file: Option<PathBuf>,
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
                Some(crate::leader::occurrence::Occurrence {
                    key: crate::leader::occurrence::record_key(&scope, &id),
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
        // From here on every log line names this instance (the warnings below included).
        crate::telemetry::logging::set_context(&lease, &identity);
        if let Some(hold) = run.hold_at_least
            && hold > HOLD_WARNING
        {
            tracing::warn!(
                event = "long-hold",
                "--hold-at-least {} is longer than a day: this instance keeps the lease (and every other instance waits or exits 124) that long after it was elected; running anyway",
                humantime::format_duration(hold)
            );
        }
        let connection = Connection::from_args(etcd)?;
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

fn connection(mut args: EtcdArgs) -> Result<Connection, Failure> {
    // Warned about once the endpoints are accepted (a refusal stays one line).
    let password_on_command_line = args.endpoints.iter().any(|e| redact_password(e) != *e);
    let warn = |connection: Connection| {
        if password_on_command_line {
            tracing::warn!(
                event = "password-on-command-line",
                "a password in --endpoints shows it to every local user (ps, /proc); use --password-file FILE, LEADER_EXEC_PASSWORD or LEADER_EXEC_ENDPOINTS"
            );
        }
        connection
    };
    let endpoints: Vec<String> = if !args.endpoints.is_empty() {
        std::mem::take(&mut args.endpoints)
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
    if endpoints.iter().any(|e| is_postgres_url(e)) {
        return postgres_connection(endpoints, args).map(warn);
    }
    if endpoints.iter().any(|e| is_zookeeper_url(e)) {
        return zookeeper_connection(endpoints, args).map(warn);
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
        (Some(cert), Some(key)) => Some(read_identity(&cert, &key)?),
        (None, None) => None,
        (Some(_), None) => return Err(Failure::usage("--cert needs --key")),
        (None, Some(_)) => return Err(Failure::usage("--key needs --cert")),
    };
    let ca = cacert.map(|p| read_ca(&p)).transpose()?;
    let tls_files = ca.is_some() || identity.is_some();
    // An endpoint without a scheme means https when TLS files are given (as etcdctl does).
    let secure = |e: &String| e.starts_with("https://") || (tls_files && !e.starts_with("http://"));
    let tls = match endpoints.iter().filter(|e| secure(e)).count() {
        0 if tls_files => {
            return Err(Failure::usage(format!(
                "TLS files given but endpoint {} is plain http://; use https://",
                redact_password(&endpoints[0])
            )));
        }
        0 => None,
        n if n < endpoints.len() => {
            let plain =
                redact_password(endpoints.iter().find(|e| !secure(e)).expect("one is plain"));
            return Err(Failure::usage(format!(
                "--endpoints mixes https:// and plain http:// ({plain}): a request sent to the plain one would go out unencrypted; use https:// for all"
            )));
        }
        // Without --cacert the platform's trust store verifies etcd's certificate.
        _ => Some(Tls { ca, identity }),
    };

    let (user_on_command_line, user) = match args.user {
        Some(user) => (true, Some(user)),
        None => (false, env_nonempty("ETCDCTL_USER")),
    };
    if user_on_command_line && user.as_deref().is_some_and(|u| u.contains(':')) {
        tracing::warn!(
            event = "password-on-command-line",
            "--user NAME:PASS shows the password to every local user (ps, /proc); use --password-file FILE or LEADER_EXEC_PASSWORD"
        );
    }
    let credentials = credentials(user, args.password_file)?;
    if credentials.is_some() && tls.is_none() {
        tracing::warn!(
            event = "cleartext-password",
            "the etcd password is sent unencrypted over plain http:// to {}; use https://",
            shown_endpoints(&endpoints)
        );
    }
    Ok(warn(Connection {
        store: Store::Etcd,
        endpoints,
        connect_timeout: args.connect_timeout,
        tls,
        credentials,
    }))
}

fn is_zookeeper_url(endpoint: &str) -> bool {
    endpoint.to_ascii_lowercase().starts_with("zk://")
}

/// `--endpoints zk://HOST:PORT[,HOST:PORT…][/chroot]`: ZooKeeper's connect string behind a
/// scheme. The list was split at commas, which also separate its hosts: it is one URL again.
/// `--user NAME` with a password (`--password-file`, `LEADER_EXEC_PASSWORD`) authenticates with
/// the `digest` scheme; TLS is not supported with ZooKeeper.
fn zookeeper_connection(endpoints: Vec<String>, args: EtcdArgs) -> Result<Connection, Failure> {
    if !is_zookeeper_url(&endpoints[0])
        || endpoints.len() > 1 && endpoints[1..].iter().any(|e| e.contains("://"))
    {
        return Err(Failure::usage(
            "--endpoints: give one zk:// URL (several hosts go inside it: zk://a:2181,b:2181/chroot), not a mix of stores",
        ));
    }
    if args.connect_timeout.is_zero() {
        return Err(Failure::usage("--connect-timeout must be greater than 0"));
    }
    if args.cacert.is_some() || args.cert.is_some() || args.key.is_some() {
        return Err(Failure::usage(
            "--cacert/--cert/--key: TLS is not supported with ZooKeeper; reach it over a trusted network",
        ));
    }
    let url = endpoints.join(",");
    let rest = &url["zk://".len()..];
    let (hosts, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if hosts.split(',').any(|h| h.trim().is_empty()) {
        return Err(Failure::usage(format!(
            "--endpoints {}: a host is empty; write zk://HOST:PORT[,HOST:PORT…][/chroot]",
            redact_password(&url).escape_debug()
        )));
    }
    for host in hosts.split(',') {
        if host.contains('@') {
            return Err(Failure::usage(
                "--endpoints: credentials do not go in a zk:// URL; use --user and --password-file",
            ));
        }
        let port_ok = host.rsplit_once(':').is_some_and(|(name, port)| {
            !name.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(Failure::usage(format!(
                "--endpoints: {} is not HOST:PORT",
                redact_password(host).escape_debug()
            )));
        }
    }
    if chroot == "/" || chroot.ends_with('/') && !chroot.is_empty() || chroot.contains("//") {
        return Err(Failure::usage(format!(
            "--endpoints: the chroot {} must be an absolute path without a trailing '/'",
            redact_password(chroot).escape_debug()
        )));
    }
    let credentials = credentials(args.user, args.password_file)?;
    Ok(Connection {
        store: Store::ZooKeeper(Box::new(crate::election::zookeeper::Target {
            connect: format!("{hosts}{chroot}"),
            shown: redact_password(&url),
            digest: credentials.map(|c| format!("{}:{}", c.user, c.password)),
        })),
        endpoints: vec![redact_password(&url)],
        connect_timeout: args.connect_timeout,
        tls: None,
        credentials: None,
    })
}

fn is_postgres_url(endpoint: &str) -> bool {
    let lower = endpoint.to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `--endpoints postgres://…`: libpq's URL form. The list was split at commas, which also
/// separate a URL's hosts (`postgres://a,b:5433/db`): it is one URL again. `sslmode` and
/// `sslrootcert` are read here; the password comes from the URL, `--password-file`,
/// `LEADER_EXEC_PASSWORD` or `PGPASSWORD`, and is never shown.
fn postgres_connection(endpoints: Vec<String>, args: EtcdArgs) -> Result<Connection, Failure> {
    use std::str::FromStr;
    use tokio_postgres::config::SslMode;
    let url = endpoints.join(",");
    if !is_postgres_url(&endpoints[0])
        || endpoints.len() > 1 && endpoints[1..].iter().any(|e| is_postgres_url(e))
    {
        return Err(Failure::usage(
            "--endpoints: give one postgres:// URL (several hosts go inside it: postgres://a,b/db), not a mix of stores",
        ));
    }
    if args.connect_timeout.is_zero() {
        return Err(Failure::usage("--connect-timeout must be greater than 0"));
    }
    if args.cert.is_some() || args.key.is_some() || env_path(&["LEADER_EXEC_CERT"]).is_some() {
        return Err(Failure::usage(
            "--cert/--key: client certificates are not supported with PostgreSQL; use a password",
        ));
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base.to_owned(), query.to_owned()),
        None => (url.clone(), String::new()),
    };
    let mut kept = Vec::new();
    let mut sslmode = "prefer".to_owned();
    let mut sslrootcert: Option<PathBuf> = None;
    let mut listen = true;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => sslmode = value.to_owned(),
            "sslrootcert" => sslrootcert = Some(PathBuf::from(percent_decode(value))),
            // Only a primary: a standby (an old primary after a failover, say) answers from
            // the past. read-write is what leader-exec always asks for (postgres.rs).
            "target_session_attrs" => match value {
                "read-write" | "primary" => {}
                "any" | "read-only" | "standby" | "prefer-standby" => {
                    return Err(Failure::usage(format!(
                        "--endpoints: target_session_attrs={value} would allow a standby; leader-exec uses only a primary (read-write, the default)"
                    )));
                }
                other => {
                    return Err(Failure::usage(format!(
                        "--endpoints: target_session_attrs={} is not one of read-write, primary",
                        other.escape_debug()
                    )));
                }
            },
            // Not libpq's: whether waiters LISTEN (off behind pgbouncer in transaction mode).
            "leader_exec_listen" => {
                listen = match value {
                    "on" => true,
                    "off" => false,
                    other => {
                        return Err(Failure::usage(format!(
                            "--endpoints: leader_exec_listen={} is not on or off",
                            other.escape_debug()
                        )));
                    }
                }
            }
            _ => kept.push(pair.to_owned()),
        }
    }
    let mode = match sslmode.as_str() {
        "disable" => SslMode::Disable,
        "allow" | "prefer" => SslMode::Prefer,
        "require" | "verify-ca" | "verify-full" => SslMode::Require,
        other => {
            return Err(Failure::usage(format!(
                "--endpoints: sslmode={} is not one of disable, allow, prefer, require, verify-ca, verify-full",
                other.escape_debug()
            )));
        }
    };
    let rebuilt = if kept.is_empty() {
        base.clone()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    // The message of a parse error never includes the URL (it may hold a password).
    let mut config = tokio_postgres::Config::from_str(&rebuilt)
        .map_err(|e| Failure::usage(format!("--endpoints: not a valid PostgreSQL URL: {e}")))?;
    config.ssl_mode(mode);
    let shown = redact_password(&url);
    let pguser = env_nonempty("PGUSER");
    if let Some(user) = args.user.as_deref().or(pguser.as_deref())
        && config.get_user().is_none()
    {
        if user.contains(':') {
            return Err(Failure::usage(
                "--user: with PostgreSQL give the password with --password-file, LEADER_EXEC_PASSWORD or PGPASSWORD",
            ));
        }
        config.user(user);
    }
    if config.get_user().is_none() {
        let user = std::env::var("USER").unwrap_or_else(|_| "postgres".to_owned());
        config.user(user);
    }
    if config.get_password().is_none() {
        let password = if let Some(path) = &args.password_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!(
                    "--password-file {}: cannot read: {e}",
                    path.display()
                ))
            })?;
            Some(text.lines().next().unwrap_or("").to_owned())
        } else {
            std::env::var("LEADER_EXEC_PASSWORD")
                .ok()
                .or_else(|| std::env::var("PGPASSWORD").ok())
        };
        if let Some(password) = password {
            config.password(password);
        }
    }
    let ca_path = sslrootcert.or(args.cacert.or_else(|| env_path(&["LEADER_EXEC_CACERT"])));
    let ca = ca_path.as_deref().map(read_ca).transpose()?;
    // As libpq: prefer and require encrypt without checking the certificate, unless require
    // has a CA file (then it checks the chain, as verify-ca does); verify-full checks the name.
    use crate::election::postgres::Verify;
    let verify = match sslmode.as_str() {
        "verify-full" => Verify::Full,
        "verify-ca" => Verify::Chain,
        "require" if ca.is_some() => Verify::Chain,
        _ => Verify::Nothing,
    };
    let tls = match mode {
        SslMode::Disable => None,
        _ => Some(
            crate::election::postgres::rustls_connector(ca.as_deref(), verify)
                .map_err(|e| Failure::usage(format!("sslmode={sslmode}: {e}")))?,
        ),
    };
    Ok(Connection {
        store: Store::Postgres(Box::new(crate::election::postgres::Target {
            config,
            tls,
            shown: shown.clone(),
            listen,
        })),
        endpoints: vec![shown],
        connect_timeout: args.connect_timeout,
        tls: None,
        credentials: None,
    })
}

pub use crate::redact::{percent_decode, redact_password, shown_endpoints};

/// host[:port] with an optional http:// or https:// scheme; the client library checks the rest.
fn validate_endpoint(endpoint: &str) -> Result<(), Failure> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        // user:password@host: etcd-client would ignore it, and echoing it would print a password.
        return Err(Failure::usage(
            "--endpoints: an endpoint holds a user name or password (USER:PASS@HOST), which is not used and not shown here; give --user NAME with --password-file FILE instead",
        ));
    }
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
    if valid && port == Some(None) {
        // The client library would try port 80 (http) or 443 (https), where no etcd listens:
        // the documented form is host:port, so say so instead of timing out there.
        return Err(Failure::usage(format!(
            "--endpoints: '{}' has no port; give host:port, e.g. http://127.0.0.1:2379 (etcd's client port is usually 2379)",
            endpoint.escape_debug()
        )));
    }
    if !valid {
        return Err(Failure::usage(format!(
            "--endpoints: '{}' is not an endpoint like http://127.0.0.1:2379",
            redact_password(endpoint).escape_debug()
        )));
    }
    Ok(())
}

fn read_file(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|e| Failure::usage(format!("{flag} {}: cannot read: {e}", path.display())))
}

/// What a PEM file holds, as far as TLS setup cares.
#[derive(Debug, Default, PartialEq, Eq)]
struct PemContents {
    certificates: usize,
    private_keys: usize,
}

fn pem_contents(bytes: &[u8]) -> PemContents {
    use rustls_pki_types::pem::{PemObject, SectionKind};
    let mut contents = PemContents::default();
    for (kind, _) in <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes).map_while(Result::ok) {
        match kind {
            SectionKind::Certificate => contents.certificates += 1,
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                contents.private_keys += 1
            }
            _ => {}
        }
    }
    contents
}

/// A CA bundle: at least one PEM certificate.
fn read_ca(path: &Path) -> Result<Vec<u8>, Failure> {
    let bytes = read_file("--cacert", path)?;
    if pem_contents(&bytes).certificates == 0 {
        return Err(Failure::usage(format!(
            "--cacert {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(bytes)
}

/// A client certificate and its key, each checked to be what its flag says.
fn read_identity(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), Failure> {
    let cert = read_file("--cert", cert_path)?;
    let key = read_file("--key", key_path)?;
    let (in_cert, in_key) = (pem_contents(&cert), pem_contents(&key));
    if in_cert.certificates == 0 && in_key.certificates > 0 && in_cert.private_keys > 0 {
        return Err(Failure::usage(format!(
            "--cert {} holds a private key and --key {} a certificate: --cert and --key are swapped",
            cert_path.display(),
            key_path.display()
        )));
    }
    if in_cert.certificates == 0 {
        return Err(Failure::usage(format!(
            "--cert {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
            cert_path.display()
        )));
    }
    if in_key.private_keys == 0 {
        return Err(Failure::usage(format!(
            "--key {}: no PEM private key in it (expected -----BEGIN PRIVATE KEY-----)",
            key_path.display()
        )));
    }
    Ok((cert, key))
}

fn credentials(
    user: Option<String>,
    password_file: Option<PathBuf>,
) -> Result<Option<Credentials>, Failure> {
    let Some(user) = user else {
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
    fn pem_files_are_recognised() {
        assert_eq!(pem_contents(b"not pem at all"), PemContents::default());
        let cert =
            b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_contents(cert).certificates, 1);
        let key = b"-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n";
        assert_eq!(pem_contents(key).private_keys, 1);
    }

    #[test]
    fn postgres_passwords_are_never_shown() {
        assert_eq!(
            redact_password("postgres://jobs:hunter2@db1:5432/ops"),
            "postgres://jobs@db1:5432/ops"
        );
        assert_eq!(
            redact_password("postgresql://db1,db2/ops?sslmode=require"),
            "postgresql://db1,db2/ops?sslmode=require"
        );
        assert_eq!(percent_decode("%2Fetc%2Fca.pem"), "/etc/ca.pem");
    }

    #[test]
    fn refusals_of_endpoints_never_echo_a_password() {
        for bad in [
            "host=db1 password=hunter2",
            "http://etcd:23x79/?password=hunter2",
            "etcd:2379?password=hunter2",
        ] {
            let err = validate_endpoint(bad).unwrap_err();
            assert!(!err.message.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn endpoints_with_credentials_are_refused_without_echo() {
        let err = validate_endpoint("https://root:hunter2@etcd:2379").unwrap_err();
        assert!(!err.message.contains("hunter2"), "{err}");
        assert!(err.message.contains("--endpoints"), "{err}");
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

    #[test]
    fn an_endpoint_without_a_port_is_refused_with_the_form_to_use() {
        for endpoint in [
            "http://127.0.0.1",
            "https://etcd.example/",
            "etcd1",
            "http://[::1]",
        ] {
            let message = validate_endpoint(endpoint).unwrap_err().to_string();
            assert!(message.contains("has no port"), "{endpoint}: {message}");
            assert!(message.contains("http://127.0.0.1:2379"), "{message}");
        }
    }
}

#[cfg(test)]
mod zookeeper_urls {
    use super::*;
    use clap::Parser;

    fn connect(args: &[&str]) -> Result<Connection, Failure> {
        let mut argv = vec!["leader-exec", "--lease", "x"];
        argv.extend_from_slice(args);
        argv.extend(["--", "true"]);
        let cli = crate::cli::Cli::try_parse_from(argv).expect("parses");
        Connection::from_args(cli.etcd)
    }

    fn target(args: &[&str]) -> crate::election::zookeeper::Target {
        match connect(args).map(|c| c.store) {
            Ok(Store::ZooKeeper(target)) => *target,
            other => panic!("not ZooKeeper: {:?}", other.map(|_| ()).err()),
        }
    }

    fn refused(args: &[&str]) -> String {
        match connect(args) {
            Err(failure) => failure.to_string(),
            Ok(_) => panic!("{args:?} accepted"),
        }
    }

    #[test]
    fn postgres_target_session_attrs_allowing_a_standby_are_refused() {
        for attrs in ["any", "read-only", "standby", "prefer-standby"] {
            let url = format!("postgres://db1,db2/ops?target_session_attrs={attrs}");
            let message = refused(&["--endpoints", &url]);
            assert!(message.contains("standby"), "{message}");
        }
        assert!(
            refused(&["--endpoints", "postgres://db1/ops?target_session_attrs=x"]).contains("x")
        );
        for attrs in ["read-write", "primary"] {
            let url =
                format!("postgres://db1,db2/ops?target_session_attrs={attrs}&sslmode=disable");
            assert!(connect(&["--endpoints", &url]).is_ok(), "{attrs}");
        }
    }

    #[test]
    fn a_zk_url_is_a_connect_string_with_an_optional_chroot() {
        let t = target(&["--endpoints", "zk://zk1:2181,zk2:2181,zk3:2181/ops"]);
        assert_eq!(t.connect, "zk1:2181,zk2:2181,zk3:2181/ops");
        assert_eq!(t.digest, None);
        assert_eq!(
            target(&["--endpoints", "zk://127.0.0.1:2181"]).connect,
            "127.0.0.1:2181"
        );
        assert_eq!(
            target(&["--endpoints", "zk://a:1/deep/chroot"]).connect,
            "a:1/deep/chroot"
        );
    }

    #[test]
    fn bad_zk_urls_are_refused_with_what_is_wrong() {
        assert!(refused(&["--endpoints", "zk://a:2181,http://b:2379"]).contains("not a mix"));
        assert!(refused(&["--endpoints", "zk://a"]).contains("is not HOST:PORT"));
        assert!(refused(&["--endpoints", "zk://a:0"]).contains("is not HOST:PORT"));
        assert!(refused(&["--endpoints", "zk://,a:2181"]).contains("a host is empty"));
        assert!(refused(&["--endpoints", "zk://a:2181/ops/"]).contains("chroot"));
        assert!(refused(&["--endpoints", "zk://a:2181/"]).contains("chroot"));
        let secret = refused(&["--endpoints", "zk://u:hunter2@a:2181"]);
        assert!(
            secret.contains("credentials do not go in a zk:// URL"),
            "{secret}"
        );
        assert!(!secret.contains("hunter2"), "{secret}");
        assert!(
            refused(&["--endpoints", "zk://a:2181", "--cacert", "/etc/hostname"])
                .contains("TLS is not supported with ZooKeeper")
        );
    }

    #[test]
    fn a_user_and_password_become_digest_credentials() {
        let t = target(&["--endpoints", "zk://a:2181", "--user", "jobs:s3cret"]);
        assert_eq!(t.digest.as_deref(), Some("jobs:s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
