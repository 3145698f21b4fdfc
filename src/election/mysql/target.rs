//! What a `mysql://` (or `mariadb://`) URL and the TLS and credential flags say, parsed and
//! checked before anything is contacted.

use std::path::PathBuf;

use super::super::door;
use super::super::flags::{self, StoreFlags};
use super::MySql;
use crate::exit::Failure;
use crate::redact::{percent_decode, redact_password};

/// The port MySQL and MariaDB listen on unless told otherwise.
pub const DEFAULT_PORT: u16 = 3306;

pub fn is_mysql_url(endpoint: &str) -> bool {
    let lower = endpoint.to_ascii_lowercase();
    lower.starts_with("mysql://") || lower.starts_with("mariadb://")
}

/// `ssl-mode`, as the mysql client spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disabled,
    /// TLS where the server offers it, without checking its certificate (the client's default).
    Preferred,
    /// TLS or nothing; the certificate is not checked (unless `ssl-ca` is given: then as
    /// `VERIFY_CA`, as the mysql client does).
    Required,
    /// TLS with the certificate checked against the CA, not the host name.
    VerifyCa,
    /// TLS with the certificate and the host name checked.
    VerifyIdentity,
}

impl SslMode {
    /// The mode as the URL spells it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }

    /// Whether the server's certificate is checked (against the CA; the host name too with
    /// `VERIFY_IDENTITY`): only then is the server known to be the one meant.
    pub fn verified(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyIdentity)
    }
}

/// How a MySQL or MariaDB server is reached: the hosts in the order to try, the account, the
/// database and TLS. The password is never shown (`Debug` leaves it out).
#[derive(Clone)]
pub struct Target {
    /// (host, port), tried in turn: the first writable one is used.
    pub hosts: Vec<(String, u16)>,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    pub ssl_mode: SslMode,
    /// A CA bundle (PEM) to check the server's certificate against.
    pub ca: Option<Vec<u8>>,
    /// `allow-unverified-password=true`: the password itself may go to a server whose
    /// certificate is not verified (loopback hosts only).
    pub allow_unverified_password: bool,
    /// The URL with any password removed, for messages.
    pub shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("ssl_mode", &self.ssl_mode)
            .field("allow_unverified_password", &self.allow_unverified_password)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl Target {
    /// Whether the password itself may be sent when the server asks for it
    /// (`caching_sha2_password`'s full authentication, `mysql_clear_password`): only to a server
    /// whose certificate was verified, or where the URL says so. Whatever answers at an address —
    /// a process that bound the port while the server was down, a host in the path — gets it
    /// otherwise, in the clear over TLS it cannot check or encrypted to a key it sends itself.
    pub fn may_send_password(&self) -> bool {
        self.ssl_mode.verified() || self.allow_unverified_password
    }
}

/// Whether a host of the URL is this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::usage(message)
}

/// One `HOST[:PORT]` of the URL's authority; `[::1]:3306` for an IPv6 address.
fn host_port(text: &str) -> Result<(String, u16), Failure> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| usage("--endpoints: an IPv6 address in [ ] is not closed"))?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(usage("--endpoints: junk after an IPv6 address")),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(usage(
            "--endpoints: a host is empty (mysql://USER@HOST:PORT/DATABASE)",
        ));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(usage(format!(
                    "--endpoints: port {} is not a number from 1 to 65535",
                    port.escape_debug()
                )));
            }
        },
    };
    Ok((percent_decode(host), port))
}

