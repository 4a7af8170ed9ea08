//! This process's clock, in the form the core algorithms take it.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Unix microseconds, read from a monotonic clock anchored to the wall clock once.
///
/// The local fallback and the in-memory store decide with this process's clock (the server's
/// is out of reach when they run). Anchoring a monotonic clock keeps a wall-clock step from
/// refilling local limits early or freezing them.
pub(crate) fn now_us() -> i64 {
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

#[cfg(test)]
mod tests {
    #[test]
    fn never_goes_backwards() {
        let first = super::now_us();
        let second = super::now_us();
        assert!(second >= first);
        assert!(first > 1_600_000_000_000_000, "anchored to the Unix epoch");
    }
}
