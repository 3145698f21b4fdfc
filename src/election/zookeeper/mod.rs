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
//! for everyone ([`CREATOR_ALL_ANYONE_READ`]); without, nodes are open. Every read that answers
//! "who leads" to an operator goes through [`ZooKeeper::synced`] (a `sync` first).

use std::sync::Mutex;
use std::time::Duration;

mod held;
mod records;
mod store;
pub mod target;

use zookeeper_client::{self as zk, Acl, Acls, CreateMode, EventType, Permission, SessionState};

use super::{
    Ahead, Backoff, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    LeaseTiming, Observation, Open, RawRecord, Read, Records, Renewal, Scope, StoreError, Turn,
};

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

/// The ACL of every node leader-exec creates when it has credentials (Curator's ACL provider
/// model): all rights for the creator's authenticated identity (`auth` is the server's shorthand
/// for the ids the creating session authenticated as: `digest:NAME:HASH`), read for everyone, so
/// that `status` and `check` need no credentials. What keeps the line safe is the election
/// node's: without CREATE a client cannot plant a candidate ahead, and without DELETE on the
/// parent it cannot delete the leader's node. The same holds for `.leaders`, `.occurrences` and
/// the prefix's own nodes, created the same way.
static CREATOR_ALL_ANYONE_READ: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

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

/// Whether ZooKeeper accepts `c` in a node name (its `PathUtils.validatePath`).
fn allowed(c: char) -> bool {
    !(c == '\0'
        || ('\u{1}'..='\u{1f}').contains(&c)
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || ('\u{e000}'..='\u{f8ff}').contains(&c)
        || ('\u{fff0}'..='\u{ffff}').contains(&c))
}

/// One occurrence ID as one node name (see the module comment).
pub fn encode_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for (i, c) in id.chars().enumerate() {
        if c == '%' || c == '/' || (i == 0 && c == '.') || !allowed(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`encode_name`], as bytes (a name some other client wrote may not decode to
/// UTF-8, and is shown escaped).
pub fn decode_name(name: &str) -> Vec<u8> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The key Curator sorts candidates by: the text after the last `latch-`, or the whole name.
fn sort_key(name: &str) -> &str {
    match name.rfind(LATCH) {
        Some(i) => &name[i + LATCH.len()..],
        None => name,
    }
}

/// Candidates in line, as Curator's `LeaderLatch` orders them.
fn in_line(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
}

/// The name of a candidate node before the sequence suffix the server appends: Curator's
/// protected `LeaderLatch` name with `--max-holders` 1, the same with `holders-N-` before
/// `latch-` otherwise (see the module comment, Semaphores).
fn candidate_name(protection: &str, max_holders: u32) -> String {
    if max_holders == 1 {
        format!("_c_{protection}-{LATCH}")
    } else {
        format!("_c_{protection}-{HOLDERS}{max_holders}-{LATCH}")
    }
}

/// The `--max-holders` a candidate node's name records: N from `…-holders-N-latch-…`, 1 for a
/// name without that marker (Curator's, an older leader-exec's, one with `--max-holders` 1) or
/// with a marker that is not a number from 1 to 1000 (names are untrusted bytes).
fn max_holders_of(name: &str) -> u32 {
    let Some(i) = name.rfind(LATCH) else {
        return 1;
    };
    let marked = name[..i]
        .strip_suffix('-')
        .and_then(|head| head.rsplit_once(&format!("-{HOLDERS}")))
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=1000).contains(n));
    marked.unwrap_or(1)
}

/// Where the election at `election` (`PREFIX NAME` as a path) keeps its leader mark:
/// `PREFIX .tokens/NAME`. Outside the election node, whose every child Curator's `LeaderLatch`
/// takes for a candidate; `.tokens` starts with a '.', so no listing takes it for an election.
fn marker_path(election: &str) -> String {
    match election.rsplit_once('/') {
        Some((base, name)) => format!("{base}/{TOKENS}/{name}"),
        None => format!("{TOKENS}/{election}"),
    }
}

