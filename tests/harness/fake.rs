//! A fake server, for tests of what leader-exec sends to whatever answers at an address: a
//! listener on a free loopback port whose connections a handler serves one at a time, keeping
//! what each one brought.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::wait_for;

pub struct FakeServer<T> {
    pub port: u16,
    outcomes: Arc<Mutex<Vec<T>>>,
    accepted: Arc<AtomicUsize>,
    /// How many outcomes earlier calls of [`FakeServer::outcomes`] returned.
    seen: AtomicUsize,
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> FakeServer<T> {
    /// Serves each connection with `handler` (its socket reads time out after 5 s).
    pub fn start(mut handler: impl FnMut(TcpStream) -> T + Send + 'static) -> FakeServer<T> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let fake = FakeServer {
            port: listener.local_addr().unwrap().port(),
            outcomes: Arc::default(),
            accepted: Arc::default(),
            seen: AtomicUsize::new(0),
            stop: Arc::default(),
        };
        let (outcomes, accepted, stop) = (
            fake.outcomes.clone(),
            fake.accepted.clone(),
            fake.stop.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        stream.set_nonblocking(false).unwrap();
                        stream
                            .set_read_timeout(Some(Duration::from_secs(5)))
                            .unwrap();
                        let outcome = handler(stream);
                        outcomes.lock().unwrap().push(outcome);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        fake
    }

    /// What the connections accepted since the last call brought, once each has ended.
    pub fn outcomes(&self) -> Vec<T> {
        let done = wait_for(Duration::from_secs(10), || {
            self.seen.load(Ordering::SeqCst) + self.outcomes.lock().unwrap().len()
                == self.accepted.load(Ordering::SeqCst)
        });
        assert!(done, "a connection to the fake server did not end");
        let new = std::mem::take(&mut *self.outcomes.lock().unwrap());
        self.seen.fetch_add(new.len(), Ordering::SeqCst);
        new
    }
}

impl<T> Drop for FakeServer<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `leader-exec --endpoints URL --lease pw --no-wait -- true` once, with the [`FAST`](super::FAST)
/// timing, `password` in `LEADER_EXEC_PASSWORD` and no `PGPASSWORD`: (exit code, stderr). The
/// password never shows on stderr.
pub fn run_with_password(url: &str, password: &str) -> (i32, String) {
    let (code, _, stderr) = super::Cmd::bare()
        .args([
            "--endpoints",
            url,
            "--lease",
            "pw",
            "--connect-timeout",
            "5s",
        ])
        .args(super::FAST)
        .args(["--no-wait", "--", "true"])
        .env("LEADER_EXEC_PASSWORD", password)
        .env_remove("PGPASSWORD")
        .run();
    assert!(!stderr.contains(password), "{stderr}");
    (code, stderr)
}

/// What a refusal to send the password prints, for the URL's `query`: exit 125, the one warning
/// about an unverified certificate first, then one error line, which this returns.
pub fn refusal_line<'a>(code: i32, stderr: &'a str, query: &str) -> &'a str {
    assert_eq!(code, 125, "{query}: {stderr}");
    let (warnings, errors): (Vec<&str>, Vec<&str>) =
        stderr.lines().partition(|l| l.contains(" WARN "));
    assert_eq!(warnings.len(), 1, "{query}: {stderr}");
    assert!(
        warnings[0].contains("without a verified certificate"),
        "{stderr}"
    );
    assert_eq!(errors.len(), 1, "{query}: {stderr}");
    errors[0]
}
