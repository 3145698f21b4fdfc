//! The line of waiters on a row store, without its SQL: who is first, when a waiter may take a
//! free slot, when the waiter ahead counts as dead, and the wait for a turn built from those.
//!
//! Each waiter has a waiter row: its id from a sequence (the order of the line; never a clock),
//! and a count its owner bumps at every look. The first in line is the waiter with no live
//! waiter row ahead (an instance not in line: none at all), so a newcomer or a leader that
//! campaigns again never takes a released row from a waiter that has not looked yet; the line
//! is first come, first served, as on etcd and ZooKeeper. With `--max-holders` N above 1 a
//! waiter may take a free slot while fewer live waiters stand ahead of it than slots are free,
//! and one that takes a slot while others stay free wakes the next waiter. A store decides
//! both inside the transaction that takes the row (PostgreSQL in its SQL).
//!
//! Waiter rows decide only the order of attempts, never who may take a lease row (that is the
//! takeover rule, [`super`]): a live waiter wrongly skipped (paused for a TTL) loses its place,
//! not safety, and joins again at the back at its next look. So a store's clock may decide
//! whether a waiter row counts as live for the order (a stepped clock may let one instance go
//! ahead of a dead-looking one); the row just ahead is skipped only as [`AheadSighting`] says.

use std::sync::Mutex;
use std::time::Duration;

use super::super::StoreError;
use crate::clock::{BootClock, Clock};

/// The waiter row just ahead of this waiter's, as this waiter saw it. Seen unchanged for a full
/// TTL on this waiter's boot clock (its owner bumps `renewals` every --retry-period), it is
/// dead: this waiter deletes it (only if still exactly that) and moves up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AheadSighting {
    pub id: i64,
    pub renewals: i64,
    /// The longer of its owner's TTL and this waiter's.
    pub ttl: Duration,
}

/// Where a look at the line put this waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// No waiter row ahead: the lease row (or a slot) is this waiter's to take.
    First,
    /// Behind a waiter row that may still be alive: look again in this long at the latest.
    Behind(Duration),
    /// Behind a waiter row seen unchanged for a full TTL: dead, to be deleted if still so.
    Dead(AheadSighting),
}

/// One waiter's sighting of the waiter row ahead of it, and since when.
#[derive(Debug)]
pub struct Line {
    /// The waiter's own TTL: a row ahead is dead after at least this long (and its owner's).
    own_ttl: Duration,
    ahead: Mutex<Option<(AheadSighting, Duration)>>,
}

impl Line {
    pub fn new(own_ttl: Duration) -> Line {
        Line {
            own_ttl,
            ahead: Mutex::new(None),
        }
    }

    /// The waiter row ahead as read: its id, its count and the TTL its owner wrote (ms).
    pub fn ahead(&self, id: i64, renewals: i64, ttl_ms: i64) -> AheadSighting {
        AheadSighting {
            id,
            renewals,
            ttl: self
                .own_ttl
                .max(Duration::from_millis(ttl_ms.max(0) as u64)),
        }
    }

    /// Notes the row ahead (none: this waiter is first) as read by a look whose answer arrived
    /// at `received`, and says where that puts this waiter at `now`.
    pub fn place(&self, ahead: Option<AheadSighting>, received: Duration, now: Duration) -> Place {
        let mut sighting = self.ahead.lock().expect("not poisoned");
        let Some(seen) = ahead else {
            *sighting = None;
            return Place::First;
        };
        let since = match sighting.as_ref() {
            Some((before, since)) if *before == seen => *since,
            _ => received,
        };
        let dead_at = since + seen.ttl;
        *sighting = Some((seen.clone(), since));
        match dead_at.saturating_sub(now) {
            left if left.is_zero() => Place::Dead(seen),
            left => Place::Behind(left),
        }
    }

    /// Forgets the row ahead (this waiter joined the line afresh, or deleted the row ahead).
    pub fn forget(&self) {
        *self.ahead.lock().expect("not poisoned") = None;
    }
}

