//! The election on ZooKeeper: Curator's `LeaderLatch` layout, one session per campaign.
//!
//! Layout (with `--prefix /leader-exec/` and `--lease NAME`, under the URL's chroot if any):
//!
//! - `/leader-exec/NAME` (a container node, created with its parents on first use): the
//!   election. Each candidate creates one ephemeral-sequential child
//!   `_c_<UUID>-latch-<10-digit sequence>` holding its identity, exactly as Curator's
//!   `LeaderLatch` (with protection) does. The children sort as Curator sorts them, by the text
//!   after the last `latch-`; the first leads, and each waiter watches only the child just ahead
//!   of it, so a handover wakes one waiter. The `<UUID>` is this candidacy's own: after a
//!   connection loss during the create, the candidate finds its node again by it instead of
//!   creating a second one.
//! - `/leader-exec/.leaders/NAME`: the leader's state for `status` (ephemeral: it goes with the
//!   leader's session), written fenced.
//! - `/leader-exec/.occurrences/NAME/<ID>`: occurrence records, persistent, written fenced. The
//!   ID is one node name: `%`, `/`, a leading `.` and the characters ZooKeeper refuses in a
//!   path are percent-encoded. Retention is judged by the servers' clock (a write's `mtime`) and
//!   enforced by a sweep after a record write: see records.rs.
//! - `/leader-exec/.tokens/NAME`: the leader mark (`--max-holders` 1), persistent: the name of the
//!   candidate node that leads, written by it (fenced by its node) when it sees it is first.
//!
//! The fencing token is the zxid of that write, the mark's `mzxid` ([`ZooKeeper::mark`]). zxids
//! are global to the ensemble and only grow, and the write is sent after the read that showed
//! the candidate first, so its zxid exceeds every token handed out before (see
//! [`Place::Holds`]). Not the node's `czxid` (earlier versions' token): a candidate whose first
//! look comes late may lead with a czxid below the token of holders with another N that came and
//! went after its create. Not the sequence suffix: that comes from the parent's `cversion`, an
//! int32 that starts again at 0 when the parent is deleted (a container node is, once empty).
//! Not a write to the candidate node itself: Curator's `LeaderLatch` waiter behind it watches it
//! with a `getData` watch that only its deletion may fire.
//!
//! Semaphores (`--max-holders` N > 1): the first N candidates in line hold. Each node's name
//! records N, `_c_<UUID>-holders-<N>-latch-<sequence>`, so that every reader of the line sees N
//! with the candidate, atomically, from one `getChildren`; N = 1 writes exactly the name above,
//! and a node without the marker (Curator's) counts as N = 1. A candidacy compares its N with
//! every candidate ahead of it and leaves on any other (`Turn::Mismatch`: the run form deletes
//! its node and closes its session; [`place_in`] says why no two N hold at once). A candidacy
//! that may hold touches its node (a `setData` of the same data); the zxid of that write, the
//! node's `mzxid`, is its token, and it wakes the waiter behind. The first waiter watches the N
//! holders, every later one only its predecessor (see `predecessor_gone` in store.rs). Readers
//! take N from the oldest candidate and report as holders those of the first N that record it
//! and have touched their node (before its touch a candidacy has no token yet).
//!
//! The session is the lease. `--ttl` is the requested session timeout; the server may clamp it
//! to its `minSessionTimeout`/`maxSessionTimeout`, so the campaign checks the timeout it
//! *negotiated* against `--renew-deadline + --kill-after + margin` and refuses (125, naming both)
//! when it does not fit. Every reconnect renegotiates it, and the server expires the session by
//! the timeout of its current connection: the leader holds the same check on every connection
//! (see `ZkKeeper` in store.rs).
//!
//! With credentials, every node created here gets all rights for the creator's identity and read
//! for everyone ([`CREATOR_ALL_ANYONE_READ`](session::CREATOR_ALL_ANYONE_READ)); without, nodes
//! are open. Every read that answers "who leads" to an operator goes through
//! [`ZooKeeper::synced`] (a `sync` first).
//!
//! The files: this one, the store and how it is made; `session.rs`, the session (connecting,
//! `sync`, the renegotiated timeout, the watch on our own node, the chroot, ACLs); `latch.rs`, the
//! line (names, order, places, holders, the leader mark and the touch that give tokens);
//! `paths.rs`, node names and paths; `fenced.rs`, writes fenced by our own node; `records.rs`,
//! records' retention by the servers' clock and its sweep; `held.rs`, held slots; `store.rs`, the
//! store traits and the keeper; `target.rs`, the `zk://` URL and the store's door.

use std::sync::Mutex;
use std::time::Duration;

mod fenced;
mod held;
mod latch;
mod paths;
mod records;
mod session;
mod store;
pub mod target;

use zookeeper_client::{self as zk, Acl, Acls, CreateMode, EventType, Permission, SessionState};

