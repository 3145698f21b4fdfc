//! The store door: everything that knows which store holds the election.
//!
//! The store traits are cut by capability, not by store, and say once what every store must
//! guarantee for the safety argument to hold: [`Campaign`] (join, wait, lead, release),
//! [`Read`] (what observers see), [`Records`] (fenced records beside the election),
//! [`Handover`] (`resign` and `resign --force`), [`Describe`] (names and addresses for
//! messages). [`Store`] is all of them. [`any::Connection`] parses `--endpoints` and the TLS and
//! credential flags ([`flags::StoreFlags`], filled by validate.rs) by asking the store the
//! scheme names, and opens it as an [`any::AnyStore`]. Each store owns its URL parsing, TLS and
//! credentials in its own folder (`etcd/`, `postgres/`, `zookeeper/`, each with `target.rs`).
//!
//! Nothing above this module knows which store it is talking to, and nothing here imports
//! from above it (validation, cli, the run form, the subcommands).
//!
//! # The safety argument, stated once
//!
//! For one lease name the commands of different instances never run at the same time, and
//! successive holders' tokens strictly increase, on every store alike. The code above this module
//! keeps the argument without knowing the store, and points here; each store's part of it is a
//! guarantee of [`Campaign`] (and [`Keeper`]):
//!
//! 1. **A claim cannot end on the server before the instant the request that proved it was
//!    sent, plus the TTL.** etcd starts a lease's TTL when it processes the keep-alive, after it
//!    was sent; a ZooKeeper session, with the timeout negotiated on the current connection, runs
//!    out only that long after the last request the server heard; a PostgreSQL row that was not
//!    released is taken over only after the taker has seen it unchanged for a full TTL on its own
//!    CLOCK_BOOTTIME, which begins after the holder's last renewal committed (the rule of every
//!    row store, argued once in [`rows`]). No store's wall
//!    clock decides a takeover.
//! 2. **The local deadline counts from the send instant.** A renewal answered "alive" proves the
//!    claim until at least its send instant + TTL; the leader's deadline is that send instant +
//!    `--renew-deadline` (`lease/renewal.rs`), on CLOCK_BOOTTIME (`clock.rs`), which keeps running
//!    through a suspend as the server's clock does. A late answer is never credited to a newer
//!    send instant (an attempt not answered within `--retry-period` is abandoned and the keeper
//!    reset, [`Keeper::reset`]), and an answer that does not come is a loss once the deadline
//!    passes: the deadline is a timer of its own, since a hung store never answers.
//! 3. **Stepping down fits inside the claim.** At the deadline the command's whole group gets
//!    `--kill-signal`, then SIGKILL after `--kill-after`; validation keeps `renew_deadline +
//!    kill_after + margin <= ttl` (`lease/timing.rs`, `Timing::needed`), so the group is gone
//!    before the claim can end. A stop noticed too late for its grace to end inside the claim
//!    (leader-exec was paused) SIGKILLs at once (`Timing::grace_fits`).
//! 4. **Any doubt is a loss.** A renewal answered "expired" or the claim's own key deleted
//!    ([`Campaign::key_gone`]) ends leadership with SIGKILL at once: another instance may lead
//!    already.
//! 5. **Leadership is decided atomically** ([`Campaign::check_turn`]), with a token above every
//!    earlier token of the name, and at no instant do more than `--max-holders` claims stand.
//! 6. **A claim is released only once the command's whole group is gone** (`run/release.rs`); a
//!    group that cannot be made gone leaves the claim to expire.
//!
//! A store restart is the store's own matter: etcd and ZooKeeper give every lease or session a
//! full TTL again ([`Describe::restart_resets_leases`]), which makes a dead leader stay listed
//! longer and never shortens a live claim. The same argument for operators is docs/safety.md,
//! with each store's page for its lease, token and clock.
//!
//! A new (fourth) store touches, file by file:
//! - `src/election/NEW/mod.rs` (and more files beside it as it grows): a type implementing
//!   [`Campaign`], [`Read`], [`Records`], [`Handover`] and [`Describe`], and a [`Keeper`].
//! - `src/election/NEW/target.rs`: the type's [`any::Door`]: its schemes, `parse(endpoints,
//!   StoreFlags)` refusing bad input with one line naming the flag, never echoing a password, and
//!   a candidate and a reader constructor from one [`any::Open`] (scope, identity,
//!   [`LeaseTiming`], connect timeout, N).
//! - `src/election/any.rs`: one line in its store list, `with_stores!`, from which the enums, the
//!   scheme table and every delegation are generated; a case in `the_scheme_picks_the_store`.
//! - `src/election/mod.rs`: one `pub mod NEW;` line (written out, not generated from the list:
//!   rustfmt finds a module's files only through a `mod` line it can read).
//! - `tests/harness/NEW.rs` (with its two lines in `tests/harness/mod.rs`): one `Store` impl that
//!   starts the server on free loopback ports;
//!   `tests/stores.rs`: one entry in `with_stores!` (the integration tests' store-independent
//!   list, the chaos suite and the benchmarks all read it); `tests/floors.rs`: the store's crate
//!   and type names in `STORE_NAMES`.
//! - `bench/templates/NEW.md.in`: the prose of its benchmark report.
//! - README.md, a page `docs/NEW.md` (listed in Cargo.toml's deb assets and install.sh's FILES,
//!   which `tests/docs.rs` checks), and the `--endpoints` help in `src/cli.rs` (then regenerate
//!   man/ and completions/): the scheme and what the store guarantees.
//! - `.ci/run`: the Debian package of its server.

