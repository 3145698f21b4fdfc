//! What a PostgreSQL server may ask for, against a fake server that asks for the password in
//! clear text (AuthenticationCleartextPassword) or its MD5 hash (AuthenticationMD5Password):
//! whatever answers at a `postgres://` address (a process that bound the port while the server
//! was down) gets neither unless its certificate was verified (`sslmode=verify-ca`,
//! `verify-full`) or the URL allows it (`require_auth`, libpq's); SCRAM goes ahead without TLS.
//! The warning about a password without a verified certificate comes before the login.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use crate::harness::*;

const PASSWORD: &str = "squatted-pg-47";

/// What the fake server asks for after the startup message.
#[derive(Clone, Copy)]
enum Ask {
    /// AuthenticationCleartextPassword (`R`, code 3).
    Cleartext,
    /// AuthenticationMD5Password (`R`, code 5, a salt).
    Md5,
}

/// One connection the fake server took.
#[derive(Debug, Default)]
struct Login {
    /// The startup message came.
    started: bool,
    tls: bool,
    /// Whatever the client sent after the server asked for the password.
    after_ask: Vec<u8>,
}

fn fake_postgres(ask: Ask, tls: Option<&Scratch>) -> FakeServer<Login> {
    let tls = tls.map(tls_server_config);
    FakeServer::start(move |stream| serve(stream, ask, tls.clone()))
}

/// One message the client sends at the start (no type byte): its body after the length.
fn read_start(stream: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0; 4];
    stream.read_exact(&mut len).ok()?;
    let mut body = vec![0; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

/// An SSLRequest's body: the code 80877103.
const SSL_REQUEST: [u8; 4] = [0x04, 0xd2, 0x16, 0x2f];

fn serve(mut tcp: TcpStream, ask: Ask, tls: Option<Arc<rustls::ServerConfig>>) -> Login {
    let Some(first) = read_start(&mut tcp) else {
        return Login::default();
    };
    if first != SSL_REQUEST {
        return login(&mut tcp, ask, false);
    }
    match tls {
        Some(config) => {
            let _ = tcp.write_all(b"S");
            let conn = rustls::ServerConnection::new(config).unwrap();
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            match read_start(&mut stream) {
                Some(_) => login(&mut stream, ask, true),
                None => Login::default(),
            }
        }
        None => {
            let _ = tcp.write_all(b"N");
            match read_start(&mut tcp) {
                Some(_) => login(&mut tcp, ask, false),
                None => Login::default(),
            }
        }
    }
}

/// The startup message came: ask for the password, keep what comes, refuse.
fn login<S: Read + Write>(s: &mut S, ask: Ask, tls: bool) -> Login {
    let request: &[u8] = match ask {
        Ask::Cleartext => &[b'R', 0, 0, 0, 8, 0, 0, 0, 3],
        Ask::Md5 => &[b'R', 0, 0, 0, 12, 0, 0, 0, 5, 0x11, 0x22, 0x33, 0x44],
    };
    let _ = s.write_all(request).and_then(|()| s.flush());
    let mut after_ask = Vec::new();
    let mut buf = [0; 512];
    // A password message is one write; what came by the first read that finds the client gone
    // (or quiet for 5 s) is all.
    while let Ok(n @ 1..) = s.read(&mut buf) {
        after_ask.extend(&buf[..n]);
        if after_ask.len() >= 5 {
            let mut error =
                b"E\0\0\0\0SFATAL\0C28P01\0Mpassword authentication failed\0\0".to_vec();
            let len = (error.len() as u32 - 1).to_be_bytes();
            error[1..5].copy_from_slice(&len);
            let _ = s.write_all(&error).and_then(|()| s.flush());
            break;
        }
    }
    Login {
        started: true,
        tls,
        after_ask,
    }
}

/// leader-exec against the fake server with `query` in the URL and the password in
/// `LEADER_EXEC_PASSWORD`: (exit code, stderr).
fn run(port: u16, query: &str) -> (i32, String) {
    run_with_password(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres{query}"),
        PASSWORD,
    )
}

/// The refusal: the fake got nothing after its request; 125, the warning first, then one line
/// naming what it asked for and the fix.
fn assert_refused(fake: &FakeServer<Login>, query: &str, tls: bool, method: &str) {
    let (code, stderr) = run(fake.port, query);
    let logins = fake.outcomes();
    let started: Vec<&Login> = logins.iter().filter(|l| l.started).collect();
    assert_eq!(started.len(), 1, "{query}: {logins:?}");
    assert_eq!(started[0].tls, tls, "{query}: {logins:?}");
    assert!(
        started[0].after_ask.is_empty(),
        "{query}: the fake server got {:?} after asking for the password",
        String::from_utf8_lossy(&started[0].after_ask)
    );
    let error = refusal_line(code, &stderr, query);
    assert!(
        error.contains("not sent")
            && error.contains("sslmode=verify-full")
            && error.contains(&format!("require_auth={method}")),
        "{query}: {stderr}"
    );
}

/// What the client sent after the request, with the URL's `query`; the session was `tls`.
fn sent(fake: &FakeServer<Login>, query: &str, tls: bool) -> String {
    let (code, stderr) = run(fake.port, query);
    assert_eq!(code, 125, "{query}: {stderr}");
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    let logins = fake.outcomes();
    let login = logins.iter().find(|l| l.started).expect("a login");
    assert_eq!(login.tls, tls, "{query}: {logins:?}");
    String::from_utf8_lossy(&login.after_ask).into_owned()
}

#[test]
fn a_server_without_tls_gets_no_cleartext_or_md5_password_unless_require_auth_allows_it() {
    for (ask, method) in [(Ask::Cleartext, "password"), (Ask::Md5, "md5")] {
        let fake = fake_postgres(ask, None);
        // prefer (the default: the fake answers N), and disable.
        for query in ["", "?sslmode=disable"] {
            assert_refused(&fake, query, false, method);
        }
        // libpq's require_auth lets it go.
        let got = sent(&fake, &format!("?require_auth={method}"), false);
        match ask {
            Ask::Cleartext => assert!(got.contains(PASSWORD), "{got:?}"),
            Ask::Md5 => assert!(got.starts_with("p") && got.contains("md5"), "{got:?}"),
        }
    }
}

#[test]
fn over_tls_the_password_goes_only_to_a_verified_certificate() {
    let scratch = Scratch::new();
    make_certificates(&scratch);
    let fake = fake_postgres(Ask::Cleartext, Some(&scratch));
    for query in ["", "?sslmode=require"] {
        assert_refused(&fake, query, true, "password");
    }
    let ca = scratch.path("ca.crt");
    for mode in ["verify-ca", "verify-full"] {
        let query = format!("?sslmode={mode}&sslrootcert={}", ca.display());
        assert!(sent(&fake, &query, true).contains(PASSWORD), "{mode}");
    }
    // require_auth without the method refuses even a verified server, as libpq does.
    let query = format!(
        "?sslmode=verify-full&sslrootcert={}&require_auth=scram-sha-256",
        ca.display()
    );
    let (code, stderr) = run(fake.port, &query);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("require_auth=scram-sha-256 does not allow"),
        "{stderr}"
    );
    assert!(fake.outcomes().iter().all(|l| l.after_ask.is_empty()));
}

