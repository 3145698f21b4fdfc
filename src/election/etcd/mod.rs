//! The election on etcd, in the key layout of etcd's own election recipe
//! (`concurrency.Election`, the v3election service, `etcdctl elect`):
//!
//! - candidates are keys `PREFIX NAME "/" <lease id in hex>`, attached to their lease, with the
//!   identity as value;
//! - the leader is the key with the lowest create-revision, which is also the fencing token;
//! - a waiter watches only the key just ahead of it, so a handover wakes exactly one waiter.
//!
//! With `--max-holders` N > 1 the line is the same; each candidate also writes a marker
//! `PREFIX ".holders/" NAME "/" <lease id in hex>` = N on its lease, and the holders are the front
//! of the line, at most N, each having taken its place with a put of its own key (see
//! `check_shared_turn`). N = 1 writes nothing beyond the recipe's keys.
//!
//! etcd-client quirks this module works around (measured against etcd 3.4):
//! - with several endpoints there is no failover inside a request; a dead member stays in the
//!   balancer and a share of calls fail at once with `Unavailable`. Callers retry, and the
//!   keep-alive stream is recreated after any error.
//! - `LeaseKeeper::keep_alive` only queues a message; the answer (or its absence, when etcd hangs)
//!   is on the response stream, so every renewal waits for its own answer under a caller's timer.
//! - a renewal of an expired lease is a normal answer with TTL 0, not an error.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, LeaseClient, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchFilterType,
    WatchOptions, WatchStream,
};

mod held;
mod holders;
pub mod probe;
pub mod target;
mod wake;

use holders::{MARKERS, Markers, holders_of, marker_prefix, marker_value, markers_ahead_of};

use super::{
    Ahead, Backoff, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    LeaseTiming, MismatchProbe, Observation, Open, RawRecord, Read, Records, Renewal, StoreError,
    Turn,
};
use target::Target;

/// The root cause of an error, when it is a TLS failure that trying again cannot cure: a
/// certificate that does not verify, a trust store without certificates, an alert by which the
/// server refused the handshake (a client certificate it rejects). A handshake cut short (EOF)
/// is not among them: a server that is starting or stopping does that too.
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    const MARKERS: [&str; 6] = [
        "certificate",
        "unknownissuer",
        "nativecertsnotfound",
        "native certs",
        "received fatal alert",
        "peer is incompatible",
    ];
    let mut chain = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        chain.push(e.to_string());
        current = e.source();
    }
    let deepest = chain.iter().rev().find(|m| !m.is_empty())?;
    let lower = chain.join(" ").to_lowercase();
    MARKERS
        .iter()
        .any(|m| lower.contains(m))
        .then(|| format!("TLS: {deepest}"))
}

/// Sorts etcd-client errors into "try again" and "give up".
pub fn classify(error: etcd_client::Error) -> StoreError {
    use etcd_client::Error;
    use tonic::Code;
    // etcd-client's error has no source(); its transport and status errors do.
    let tls = match &error {
        Error::TransportError(e) => tls_failure(e),
        Error::GRpcStatus(s) => tls_failure(s),
        Error::IoError(e) => tls_failure(e),
        _ => None,
    };
    if let Some(cause) = tls {
        return StoreError::Fatal(format!("etcd: {cause}"));
    }
    match error {
        Error::GRpcStatus(status) => {
            // tonic's word for an HTTP answer without gRPC's trailers: an HTTP/2 server that is
            // not etcd (a proxy or web server on the port), which trying again cannot change.
            if let Some(code) = status
                .message()
                .split("mapped from HTTP status code ")
                .nth(1)
            {
                return StoreError::Fatal(format!(
                    "etcd: an HTTP server answered with status {code}, not etcd's gRPC (is this etcd's client port?)"
                ));
            }
            let message = if status.message().is_empty() {
                format!("etcd: {}", status.code())
            } else {
                format!("etcd: {}", status.message())
            };
            match status.code() {
                Code::Unauthenticated
                | Code::PermissionDenied
                | Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::Unimplemented
                | Code::OutOfRange => StoreError::Fatal(message),
                // An unreachable member shows up as Unavailable or Unknown with a transport
                // message; a member without leader as Unavailable.
                _ => StoreError::Transient(message),
            }
        }
        Error::TransportError(e) => StoreError::Transient(format!("etcd unreachable: {e}")),
        Error::IoError(e) => StoreError::Transient(format!("etcd unreachable: {e}")),
        Error::InvalidArgs(m) => StoreError::Fatal(format!("invalid etcd settings: {m}")),
        Error::InvalidUri(e) => StoreError::Fatal(format!("invalid etcd endpoint: {e}")),
        other => StoreError::Transient(other.to_string()),
    }
}

