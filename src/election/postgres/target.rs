//! What a `postgres://` URL and the TLS and credential flags say for PostgreSQL, parsed and
//! checked before anything is contacted.

use std::path::PathBuf;

use super::super::door;
use super::super::flags::{self, StoreFlags};
use super::auth::Allowed;
use super::{Postgres, Target, Verify};
use crate::exit::Failure;
use crate::redact::{percent_decode, redact_password};

pub fn is_postgres_url(endpoint: &str) -> bool {
    let lower = endpoint.to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `--endpoints postgres://…`: libpq's URL form. The list was split at commas, which also
/// separate a URL's hosts (`postgres://a,b:5433/db`): it is one URL again. `sslmode` and
/// `sslrootcert` are read here; the password comes from the URL, `--password-file`,
/// `LEADER_EXEC_PASSWORD` or `PGPASSWORD`, and is never shown.
pub fn parse(endpoints: Vec<String>, args: StoreFlags) -> Result<Target, Failure> {
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
    if args.cert.is_some() || args.key.is_some() || flags::env_path(&["LEADER_EXEC_CERT"]).is_some()
    {
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
    let mut require_auth: Option<String> = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => sslmode = value.to_owned(),
            "sslrootcert" => sslrootcert = Some(PathBuf::from(percent_decode(value))),
            // libpq's: the authentication methods the server may ask for (auth.rs).
            "require_auth" => require_auth = Some(percent_decode(value)),
            // Only a primary: a standby (an old primary after a failover, say) answers from
            // the past. read-write is what leader-exec always asks for (see `Postgres::new`).
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
    let pguser = flags::env_nonempty("PGUSER");
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
    let ca_path = sslrootcert.or(args
        .cacert
        .or_else(|| flags::env_path(&["LEADER_EXEC_CACERT"])));
    let ca = ca_path.as_deref().map(flags::read_ca).transpose()?;
    // As libpq: prefer and require encrypt without checking the certificate, unless require
    // has a CA file (then it checks the chain, as verify-ca does); verify-full checks the name.
    let verify = match sslmode.as_str() {
        "verify-full" => Verify::Full,
        "verify-ca" => Verify::Chain,
        "require" if ca.is_some() => Verify::Chain,
        _ => Verify::Nothing,
    };
    let tls = match mode {
        SslMode::Disable => None,
        _ => Some(
            super::rustls_connector(ca.as_deref(), verify)
                .map_err(|e| Failure::usage(format!("sslmode={sslmode}: {e}")))?,
        ),
    };
    let verified = verify != Verify::Nothing;
    let allowed = match require_auth {
        Some(value) => {
            Allowed::parse(&value).map_err(|e| Failure::usage(format!("--endpoints: {e}")))?
        }
        None => Allowed::default_for(verified, config.get_password().is_some()),
    };
    Ok(Target {
        config,
        tls,
        verified,
        sslmode,
        allowed,
        shown,
        listen,
    })
}

door! {
    Postgres {
        name: "PostgreSQL",
        schemes: ["postgres"],
        spellings: ["postgresql"],
        aliases: ["pg", "postg", "psql"],
    },
    target: Target,
    parse: parse,
}

#[cfg(test)]
mod tests {
    use super::super::super::any::Connection;
    use super::super::super::flags::tests::flags;
    use super::*;

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

    fn refused(args: &[&str]) -> String {
        match Connection::parse(flags(args)) {
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
            assert!(
                Connection::parse(flags(&["--endpoints", &url])).is_ok(),
                "{attrs}"
            );
        }
    }
}