use super::{
    Ahead, Backoff, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    LeaseTiming, Observation, Open, RawRecord, Read, Records, Renewal, Scope, StoreError, Turn,
};
use latch::{
    Place, candidate_name, holders_in, in_line, marker_path, max_holders_of, place_in,
    protection_id, token_of,
};
use paths::{allowed, decode_name};
use session::Synced;

/// How a ZooKeeper ensemble is reached.
#[derive(Clone)]
pub struct Target {
    /// The connect string: `HOST:PORT[,HOST:PORT…][/chroot]`.
    pub connect: String,
    /// The `--endpoints` URL, for messages.
    pub shown: String,
    /// `NAME:PASSWORD` for the `digest` scheme, if given.
    pub digest: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("connect", &crate::redact::redact_password(&self.connect))
            .field("digest", &self.digest.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// The session timeout a reader asks for.
const READER_SESSION: Duration = Duration::from_secs(10);

const LATCH: &str = "latch-";
/// What precedes `N-` in the name of a candidate node with `--max-holders` N > 1.
const HOLDERS: &str = "holders-";
const EXPIRES: &str = "leader-exec-expires-ms=";
/// The node under the prefix that holds every election's leader mark (see [`marker_path`]).
const TOKENS: &str = ".tokens";

pub struct ZooKeeper {
    target: Target,
    /// `--prefix` as given (`/leader-exec/`): the keys the rest of the tool names start with it.
    prefix: String,
    /// `--prefix` as a node path (`/leader-exec`).
    base: String,
    /// The election node, `base/NAME`.
    election: String,
    identity: String,
    /// `--ttl` (the session timeout to request) and `--renew-deadline + --kill-after + margin`
    /// (the least negotiated timeout that is safe; zero for a reader, which holds nothing).
    timing: LeaseTiming,
    /// Bounds establishing a session.
    connect_timeout: Duration,
    /// `--max-holders` (1 for a reader, which holds nothing).
    max_holders: u32,
    /// The current session: a campaign's, or the subcommands' one.
    session: Mutex<Option<zk::Client>>,
    /// The servers' clock as last seen in a write of this process (records.rs).
    server_time: Mutex<Option<records::ServerTime>>,
    /// The sweep of expired occurrence records while it may still run.
    sweep: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether this process has started its sweep (one a process).
    swept: std::sync::atomic::AtomicBool,
    /// Held slots (persistent candidate nodes, `hold_claim`) the first waiter has seen, by
    /// path: the node's czxid and mzxid then, and when it first saw them (CLOCK_BOOTTIME).
    sightings: Mutex<std::collections::HashMap<String, (i64, i64, Duration)>>,
}

pub fn classify(error: zk::Error) -> StoreError {
    use zk::Error as E;
    let message = format!("ZooKeeper: {error}");
    match error {
        E::NoAuth
        | E::AuthFailed
        | E::BadArguments(_)
        | E::InvalidAcl
        | E::Unimplemented
        | E::MarshallingError
        | E::QuotaExceeded
        | E::NoChildrenForEphemerals => StoreError::Fatal(message),
        _ => StoreError::Transient(message),
    }
}

impl ZooKeeper {
    /// A candidate of `open.scope`'s election; a lease that is empty (`status --all`) is no
    /// election of its own.
    pub fn new(target: Target, open: Open) -> Result<ZooKeeper, StoreError> {
        let Open {
            scope: Scope { lease, prefix },
            identity,
            timing,
            connect_timeout,
            max_holders,
        } = open;
        for (flag, text) in [("--prefix", &prefix), ("--lease", &lease)] {
            if let Some(c) = text.chars().find(|&c| !allowed(c)) {
                return Err(StoreError::Fatal(format!(
                    "{flag} holds {}, which ZooKeeper does not allow in a path",
                    c.escape_unicode()
                )));
            }
        }
        let base = prefix.trim_end_matches('/').to_owned();
        Ok(ZooKeeper {
            election: format!("{base}/{lease}"),
            base,
            prefix,
            target,
            identity,
            timing,
            connect_timeout,
            max_holders,
            session: Mutex::new(None),
            server_time: Mutex::new(None),
            sweep: Mutex::new(None),
            swept: std::sync::atomic::AtomicBool::new(false),
            sightings: Mutex::new(Default::default()),
        })
    }

    /// ZooKeeper for reading and administration (`status`, `watch`, `check`, `resign`): a
    /// session of its own, held only while they run. It holds no election node, so nothing
    /// depends on the session's timeout but how soon the server forgets a reader that died.
    pub fn reader(target: Target, open: Open) -> Result<ZooKeeper, StoreError> {
        let timing = LeaseTiming {
            ttl: READER_SESSION,
            retry_period: Duration::ZERO,
            needed: Duration::ZERO,
        };
        ZooKeeper::new(target, open.for_reader(timing))
    }
}

#[cfg(test)]
mod tests;