/// SCRAM proves the password without revealing it: a real server asking for scram-sha-256
/// lets leader-exec in without TLS (with the warning, before the login).
#[test]
fn scram_goes_ahead_without_tls() {
    let pg = crate::hints::password_protected();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
    let (code, stdout, stderr) = Cmd::bare()
        .args(["--endpoints", &url, "--lease", "scram"])
        .args(FAST)
        .args(["--no-wait", "--", "echo", "ran"])
        .env("LEADER_EXEC_PASSWORD", "pw-right-9")
        .run();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "ran\n");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("without a verified certificate"),
        "{stderr}"
    );
    // require_auth that leaves SCRAM out refuses it.
    let url = format!("{url}?require_auth=password");
    let (code, _, stderr) = Cmd::bare()
        .args(["--endpoints", &url, "--lease", "scram"])
        .args(FAST)
        .args(["--no-wait", "--", "echo", "ran"])
        .env("LEADER_EXEC_PASSWORD", "pw-right-9")
        .run();
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("SCRAM") && stderr.contains("require_auth=password"),
        "{stderr}"
    );
}

/// The sessions' own connect (each host in turn, each address of a name) reaches a server over
/// its Unix socket and by a name with an address it does not listen on (`localhost`: `::1`
/// refuses, `127.0.0.1` answers).
#[test]
fn a_unix_socket_and_a_host_name_still_connect() {
    let pg = Postgres::start();
    let dir = pg.data_dir().display().to_string().replace('/', "%2F");
    for host in [dir.as_str(), "localhost"] {
        let url = format!("postgres://postgres@{host}:{}/postgres", pg.port);
        let (code, stdout, stderr) = Cmd::bare()
            .args(["--endpoints", &url, "--lease", "socket"])
            .args(FAST)
            .args(["--no-wait", "--", "echo", "ran"])
            .run();
        assert_eq!((code, stdout.as_str()), (0, "ran\n"), "{host}: {stderr}");
    }
}
