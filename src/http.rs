//! `--http ADDR`: GET /metrics, /leader and /healthz, served by hyper on the runtime that runs
//! the state machine.
//!
//! It shares that one thread with the renewal loop and the step-down, so it is built never to
//! hold them up: every answer is computed from in-memory state without awaiting anything (a few
//! microseconds of encoding), at most [`MAX_CONNECTIONS`] connections are served at once (more
//! are closed at once), a request's head must arrive within [`HEADER_TIMEOUT`], a connection
//! lives at most [`CONNECTION_LIFETIME`], request heads are capped at 8 KiB and bodies are never
//! read. The tasks only run while the state machine waits, and the timers that end leadership
//! are served by the same scheduler, between any two of them.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use crate::exit::Failure;
use crate::metrics::{self, Metrics};

/// Connections served at once; further ones are closed as soon as they are accepted.
pub const MAX_CONNECTIONS: usize = 16;
/// A request's head must arrive within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
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
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors, say: try again a little later.
                tracing::debug!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over the limit: closed at once (dropped), never queued.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        tokio::spawn(async move {
            let _slot = slot;
            match stream {
                Stream::Tcp(s) => serve_connection(TokioIo::new(s), metrics).await,
                Stream::Unix(s) => serve_connection(TokioIo::new(s), metrics).await,
            }
        });
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn serve_connection<I>(io: I, metrics: &'static Metrics)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| async move {
        Ok::<_, Infallible>(respond(&request, metrics))
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(8192)
        .serve_connection(io, service);
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
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
}
