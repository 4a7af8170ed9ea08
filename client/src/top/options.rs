//! How a limiter counts and reports its denials for the fleet's top keys.

use std::time::Duration;

/// How a limiter counts and reports its denials for the fleet's top keys
/// ([`RateLimiterBuilder::top_keys`](crate::RateLimiterBuilder::top_keys)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKeys {
    /// Keys per summary (per policy and limit and minute; default 128): a key denied more
    /// than `denials / capacity` times in a minute on a replica is always listed, and no
    /// count is over by more. Memory per summary is about `capacity` × (key + 80) bytes.
    pub capacity: usize,
    /// Summaries a replica keeps per minute (default 256): past it, denials of another
    /// policy and limit are not counted (at most 256 × 128 keys of 256 bytes in memory).
    pub max_summaries: usize,
    /// How often the summaries that changed are written (default 1 s: at most one write a
    /// second).
    pub report_every: Duration,
    /// How long a minute's hash is kept after the minute ends (default 15 minutes).
    pub retention: Duration,
    /// The window the concentration gauges are read over, in minutes (default 5).
    pub window_minutes: u64,
    /// How often the concentration gauges are read (default 10 s; zero: never).
    pub concentration_every: Duration,
}

impl Default for TopKeys {
    fn default() -> Self {
        Self {
            capacity: 128,
            max_summaries: 256,
            report_every: Duration::from_secs(1),
            retention: Duration::from_secs(15 * 60),
            window_minutes: 5,
            concentration_every: Duration::from_secs(10),
        }
    }
}
