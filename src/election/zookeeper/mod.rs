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
//!   path are percent-encoded. Retention is pruning on read: the data is one line
//!   `leader-exec-expires-ms=<unix ms>` then the record; a reader treats a record past that
//!   instant as absent and the run form deletes it (TTL nodes need the server's
//!   `extendedTypesEnabled`, which is off by default).
//!
//! The fencing token is the leader node's `czxid`, the zxid of the transaction that created it.
//! Not the sequence suffix: that comes from the parent's `cversion`, an int32 that starts again
//! at 0 when the parent is deleted (a container node is, once empty), so two leaders could show
//! the same suffix. zxids are global to the ensemble and only grow. Within one incarnation of
//! the parent, sequence order and czxid order agree (both follow the order of the creates), so
//! the next leader — a node that stood behind this one, or a newer one — has a higher czxid.
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

mod store;
pub mod target;

use zookeeper_client::{self as zk, Acl, Acls, CreateMode, EventType, Permission, SessionState};

use super::{
    Ahead, Backoff, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    Observation, RawRecord, Read, Records, Renewal, StoreError, Turn,
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

/// The timing a ZooKeeper backend needs.
#[derive(Clone, Copy, Debug)]
pub struct ZkTiming {
    /// The session timeout to request (`--ttl`).
    pub ttl: Duration,
    /// `--renew-deadline + --kill-after + margin`: the least negotiated timeout that is safe.
    /// Zero for a reader, which holds nothing.
    pub needed: Duration,
    /// Bounds establishing a session.
    pub connect_timeout: Duration,
}

/// The session timeout a reader asks for.
const READER_SESSION: Duration = Duration::from_secs(10);

const LATCH: &str = "latch-";
const EXPIRES: &str = "leader-exec-expires-ms=";

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
    timing: ZkTiming,
    /// `--max-holders` (1 for a reader, which holds nothing).
    max_holders: u32,
    /// The current session: a campaign's, or the subcommands' one.
    session: Mutex<Option<zk::Client>>,
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

/// A record's data: the expiry line, then the record.
fn with_expiry(value: &[u8], retention: Duration) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let until = now.saturating_add(retention).as_millis();
    let mut data = format!("{EXPIRES}{until}\n").into_bytes();
    data.extend_from_slice(value);
    data
}

/// The record inside a record node's data, `None` once it has expired. Data without the expiry
/// line (written by something else) is returned whole and never expires.
fn unexpired(data: Vec<u8>) -> Option<Vec<u8>> {
    let Some(rest) = data.strip_prefix(EXPIRES.as_bytes()) else {
        return Some(data);
    };
    let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
        return Some(data);
    };
    let until: Option<u128> = std::str::from_utf8(&rest[..newline])
        .ok()
        .and_then(|t| t.parse().ok());
    let Some(until) = until else {
        return Some(data);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    (now < until).then(|| rest[newline + 1..].to_vec())
}

/// A session on which a `sync` was answered: the only way to [`ZooKeeper::leader_of`], so that
/// no observer reads the line without one (see [`ZooKeeper::synced`]).
struct Synced(zk::Client);

