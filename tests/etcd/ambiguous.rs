//! Calls whose answers never come. A write whose answer is lost may have committed: leader-exec
//! must never undo it. A read that hangs after election must not keep a stop signal waiting. A
//! proxy that understands just enough HTTP/2 lets one gRPC call reach etcd and drops that call's
//! answer (then, if asked, resets the connection, so that leader-exec sees an error for a write
//! that etcd did commit).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;

/// A TCP proxy for one gRPC client. Once armed with a needle, it finds the first call whose
/// request carries those bytes (gRPC sends protobuf uncompressed, so a key appears as it is),
/// lets it through to the server, drops every frame of its answer, and, if asked, resets the
/// connection when the answer is complete.
struct AnswerDropper {
    port: u16,
    state: Arc<DropperState>,
}

#[derive(Default)]
struct DropperState {
    /// The bytes that mark the target call's request; None when not armed.
    needle: Mutex<Option<Vec<u8>>>,
    /// Stream ids whose answers are dropped, per connection number.
    targets: Mutex<HashMap<u32, u32>>,
    dropped_frames: AtomicU32,
    /// Whether to reset the connection once the dropped answer is complete.
    reset: AtomicBool,
    reset_done: AtomicBool,
}

impl AnswerDropper {
    fn start(target: SocketAddr) -> AnswerDropper {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(DropperState::default());
        let accept_state = state.clone();
        thread::spawn(move || {
            for (number, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let number = number as u32;
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let state = accept_state.clone();
                thread::spawn(move || requests(c, s, number, state));
                let state = accept_state.clone();
                thread::spawn(move || answers(server, client, number, state));
            }
        });
        AnswerDropper { port, state }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Drops the answer of the next call whose request contains `needle`; with `reset`, then
    /// resets the connection, so that the call fails; without, the call never returns.
    fn arm(&self, needle: &str, reset: bool) {
        self.state.reset.store(reset, Ordering::SeqCst);
        *self.state.needle.lock().unwrap() = Some(needle.as_bytes().to_vec());
    }
}

/// Reads whole HTTP/2 frames out of `buffer`: (type, flags, stream id, frame bytes).
fn frames(buffer: &mut Vec<u8>) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while buffer.len() >= 9 {
        let length = u32::from_be_bytes([0, buffer[0], buffer[1], buffer[2]]) as usize;
        if buffer.len() < 9 + length {
            break;
        }
        let frame: Vec<u8> = buffer.drain(..9 + length).collect();
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        out.push((frame[3], frame[4], stream, frame));
    }
    out
}

