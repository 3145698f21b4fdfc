//! The store door: everything that knows which store holds the election.
//!
//! - `contract.rs`: the store contract, the traits a store implements ([`Campaign`] with its
//!   [`Keeper`], [`Read`], [`Records`], [`Handover`], [`Describe`]; [`Store`] is all of them;
//!   [`Door`] and [`Open`]), with the safety argument and what every store guarantees stated
//!   once at its top. It names no store.
//! - this file: what the traits speak of ([`Scope`], [`Candidacy`], [`Turn`], [`Observation`],
//!   [`StoreError`], …), the wait for a turn, and the first contact with a store ([`Reach`],
//!   [`first_contact`]: a refusal on every endpoint, a store that does not answer in time, and
//!   the store's own look at what answers instead, [`Describe::probe_mismatch`]).
//! - [`any`]: [`any::Connection`] parses `--endpoints` and the TLS and credential flags
//!   ([`flags::StoreFlags`], filled by validate.rs) by asking the stores of its one list the
//!   scheme names, and opens the one they name as an [`any::AnyStore`].
//! - one folder per store (`etcd/`, `postgres/`, `zookeeper/`, `mysql/`), each owning its URL
//!   parsing, TLS and credentials (`target.rs`, with its [`Door`]); `rows/` for what the stores
//!   of rows share.
//!
//! Nothing above this module knows which store it is talking to, and nothing here imports
//! from above it (validation, cli, the run form, the subcommands).

pub mod any;
pub mod bounded;
mod contract;
pub mod etcd;
#[cfg(test)]
pub mod fake;
pub mod flags;
pub mod mysql;
pub mod postgres;
pub mod rows;
pub mod zookeeper;

use std::fmt;
use std::time::Duration;

pub(crate) use contract::door;
pub use contract::{
    Campaign, Describe, Door, Handover, Keeper, MismatchProbe, Open, Read, Records, Store,
    is_request_for,
};

/// Which election: the lease name and the key prefix, validated (validate.rs).
#[derive(Clone, Debug)]
pub struct Scope {
    pub lease: String,
    pub prefix: String,
}

impl Scope {
    /// The election prefix: candidate keys are this plus the lease id in hex.
    pub fn election_prefix(&self) -> String {
        format!("{}{}/", self.prefix, self.lease)
    }
}

/// What a candidate's lease must cover, from the run form's validated timing flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// `--ttl`: the lease (or session) duration to ask the store for.
    pub ttl: Duration,
    /// `--retry-period`: one request must fit in it.
    pub retry_period: Duration,
    /// `--renew-deadline + --kill-after + margin`: the least lease time that is safe (a store
    /// that may grant less than it was asked for refuses less than this).
    pub needed: Duration,
}

/// One instance's place in the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidacy {
    /// The store's lease id, where the store has leases of its own (etcd); `None` otherwise
    /// (PostgreSQL: the lease is the row).
    pub lease_id: Option<i64>,
    /// What the leader holds, as `LEADER_KEY` shows it: etcd's candidate key
    /// `prefix + NAME + "/" + lease id in hex`; PostgreSQL's lease row, `TABLE/NAME`;
    /// ZooKeeper's candidate node.
    pub key: String,
    /// Its place in line, where the store orders candidates by a number it gives out (etcd: the
    /// key's create-revision; ZooKeeper: the node's czxid); 0 where the line is kept elsewhere
    /// (PostgreSQL: the waiters table).
    pub place: i64,
    /// The fencing token: 0 (none: every token is at least 1, so no fence matches it) until
    /// `Turn::Leading` reports it. The state machine leads with the candidacy that
    /// [`Candidacy::leading`] completes, never with one from `campaign`.
    pub token: i64,
}

impl Candidacy {
    pub fn lease_id_hex(&self) -> Option<String> {
        self.lease_id.map(|id| format!("{id:x}"))
    }

    /// The candidacy as it leads, with the token `Turn::Leading` reported.
    pub fn leading(&self, token: i64) -> Candidacy {
        Candidacy {
            token,
            ..self.clone()
        }
    }
}

