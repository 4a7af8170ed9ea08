//! The limiter's clock, in the form the core algorithms take it: a [`Clock`] gives Unix
//! microseconds that never go back. [`MonotonicClock`] (the default) reads this process's
//! monotonic clock anchored to the wall clock once; [`FakeClock`] moves only when a test
//! advances it, so a test of lease lifetimes, breaker periods or the fallback's windows
//! waits for nothing.
//!
//! Store calls' timeouts are not the limiter's time: they stay on Tokio's timer.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the limiter reads the time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now, in microseconds since the Unix epoch; never less than an earlier reading.
    fn now_us(&self) -> i64;
}

/// This process's monotonic clock, anchored to the wall clock at its first reading: a
/// wall-clock step never refills local limits early or freezes them.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_us(&self) -> i64 {
        static ANCHOR: OnceLock<(Instant, i64)> = OnceLock::new();
        let (instant, unix_us) = ANCHOR.get_or_init(|| {
            let unix_us = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| {
                    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
                });
            (Instant::now(), unix_us)
        });
        let elapsed = i64::try_from(instant.elapsed().as_micros()).unwrap_or(i64::MAX);
        unix_us.saturating_add(elapsed)
    }
}

/// A clock that moves only when [`advance`](Self::advance)d, for tests. Clones share one
/// time, so a test hands one to the limiter (and to a
/// [`MemoryStore`](crate::store::MemoryStore)) and moves them together.
#[derive(Clone, Debug)]
pub struct FakeClock {
    now_us: Arc<AtomicI64>,
}

impl FakeClock {
    /// Where a fake clock starts: 2026-01-01T00:00:00Z.
    pub const START_US: i64 = 1_767_225_600_000_000;

    /// A clock at [`START_US`](Self::START_US).
    pub fn new() -> Self {
        Self {
            now_us: Arc::new(AtomicI64::new(Self::START_US)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let us = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        // A closure that always returns Some: fetch_update cannot fail.
        let _ = self
            .now_us
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(us))
            });
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now_us(&self) -> i64 {
        self.now_us.load(Ordering::SeqCst)
    }
}

/// A [`Clock`] as the limiter reads it: Unix microseconds for the local decisions, and
/// instants (anchored when the limiter was built) for its leases, deny cache and breaker.
#[derive(Clone, Debug)]
pub(crate) struct LimiterClock {
    clock: Arc<dyn Clock>,
    anchor: Instant,
    anchor_us: i64,
}

impl LimiterClock {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        let anchor_us = clock.now_us();
        Self {
            clock,
            anchor: Instant::now(),
            anchor_us,
        }
    }

    /// Now in Unix microseconds.
    pub(crate) fn now_us(&self) -> i64 {
        self.clock.now_us()
    }

    /// Now as an instant: the anchor plus the clock's time since (never before the anchor).
    pub(crate) fn now(&self) -> Instant {
        let since_us = self.now_us().saturating_sub(self.anchor_us).max(0);
        let since = Duration::from_micros(u64::try_from(since_us).unwrap_or(0));
        self.anchor.checked_add(since).unwrap_or(self.anchor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_backwards() {
        let first = MonotonicClock.now_us();
        let second = MonotonicClock.now_us();
        assert!(second >= first);
        assert!(first > 1_600_000_000_000_000, "anchored to the Unix epoch");
    }

    #[test]
    fn a_fake_clock_moves_only_when_advanced_and_its_instants_with_it() {
        let fake = FakeClock::new();
        let clock = LimiterClock::new(Arc::new(fake.clone()));
        let (us, at) = (clock.now_us(), clock.now());
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!((clock.now_us(), clock.now()), (us, at));
        fake.advance(Duration::from_millis(1500));
        assert_eq!(clock.now_us(), us + 1_500_000);
        assert_eq!(clock.now() - at, Duration::from_millis(1500));
    }
}
