//! Which authentication a server may ask for, and the stream that holds tokio-postgres to it.
//!
//! tokio-postgres answers whatever a server asks for: the password in clear text
//! (AuthenticationCleartextPassword, `R` code 3), its MD5 hash (code 5, crackable by whoever gets
//! it), or SCRAM (code 10, which proves the password without revealing it). Whatever answers at
//! the address — a process that bound the port while the server was down, a host in the path
//! when the certificate is not checked — can ask. So each session's stream is wrapped, above TLS,
//! in a [`Guard`] that reads the backend messages before tokio-postgres does, up to
//! AuthenticationOk, and fails the read that brings a request for a method not allowed: the
//! request never reaches tokio-postgres, and the password is never written.
//!
//! Allowed unless the URL says otherwise: SCRAM, and no authentication at all; the password and
//! md5 only when the server's certificate is verified (`sslmode=verify-ca`/`verify-full`, or
//! `require` with a CA), or when no password was given (nothing to give away: tokio-postgres
//! then says that one is missing). libpq's `require_auth` in the URL lists exactly the methods
//! allowed (`password`, `md5`, `gss`, `sspi`, `scram-sha-256`, `none`; or, each with `!`, those
//! refused), as libpq reads it, whatever the certificate.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::tls::{ChannelBinding, TlsStream};

/// One authentication method, as libpq's `require_auth` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    None,
    Password,
    Md5,
    Gss,
    Sspi,
    Scram,
}

impl Method {
    const ALL: [Method; 6] = [
        Method::None,
        Method::Password,
        Method::Md5,
        Method::Gss,
        Method::Sspi,
        Method::Scram,
    ];

    /// Its name in `require_auth`.
    pub fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::Password => "password",
            Method::Md5 => "md5",
            Method::Gss => "gss",
            Method::Sspi => "sspi",
            Method::Scram => "scram-sha-256",
        }
    }

    /// What a server that asks for it wants, in words.
    pub fn asked(self) -> &'static str {
        match self {
            Method::None => "no authentication",
            Method::Password => "the password in clear text (password authentication)",
            Method::Md5 => "an MD5 hash of the password (md5 authentication), which can be cracked",
            Method::Gss => "GSSAPI authentication",
            Method::Sspi => "SSPI authentication",
            Method::Scram => "SCRAM authentication (scram-sha-256)",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The methods a server may ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    bits: u8,
    /// `require_auth` as the URL gave it; `None`: the default.
    pub given: Option<String>,
}

impl Allowed {
    /// The default: SCRAM and none; the password and md5 too where the certificate is
    /// verified, or where there is no password to give away.
    pub fn default_for(verified: bool, password: bool) -> Allowed {
        let bits = if verified || !password {
            Method::ALL.iter().fold(0, |bits, m| bits | m.bit())
        } else {
            Method::None.bit() | Method::Scram.bit()
        };
        Allowed { bits, given: None }
    }

    /// libpq's `require_auth`: methods separated by commas, all of them allowed, or all of them
    /// prefixed with `!` and refused (every other one allowed).
    pub fn parse(value: &str) -> Result<Allowed, String> {
        let items: Vec<&str> = value.split(',').collect();
        let negated = items.iter().filter(|item| item.starts_with('!')).count();
        if negated != 0 && negated != items.len() {
            return Err(format!(
                "require_auth={value}: methods must all be allowed or all refused (with !), not a mix"
            ));
        }
        let mut listed = 0;
        for item in &items {
            let name = item.trim_start_matches('!');
            let method = Method::ALL
                .into_iter()
                .find(|m| m.name() == name)
                .ok_or_else(|| {
                    format!(
                        "require_auth={value}: {} is not one of password, md5, gss, sspi, scram-sha-256, none",
                        name.escape_debug()
                    )
                })?;
            listed |= method.bit();
        }
        let all = Method::ALL.iter().fold(0, |bits, m| bits | m.bit());
        let bits = if negated == 0 { listed } else { all & !listed };
        Ok(Allowed {
            bits,
            given: Some(value.to_owned()),
        })
    }

    pub fn allows(&self, method: Method) -> bool {
        self.bits & method.bit() != 0
    }
}