/// `--endpoints mysql://USER@HOST[:PORT][,HOST[:PORT]…]/DATABASE[?ssl-mode=…&ssl-ca=…]` (or
/// `mariadb://`). The list was split at commas, which also separate the URL's hosts: it is one
/// URL again. The password comes from the URL, `--password-file` or `LEADER_EXEC_PASSWORD`, and
/// is never shown; the user from the URL, else `--user`, else `$USER`.
pub fn parse(endpoints: Vec<String>, args: StoreFlags) -> Result<Target, Failure> {
    let url = endpoints.join(",");
    if !is_mysql_url(&endpoints[0])
        || endpoints.len() > 1 && endpoints[1..].iter().any(|e| e.contains("://"))
    {
        return Err(usage(
            "--endpoints: give one mysql:// URL (several hosts go inside it: mysql://USER@a,b/DATABASE), not a mix of stores",
        ));
    }
    if args.connect_timeout.is_zero() {
        return Err(usage("--connect-timeout must be greater than 0"));
    }
    if args.cert.is_some() || args.key.is_some() || flags::env_path(&["LEADER_EXEC_CERT"]).is_some()
    {
        return Err(usage(
            "--cert/--key: client certificates are not supported with MySQL; use a password",
        ));
    }
    let shown = redact_password(&url);
    let rest = &url[url.find("://").expect("checked above") + 3..];
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, database) = rest.split_once('/').ok_or_else(|| {
        usage("--endpoints: no database in the URL (mysql://USER@HOST:PORT/DATABASE)")
    })?;
    let database = percent_decode(database);
    if database.is_empty() || database.contains('/') {
        return Err(usage(
            "--endpoints: no database in the URL (mysql://USER@HOST:PORT/DATABASE)",
        ));
    }
    // The password may itself hold '@': the user part ends at the last one.
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let (url_user, url_password) = match userinfo {
        Some(info) => match info.split_once(':') {
            Some((user, password)) => (Some(percent_decode(user)), Some(percent_decode(password))),
            None => (Some(percent_decode(info)), None),
        },
        None => (None, None),
    };
    let hosts = hosts
        .split(',')
        .map(host_port)
        .collect::<Result<Vec<_>, _>>()?;
    let mut ssl_mode = SslMode::Preferred;
    let mut ssl_ca: Option<PathBuf> = None;
    let mut allow_unverified_password = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        // The mysql client takes both spellings (`ssl-mode`, `ssl_mode`).
        match key.replace('_', "-").to_ascii_lowercase().as_str() {
            "ssl-mode" => {
                ssl_mode = match value.to_ascii_uppercase().as_str() {
                    "DISABLED" => SslMode::Disabled,
                    "PREFERRED" => SslMode::Preferred,
                    "REQUIRED" => SslMode::Required,
                    "VERIFY_CA" => SslMode::VerifyCa,
                    "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
                    _ => {
                        return Err(usage(format!(
                            "--endpoints: ssl-mode={} is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY",
                            value.escape_debug()
                        )));
                    }
                }
            }
            "ssl-ca" => ssl_ca = Some(PathBuf::from(percent_decode(value))),
            "allow-unverified-password" => {
                allow_unverified_password = match value.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(usage(format!(
                            "--endpoints: allow-unverified-password={} is not true or false",
                            value.escape_debug()
                        )));
                    }
                }
            }
            _ => {
                return Err(usage(format!(
                    "--endpoints: {} is not an option leader-exec knows for MySQL (ssl-mode, ssl-ca, allow-unverified-password)",
                    percent_decode(key).escape_debug()
                )));
            }
        }
    }
    let user = match (url_user, args.user) {
        (Some(user), _) => user,
        (None, Some(user)) if user.contains(':') => {
            return Err(usage(
                "--user: with MySQL give the password with --password-file or LEADER_EXEC_PASSWORD",
            ));
        }
        (None, Some(user)) => user,
        (None, None) => std::env::var("USER").unwrap_or_else(|_| "root".to_owned()),
    };
    if user.is_empty() {
        return Err(usage("--endpoints: the user name is empty"));
    }
    let password = match url_password {
        Some(password) => Some(password),
        None => match &args.password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    usage(format!(
                        "--password-file {}: cannot read: {e}",
                        path.display()
                    ))
                })?;
                Some(text.lines().next().unwrap_or("").to_owned())
            }
            None => std::env::var("LEADER_EXEC_PASSWORD").ok(),
        },
    };
    let ca_path = ssl_ca.or(args
        .cacert
        .or_else(|| flags::env_path(&["LEADER_EXEC_CACERT"])));
    let ca = ca_path.as_deref().map(flags::read_ca).transpose()?;
    if ca.is_some() && ssl_mode == SslMode::Disabled {
        return Err(usage(
            "--endpoints: ssl-mode=DISABLED with a CA (ssl-ca, --cacert): choose one",
        ));
    }
    // As the mysql client: REQUIRED with a CA checks the chain, as VERIFY_CA does.
    if ssl_mode == SslMode::Required && ca.is_some() {
        ssl_mode = SslMode::VerifyCa;
    }
    // The opt-in is for a server on this machine (a test setup without a CA): over a network
    // the certificate is what tells the server from whoever else answers there.
    if allow_unverified_password
        && let Some((host, _)) = hosts.iter().find(|(host, _)| !is_loopback(host))
    {
        return Err(usage(format!(
            "--endpoints: allow-unverified-password=true is for loopback hosts only, not {}; give the server's CA: ssl-mode=VERIFY_CA&ssl-ca=FILE",
            host.escape_debug()
        )));
    }
    Ok(Target {
        hosts,
        user,
        password,
        database,
        ssl_mode,
        ca,
        allow_unverified_password,
        shown,
    })
}

