//! The takeover rule's bookkeeping: a held row as a taker saw it, and since when, for the one
//! lease row (`--max-holders` 1) and for every slot row (N above 1). Why the rule is safe is the
//! module's header ([`super`]); this file keeps the instants it counts from.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::slots::SlotRow;

/// A lease row as a store reads it (the columns every row store keeps for each lease row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The holder's identity; `None`: released.
    pub holder: Option<String>,
    pub token: i64,
    /// Bumped by every acquisition and every renewal.
    pub renewals: i64,
    /// `expires_at` in microseconds since the epoch: compared, never used as a time.
    pub expires_us: i64,
    /// The TTL the holder wrote (its own), in milliseconds.
    pub ttl_ms: i64,
    /// The server that answered, where the store can tell one server from another (MySQL's
    /// `@@server_id`); 0 elsewhere. Part of a sighting: a row seen on one server and then on
    /// another (a failover) is a new sighting, counted afresh, since the second server may not
    /// have the writes the first one had (a lagging replica promoted).
    pub server: i64,
}

/// An unreleased lease row as a taker saw it. The row is taken over only when the taker has
/// seen exactly this for a full TTL on its own boot clock, and only by a write conditional on
/// exactly this (see [`super`]). `expires_us` is part of it so that a renewal by an older
/// leader-exec (which does not bump `renewals`) also counts as a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    pub holder: String,
    pub token: i64,
    pub renewals: i64,
    /// `expires_at` in microseconds since the epoch (compared, never used as a time).
    pub expires_us: i64,
    /// The server that answered ([`Row::server`]).
    pub server: i64,
    /// The longer of the holder's TTL and the taker's own: what the taker waits.
    pub ttl: Duration,
}

impl Sighting {
    /// The row as a sighting by a taker whose own TTL is `own_ttl`; `None` for a released row
    /// (free at once).
    pub fn of(row: &Row, own_ttl: Duration) -> Option<Sighting> {
        Some(Sighting {
            holder: row.holder.clone()?,
            token: row.token,
            renewals: row.renewals,
            expires_us: row.expires_us,
            server: row.server,
            ttl: own_ttl.max(Duration::from_millis(row.ttl_ms.max(0) as u64)),
        })
    }
}

/// The instant a sighting counts from: the earlier one if the row is still exactly as seen then,
/// `received` (the arrival of the answer that showed it) otherwise.
fn since(before: Option<&(Sighting, Duration)>, seen: &Sighting, received: Duration) -> Duration {
    match before {
        Some((earlier, since)) if earlier == seen => *since,
        _ => received,
    }
}

/// A taker's sightings: of the one lease row, and of each slot row by its name. Instants are
/// CLOCK_BOOTTIME readings (`clock::BootClock`), passed in, so that the rule can be tested
/// against made-up instants.
#[derive(Debug)]
pub struct Sightings {
    /// The taker's own TTL: it waits at least this long (and at least the holder's).
    own_ttl: Duration,
    /// The lease row as last seen, and since when.
    one: Mutex<Option<(Sighting, Duration)>>,
    /// Each held slot row (and each row another N holds) as last seen, and since when.
    slots: Mutex<HashMap<String, (Sighting, Duration)>>,
}

