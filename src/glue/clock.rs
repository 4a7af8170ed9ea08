//! The server clock, read once per command.
//!
//! Redis 7.2+ offers `RedisModule_CachedMicroseconds`: the time at the start of the current
//! command (frozen for a whole MULTI/EXEC or script), the same instant Redis uses for key
//! expiry. Redis 7.0 lacks it, so the fallback is `RedisModule_Milliseconds`, the server's
//! wall clock at millisecond resolution. Never the client's clock, never a process-local one.

use super::api::api;
use crate::core::time::MAX_NOW_US;
use crate::error::CommandError;

/// Unix time in microseconds according to the server.
///
/// Refused past [`MAX_NOW_US`] (2^62 ns, 2116-02-20): the algorithms' instants are bounded
/// there, and a reply computed as of a clamped instant would disagree with the expiries Redis
/// applies on its real clock.
pub fn now_us() -> Result<i64, CommandError> {
    let now = if let Some(cached) = api!(RedisModule_CachedMicroseconds) {
        // SAFETY: takes no arguments; reads the server's cached command time.
        unsafe { cached() }
    } else if let Some(milliseconds) = api!(RedisModule_Milliseconds) {
        // SAFETY: takes no arguments; reads the server's wall clock.
        unsafe { milliseconds() }.saturating_mul(1_000)
    } else {
        return Err(CommandError::Message(
            "ERR the server offers the module no clock (RedisModule_Milliseconds is missing)",
        ));
    };
    #[cfg(feature = "test-hooks")]
    let now = now.saturating_add(
        super::config::TEST_CLOCK_OFFSET_MS
            .get()
            .saturating_mul(1_000),
    );
    if now > MAX_NOW_US {
        return Err(CommandError::Message(
            "ERR the server clock is past 2116-02-20 (2^62 ns since 1970), the last instant rate limits are computed for",
        ));
    }
    Ok(now)
}