door! {
    MySql { name: "MySQL", schemes: ["mysql", "mariadb"], spellings: [], aliases: ["my", "maria"] },
    target: Target,
    parse: parse,
}

#[cfg(test)]
mod tests {
    use super::super::super::flags::tests::flags;
    use super::*;

    fn parsed(args: &[&str]) -> Target {
        let flags = flags(args);
        parse(flags.endpoints.clone(), flags).expect("accepted")
    }

    fn refused(args: &[&str]) -> String {
        let flags = flags(args);
        match parse(flags.endpoints.clone(), flags) {
            Err(failure) => failure.to_string(),
            Ok(target) => panic!("{args:?} accepted: {target:?}"),
        }
    }

    #[test]
    fn a_url_names_hosts_user_and_database() {
        let t = parsed(&["--endpoints", "mysql://jobs@db1:3307,db2/ops"]);
        assert_eq!(
            t.hosts,
            [("db1".to_owned(), 3307), ("db2".to_owned(), 3306)]
        );
        assert_eq!((t.user.as_str(), t.database.as_str()), ("jobs", "ops"));
        assert_eq!(t.ssl_mode, SslMode::Preferred);
        let t = parsed(&["--endpoints", "MariaDB://jobs@[::1]:3310/ops%2Dx"]);
        assert_eq!(t.hosts, [("::1".to_owned(), 3310)]);
        assert_eq!(t.database, "ops-x");
        let t = parsed(&["--endpoints", "mysql://db1/ops", "--user", "jobs"]);
        assert_eq!(t.user, "jobs");
    }

