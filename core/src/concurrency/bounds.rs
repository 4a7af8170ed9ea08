//! The bounds of an in-flight limit: its stored holders and their ttls (the parameters and
//! the stored list are both held to them).

use crate::time::{MAX_NOW_US, MAX_WINDOW_US, MIN_WINDOW_US};

/// Most holders a list ever stores, and the largest value `ratelimit.max-holders` may take:
/// at most 13.7 MB per key with 128-byte ids.
pub const MAX_STORED_HOLDERS: u64 = 100_000;

/// Shortest accepted holder ttl: one millisecond (replies are whole milliseconds, so a
/// shorter one could not be waited out honestly).
pub const MIN_TTL_US: i64 = MIN_WINDOW_US as i64;

/// Longest accepted holder ttl: 100 Julian years, like the windows; every expiry then stays
/// far inside an `i64` of microseconds.
pub const MAX_TTL_US: i64 = MAX_WINDOW_US as i64;

/// Latest expiry any evaluation can produce: the latest clock plus the longest ttl.
pub const MAX_EXPIRY_US: i64 = MAX_NOW_US + MAX_TTL_US;
