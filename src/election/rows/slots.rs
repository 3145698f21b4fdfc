//! `--max-holders` N above 1 on a row store: N slot rows per lease name, in the one table of
//! lease rows.
//!
//! Slot 1 is the lease row `NAME` itself; slot k (2 ≤ k ≤ N) is the row `NAME/k`. A lease name
//! never contains '/' (validate.rs), so no other name's row can be one, and a listing folds them
//! into their name ([`lease_of_row`]). Each slot row is a lease row like any other: one holder, its
//! own token, renewed by (row, holder, token) without a clock, released with holder NULL, taken
//! over only as [`Sighting`](super::sighting::Sighting) says. Every row carries the N of the
//! instance that last acquired it; a held row another N wrote keeps everything of the name out
//! until the taker has seen it unchanged for a full TTL
//! ([`Sightings::sight_slots`](super::Sightings::sight_slots)).
//!
//! Why no N+1st holder is the store's own matter, since it rests on its transactions: every
//! acquisition of any slot row of a name runs under one lock on the row `NAME` and sees every
//! earlier one committed, and takes only a slot among the N that is free or ripe, by a write
//! conditional on exactly that.

use super::Row;

/// One slot row (or a row another N holds) as an attempt or a look read it.
#[derive(Clone, Debug)]
pub struct SlotRow {
    /// The row's name: `NAME` or `NAME/k`.
    pub row: String,
    /// `None`: the slot row is not there yet (free).
    pub seen: Option<Row>,
    /// Held by an instance with another N: nothing is taken until it has ripened.
    pub other: bool,
}

/// The most slots a name may have: what a row's stored N is clamped to.
pub const MAX_N: i64 = 1000;

/// The lease name a row belongs to: the row `NAME` itself, or slot row `NAME/k` (lease names
/// never contain '/': validate.rs).
pub fn lease_of_row(row: &str) -> &str {
    row.split_once('/').map_or(row, |(name, _)| name)
}

/// A stored N (a column's value) as N: untrusted, so anything out of range reads as its bound.
pub fn clamp_n(n: i64) -> u32 {
    u32::try_from(n.clamp(1, MAX_N)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_rows_fold_into_their_lease_name() {
        assert_eq!(lease_of_row("jobs"), "jobs");
        assert_eq!(lease_of_row("jobs/2"), "jobs");
        assert_eq!(lease_of_row("jobs/17"), "jobs");
    }

    #[test]
    fn a_stored_n_is_clamped() {
        assert_eq!(clamp_n(0), 1);
        assert_eq!(clamp_n(-3), 1);
        assert_eq!(clamp_n(3), 3);
        assert_eq!(clamp_n(5000), 1000);
        assert_eq!(clamp_n(i64::MAX), 1000);
    }
}