/// The candidate (or holder) ahead of a waiting candidacy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ahead {
    /// Its key, bytes as the store holds them: any client with access to the prefix can write
    /// keys that are not UTF-8, and a waiter must watch exactly that key.
    pub key: Vec<u8>,
    /// The store revision the answer was read at (0 where the store has none).
    pub revision: i64,
    /// Where the store says (PostgreSQL): how long until this waiter may take the holder's
    /// claim over. A holder that crashed sends nothing, so the waiter tries again once this has
    /// run out.
    pub expires_in: Option<Duration>,
    /// With `--max-holders` N > 1, for the first waiter behind N holders (etcd: with N = 1 too,
    /// for the waiter whose one key ahead is the leader's): every holder's key (bytes as the
    /// store holds them), any of which leaving lets this waiter hold; empty otherwise (the
    /// waiter waits for `key` alone). What the store watches is its own affair:
    /// only the store that answered reads it, in [`Campaign::predecessor_gone`].
    pub holders: Vec<Vec<u8>>,
}

/// Where a candidacy stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Turn {
    /// No candidate is ahead (with `--max-holders` N: fewer than N): this one leads (holds),
    /// with this fencing token.
    Leading { token: i64 },
    /// Another candidate is ahead (N others hold).
    Behind(Ahead),
    /// The candidate key no longer exists (its lease expired, or someone deleted it).
    Gone,
    /// Instances already in the election hold or wait with another `--max-holders` (`theirs`).
    /// The candidacy takes no place; the caller releases it (which leaves nothing behind) and
    /// exits 125 with [`mismatch_message`].
    Mismatch { theirs: u32 },
}

/// The one wording for a `--max-holders` that the instances already in the election do not
/// share.
pub fn mismatch_message(lease: &str, ours: u32, theirs: u32) -> String {
    format!(
        "--max-holders {ours} does not match the --max-holders {theirs} of the instances already \
         in lease '{}': every instance of one lease must give the same value",
        lease.escape_debug()
    )
}

/// The answer to one renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease was extended by a full TTL from some instant after the request was sent.
    Alive,
    /// The lease no longer exists on the server (etcd: a renewal answered with TTL <= 0;
    /// ZooKeeper: the session expired; PostgreSQL: the row no longer holds this claim's token).
    Expired,
}

/// The election as an observer sees it, read in one consistent view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The holders, oldest first (with `--max-holders` 1, the leader alone; empty when nobody
    /// holds).
    pub holders: Vec<Leader>,
    /// The `--max-holders` the instances in the election use (1 where none says otherwise).
    pub max_holders: u32,
    /// Candidate keys in line, the holders' included.
    pub candidates: i64,
    /// Where the store was when this was read (etcd: its revision; 0 where the store has
    /// none): only the store that answered reads it, in [`Read::changed_since`].
    pub revision: i64,
}

impl Observation {
    /// The leader: the oldest holder (the only one with `--max-holders` 1).
    pub fn leader(&self) -> Option<&Leader> {
        self.holders.first()
    }

    /// The holder with this token, if one holds it.
    pub fn holder(&self, token: i64) -> Option<&Leader> {
        self.holders.iter().find(|h| h.token == token)
    }
}

/// A holder (with `--max-holders` 1: the leader): the candidate with the lowest create-revision,
/// or one of the N lowest.
#[derive(Clone, Debug, PartialEq, Eq)]
/// Key and identity are bytes as the store holds them (not necessarily UTF-8, not necessarily
/// printable: text output escapes them).
pub struct Leader {
    pub key: Vec<u8>,
    pub identity: Vec<u8>,
    pub token: i64,
    /// `None` where the store has no lease ids (PostgreSQL).
    pub lease_id: Option<i64>,
    /// The store cannot tell yet which token this leader's command is given: ZooKeeper with
    /// `--max-holders` 1, a first node the leader mark does not name (a leader-exec leader
    /// between its look and its mark, or a Curator `LeaderLatch` leader, which never marks); its
    /// token is then the node's czxid, which no leader-exec command is given. Readers wait
    /// briefly for the mark ([`crate::commands::PROVISIONAL_GRACE`]). Never set by other stores.
    pub provisional: bool,
}