/// Client to server: forwarded as is; while armed, the request carrying the needle marks its
/// stream as the target.
fn requests(mut from: TcpStream, mut to: TcpStream, number: u32, state: Arc<DropperState>) {
    let mut buffer = Vec::new();
    let mut preface_seen = false;
    let mut chunk = [0u8; 16384];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        if !preface_seen {
            if buffer.len() < PREFACE.len() {
                continue;
            }
            out.extend(buffer.drain(..PREFACE.len()));
            preface_seen = true;
        }
        for (kind, _, stream, frame) in frames(&mut buffer) {
            if kind == DATA {
                let mut needle = state.needle.lock().unwrap();
                if let Some(bytes) = needle.as_ref()
                    && frame[9..]
                        .windows(bytes.len())
                        .any(|w| w == bytes.as_slice())
                {
                    state.targets.lock().unwrap().insert(number, stream);
                    *needle = None;
                }
            }
            out.extend(frame);
        }
        if to.write_all(&out).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Server to client: every frame of the target stream is dropped; once its last frame has
/// come, both connections are reset.
fn answers(mut from: TcpStream, mut to: TcpStream, number: u32, state: Arc<DropperState>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        let target = state.targets.lock().unwrap().get(&number).copied();
        let mut out = Vec::new();
        let mut finished = false;
        for (_, flags, stream, frame) in frames(&mut buffer) {
            if Some(stream) == target {
                state.dropped_frames.fetch_add(1, Ordering::SeqCst);
                finished |= flags & END_STREAM != 0;
            } else {
                out.extend(frame);
            }
        }
        if to.write_all(&out).is_err() {
            break;
        }
        if finished && state.reset.load(Ordering::SeqCst) {
            state.targets.lock().unwrap().remove(&number);
            state.reset_done.store(true, Ordering::SeqCst);
            for stream in [&from, &to] {
                let linger = nix::libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                let _ = nix::sys::socket::setsockopt(
                    stream,
                    nix::sys::socket::sockopt::Linger,
                    &linger,
                );
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            return;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The record's create-revision: it changes only if the key was deleted and written again.
fn create_revision(etcd: &Etcd, key: &str) -> Option<i64> {
    let out = etcd.ctl(&["get", key, "-w", "json"]);
    let json: Value = serde_json::from_slice(&out.stdout).ok()?;
    json["kvs"][0]["create_revision"].as_i64()
}

fn record_state(etcd: &Etcd, key: &str) -> Option<String> {
    let out = etcd.ctl(&["get", key, "--print-value-only"]);
    let json: Value = serde_json::from_slice(&out.stdout).ok()?;
    json["state"].as_str().map(str::to_owned)
}

#[test]
fn a_record_write_whose_answer_was_lost_is_never_undone() {
    let etcd = Etcd::start();
    let dropper = AnswerDropper::start(etcd.addr());
    let scratch = Scratch::new();
    let go = scratch.path("go");
    let key = "/leader-exec/.occurrences/ambiguous/nightly";
    let endpoint = dropper.endpoint();
    let mut args = patient_lease_args(&endpoint, "ambiguous");
    args.extend(["--occurrence", "nightly"]);
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut a = Instance::start(&args, &scratch.job("a", &body));
    scratch
        .wait_record("start", "a", Duration::from_secs(10))
        .expect("a started");
    let started = create_revision(&etcd, key).expect("the started record");
    assert_eq!(record_state(&etcd, key).as_deref(), Some("started"));

    // Recording the outcome is two calls: a lease for the record, then the fenced txn, the
    // first to carry the record's key. The txn reaches etcd; its answer does not, and the
    // connection breaks.
    dropper.arm(key, true);
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    assert!(
        dropper.state.reset_done.load(Ordering::SeqCst),
        "the txn's answer was never dropped"
    );
    assert!(dropper.state.dropped_frames.load(Ordering::SeqCst) > 0);
    // The record was written over, never deleted in between.
    assert_eq!(record_state(&etcd, key).as_deref(), Some("done"));
    assert_eq!(
        create_revision(&etcd, key),
        Some(started),
        "the record was deleted and written again: {}",
        a.stderr()
    );
}

#[test]
fn a_stop_while_the_occurrence_record_is_read_withdraws_without_running() {
    let etcd = Etcd::start();
    let dropper = AnswerDropper::start(etcd.addr());
    let scratch = Scratch::new();
    let go = scratch.path("go");
    let direct = etcd.endpoint();
    let body = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut b = Instance::start(&lease_args(&direct, "phase"), &scratch.job("b", &body));
    scratch
        .wait_record("start", "b", Duration::from_secs(10))
        .expect("b started");
    let proxied = dropper.endpoint();
    let mut args = lease_args(&proxied, "phase");
    args.extend(["--occurrence", "nightly"]);
    let mut a = Instance::start(&args, &scratch.job("a", "true"));
    assert!(
        wait_for(Duration::from_secs(10), || etcd
            .keys("/leader-exec/phase/")
            .len()
            == 2),
        "a did not join the line"
    );
    // When b is done, a takes the lead and reads the occurrence record, whose answer never
    // comes.
    dropper.arm("/leader-exec/.occurrences/phase/nightly", false);
    std::fs::write(&go, "").unwrap();
    assert_eq!(b.wait(Duration::from_secs(10)), Some(0), "{}", b.stderr());
    assert!(
        wait_for(Duration::from_secs(10), || a.stderr().contains("elected")),
        "{}",
        a.stderr()
    );
    assert!(
        wait_for(Duration::from_secs(5), || dropper
            .state
            .dropped_frames
            .load(Ordering::SeqCst)
            > 0),
        "the record read's answer was not held"
    );
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), Some(143), "{}", a.stderr());
    assert!(
        scratch.wait_record("start", "a", Duration::ZERO).is_none(),
        "the command started after the stop"
    );
    assert!(
        etcd.keys("/leader-exec/phase/").is_empty(),
        "{:?}",
        etcd.keys("/leader-exec/phase/")
    );
}
