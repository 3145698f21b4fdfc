//! `--http ADDR`: GET /metrics, /leader and /healthz, served by hyper on the runtime that runs
//! the state machine.
//!
//! It shares that one thread with the renewal loop and the step-down, so it is built never to
//! hold them up: every answer is computed from in-memory state without awaiting anything (a few
//! microseconds of encoding), at most [`MAX_CONNECTIONS`] connections are open at once, a
//! request's head must arrive within [`HEADER_TIMEOUT`] (which also bounds the wait between two
//! requests on a kept-alive connection), a connection lives at most [`CONNECTION_LIFETIME`],
//! request heads are capped at 8 KiB and bodies are never read. The tasks only run while the
//! state machine waits, and the timers that end leadership are served by the same scheduler,
//! between any two of them. Nothing on the step-down path waits for this module.
//!
//! The probes must stay answerable while one client misbehaves (a load balancer that stops
//! routing, or a liveness probe that restarts the leader, would turn a local nuisance into an
//! outage). So a new connection is never refused for want of a slot: when all are taken, the
//! connection that has waited longest for its next request is closed, taken from the peer (IP
//! address) that holds the most connections — a client that holds every slot with idle or
//! slow (byte-by-byte) connections, or floods new ones, only ever displaces its own oldest, and
//! a probe that connects and asks at once is answered.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::oneshot;

use crate::exit::Failure;
use crate::telemetry::metrics::{self, Metrics};

/// Connections open at once; one more closes the longest-waiting one (see the module's doc).
pub const MAX_CONNECTIONS: usize = 16;
/// A request's head must arrive within this, counted from the connection's start or the end of
/// the previous answer: it is also the idle timeout of a kept-alive connection.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// A connection (keep-alive included) is closed after this.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Where to listen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl Address {
    /// `127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`, or a unix socket path (starting with `/`
    /// or `.`).
    pub fn parse(text: &str) -> Result<Address, Failure> {
        if text.starts_with('/') || text.starts_with("./") || text.starts_with("../") {
            if text.contains('\0') || text.len() > 107 {
                return Err(Failure::usage(format!(
                    "--http '{}' is not a usable unix socket path (at most 107 bytes)",
                    text.escape_debug()
                )));
            }
            return Ok(Address::Unix(PathBuf::from(text)));
        }
        text.parse().map(Address::Tcp).map_err(|_| {
            Failure::usage(format!(
                "--http '{}' is not an address like 127.0.0.1:9464, [::1]:9464 or a unix socket path like /run/leader-exec/job.sock",
                text.escape_debug()
            ))
        })
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => addr.fmt(f),
            Address::Unix(path) => path.display().fmt(f),
        }
    }
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Binds now (exit 125 on failure) and serves from a task of the current runtime until the
/// runtime ends. Returns the bound address (the port, when 0 was asked for).
pub fn serve(address: &Address, metrics: &'static Metrics) -> Result<Address, Failure> {
    let cannot =
        |e: std::io::Error| Failure::usage(format!("--http {address}: cannot listen: {e}"));
    let (listener, bound) = match address {
        Address::Tcp(addr) => {
            let std = std::net::TcpListener::bind(addr).map_err(cannot)?;
            std.set_nonblocking(true).map_err(cannot)?;
            let bound = Address::Tcp(std.local_addr().map_err(cannot)?);
            (
                Listener::Tcp(tokio::net::TcpListener::from_std(std).map_err(cannot)?),
                bound,
            )
        }
        Address::Unix(path) => {
            remove_stale_socket(path);
            let std = std::os::unix::net::UnixListener::bind(path).map_err(cannot)?;
            std.set_nonblocking(true).map_err(cannot)?;
            (
                Listener::Unix(tokio::net::UnixListener::from_std(std).map_err(cannot)?),
                address.clone(),
            )
        }
    };
    tracing::info!(event = "http-listening", address = %bound, "serving /metrics, /leader and /healthz");
    tokio::spawn(accept_loop(listener, metrics));
    Ok(bound)
}

/// A socket file left by an earlier run that nobody answers on is removed; anything else is left
/// for bind to report.
fn remove_stale_socket(path: &PathBuf) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// Removes the unix socket file at exit (best effort).
pub fn cleanup(address: Option<&Address>) {
    if let Some(Address::Unix(path)) = address {
        let _ = std::fs::remove_file(path);
    }
}

async fn accept_loop(listener: Listener, metrics: &'static Metrics) {
    let open = Arc::new(Mutex::new(Open::default()));
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l
                .accept()
                .await
                .map(|(s, a)| (Stream::Tcp(s), Some(a.ip()))),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| (Stream::Unix(s), None)),
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: try again a little later.
                tracing::debug!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok((id, closed)) = open.lock().map(|mut open| open.admit(peer)) else {
            continue;
        };
        let open = open.clone();
        tokio::spawn(async move {
            let _registered = Registered(open.clone(), id);
            match stream {
                Stream::Tcp(s) => {
                    serve_connection(TokioIo::new(s), metrics, &open, id, closed).await
                }
                Stream::Unix(s) => {
                    serve_connection(TokioIo::new(s), metrics, &open, id, closed).await
                }
            }
        });
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The open connections (at most [`MAX_CONNECTIONS`]).
#[derive(Default)]
struct Open {
    next_id: u64,
    connections: HashMap<u64, Connection>,
}