pub mod any;
pub mod bounded;
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

/// Renews one lease, one round trip at a time.
pub trait Keeper {
    /// Sends one renewal and waits for its answer.
    ///
    /// The caller may drop this future (a timeout); it then calls `reset` before the next
    /// renewal, so that a late answer to an abandoned request is never taken for the answer to
    /// a newer one.
    fn renew(&mut self) -> impl Future<Output = Result<Renewal, StoreError>>;

    /// Forgets any request in flight (for etcd: drops the keep-alive stream).
    fn reset(&mut self);
}

/// Joining the election, waiting for a turn, leading, and leaving.
///
/// What a store must guarantee:
/// - `campaign` joins the election. A store with candidate leases (etcd, ZooKeeper's session)
///   creates a lease that cannot expire on the server before the request was sent plus the
///   TTL, and a candidate key bound to it, ordered by a number that only grows. A store with one
///   lease row per name (PostgreSQL) only names the row here: a waiter holds nothing on the
///   server.
/// - `check_turn` decides leadership atomically and answers `Turn::Leading` with the fencing
///   token, which may be known only then (PostgreSQL: the row's token after the acquiring
///   UPDATE). A lease acquired by `check_turn` cannot expire on the server before the request
///   was sent plus the TTL. Tokens of successive leaders of one name strictly increase and never
///   reset.
/// - a renewal ([`Keeper::renew`]) that answers "alive" extended the lease to at least its send
///   instant plus the TTL; "expired" means the lease is gone for good. A waiter of a store
///   without candidate leases has nothing to renew: its keeper answers "alive" without a
///   request.
/// - with `--max-holders` N (given to the store's candidate constructor), up to N candidacies of
///   one name hold at once: `check_turn` answers `Leading` only while fewer than N others hold,
///   decided atomically like a single leader's, so that at no instant do more than N claims of
///   one name stand on the server. Each holder's token is strictly greater than every token
///   issued earlier for the name. A candidacy that meets instances with another N answers
///   `Turn::Mismatch` (its release then leaves nothing behind). A waiter is woken only when it
///   may hold (herd-free) where the store allows. N = 1 writes exactly the keys, rows and nodes
///   earlier versions wrote.
pub trait Campaign {
    type Keeper: Keeper;

    /// Joins the election: a new lease and a candidate key attached to it.
    fn campaign(&self) -> impl Future<Output = Result<Candidacy, StoreError>>;

    /// A keeper for the candidacy's lease.
    fn keeper(&self, candidacy: &Candidacy) -> Self::Keeper;

    /// One atomic look at the line.
    fn check_turn(&self, candidacy: &Candidacy) -> impl Future<Output = Result<Turn, StoreError>>;

