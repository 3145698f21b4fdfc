//! The store contract: the traits a store implements, and what every store must guarantee for
//! the safety argument to hold. Nothing here names a store (`tests/floors.rs` checks it); each
//! store keeps its part in its own folder.
//!
//! The traits are cut by capability, not by store: [`Campaign`] (join, wait, lead, release) and
//! its [`Keeper`] (one renewal at a time), [`Read`] (what observers see), [`Records`] (fenced
//! records beside the election), [`Handover`] (`resign` and `resign --force`), [`Describe`]
//! (names and addresses for messages, and [`MismatchProbe`], the look at an endpoint that does
//! not answer as the store). [`Store`] is all of them. [`Door`] is a store's entry in the store
//! list (`any.rs`): the schemes of `--endpoints` that pick it, its own check of the endpoints and
//! the TLS and credential flags, and its two constructors, each from one [`Open`]. Where one
//! store can do better than the others (watch a key instead of polling it, wake on a handover,
//! look at what answers on a port), the trait gives a store-neutral default and that store
//! overrides it; the code above the door never asks which store it has.
//!
//! # The safety argument, stated once
//!
//! For one lease name the commands of different instances never run at the same time, and
//! successive holders' tokens strictly increase, on every store alike. The code above the door
//! keeps the argument without knowing the store, and points here; each store's part of it is a
//! guarantee of [`Campaign`] (and [`Keeper`]):
//!
//! 1. **A claim cannot end on the server before the instant the request that proved it was
//!    sent, plus the TTL.** etcd starts a lease's TTL when it processes the keep-alive, after it
//!    was sent; a ZooKeeper session, with the timeout negotiated on the current connection, runs
//!    out only that long after the last request the server heard; a row that was not released
//!    (PostgreSQL, MySQL) is taken over only after the taker has seen it unchanged for a full TTL
//!    on its own CLOCK_BOOTTIME, which begins after the holder's last renewal committed (the rule
//!    of every row store, argued once in [`super::rows`]). No store's wall clock decides a
//!    takeover.
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
//! A store restart is the store's own matter: a store that gives every lease or session a full
//! TTL again ([`Describe::restart_resets_leases`]) makes a dead leader stay listed longer and
//! never shortens a live claim. The same argument for operators is docs/safety.md, with each
//! store's page for its lease, token and clock.
//!
//! # What every store guarantees
//!
//! In short (each trait states its part in full):
//! - **A renewal deadline before the server's expiry**: a claim proven by a request lasts at
//!   least until that request's send instant plus the TTL ([`Campaign`], [`Keeper::renew`]); a
//!   store that may grant less than it was asked for refuses less than
//!   [`LeaseTiming::needed`](super::LeaseTiming::needed), or reports what it keeps
//!   ([`Campaign::lease_length`]).
//! - **Tokens strictly rise**: each holder's token is above every token issued earlier for the
//!   name, with any `--max-holders` N and across changes of N, and never resets — not after a
//!   deleted row or node, a set-back sequence, a recreated parent ([`Campaign::check_turn`]). A
//!   promoted server (a replica, a standby) is not trusted with "free": what it lacks of the old
//!   primary's writes must not hand a claim over early.
//! - **What "lost" means**: [`Renewal::Expired`](super::Renewal::Expired) is an answer that the
//!   claim is gone for good, and so is the claim's own key deleted ([`Campaign::key_gone`]); a
//!   renewal that fails or does not answer is no answer, and a loss only once the deadline
//!   passes.
//! - **Reads are linearizable**, one answer one consistent view ([`Read`]); **fenced writes**
//!   commit only while the writer's claim stands with its token, checked in the same
//!   transaction ([`Records`], [`Handover`]).
//! - **Errors say whether trying again can help** ([`StoreError`](super::StoreError)): a
//!   transient error is retried (within the deadline, or `--connect-timeout` at a first
//!   contact); a fatal one ends a first contact at once.
//!
//! # Adding a store
//!
//! A new store touches, file by file:
//! - `src/election/NEW/mod.rs` (and more files beside it as it grows): a type implementing
//!   [`Campaign`], [`Read`], [`Records`], [`Handover`] and [`Describe`], and a [`Keeper`]; its
//!   constructors take the [`Open`] every store is opened with (scope, identity,
//!   [`LeaseTiming`](super::LeaseTiming), connect timeout, N).
//! - `src/election/NEW/target.rs`: its `Target` and `parse(endpoints, StoreFlags)`, refusing bad
//!   input with one line naming the flag, never echoing a password; and its [`Door`], stated
//!   with [`door!`]: its name, schemes and aliases (and its constructors, where opening it does
//!   more than build it).
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

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use super::flags::StoreFlags;
use super::{
    Ahead, Candidacy, Election, Leader, LeaseTime, LeaseTiming, Observation, RawRecord, Renewal,
    Scope, StoreError, Turn,
};
use crate::exit::Failure;

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

    /// The look a first contact that failed takes at each endpoint ([`MismatchProbe`]),
    /// overridden by a store that can tell another server's answer on its port from its own.
    /// `None`, the default: a failed first request is retried until the store answers, every
    /// endpoint refuses, or `--connect-timeout` passes.
    fn probe_mismatch(&self) -> Option<Box<dyn MismatchProbe>> {
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

/// A store's look at one of its endpoints after a first request there failed: what answers
/// there, when it is plainly not the store (an HTTP/1 server, another store's port, TLS on one
/// side only), so that the first contact ends at once with that instead of waiting out
/// `--connect-timeout` as for a store slow to answer ([`Describe::probe_mismatch`]).
pub trait MismatchProbe: Send + Sync {
    /// What answered at `host:port`, worded for the end of a message; `None` when the look
    /// decides nothing (silence, a refusal, an answer as the store gives it).
    fn look<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;
}

/// One store's shape, as the door sees it: the schemes of `--endpoints` that select it, its own
/// check of what they and the TLS and credential flags say, and its two constructors. Each store
/// states it in its `target.rs` with [`door!`].
pub trait Door: Store + Sized {
    /// The store's name in messages, as [`Describe::store_name`] gives it.
    const NAME: &'static str;
    /// The schemes that select it (lower case, without `://`), as messages list them; the first
    /// is the one suggested for a typo of the store's name.
    const SCHEMES: &'static [&'static str];
    /// Other spellings of a scheme that select it, which messages do not list (`postgresql`).
    const SPELLINGS: &'static [&'static str];
    /// How a scheme that is none of these but means this store begins: the store's name or a
    /// common short form of it (`zookeeper://`, `pgsql://`), refused with its first scheme
    /// suggested. Without these, a typo would be pointed to the scheme nearest in spelling.
    const ALIASES: &'static [&'static str];
    /// What `--endpoints` and the TLS and credential flags say for this store, checked.
    type Target: Clone + fmt::Debug;

    /// Checks the endpoints (one at least has one of [`Door::SCHEMES`], or for the first store
    /// of the list, none has another store's), reads the TLS files and the credentials. Bad input
    /// is refused with one line naming the flag, never echoing a password; a list that mixes
    /// stores is refused here. Nothing is contacted.
    fn parse(endpoints: Vec<String>, args: StoreFlags) -> Result<Self::Target, Failure>;

    /// Opens the store for a candidate of `open.scope`'s election, whose lease must cover
    /// `open.timing`.
    fn candidate(target: &Self::Target, open: Open) -> impl Future<Output = Result<Self, Failure>>;

    /// Opens the store for reading and administration (`status`, `watch`, `check`, `resign`,
    /// `status --all`): it campaigns for nothing and holds no lease.
    fn reader(target: &Self::Target, open: Open) -> impl Future<Output = Result<Self, Failure>>;
}