struct Connection {
    /// None for a unix socket (one peer: the local host).
    peer: Option<IpAddr>,
    /// When it was accepted or its latest request arrived.
    last_request: Instant,
    /// Dropped to close the connection.
    _close: oneshot::Sender<()>,
}

impl Open {
    /// Registers a new connection, first closing one when all slots are taken; returns its id
    /// and what tells it that it was closed.
    fn admit(&mut self, peer: Option<IpAddr>) -> (u64, oneshot::Receiver<()>) {
        if self.connections.len() >= MAX_CONNECTIONS {
            self.close_one();
        }
        let (close, closed) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        self.connections.insert(
            id,
            Connection {
                peer,
                last_request: Instant::now(),
                _close: close,
            },
        );
        (id, closed)
    }

    /// Closes the connection waiting longest for its next request, of the peer with the most.
    fn close_one(&mut self) {
        let mut per_peer: HashMap<Option<IpAddr>, usize> = HashMap::new();
        for c in self.connections.values() {
            *per_peer.entry(c.peer).or_default() += 1;
        }
        let victim = self
            .connections
            .iter()
            .max_by_key(|(_, c)| (per_peer[&c.peer], std::cmp::Reverse(c.last_request)))
            .map(|(id, _)| *id);
        if let Some(id) = victim {
            self.connections.remove(&id);
        }
    }

    fn requested(&mut self, id: u64) {
        if let Some(c) = self.connections.get_mut(&id) {
            c.last_request = Instant::now();
        }
    }
}

/// Unregisters a connection when its task ends.
struct Registered(Arc<Mutex<Open>>, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut open) = self.0.lock() {
            open.connections.remove(&self.1);
        }
    }
}

async fn serve_connection<I>(
    io: I,
    metrics: &'static Metrics,
    open: &Arc<Mutex<Open>>,
    id: u64,
    closed: oneshot::Receiver<()>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let requests = open.clone();
    let service = hyper::service::service_fn(move |request| {
        if let Ok(mut open) = requests.lock() {
            open.requested(id);
        }
        let response = respond(&request, metrics);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(8192)
        .serve_connection(io, service);
    // Dropping the connection closes it: at the end of its lifetime, or when a newer one
    // needed its slot.
    tokio::select! {
        _ = connection => {}
        _ = closed => {}
        _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
    }
}

/// The answer to one request: computed at once from in-memory state.
fn respond(request: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" => {
            let openmetrics = request
                .headers()
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            let (content_type, body) = if openmetrics {
                (
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics.encode(true),
                )
            } else {
                (
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    metrics.encode(false),
                )
            };
            (StatusCode::OK, content_type, body)
        }
        "/leader" => {
            let status = if metrics.serving() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (status, "application/json", metrics::leader_json(metrics))
        }
        "/healthz" => {
            let healthy = metrics.healthy();
            let status = if healthy {
                StatusCode::OK
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            (
                status,
                "application/json",
                metrics::health_json(metrics, healthy),
            )
        }
        _ => return plain(StatusCode::NOT_FOUND, "try /metrics, /leader or /healthz\n"),
    };
    let body = if request.method() == Method::HEAD {
        String::new()
    } else {
        body
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
        .headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            Address::parse("127.0.0.1:9464").unwrap(),
            Address::Tcp("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(
            Address::parse("[::1]:9464").unwrap(),
            Address::Tcp("[::1]:9464".parse().unwrap())
        );
        assert_eq!(
            Address::parse("/run/x.sock").unwrap(),
            Address::Unix("/run/x.sock".into())
        );
        for bad in [":9464", "localhost:9464", "9464", "", "127.0.0.1"] {
            let e = Address::parse(bad).unwrap_err();
            assert!(e.message.contains("--http"), "{bad}: {}", e.message);
        }
        assert!(Address::parse(&format!("/{}", "x".repeat(200))).is_err());
    }

    #[test]
    fn a_full_house_closes_the_longest_waiting_connection_of_the_busiest_peer() {
        let a: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let b: Option<IpAddr> = Some("10.0.0.2".parse().unwrap());
        let mut open = Open::default();
        let mut closed = Vec::new();
        // b holds one slot, a all the others; a's first is the longest waiting overall but b's
        // is older than every other of a's.
        let (a0, rx) = open.admit(a);
        closed.push(rx);
        let (b0, rx) = open.admit(b);
        closed.push(rx);
        for _ in 2..MAX_CONNECTIONS {
            std::thread::sleep(Duration::from_millis(1));
            closed.push(open.admit(a).1);
        }
        open.requested(a0);
        // Now a0 asked last; of a's, the second (id 2) waited longest.
        let (newest, _rx) = open.admit(a);
        assert_eq!(open.connections.len(), MAX_CONNECTIONS);
        assert!(
            open.connections.contains_key(&b0),
            "b's only connection stays"
        );
        assert!(open.connections.contains_key(&a0));
        assert!(!open.connections.contains_key(&2));
        assert!(open.connections.contains_key(&newest));
        // Closed: the receiver reports the sender gone, not merely empty.
        assert_eq!(
            closed[2].try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(
            closed[1].try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
    }
}