    /// Completes when the candidate ahead of `candidacy` may be gone (its key deleted after the
    /// answer that named it, a release announced, its lease run out). Waking too early is
    /// allowed (the caller looks again); missing a handover is not.
    fn predecessor_gone(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> impl Future<Output = Result<(), StoreError>>;

    /// Called once `predecessor_gone(ahead)` completed without error: where that wake-up alone
    /// proves the candidacy may take its turn (every other fact `check_turn` would read again
    /// was read with `ahead` and cannot have changed against it since), the store takes it at
    /// once, one request less on the handover path. `None`: look again with `check_turn`.
    fn turn_on_wake(
        &self,
        _candidacy: &Candidacy,
        _ahead: &Ahead,
    ) -> impl Future<Output = Option<Result<Turn, StoreError>>> {
        std::future::ready(None)
    }

    /// Completes once the candidacy's own key has been deleted. Retries through store outages
    /// on its own; the renewal deadline covers the time it cannot see the store. A store that
    /// cannot tell (a taken row shows up as a renewal answering "expired") never completes it.
    fn key_gone(&self, candidacy: &Candidacy) -> impl Future<Output = ()>;

    /// Gives up this candidacy's own claim at once (revokes its lease, releases its row, closes
    /// its session), so the next in line need not wait for it to expire.
    fn release_claim(&self, candidacy: &Candidacy) -> impl Future<Output = Result<(), StoreError>>;

    /// Turns the claim `candidacy` holds (it has just answered `Turn::Leading`) into a held slot
    /// (`leader-exec hold`): a claim that stays with no process behind it, counts against N like
    /// any holder's, and ends when it is removed ([`Handover::remove_claim`], `release`) or once
    /// `bound` has passed since it was held, whichever comes first, by no store's wall clock:
    /// etcd moves the key to a lease with TTL `bound` that nobody keeps alive; PostgreSQL and
    /// ZooKeeper persist the claim and let it go by the rule they use for a holder that crashed
    /// (a waiter that has seen it unchanged for `bound` on its own CLOCK_BOOTTIME takes it
    /// over). The claim keeps its place; its token stays or rises (ZooKeeper: the zxid of a
    /// write made after the claim was turned). Answers the held candidacy (token, key and lease
    /// as readers now see them), or `None` when the claim was gone before it could be turned.
    /// The caller then exits without `release_claim`.
    fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> impl Future<Output = Result<Option<Candidacy>, StoreError>>;

    /// How long after its send instant a request that proved the lease keeps it, when the store
    /// keeps it for less than `--ttl`: ZooKeeper's session timeout, negotiated on the session's
    /// current connection, which the server may clamp below what was asked (never below
    /// `--renew-deadline + --kill-after + margin`, or leadership is already lost). None: `--ttl`
    /// (etcd refuses a shorter lease; PostgreSQL's row holds the TTL it was written with).
    fn lease_length(&self) -> Option<Duration> {
        None
    }
}

/// Reading the election from outside: what `status`, `watch`, `check` and `status --all` show.
///
/// What a store must guarantee: every read is linearizable (it sees every write that completed
/// before it was sent), and one answer is one consistent view (one revision, one transaction).
pub trait Read {
    /// Reads who leads and how many stand in line.
    fn read_election(&self) -> impl Future<Output = Result<Observation, StoreError>>;

    /// Completes when anything in the election may have changed since `seen` was read. Waking
    /// too early is allowed (the caller reads again).
    fn changed_since(&self, seen: &Observation) -> impl Future<Output = Result<(), StoreError>>;

