//! `leader-exec hold` and `leader-exec release`: a slot held with no process behind it, for
//! rolling reboots (what CoreOS locksmith does): a host takes a slot before it reboots and gives
//! it back once it is up again, with a bound, so that a host that never comes back does not
//! keep its slot for ever.
//!
//! `hold` joins the line exactly as the run form does and, once its turn comes, has the store
//! turn its claim into a held one ([`crate::election::Campaign::hold_claim`]: the store's own
//! rule ends it after `--for`, never a wall clock), records that in the holder's state record
//! ([`State::held_for_ms`]) and exits without releasing. `release` removes the claim of a
//! current holder that has both the identity asked for and such a record, fenced on its token
//! ([`crate::election::Handover::remove_claim`]): a run-form holder that happens to carry the
//! same identity is never removed, so `release` cannot cause an overlap.

use std::time::{Duration, SystemTime};

use super::{first_contact, read_settled};
use crate::clock::BootClock;
use crate::election::{Backoff, Candidacy, Keeper, Leader, Renewal, Scope, Store, Turn};
use crate::exit::{self, Failure, RELEASE_NONE};
use crate::records::published::{self, Command, State};
use crate::signals::Signals;

/// What `hold` was asked for.
pub struct Request {
    pub identity: String,
    pub max_holders: u32,
    pub bound: Duration,
    pub no_wait: bool,
    pub wait_timeout: Option<Duration>,
    /// How often the place in line is renewed while waiting.
    pub retry_period: Duration,
}

/// The least `--for`: etcd leases are whole seconds.
pub const LEAST_BOUND: Duration = Duration::from_secs(1);

/// The current holders that are slots held by `identity` (their state record says so and
/// names their token).
async fn held_by<'a, B: Store>(
    backend: &B,
    scope: &Scope,
    holders: &'a [Leader],
    max_holders: u32,
    identity: &str,
    limit: Duration,
) -> anyhow::Result<Vec<&'a Leader>> {
    let mut mine = Vec::new();
    for holder in holders {
        if holder.identity != identity.as_bytes() {
            continue;
        }
        let state = published::read(backend, scope, max_holders, holder.token, limit).await?;
        if state.is_some_and(|s| s.held_for_ms.is_some()) {
            mine.push(holder);
        }
    }
    Ok(mine)
}

/// `leader-exec hold`.
pub async fn hold<B: Store>(
    backend: &B,
    scope: &Scope,
    request: Request,
    limit: Duration,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    if request.bound < LEAST_BOUND {
        return Err(Failure::usage("--for must be at least 1s").into());
    }
    // Holding again under one identity (a unit started again after a crash loop) answers the
    // slot already held: never two slots for one host.
    let observation = read_settled(backend, limit).await?;
    let held = held_by(
        backend,
        scope,
        &observation.holders,
        observation.max_holders,
        &request.identity,
        limit,
    )
    .await?;
    if let Some(holder) = held.first() {
        tracing::info!(
            event = "already-held",
            token = holder.token,
            "a slot is already held under this identity"
        );
        super::print(&format!("{}\n", holder.token));
        return Ok(0);
    }
    let waited_until = match (request.no_wait, request.wait_timeout) {
        (true, _) => Some(Duration::ZERO),
        (false, timeout) => timeout,
    };
    let started = tokio::time::Instant::now();
    loop {
        let candidacy =
            first_contact(backend, limit, "joining the line", || backend.campaign()).await?;
        // Trying once is one look, however long it takes (bounded by --connect-timeout below):
        // a deadline already passed must not win the race against the look it allows.
        let once = request.no_wait || waited_until == Some(Duration::ZERO);
        let until = waited_until.filter(|_| !once).map(|w| started + w);
        let turn = tokio::select! {
            biased;
            signal = signals.recv() => {
                let _ = backend.release_claim(&candidacy).await;
                return Ok(128 + signal as u8);
            }
            turn = wait_once_or_more(backend, &candidacy, once, limit) => turn,
            () = keep_place(backend, &candidacy, request.retry_period) => Turn::Gone,
            () = sleep_until(until) => {
                let _ = backend.release_claim(&candidacy).await;
                return Err(not_acquired(&request).into());
            }
        };
        let token = match turn {
            Turn::Leading { token } => token,
            Turn::Gone => continue,
            Turn::Mismatch { theirs } => {
                let _ = backend.release_claim(&candidacy).await;
                return Err(Failure::usage(crate::election::mismatch_message(
                    &scope.lease,
                    request.max_holders,
                    theirs,
                ))
                .into());
            }
            Turn::Behind(_) => {
                let _ = backend.release_claim(&candidacy).await;
                return Err(not_acquired(&request).into());
            }
        };
        let leading = candidacy.leading(token);
        // Bounded like every request of a subcommand: a store that stops answering here leaves
        // the claim either as it was (it expires as a waiter's would, or, taken, within one
        // --ttl) or held without its record (it ends at its bound).
        let held = crate::election::bounded::bounded(
            backend,
            limit,
            "holding the slot",
            backend.hold_claim(&leading, request.bound),
        )
        .await?;
        let Some(held) = held else {
            return Err(Failure::new(
                exit::LEADERSHIP_LOST,
                "the slot was lost before it could be held; run hold again",
            )
            .into());
        };
        let now = SystemTime::now();
        let mut state = State::new(&held, &request.identity, now, Command::Holding);
        state.hold_until = Some(published::rfc3339(now + request.bound));
        state.held_for_ms = u64::try_from(request.bound.as_millis()).ok();
        let key = published::holder_key(scope, request.max_holders, held.token);
        if !record(backend, &held, &key, &state, limit).await {
            // Without its record `release` could not tell the slot from a run-form holder's:
            // give it back rather than leave one that only its bound ends.
            let _ = backend
                .remove_claim(&as_leader(&held, &request.identity))
                .await;
            return Err(Failure::usage("could not record the held slot in the store").into());
        }
        tracing::info!(event = "held", token = held.token, "slot held");
        super::print(&format!("{}\n", held.token));
        return Ok(0);
    }
}