/// The (host, port) of each endpoint (`http://HOST:PORT`, `https://…`, `HOST:PORT`; port 2379
/// when none is given), to probe for a refusal.
pub fn addresses(endpoints: &[String]) -> Vec<(String, u16)> {
    endpoints
        .iter()
        .filter_map(|endpoint| {
            let rest = endpoint
                .split_once("://")
                .map_or(endpoint.as_str(), |(_, r)| r);
            let authority = rest.split('/').next().unwrap_or(rest);
            let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
            let (host, port) = match authority.rsplit_once(':') {
                Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
                _ => (authority, 2379),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (!host.is_empty()).then(|| (host.to_owned(), port))
        })
        .collect()
}

/// An election on etcd.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    /// `PREFIX NAME "/"`.
    election_prefix: String,
    /// `PREFIX ".holders/" NAME "/"`: where a candidate with `--max-holders` N > 1 writes N.
    marker_prefix: String,
    identity: String,
    /// The watch that woke this candidacy, cancelled a moment later (wake.rs).
    parked: wake::Parked,
    ttl_seconds: i64,
    /// `--max-holders` (1 for a reader, which holds nothing).
    max_holders: u32,
    /// `--endpoints`, as messages show them.
    endpoints: Vec<String>,
    /// Whether the endpoints are reached over TLS.
    tls: bool,
}

impl Etcd {
    /// A candidate of `open.scope`'s election, on a connected client.
    pub fn new(client: Client, target: &Target, open: Open) -> Self {
        let election_prefix = open.scope.election_prefix();
        Etcd::under(client, target, election_prefix, open)
    }

    /// etcd for reading and administration: campaigns for nothing, so it needs no lease TTL
    /// and no identity. An empty lease is every election under the prefix (`status --all`).
    pub fn reader(client: Client, target: &Target, open: Open) -> Self {
        let prefix = if open.scope.lease.is_empty() {
            open.scope.prefix.clone()
        } else {
            open.scope.election_prefix()
        };
        let timing = LeaseTiming {
            ttl: Duration::ZERO,
            retry_period: Duration::ZERO,
            needed: Duration::ZERO,
        };
        Etcd::under(client, target, prefix, open.for_reader(timing))
    }

    /// The election (or, for `status --all`, every election) under `election_prefix`. Whether
    /// the endpoints are reached over TLS is what [`probe::Http2Look`] expects.
    fn under(client: Client, target: &Target, election_prefix: String, open: Open) -> Self {
        Etcd {
            max_holders: open.max_holders,
            client,
            endpoints: target.endpoints.clone(),
            tls: target.tls.is_some(),
            marker_prefix: marker_prefix(&election_prefix),
            election_prefix,
            identity: open.identity,
            parked: wake::Parked::default(),
            // Settings bound --ttl far below i64::MAX seconds; saturate rather than wrap anyway.
            ttl_seconds: i64::try_from(open.timing.ttl.as_secs()).unwrap_or(i64::MAX),
        }
    }

