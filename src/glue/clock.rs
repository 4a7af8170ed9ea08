//! The server clock, read once per command.
//!
//! Redis 7.2+ offers `RedisModule_CachedMicroseconds`: the time at the start of the current
//! command (frozen for a whole MULTI/EXEC or script), the same instant Redis uses for key
//! expiry. Redis 7.0 lacks it, so the fallback is `RedisModule_Milliseconds`, the server's
//! wall clock at millisecond resolution. Never the client's clock, never a process-local one.

use super::api::api;

/// Unix time in microseconds according to the server.
pub fn now_us() -> i64 {
    let now = if let Some(cached) = api!(RedisModule_CachedMicroseconds) {
        // SAFETY: takes no arguments; reads the server's cached command time.
        unsafe { cached() }
    } else if let Some(milliseconds) = api!(RedisModule_Milliseconds) {
        // SAFETY: takes no arguments; reads the server's wall clock.
        unsafe { milliseconds() }.saturating_mul(1_000)
    } else {
        0
    };
    #[cfg(feature = "test-hooks")]
    let now = now.saturating_add(
        super::config::TEST_CLOCK_OFFSET_MS
            .get()
            .saturating_mul(1_000),
    );
    now
}