/// The refusal a [`Guard`] fails its read with: the server asked for `method`, which is not
/// allowed. Found again in the connect error by [`refusal_in`].
#[derive(Debug)]
pub struct Refused {
    pub method: Method,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server asks for {}: not allowed",
            self.method.asked()
        )
    }
}

impl std::error::Error for Refused {}

/// The refusal among `error`'s causes, if a [`Guard`] refused.
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<Method> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused.method);
        }
        if let Some(refused) = e
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<Refused>())
        {
            return Some(refused.method);
        }
        current = e.source();
    }
    None
}

/// Where a [`Guard`] is in the backend's messages.
#[derive(Clone, Copy, Debug)]
enum State {
    /// The next byte answers the SSLRequest: `S` (TLS follows; the guard above it watches),
    /// anything else (the messages follow on this stream).
    Answer,
    /// Reading messages: `head` holds the first `have` bytes of the current one (its type, its
    /// length and, for an `R`, its code); `skip` bytes of its body are still to pass.
    Watching {
        head: [u8; 9],
        have: usize,
        skip: u32,
    },
    /// Past AuthenticationOk, or TLS below: every byte passes.
    Through,
    /// A request for a method not allowed came: every read and write fails.
    Refused(Method),
}

/// A stream whose reads are checked, up to AuthenticationOk, for a request of a method that
/// `allowed` does not allow (see the module's text). Writes pass unchanged.
pub struct Guard<S> {
    inner: S,
    allowed: Allowed,
    state: State,
    /// No authentication request has come yet (AuthenticationOk first is `none`).
    first: bool,
}

impl<S> Guard<S> {
    /// A guard on the session's own socket: `answer` when an SSLRequest goes first (the server's
    /// one-byte answer comes before any message).
    pub fn new(inner: S, allowed: Allowed, answer: bool) -> Guard<S> {
        let state = if answer { State::Answer } else { WATCHING };
        Guard {
            inner,
            allowed,
            state,
            first: true,
        }
    }

    /// TLS runs over this stream: the guard above TLS watches (this one would see ciphertext).
    pub fn pass_through(&mut self) {
        if !matches!(self.state, State::Refused(_)) {
            self.state = State::Through;
        }
    }

    /// Follows `bytes`, just read; the method of a request not allowed, if one came.
    fn watch(&mut self, bytes: &[u8]) -> Result<(), Method> {
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.state {
                State::Through | State::Refused(_) => return Ok(()),
                State::Answer => {
                    self.state = if bytes[i] == b'S' {
                        State::Through
                    } else {
                        WATCHING
                    };
                    i += 1;
                }
                State::Watching { skip, .. } if *skip > 0 => {
                    let n = (*skip as usize).min(bytes.len() - i);
                    *skip -= n as u32;
                    i += n;
                }
                State::Watching { head, have, skip } => {
                    head[*have] = bytes[i];
                    *have += 1;
                    i += 1;
                    let wanted = if head[0] == b'R' { 9 } else { 5 };
                    if *have < wanted {
                        continue;
                    }
                    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
                    *have = 0;
                    *skip = len.saturating_sub(wanted as u32 - 1);
                    if head[0] != b'R' {
                        continue;
                    }
                    let code = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                    let method = match code {
                        0 if self.first => Method::None,
                        0 => {
                            self.state = State::Through;
                            continue;
                        }
                        3 => Method::Password,
                        5 => Method::Md5,
                        7 => Method::Gss,
                        9 => Method::Sspi,
                        10 => Method::Scram,
                        // The steps of an exchange begun (SASL, GSS), or what tokio-postgres
                        // refuses itself.
                        _ => continue,
                    };
                    self.first = false;
                    if !self.allowed.allows(method) {
                        return Err(method);
                    }
                    if code == 0 {
                        self.state = State::Through;
                    }
                }
            }
        }
        Ok(())
    }
}

const WATCHING: State = State::Watching {
    head: [0; 9],
    have: 0,
    skip: 0,
};

fn refused(method: Method) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, Refused { method })
}