    async fn create_key(&self, lease_id: i64) -> Result<Candidacy, StoreError> {
        let key = format!("{}{:x}", self.election_prefix, lease_id);
        let on_lease = || Some(PutOptions::new().with_lease(lease_id));
        let mut puts = vec![TxnOp::put(key.as_str(), self.identity.as_str(), on_lease())];
        if self.max_holders > 1 {
            // The marker shares the candidate key's transaction, hence its create-revision (how
            // check_turn pairs them) and its lease (revoking it leaves neither behind). N = 1
            // writes no marker: the keys are exactly those of `etcdctl elect`.
            let marker = format!("{}{:x}", self.marker_prefix, lease_id);
            puts.push(TxnOp::put(marker, self.max_holders.to_string(), on_lease()));
        }
        // The compare makes the request safe to repeat: if an earlier attempt did create the key,
        // the else branch reads it back with its create-revision.
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(puts)
            .or_else([TxnOp::get(key.as_str(), None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(classify)?;
        let token = if response.succeeded() {
            header_revision(response.header())?
        } else {
            match response.op_responses().first() {
                Some(TxnOpResponse::Get(get)) => match get.kvs().first() {
                    Some(kv) if kv.lease() == lease_id => kv.create_revision(),
                    _ => {
                        return Err(StoreError::Fatal(format!(
                            "candidate key {key} exists with another lease"
                        )));
                    }
                },
                _ => return Err(StoreError::Transient("unexpected txn response".into())),
            }
        };
        Ok(Candidacy {
            lease_id: Some(lease_id),
            key,
            // The create-revision orders the line; it becomes the token when this one leads.
            place: token,
            token: 0,
        })
    }
}

/// The answers to reads sent in one transaction, all at the one revision it returns.
async fn read_together<const K: usize>(
    client: &Client,
    reads: [TxnOp; K],
) -> Result<(i64, [etcd_client::GetResponse; K]), StoreError> {
    let response = client
        .kv_client()
        .txn(Txn::new().and_then(reads))
        .await
        .map_err(classify)?;
    let revision = header_revision(response.header())?;
    let gets: Vec<etcd_client::GetResponse> = response
        .op_responses()
        .into_iter()
        .filter_map(|answer| match answer {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    let gets = <[etcd_client::GetResponse; K]>::try_from(gets)
        .map_err(|_| StoreError::Transient("unexpected txn response".into()))?;
    Ok((revision, gets))
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<i64, StoreError> {
    header
        .map(|h| h.revision())
        .ok_or_else(|| StoreError::Transient("etcd response without header".into()))
}

impl Campaign for Etcd {
    type Keeper = EtcdKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        let grant = self
            .client
            .lease_client()
            .grant(self.ttl_seconds, None)
            .await
            .map_err(classify)?;
        let lease_id = grant.id();
        if grant.ttl() < self.ttl_seconds {
            let _ = self.client.lease_client().revoke(lease_id).await;
            return Err(StoreError::Fatal(format!(
                "etcd granted a {} s lease for a {} s request",
                grant.ttl(),
                self.ttl_seconds
            )));
        }
        match self.create_key(lease_id).await {
            Ok(candidacy) => Ok(candidacy),
            Err(e) => {
                // Don't leave a lease (and maybe a key) to stand in line until it expires.
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    self.client.lease_client().revoke(lease_id),
                )
                .await;
                Err(e)
            }
        }
    }

    fn keeper(&self, candidacy: &Candidacy) -> EtcdKeeper {
        EtcdKeeper {
            client: self.client.lease_client(),
            lease_id: candidacy.lease_id.unwrap_or_default(),
            stream: None,
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        if self.max_holders > 1 {
            return self.check_shared_turn(candidacy).await;
        }
        // Own key, the nearest key ahead and the markers ahead, read at one revision: if the key
        // is there and nothing is ahead, this candidacy leads as of that revision.
        //
        // With one leader this look stays on the handover path after the wake-up of a waiter
        // further back: it watches only the key just ahead, so that key's delete says nothing
        // of keys further ahead (it may have withdrawn while an older one still leads), nor of
        // this candidacy's own key (deleted by an operator, seen on another stream). One read
        // at one revision answers both, as etcd's own recipe reads again (`waitDeletes`). The
        // first waiter, whose one key ahead is the leader's, leads on that key's delete alone
        // (its watch holds its own key too, wake.rs); hence the two nearest keys ahead.
        let ahead = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(candidacy.place - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let (revision, [own, ahead, markers]) = read_together(
            &self.client,
            [
                TxnOp::get(
                    candidacy.key.as_str(),
                    Some(GetOptions::new().with_keys_only()),
                ),
                TxnOp::get(self.election_prefix.as_str(), Some(ahead)),
                TxnOp::get(
                    self.marker_prefix.as_str(),
                    Some(markers_ahead_of(candidacy.place)),
                ),
            ],
        )
        .await?;
        match own.kvs().first() {
            Some(kv) if kv.create_revision() == candidacy.place => {}
            _ => return Ok(Turn::Gone),
        }
        // A marker ahead says a candidate ahead holds or waits with N > 1 (N = 1 writes none):
        // this instance must not join that line. A marker whose candidate key was deleted
        // lives only until its lease is revoked, which its instance does as it notices.
        if let Some(theirs) = markers
            .kvs()
            .iter()
            .map(|kv| marker_value(kv.value()))
            .find(|&n| n != 1)
        {
            return Ok(Turn::Mismatch { theirs });
        }
        Ok(match ahead.kvs().first() {
            // The key with the lowest create-revision leads, and that revision is its token.
            None => Turn::Leading {
                token: candidacy.place,
            },
            Some(kv) => Turn::Behind(Ahead {
                key: kv.key().to_vec(),
                revision,
                expires_in: None,
                // The leader, alone ahead: its leaving lets this candidacy lead (wake.rs).
                holders: match ahead.kvs() {
                    [leader] => vec![leader.key().to_vec()],
                    _ => Vec::new(),
                },
            }),
        })
    }

    async fn predecessor_gone(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        if !ahead.holders.is_empty() && self.max_holders <= 1 {
            return self.leader_left(candidacy, ahead).await;
        }
        if !ahead.holders.is_empty() {
            // The first waiter behind N holders: any holder leaving (its key deleted after the
            // revision the holders were read at) lets it hold. One watch on the election range,
            // deletes only; deletes of waiters behind do not wake it.
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(ahead.revision + 1)
                .with_filters([WatchFilterType::NoPut]);
            let holders = &ahead.holders;
            return self
                .first_event(self.election_prefix.as_bytes(), options, |e| {
                    e.event_type() == EventType::Delete
                        && e.kv()
                            .is_some_and(|kv| holders.iter().any(|h| h == kv.key()))
                })
                .await
                .map(drop);
        }
        if self.max_holders > 1 {
            // A later waiter (or one whose predecessor has not taken its place yet): the
            // predecessor's take (a put of its key) or its leaving (a delete) is the only
            // change that can let this one move up; either wakes it.
            let options = WatchOptions::new().with_start_revision(ahead.revision + 1);
            return self
                .first_event(&ahead.key, options, |_| true)
                .await
                .map(drop);
        }
        self.predecessor_deleted(ahead).await
    }

    async fn turn_on_wake(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Option<Result<Turn, StoreError>> {
        self.take_on_wake(candidacy, ahead).await
    }

    async fn key_gone(&self, candidacy: &Candidacy) {
        let mut backoff = Backoff::new();
        loop {
            let attempt = async {
                let response = self
                    .client
                    .kv_client()
                    .get(
                        candidacy.key.as_str(),
                        Some(GetOptions::new().with_keys_only()),
                    )
                    .await
                    .map_err(classify)?;
                match response.kvs().first() {
                    Some(kv) if kv.create_revision() == candidacy.place => {}
                    _ => return Ok(()),
                }
                let revision = header_revision(response.header())?;
                self.deleted_after(candidacy.key.as_bytes(), revision)
                    .await
                    .map(drop)
            };
            match attempt.await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "watching our own key failed; trying again");
                    backoff.sleep().await;
                }
            }
        }
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        let Some(lease_id) = candidacy.lease_id else {
            return Ok(());
        };
        // Its watches go first, so that etcd sends none of them the delete (wake.rs).
        self.parked.cancel();
        match self.client.lease_client().revoke(lease_id).await {
            Ok(_) => Ok(()),
            // Already expired: nothing left to release.
            Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        self.hold_slot(candidacy, bound).await
    }
}

impl Read for Etcd {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let count = GetOptions::new().with_prefix().with_count_only();
        // The oldest candidate's marker says the election's N.
        let oldest_marker = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let prefix = self.election_prefix.as_str();
        let (revision, [first, count, marker]) = read_together(
            &self.client,
            [
                TxnOp::get(prefix, Some(first)),
                TxnOp::get(prefix, Some(count)),
                TxnOp::get(self.marker_prefix.as_str(), Some(oldest_marker)),
            ],
        )
        .await?;
        let markers = Markers::new(self.marker_prefix.as_bytes(), marker.kvs());
        let max_holders = first
            .kvs()
            .first()
            .map_or(1, |kv| markers.of(self.election_prefix.as_bytes(), kv));
        let holders = if max_holders > 1 {
            // The N oldest, read at the same revision: one consistent view.
            let line = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(i64::from(max_holders))
                .with_revision(revision);
            let response = self
                .client
                .kv_client()
                .get(prefix, Some(line))
                .await
                // Compacted past `revision` in the meantime: the caller reads again.
                .map_err(|e| StoreError::Transient(classify(e).to_string()))?;
            holders_of(response.kvs(), max_holders)
        } else {
            holders_of(first.kvs(), 1)
        };
        Ok(Observation {
            holders,
            max_holders,
            candidates: count.count(),
            revision,
        })
    }

    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        let revision = seen.revision;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        self.first_event(self.election_prefix.as_bytes(), options, |_| true)
            .await
            .map(drop)
    }

    async fn list_elections(&self, prefix: &str) -> Result<Vec<Election>, StoreError> {
        let mut response = self
            .client
            .kv_client()
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(classify)?;
        let kvs = response.take_kvs();
        // Every election's markers (`PREFIX .holders/NAME/ID`), read in the same answer.
        let marker_prefix = format!("{prefix}{MARKERS}");
        let mut markers: std::collections::BTreeMap<&[u8], Vec<etcd_client::KeyValue>> =
            Default::default();
        for kv in &kvs {
            let Some(rest) = kv.key().strip_prefix(marker_prefix.as_bytes()) else {
                continue;
            };
            if let Some(slash) = rest.iter().position(|&b| b == b'/') {
                markers.entry(&rest[..slash]).or_default().push(kv.clone());
            }
        }
        let mut lines: std::collections::BTreeMap<Vec<u8>, Vec<etcd_client::KeyValue>> =
            Default::default();
        let mut elections: std::collections::BTreeMap<Vec<u8>, Election> = Default::default();
        for kv in &kvs {
            let Some(rest) = kv.key().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            // `NAME/ID`; anything else under the prefix (occurrence records under `.occurrences/`,
            // keys some other tool wrote) is not a candidate.
            let Some(slash) = rest.iter().position(|&b| b == b'/') else {
                continue;
            };
            let name = &rest[..slash];
            if name.is_empty() || name.starts_with(b".") || slash + 1 == rest.len() {
                continue;
            }
            let election = elections.entry(name.to_vec()).or_insert_with(|| Election {
                name: name.to_vec(),
                holders: Vec::new(),
                max_holders: 1,
                candidates: 0,
            });
            election.candidates += 1;
            lines.entry(name.to_vec()).or_default().push(kv.clone());
        }
        for (name, mut line) in lines {
            line.sort_by_key(etcd_client::KeyValue::create_revision);
            let Some(election) = elections.get_mut(&name) else {
                continue;
            };
            let election_prefix = [prefix.as_bytes(), &name, b"/"].concat();
            let theirs = markers.get(name.as_slice()).map_or(&[][..], Vec::as_slice);
            let marker_prefix = [marker_prefix.as_bytes(), &name, b"/"].concat();
            election.max_holders = line.first().map_or(1, |oldest| {
                Markers::new(&marker_prefix, theirs).of(&election_prefix, oldest)
            });
            election.holders = holders_of(&line, election.max_holders);
        }
        Ok(elections.into_values().collect())
    }

    async fn lease_time(&self, leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        let Some(lease_id) = leader.lease_id else {
            return Ok(None);
        };
        let response = self
            .client
            .lease_client()
            .time_to_live(lease_id, None)
            .await
            .map_err(classify)?;
        Ok((response.ttl() > 0).then(|| LeaseTime {
            remaining: Duration::from_secs(response.ttl() as u64),
            granted: Duration::from_secs(response.granted_ttl().max(0) as u64),
        }))
    }
}

impl Records for Etcd {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut response = self
            .client
            .kv_client()
            .get(key, None)
            .await
            .map_err(classify)?;
        Ok(response
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| kv.into_key_value().1))
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let mut leases = self.client.lease_client();
        let ttl = retention.as_secs_f64().ceil() as i64;
        let lease = leases.grant(ttl, None).await.map_err(classify)?.id();
        let txn = fenced_put(
            candidacy,
            key,
            value,
            PutOptions::new().with_lease(lease).with_prev_key(),
        );
        let outcome = self.client.kv_client().txn(txn).await.map_err(classify);
        match &outcome {
            Ok(response) if response.succeeded() => {
                // The record's previous lease (from an earlier write) has nothing left to keep.
                if let Some(TxnOpResponse::Put(put)) = response.op_responses().first()
                    && let Some(previous) = put.prev_key()
                    && previous.lease() != 0
                    && previous.lease() != lease
                {
                    let _ = leases.revoke(previous.lease()).await;
                }
            }
            // The fence said no: nothing was written, the lease holds nothing.
            Ok(_) => {
                let _ = leases.revoke(lease).await;
            }
            // No answer, or an error after the request left: the write may have committed, and
            // revoking the lease would delete the record just written (a finished job would
            // then look never run, and run again). The lease is left alone: if the write did
            // commit, a retry replaces the record and revokes this lease as the previous one;
            // if not, the lease holds no key and expires after the retention.
            Err(_) => {}
        }
        Ok(outcome?.succeeded())
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        let mut response = self
            .client
            .kv_client()
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(classify)?;
        Ok(response
            .take_kvs()
            .into_iter()
            .map(|kv| {
                let (key, value) = kv.into_key_value();
                let id = key
                    .strip_prefix(prefix.as_bytes())
                    .map_or_else(|| key.clone(), <[u8]>::to_vec);
                (id, value)
            })
            .collect())
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let lease = candidacy.lease_id.unwrap_or_default();
        let txn = fenced_put(candidacy, key, value, PutOptions::new().with_lease(lease));
        let response = self.client.kv_client().txn(txn).await.map_err(classify)?;
        Ok(response.succeeded())
    }
}

impl Handover for Etcd {
    /// A watch on the request key: a request wakes the leader at once.
    ///
    /// The first watch starts right after the candidacy's own key was created (its place, the
    /// token it leads with), with no read before it: a request names the token and is written
    /// only fenced by the key with that create-revision (`request_handover`), so every request
    /// for this candidacy is a put at a later revision, and the watch replays each one. Set up
    /// with the candidacy (`token_is_place`), it is one Watch request while the candidacy
    /// waits and none once it leads. Should that watch fail (its start compacted away, a broken
    /// stream), the key is read and watched from the revision of that read, as every later
    /// attempt does.
    async fn handover_requested(&self, candidacy: &Candidacy, key: &str, _poll: Duration) {
        let token = candidacy.token;
        let mut backoff = Backoff::new();
        if token == candidacy.place {
            let options = WatchOptions::new()
                .with_start_revision(candidacy.place + 1)
                .with_filters([WatchFilterType::NoDelete]);
            let first = self.first_event(key.as_bytes(), options, |e| {
                e.kv()
                    .is_some_and(|kv| super::is_request_for(kv.value(), token))
            });
            match first.await {
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "watching for handover requests failed; trying again");
                    backoff.sleep().await;
                }
            }
        }
        loop {
            let attempt = async {
                let response = self
                    .client
                    .kv_client()
                    .get(key, None)
                    .await
                    .map_err(classify)?;
                if response
                    .kvs()
                    .first()
                    .is_some_and(|kv| super::is_request_for(kv.value(), token))
                {
                    return Ok(());
                }
                let revision = header_revision(response.header())?;
                let options = WatchOptions::new()
                    .with_start_revision(revision + 1)
                    .with_filters([WatchFilterType::NoDelete]);
                self.first_event(key.as_bytes(), options, |e| {
                    e.kv()
                        .is_some_and(|kv| super::is_request_for(kv.value(), token))
                })
                .await
                .map(drop)
            };
            match attempt.await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "watching for handover requests failed; trying again");
                    backoff.sleep().await;
                }
            }
        }
    }

    fn token_is_place(&self) -> bool {
        true
    }

    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        let txn = self.removal(leader);
        let response = self.client.kv_client().txn(txn).await.map_err(classify)?;
        Ok(response.succeeded())
    }
}

