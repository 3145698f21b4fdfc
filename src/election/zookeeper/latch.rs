//! The line, as Curator's `LeaderLatch` keeps it: candidate node names and their order, where a
//! candidacy stands ([`Place`]), the holders as readers see them, and the writes that make a
//! candidacy a leader (the leader mark, [`ZooKeeper::mark`]) or a holder (its touch), whose zxid
//! is its token.

use super::*;

/// The key Curator sorts candidates by: the text after the last `latch-`, or the whole name.
pub(super) fn sort_key(name: &str) -> &str {
    match name.rfind(LATCH) {
        Some(i) => &name[i + LATCH.len()..],
        None => name,
    }
}

/// Candidates in line, as Curator's `LeaderLatch` orders them.
pub(super) fn in_line(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
}

/// The name of a candidate node before the sequence suffix the server appends: Curator's
/// protected `LeaderLatch` name with `--max-holders` 1, the same with `holders-N-` before
/// `latch-` otherwise (see the module comment of mod.rs, Semaphores).
pub(super) fn candidate_name(protection: &str, max_holders: u32) -> String {
    if max_holders == 1 {
        format!("_c_{protection}-{LATCH}")
    } else {
        format!("_c_{protection}-{HOLDERS}{max_holders}-{LATCH}")
    }
}

/// The `--max-holders` a candidate node's name records: N from `…-holders-N-latch-…`, 1 for a
/// name without that marker (Curator's, an older leader-exec's, one with `--max-holders` 1) or
/// with a marker that is not a number from 1 to 1000 (names are untrusted bytes).
pub(super) fn max_holders_of(name: &str) -> u32 {
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
pub(super) fn marker_path(election: &str) -> String {
    match election.rsplit_once('/') {
        Some((base, name)) => format!("{base}/{TOKENS}/{name}"),
        None => format!("{TOKENS}/{election}"),
    }
}

/// The leader mark of an election (`--max-holders` 1): the name of the candidate node that wrote
/// it last, and the zxid of that write (the mark's `mzxid`), which is that leader's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    pub(super) node: Vec<u8>,
    pub(super) zxid: i64,
}

/// The fencing token of the candidate node `name` with this stat, given the election's leader
/// mark: with `--max-holders` N > 1 its `mzxid`, the zxid of the touch that made it a holder;
/// with N = 1 the zxid of the mark it wrote on leading, once the mark names it (see
/// [`Place::Holds`] for why neither is the czxid). A node the mark does not name has not marked
/// yet, or is Curator's (which never marks): its czxid, the token of earlier versions, which no
/// leader-exec command is given any more.
pub(super) fn token_of(name: &str, stat: &zk::Stat, mark: Option<&Mark>) -> i64 {
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
pub(super) fn marked(name: &str, stat: &zk::Stat, mark: Option<&Mark>) -> bool {
    mark.is_some_and(|mark| mark.node == name.as_bytes() && mark.zxid > stat.czxid)
}

/// Where a candidacy stands in a line read in one `getChildren`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Place {
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
pub(super) fn place_in(line: &[String], own: &str, ours: u32) -> Place {
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
pub(super) fn holders_in(line: &[String]) -> (u32, usize) {
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
pub(super) fn protection_id() -> String {
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

/// What [`ZooKeeper::holders_of`] read.
pub(super) struct Line {
    pub(super) holders: Vec<Leader>,
    pub(super) max_holders: u32,
    pub(super) candidates: i64,
    pub(super) revision: i64,
}

impl ZooKeeper {
    /// Children of the election in line; empty when the election node does not exist.
    pub(super) async fn line(
        client: &zk::Client,
        election: &str,
    ) -> Result<(Vec<String>, i64), StoreError> {
        match client.get_children(election).await {
            Ok((children, stat)) => Ok((in_line(children), stat.pzxid)),
            Err(zk::Error::NoNode) => Ok((Vec::new(), 0)),
            Err(e) => Err(classify(e)),
        }
    }

    /// The holders of the election at `election` (oldest first; with `--max-holders` 1 the
    /// leader alone), the N they record, how many stand in line, and the election node's pzxid.
    pub(super) async fn holders_of(synced: &Synced, election: &str) -> Result<Line, StoreError> {
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
    pub(super) async fn mark_of(
        client: &zk::Client,
        marker: &str,
    ) -> Result<Option<Mark>, StoreError> {
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
    pub(super) async fn mark(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
    ) -> Result<Turn, StoreError> {
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

    /// Makes a candidacy that may hold a holder, with `--max-holders` N > 1: a `setData` of its
    /// own node with the data it already holds. The zxid of that write (the node's new `mzxid`)
    /// is the token (see [`Place::Holds`] for why it exceeds every earlier token), and the write
    /// fires the exists-watch of the waiter behind, which is now the first waiter and must watch
    /// the holders instead (see `predecessor_gone`).
    ///
    /// Not version-checked: a touch whose answer was lost is sent again by the next look, and
    /// the node's own czxid in the answer says it is still ours; a later touch only raises the
    /// token, before it was handed out.
    pub(super) async fn touch(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
    ) -> Result<Turn, StoreError> {
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
}