    /// Every election under `prefix` (names not starting with `.`), read in one consistent
    /// view, sorted by name.
    fn list_elections(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<Election>, StoreError>>;

    /// Time left on the leader's lease; `None` when it no longer exists.
    fn lease_time(
        &self,
        leader: &Leader,
    ) -> impl Future<Output = Result<Option<LeaseTime>, StoreError>>;
}

/// Records kept beside the election (occurrences, the leader's state).
///
/// What a store must guarantee: a fenced write commits only while the writer's claim still
/// stands with its token, checked in the same transaction as the write; a write the fence
/// rejects leaves nothing behind.
pub trait Records {
    /// Reads a record (outside the election).
    fn read_record(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>>;

    /// Writes a record only while `candidacy` still holds its claim with its token (a fenced
    /// write), kept for `retention`, after which the store deletes it (or readers treat it as
    /// absent). `Ok(false)`: the fence rejected the write — this candidacy no longer leads.
    fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>>;

    /// Every record under `prefix`: (key without the prefix, value), both as bytes.
    fn list_records(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<RawRecord>, StoreError>>;

    /// Puts `value` under `key` for as long as the candidacy's own lease lives (so it goes
    /// with the lease), only while the candidacy still holds its claim with its token.
    /// `Ok(false)`: the fence said no.
    fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> impl Future<Output = Result<bool, StoreError>>;
}

/// Handing leadership over on request, and removing a claim (`resign`, `resign --force`).
///
/// What a store must guarantee: a request and a removal reach only the leader they name — each
/// is checked against that leader's token in the same transaction — never a later one.
pub trait Handover: Records {
    /// Asks `leader` to hand over (`resign`): writes the leader's token (decimal) under `key`
    /// only while that leader still leads with that token — the write is fenced by the
    /// leader's own claim, so a request can never reach a later leader — kept for at most
    /// `retention`, after which readers treat it as absent. `Ok(false)`: the fence said no,
    /// that leader no longer leads. `key` lies outside every election (`PREFIX .resign/NAME`):
    /// other tools reading the election never take it for a candidate.
    ///
    /// The default is a fenced record write in the leader's name; a store whose fenced writes
    /// also compare the writer's identity overrides it.
    fn request_handover(
        &self,
        leader: &Leader,
        key: &str,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> {
        let fence = Candidacy {
            lease_id: None,
            // Not UTF-8 (a key some other tool wrote): no claim of ours can match it, and the
            // lossy key matches nothing, so the fence says no.
            key: String::from_utf8_lossy(&leader.key).into_owned(),
            place: leader.token,
            token: leader.token,
        };
        let value = leader.token.to_string().into_bytes();
        async move { self.write_fenced(&fence, key, value, retention).await }
    }

    /// Completes once `key` holds a handover request for this candidacy's token (see
    /// [`Handover::request_handover`]); a request for another token is not ours. Retries
    /// through store outages on its own (the renewal deadline covers the time it cannot see the
    /// store).
    ///
    /// The default looks every `poll` (a read per look); a store that can watch a key
    /// overrides it and wakes at once.
    fn handover_requested(
        &self,
        candidacy: &Candidacy,
        key: &str,
        poll: Duration,
    ) -> impl Future<Output = ()> {
        let wanted = candidacy.token;
        async move {
            loop {
                match self.read_record(key).await {
                    Ok(Some(value)) if is_request_for(&value, wanted) => return,
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "reading handover requests failed"),
                }
                tokio::time::sleep(poll).await;
            }
        }
    }

    /// Whether a candidacy that leads always leads with its place as token (etcd: the
    /// create-revision of its key). Then the watch for requests is set up with the candidacy and
    /// polled while it waits (`handover_requested` with `candidacy.leading(candidacy.place)`),
    /// so that no request is left to make once it leads; elsewhere the token is known only then.
    fn token_is_place(&self) -> bool {
        false
    }

    /// Removes `leader`'s claim only while it still holds `leader.token`, in one transaction
    /// (a claim that still has its token still leads if it led, and no later claim can get
    /// that token). `Ok(false)`: the claim is gone or was made anew.
    fn remove_claim(&self, leader: &Leader) -> impl Future<Output = Result<bool, StoreError>>;
}

/// What a store is, for messages and for the safety arithmetic.
pub trait Describe {
    /// The store's name in messages ("etcd", "PostgreSQL", "ZooKeeper").
    fn store_name(&self) -> &'static str;

    /// Where the store is, as messages show it: `--endpoints` with any password removed.
    fn shown(&self) -> String;

    /// The TCP addresses (host, port) the endpoints name, probed to tell a refused connection
    /// from silence. Empty where one cannot be probed (a Unix socket): never taken as refused.
    fn addresses(&self) -> Vec<(String, u16)>;

    /// Whether a restart of the store gives every lease a full TTL again (etcd's leases and
    /// ZooKeeper's sessions; PostgreSQL keeps `expires_at`).
    fn restart_resets_leases(&self) -> bool;

    /// A command an operator can run to delete record `key` (shown in log messages).
    fn delete_record_hint(&self, key: &str) -> String;

    /// For etcd, whether its endpoints are reached over TLS: a first contact that fails looks
    /// at what answers there ([`etcd::probe`]). `None` for the other stores.
    fn etcd_tls(&self) -> Option<bool> {
        None
    }
}

/// A store with every capability: what the run form and the subcommands are written against.
pub trait Store: Campaign + Read + Records + Handover + Describe {}

impl<T: Campaign + Read + Records + Handover + Describe> Store for T {}

/// Whether a handover request (the value under the request key) names `token`.
pub fn is_request_for(value: &[u8], token: i64) -> bool {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        == Some(token)
}

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
    /// See [`Describe::etcd_tls`].
    pub etcd_tls: Option<bool>,
}

impl Reach {
    pub fn of<B: Describe>(backend: &B) -> Reach {
        Reach {
            store: backend.store_name(),
            shown: backend.shown(),
            addresses: backend.addresses(),
            etcd_tls: backend.etcd_tls(),
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
    /// (see [`etcd::probe`]); `None` when the look decides nothing.
    pub async fn not_the_store(&self) -> Option<String> {
        let tls = self.etcd_tls?;
        for (host, port) in &self.addresses {
            if let Some(found) = etcd::probe::not_etcd(host, *port, tls).await {
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
            etcd_tls: None,
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