impl ZooKeeper {
    /// `lease` may be empty (`status --all`: no election of its own).
    pub fn new(
        target: Target,
        prefix: &str,
        lease: &str,
        identity: String,
        timing: ZkTiming,
        max_holders: u32,
    ) -> Result<ZooKeeper, StoreError> {
        for (flag, text) in [("--prefix", prefix), ("--lease", lease)] {
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
            prefix: prefix.to_owned(),
            target,
            identity,
            timing,
            max_holders,
            session: Mutex::new(None),
        })
    }

    /// ZooKeeper for reading and administration (`status`, `watch`, `check`, `resign`): a
    /// session of its own, held only while they run. It holds no election node, so nothing
    /// depends on the session's timeout but how soon the server forgets a reader that died.
    pub fn reader(
        target: Target,
        prefix: &str,
        lease: &str,
        connect_timeout: Duration,
    ) -> Result<ZooKeeper, StoreError> {
        let timing = ZkTiming {
            ttl: READER_SESSION,
            needed: Duration::ZERO,
            connect_timeout,
        };
        ZooKeeper::new(target, prefix, lease, String::new(), timing, 1)
    }

    async fn connect(&self) -> Result<zk::Client, StoreError> {
        let mut connector = zk::Client::connector().with_session_timeout(self.timing.ttl);
        if let Some(digest) = &self.target.digest {
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        match tokio::time::timeout(
            self.timing.connect_timeout,
            connector.connect(&self.target.connect),
        )
        .await
        {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(StoreError::Transient(format!(
                "ZooKeeper at {} did not establish a session within --connect-timeout ({})",
                self.target.shown,
                humantime::format_duration(self.timing.connect_timeout)
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

    /// The leader of the election at `election`, and how many stand in line.
    async fn leader_of(
        synced: &Synced,
        election: &str,
    ) -> Result<(Option<Leader>, i64, i64), StoreError> {
        let client = &synced.0;
        // The line and the leader's data are two reads: a leader that left in between is read
        // again from a fresh line.
        for _ in 0..5 {
            let (line, revision) = Self::line(client, election).await?;
            let Some(first) = line.first() else {
                return Ok((None, 0, revision));
            };
            let path = format!("{election}/{first}");
            match client.get_data(&path).await {
                Ok((identity, stat)) => {
                    let leader = Leader {
                        key: path.into_bytes(),
                        identity,
                        token: stat.czxid,
                        lease_id: (stat.ephemeral_owner != 0).then_some(stat.ephemeral_owner),
                    };
                    return Ok((Some(leader), line.len() as i64, revision));
                }
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(
            "ZooKeeper: the line kept changing while it was read".into(),
        ))
    }

    /// A write that commits only while the candidacy's own node still exists (the fence): a
    /// candidate that led keeps leading while its node exists, since nobody can create a node
    /// ahead of it. `Ok(false)`: the node is gone. `ops` adds the writes after the check.
    async fn fenced(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        ops: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<Result<(), zk::Error>, StoreError> {
        let mut writer = client
            .new_check_writer(&candidacy.key, None)
            .map_err(classify)?;
        ops(&mut writer).map_err(classify)?;
        match writer.commit().await {
            Ok(_) => Ok(Ok(())),
            Err(zk::CheckWriteError::CheckFailed { .. }) => Ok(Err(zk::Error::RuntimeInconsistent)),
            Err(zk::CheckWriteError::OperationFailed { source, .. }) => Ok(Err(source)),
            Err(zk::CheckWriteError::RequestFailed { source }) => Err(classify(source)),
        }
    }

    /// Writes `path` fenced: `create` when it does not exist, `replace` when it does. Which one
    /// applies is read from the answers (a node may appear or go in between). `Ok(false)`: the
    /// fence said no.
    async fn create_or_replace(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        path: &str,
        create: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
        replace: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<bool, StoreError> {
        for _ in 0..3 {
            match self.fenced(client, candidacy, &create).await? {
                Ok(()) => return Ok(true),
                Err(zk::Error::RuntimeInconsistent) => return Ok(false),
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
                Ok(()) => return Ok(true),
                Err(zk::Error::RuntimeInconsistent) => return Ok(false),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: {path} kept appearing and disappearing"
        )))
    }

    fn session_of(&self) -> Option<zk::Client> {
        self.session.lock().expect("not poisoned").clone()
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
mod tests {
    use super::*;

    #[test]
    fn ids_become_one_node_name_and_back() {
        for id in [
            "statements:2026-11-29",
            "a/b",
            ".hidden",
            "..",
            "50%",
            "x\u{e000}y",
        ] {
            let name = encode_name(id);
            assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
            assert!(name.chars().all(allowed), "{name}");
            assert_eq!(decode_name(&name), id.as_bytes(), "{id}");
        }
        assert_eq!(encode_name("a/b"), "a%2Fb");
    }

    #[test]
    fn candidates_sort_as_curator_sorts_them() {
        let line = in_line(vec![
            "_c_bbbb-latch-0000000010".into(),
            "_c_aaaa-latch-0000000002".into(),
            "_c_cccc-latch-0000000007".into(),
        ]);
        assert_eq!(
            line,
            [
                "_c_aaaa-latch-0000000002",
                "_c_cccc-latch-0000000007",
                "_c_bbbb-latch-0000000010"
            ]
        );
    }

    #[test]
    fn records_expire_on_read() {
        let live = with_expiry(b"{}", Duration::from_secs(60));
        assert_eq!(unexpired(live).as_deref(), Some(&b"{}"[..]));
        let dead = format!("{EXPIRES}1\n{{}}").into_bytes();
        assert_eq!(unexpired(dead), None);
        assert_eq!(unexpired(b"raw".to_vec()).as_deref(), Some(&b"raw"[..]));
    }

    #[test]
    fn only_acls_that_let_everyone_write_are_open() {
        assert!(open_to_everyone(&Acls::anyone_all()));
        assert!(!open_to_everyone(&CREATOR_ALL_ANYONE_READ));
        assert!(!open_to_everyone(&Acls::anyone_read()));
        assert!(!open_to_everyone(&Acls::creator_all()));
        let create_only = Acl::new(Permission::CREATE, zk::AuthId::anyone());
        assert!(open_to_everyone(&[create_only]));
    }

    #[test]
    fn protection_ids_look_like_uuids() {
        let id = protection_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        assert_ne!(id, protection_id());
    }
}
