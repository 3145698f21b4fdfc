//! The benchmark's servers: one store of the store list (tests/stores.rs), started by the test
//! harness (tests/harness/) on free loopback ports, with TCP proxies in front of it on demand.
//! bench/run.py runs one of these per store it measures and talks to it over stdin and stdout.
//!
//!     cargo build --example bench-servers
//!     target/debug/examples/bench-servers --list     # the store list, as one JSON line
//!     target/debug/examples/bench-servers STORE      # start STORE, then obey commands
//!
//! Started, it prints one JSON line (`store`, `endpoint`, `version`), then answers each command
//! line on stdin with one JSON line (`{"error": …}` when it fails). Instants are CLOCK_MONOTONIC
//! ns, the clock bench/stamp.rs records on. Commands:
//!
//!     proxy                   a new proxy in front of the store: {"proxy": N, "endpoint": URL}
//!     cut N | freeze N | heal N | drop N
//!                             cut (reset every connection, refuse new ones), freeze (forward
//!                             nothing), forward again, or stop proxy N: {"at": NS}
//!     black-hole N            let the next request through proxy N, then drop what clients send
//!     last-request N          {"sent": NS, "read": NS, "answer": NS} after black-hole (null: not yet)
//!     in-line LEASE           {"count": N}: instances in line for LEASE, leader included
//!     requests | periodic     {"requests": X}: requests the server received so far (null: it
//!                             cannot count them); periodic: the waiters' periodic ones
//!     expiry COUNT TTL_MS     {"lags": [S, …]}: how late the server ends abandoned leases (null:
//!                             it has no reaper)
//!     freeze-store | thaw-store | restart-store
//!                             SIGSTOP, SIGCONT, kill and start again on the same port: {"at": NS}
//!     quit                    stop everything and exit (so does the end of stdin)
//!
//! Data directories are the harness's temporary directories: set TMPDIR to put them on a tmpfs.

#[path = "../tests/harness/mod.rs"]
mod harness;
#[path = "../tests/stores.rs"]
#[macro_use]
mod stores;

use std::io::{BufRead, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use harness::{Proxy, Store, monotonic_ns};
use serde_json::{Value, json};

/// One entry of the store list: its name, whether the benchmarks measure it, whether the chaos
/// suite runs it, and how to serve it.
struct Entry {
    name: &'static str,
    bench: bool,
    chaos: bool,
    serve: fn(),
}

macro_rules! flag {
    () => {
        false
    };
    ($($flag:tt)+) => {
        true
    };
}

macro_rules! entries {
    ({} $($store:ident : $ty:ident [$($chaos:tt)*] [$($bench:tt)*];)*) => {
        &[$(Entry {
            name: stringify!($store),
            bench: flag!($($bench)*),
            chaos: flag!($($chaos)*),
            serve: serve::<harness::$ty>,
        }),*]
    };
}

const STORES: &[Entry] = with_stores! { entries! {} };

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--list" => {
            let list: Vec<Value> = STORES
                .iter()
                .map(|e| json!({"name": e.name, "bench": e.bench, "chaos": e.chaos}))
                .collect();
            println!("{}", json!({ "stores": list }));
        }
        [name] if STORES.iter().any(|e| e.name == name) => {
            (STORES.iter().find(|e| e.name == name).unwrap().serve)()
        }
        _ => {
            let names: Vec<&str> = STORES.iter().map(|e| e.name).collect();
            eprintln!(
                "usage: bench-servers --list | bench-servers STORE (one of: {})",
                names.join(", ")
            );
            std::process::exit(125);
        }
    }
}

fn say(value: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn serve<S: Store>() {
    let mut store = S::start_measured();
    say(json!({
        "store": S::NAME,
        "endpoint": store.endpoint(),
        "version": store.version(),
    }));
    let mut proxies: Vec<Option<Proxy>> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"quit") {
            break;
        }
        // A harness call that panics (a store that does not come back) is an answer, not the end.
        let answer = catch_unwind(AssertUnwindSafe(|| {
            command(&mut store, &mut proxies, &words)
        }))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(message)
        });
        say(answer.unwrap_or_else(|e| json!({ "error": e })));
    }
    drop(proxies);
    drop(store);
}

fn command<S: Store>(
    store: &mut S,
    proxies: &mut Vec<Option<Proxy>>,
    words: &[&str],
) -> Result<Value, String> {
    let proxy = |n: Option<&&str>| -> Result<usize, String> {
        let n: usize = n
            .ok_or("which proxy?")?
            .parse()
            .map_err(|_| "a proxy number")?;
        match proxies.get(n) {
            Some(Some(_)) => Ok(n),
            _ => Err(format!("no proxy {n}")),
        }
    };
    let at = || Ok(json!({ "at": monotonic_ns() }));
    match words {
        ["proxy"] => {
            let p = Proxy::start(store.addr());
            let endpoint = store.endpoint_via(&p);
            proxies.push(Some(p));
            Ok(json!({"proxy": proxies.len() - 1, "endpoint": endpoint}))
        }
        [
            verb @ ("cut" | "freeze" | "heal" | "drop" | "black-hole" | "last-request"),
            rest @ ..,
        ] => {
            let n = proxy(rest.first())?;
            let p = proxies[n].as_ref().unwrap();
            // The instant is read before the fault is injected: the fault began no earlier.
            let now = monotonic_ns();
            match *verb {
                "cut" => p.cut(),
                "freeze" => p.freeze(),
                "heal" => p.heal(),
                "black-hole" => p.black_hole_after_next_request(),
                "last-request" => {
                    let (sent, read, answer) = p.last_request();
                    return Ok(json!({"sent": sent, "read": read, "answer": answer}));
                }
                _ => proxies[n] = None,
            }
            Ok(json!({ "at": now }))
        }
        ["in-line", lease] => Ok(json!({ "count": store.in_line(lease) })),
        ["requests"] => Ok(json!({ "requests": store.requests() })),
        ["periodic"] => Ok(json!({ "requests": store.periodic_requests() })),
        ["expiry", count, ttl_ms] => {
            let count: usize = count.parse().map_err(|_| "a count")?;
            let ttl: u64 = ttl_ms.parse().map_err(|_| "a ttl in ms")?;
            Ok(json!({ "lags": store.expiry_lag(count, Duration::from_millis(ttl)) }))
        }
        ["freeze-store"] => {
            store.freeze();
            at()
        }
        ["thaw-store"] => {
            store.thaw();
            at()
        }
        ["restart-store"] => {
            store.restart();
            at()
        }
        _ => Err(format!("unknown command: {}", words.join(" "))),
    }
}