/// What a store is opened with, as a candidate ([`Door::candidate`]) or a reader
/// ([`Door::reader`]): every store's constructors take it.
#[derive(Clone, Debug)]
pub struct Open {
    /// Which election. A reader of every election under the prefix (`status --all`) has an empty
    /// lease, which no election has (validate.rs refuses an empty `--lease`).
    pub scope: Scope,
    /// The candidate's identity; empty for a reader.
    pub identity: String,
    /// What the candidate's lease must cover. Zero for a reader, which holds no lease: each
    /// store bounds a reader's requests by the connect timeout instead ([`Open::for_reader`]).
    pub timing: LeaseTiming,
    /// `--connect-timeout`: bounds the first contact.
    pub connect_timeout: Duration,
    /// `--max-holders` N; 1 for a reader.
    pub max_holders: u32,
}

impl Open {
    /// The same election opened for a reader, which holds no lease: no identity, N = 1, and
    /// `timing` for its requests, which each store chooses from the connect timeout.
    pub fn for_reader(self, timing: LeaseTiming) -> Open {
        Open {
            identity: String::new(),
            timing,
            max_holders: 1,
            ..self
        }
    }
}

/// A store's [`Door`], stated as what differs from store to store:
///
/// ```text
/// door! {
///     TYPE { name: "NAME", schemes: [..], spellings: [..], aliases: [..] },
///     target: TARGET,
///     parse: PARSE,
/// }
/// ```
///
/// builds a store that needs nothing contacted to be opened: the candidate is
/// `TYPE::new(target, open)` and the reader `TYPE::reader(target, open)` (each
/// `fn(TARGET, Open) -> Result<TYPE, StoreError>`, a refusal a usage error). A store that must
/// contact the server to be opened adds its own, as `candidate: |target, open| EXPR` and
/// `reader: |target, open| EXPR`, each an `async` body giving `Result<TYPE, Failure>`.
macro_rules! door {
    (
        $store:ident { $($names:tt)* },
        target: $target:ty,
        parse: $parse:path $(,)?
    ) => {
        $crate::election::door! {
            $store { $($names)* },
            target: $target,
            parse: $parse,
            candidate: |target, open| $store::new(target.clone(), open)
                .map_err(|e| $crate::exit::Failure::usage(e.to_string())),
            reader: |target, open| $store::reader(target.clone(), open)
                .map_err(|e| $crate::exit::Failure::usage(e.to_string())),
        }
    };
    (
        $store:ident {
            name: $name:literal,
            schemes: [$($scheme:literal),+],
            spellings: [$($spelling:literal),*],
            aliases: [$($alias:literal),+] $(,)?
        },
        target: $target:ty,
        parse: $parse:path,
        candidate: |$c_target:ident, $c_open:ident| $candidate:expr,
        reader: |$r_target:ident, $r_open:ident| $reader:expr $(,)?
    ) => {
        impl $crate::election::Door for $store {
            const NAME: &'static str = $name;
            const SCHEMES: &'static [&'static str] = &[$($scheme),+];
            const SPELLINGS: &'static [&'static str] = &[$($spelling),*];
            const ALIASES: &'static [&'static str] = &[$($alias),+];
            type Target = $target;

            fn parse(
                endpoints: Vec<String>,
                args: $crate::election::flags::StoreFlags,
            ) -> Result<$target, $crate::exit::Failure> {
                $parse(endpoints, args)
            }

            async fn candidate(
                $c_target: &$target,
                $c_open: $crate::election::Open,
            ) -> Result<$store, $crate::exit::Failure> {
                $candidate
            }

            async fn reader(
                $r_target: &$target,
                $r_open: $crate::election::Open,
            ) -> Result<$store, $crate::exit::Failure> {
                $reader
            }
        }
    };
}

pub(crate) use door;