impl Describe for Etcd {
    fn store_name(&self) -> &'static str {
        "etcd"
    }

    fn shown(&self) -> String {
        crate::redact::shown_endpoints(&self.endpoints)
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        addresses(&self.endpoints)
    }

    fn restart_resets_leases(&self) -> bool {
        true
    }

    fn probe_mismatch(&self) -> Option<Box<dyn MismatchProbe>> {
        Some(Box::new(probe::Http2Look { tls: self.tls }))
    }

    fn delete_record_hint(&self, key: &str) -> String {
        format!(
            "etcdctl --endpoints={} del {}",
            crate::escape::shell_quote(&self.shown()),
            crate::escape::shell_quote(key)
        )
    }
}

/// A put that commits only while `candidacy` still holds its election key with the
/// create-revision that is its token (the fence). A candidacy that does not lead has token 0,
/// which no key's create-revision is: its fenced writes never commit.
fn fenced_put(candidacy: &Candidacy, key: &str, value: Vec<u8>, options: PutOptions) -> Txn {
    Txn::new()
        .when([Compare::create_revision(
            candidacy.key.as_str(),
            CompareOp::Equal,
            candidacy.token,
        )])
        .and_then([TxnOp::put(key, value, Some(options))])
}

/// Renews one lease over a keep-alive stream that is recreated after every failure.
pub struct EtcdKeeper {
    client: LeaseClient,
    lease_id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

impl Keeper for EtcdKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let Some((keeper, stream)) = &mut self.stream else {
            // Opening the stream sends the first keep-alive and waits for its answer: that is
            // this renewal's round trip.
            return match self.client.keep_alive(self.lease_id).await {
                Ok((keeper, stream)) => {
                    self.stream = Some((keeper, stream));
                    Ok(Renewal::Alive)
                }
                // etcd-client turns an answer with TTL <= 0 into this error.
                Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => {
                    Ok(Renewal::Expired)
                }
                Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                    Ok(Renewal::Expired)
                }
                Err(e) => Err(classify(e)),
            };
        };
        keeper.keep_alive().await.map_err(classify)?;
        match stream.message().await {
            Ok(Some(answer)) if answer.ttl() > 0 => Ok(Renewal::Alive),
            Ok(Some(_)) => Ok(Renewal::Expired),
            Ok(None) => Err(StoreError::Transient("keep-alive stream closed".into())),
            Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                Ok(Renewal::Expired)
            }
            Err(e) => Err(classify(e)),
        }
    }

    fn reset(&mut self) {
        self.stream = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_failures_are_fatal_and_keep_their_cause() {
        let unknown = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        assert_eq!(
            tls_failure(&unknown).as_deref(),
            Some("TLS: invalid peer certificate: UnknownIssuer")
        );
        let fatal = classify(etcd_client::Error::IoError(unknown));
        assert!(!fatal.is_transient(), "{fatal}");
        assert!(fatal.to_string().contains("UnknownIssuer"), "{fatal}");
        // A handshake cut short may be a server restarting: try again.
        let eof = std::io::Error::other("tls handshake eof");
        assert_eq!(tls_failure(&eof), None);
        assert!(classify(etcd_client::Error::IoError(eof)).is_transient());
    }
}

#[cfg(test)]
mod address_tests {
    use super::addresses;

    #[test]
    fn endpoints_name_their_host_and_port() {
        let endpoints = [
            "http://127.0.0.1:2379",
            "https://etcd-1.example:12379/",
            "10.0.0.5:2381",
            "http://[::1]:2379",
            "http://etcd-2.example",
        ]
        .map(String::from);
        assert_eq!(
            addresses(&endpoints),
            [
                ("127.0.0.1".to_owned(), 2379),
                ("etcd-1.example".to_owned(), 12379),
                ("10.0.0.5".to_owned(), 2381),
                ("::1".to_owned(), 2379),
                ("etcd-2.example".to_owned(), 2379),
            ]
        );
    }
}