/// One election found under a prefix (`status --all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The lease name: bytes as the store holds them.
    pub name: Vec<u8>,
    /// The holders, oldest first.
    pub holders: Vec<Leader>,
    /// As in [`Observation::max_holders`].
    pub max_holders: u32,
    pub candidates: i64,
}

impl Election {
    /// The leader: the oldest holder.
    pub fn leader(&self) -> Option<&Leader> {
        self.holders.first()
    }
}

/// A record as the store holds it: (key without the records prefix, value), both bytes.
pub type RawRecord = (Vec<u8>, Vec<u8>);

/// A lease's remaining and granted time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTime {
    pub remaining: Duration,
    pub granted: Duration,
}

/// A store error, sorted by whether trying again can help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The store could not be reached or did not answer in time.
    Transient(String),
    /// Trying again will not help: bad credentials, permission denied, invalid request.
    Fatal(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Transient(m) | StoreError::Fatal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StoreError {}

/// Waits until the candidacy leads (`Turn::Leading`) or is gone (`Turn::Gone`), watching only the
/// candidate just ahead of it, as etcd's election recipe does, so a handover wakes one waiter.
/// Store errors are retried after `backoff`; the renewal deadline bounds how long that may go on.
///
/// Returns the answer with the send instant (on `clock`) of the request that gave it: a store
/// whose lease is acquired by `check_turn` proves it from that instant on, not before.
pub async fn wait_for_turn<B: Campaign, C: crate::clock::Clock>(
    backend: &B,
    clock: &C,
    candidacy: &Candidacy,
    backoff: Duration,
) -> (Turn, Duration) {
    loop {
        let sent = clock.now();
        match backend.check_turn(candidacy).await {
            Ok(Turn::Behind(ahead)) => {
                tracing::debug!(
                    predecessor = %crate::escape::escape(&ahead.key),
                    "waiting for the candidate ahead to go"
                );
                if let Err(e) = backend.predecessor_gone(candidacy, &ahead).await {
                    tracing::debug!(error = %e, "watching the candidate ahead failed; looking again");
                    tokio::time::sleep(backoff).await;
                    continue;
                }
                let sent = clock.now();
                match backend.turn_on_wake(candidacy, &ahead).await {
                    None | Some(Ok(Turn::Behind(_))) => {}
                    Some(Ok(turn)) => return (turn, sent),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "taking our turn failed; looking again");
                        tokio::time::sleep(backoff).await;
                    }
                }
            }
            Ok(turn) => return (turn, sent),
            Err(e) => {
                tracing::debug!(error = %e, "reading the election failed; trying again");
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Exponential backoff for retrying store requests: 50 ms doubling to 1 s.
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    pub fn new() -> Self {
        Backoff {
            next: Duration::from_millis(50),
        }
    }

    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(1));
    }
}

/// How long a first contact may go without an answer before the endpoints are probed for a
/// refusal: ZooKeeper's client retries refused connections on its own, and would otherwise sit
/// out the whole `--connect-timeout` on a port where nothing listens.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The one wording, on every subcommand and store, for endpoints that refuse the connection.
pub fn refused_message(store: &str, shown: &str) -> String {
    format!("{store} at {shown}: connection refused (is {store} running there?)")
}

/// The one wording for a store that did not answer within `--connect-timeout`, with the last
/// error seen, if any.
pub fn no_answer_message(store: &str, shown: &str, limit: Duration, last: Option<&str>) -> String {
    let mut message = format!(
        "{store} at {shown} did not answer within --connect-timeout ({})",
        humantime::format_duration(limit)
    );
    if let Some(last) = last {
        message.push_str(": ");
        message.push_str(last);
    }
    message
}