fn not_acquired(request: &Request) -> Failure {
    Failure::new(
        exit::NOT_ACQUIRED,
        format!(
            "not acquired: {} while {}",
            match request.max_holders {
                1 => "the slot is held, or others are ahead in line,".to_owned(),
                n => format!("all {n} slots are held, or others are ahead in line,"),
            },
            if request.no_wait {
                "trying once (--no-wait)".to_owned()
            } else {
                format!(
                    "waiting {}",
                    humantime::format_duration(request.wait_timeout.unwrap_or_default())
                )
            }
        ),
    )
}

async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// The turn: after one look with `once` (retried through transient errors for at most
/// `limit`, then taken as "behind": not acquired), else after waiting in line.
async fn wait_once_or_more<B: Store>(
    backend: &B,
    candidacy: &Candidacy,
    once: bool,
    limit: Duration,
) -> Turn {
    if once {
        let look = async {
            let mut backoff = Backoff::new();
            loop {
                match backend.check_turn(candidacy).await {
                    Ok(turn) => return turn,
                    Err(e) => {
                        tracing::debug!(error = %e, "reading the election failed; trying again");
                        backoff.sleep().await;
                    }
                }
            }
        };
        return tokio::time::timeout(limit, look)
            .await
            .unwrap_or_else(|_| Turn::Behind(nobody_ahead()));
    }
    crate::election::wait_for_turn(backend, &BootClock, candidacy, Duration::from_millis(200))
        .await
        .0
}

/// What a look that never answered counts as: not acquired.
fn nobody_ahead() -> crate::election::Ahead {
    crate::election::Ahead {
        key: Vec::new(),
        revision: 0,
        expires_in: None,
        holders: Vec::new(),
    }
}

/// Keeps the place in line alive while waiting; completes when the store says it is gone.
async fn keep_place<B: Store>(backend: &B, candidacy: &Candidacy, period: Duration) {
    let mut keeper = backend.keeper(candidacy);
    loop {
        tokio::time::sleep(period).await;
        match tokio::time::timeout(period, keeper.renew()).await {
            Ok(Ok(Renewal::Alive)) => {}
            Ok(Ok(Renewal::Expired)) => return,
            Ok(Err(e)) => tracing::debug!(error = %e, "renewing the place in line failed"),
            Err(_) => keeper.reset(),
        }
    }
}

/// Writes the held slot's state record, retried within `limit`; whether it was written.
async fn record<B: Store>(
    backend: &B,
    held: &Candidacy,
    key: &str,
    state: &State,
    limit: Duration,
) -> bool {
    let value = serde_json::to_vec(state).expect("states serialize");
    let attempt = async {
        let mut backoff = Backoff::new();
        loop {
            match backend.put_on_lease_fenced(held, key, value.clone()).await {
                Ok(written) => return written,
                Err(e) if e.is_transient() => backoff.sleep().await,
                Err(e) => {
                    tracing::warn!(error = %e, "recording the held slot failed");
                    return false;
                }
            }
        }
    };
    tokio::time::timeout(limit, attempt).await.unwrap_or(false)
}

/// The held candidacy as readers see it, for a fenced removal.
fn as_leader(held: &Candidacy, identity: &str) -> Leader {
    Leader {
        key: held.key.clone().into_bytes(),
        identity: identity.as_bytes().to_vec(),
        token: held.token,
        lease_id: held.lease_id,
        provisional: false,
    }
}

/// `leader-exec release`.
pub async fn release<B: Store>(
    backend: &B,
    scope: &Scope,
    identity: &str,
    limit: Duration,
) -> anyhow::Result<u8> {
    let observation = read_settled(backend, limit).await?;
    let held = held_by(
        backend,
        scope,
        &observation.holders,
        observation.max_holders,
        identity,
        limit,
    )
    .await?;
    let mut released = false;
    for holder in held {
        // Fenced on the token: a slot that ended meanwhile (its bound) and was taken by
        // someone else is never touched.
        let removed = crate::election::bounded::bounded(
            backend,
            limit,
            "releasing the slot",
            backend.remove_claim(holder),
        )
        .await?;
        if removed {
            tracing::info!(event = "released", token = holder.token, "slot released");
            released = true;
        }
    }
    if released {
        Ok(0)
    } else {
        tracing::warn!(
            event = "none-held",
            "no slot of lease '{}' is held by '{}': nothing to release",
            crate::escape::escape_str(&scope.lease),
            crate::escape::escape_str(identity)
        );
        Ok(RELEASE_NONE)
    }
}