/// How long a waiter that polls (nothing tells it of a release) may go between looks, given
/// the live waiter rows its last look counted ahead of it.
///
/// The first N waiters (`--max-holders` N) may be let in at the next release, and the few
/// behind them soon after: they look every `poll`. A waiter further back is let in only after
/// the `ahead - N` waiters beyond the first N have each had a turn, and a turn waits for the
/// look of the waiter whose turn it is (half a `poll` on average, N turns at a time), so such a
/// waiter looks every `(ahead - N) / 2N` polls: by the time the line reaches it, it looks every
/// `poll` again. A line of 200 thus costs the server tens of looks a second, not 200 per
/// `poll`. Never longer than a third of the TTL: the waiter behind takes a row unchanged for a
/// full TTL for dead, so each row is still renewed at least about three times a TTL (and its
/// expiry, a TTL after each renewal, stays in the future). Only the order of the line hangs on
/// this, never who may take a lease row.
pub fn look_spacing(poll: Duration, ttl: Duration, max_holders: u32, ahead: u64) -> Duration {
    let n = u64::from(max_holders.max(1));
    let further = ahead.saturating_sub(n);
    let polls = u32::try_from(further / (2 * n)).unwrap_or(u32::MAX).max(1);
    poll.saturating_mul(polls).min(ttl / 3).max(poll)
}

/// What a waiter's look at the line found.
#[derive(Debug)]
pub enum Look {
    /// The waiter's standing changed (its row was taken for dead and it joined again at the
    /// back, or it moved up to where it is told of releases): look again at once; `heard` is
    /// what it had heard (see [`Waiter::heard`]) before that next look.
    Again { heard: i64 },
    /// The row just ahead (none: this waiter is first), and how long until the lease row may be
    /// taken (zero: free, gone or ripe), as read by a look whose answer arrived at `received`.
    Line {
        ahead: Option<AheadSighting>,
        lease_wait: Duration,
        received: Duration,
    },
}

/// A waiter in a row store's line: what the wait for its turn ([`wait_turn`]) asks of the
/// store. Each look is one request, one transaction on the server.
pub trait Waiter {
    /// This waiter's sighting of the row ahead.
    fn line(&self) -> &Line;

    /// `--max-holders`: above 1, the first waiter looks at every slot row.
    fn max_holders(&self) -> u32;

    /// Waits up to `wait` (or less, if the store must be polled sooner) for a release told to
    /// this waiter after the `seen`th; returns the releases heard so far (more than `seen`:
    /// one was heard). A store that tells nothing returns `seen` after its sleep.
    fn heard(&self, seen: i64, wait: Duration) -> impl Future<Output = i64>;

    /// One look at the line: renews this waiter's row, reads the one just ahead and the lease
    /// row (noted as a sighting: the takeover rule).
    fn look_at_line(&self) -> impl Future<Output = Result<Look, StoreError>>;

    /// The first waiter's look at every slot row (N above 1): how long until one may be taken.
    fn look_at_slots(&self) -> impl Future<Output = Result<Duration, StoreError>>;

    /// Deletes the dead waiter row ahead, only if it is still exactly as seen.
    fn skip_dead(&self, dead: &AheadSighting) -> impl Future<Output = Result<(), StoreError>>;
}

