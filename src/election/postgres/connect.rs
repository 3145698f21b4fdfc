//! Opening a session: each host of the URL in turn, each address of a host name, as
//! tokio-postgres's `Config::connect` does, but over a socket leader-exec opens itself, so that
//! a [`Guard`] sits between the server and tokio-postgres (above TLS, where TLS is used) and sees
//! what the server asks for before tokio-postgres answers it (`auth.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::Poll;

use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{LoadBalanceHosts, SslMode, SslNegotiation};

use super::auth::{Guard, Method, Plain, refusal_in};
use super::*;

/// rustls over a guarded socket.
type RustlsConnect =
    <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<Guard<Plain>>>::TlsConnect;
type RustlsStream = <RustlsConnect as TlsConnect<Guard<Plain>>>::Stream;

/// A session's connection, for `drive`: the guarded socket, and TLS over it guarded in turn.
pub(super) type Session = tokio_postgres::Connection<Guard<Plain>, Guard<RustlsStream>>;

/// TLS as the URL asks for it, over a guarded socket: that guard lets the ciphertext pass, and
/// a guard above TLS reads the messages.
pub(super) struct GuardedTls {
    /// `None` with `sslmode=disable` (never asked to connect then).
    inner: Option<RustlsConnect>,
    allowed: super::auth::Allowed,
}

impl TlsConnect<Guard<Plain>> for GuardedTls {
    type Stream = Guard<RustlsStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Guard<RustlsStream>>> + Send>>;

    fn connect(self, mut stream: Guard<Plain>) -> Self::Future {
        stream.pass_through();
        Box::pin(async move {
            let inner = self
                .inner
                .ok_or_else(|| std::io::Error::other("TLS asked for with sslmode=disable"))?;
            let tls = inner.connect(stream).await?;
            Ok(Guard::new(tls, self.allowed, false))
        })
    }
}

/// Where one attempt goes.
enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Why one attempt failed: `Final` ends the round (a refused authentication request), `Next`
/// passes on to the next address.
enum Failed {
    Final(StoreError),
    Next(StoreError),
}

/// libpq's `load_balance_hosts=random`: the hosts in an order of this process's own.
fn shuffle(order: &mut [usize]) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut state = u64::from(nanos) << 20 ^ u64::from(std::process::id()) | 1;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

fn unreachable(error: impl std::fmt::Display) -> StoreError {
    StoreError::Transient(format!(
        "PostgreSQL unreachable: error connecting to server: {error}"
    ))
}