impl Sightings {
    pub fn new(own_ttl: Duration) -> Sightings {
        Sightings {
            own_ttl,
            one: Mutex::new(None),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Notes the lease row as read by a request whose answer arrived at `received`, and returns
    /// how long from `now` until it may be taken: zero when it is free or has been seen
    /// unchanged for its full TTL. A sighting first made now counts from `received`; one seen
    /// before unchanged keeps its first instant; any change counts afresh.
    pub fn sight(&self, row: &Row, received: Duration, now: Duration) -> Duration {
        let mut one = self.one.lock().expect("not poisoned");
        let Some(seen) = Sighting::of(row, self.own_ttl) else {
            *one = None;
            return Duration::ZERO;
        };
        let since = since(one.as_ref(), &seen, received);
        let ripe_at = since + seen.ttl;
        *one = Some((seen, since));
        ripe_at.saturating_sub(now)
    }

    /// The lease row's sighting that may be taken over at `now`: seen unchanged for its full TTL.
    pub fn ripe(&self, now: Duration) -> Option<Sighting> {
        let one = self.one.lock().expect("not poisoned");
        let (seen, since) = one.as_ref()?;
        (now >= *since + seen.ttl).then(|| seen.clone())
    }

    /// Forgets every sighting (the taker won: nothing of before counts for its next wait).
    pub fn forget(&self) {
        *self.one.lock().expect("not poisoned") = None;
        self.slots.lock().expect("not poisoned").clear();
    }

    /// Forgets the lease row's sighting only.
    pub fn forget_one(&self) {
        *self.one.lock().expect("not poisoned") = None;
    }

    /// Notes every slot row as read at `received` (sightings of rows not among them are
    /// dropped); returns the oldest holder seen (lowest token) and how long from `now` until
    /// one slot may be taken (zero: one is free or ripe). A row held by another N keeps
    /// everything out until it has ripened, and every such row must: the wait is then at least
    /// the longest of theirs.
    pub fn sight_slots(
        &self,
        slots: &[SlotRow],
        received: Duration,
        now: Duration,
    ) -> (Option<String>, Duration) {
        let mut sightings = self.slots.lock().expect("not poisoned");
        let before = std::mem::take(&mut *sightings);
        let mut wait: Option<Duration> = None;
        let mut blocked = Duration::ZERO;
        let mut oldest: Option<(i64, String)> = None;
        for slot in slots {
            let Some(seen) = slot
                .seen
                .as_ref()
                .and_then(|r| Sighting::of(r, self.own_ttl))
            else {
                // Not there yet, or released: free.
                wait = Some(Duration::ZERO);
                continue;
            };
            if oldest.as_ref().is_none_or(|(t, _)| seen.token < *t) {
                oldest = Some((seen.token, seen.holder.clone()));
            }
            let since = since(before.get(&slot.row), &seen, received);
            let left = (since + seen.ttl).saturating_sub(now);
            if slot.other {
                blocked = blocked.max(left);
            } else {
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            sightings.insert(slot.row.clone(), (seen, since));
        }
        (
            oldest.map(|(_, h)| h),
            wait.unwrap_or(Duration::ZERO).max(blocked),
        )
    }

    /// The slot rows seen unchanged for their full TTL at `now`, the oldest (lowest token)
    /// first: one of the taker's N may be taken over, another N's freed.
    pub fn ripe_rows(&self, now: Duration) -> Vec<(String, Sighting)> {
        let sightings = self.slots.lock().expect("not poisoned");
        let mut ripe = sightings
            .iter()
            .filter(|(_, (seen, since))| now >= *since + seen.ttl)
            .map(|(row, (seen, _))| (row.clone(), seen.clone()))
            .collect::<Vec<_>>();
        ripe.sort_by_key(|(_, seen)| seen.token);
        ripe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn row(holder: Option<&str>, token: i64, renewals: i64, ttl_ms: i64) -> Row {
        Row {
            holder: holder.map(str::to_owned),
            token,
            renewals,
            expires_us: 1_000_000,
            ttl_ms,
            server: 0,
        }
    }

    fn held(name: &str, holder: &str, token: i64, renewals: i64) -> SlotRow {
        SlotRow {
            row: name.into(),
            seen: Some(row(Some(holder), token, renewals, 1_000)),
            other: false,
        }
    }

    fn free(name: &str) -> SlotRow {
        SlotRow {
            row: name.into(),
            seen: None,
            other: false,
        }
    }

    /// Ripe exactly a full TTL after the first sighting, not an instant before, however often
    /// it is seen unchanged meanwhile.
    #[test]
    fn a_held_row_ripens_a_full_ttl_after_it_was_first_seen() {
        let s = Sightings::new(60 * S);
        let t0 = 1000 * S;
        assert_eq!(s.sight(&row(Some("a"), 7, 3, 60_000), t0, t0), 60 * S);
        assert!(s.ripe(t0).is_none());
        // Seen again unchanged: the count keeps its first instant.
        assert_eq!(
            s.sight(&row(Some("a"), 7, 3, 60_000), t0 + 30 * S, t0 + 30 * S),
            30 * S
        );
        assert!(s.ripe(t0 + 60 * S - Duration::from_nanos(1)).is_none());
        let ripe = s.ripe(t0 + 60 * S).expect("ripe after a full TTL");
        assert_eq!(
            (ripe.holder.as_str(), ripe.token, ripe.renewals),
            ("a", 7, 3)
        );
        assert_eq!(
            s.sight(&row(Some("a"), 7, 3, 60_000), t0 + 61 * S, t0 + 61 * S),
            Duration::ZERO
        );
    }

    /// Any change — a renewal (the count), a takeover (the token, the holder), a renewal by an
    /// older version (only `expires_at`) — starts the count afresh.
    #[test]
    fn a_change_restarts_the_count() {
        let s = Sightings::new(60 * S);
        let t0 = 1000 * S;
        s.sight(&row(Some("a"), 7, 3, 60_000), t0, t0);
        let later = t0 + 50 * S;
        let renewed = row(Some("a"), 7, 4, 60_000);
        assert_eq!(s.sight(&renewed, later, later), 60 * S);
        assert!(s.ripe(t0 + 60 * S).is_none());
        let taken = row(Some("b"), 8, 4, 60_000);
        assert_eq!(s.sight(&taken, later + S, later + S), 60 * S);
        let old_version = Row {
            expires_us: 2_000_000,
            ..taken
        };
        assert_eq!(s.sight(&old_version, later + 2 * S, later + 2 * S), 60 * S);
        // The same row answered by another server (a failover): counted afresh too, since the
        // new server may lack writes the old one had.
        let failed_over = Row {
            server: 2,
            ..old_version.clone()
        };
        let t1 = later + 30 * S;
        s.sight(&old_version, t1, t1);
        assert_eq!(s.sight(&failed_over, t1 + S, t1 + S), 60 * S);
        assert!(s.ripe(later + 62 * S + S).is_none());
        // A released row is free at once, and leaves nothing to take over.
        assert_eq!(
            s.sight(&row(None, 8, 5, 60_000), later + 3 * S, later + 3 * S),
            Duration::ZERO
        );
        assert!(s.ripe(later + 1000 * S).is_none());
    }

    /// The taker waits the longer of its own TTL and the one the holder wrote.
    #[test]
    fn the_longer_ttl_wins() {
        let t0 = 1000 * S;
        let short_taker = Sightings::new(10 * S);
        assert_eq!(
            short_taker.sight(&row(Some("a"), 7, 3, 120_000), t0, t0),
            120 * S
        );
        assert!(short_taker.ripe(t0 + 119 * S).is_none());
        assert!(short_taker.ripe(t0 + 120 * S).is_some());
        let long_taker = Sightings::new(90 * S);
        assert_eq!(
            long_taker.sight(&row(Some("a"), 7, 3, 1_000), t0, t0),
            90 * S
        );
        // A negative TTL written by hand counts as none: the taker's own still holds.
        assert_eq!(long_taker.sight(&row(Some("b"), 8, 0, -5), t0, t0), 90 * S);
    }

    /// The wait counts from the answer's arrival (`received`), not from the later instant the
    /// taker looks at it.
    #[test]
    fn the_count_starts_at_the_answer() {
        let s = Sightings::new(60 * S);
        let t0 = 1000 * S;
        assert_eq!(
            s.sight(&row(Some("a"), 7, 3, 60_000), t0, t0 + 5 * S),
            55 * S
        );
    }

    /// Each slot row ripens on its own: seen unchanged for a full TTL; a renewal of one starts
    /// its count afresh and leaves the others' alone; a free or missing slot is free at once.
    #[test]
    fn slot_rows_ripen_each_on_its_own() {
        let s = Sightings::new(60 * S);
        let t0 = 1000 * S;
        let rows = [
            held("l", "a", 7, 1),
            held("l/2", "b", 9, 1),
            held("l/3", "c", 8, 1),
        ];
        let (oldest, wait) = s.sight_slots(&rows, t0, t0);
        assert_eq!(oldest.as_deref(), Some("a"));
        assert_eq!(wait, 60 * S);
        // Seen again later: b renewed (its count afresh), a and c unchanged (ripe, the oldest
        // first).
        let at = t0 + 61 * S;
        let rows = [
            held("l", "a", 7, 1),
            held("l/2", "b", 9, 2),
            held("l/3", "c", 8, 1),
        ];
        assert_eq!(s.sight_slots(&rows, at, at).1, Duration::ZERO);
        let ripe = s.ripe_rows(at);
        let ripe = ripe.iter().map(|(row, s)| (row.as_str(), s.token));
        assert_eq!(ripe.collect::<Vec<_>>(), [("l", 7), ("l/3", 8)]);
        // Every row renewed: nothing ripe, a full TTL to go.
        let at = at + S;
        let rows = [
            held("l", "a", 7, 2),
            held("l/2", "b", 9, 3),
            held("l/3", "c", 8, 2),
        ];
        assert_eq!(s.sight_slots(&rows, at, at).1, 60 * S);
        assert!(s.ripe_rows(at).is_empty());
        // A slot not there yet is free.
        let (_, wait) = s.sight_slots(&[held("l", "a", 7, 2), free("l/2")], at, at);
        assert_eq!(wait, Duration::ZERO);
        // A row no longer among those read is forgotten.
        assert!(s.ripe_rows(at + 100 * S).iter().all(|(row, _)| row == "l"));
    }

    /// A row another N holds keeps a free slot from being taken until it has ripened, however
    /// its `expires_at` looks (the sighting carries no server clock); ripe, it is among the
    /// rows the next attempt frees. Of several, the longest wait counts.
    #[test]
    fn another_n_blocks_until_ripe() {
        let s = Sightings::new(60 * S);
        let other = |name: &str, renewals| SlotRow {
            other: true,
            ..held(name, "x", 5, renewals)
        };
        let t0 = 1000 * S;
        let (_, wait) = s.sight_slots(
            &[held("l", "a", 7, 1), free("l/2"), other("l/4", 1)],
            t0,
            t0,
        );
        assert_eq!(wait, 60 * S);
        assert!(s.ripe_rows(t0).is_empty());
        // A second one, seen later: the wait is the longer of the two.
        let at = t0 + 30 * S;
        let (_, wait) = s.sight_slots(&[free("l/2"), other("l/4", 1), other("l/5", 1)], at, at);
        assert_eq!(wait, 60 * S);
        // The first ripe, the second not yet: still kept out.
        let at = t0 + 60 * S;
        let (_, wait) = s.sight_slots(&[free("l/2"), other("l/4", 1), other("l/5", 1)], at, at);
        assert_eq!(wait, 30 * S);
        let ripe = s.ripe_rows(at);
        assert_eq!(ripe.len(), 1);
        assert_eq!((ripe[0].0.as_str(), ripe[0].1.renewals), ("l/4", 1));
        // Both ripe: nothing keeps the free slot.
        let at = t0 + 90 * S;
        let (_, wait) = s.sight_slots(&[free("l/2"), other("l/4", 1), other("l/5", 1)], at, at);
        assert_eq!(wait, Duration::ZERO);
        assert_eq!(s.ripe_rows(at).len(), 2);
    }

    #[test]
    fn forgetting_starts_every_count_afresh() {
        let s = Sightings::new(60 * S);
        let t0 = 1000 * S;
        s.sight(&row(Some("a"), 7, 3, 60_000), t0, t0);
        s.sight_slots(&[held("l/2", "b", 9, 1)], t0, t0);
        s.forget();
        let at = t0 + 100 * S;
        assert!(s.ripe(at).is_none());
        assert!(s.ripe_rows(at).is_empty());
        assert_eq!(s.sight(&row(Some("a"), 7, 3, 60_000), at, at), 60 * S);
    }
}
