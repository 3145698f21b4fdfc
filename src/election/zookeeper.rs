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
//! when it does not fit.

use std::sync::Mutex;
use std::time::Duration;

use zookeeper_client::{self as zk, Acls, CreateMode, EventType, SessionState};

use super::{
    Ahead, Backend, Backoff, Candidacy, Election, Keeper, Leader, LeaseTime, Observation,
    RawRecord, Renewal, StoreError, Turn,
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
            .field("connect", &self.connect)
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
    /// Zero for the subcommands, which hold nothing.
    pub needed: Duration,
    /// Bounds establishing a session.
    pub connect_timeout: Duration,
}

const LATCH: &str = "latch-";
const EXPIRES: &str = "leader-exec-expires-ms=";

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

impl ZooKeeper {
    /// `lease` may be empty (`status --all`: no election of its own).
    pub fn new(
        target: Target,
        prefix: &str,
        lease: &str,
        identity: String,
        timing: ZkTiming,
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
            session: Mutex::new(None),
        })
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
        client: &zk::Client,
        election: &str,
    ) -> Result<(Option<Leader>, i64, i64), StoreError> {
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
                            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
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

impl Backend for ZooKeeper {
    type Keeper = ZkKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        // A campaign opens its own session: a session that expired (an earlier loss) can never
        // come back, and closing the previous one releases whatever it still held.
        let previous = self.session.lock().expect("not poisoned").take();
        drop(previous);
        let client = self.connect().await?;
        let negotiated = client.session_timeout();
        if negotiated < self.timing.needed {
            return Err(StoreError::Fatal(format!(
                "ZooKeeper negotiated a session timeout of {} for --ttl {}: --renew-deadline + --kill-after + margin need {}; raise the servers' maxSessionTimeout or lower --renew-deadline and --kill-after",
                humantime::format_duration(negotiated),
                humantime::format_duration(self.timing.ttl),
                humantime::format_duration(self.timing.needed),
            )));
        }
        if negotiated != self.timing.ttl {
            tracing::warn!(
                event = "session-timeout-negotiated",
                negotiated_ms = negotiated.as_millis() as u64,
                "ZooKeeper negotiated a session timeout of {} for --ttl {}: a leader that dies is replaced after the longer of the two",
                humantime::format_duration(negotiated),
                humantime::format_duration(self.timing.ttl)
            );
        }
        *self.session.lock().expect("not poisoned") = Some(client.clone());
        let protection = protection_id();
        let mine = format!("_c_{protection}-{LATCH}");
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let mut backoff = Backoff::new();
        for _ in 0..6 {
            // The election node is a container, as Curator creates it: the server deletes it
            // once empty. It can go between the mkdir and the create: then both run again.
            if let Err(e) = client
                .mkdir(
                    &self.election,
                    &CreateMode::Container.with_acls(Acls::anyone_all()),
                )
                .await
            {
                if e == zk::Error::NoNode {
                    // mkdir creates everything below the chroot, never the chroot itself.
                    return Err(StoreError::Fatal(format!(
                        "ZooKeeper: the chroot of {} does not exist; create it first (/usr/share/zookeeper/bin/zkCli.sh -server HOST:PORT create PATH)",
                        self.target.shown
                    )));
                }
                let e = classify(e);
                if !e.is_transient() {
                    return Err(e);
                }
                backoff.sleep().await;
                continue;
            }
            let created = client
                .create(
                    &format!("{}/{mine}", self.election),
                    self.identity.as_bytes(),
                    &options,
                )
                .await;
            match created {
                Ok((stat, sequence)) => {
                    return Ok(Candidacy {
                        lease_id: Some(client.session_id().0),
                        key: format!("{}/{mine}{sequence}", self.election),
                        token: stat.czxid,
                    });
                }
                Err(zk::Error::NoNode) => continue,
                Err(zk::Error::SessionExpired) => {
                    return Err(StoreError::Transient(
                        "ZooKeeper: the session expired while campaigning".into(),
                    ));
                }
                Err(e) if classify(e.clone()).is_transient() => {
                    // The create may have committed without its answer: find the node by the
                    // protection id instead of creating a second one.
                    if let Ok(children) = client.list_children(&self.election).await
                        && let Some(name) = children.iter().find(|c| c.starts_with(&mine))
                    {
                        let key = format!("{}/{name}", self.election);
                        if let Ok(Some(stat)) = client.check_stat(&key).await {
                            return Ok(Candidacy {
                                lease_id: Some(client.session_id().0),
                                key,
                                token: stat.czxid,
                            });
                        }
                    }
                    backoff.sleep().await;
                }
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: could not create a candidate node under {}",
            self.election
        )))
    }

    fn keeper(&self, candidacy: &Candidacy) -> ZkKeeper {
        ZkKeeper {
            client: self.session_of(),
            path: candidacy.key.clone(),
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(Turn::Gone);
        };
        let line = match client.get_children(&self.election).await {
            Ok((children, _)) => in_line(children),
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => return Ok(Turn::Gone),
            Err(e) => return Err(classify(e)),
        };
        let own = candidacy.key.rsplit('/').next().unwrap_or_default();
        Ok(match line.iter().position(|c| c == own) {
            None => Turn::Gone,
            Some(0) => Turn::Leading {
                token: candidacy.token,
            },
            Some(i) => Turn::Behind(Ahead {
                key: format!("{}/{}", self.election, line[i - 1]).into_bytes(),
                revision: 0,
                expires_in: None,
            }),
        })
    }

    async fn predecessor_gone(&self, ahead: &Ahead) -> Result<(), StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(());
        };
        let path = String::from_utf8_lossy(&ahead.key).into_owned();
        match client.check_and_watch_stat(&path).await {
            Ok((None, _)) => Ok(()),
            // Deleted, or a session event: either way the caller looks again.
            Ok((Some(_), watcher)) => {
                watcher.changed().await;
                Ok(())
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn key_gone(&self, candidacy: &Candidacy) {
        let mut backoff = Backoff::new();
        loop {
            let Some(client) = self.session_of() else {
                return;
            };
            match client.check_and_watch_stat(&candidacy.key).await {
                Ok((None, _)) => return,
                Ok((Some(stat), _)) if stat.czxid != candidacy.token => return,
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

    async fn resign(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(());
        };
        // A session the client library reports ended cannot delete anything. The library also
        // says `Expired` on its own after failing to reconnect for a whole timeout, which an
        // ensemble without quorum has not decided yet: then the node stays until the servers
        // expire the session. Not a release, and not reported as one.
        let ended = || {
            StoreError::Fatal(format!(
                "ZooKeeper: the session {:#x} has ended; its nodes go when the servers expire it",
                client.session_id().0
            ))
        };
        if client.state().is_terminated() {
            return Err(ended());
        }
        match client.delete(&candidacy.key, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(zk::Error::SessionExpired) => return Err(ended()),
            Err(e) => return Err(classify(e)),
        }
        // The leader's state node is ephemeral on this session; closing the session (dropping
        // the last client) removes it too, but only once the close reaches the server.
        let state = self.path_of(&format!("{}.leaders/", self.prefix))
            + "/"
            + self.election.rsplit('/').next().unwrap_or_default();
        if let Ok(Some(stat)) = client.check_stat(&state).await
            && stat.ephemeral_owner == client.session_id().0
        {
            let _ = client.delete(&state, Some(stat.version)).await;
        }
        self.session.lock().expect("not poisoned").take();
        Ok(())
    }

    async fn observe(&self) -> Result<Observation, StoreError> {
        let client = self.client().await?;
        let (leader, candidates, revision) = Self::leader_of(&client, &self.election).await?;
        Ok(Observation {
            leader,
            candidates,
            revision,
        })
    }

    async fn changed_after(&self, revision: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        match client.get_and_watch_children(&self.election).await {
            Ok((_, stat, _)) if stat.pzxid != revision => Ok(()),
            Ok((_, _, watcher)) => {
                watcher.changed().await;
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                if revision != 0 {
                    return Ok(());
                }
                match client.check_and_watch_stat(&self.election).await {
                    Ok((Some(_), _)) => Ok(()),
                    Ok((None, watcher)) => {
                        watcher.changed().await;
                        Ok(())
                    }
                    Err(e) => Err(classify(e)),
                }
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let client = self.client().await?;
        let path = self.path_of(key);
        match client.get_data(&path).await {
            Ok((data, stat)) => match unexpired(data) {
                Some(value) => Ok(Some(value)),
                None => {
                    // Pruning on read: the version check keeps a record rewritten meanwhile.
                    let _ = client.delete(&path, Some(stat.version)).await;
                    Ok(None)
                }
            },
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(false);
        };
        let path = self.path_of(key);
        let data = with_expiry(&value, retention);
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        self.create_or_replace(
            &client,
            candidacy,
            &path,
            |w| w.add_create(&path, &data, &options),
            |w| w.add_set_data(&path, &data, None),
        )
        .await
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let client = self.client().await?;
        let path = self.path_of(prefix);
        // `PREFIX .occurrences/NAME/` lists IDs; `PREFIX .occurrences/` lists `NAME/ID`.
        let depth = prefix
            .strip_prefix(&self.prefix)
            .unwrap_or(prefix)
            .trim_end_matches('/')
            .split('/')
            .count();
        let mut out = Vec::new();
        let mut parents: Vec<(String, Vec<u8>)> = vec![(path, Vec::new())];
        if depth == 1 {
            parents = match client.list_children(&parents[0].0).await {
                Ok(names) => names
                    .into_iter()
                    .map(|n| {
                        (
                            format!("{}/{n}", parents[0].0),
                            format!("{n}/").into_bytes(),
                        )
                    })
                    .collect(),
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(classify(e)),
            };
        }
        for (parent, shown) in parents {
            let names = match client.list_children(&parent).await {
                Ok(names) => names,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(classify(e)),
            };
            for name in names {
                match client.get_data(&format!("{parent}/{name}")).await {
                    Ok((data, _)) => {
                        if let Some(value) = unexpired(data) {
                            let mut id = shown.clone();
                            id.extend(decode_name(&name));
                            out.push((id, value));
                        }
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(classify(e)),
                }
            }
        }
        Ok(out)
    }

    async fn observe_all(&self, prefix: &str) -> Result<Vec<Election>, StoreError> {
        let client = self.client().await?;
        let base = prefix.trim_end_matches('/');
        let mut names = match client.list_children(base).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(classify(e)),
        };
        names.sort();
        let mut elections = Vec::new();
        for name in names.into_iter().filter(|n| !n.starts_with('.')) {
            let (leader, candidates, _) =
                Self::leader_of(&client, &format!("{base}/{name}")).await?;
            if candidates > 0 {
                elections.push(Election {
                    name: name.into_bytes(),
                    leader,
                    candidates,
                });
            }
        }
        Ok(elections)
    }

    async fn delete_if_current(&self, key: &[u8], token: i64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let path = String::from_utf8_lossy(key).into_owned();
        // ZooKeeper cannot compare a czxid in a transaction; the version check closes the gap
        // between this read and the delete for everything but a delete-and-recreate of the same
        // path, and candidate paths hold their creator's own random id.
        match client.check_stat(&path).await.map_err(classify)? {
            Some(stat) if stat.czxid == token => {
                match client.delete(&path, Some(stat.version)).await {
                    Ok(()) => Ok(true),
                    Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
                    Err(e) => Err(classify(e)),
                }
            }
            _ => Ok(false),
        }
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let Some(client) = self.session_of() else {
            return Ok(false);
        };
        let path = self.path_of(key);
        let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        // A node from an earlier leader's session is replaced, not rewritten, so that it goes
        // with this session.
        self.create_or_replace(
            &client,
            candidacy,
            &path,
            |w| w.add_create(&path, &value, &options),
            |w| {
                w.add_delete(&path, None)?;
                w.add_create(&path, &value, &options)
            },
        )
        .await
    }

    fn restart_resets_leases(&self) -> bool {
        true
    }

    /// A client cannot read another session's remaining time from ZooKeeper.
    async fn lease_time(&self, _leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        Ok(None)
    }

    fn delete_record_hint(&self, key: &str) -> String {
        let path = self.path_of(key);
        let chroot = self
            .target
            .connect
            .find('/')
            .map_or("", |i| &self.target.connect[i..]);
        format!(
            "/usr/share/zookeeper/bin/zkCli.sh -server {} delete {}",
            crate::escape::shell_quote(self.connect_string_hosts()),
            crate::escape::shell_quote(&format!("{chroot}{path}"))
        )
    }

    fn store_name(&self) -> &'static str {
        "ZooKeeper"
    }
}

/// Renews the session: one `sync` and one `exists` on the candidacy's own node, sent together.
///
/// Why this proves the session alive until the send instant plus the timeout: a ZooKeeper
/// server expires a session a timeout after the last request it *received* from it (rounded up
/// to its next tick), and it received this one after it was sent. The client library's own
/// pings and its disconnect timer are not used as proof: the library notices a black hole only
/// after about 2/5 of the timeout, later than a short renew deadline. `sync` goes through the
/// ensemble's leader, so a follower that lost the leader (and so no longer relays this session's
/// activity to it) cannot answer it; a follower relays activity on its next ping to the leader,
/// every tickTime/2, which the margin must cover (README).
pub struct ZkKeeper {
    client: Option<zk::Client>,
    path: String,
}

impl Keeper for ZkKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let Some(client) = &self.client else {
            return Ok(Renewal::Expired);
        };
        if matches!(
            client.state(),
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
        ) {
            return Ok(Renewal::Expired);
        }
        // Both requests leave when called (the library sends in call order); awaited together.
        let sync = client.sync(&self.path);
        let exists = client.check_stat(&self.path);
        let (synced, existing) = futures_util::future::join(sync, exists).await;
        match synced.and(existing.map(|_| ())) {
            // The node's own fate (deleted by someone) is `key_gone`'s to report.
            Ok(()) | Err(zk::Error::NoNode) => Ok(Renewal::Alive),
            Err(zk::Error::SessionExpired) => Ok(Renewal::Expired),
            Err(e) => Err(classify(e)),
        }
    }

    /// Each renewal is its own pair of requests: nothing to forget.
    fn reset(&mut self) {}
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
    fn protection_ids_look_like_uuids() {
        let id = protection_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        assert_ne!(id, protection_id());
    }
}
