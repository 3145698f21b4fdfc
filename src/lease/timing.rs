//! The four durations the safety argument is made of, and the inequalities between them that
//! make stepping down in time possible.

use std::time::Duration;

use crate::durations::MAX_DURATION;
use crate::exit::Failure;

/// The shortest `--retry-period`: one renewal round trip must fit in it.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);

/// The four durations the safety argument is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease duration on the server.
    pub ttl: Duration,
    /// Step down when no renewal sent within this long has succeeded.
    pub renew_deadline: Duration,
    /// Interval between renewals; also the time one renewal may take.
    pub retry_period: Duration,
    /// Grace between the first signal and SIGKILL.
    pub kill_after: Duration,
}

impl Timing {
    /// The slack left between "the child is dead" and "the lease may expire on the server".
    ///
    /// It absorbs what the arithmetic does not see: a timer that fires late on a loaded machine,
    /// the time between SIGKILL and the last process of the group being gone, and clocks that run
    /// at slightly different rates on this host and on the store's servers.
    pub fn margin(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(250))
    }

    /// The least lease time that is safe: a stop that begins at the renew deadline gives the
    /// command its whole `--kill-after`, and the margin covers what the arithmetic does not see
    /// ([`Timing::margin`]). Validation keeps it at most `--ttl`; a store that may grant less
    /// than it was asked for refuses a lease shorter than this.
    pub fn needed(&self) -> Duration {
        self.renew_deadline
            .saturating_add(self.kill_after)
            .saturating_add(self.margin())
    }

    /// Whether a stop that begins at `now` can give the command its whole `--kill-after` and
    /// still have it dead before the lease can end, when the last proof of the lease was a
    /// request sent at `deadline - renew_deadline` (`deadline` is the renew deadline it proved)
    /// and the store keeps a lease `lease` from a proof's send instant: the TTL, or less where
    /// the store keeps it for less (ZooKeeper's negotiated session timeout, at least
    /// `renew_deadline + kill_after + margin`). The margin stays the flags' own: what it covers
    /// does not shrink with the lease.
    ///
    /// The lease cannot end before that send instant + `lease`; the grace ends at `now +
    /// kill_after`, and the margin covers SIGKILL and the last process going (see
    /// [`Timing::margin`]). Validation makes this true at the deadline itself (the sum of
    /// `renew_deadline`, `kill_after` and the margin is at most the TTL), with `ttl - margin -
    /// renew_deadline - kill_after` to spare; a stop that begins later than that (the process
    /// was paused, or its timers ran that late) cannot fit the grace inside the lease.
    pub fn grace_fits(&self, lease: Duration, deadline: Duration, now: Duration) -> bool {
        let sent = deadline.saturating_sub(self.renew_deadline);
        now.saturating_add(self.kill_after) <= (sent + lease).saturating_sub(self.margin())
    }

    /// Checks the inequalities that make stepping down in time possible.
    pub fn validate(&self) -> Result<(), Failure> {
        let ms = |d: Duration| humantime::format_duration(d).to_string();
        if self.ttl < Duration::from_secs(1) || self.ttl.subsec_nanos() != 0 {
            return Err(Failure::usage(format!(
                "--ttl ({}) must be a whole number of seconds, at least 1s (etcd leases have 1s granularity, and --ttl means the same on every store)",
                ms(self.ttl)
            )));
        }
        if self.ttl > MAX_DURATION {
            return Err(Failure::usage(format!(
                "--ttl ({}) must be at most {}s, the longest lease etcd grants",
                ms(self.ttl),
                MAX_DURATION.as_secs()
            )));
        }
        if self.renew_deadline.is_zero() {
            return Err(Failure::usage("--renew-deadline must be greater than 0"));
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return Err(Failure::usage(format!(
                "--retry-period ({}) must be at least {}: one renewal must fit in it",
                ms(self.retry_period),
                ms(MIN_RETRY_PERIOD)
            )));
        }
        // Saturating: the flags are bounded, but this check must hold for any value.
        if self.retry_period.saturating_mul(3) > self.renew_deadline {
            return Err(Failure::usage(format!(
                "--retry-period ({}) must be at most a third of --renew-deadline ({}), so that several renewals fit in the deadline",
                ms(self.retry_period),
                ms(self.renew_deadline)
            )));
        }
        if self.needed() > self.ttl {
            let fit = Timing::fitting(self.ttl);
            return Err(Failure::usage(format!(
                "--renew-deadline ({}) + --kill-after ({}) must be at most --ttl ({}) minus a margin of {}: the command must be dead before the lease can expire; with --ttl {} use, for example, --renew-deadline {} --kill-after {} --retry-period {}, or keep these and raise --ttl to {}",
                ms(self.renew_deadline),
                ms(self.kill_after),
                ms(self.ttl),
                ms(self.margin()),
                flag_value(self.ttl),
                flag_value(fit.renew_deadline),
                flag_value(fit.kill_after),
                flag_value(fit.retry_period),
                flag_value(self.ttl_needed()),
            )));
        }
        Ok(())
    }

    /// Timing that fits `ttl`, in the proportions of the defaults (10s + 4s in 15s, renewing
    /// every fifth of the deadline): what the error message suggests when only --ttl was changed.
    pub fn fitting(ttl: Duration) -> Timing {
        let available = ttl.saturating_sub(Timing::with_ttl(ttl).margin());
        // Round down to a readable step: 100ms from 2s on, else 1ms.
        let step: u128 = if available >= Duration::from_secs(2) {
            100
        } else {
            1
        };
        let part = |share: u32| {
            let ms = (available * share / 14).as_millis() / step * step;
            Duration::from_millis(ms as u64)
        };
        let renew_deadline = part(10);
        let retry_period =
            Duration::from_millis((renew_deadline / 5).as_millis() as u64).max(MIN_RETRY_PERIOD);
        Timing {
            ttl,
            renew_deadline,
            retry_period,
            kill_after: part(4),
        }
    }

    fn with_ttl(ttl: Duration) -> Timing {
        Timing {
            ttl,
            renew_deadline: Duration::ZERO,
            retry_period: Duration::ZERO,
            kill_after: Duration::ZERO,
        }
    }

    /// The shortest whole-second --ttl that fits this --renew-deadline and --kill-after.
    pub fn ttl_needed(&self) -> Duration {
        let busy = self.renew_deadline.saturating_add(self.kill_after);
        let mut ttl = Duration::from_secs(busy.as_secs().max(1));
        while ttl < MAX_DURATION && (Timing { ttl, ..*self }).needed() > ttl {
            ttl += Duration::from_secs(1);
        }
        ttl
    }
}

