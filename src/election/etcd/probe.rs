//! What answers at an etcd endpoint that did not answer as etcd. Without this, an endpoint that
//! is not the store meant (`https://` to a plain etcd, an HTTP/1 server, a PostgreSQL port
//! without a scheme) looks like an etcd that is slow to answer: the first contact waits out
//! `--connect-timeout` and says only that it did not answer.
//!
//! One look, made once a first request failed: etcd speaks gRPC over HTTP/2, and an HTTP/2
//! server answers a client's connection preface with its SETTINGS frame. Anything else that
//! answers is named and ends the first contact at once; silence, a refusal or a server that
//! answers as etcd does decide nothing (the first contact goes on as before).

use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::MismatchProbe;

/// How long each connection and each answer may take.
const LOOK: Duration = Duration::from_secs(1);

/// An HTTP/2 client's connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// PostgreSQL's SSLRequest: a PostgreSQL server answers it with one byte, `S` or `N`.
const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// etcd's look at its endpoints ([`not_etcd`]), reached over TLS or not.
pub struct Http2Look {
    /// Whether the endpoints are `https://`.
    pub tls: bool,
}

impl MismatchProbe for Http2Look {
    fn look<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>> {
        Box::pin(not_etcd(host, port, self.tls))
    }
}

/// What answered at `host:port` if it is plainly not what this endpoint expects (`tls`: an
/// `https://` endpoint), worded for the end of a message; `None` when the look decides nothing.
pub async fn not_etcd(host: &str, port: u16, tls: bool) -> Option<String> {
    let answer = ask(host, port, PREFACE).await?;
    let http2 = answer.len() >= 9 && answer[3] == 0x04 && answer[5..9] == [0, 0, 0, 0];
    if answer.is_empty() {
        // Closed without a word, as PostgreSQL does on a preface it cannot read (and a TLS
        // server may).
        let postgres = ask(host, port, SSL_REQUEST).await?;
        return matches!(postgres.as_slice(), b"S" | b"N").then(|| {
            format!("PostgreSQL answers at {host}:{port}, not etcd: give a postgres://USER@{host}:{port}/DATABASE URL")
        });
    }
    if tls {
        // A TLS server answers a plain preface with an alert, or not at all: only an answer
        // in the clear decides.
        return http2.then(|| {
            format!("{host}:{port} answers without TLS (a plain etcd?): use http://{host}:{port}")
        });
    }
    if http2 {
        return None;
    }
    // A TLS alert, or the words a Go TLS server answers plain HTTP with.
    let https = String::from_utf8_lossy(&answer).contains("HTTPS server");
    if https || answer.len() >= 3 && answer[0] == 0x15 && answer[1] == 0x03 {
        return Some(format!(
            "{host}:{port} answers with TLS: use https://{host}:{port}"
        ));
    }
    let first_line = answer.split(|&b| b == b'\n').next().unwrap_or_default();
    Some(format!(
        "{host}:{port} answered, but not as etcd does (gRPC over HTTP/2): \"{}\"",
        crate::escape::escape(first_line.strip_suffix(b"\r").unwrap_or(first_line))
    ))
}

/// Sends `request` on a new connection and returns the first bytes of the answer (empty: closed
/// without one); `None` when nothing was learnt (no connection, an error, no answer in time).
async fn ask(host: &str, port: u16, request: &[u8]) -> Option<Vec<u8>> {
    let mut stream = tokio::time::timeout(LOOK, TcpStream::connect((host, port)))
        .await
        .ok()?
        .ok()?;
    stream.write_all(request).await.ok()?;
    let mut buffer = [0u8; 64];
    let n = tokio::time::timeout(LOOK, stream.read(&mut buffer))
        .await
        .ok()?
        .ok()?;
    Some(buffer[..n].to_vec())
}