/// Waits until this waiter's turn may have come: a release told to it, or, first in line, the
/// lease row (a slot, with N above 1) free, gone or ripe for a takeover; the caller's attempt
/// decides. `seen`: releases heard before the attempt that put this waiter behind; `wait`:
/// that attempt's wait for the lease row (this waiter may be first until its first look).
///
/// A release wakes only the first waiter in line, which then tries at once. Every waiter looks
/// at the line every --retry-period anyway (renewing its own row; a store that polls lets those
/// far back look less often, [`look_spacing`], through [`Waiter::heard`]): the first one also reads the
/// lease row, so that a holder that crashed is taken over once this waiter has seen its row
/// unchanged for a full TTL, and a release whose telling was lost (or never sent) is found
/// within a retry period. Waiters behind the first sleep through releases; the one just ahead,
/// seen unchanged for a full TTL, is dead and skipped, so that a dead waiter delays the line
/// by a TTL at most (each in a row of dead ones by another).
pub async fn wait_turn<W: Waiter>(
    waiter: &W,
    mut seen: i64,
    mut wait: Duration,
) -> Result<(), StoreError> {
    loop {
        let heard = waiter.heard(seen, wait).await;
        if heard > seen {
            return Ok(());
        }
        seen = heard;
        let (ahead, lease_wait, received) = match waiter.look_at_line().await? {
            Look::Again { heard } => {
                seen = heard;
                wait = Duration::ZERO;
                continue;
            }
            Look::Line {
                ahead,
                lease_wait,
                received,
            } => (ahead, lease_wait, received),
        };
        match waiter.line().place(ahead, received, BootClock.now()) {
            Place::First => {
                // With N above 1, the first waiter looks at every slot row.
                let lease_wait = match waiter.max_holders() {
                    1 => lease_wait,
                    _ => waiter.look_at_slots().await?,
                };
                // First in line: the lease row is free, gone, or ripe for a takeover.
                if lease_wait.is_zero() {
                    return Ok(());
                }
                wait = lease_wait;
            }
            // Not first: the lease row is the first waiter's to take. The one just ahead, dead,
            // is skipped, and the line looked at again.
            Place::Dead(ahead) => {
                waiter.skip_dead(&ahead).await?;
                waiter.line().forget();
                wait = Duration::ZERO;
            }
            Place::Behind(left) => wait = left,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_in_line_and_those_just_behind_look_every_poll() {
        let poll = Duration::from_millis(500);
        for ahead in 0..=3 {
            assert_eq!(look_spacing(poll, 8 * S, 1, ahead), poll, "{ahead} ahead");
        }
        for ahead in 0..=9 {
            assert_eq!(
                look_spacing(poll, 8 * S, 2, ahead),
                poll,
                "{ahead} ahead, N = 2"
            );
        }
        assert_eq!(look_spacing(poll, 8 * S, 2, 10), 2 * poll);
    }

    #[test]
    fn further_back_a_waiter_looks_less_often_but_three_times_a_ttl() {
        let poll = Duration::from_millis(500);
        assert_eq!(look_spacing(poll, 8 * S, 1, 5), 2 * poll);
        assert_eq!(look_spacing(poll, 8 * S, 1, 9), 4 * poll);
        assert_eq!(look_spacing(poll, 8 * S, 1, 199), 8 * S / 3);
        assert_eq!(look_spacing(poll, 8 * S, 1, u64::MAX), 8 * S / 3);
        // A TTL under three polls never slows a waiter below the poll.
        assert_eq!(look_spacing(poll, S, 1, 199), poll);
        let mut last = Duration::ZERO;
        for ahead in 0..300 {
            let spacing = look_spacing(poll, 8 * S, 1, ahead);
            assert!(spacing >= last, "{ahead} ahead: {spacing:?} < {last:?}");
            last = spacing;
        }
    }

    #[test]
    fn no_row_ahead_is_first() {
        let line = Line::new(10 * S);
        assert_eq!(line.place(None, S, S), Place::First);
    }

    /// The row ahead is dead only once seen unchanged for the longer of both TTLs; a look by
    /// its owner (its count moved) starts the count afresh.
    #[test]
    fn the_row_ahead_is_dead_after_a_full_ttl_unchanged() {
        let line = Line::new(10 * S);
        let t0 = 1000 * S;
        let ahead = line.ahead(4, 1, 30_000);
        assert_eq!(ahead.ttl, 30 * S);
        assert_eq!(
            line.place(Some(ahead.clone()), t0, t0),
            Place::Behind(30 * S)
        );
        assert_eq!(
            line.place(Some(ahead.clone()), t0 + 20 * S, t0 + 20 * S),
            Place::Behind(10 * S)
        );
        let looked = line.ahead(4, 2, 30_000);
        assert_eq!(
            line.place(Some(looked.clone()), t0 + 25 * S, t0 + 25 * S),
            Place::Behind(30 * S)
        );
        assert_eq!(
            line.place(Some(looked.clone()), t0 + 55 * S, t0 + 55 * S),
            Place::Dead(looked)
        );
        // Another row ahead (the dead one went): counted afresh; the waiter's own TTL when
        // longer than its owner's.
        let next = line.ahead(2, 9, 1_000);
        assert_eq!(next.ttl, 10 * S);
        assert_eq!(
            line.place(Some(next), t0 + 56 * S, t0 + 56 * S),
            Place::Behind(10 * S)
        );
        line.forget();
        assert_eq!(
            line.place(Some(line.ahead(2, 9, 1_000)), t0 + 70 * S, t0 + 70 * S),
            Place::Behind(10 * S)
        );
    }

    /// A scripted waiter: the looks it answers, in order, and what the wait asked of it.
    struct Scripted {
        line: Line,
        max_holders: u32,
        /// What `heard` answers: a release heard when it says so.
        releases: Mutex<Vec<bool>>,
        looks: Mutex<Vec<Look>>,
        slot_waits: Mutex<Vec<Duration>>,
        /// (seen, wait) of every `heard`, the ids skipped, in order.
        asked: Mutex<Vec<(i64, Duration)>>,
        skipped: Mutex<Vec<i64>>,
    }

    impl Scripted {
        fn new(own_ttl: Duration, max_holders: u32, looks: Vec<Look>) -> Scripted {
            Scripted {
                line: Line::new(own_ttl),
                max_holders,
                releases: Mutex::new(Vec::new()),
                looks: Mutex::new(looks.into_iter().rev().collect()),
                slot_waits: Mutex::new(Vec::new()),
                asked: Mutex::new(Vec::new()),
                skipped: Mutex::new(Vec::new()),
            }
        }
    }

    impl Waiter for Scripted {
        fn line(&self) -> &Line {
            &self.line
        }

        fn max_holders(&self) -> u32 {
            self.max_holders
        }

        async fn heard(&self, seen: i64, wait: Duration) -> i64 {
            self.asked.lock().unwrap().push((seen, wait));
            let released = self.releases.lock().unwrap().pop().unwrap_or(false);
            seen + i64::from(released)
        }

        async fn look_at_line(&self) -> Result<Look, StoreError> {
            Ok(self.looks.lock().unwrap().pop().expect("a look scripted"))
        }

        async fn look_at_slots(&self) -> Result<Duration, StoreError> {
            Ok(self.slot_waits.lock().unwrap().remove(0))
        }

        async fn skip_dead(&self, dead: &AheadSighting) -> Result<(), StoreError> {
            self.skipped.lock().unwrap().push(dead.id);
            Ok(())
        }
    }

    fn line_look(ahead: Option<AheadSighting>, lease_wait: Duration) -> Look {
        Look::Line {
            ahead,
            lease_wait,
            received: BootClock.now(),
        }
    }

    /// Behind a live waiter it waits for that one's TTL; a dead one ahead is skipped and the
    /// line looked at again at once; first in line, it waits for the lease row and returns once
    /// that may be taken. A changed standing (`Again`) looks again at once from what was heard.
    #[tokio::test]
    async fn the_wait_for_a_turn_follows_the_line() {
        let alive = AheadSighting {
            id: 7,
            renewals: 1,
            ttl: 60 * S,
        };
        let dead = AheadSighting {
            id: 8,
            renewals: 4,
            ttl: Duration::ZERO,
        };
        let waiter = Scripted::new(
            Duration::ZERO,
            1,
            vec![
                Look::Again { heard: 4 },
                line_look(Some(alive), Duration::ZERO),
                line_look(Some(dead), Duration::ZERO),
                line_look(None, 2 * S),
                line_look(None, Duration::ZERO),
            ],
        );
        wait_turn(&waiter, 3, 5 * S).await.unwrap();
        let asked = waiter.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 5, "{asked:?}");
        assert_eq!(asked[0], (3, 5 * S));
        assert_eq!(asked[1], (4, Duration::ZERO));
        let (seen, behind) = asked[2];
        assert!(
            seen == 4 && behind > 59 * S && behind <= 60 * S,
            "{behind:?}"
        );
        assert_eq!(asked[3], (4, Duration::ZERO));
        assert_eq!(asked[4], (4, 2 * S));
        assert_eq!(*waiter.skipped.lock().unwrap(), [8]);
    }

    /// A release heard ends the wait without a look; with N above 1 the first waiter's wait is
    /// its look at every slot row, not the lease row's.
    #[tokio::test]
    async fn a_release_heard_or_a_free_slot_ends_the_wait() {
        let waiter = Scripted::new(S, 1, Vec::new());
        waiter.releases.lock().unwrap().push(true);
        wait_turn(&waiter, 0, S).await.unwrap();
        assert_eq!(*waiter.asked.lock().unwrap(), [(0, S)]);

        let slots = Scripted::new(
            S,
            3,
            vec![
                line_look(None, Duration::ZERO),
                line_look(None, Duration::ZERO),
            ],
        );
        *slots.slot_waits.lock().unwrap() = vec![7 * S, Duration::ZERO];
        wait_turn(&slots, 0, Duration::ZERO).await.unwrap();
        assert_eq!(
            *slots.asked.lock().unwrap(),
            [(0, Duration::ZERO), (0, 7 * S)]
        );
    }
}
