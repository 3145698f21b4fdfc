//! What `--endpoints` and the TLS and credential flags say for etcd, parsed and checked before
//! anything is contacted, and the connection they open.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use super::super::flags::{self, Credentials, StoreFlags};
use super::super::{Reach, StartError, StoreError, door, every_address_refuses, first_contact};
use super::{Etcd, classify, probe};
use crate::exit::Failure;
use crate::redact::{redact_password, shown_endpoints};

/// How etcd is reached.
#[derive(Clone)]
pub struct Target {
    /// `--endpoints` as given: `user:password@` is refused below, but a `?password=` query is
    /// not, so these are shown only through the redaction.
    pub endpoints: Vec<String>,
    pub connect_timeout: Duration,
    pub tls: Option<Tls>,
    pub credentials: Option<Credentials>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("endpoints", &shown_endpoints(&self.endpoints))
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.is_some())
            .field("credentials", &self.credentials)
            .finish()
    }
}

#[derive(Clone)]
pub struct Tls {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Target {
    /// Checks every endpoint, reads the TLS files and the credentials.
    pub fn parse(endpoints: Vec<String>, args: StoreFlags) -> Result<Target, Failure> {
        for e in &endpoints {
            validate_endpoint(e)?;
        }
        if args.connect_timeout.is_zero() {
            return Err(Failure::usage("--connect-timeout must be greater than 0"));
        }

        let cacert = args
            .cacert
            .or_else(|| flags::env_path(&["LEADER_EXEC_CACERT", "ETCDCTL_CACERT"]));
        let cert = args
            .cert
            .or_else(|| flags::env_path(&["LEADER_EXEC_CERT", "ETCDCTL_CERT"]));
        let key = args
            .key
            .or_else(|| flags::env_path(&["LEADER_EXEC_KEY", "ETCDCTL_KEY"]));
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some(flags::read_identity(&cert, &key)?),
            (None, None) => None,
            (Some(_), None) => return Err(Failure::usage("--cert needs --key")),
            (None, Some(_)) => return Err(Failure::usage("--key needs --cert")),
        };
        let ca = cacert.map(|p| flags::read_ca(&p)).transpose()?;
        let tls_files = ca.is_some() || identity.is_some();
        // An endpoint without a scheme means https when TLS files are given (as etcdctl does).
        let secure =
            |e: &String| e.starts_with("https://") || (tls_files && !e.starts_with("http://"));
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

        // `--user NAME:PASS` on the command line is warned about in `Connection::parse`, as
        // for every store.
        let user = args.user.or_else(|| flags::env_nonempty("ETCDCTL_USER"));
        let credentials = flags::credentials(user, args.password_file)?;
        if credentials.is_some() && tls.is_none() {
            tracing::warn!(
                event = "cleartext-password",
                "the etcd password is sent unencrypted over plain http:// to {}; use https://",
                shown_endpoints(&endpoints)
            );
        }
        Ok(Target {
            endpoints,
            connect_timeout: args.connect_timeout,
            tls,
            credentials,
        })
    }
}

door! {
    Etcd { name: "etcd", schemes: ["http", "https"], spellings: [], aliases: ["etcd"] },
    target: Target,
    parse: Target::parse,
    candidate: |target, open| Ok(Etcd::new(self::open(target).await?, target, open)),
    reader: |target, open| Ok(Etcd::reader(self::open(target).await?, target, open)),
}

/// Connects, retrying for up to `--connect-timeout` (connecting authenticates when a user is
/// given, so an unreachable etcd can show up here; without one the client is lazy and the first
/// request finds out).
pub async fn open(target: &Target) -> Result<Client, Failure> {
    let reach = Reach {
        store: "etcd",
        shown: shown_endpoints(&target.endpoints),
        addresses: super::addresses(&target.endpoints),
        mismatch: Some(Box::new(probe::Http2Look {
            tls: target.tls.is_some(),
        })),
    };
    match first_contact(&reach, target.connect_timeout, || connect(target)).await {
        Ok(client) => Ok(client),
        Err(StartError::Unreachable(message)) => Err(Failure::usage(message)),
        Err(StartError::Store(e)) => Err(Failure::usage(format!("connecting to etcd: {e}"))),
    }
}

