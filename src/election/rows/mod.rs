//! What every store of rows with transactions (PostgreSQL, MySQL) shares, without its SQL: the
//! takeover rule and its bookkeeping ([`Sightings`]), the line of waiters ([`line`](mod@line): who
//! is first, when the waiter ahead is dead, the wait for a turn behind the [`line::Waiter`] trait),
//! and slot rows for `--max-holders` ([`slots`]). A store keeps its own statements, sessions, TLS,
//! how it tells waiters of a release, and the decisions it makes in one transaction.
//!
//! A row store uses them thus: every read of a lease row (an attempt that lost, a look) is noted
//! with [`Sightings::sight`] at the instant its answer arrived, and an attempt offers to take a
//! held row only as [`Sightings::ripe`] gives it, conditional on exactly that sighting; with N
//! above 1 the same by [`Sightings::sight_slots`] and [`Sightings::ripe_rows`]. Its
//! `Campaign::predecessor_gone` is [`line::wait_turn`] over its own [`line::Waiter`] (how a
//! waiter hears of a release, and its one-statement look at the line).
//!
//! A row store keeps one lease row per lease name (and slot): `holder` (none when released),
//! `token` (above every earlier token of the name, never reset), `renewals` (bumped by every
//! acquisition and renewal), `expires_at` on the server's clock (a hint for waiters and a
//! display), and the TTL its holder wrote. A renewal is a write conditional on (row, holder,
//! token), with no clock in the condition; no row is a certain loss.
//!
//! # No wall clock decides a takeover
//!
//! A released row (holder none) is taken at once, by the first in line. A held row is taken over
//! only when the taker has itself seen it unchanged — holder, token, renewals and `expires_at` —
//! for a full TTL on its own CLOCK_BOOTTIME (the longer of its own TTL and the one the holder
//! wrote), and only by a write conditional on exactly that ([`Sighting`](sighting::Sighting)). The
//! server's wall clock (`expires_at <= now()`) decides nothing, so a step of it can neither hand
//! the row to a waiter nor take it from its leader.
//!
//! Why that is safe: every successful renewal bumps `renewals`, and each acquisition takes a
//! new, greater `token`; neither ever goes back, so a row that shows the same sighting at two
//! instants showed it all along in between. The holder's last renewal that wrote this sighting
//! was sent before the server ran the taker's read, so before the taker had its answer: counting
//! the TTL from the arrival of that answer (the conservative instant, later than the taker's
//! send instant by one round trip) counts from after the holder's send instant. The holder stops
//! its command within `--renew-deadline` + `--kill-after` < TTL of that send instant unless a
//! later renewal succeeded, and a later renewal changes the sighting, which defeats the
//! conditional write. This is part 1 of the safety argument (the store contract,
//! `src/election/contract.rs`).
//!
//! With N above 1 the same holds for each slot row, and a held row of another N keeps every slot of
//! the name out until it too has been seen unchanged for a full TTL ([`Sightings::sight_slots`]): a
//! server clock stepped ahead (or set back while that holder took its row) makes a live holder's
//! row look expired, and judging by it would start a command of this N beside one of another. The
//! server's clock may decide only whether to refuse an instance of another N, or the order of the
//! line ([`line`](mod@line)): it can make an instance wait, or refuse it, where it need not; it can
//! never let it start.

pub mod line;
pub mod sighting;
pub mod slots;

pub use sighting::{Row, Sightings};

use std::time::Duration;

use super::{LeaseTiming, StoreError};

/// The timing of a row store's reader (`status`, `watch`, `check`, `resign`), which holds no
/// lease, so has no TTL: its requests are bounded by the connect timeout, at most 2 s each.
pub fn reader_timing(connect_timeout: Duration) -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::ZERO,
        retry_period: connect_timeout.min(Duration::from_secs(2)),
        needed: Duration::ZERO,
    }
}

/// The stem of the table names `--prefix` maps to, the same on every row store (so that one
/// prefix names the same tables on either): its text between the slashes, every character other
/// than ASCII letters, digits and `_` replaced by `_`, lower-cased (`/leader-exec/` gives
/// `leader_exec`, and so does an empty prefix). Each store adds `_leases`, `_records`, ….
/// Refused where the longest name, the stem and `_records`, would be over `max` characters (the
/// server's identifier limit, `store` named in the message): a server that cuts names short
/// would let two prefixes share a table, one that refuses them would fail later.
pub fn table_stem(prefix: &str, store: &str, max: usize) -> Result<String, StoreError> {
    let stem: String = prefix
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let stem = if stem.is_empty() {
        "leader_exec".to_owned()
    } else {
        stem
    };
    const LONGEST: &str = "_records";
    if stem.len() + LONGEST.len() > max {
        return Err(StoreError::Fatal(format!(
            "--prefix {prefix}: too long for a {store} table name (at most {} characters)",
            max - LONGEST.len()
        )));
    }
    Ok(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_prefix_names_the_same_tables_on_every_row_store_and_a_long_one_is_refused() {
        for (prefix, stem) in [
            ("/leader-exec/", "leader_exec"),
            ("/", "leader_exec"),
            ("/Ops.Jobs/x/", "ops_jobs_x"),
        ] {
            assert_eq!(table_stem(prefix, "PostgreSQL", 63).unwrap(), stem);
            assert_eq!(table_stem(prefix, "MySQL", 64).unwrap(), stem);
        }
        let long = format!("/{}/", "a".repeat(56));
        let refused = table_stem(&long, "PostgreSQL", 63).unwrap_err().to_string();
        assert!(
            refused.contains("PostgreSQL table name (at most 55 characters)"),
            "{refused}"
        );
        assert!(table_stem(&long, "MySQL", 64).is_ok());
        let longer = format!("/{}/", "a".repeat(57));
        let refused = table_stem(&longer, "MySQL", 64).unwrap_err().to_string();
        assert!(
            refused.contains("MySQL table name (at most 56 characters)"),
            "{refused}"
        );
    }
}
