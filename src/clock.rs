//! The clock that leadership deadlines are measured on.
//!
//! The safety argument (stated once in `src/election/contract.rs`) compares our local deadline with
//! the claim's end on the store's side. The store's clock keeps running while this machine is
//! suspended (or this VM is paused), so ours must too: CLOCK_MONOTONIC (and with it
//! `std::time::Instant` and tokio's timers) stops during suspend, CLOCK_BOOTTIME does not. A
//! deadline kept on the monotonic clock would be judged "still in the future" after a resume
//! although the lease has long expired on the server. Timers are therefore timerfds on
//! CLOCK_BOOTTIME with absolute expiry: they fire at the right instant even when the machine slept
//! through it.
//!
//! Instants are plain `Duration`s since the clock's origin, so the renewal logic can be tested on
//! tokio's paused clock through the same trait.

use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

/// A clock that keeps counting across suspend.
pub trait Clock: Clone {
    /// Time since the clock's origin.
    fn now(&self) -> Duration;
    /// Completes at `deadline` (a value of `now()`), or at once if it has passed.
    fn sleep_until(&self, deadline: Duration) -> impl Future<Output = ()>;
}

/// Completes at `deadline`, or never when there is none.
pub async fn sleep_until_some<C: Clock>(clock: &C, deadline: Option<Duration>) {
    match deadline {
        Some(deadline) => clock.sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// CLOCK_BOOTTIME, with timerfd timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootClock;

impl Clock for BootClock {
    fn now(&self) -> Duration {
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
            .expect("CLOCK_BOOTTIME is available on every Linux since 2.6.39");
        Duration::from(now)
    }

    async fn sleep_until(&self, deadline: Duration) {
        match BootTimer::at(deadline) {
            Ok(timer) => timer.expired().await,
            // timerfd_create only fails when the process is out of file descriptors or memory.
            // Fall back to the monotonic timer and look at the boot clock again on waking, so
            // that time spent in suspend still counts.
            Err(_) => loop {
                let now = self.now();
                if now >= deadline {
                    return;
                }
                tokio::time::sleep((deadline - now).min(Duration::from_millis(250))).await;
            },
        }
    }
}

/// A one-shot timerfd on CLOCK_BOOTTIME, registered with the tokio reactor.
struct BootTimer(AsyncFd<TimerFdHandle>);

struct TimerFdHandle(TimerFd);

impl AsRawFd for TimerFdHandle {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl BootTimer {
    fn at(deadline: Duration) -> std::io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_BOOTTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // An all-zero it_value would disarm the timer instead of firing it at once.
        let when = TimeSpec::from_duration(deadline.max(Duration::from_nanos(1)));
        fd.set(
            Expiration::OneShot(when),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        // SAFETY: the TimerFd owns its descriptor and is neither replaced nor closed while the
        // AsyncFd holds it.
        Ok(BootTimer(unsafe { AsyncFd::register(TimerFdHandle(fd))? }))
    }

    async fn expired(&self) {
        loop {
            let Ok(mut ready) = self.0.readable().await else {
                return;
            };
            match ready.try_io(|fd| fd.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }
}

/// tokio's clock, which tests can pause and advance.
#[cfg(test)]
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(test)]
impl TokioClock {
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(test)]
impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    async fn sleep_until(&self, deadline: Duration) {
        tokio::time::sleep_until(self.origin + deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn boot_timer_fires_at_its_deadline_and_not_before() {
        let clock = BootClock;
        let start = clock.now();
        clock.sleep_until(start + Duration::from_millis(50)).await;
        let woke = clock.now();
        assert!(
            woke >= start + Duration::from_millis(50),
            "woke early: {woke:?}"
        );
        assert!(
            woke < start + Duration::from_secs(2),
            "woke very late: {woke:?}"
        );
    }

    #[tokio::test]
    async fn a_past_deadline_completes_at_once() {
        let clock = BootClock;
        let start = clock.now();
        clock
            .sleep_until(start.saturating_sub(Duration::from_secs(1)))
            .await;
        clock.sleep_until(Duration::ZERO).await;
        assert!(clock.now() < start + Duration::from_secs(1));
    }
}