impl<S: AsyncRead + Unpin> AsyncRead for Guard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Refused(method) = this.state {
            return Poll::Ready(Err(refused(method)));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let Err(method) = this.watch(&buf.filled()[start..]) {
            // Not handed on: tokio-postgres never sees the request.
            buf.set_filled(start);
            this.state = State::Refused(method);
            return Poll::Ready(Err(refused(method)));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let State::Refused(method) = this.state {
            return Poll::Ready(Err(refused(method)));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Guard<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A session's own socket: TCP, or a Unix socket.
pub enum Plain {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Plain {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Plain::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Plain::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Plain {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Plain::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Plain::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Plain::Tcp(s) => Pin::new(s).poll_flush(cx),
            Plain::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Plain::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Plain::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `R` message with `code` (and `extra` bytes of body).
    fn auth(code: u32, extra: usize) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend((8 + extra as u32).to_be_bytes());
        m.extend(code.to_be_bytes());
        m.extend(std::iter::repeat_n(0xAA, extra));
        m
    }

    fn other(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend((4 + body.len() as u32).to_be_bytes());
        m.extend(body);
        m
    }

    /// Feeds `bytes` to a guard in pieces of `piece` bytes: the first refusal.
    fn fed(allowed: &Allowed, answer: bool, bytes: &[u8], piece: usize) -> Result<(), Method> {
        let mut guard = Guard::new((), allowed.clone(), answer);
        bytes.chunks(piece).try_for_each(|c| guard.watch(c))
    }

    #[test]
    fn a_request_for_the_password_is_caught_however_the_bytes_arrive() {
        let plain = Allowed::default_for(false, true);
        // A notice before it, the request, and what tokio-postgres would read after it.
        let mut bytes = other(b'N', b"SNOTICE\0\0");
        bytes.extend(auth(3, 0));
        for piece in [1, 2, 5, 9, 1000] {
            assert_eq!(
                fed(&plain, false, &bytes, piece),
                Err(Method::Password),
                "{piece}"
            );
            // After the answer to an SSLRequest ('N': no TLS).
            let answered = [&b"N"[..], &bytes].concat();
            assert_eq!(fed(&plain, true, &answered, piece), Err(Method::Password));
        }
        let md5 = auth(5, 4);
        assert_eq!(fed(&plain, false, &md5, 3), Err(Method::Md5));
        // TLS below: this guard sees ciphertext and lets it pass (the one above TLS watches).
        let tls = [&b"S"[..], &auth(3, 0)].concat();
        assert_eq!(fed(&plain, true, &tls, 1), Ok(()));
    }

    #[test]
    fn scram_and_trust_pass_and_nothing_is_looked_at_after_authentication_ok() {
        let plain = Allowed::default_for(false, true);
        let mut scram = auth(10, 14);
        scram.extend(auth(11, 30));
        scram.extend(auth(12, 20));
        scram.extend(auth(0, 0));
        // After AuthenticationOk anything passes, even bytes that look like a request.
        scram.extend(other(b'S', b"server_version\x0015\0"));
        scram.extend(auth(3, 0));
        assert_eq!(fed(&plain, false, &scram, 7), Ok(()));
        assert_eq!(fed(&plain, false, &auth(0, 0), 1), Ok(()));
        // Verified, or no password to give away: everything.
        for allowed in [
            Allowed::default_for(true, true),
            Allowed::default_for(false, false),
        ] {
            assert_eq!(fed(&allowed, false, &auth(3, 0), 4), Ok(()));
            assert_eq!(fed(&allowed, false, &auth(5, 4), 4), Ok(()));
        }
    }

    #[test]
    fn require_auth_is_read_as_libpq_reads_it() {
        let only = Allowed::parse("scram-sha-256").unwrap();
        assert!(only.allows(Method::Scram) && !only.allows(Method::None));
        assert_eq!(fed(&only, false, &auth(0, 0), 3), Err(Method::None));
        assert_eq!(fed(&only, false, &auth(3, 0), 3), Err(Method::Password));
        let password = Allowed::parse("password,md5").unwrap();
        assert_eq!(fed(&password, false, &auth(3, 0), 3), Ok(()));
        assert_eq!(fed(&password, false, &auth(10, 14), 3), Err(Method::Scram));
        let not_password = Allowed::parse("!password").unwrap();
        assert!(not_password.allows(Method::Md5) && not_password.allows(Method::None));
        assert!(!not_password.allows(Method::Password));
        for bad in ["password,!md5", "kerberos", "", "md5,,none"] {
            assert!(Allowed::parse(bad).is_err(), "{bad}");
        }
    }
}