impl Postgres {
    /// A session on the first host of the URL (each address of its name) that lets leader-exec
    /// in and, where `target_session_attrs=read-write` is set (`Postgres::new`), allows writes.
    /// A server that asks for an authentication method not allowed ends the round at once.
    pub(super) async fn connect(&self) -> Result<(Client, Session), StoreError> {
        let config = &self.shared.target.config;
        let (hosts, hostaddrs, ports) = (
            config.get_hosts(),
            config.get_hostaddrs(),
            config.get_ports(),
        );
        let count = hosts.len().max(hostaddrs.len());
        if count == 0 {
            return Err(StoreError::Fatal(
                "PostgreSQL: no host in the URL (postgres://HOST/DATABASE)".into(),
            ));
        }
        if !hosts.is_empty() && !hostaddrs.is_empty() && hosts.len() != hostaddrs.len() {
            return Err(StoreError::Fatal(format!(
                "PostgreSQL: {} hosts but {} hostaddrs in the URL",
                hosts.len(),
                hostaddrs.len()
            )));
        }
        if ports.len() > 1 && ports.len() != count {
            return Err(StoreError::Fatal(format!(
                "PostgreSQL: {count} hosts but {} ports in the URL",
                ports.len()
            )));
        }
        let mut order: Vec<usize> = (0..count).collect();
        if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
            shuffle(&mut order);
        }
        let mut last = None;
        for i in order {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            // The name TLS checks the certificate against: the host, never the hostaddr.
            let name = match hosts.get(i) {
                Some(Host::Tcp(host)) => host.clone(),
                _ => String::new(),
            };
            let addresses = match (hostaddrs.get(i), hosts.get(i)) {
                (Some(ip), _) => vec![Address::Tcp(SocketAddr::new(*ip, port))],
                (None, Some(Host::Tcp(host))) => {
                    match tokio::net::lookup_host((host.as_str(), port)).await {
                        Ok(found) => found.map(Address::Tcp).collect(),
                        Err(e) => {
                            last = Some(unreachable(e));
                            continue;
                        }
                    }
                }
                (None, Some(Host::Unix(dir))) => {
                    vec![Address::Unix(dir.join(format!(".s.PGSQL.{port}")))]
                }
                (None, None) => Vec::new(),
            };
            for address in addresses {
                match self.connect_once(address, &name).await {
                    Ok(session) => return Ok(session),
                    Err(Failed::Final(e)) => return Err(e),
                    Err(Failed::Next(e)) => last = Some(e),
                }
            }
        }
        Err(last.unwrap_or_else(|| unreachable("could not resolve any addresses")))
    }

    async fn connect_once(
        &self,
        address: Address,
        name: &str,
    ) -> Result<(Client, Session), Failed> {
        let target = &self.shared.target;
        let config = &target.config;
        let opening = async {
            Ok(match address {
                Address::Tcp(address) => {
                    let stream = TcpStream::connect(address).await?;
                    socket_options(&stream, config)?;
                    Plain::Tcp(stream)
                }
                Address::Unix(path) => Plain::Unix(UnixStream::connect(path).await?),
            })
        };
        let opened = match config.get_connect_timeout() {
            Some(limit) => tokio::time::timeout(*limit, opening)
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connection timed out",
                    ))
                }),
            None => opening.await,
        };
        let plain = opened.map_err(|e| Failed::Next(unreachable(e)))?;
        // tokio-postgres sends an SSLRequest first unless TLS is off or starts at once.
        let answer = config.get_ssl_mode() != SslMode::Disable
            && config.get_ssl_negotiation() == SslNegotiation::Postgres;
        let guarded = Guard::new(plain, target.allowed.clone(), answer);
        let tls = GuardedTls {
            inner: target.tls.clone().map(|mut make| {
                match MakeTlsConnect::<Guard<Plain>>::make_tls_connect(&mut make, name) {
                    Ok(connect) => connect,
                    Err(never) => match never {},
                }
            }),
            allowed: target.allowed.clone(),
        };
        let (client, mut connection) =
            config
                .connect_raw(guarded, tls)
                .await
                .map_err(|e| match refusal_in(&e) {
                    Some(method) => Failed::Final(StoreError::Fatal(self.refusal(method))),
                    None => Failed::Next(classify_connect(e, &target.shown)),
                })?;
        if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            // As tokio-postgres does for read-write: ask, driving the connection meanwhile.
            let answer = {
                let mut query = std::pin::pin!(client.simple_query("SHOW transaction_read_only"));
                poll_fn(|cx| {
                    if Pin::new(&mut connection).poll(cx).is_ready() {
                        return Poll::Ready(None);
                    }
                    query.as_mut().poll(cx).map(Some)
                })
                .await
            };
            let read_only = match answer {
                Some(Ok(messages)) => messages
                    .iter()
                    .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("on"))),
                Some(Err(e)) => return Err(Failed::Next(classify(e))),
                None => {
                    return Err(Failed::Next(StoreError::Transient(format!(
                        "PostgreSQL at {} closed the session",
                        target.shown
                    ))));
                }
            };
            if read_only {
                // Worth retrying: a failover may be promoting one of them.
                return Err(Failed::Next(StoreError::Transient(
                    "PostgreSQL: no primary among the hosts (each is a standby or read-only); only a primary is used"
                        .into(),
                )));
            }
        }
        Ok((client, connection))
    }

    /// The one line for a server that asked for a method not allowed.
    fn refusal(&self, method: Method) -> String {
        let target = &self.shared.target;
        let shown = &target.shown;
        let asked = method.asked();
        match &target.allowed.given {
            Some(given) => format!(
                "PostgreSQL at {shown} asks for {asked}, which require_auth={given} does not allow: the password was not sent"
            ),
            None => format!(
                "PostgreSQL at {shown} asks for {asked}, and its certificate is not verified: the password was not sent; use sslmode=verify-full (or verify-ca) with sslrootcert=FILE, scram-sha-256 on the server, or allow it with require_auth={} in the URL",
                method.name()
            ),
        }
    }
}

/// What tokio-postgres sets on a TCP socket: no delay, the URL's keepalives and
/// `tcp_user_timeout`.
fn socket_options(stream: &TcpStream, config: &Config) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    stream.set_nodelay(true)?;
    let seconds = |d: Duration| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX);
    if let Some(limit) = config.get_tcp_user_timeout() {
        let ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        setsockopt(stream, sockopt::TcpUserTimeout, &ms)?;
    }
    if config.get_keepalives() {
        setsockopt(stream, sockopt::KeepAlive, &true)?;
        setsockopt(
            stream,
            sockopt::TcpKeepIdle,
            &seconds(config.get_keepalives_idle()),
        )?;
        if let Some(interval) = config.get_keepalives_interval() {
            setsockopt(stream, sockopt::TcpKeepInterval, &seconds(interval))?;
        }
        if let Some(retries) = config.get_keepalives_retries() {
            setsockopt(stream, sockopt::TcpKeepCount, &retries)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_keeps_every_host() {
        let mut order: Vec<usize> = (0..7).collect();
        shuffle(&mut order);
        order.sort_unstable();
        assert_eq!(order, (0..7).collect::<Vec<_>>());
    }
}
