//! What can be told of an algorithm's parameters without any state: the quota a service
//! advertises for them, the window it applies to, how taken units come back, and the part of
//! them one of several replicas may enforce alone.
//!
//! Each params type implements [`QuotaFacts`] (and each algorithm says how its units come
//! back, [`Algorithm::recovery`](crate::Algorithm::recovery)); the `kinds!` table dispatches
//! them for any [`Quota`](crate::kinds::Quota), so a client's headers, its local fallback and
//! a service's reports never match on the algorithm themselves.

use std::time::Duration;

/// How the units a call takes come back, for telling a client when it will have more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// One unit every `interval_ns`, the last one at the limiter's reset (token bucket, GCRA):
    /// when the next one comes is exact.
    Steady {
        /// Nanoseconds between two units.
        interval_ns: u64,
    },
    /// All at once when the window ends (fixed window): the reset is exact.
    AtReset,
    /// Gradually, as the window slides over past calls (sliding window, sliding log): the
    /// reset is an upper bound, a denied call's retry is exact.
    Sliding,
    /// When a holder releases its slot (in-flight limits): nobody can tell in advance.
    OnRelease,
}

/// The facts of one algorithm's parameters that no state changes.
pub trait QuotaFacts: Sized {
    /// The quota advertised for these parameters (what `RateLimit-Policy` shows): the most
    /// units the limiter can ever admit at once.
    fn advertised_quota(&self) -> u64;

    /// The time over which [`advertised_quota`](Self::advertised_quota) applies: a window's
    /// length, the time an empty bucket takes to refill completely; zero for an in-flight
    /// limit (its slots come back when requests end).
    fn window(&self) -> Duration;

    /// The parameters one of `replicas` replicas enforces alone when the shared store is
    /// unreachable: `1 / replicas` of the quota, rounded down, refilled `replicas` times
    /// slower, so the shares of all replicas never add up to more than the quota. `None`
    /// when a share is below one unit (nothing can be admitted locally).
    fn share(&self, replicas: u64) -> Option<Self>;
}

/// `limit / replicas` (at least one replica), or `None` when that is below one unit.
pub(crate) fn part(limit: u64, replicas: u64) -> Option<u64> {
    limit
        .checked_div(replicas.max(1))
        .filter(|share| *share > 0)
}
