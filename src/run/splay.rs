//! `--splay`: a random delay before the first campaign, so that a fleet whose timers fire at the
//! same instant does not campaign at once. It runs before the store is opened: nothing is
//! contacted, and a stop asked for meanwhile ends leader-exec at once.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Event, Reporter, Withdrawal};
use crate::signals::{self, Signals};

/// A delay in [0, `max`), uniform to the nanosecond, from `random` (any 64-bit number).
pub fn delay(max: Duration, random: u64) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    // Multiply-shift maps the 64-bit number onto [0, nanos) without the bias of `%`.
    Duration::from_nanos(((u128::from(random) * u128::from(nanos)) >> 64) as u64)
}

/// A 64-bit number no other host can predict, without a dependency: std seeds every
/// `RandomState` from the operating system's random source.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Waits a random time in [0, `max`). `Some(signal)` when TERM, INT, HUP or QUIT came first
/// (USR1 and USR2 are ignored, as while campaigning): leader-exec exits 128+N.
pub async fn wait(max: Duration, signals: &mut Signals, report: &Reporter) -> Option<Signal> {
    let pause = delay(max, random_u64());
    report.emit(Event::Splaying { delay: pause });
    let sleep = tokio::time::sleep(pause);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return None,
            signal = signals.recv() => if signals::withdraws_candidacy(signal) {
                report.emit(Event::Withdrawn { signal, when: Withdrawal::Splay });
                return Some(signal);
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_covers_zero_to_just_below_the_bound() {
        let max = Duration::from_secs(30);
        assert_eq!(delay(max, 0), Duration::ZERO);
        assert_eq!(delay(max, u64::MAX), max - Duration::from_nanos(1));
        assert_eq!(delay(max, 1 << 63), max / 2);
        assert_eq!(delay(Duration::ZERO, u64::MAX), Duration::ZERO);
        for _ in 0..1000 {
            assert!(delay(max, fastrand::u64(..)) < max);
        }
    }

    #[test]
    fn draws_differ() {
        let max = Duration::from_secs(30);
        let draws: std::collections::BTreeSet<_> =
            (0..10).map(|_| delay(max, random_u64())).collect();
        assert!(draws.len() > 1, "{draws:?}");
    }
}