/// The leader mark of an election (`--max-holders` 1): the name of the candidate node that wrote
/// it last, and the zxid of that write (the mark's `mzxid`), which is that leader's token.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mark {
    node: Vec<u8>,
    zxid: i64,
}

/// The fencing token of the candidate node `name` with this stat, given the election's leader
/// mark: with `--max-holders` N > 1 its `mzxid`, the zxid of the touch that made it a holder;
/// with N = 1 the zxid of the mark it wrote on leading, once the mark names it (see
/// [`Place::Holds`] for why neither is the czxid). A node the mark does not name has not marked
/// yet, or is Curator's (which never marks): its czxid, the token of earlier versions, which no
/// leader-exec command is given any more.
fn token_of(name: &str, stat: &zk::Stat, mark: Option<&Mark>) -> i64 {
    if max_holders_of(name) > 1 {
        return stat.mzxid;
    }
    if marked(name, stat, mark) {
        mark.map_or(stat.czxid, |mark| mark.zxid)
    } else {
        stat.czxid
    }
}

/// Whether the leader mark names the candidate node `name` (with this stat), written after the
/// node was made: with `--max-holders` 1, its token is then the mark's zxid. A first node not
/// marked is a provisional leader ([`Leader::provisional`]).
fn marked(name: &str, stat: &zk::Stat, mark: Option<&Mark>) -> bool {
    mark.is_some_and(|mark| mark.node == name.as_bytes() && mark.zxid > stat.czxid)
}

/// Where a candidacy stands in a line read in one `getChildren`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// Its node is not in line.
    Gone,
    /// A candidate ahead of it records another `--max-holders` (the oldest such).
    Mismatch(u32),
    /// Fewer than N candidates are ahead of it: it may hold.
    ///
    /// Why never more than N hold: a candidacy holds only after a `getChildren` on its own
    /// session showed fewer than N nodes ahead of it. Suppose N + 1 held at once, and take the
    /// last of them in line, Z. The N others are ahead of Z: each was created before Z's node
    /// (within one incarnation of the election node, sequence order is creation order; the
    /// container is deleted only when empty, so no older incarnation's node is still there) and
    /// still exists, so each existed when Z's `getChildren` was answered, after Z's own create.
    /// A server answers a session's read only after applying everything that session wrote, and
    /// applies transactions in zxid order, so it had applied their creates too: Z saw N ahead and
    /// could not have held. Nodes are never added ahead of an existing one, so the count ahead
    /// only falls while a candidacy waits.
    ///
    /// Why the token is the zxid of a write made after the deciding read, not the czxid: two
    /// candidacies among the first N decide independently, so the one created later may answer
    /// first, and its czxid would be the greater of two tokens handed out in the other order.
    /// With N = 1 too a node's czxid can be below a token already handed out: a candidate whose
    /// first look comes late (its create's answer lost, the process paused) may find nobody
    /// ahead after holders of another N came, touched their nodes and went behind its back
    /// (nodes behind it with N > 1 compare themselves only with those ahead of them). So a
    /// holder with N > 1 touches its node (a `setData` of its own data), and a leader with N = 1
    /// writes the election's leader mark (`mark`: its own node's name, fenced by that node). The
    /// write is sent after the deciding read; its zxid is greater than that of every transaction
    /// committed before it was sent, so greater than every token any holder or leader was given
    /// before (each was the zxid of such a write, committed before it was handed out) — tokens
    /// of one lease strictly increase and never reset, across every change of N.
    Holds,
    /// At this position (from 0; at least N): it waits.
    Waits(usize),
}

/// Where the candidate node `own` stands in `line` (as [`in_line`] sorts it) with `--max-holders`
/// `ours`.
///
/// Every candidate ahead must record the same N: why no two candidacies with different N hold at
/// once: of two that do, the one behind saw the one ahead (created before it and still there, as
/// above) at every look it took, and answered `Mismatch` instead of holding. A candidate behind
/// is not compared: it compares itself with this one. A newcomer may also meet a node that is
/// itself about to leave with a mismatch; then both leave (the operator's values disagree).
fn place_in(line: &[String], own: &str, ours: u32) -> Place {
    let Some(position) = line.iter().position(|c| c == own) else {
        return Place::Gone;
    };
    if let Some(theirs) = line[..position]
        .iter()
        .map(|c| max_holders_of(c))
        .find(|&theirs| theirs != ours)
    {
        return Place::Mismatch(theirs);
    }
    if position < ours as usize {
        Place::Holds
    } else {
        Place::Waits(position)
    }
}