/// Whether every address refuses a TCP connection right now. A refusal is an answer (nothing
/// listens there); an accepted connection, a timeout or any other error is not, nor is an
/// empty list.
pub async fn every_address_refuses(addresses: &[(String, u16)]) -> bool {
    let bound = Duration::from_millis(500);
    if addresses.is_empty() {
        return false;
    }
    for (host, port) in addresses {
        let resolved = match tokio::time::timeout(
            bound,
            tokio::net::lookup_host((host.as_str(), *port)),
        )
        .await
        {
            Ok(Ok(resolved)) => resolved.collect::<Vec<_>>(),
            _ => return false,
        };
        if resolved.is_empty() {
            return false;
        }
        for address in resolved {
            match tokio::time::timeout(bound, tokio::net::TcpStream::connect(address)).await {
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                _ => return false,
            }
        }
    }
    true
}

/// Where a store is, for the start-up messages and the refusal probe.
pub struct Reach {
    pub store: &'static str,
    pub shown: String,
    pub addresses: Vec<(String, u16)>,
    /// See [`Describe::probe_mismatch`].
    pub mismatch: Option<Box<dyn MismatchProbe>>,
}

impl Reach {
    pub fn of<B: Describe>(backend: &B) -> Reach {
        Reach {
            store: backend.store_name(),
            shown: backend.shown(),
            addresses: backend.addresses(),
            mismatch: backend.probe_mismatch(),
        }
    }

    /// A fatal answer at first contact, naming where it came from: `STORE: CAUSE` becomes
    /// `STORE at ENDPOINTS: CAUSE` (a message that names the endpoints already stays as it is).
    pub fn named(&self, message: &str) -> String {
        match message
            .strip_prefix(self.store)
            .and_then(|m| m.strip_prefix(": "))
        {
            Some(cause) if !message.contains(&self.shown) => {
                format!("{} at {}: {cause}", self.store, self.shown)
            }
            _ => message.to_owned(),
        }
    }

    /// The whole message when an endpoint plainly answers as something other than the store
    /// (the store's [`MismatchProbe`]); `None` when the look decides nothing, or the store has
    /// no look to take.
    pub async fn not_the_store(&self) -> Option<String> {
        let probe = self.mismatch.as_ref()?;
        for (host, port) in &self.addresses {
            if let Some(found) = probe.look(host, *port).await {
                return Some(format!("{} at {}: {found}", self.store, self.shown));
            }
        }
        None
    }

    pub fn refused(&self) -> String {
        refused_message(self.store, &self.shown)
    }

    pub fn no_answer(&self, limit: Duration, last: Option<&str>) -> String {
        no_answer_message(self.store, &self.shown, limit, last)
    }

    /// Completes, with the refusal message, once every endpoint refuses; probes every
    /// [`PROBE_EVERY`], the first time after one period (an answer by then needs no probe).
    pub async fn refusal(&self) -> String {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            if every_address_refuses(&self.addresses).await {
                return self.refused();
            }
        }
    }
}

/// Why a first contact failed.
#[derive(Debug)]
pub enum StartError {
    /// Refused on every endpoint, or no answer within the limit: the whole message.
    Unreachable(String),
    /// The store answered with an error that trying again cannot cure (credentials, TLS).
    Store(StoreError),
}