    #[test]
    fn passwords_come_from_the_url_or_a_file_and_are_never_shown() {
        let t = parsed(&["--endpoints", "mysql://jobs:hun%40ter2@db1/ops"]);
        assert_eq!(t.password.as_deref(), Some("hun@ter2"));
        assert_eq!(t.shown, "mysql://jobs@db1/ops");
        assert!(!format!("{t:?}").contains("hun"), "{t:?}");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "s3cret\nignored\n").unwrap();
        let path = file.path().to_str().unwrap();
        let t = parsed(&[
            "--endpoints",
            "mysql://jobs@db1/ops",
            "--password-file",
            path,
        ]);
        assert_eq!(t.password.as_deref(), Some("s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
        let message = refused(&["--endpoints", "mysql://db1/ops", "--user", "jobs:s3cret"]);
        assert!(message.contains("--password-file") && !message.contains("s3cret"));
    }

    #[test]
    fn ssl_options_are_the_mysql_clients() {
        let mode = |url: &str| parsed(&["--endpoints", url]).ssl_mode;
        assert_eq!(mode("mysql://u@h/d?ssl-mode=disabled"), SslMode::Disabled);
        assert_eq!(mode("mysql://u@h/d?ssl_mode=REQUIRED"), SslMode::Required);
        assert_eq!(mode("mysql://u@h/d?ssl-mode=VERIFY_CA"), SslMode::VerifyCa);
        assert_eq!(
            mode("mysql://u@h/d?ssl-mode=verify_identity"),
            SslMode::VerifyIdentity
        );
        let message = refused(&["--endpoints", "mysql://u@h/d?ssl-mode=sometimes"]);
        assert!(message.contains("ssl-mode=sometimes"), "{message}");
        let message = refused(&["--endpoints", "mysql://u@h/d?sslmode=disable"]);
        assert!(message.contains("sslmode"), "{message}");
        let message = refused(&["--endpoints", "mysql://u@h/d?ssl-ca=/nonexistent/ca.pem"]);
        assert!(message.contains("/nonexistent/ca.pem"), "{message}");
    }

    #[test]
    fn the_password_itself_goes_only_to_a_verified_server_or_where_the_url_allows_it() {
        let may = |url: &str| parsed(&["--endpoints", url]).may_send_password();
        let ca = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            ca.path(),
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let ca = ca.path().to_str().unwrap();
        // Not verified: the default, DISABLED, REQUIRED (with TLS or not).
        for query in [
            "",
            "?ssl-mode=DISABLED",
            "?ssl-mode=PREFERRED",
            "?ssl-mode=REQUIRED",
        ] {
            assert!(!may(&format!("mysql://u@db1/d{query}")), "{query}");
        }
        // Verified: VERIFY_CA, VERIFY_IDENTITY, and REQUIRED with a CA (as VERIFY_CA).
        for query in [
            "?ssl-mode=VERIFY_CA".to_owned(),
            "?ssl-mode=VERIFY_IDENTITY".to_owned(),
            format!("?ssl-mode=REQUIRED&ssl-ca={ca}"),
        ] {
            assert!(may(&format!("mysql://u@db1/d{query}")), "{query}");
        }
        // The opt-in, on loopback hosts only.
        for hosts in [
            "127.0.0.1:3307",
            "localhost",
            "[::1]:3306",
            "127.0.0.2,localhost",
        ] {
            let url = format!("mysql://u@{hosts}/d?allow_unverified_password=TRUE");
            assert!(may(&url), "{url}");
        }
        assert!(!may(
            "mysql://u@127.0.0.1/d?allow-unverified-password=false"
        ));
        let message = refused(&[
            "--endpoints",
            "mysql://u@127.0.0.1,db1/d?allow-unverified-password=true",
        ]);
        assert!(
            message.contains("loopback") && message.contains("db1"),
            "{message}"
        );
        assert!(message.contains("ssl-mode=VERIFY_CA"), "{message}");
        let message = refused(&["--endpoints", "mysql://u@h/d?allow-unverified-password=yes"]);
        assert!(message.contains("not true or false"), "{message}");
    }

    #[test]
    fn malformed_urls_are_refused_with_one_line() {
        for (url, says) in [
            ("mysql://u@h", "no database"),
            ("mysql://u@h/", "no database"),
            ("mysql://u@h:0/d", "port 0"),
            ("mysql://u@h:x/d", "port x"),
            ("mysql://u@:3306/d", "host is empty"),
            ("mysql://u@[::1/d", "not closed"),
            ("mysql://u@h/d,mysql://v@g/e", "not a mix"),
        ] {
            let message = refused(&["--endpoints", url]);
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains('\n'), "{message}");
        }
        let message = refused(&[
            "--endpoints",
            "mysql://u@h/d",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
        ]);
        assert!(message.contains("client certificates"), "{message}");
    }
}
