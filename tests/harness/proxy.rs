//! The TCP proxy in front of a store: cut (reset every connection), freeze (a black hole), heal,
//! hold back what follows a request carrying given bytes, and lead new connections elsewhere.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::free_port;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    Frozen,
    Cut,
}

struct ProxyState {
    mode: Mutex<Mode>,
    /// Where new connections go (`retarget` moves it; open ones stay where they are).
    target: Mutex<SocketAddr>,
    /// Every open connection's two sockets, by the pair's number: `cut` resets them. A pair
    /// leaves once both its pumps have ended, so a long run does not keep every connection it ever
    /// proxied open (a soak's hundreds of thousands ran the test out of file descriptors).
    connections: Mutex<Vec<(u64, TcpStream)>>,
    next_pair: AtomicU64,
    stopped: AtomicBool,
    /// Bytes forwarded so far, both directions.
    forwarded: AtomicU64,
    /// The benchmarks' black hole (`black_hole_after_next_request`): set, the next HTTP/2 DATA
    /// frame a client sends goes through and then everything that client side sends is dropped.
    armed: AtomicBool,
    black_hole: AtomicBool,
    /// CLOCK_MONOTONIC ns (0: none yet): when the kernel received the last request let through
    /// (its receive timestamp: on loopback, stamped inside the sender's write), when the proxy
    /// read it, and when the first bytes came back after it.
    last_request_sent: AtomicU64,
    last_request_read: AtomicU64,
    first_answer: AtomicU64,
    /// `freeze_after_request_containing`: the bytes that trip the freeze, while armed.
    needle: Mutex<Option<Vec<u8>>>,
    tripped: AtomicBool,
}

impl ProxyState {
    fn new(target: SocketAddr, mode: Mode, stopped: bool) -> ProxyState {
        ProxyState {
            mode: Mutex::new(mode),
            target: Mutex::new(target),
            connections: Mutex::new(Vec::new()),
            next_pair: AtomicU64::new(0),
            stopped: AtomicBool::new(stopped),
            forwarded: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            black_hole: AtomicBool::new(false),
            last_request_sent: AtomicU64::new(0),
            last_request_read: AtomicU64::new(0),
            first_answer: AtomicU64::new(0),
            needle: Mutex::new(None),
            tripped: AtomicBool::new(false),
        }
    }
}