/// The first contact with the store at start, bounded by `limit` (`--connect-timeout`):
/// `attempt` is retried after transient errors until it answers, fails for good, `limit`
/// passes, or every endpoint refuses the connection (a refusal is an answer: no reason to
/// wait). Only the start is cut short by a refusal; later requests (a leader's renewals) retry
/// until their own deadline.
pub async fn first_contact<T, F, Fut>(
    reach: &Reach,
    limit: Duration,
    mut attempt: F,
) -> Result<T, StartError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let until = tokio::time::Instant::now() + limit;
    let mut backoff = Backoff::new();
    let mut last: Option<String> = None;
    let mut looked = false;
    let no_answer =
        |last: &Option<String>| StartError::Unreachable(reach.no_answer(limit, last.as_deref()));
    loop {
        // Biased, the limit first: once it has passed, nothing else is looked at, not even an
        // attempt that failed at the same moment (which would buy another round).
        let result = tokio::select! {
            biased;
            () = tokio::time::sleep_until(until) => return Err(no_answer(&last)),
            result = attempt() => result,
            refused = reach.refusal() => return Err(StartError::Unreachable(refused)),
        };
        match result {
            Ok(value) => return Ok(value),
            Err(e) if e.is_transient() => {
                last = Some(e.to_string());
                let refused = tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(until) => return Err(no_answer(&last)),
                    refused = every_address_refuses(&reach.addresses) => refused,
                };
                if refused {
                    return Err(StartError::Unreachable(reach.refused()));
                }
                // Once: something that answers, but not as the store does, is not a store slow
                // to answer (an HTTP/1 server, PostgreSQL, TLS on one side only).
                if !looked {
                    looked = true;
                    let found = tokio::select! {
                        biased;
                        () = tokio::time::sleep_until(until) => return Err(no_answer(&last)),
                        found = reach.not_the_store() => found,
                    };
                    if let Some(found) = found {
                        return Err(StartError::Unreachable(found));
                    }
                }
                // The backoff never outlasts the limit.
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(until) => return Err(no_answer(&last)),
                    () = backoff.sleep() => {}
                }
            }
            Err(e) => {
                return Err(StartError::Store(StoreError::Fatal(
                    reach.named(&e.to_string()),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn nowhere() -> Reach {
        Reach {
            store: "etcd",
            shown: "http://192.0.2.1:2379".into(),
            // Nothing to probe: never taken as refused.
            addresses: Vec::new(),
            mismatch: None,
        }
    }

    /// Attempts that fail at once, again and again, end exactly at the limit: no backoff sleep
    /// runs past it, and an attempt that fails as the limit passes buys no further round.
    #[tokio::test(start_paused = true)]
    async fn failing_attempts_end_at_the_limit() {
        let limit = Duration::from_millis(2300);
        let attempts = Cell::new(0);
        let started = tokio::time::Instant::now();
        let result: Result<(), StartError> = first_contact(&nowhere(), limit, || {
            attempts.set(attempts.get() + 1);
            async { Err(StoreError::Transient("etcd: tcp connect error".into())) }
        })
        .await;
        assert_eq!(started.elapsed(), limit);
        assert!(attempts.get() > 3, "{}", attempts.get());
        match result {
            Err(StartError::Unreachable(message)) => assert_eq!(
                message,
                "etcd at http://192.0.2.1:2379 did not answer within --connect-timeout (2s 300ms): etcd: tcp connect error"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// An attempt that never answers ends at the limit too.
    #[tokio::test(start_paused = true)]
    async fn a_silent_attempt_ends_at_the_limit() {
        let limit = Duration::from_secs(2);
        let started = tokio::time::Instant::now();
        let result: Result<(), StartError> =
            first_contact(&nowhere(), limit, std::future::pending).await;
        assert_eq!(started.elapsed(), limit);
        assert!(matches!(result, Err(StartError::Unreachable(m)) if m.ends_with("(2s)")));
    }

    /// An error that trying again cannot cure ends it at once, as the store said it.
    #[tokio::test(start_paused = true)]
    async fn a_fatal_error_ends_it_at_once() {
        let started = tokio::time::Instant::now();
        let result: Result<(), StartError> =
            first_contact(&nowhere(), Duration::from_secs(5), || async {
                Err(StoreError::Fatal("etcd: authentication failed".into()))
            })
            .await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(matches!(
            result,
            Err(StartError::Store(StoreError::Fatal(_)))
        ));
    }

    /// A port where nothing listens is refused; an empty list never is.
    #[tokio::test]
    async fn a_closed_port_refuses() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        assert!(every_address_refuses(&[("127.0.0.1".into(), port)]).await);
        assert!(!every_address_refuses(&[]).await);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().port();
        assert!(
            !every_address_refuses(&[("127.0.0.1".into(), port), ("127.0.0.1".into(), open)]).await
        );
    }
}
