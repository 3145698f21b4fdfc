//! The password's way to a MySQL server, against a fake server that asks for it: whatever
//! answers at a `mysql://` address (a process that bound the port while the server was down)
//! gets the password itself only when its certificate was verified (`VERIFY_CA`,
//! `VERIFY_IDENTITY`) or the URL allows it (`allow-unverified-password=true`, loopback hosts),
//! and the warning about a password without a verified certificate comes before the login.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use crate::harness::*;

const PASSWORD: &str = "squatted-pw-31";

/// What the fake server asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plugin {
    /// `caching_sha2_password`, then "full authentication" (AuthMoreData `0x01 0x04`): the
    /// password itself, in the clear over TLS, else encrypted to the key the server sends.
    FullAuth,
    /// `mysql_native_password`, then a refusal (access denied).
    Native,
}

/// One connection the fake server took.
#[derive(Debug, Default)]
struct Login {
    /// The client's handshake response (its login attempt) came.
    attempted: bool,
    /// Over TLS.
    tls: bool,
    /// Whatever the client sent after full authentication was asked for: the password, or the
    /// request for the server's key (`0x02`) and the password encrypted to it.
    after_full_auth: Vec<u8>,
}

/// A fake MySQL 8 server on a free loopback port (with `tls`, offering TLS with
/// `make_certificates`' certificate in that directory).
fn fake_mysql(plugin: Plugin, tls: Option<&Scratch>, scratch: &Scratch) -> FakeServer<Login> {
    let tls = tls.map(tls_server_config);
    // A key for the client to encrypt the password to, as caching_sha2_password's server hands
    // one over when asked (0x02) on a connection without TLS.
    let (key, public) = (scratch.path("rsa.pem"), scratch.path("rsa.pub"));
    let openssl = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("openssl").args(args).output();
        assert!(out.unwrap().status.success(), "openssl {args:?}");
    };
    openssl(&[
        "genrsa".as_ref(),
        "-out".as_ref(),
        key.as_os_str(),
        "2048".as_ref(),
    ]);
    openssl(&[
        "rsa".as_ref(),
        "-in".as_ref(),
        key.as_os_str(),
        "-pubout".as_ref(),
        "-out".as_ref(),
        public.as_os_str(),
    ]);
    let public = std::fs::read(public).unwrap();
    FakeServer::start(move |stream| serve(stream, plugin, tls.clone(), &public))
}

fn read_packet(stream: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let mut head = [0; 4];
    stream.read_exact(&mut head).ok()?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut body = vec![0; len];
    stream.read_exact(&mut body).ok()?;
    Some((head[3], body))
}

fn write_packet(stream: &mut impl Write, seq: u8, body: &[u8]) {
    let len = (body.len() as u32).to_le_bytes();
    let mut packet = vec![len[0], len[1], len[2], seq];
    packet.extend(body);
    let _ = stream.write_all(&packet).and_then(|()| stream.flush());
}

/// HandshakeV10 of a MySQL 8.0 server: protocol 41, plugin auth, TLS if `tls`, a 20-byte
/// scramble.
fn handshake(plugin: Plugin, tls: bool) -> Vec<u8> {
    let caps: u32 = 0x0000_0001 // LONG_PASSWORD
        | 0x0000_0002 // FOUND_ROWS
        | 0x0000_0004 // LONG_FLAG
        | 0x0000_0008 // CONNECT_WITH_DB
        | 0x0000_0200 // PROTOCOL_41
        | 0x0000_2000 // TRANSACTIONS
        | 0x0000_8000 // SECURE_CONNECTION
        | 0x0001_0000 // MULTI_STATEMENTS
        | 0x0002_0000 // MULTI_RESULTS
        | 0x0008_0000 // PLUGIN_AUTH
        | 0x0020_0000 // PLUGIN_AUTH_LENENC_CLIENT_DATA
        | if tls { 0x0000_0800 } else { 0 }; // SSL
    let scramble = b"0123456789abcdefghij";
    let mut p = vec![10];
    p.extend(b"8.0.36\0");
    p.extend(7u32.to_le_bytes());
    p.extend(&scramble[..8]);
    p.push(0);
    p.extend(&caps.to_le_bytes()[..2]);
    p.push(0xff);
    p.extend(2u16.to_le_bytes());
    p.extend(&caps.to_le_bytes()[2..]);
    p.push(21);
    p.extend([0; 10]);
    p.extend(&scramble[8..]);
    p.push(0);
    p.extend(match plugin {
        Plugin::FullAuth => &b"caching_sha2_password\0"[..],
        Plugin::Native => &b"mysql_native_password\0"[..],
    });
    p
}

fn access_denied() -> Vec<u8> {
    let mut p = vec![0xff];
    p.extend(1045u16.to_le_bytes());
    p.extend(b"#28000Access denied for user 'jobs'@'localhost' (using password: YES)");
    p
}

fn serve(
    mut tcp: TcpStream,
    plugin: Plugin,
    tls: Option<Arc<rustls::ServerConfig>>,
    key: &[u8],
) -> Login {
    write_packet(&mut tcp, 0, &handshake(plugin, tls.is_some()));
    let Some((seq, first)) = read_packet(&mut tcp) else {
        return Login::default();
    };
    match tls {
        // An SSLRequest: a handshake response cut after its first 32 bytes. TLS from here.
        Some(config) if first.len() == 32 => {
            let conn = rustls::ServerConnection::new(config).unwrap();
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            match read_packet(&mut stream) {
                Some((seq, _)) => login(&mut stream, seq, plugin, key, true),
                None => Login::default(),
            }
        }
        _ => login(&mut tcp, seq, plugin, key, false),
    }
}