/// The `--max-holders` of the candidates in `line` and how many of its first nodes hold: the
/// oldest candidate's N (1 for an empty line), and the first N of the candidates before the
/// first one that records another N (each of those, and everyone behind it, leaves with a
/// mismatch).
fn holders_in(line: &[String]) -> (u32, usize) {
    let Some(first) = line.first() else {
        return (1, 0);
    };
    let n = max_holders_of(first);
    let holding = line
        .iter()
        .take_while(|c| max_holders_of(c) == n)
        .take(n as usize)
        .count();
    (n, holding)
}

/// A random id in the form of a UUID (version 4), as Curator's protection uses.
fn protection_id() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if filled.is_err() {
        // Unique enough without /dev/urandom: pid, time and a counter.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes[..8].copy_from_slice(&(std::process::id() as u64).to_be_bytes());
        bytes[8..].copy_from_slice(&(now as u64).to_be_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
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

/// Whether an ACL gives every client (`world:anyone`) more than read.
fn open_to_everyone(acls: &[Acl]) -> bool {
    acls.iter().any(|acl| {
        acl.scheme() == "world"
            && acl.id() == "anyone"
            && acl.permission() != Permission::READ
            && acl.permission() != Permission::NONE
    })
}

/// What [`ZooKeeper::holders_of`] read.
struct Line {
    holders: Vec<Leader>,
    max_holders: u32,
    candidates: i64,
    revision: i64,
}

/// A session on which a `sync` was answered: the only way to [`ZooKeeper::holders_of`], so that
/// no observer reads the line without one (see [`ZooKeeper::synced`]).
struct Synced(zk::Client);

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

    async fn connect(&self) -> Result<zk::Client, StoreError> {
        let mut connector = zk::Client::connector().with_session_timeout(self.timing.ttl);
        if let Some(digest) = &self.target.digest {
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        match tokio::time::timeout(
            self.connect_timeout,
            connector.connect(&self.target.connect),
        )
        .await
        {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(StoreError::Transient(format!(
                "ZooKeeper at {} did not establish a session within --connect-timeout ({})",
                self.target.shown,
                humantime::format_duration(self.connect_timeout)
            ))),
        }
    }

    /// The current session, or a new one when there is none or it has ended.
    async fn client(&self) -> Result<zk::Client, StoreError> {
        if let Some(client) = self.session.lock().expect("not poisoned").as_ref()
            && !client.state().is_terminated()
        {
            return Ok(client.clone());
        }
        let client = self.connect().await?;
        *self.session.lock().expect("not poisoned") = Some(client.clone());
        Ok(client)
    }

    /// The ACL for every node this instance creates: see [`CREATOR_ALL_ANYONE_READ`]. Without
    /// credentials there is no identity to give rights to, and nodes are open (docs/zookeeper.md, ACLs).
    fn acls(&self) -> Acls<'static> {
        if self.target.digest.is_some() {
            Acls::new(&CREATOR_ALL_ANYONE_READ)
        } else {
            Acls::anyone_all()
        }
    }

    /// The session for a read that answers "who leads" to an operator (`status`, `status --all`,
    /// `check`, `watch`, `resign`), after a `sync` of `path`.
    ///
    /// A server answers reads from its own copy, and a follower may lag behind the ensemble's
    /// leader: without the `sync` it could still show a deposed leader, and `check` would accept
    /// its token. `sync` makes the server catch up with the leader first, so the reads after it
    /// on this session see every write committed before the `sync` was sent. Should the session
    /// move to another server in between, the client refuses a server that has seen less than
    /// the session already has (the connect request carries the last zxid it saw).
    async fn synced(&self, path: &str) -> Result<Synced, StoreError> {
        let client = self.client().await?;
        match client.sync(path).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(Synced(client)),
            Err(e) => Err(classify(e)),
        }
    }

    /// Completes when the server negotiated, on the session's current connection, a timeout
    /// shorter than `--renew-deadline + --kill-after + margin` (see `ZkKeeper` in store.rs); never for the
    /// subcommands, which need nothing.
    async fn session_timeout_shrunk(&self) {
        let Some(client) = self.session_of() else {
            return std::future::pending().await;
        };
        let mut watcher = client.negotiated_session_timeout_watcher();
        let mut negotiated = watcher.timeout();
        while negotiated >= self.timing.needed {
            negotiated = watcher.changed().await;
        }
        tracing::warn!(
            event = "session-timeout-shrunk",
            negotiated_ms = negotiated.as_millis() as u64,
            "ZooKeeper renegotiated the session timeout on a new connection: {} is less than --renew-deadline + --kill-after + margin ({}); the server may now expire the session before the command is stopped, so it is stopped at once",
            humantime::format_duration(negotiated),
            humantime::format_duration(self.timing.needed)
        );
    }

    /// The nodes on the election's path (the prefix's nodes, the election, `.leaders`,
    /// `.occurrences`) that give everyone more than read: created without credentials, by an
    /// older leader-exec, or by another client. Their ACL is theirs, not ours to change.
    async fn open_nodes(&self, client: &zk::Client) -> Vec<String> {
        let mut paths = Vec::new();
        let mut path = String::new();
        for part in self.base.split('/').filter(|p| !p.is_empty()) {
            path.push('/');
            path.push_str(part);
            paths.push(path.clone());
        }
        paths.push(self.election.clone());
        paths.push(format!("{}/.leaders", self.base));
        paths.push(format!("{}/{TOKENS}", self.base));
        paths.push(marker_path(&self.election));
        paths.push(format!("{}/.occurrences", self.base));
        let mut open = Vec::new();
        for path in paths {
            if let Ok((acls, _)) = client.get_acl(&path).await
                && open_to_everyone(&acls)
            {
                open.push(path);
            }
        }
        open
    }

    /// Completes once the candidacy's own node has been deleted (or its session ended).
    async fn own_node_gone(&self, candidacy: &Candidacy) {
        let mut backoff = Backoff::new();
        loop {
            let Some(client) = self.session_of() else {
                return;
            };
            match client.check_and_watch_stat(&candidacy.key).await {
                Ok((None, _)) => return,
                Ok((Some(stat), _)) if stat.czxid != candidacy.place => return,
                Ok((Some(_), watcher)) => {
                    let event = watcher.changed().await;
                    if event.event_type == EventType::NodeDeleted
                        || event.session_state.is_terminated()
                    {
                        return;
                    }
                }
                // An expired session took its ephemeral nodes with it.
                Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                Err(e) => {
                    tracing::debug!(error = %classify(e), "watching our own node failed; trying again");
                    backoff.sleep().await;
                }
            }
        }
    }

    /// The node path for a key the rest of the tool names (`PREFIX .occurrences/NAME/ID`,
    /// `PREFIX .leaders/NAME`), or for a listing prefix (`PREFIX .occurrences/` …, trailing '/').
    fn path_of(&self, key: &str) -> String {
        let rest = key.strip_prefix(&self.prefix).unwrap_or(key);
        let mut parts = rest.splitn(3, '/');
        let mut path = self.base.clone();
        for (i, part) in (&mut parts).enumerate() {
            if part.is_empty() {
                break;
            }
            path.push('/');
            if i < 2 {
                path.push_str(part);
            } else {
                path.push_str(&encode_name(part));
            }
        }
        path
    }

    fn parent(path: &str) -> &str {
        &path[..path.rfind('/').unwrap_or(0)]
    }

    /// Children of the election in line; empty when the election node does not exist.
    async fn line(client: &zk::Client, election: &str) -> Result<(Vec<String>, i64), StoreError> {
        match client.get_children(election).await {
            Ok((children, stat)) => Ok((in_line(children), stat.pzxid)),
            Err(zk::Error::NoNode) => Ok((Vec::new(), 0)),
            Err(e) => Err(classify(e)),
        }
    }

    /// The holders of the election at `election` (oldest first; with `--max-holders` 1 the
    /// leader alone), the N they record, how many stand in line, and the election node's pzxid.
    async fn holders_of(synced: &Synced, election: &str) -> Result<Line, StoreError> {
        let client = &synced.0;
        // The line and the holders' data are reads after it: a holder that left in between is
        // read again from a fresh line.
        'again: for _ in 0..5 {
            let (line, revision) = Self::line(client, election).await?;
            let (max_holders, holding) = holders_in(&line);
            let paths: Vec<String> = line[..holding]
                .iter()
                .map(|name| format!("{election}/{name}"))
                .collect();
            // Sent together (the library sends in call order), answered in order; with N = 1
            // the leader mark too, read after the line (a mark written since is seen).
            let reads: Vec<_> = paths.iter().map(|path| client.get_data(path)).collect();
            let marker = marker_path(election);
            let mark = if max_holders == 1 && holding > 0 {
                Self::mark_of(client, &marker).await?
            } else {
                None
            };
            let mut holders = Vec::with_capacity(holding);
            for ((read, path), name) in reads.into_iter().zip(&paths).zip(&line) {
                match read.await {
                    // With N > 1 a node among the first N holds once it has touched itself
                    // (`touch`): before, its candidacy has no token and its command has not
                    // started, and its `mzxid` (still its czxid) is a zxid no holder was given,
                    // possibly below tokens already handed out. Readers (`status`, `check`,
                    // `watch`, `resign`) show it from its touch on; `changed_since` watches it.
                    Ok((_, stat)) if max_holders > 1 && stat.mzxid == stat.czxid => {}
                    Ok((identity, stat)) => holders.push(Leader {
                        key: path.clone().into_bytes(),
                        identity,
                        token: token_of(name, &stat, mark.as_ref()),
                        lease_id: (stat.ephemeral_owner != 0).then_some(stat.ephemeral_owner),
                        // Before its mark, a leader-exec leader has no token yet (it is given
                        // the mark's zxid); a Curator leader never marks.
                        provisional: max_holders == 1 && !marked(name, &stat, mark.as_ref()),
                    }),
                    Err(zk::Error::NoNode) => continue 'again,
                    Err(e) => return Err(classify(e)),
                }
            }
            // Oldest first means the first made a holder: by token, the zxid of the touch. Two
            // candidacies among the first N touch in either order, so line order need not be
            // token order; sorted, the first (the leader) has the least token of every current
            // holder, as on the other stores.
            holders.sort_by_key(|h| h.token);
            return Ok(Line {
                holders,
                max_holders,
                candidates: line.len() as i64,
                revision,
            });
        }
        Err(StoreError::Transient(
            "ZooKeeper: the line kept changing while it was read".into(),
        ))
    }

    /// The leader mark at `marker`, if there is one.
    async fn mark_of(client: &zk::Client, marker: &str) -> Result<Option<Mark>, StoreError> {
        match client.get_data(marker).await {
            Ok((node, stat)) => Ok(Some(Mark {
                node,
                zxid: stat.mzxid,
            })),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    /// Makes a candidacy that may lead, with `--max-holders` 1, the leader: a write of its own
    /// node's name to the election's leader mark (`PREFIX .tokens/NAME`), in one transaction
    /// with a check that its node still exists. The zxid of that write (the mark's new `mzxid`)
    /// is the token (see [`Place::Holds`] for why it exceeds every earlier token). Not on the
    /// candidate node itself: Curator's `LeaderLatch` watches the node ahead of it with a
    /// `getData` watch and ignores every event but its deletion, so a write to a leader's node
    /// would use up that watch and leave a Curator waiter behind it asleep for good.
    ///
    /// Not version-checked: a mark whose answer was lost is written again by the next look, and
    /// a later mark only raises the token, before it was handed out. A mark from an earlier
    /// leader is simply overwritten; readers take a mark's zxid only for the node it names.
    async fn mark(&self, client: &zk::Client, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let marker = marker_path(&self.election);
        let own = candidacy.key.rsplit('/').next().unwrap_or_default();
        for _ in 0..3 {
            let mut writer = client
                .new_check_writer(&candidacy.key, None)
                .map_err(classify)?;
            writer
                .add_set_data(&marker, own.as_bytes(), None)
                .map_err(classify)?;
            match writer.commit().await {
                Ok(results) => {
                    return match results.last() {
                        Some(zk::MultiWriteResult::SetData { stat }) => {
                            self.observe(stat);
                            Ok(Turn::Leading { token: stat.mzxid })
                        }
                        _ => Err(StoreError::Transient(
                            "ZooKeeper: the leader mark's write answered without its stat".into(),
                        )),
                    };
                }
                // Our node is gone (deleted, or its session expired).
                Err(zk::CheckWriteError::CheckFailed { .. }) => return Ok(Turn::Gone),
                Err(zk::CheckWriteError::RequestFailed {
                    source: zk::Error::SessionExpired,
                }) => return Ok(Turn::Gone),
                // No mark yet (the first leader of this name): made empty, then written.
                Err(zk::CheckWriteError::OperationFailed {
                    source: zk::Error::NoNode,
                    ..
                }) => {
                    client
                        .mkdir(&marker, &CreateMode::Persistent.with_acls(self.acls()))
                        .await
                        .map_err(classify)?;
                }
                Err(zk::CheckWriteError::OperationFailed { source, .. })
                | Err(zk::CheckWriteError::RequestFailed { source }) => {
                    return Err(classify(source));
                }
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: {marker} kept disappearing"
        )))
    }

    /// A write that commits only while the candidacy's own node still exists (the fence): a
    /// candidate that led keeps leading while its node exists, since nobody can create a node
    /// ahead of it. `Ok(false)`: the node is gone. `ops` adds the writes after the check.
    /// Answers the servers' time stamped on the last node written, when the answer has it.
    async fn fenced(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        ops: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<Result<Option<records::ServerTime>, zk::Error>, StoreError> {
        let mut writer = client
            .new_check_writer(&candidacy.key, None)
            .map_err(classify)?;
        ops(&mut writer).map_err(classify)?;
        match writer.commit().await {
            Ok(results) => Ok(Ok(results.iter().rev().find_map(|r| match r {
                zk::MultiWriteResult::Create { stat, .. }
                | zk::MultiWriteResult::SetData { stat } => records::ServerTime::of(stat),
                _ => None,
            }))),
            Err(zk::CheckWriteError::CheckFailed { .. }) => Ok(Err(zk::Error::RuntimeInconsistent)),
            Err(zk::CheckWriteError::OperationFailed { source, .. }) => Ok(Err(source)),
            Err(zk::CheckWriteError::RequestFailed { source }) => Err(classify(source)),
        }
    }

    /// Writes `path` fenced: `create` when it does not exist, `replace` when it does. Which one
    /// applies is read from the answers (a node may appear or go in between). `Ok(None)`: the
    /// fence said no; `Ok(Some(time))`: written, with the servers' time of the write if the
    /// answer had it.
    async fn create_or_replace(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        path: &str,
        create: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
        replace: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<Option<Option<records::ServerTime>>, StoreError> {
        for _ in 0..3 {
            match self.fenced(client, candidacy, &create).await? {
                Ok(time) => return Ok(Some(time)),
                Err(zk::Error::RuntimeInconsistent) => return Ok(None),
                Err(zk::Error::NodeExists) => {}
                // The parents are made on the first write that needs them, not before every one.
                Err(zk::Error::NoNode) => {
                    client
                        .mkdir(
                            Self::parent(path),
                            &CreateMode::Persistent.with_acls(self.acls()),
                        )
                        .await
                        .map_err(classify)?;
                    continue;
                }
                Err(e) => return Err(classify(e)),
            }
            match self.fenced(client, candidacy, &replace).await? {
                Ok(time) => return Ok(Some(time)),
                Err(zk::Error::RuntimeInconsistent) => return Ok(None),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: {path} kept appearing and disappearing"
        )))
    }

    /// Makes a candidacy that may hold a holder, with `--max-holders` N > 1: a `setData` of its
    /// own node with the data it already holds. The zxid of that write (the node's new `mzxid`)
    /// is the token (see [`Place::Holds`] for why it exceeds every earlier token), and the write
    /// fires the exists-watch of the waiter behind, which is now the first waiter and must watch
    /// the holders instead (see `predecessor_gone`).
    ///
    /// Not version-checked: a touch whose answer was lost is sent again by the next look, and
    /// the node's own czxid in the answer says it is still ours; a later touch only raises the
    /// token, before it was handed out.
    async fn touch(&self, client: &zk::Client, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        match client
            .set_data(&candidacy.key, self.identity.as_bytes(), None)
            .await
        {
            Ok(stat) if stat.czxid == candidacy.place => {
                self.observe(&stat);
                Ok(Turn::Leading { token: stat.mzxid })
            }
            // Another node at our path: ours is gone.
            Ok(_) => Ok(Turn::Gone),
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => Ok(Turn::Gone),
            Err(e) => Err(classify(e)),
        }
    }

    /// Keeps the servers' time a write of ours was stamped with (see records.rs).
    fn observe(&self, stat: &zk::Stat) {
        if let Some(time) = records::ServerTime::of(stat) {
            *self.server_time.lock().expect("not poisoned") = Some(time);
        }
    }

    /// A lower bound of the servers' time now, if a write of this process has shown it.
    fn server_now(&self) -> Option<i64> {
        self.server_time
            .lock()
            .expect("not poisoned")
            .map(|t| t.now())
    }

    /// Stops a sweep still running: its client clone would keep a released session open.
    fn stop_sweep(&self) {
        if let Some(sweep) = self.sweep.lock().expect("not poisoned").take() {
            sweep.abort();
        }
    }

    /// Lets a sweep still running finish, for at most `SWEEP_GRACE`, then stops it. Called
    /// once the claim is released (the next leader waits for nothing here): a quick command
    /// would otherwise end every sweep before it deleted anything.
    async fn finish_sweep(&self) {
        let Some(mut sweep) = self.sweep.lock().expect("not poisoned").take() else {
            return;
        };
        if tokio::time::timeout(records::SWEEP_GRACE, &mut sweep)
            .await
            .is_err()
        {
            sweep.abort();
        }
    }

    fn session_of(&self) -> Option<zk::Client> {
        self.session.lock().expect("not poisoned").clone()
    }

    /// The URL's chroot (`/PATH`), or "" without one.
    fn chroot(&self) -> &str {
        let connect = &self.target.connect;
        connect.find('/').map_or("", |i| &connect[i..])
    }

    /// Err naming the chroot if the URL has one and it does not exist. Every path this client
    /// reads is below the chroot, so below a missing one an election reads as one nobody stands
    /// in: a reader would report "no leader" for a typo in the URL.
    async fn chroot_exists(&self, client: &zk::Client) -> Result<(), StoreError> {
        if self.chroot().is_empty() {
            return Ok(());
        }
        match client.check_stat("/").await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(StoreError::Fatal(format!(
                "ZooKeeper: the chroot {} of {} does not exist; create it first (/usr/share/zookeeper/bin/zkCli.sh -server {} create {})",
                self.chroot(),
                self.target.shown,
                crate::escape::shell_quote(self.connect_string_hosts()),
                crate::escape::shell_quote(self.chroot())
            ))),
            Err(e) => Err(classify(e)),
        }
    }

    fn connect_string_hosts(&self) -> &str {
        self.target
            .connect
            .split('/')
            .next()
            .unwrap_or(&self.target.connect)
    }
}

#[cfg(test)]
mod tests;
