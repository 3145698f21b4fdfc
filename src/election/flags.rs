//! What the user asked for, before any store looked at it: the connection flags as given, and
//! the readers of the files they name that more than one store shares.
//!
//! validate.rs fills [`StoreFlags`] from the command line; [`super::any::Connection::parse`]
//! picks the store by the endpoints' scheme and lets it parse and check the rest. Every refusal
//! is one line naming the flag (exit 125) and never shows a password.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exit::Failure;

/// The connection flags, as given: nothing is checked or read yet.
#[derive(Clone, Default)]
pub struct StoreFlags {
    /// `--endpoints`, split at commas; empty when not given (then the environment, then the
    /// default decide).
    pub endpoints: Vec<String>,
    /// `--connect-timeout`.
    pub connect_timeout: Duration,
    /// `--cacert`.
    pub cacert: Option<PathBuf>,
    /// `--cert`.
    pub cert: Option<PathBuf>,
    /// `--key`.
    pub key: Option<PathBuf>,
    /// `--user NAME[:PASS]`.
    pub user: Option<String>,
    /// `--password-file`.
    pub password_file: Option<PathBuf>,
}

impl std::fmt::Debug for StoreFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Endpoints and --user may hold a password: never shown.
        f.debug_struct("StoreFlags")
            .field("endpoints", &self.endpoints.len())
            .field("connect_timeout", &self.connect_timeout)
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("user", &self.user.as_ref().map(|_| "<hidden>"))
            .field("password_file", &self.password_file)
            .finish()
    }
}

/// A user name and its password.
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

pub fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn env_path(names: &[&str]) -> Option<PathBuf> {
    names
        .iter()
        .find_map(|n| env_nonempty(n))
        .map(PathBuf::from)
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
pub fn read_ca(path: &Path) -> Result<Vec<u8>, Failure> {
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
pub fn read_identity(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), Failure> {
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

/// `--user NAME[:PASS]` with its password from the flag, `--password-file` or
/// `LEADER_EXEC_PASSWORD`.
pub fn credentials(
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
pub mod tests {
    use super::*;

    /// Flags as a test writes them: `["--endpoints", URL, "--user", "jobs:s3cret"]`.
    pub fn flags(args: &[&str]) -> StoreFlags {
        let mut flags = StoreFlags {
            connect_timeout: Duration::from_secs(5),
            ..StoreFlags::default()
        };
        for pair in args.chunks(2) {
            let value = pair[1].to_owned();
            match pair[0] {
                "--endpoints" => flags.endpoints = value.split(',').map(str::to_owned).collect(),
                "--cacert" => flags.cacert = Some(value.into()),
                "--cert" => flags.cert = Some(value.into()),
                "--key" => flags.key = Some(value.into()),
                "--user" => flags.user = Some(value),
                "--password-file" => flags.password_file = Some(value.into()),
                other => panic!("no flag {other} here"),
            }
        }
        flags
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
    fn debug_never_shows_a_password() {
        let shown = format!(
            "{:?}",
            flags(&[
                "--endpoints",
                "postgres://u:hunter2@db/x",
                "--user",
                "u:s3cret"
            ])
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