/// CLOCK_MONOTONIC in ns: the clock bench/stamp.rs records on, so the benchmark runner can compare
/// the proxy's instants with the child's.
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn realtime_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Follows the HTTP/2 frames a client sends, to tell where a DATA frame (a gRPC message, such as
/// an etcd lease renewal) ends.
#[derive(Default)]
struct FrameScanner {
    preface_seen: usize,
    header: Vec<u8>,
    payload_left: usize,
    current: (u8, usize),
}

impl FrameScanner {
    const PREFACE: usize = 24;

    /// The end offsets in `data` of the non-empty DATA frames that end in it.
    fn data_frame_ends(&mut self, data: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut i = 0;
        while i < data.len() {
            if self.preface_seen < Self::PREFACE {
                let take = (Self::PREFACE - self.preface_seen).min(data.len() - i);
                self.preface_seen += take;
                i += take;
            } else if self.payload_left > 0 {
                let take = self.payload_left.min(data.len() - i);
                self.payload_left -= take;
                i += take;
                if self.payload_left == 0 && self.current.0 == 0 && self.current.1 > 0 {
                    ends.push(i);
                }
            } else {
                let take = (9 - self.header.len()).min(data.len() - i);
                self.header.extend_from_slice(&data[i..i + take]);
                i += take;
                if self.header.len() == 9 {
                    let h = std::mem::take(&mut self.header);
                    let length = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    self.current = (h[3], length);
                    self.payload_left = length;
                }
            }
        }
        ends
    }
}

/// A TCP proxy on a free loopback port in front of `target`.
/// `cut` resets every connection and refuses new ones; `freeze` keeps connections open but
/// forwards nothing (a black hole); `heal` forwards again; `retarget` leads new ones elsewhere.
pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        Proxy::start_on(0, target)
    }

    /// A proxy on loopback port `port` (0: a free one): a member that starts on a port where
    /// nothing listened before.
    pub fn start_on(port: u16, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::new(target, Mode::Forward, false));
        let accept_state = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept_state.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if *accept_state.mode.lock().unwrap() == Mode::Cut {
                    reset(&client);
                    continue;
                }
                let target = *accept_state.target.lock().unwrap();
                let Ok(server) = TcpStream::connect(target) else {
                    reset(&client);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let pair = accept_state.next_pair.fetch_add(1, Ordering::SeqCst);
                {
                    let mut connections = accept_state.connections.lock().unwrap();
                    connections.push((pair, client.try_clone().unwrap()));
                    connections.push((pair, server.try_clone().unwrap()));
                }
                let pumps = Arc::new(AtomicUsize::new(2));
                // Receive timestamps on what the client sends (for the benchmarks' black hole).
                let _ = nix::sys::socket::setsockopt(
                    &client,
                    nix::sys::socket::sockopt::ReceiveTimestampns,
                    &true,
                );
                for (from, to, upstream) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        true,
                    ),
                    (server, client, false),
                ] {
                    let state = accept_state.clone();
                    let ended = PairEnded {
                        pair,
                        pumps: pumps.clone(),
                        state: state.clone(),
                    };
                    thread::spawn(move || {
                        let _ended = ended;
                        pump(from, to, state, upstream)
                    });
                }
            }
        });
        Proxy { port, state }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A "proxy" on a free loopback port where nothing listens: every connection is refused.
    /// `Store::endpoint_via` turns it into an endpoint of the store's kind.
    pub fn nothing_listening() -> Proxy {
        let port = free_port();
        let nowhere = SocketAddr::from(([127, 0, 0, 1], port));
        Proxy {
            port,
            state: Arc::new(ProxyState::new(nowhere, Mode::Cut, true)),
        }
    }

    fn set(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = mode;
    }

    pub fn cut(&self) {
        self.set(Mode::Cut);
        for (_, connection) in self.state.connections.lock().unwrap().drain(..) {
            reset(&connection);
        }
    }

    pub fn freeze(&self) {
        self.set(Mode::Frozen);
    }

    pub fn heal(&self) {
        self.set(Mode::Forward);
    }

    /// Leads the connections made from now on to `target`, as a virtual IP moved to another host
    /// or a pooler re-pointed in a failover: those open stay with the server they reached.
    pub fn retarget(&self, target: SocketAddr) {
        *self.state.target.lock().unwrap() = target;
    }

    /// Lets the next chunk a client sends that carries `needle` (a ZooKeeper path, SQL text, a
    /// gRPC key: all travel as they are) through to the server, then freezes: the answer to that
    /// request never comes back until `heal`. A write whose answer is lost, and a client stalled
    /// between a write and its next step.
    pub fn freeze_after_request_containing(&self, needle: &[u8]) {
        self.state.tripped.store(false, Ordering::SeqCst);
        *self.state.needle.lock().unwrap() = Some(needle.to_vec());
    }

    /// Whether the armed request went through (and the proxy froze after it).
    pub fn tripped(&self) -> bool {
        self.state.tripped.load(Ordering::SeqCst)
    }

    /// Bytes forwarded so far in both directions: shows which proxy carries a client's traffic.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// Lets the next HTTP/2 DATA frame a client sends (a gRPC message: an etcd lease renewal)
    /// through, and the answers to it, then drops everything clients send, as a black-holed route
    /// would. `last_request` tells when that request was sent.
    pub fn black_hole_after_next_request(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// After `black_hole_after_next_request`: (when the kernel received the last request let
    /// through, when the proxy read it, when the first answer to it came back), CLOCK_MONOTONIC
    /// ns; None for what has not happened.
    pub fn last_request(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let get = |a: &AtomicU64| Some(a.load(Ordering::SeqCst)).filter(|&t| t != 0);
        (
            get(&self.state.last_request_sent),
            get(&self.state.last_request_read),
            get(&self.state.first_answer),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Held by each of a connection's two pumps: the last to end takes the pair's sockets out of
/// `connections`, closing them.
struct PairEnded {
    pair: u64,
    pumps: Arc<AtomicUsize>,
    state: Arc<ProxyState>,
}

impl Drop for PairEnded {
    fn drop(&mut self) {
        if self.pumps.fetch_sub(1, Ordering::SeqCst) == 1 {
            let mut connections = self
                .state
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            connections.retain(|(pair, _)| *pair != self.pair);
        }
    }
}

/// Closes with RST rather than FIN, as a dropped route or a dead peer's kernel would.
fn reset(stream: &TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::Linger, &linger);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Reads what the client sent, with the kernel's receive timestamp as CLOCK_MONOTONIC ns.
fn read_stamped(from: &TcpStream, buffer: &mut [u8]) -> std::io::Result<(usize, Option<u64>)> {
    use std::os::fd::AsRawFd;
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let message = nix::sys::socket::recvmsg::<()>(
        from.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        nix::sys::socket::MsgFlags::empty(),
    )?;
    let stamp = message.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            nix::sys::socket::ControlMessageOwned::ScmTimestampns(t) => {
                let real = t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64;
                // On CLOCK_REALTIME; moved onto CLOCK_MONOTONIC by the clocks' offset now.
                Some((monotonic_ns() + real).saturating_sub(realtime_ns()))
            }
            _ => None,
        })
    });
    Ok((message.bytes, stamp))
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<ProxyState>, upstream: bool) {
    let mut buffer = [0u8; 16384];
    let mut frames = FrameScanner::default();
    loop {
        let (mut n, stamp) = match if upstream {
            read_stamped(&from, &mut buffer)
        } else {
            from.read(&mut buffer).map(|n| (n, None))
        } {
            Ok((0, _)) | Err(_) => break,
            Ok(read) => read,
        };
        if upstream {
            if state.black_hole.load(Ordering::SeqCst) {
                continue;
            }
            let ends = frames.data_frame_ends(&buffer[..n]);
            if let Some(&end) = ends.first()
                && state.armed.swap(false, Ordering::SeqCst)
            {
                // Recorded before forwarding: the answer may come back while this thread writes.
                state
                    .last_request_sent
                    .store(stamp.unwrap_or_else(monotonic_ns), Ordering::SeqCst);
                state
                    .last_request_read
                    .store(monotonic_ns(), Ordering::SeqCst);
                state.black_hole.store(true, Ordering::SeqCst);
                n = end;
            }
        }
        if !upstream && state.black_hole.load(Ordering::SeqCst) {
            let _ = state.first_answer.compare_exchange(
                0,
                monotonic_ns(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        loop {
            match *state.mode.lock().unwrap() {
                Mode::Forward => break,
                Mode::Frozen => {}
                Mode::Cut => {
                    reset(&from);
                    reset(&to);
                    return;
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        if upstream {
            let mut needle = state.needle.lock().unwrap();
            if needle
                .as_ref()
                .is_some_and(|w| buffer[..n].windows(w.len()).any(|c| c == w.as_slice()))
            {
                // Frozen before the request is written: its answer cannot get back first.
                *needle = None;
                *state.mode.lock().unwrap() = Mode::Frozen;
                state.tripped.store(true, Ordering::SeqCst);
            }
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
        state.forwarded.fetch_add(n as u64, Ordering::SeqCst);
    }
    let _ = to.shutdown(Shutdown::Write);
}