/// Connects to etcd. The client is lazy: without credentials nothing is sent yet, so an
/// unreachable etcd shows up on the first request. With credentials, this authenticates.
async fn connect(target: &Target) -> Result<Client, StoreError> {
    let mut options = ConnectOptions::new()
        // Fail at once when the member we reach has no raft leader (quorum loss) instead of
        // hanging for seconds: the renewal loop retries, possibly on another member.
        .with_require_leader(true)
        // HTTP/2 pings find dead connections (black holes) so the channel reconnects. etcd
        // answers pings from clients without active streams with GOAWAY unless they are at
        // least 5 s apart, so none are sent while idle.
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_keep_alive_while_idle(false)
        .with_connect_timeout(target.connect_timeout.min(Duration::from_secs(3)))
        .with_auto_token_refresh(true);
    if let Some(tls) = &target.tls {
        let mut config = etcd_client::TlsOptions::new();
        config = match &tls.ca {
            Some(ca) => config.ca_certificate(etcd_client::Certificate::from_pem(ca)),
            // As etcdctl does: the platform's trust store (SSL_CERT_FILE and SSL_CERT_DIR
            // override where it is read from).
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(etcd_client::Identity::from_pem(cert, key));
        }
        options = options.with_tls(config);
    }
    if let Some(credentials) = &target.credentials {
        options = options.with_user(credentials.user.clone(), credentials.password.clone());
    }
    let (answering, refusing) = answering(&target.endpoints).await;
    // None answers: all of them, so that the failure says what the client library met.
    let first = if answering.is_empty() {
        &target.endpoints
    } else {
        &answering
    };
    let client = Client::connect(first, Some(options))
        .await
        .map_err(classify)?;
    if !answering.is_empty() && !refusing.is_empty() {
        tokio::spawn(readmit(client.clone(), refusing));
    }
    Ok(client)
}

/// How often members left out of a client because they refused connections are looked at again.
const READMIT_EVERY: Duration = Duration::from_secs(2);

/// The endpoints split into those that may answer and those where a TCP connection is refused
/// right now (a member down, or a typo'd port). The client balances its requests over every
/// endpoint it was given and does not stop sending to one that refuses: each request that lands
/// there fails, a renewal among them, so a dead member in `--endpoints` would cost retries, and
/// under load renew deadlines. A client is therefore built from the members that may answer; a
/// silent one (no refusal within the probe's bound) stays in, as it may be only slow.
async fn answering(endpoints: &[String]) -> (Vec<String>, Vec<String>) {
    let each: Vec<_> = endpoints
        .iter()
        .map(|e| super::addresses(std::slice::from_ref(e)))
        .collect();
    let refused =
        futures_util::future::join_all(each.iter().map(|a| every_address_refuses(a))).await;
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for (endpoint, refused) in endpoints.iter().zip(refused) {
        if refused { &mut down } else { &mut up }.push(endpoint.clone());
    }
    (up, down)
}

/// Adds each left-out member back to `client` once it accepts connections (a member restarted,
/// or started after leader-exec). Stops when none is left out, or when the client's channel is
/// closed. A task of its own, for the process's one client: nothing waits for it.
async fn readmit(client: Client, mut refusing: Vec<String>) {
    while !refusing.is_empty() {
        tokio::time::sleep(READMIT_EVERY).await;
        let mut still = Vec::new();
        for endpoint in refusing {
            let addresses = super::addresses(std::slice::from_ref(&endpoint));
            if every_address_refuses(&addresses).await {
                still.push(endpoint);
            } else if client.add_endpoint(&endpoint).await.is_ok() {
                tracing::info!(event = "member-added", %endpoint, "an etcd member that refused connections answers; its requests go there too");
            } else {
                // The client's channel is closed: the client is gone.
                return;
            }
        }
        refusing = still;
    }
}

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
            redact_password(endpoint).escape_debug()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_endpoints_never_echo_a_password() {
        for bad in [
            "host=db1 password=hunter2",
            "http://etcd:23x79/?password=hunter2",
            "etcd:2379?password=hunter2",
            "http://etcd1/?password=hunter2",
            "https://etcd1?pwd=hunter2",
            "etcd1/?password=hunter2",
        ] {
            let err = validate_endpoint(bad).unwrap_err();
            assert!(!err.message.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn debug_never_shows_a_password() {
        let target = Target::parse(
            vec!["http://etcd:2379/?password=hunter2".into()],
            super::super::super::flags::tests::flags(&["--user", "root:s3cret"]),
        )
        .unwrap();
        let shown = format!("{target:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(shown.contains("http://etcd:2379/"), "{shown}");
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