/// A duration as a flag value: `3s`, `3300ms`.
fn flag_value(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        humantime::format_duration(d).to_string().replace(' ', "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ttl: u64, renew_ms: u64, retry_ms: u64, kill_ms: u64) -> Timing {
        Timing {
            ttl: Duration::from_secs(ttl),
            renew_deadline: Duration::from_millis(renew_ms),
            retry_period: Duration::from_millis(retry_ms),
            kill_after: Duration::from_millis(kill_ms),
        }
    }

    #[test]
    fn defaults_are_valid() {
        assert!(timing(15, 10_000, 2_000, 4_000).validate().is_ok());
        // 10 s + 4 s + a margin of 750 ms: a quarter of a second to spare within 15 s.
        assert_eq!(
            timing(15, 10_000, 2_000, 4_000).needed(),
            Duration::from_millis(14_750)
        );
    }

    #[test]
    fn the_grace_fits_until_the_lease_less_the_margin_would_end_before_it() {
        // Proven by a request sent at 4 s: the lease lasts until 19 s at least, 18.25 s less the
        // margin; the deadline is 14 s, and a grace of 4 s fits if it starts by 14.25 s.
        let t = timing(15, 10_000, 2_000, 4_000);
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert!(t.grace_fits(s(15), s(14), s(14)));
        assert!(t.grace_fits(s(15), s(14), ms(14_250)));
        assert!(!t.grace_fits(s(15), s(14), ms(14_251)));
        assert!(!t.grace_fits(s(15), s(14), s(25)));
        // A lease of 14.75 s (a ZooKeeper session negotiated below --ttl, as much as the flags
        // need): it lasts until 18.75 s, 18 s less the margin: the grace fits only from 14 s.
        assert!(t.grace_fits(ms(14_750), s(14), s(14)));
        assert!(!t.grace_fits(ms(14_750), s(14), ms(14_001)));
    }

    #[test]
    fn the_margin_is_five_percent_at_least_250ms() {
        assert_eq!(timing(15, 0, 0, 0).margin(), Duration::from_millis(750));
        assert_eq!(timing(3, 0, 0, 0).margin(), Duration::from_millis(250));
    }

    #[test]
    fn deadline_plus_grace_must_fit_in_the_ttl() {
        let err = timing(15, 10_000, 2_000, 5_000).validate().unwrap_err();
        assert!(err.message.contains("--renew-deadline"), "{err}");
        assert!(err.message.contains("--kill-after"), "{err}");
        assert!(err.message.contains("--ttl"), "{err}");
        // Exactly at the margin is allowed; one millisecond over is not.
        assert!(timing(15, 10_000, 2_000, 4_250).validate().is_ok());
        assert!(timing(15, 10_000, 2_000, 4_251).validate().is_err());
    }

    #[test]
    fn retry_period_must_be_well_below_the_deadline() {
        let err = timing(15, 6_000, 2_001, 1_000).validate().unwrap_err();
        assert!(err.message.contains("--retry-period"), "{err}");
        assert!(timing(15, 6_000, 2_000, 1_000).validate().is_ok());
    }

    #[test]
    fn suggested_timing_fits_every_ttl() {
        for secs in (1..=120).chain([300, 3600, 86_400]) {
            let ttl = Duration::from_secs(secs);
            let fit = Timing::fitting(ttl);
            assert!(fit.validate().is_ok(), "{fit:?}: {:?}", fit.validate());
        }
        let fit = Timing::fitting(Duration::from_secs(5));
        assert_eq!(fit.renew_deadline, Duration::from_millis(3300));
        assert_eq!(fit.kill_after, Duration::from_millis(1300));
        let err = timing(5, 10_000, 2_000, 4_000).validate().unwrap_err();
        assert!(
            err.message
                .contains("--renew-deadline 3300ms --kill-after 1300ms --retry-period 660ms"),
            "{err}"
        );
        assert!(err.message.contains("raise --ttl to 15s"), "{err}");
        assert_eq!(
            timing(15, 10_000, 2_000, 4_000).ttl_needed(),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn ttl_is_whole_seconds() {
        let mut t = timing(3, 1_500, 300, 1_000);
        t.ttl = Duration::from_millis(2_500);
        assert!(t.validate().unwrap_err().message.contains("--ttl"));
    }

    #[test]
    fn timing_arithmetic_saturates() {
        let huge = Duration::MAX;
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.retry_period = huge;
        assert!(t.validate().unwrap_err().message.contains("--retry-period"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.kill_after = huge;
        assert!(t.validate().unwrap_err().message.contains("--kill-after"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.ttl = Duration::from_secs(9_000_000_001);
        assert!(t.validate().unwrap_err().message.contains("9000000000s"));
        let mut t = timing(15, 10_000, 2_000, 4_000);
        t.retry_period = Duration::from_nanos(1);
        assert!(t.validate().unwrap_err().message.contains("at least 10ms"));
    }
}