/// The handshake response (seq `seq`) came: ask for the password.
fn login<S: Read + Write>(s: &mut S, seq: u8, plugin: Plugin, key: &[u8], tls: bool) -> Login {
    let mut login = Login {
        attempted: true,
        tls,
        ..Login::default()
    };
    if plugin == Plugin::Native {
        write_packet(s, seq + 1, &access_denied());
        return login;
    }
    write_packet(s, seq + 1, &[0x01, 0x04]);
    let Some((mut seq, body)) = read_packet(s) else {
        return login;
    };
    login.after_full_auth.extend(&body);
    if body == [0x02] {
        // The client asks for the key to encrypt the password to: this server's own.
        let mut packet = vec![0x01];
        packet.extend(key);
        write_packet(s, seq + 1, &packet);
        if let Some((next, body)) = read_packet(s) {
            login.after_full_auth.extend(&body);
            seq = next;
        }
    }
    write_packet(s, seq + 1, &access_denied());
    login
}

/// leader-exec against the fake server with `query` in the URL and the password in
/// `LEADER_EXEC_PASSWORD`: (exit code, stderr).
fn run(port: u16, query: &str) -> (i32, String) {
    run_with_password(
        &format!("mysql://jobs@127.0.0.1:{port}/ops{query}"),
        PASSWORD,
    )
}

/// The one warning about the password, and the lines that are not warnings.
fn warning_and_errors(stderr: &str) -> (Vec<&str>, Vec<&str>) {
    stderr.lines().partition(|l| l.contains(" WARN "))
}

/// The refusal of full authentication: 125, the warning first, then one line naming the fix,
/// and the fake never got a byte after asking for the password.
fn assert_refused(fake: &FakeServer<Login>, query: &str, tls: bool) {
    let (code, stderr) = run(fake.port, query);
    let logins = fake.outcomes();
    let tried: Vec<&Login> = logins.iter().filter(|l| l.attempted).collect();
    assert_eq!(tried.len(), 1, "{query}: {logins:?}");
    assert_eq!(tried[0].tls, tls, "{query}: {logins:?}");
    assert!(
        tried[0].after_full_auth.is_empty(),
        "{query}: the fake server got {} bytes after asking for the password: {:?}",
        tried[0].after_full_auth.len(),
        String::from_utf8_lossy(&tried[0].after_full_auth)
    );
    let error = refusal_line(code, &stderr, query);
    assert!(
        error.contains("ssl-mode=VERIFY_CA") && error.contains("not sent"),
        "{query}: {stderr}"
    );
}

#[test]
fn full_authentication_without_tls_gets_no_password_unless_the_url_allows_it() {
    let scratch = Scratch::new();
    let fake = fake_mysql(Plugin::FullAuth, None, &scratch);
    // PREFERRED (the default) goes on without TLS; DISABLED never tries it.
    for query in ["", "?ssl-mode=DISABLED"] {
        assert_refused(&fake, query, false);
    }
    // Allowed: the client asks for the server's key and sends the password encrypted to it.
    let (code, stderr) = run(fake.port, "?allow-unverified-password=true");
    assert_eq!(code, 125, "{stderr}");
    assert!(stderr.contains("Access denied"), "{stderr}");
    let logins = fake.outcomes();
    let sent = &logins.last().unwrap().after_full_auth;
    assert!(sent.starts_with(&[0x02]) && sent.len() > 200, "{logins:?}");
}

#[test]
fn full_authentication_over_tls_gets_the_password_only_with_a_verified_certificate() {
    let scratch = Scratch::new();
    make_certificates(&scratch);
    let fake = fake_mysql(Plugin::FullAuth, Some(&scratch), &scratch);
    // TLS with a certificate nobody checked.
    for query in ["", "?ssl-mode=REQUIRED"] {
        assert_refused(&fake, query, true);
    }
    let ca = scratch.path("ca.crt");
    let sent = |query: &str| {
        let (code, stderr) = run(fake.port, query);
        assert_eq!(code, 125, "{query}: {stderr}");
        assert!(stderr.contains("Access denied"), "{query}: {stderr}");
        let logins = fake.outcomes();
        let login = logins.last().unwrap();
        assert!(login.tls, "{query}: {logins:?}");
        String::from_utf8_lossy(&login.after_full_auth).into_owned()
    };
    // The certificate checked against its CA: the password goes, in the clear inside TLS.
    let query = format!("?ssl-mode=VERIFY_CA&ssl-ca={}", ca.display());
    assert_eq!(sent(&query), format!("{PASSWORD}\0"));
    // Or the URL allows it.
    assert_eq!(
        sent("?ssl-mode=REQUIRED&allow-unverified-password=true"),
        format!("{PASSWORD}\0")
    );
}

/// mysql_native_password sends only a challenge-response hash, so the login goes ahead without
/// a verified certificate, but the warning comes before it: a server that refuses the login
/// still leaves it said.
#[test]
fn the_warning_about_an_unverified_server_comes_before_the_login() {
    let scratch = Scratch::new();
    let fake = fake_mysql(Plugin::Native, None, &scratch);
    let (code, stderr) = run(fake.port, "");
    assert_eq!(code, 125, "{stderr}");
    let (warnings, errors) = warning_and_errors(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("without a verified certificate") && warnings[0].contains("VERIFY_CA"),
        "{stderr}"
    );
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("Access denied"), "{stderr}");
    assert!(fake.outcomes().iter().any(|l| l.attempted));
}
