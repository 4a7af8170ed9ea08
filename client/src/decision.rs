//! What a check answers.

use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_core::Recovery;
use redis_ratelimit_core::kinds::Quota;

use crate::in_flight::InFlight;
pub use crate::outcome::{Regional, Why};
use crate::store::{StoreBackend, View};

/// Where a decision came from, and which store backend answered what it rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The store decided (one or more `RL.*` calls), on this backend: the module, the
    /// Functions library, the library as a script, or the in-process memory store.
    Store(StoreBackend),
    /// Units leased earlier from the store (from this backend) paid for it, without a store
    /// call.
    Lease(StoreBackend),
    /// A denial of the store (of this backend) remembered locally until its `retry_after`,
    /// without a store call.
    Cache(StoreBackend),
    /// The store was unreachable (or refused the call): the policy's fallback decided.
    Fallback,
}

impl Source {
    /// The `source` label of the decision metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store(_) => "store",
            Self::Lease(_) => "lease",
            Self::Cache(_) => "cache",
            Self::Fallback => "fallback",
        }
    }

    /// The backend whose answer decided: the store call's, or the one that granted the
    /// lease or the remembered denial; `None` for the fallback.
    pub fn backend(self) -> Option<StoreBackend> {
        match self {
            Self::Store(backend) | Self::Lease(backend) | Self::Cache(backend) => Some(backend),
            Self::Fallback => None,
        }
    }

    /// Whether a store call decided this very request (on any backend).
    pub fn is_store(self) -> bool {
        matches!(self, Self::Store(_))
    }

    /// The `backend` label of the decision metric: the backend's name, `none` for the
    /// fallback.
    pub fn backend_label(self) -> &'static str {
        self.backend().map_or("none", StoreBackend::as_str)
    }
}

/// How a decision is counted in the `ratelimit_decisions_total` metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted by the store, a lease.
    Allowed,
    /// Denied by the store or the deny cache.
    Denied,
    /// Admitted by the fallback while the store was unreachable.
    FallbackAllowed,
    /// Denied by the fallback while the store was unreachable.
    FallbackDenied,
    /// The store refused the call (an error retrying will not fix, such as a key holding
    /// another type); the fallback decided.
    Error,
}

impl Outcome {
    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::FallbackAllowed => "fallback_allowed",
            Self::FallbackDenied => "fallback_denied",
            Self::Error => "error",
        }
    }
}

/// One limit's state as a decision saw it: what the `RateLimit` header field reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitStatus {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its quota (capacity or units per window), as enforced for this decision: during a
    /// local fallback, this replica's share.
    pub quota: u64,
    /// Its quota as configured: `quota` but for a local fallback, where `quota` is this
    /// replica's share (the `RateLimit-Policy` field shows this one, so it stays stable).
    pub configured_quota: u64,
    /// The window the quota applies to (time to refill completely for a bucket; zero for an
    /// in-flight limit).
    pub window: Duration,
    /// Whether this is an in-flight limit (its quota counts requests at once, not per time).
    pub in_flight: bool,
    /// Whether this limit alone admitted the request.
    pub allowed: bool,
    /// Whole units left.
    pub remaining: u64,
    /// Denied: when this same request would pass this limit; `None`, never. Admitted: zero,
    /// or for a paced limit the wait before proceeding.
    pub retry_after: Option<Duration>,
    /// When the limit is back to unused.
    pub reset_after: Duration,
    /// When at least one more unit than `remaining` is available (the `t` of `RateLimit`).
    pub more_in: Duration,
    /// A regional limit's why and lease ([`Limit::regional`](crate::Limit::regional)): the
    /// quota, window and waits above are then the region's floor's; `remaining` is the
    /// floor's units left plus the live lease's (what the region can still admit), but the
    /// floor's alone when no lease lives (`home_unreachable`).
    pub regional: Option<Regional>,
}

impl LimitStatus {
    pub(crate) fn from_view(name: Arc<str>, quota: &Quota, view: &View) -> Self {
        let window = quota.window();
        let recovery = quota.recovery();
        let more_in = match (view.allowed, recovery) {
            // A denied sliding window's wait is exact, its reset only an upper bound.
            (false, Recovery::Sliding) => view.retry_after.unwrap_or(view.reset_after),
            _ => more_in(recovery, quota.advertised_quota(), view),
        };
        let remaining = match view.regional {
            Some(regional) if regional.why != Why::HomeUnreachable => {
                view.remaining.saturating_add(regional.lease_units)
            }
            _ => view.remaining,
        };
        Self {
            name,
            in_flight: recovery == Recovery::OnRelease,
            regional: view.regional,
            quota: view.limit,
            configured_quota: view.limit,
            window,
            allowed: view.allowed,
            remaining,
            retry_after: view.retry_after,
            reset_after: view.reset_after,
            more_in,
        }
    }
}

/// The answer to a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed (its cost has been charged).
    pub allowed: bool,
    /// How long an admitted request must wait before it proceeds: zero, unless a paced
    /// limit ([`Limit::max_wait`](crate::Limit::max_wait)) admitted it on a schedule.
    pub wait: Duration,
    /// Who decided.
    pub source: Source,
    /// How the decision is counted in metrics.
    pub outcome: Outcome,
    /// The policy checked.
    pub policy: Arc<str>,
    /// `Some(Duration::ZERO)` when admitted; when denied, how long until the same request
    /// would be admitted if nothing else happens; `None` when it never can be (the cost is
    /// above a limit).
    pub retry_after: Option<Duration>,
    /// Each limit's state, in policy order. Empty when no limit was consulted (a fallback
    /// that admits or denies everything).
    pub limits: Vec<LimitStatus>,
    /// The index in `limits` of the limit that decided: the one that denied (with the
    /// longest wait), or when admitted the one closest to running out.
    pub binding: usize,
    /// The slots an admitted request holds in the policy's in-flight limits: give them back
    /// with [`RateLimiter::release`](crate::RateLimiter::release) when the request ends.
    pub in_flight: Option<InFlight>,
}

impl Decision {
    /// The limit that decided, if any limit was consulted.
    pub fn binding_limit(&self) -> Option<&LimitStatus> {
        self.limits.get(self.binding)
    }

    /// Units left in the binding limit (0 when no limit was consulted).
    pub fn remaining(&self) -> u64 {
        self.binding_limit().map_or(0, |limit| limit.remaining)
    }

    /// When the binding limit is back to unused.
    pub fn reset_after(&self) -> Duration {
        self.binding_limit()
            .map_or(Duration::ZERO, |limit| limit.reset_after)
    }

    /// The binding limit's quota.
    pub fn limit(&self) -> u64 {
        self.binding_limit().map_or(0, |limit| limit.quota)
    }

    /// What the policy's regional limit said, if it has one and it was consulted: why it was
    /// decided so (`home_unreachable`: the region decided from its floor alone) and the
    /// region's lease units left.
    pub fn regional(&self) -> Option<Regional> {
        self.limits.iter().find_map(|limit| limit.regional)
    }

    /// The names of the limits that denied the request.
    pub fn violated(&self) -> impl Iterator<Item = &str> {
        self.limits
            .iter()
            .filter(|limit| !limit.allowed)
            .map(|limit| &*limit.name)
    }
}

/// How long until a limiter of `quota` units can admit at least one unit more than the
/// view's `remaining`: the `t` of the `RateLimit` header field.
///
/// Exact for buckets (units come back one interval apart, the last one at the reset) and
/// fixed windows (all at the window's end); for the sliding algorithms it is the reset, an
/// upper bound (units may come back earlier); none for an in-flight limit (a slot comes back
/// when a request ends, which nobody can tell in advance).
fn more_in(recovery: Recovery, quota: u64, view: &View) -> Duration {
    if view.remaining >= quota {
        return Duration::ZERO;
    }
    let interval_ns = match recovery {
        Recovery::Steady { interval_ns } => interval_ns,
        Recovery::OnRelease => return Duration::ZERO,
        Recovery::AtReset | Recovery::Sliding => return view.reset_after,
    };
    // The missing units come back one interval apart, the last one at the reset.
    let later_units = quota.saturating_sub(view.remaining).saturating_sub(1);
    let later = Duration::from_nanos(later_units.saturating_mul(interval_ns));
    view.reset_after.saturating_sub(later)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    fn status_of(algorithm: &Algorithm, fields: [i64; 5]) -> LimitStatus {
        LimitStatus::from_view("k".into(), algorithm.as_quota(), &View::from_fields(fields))
    }

    #[test]
    fn a_status_reports_when_more_quota_comes() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(10)).unwrap();
        // 7 of 10 left, full again in 2.5 s: the next token comes in 0.5 s.
        let status = status_of(&bucket, [1, 7, 0, 2500, 10]);
        assert_eq!(status.window, Duration::from_secs(10));
        assert_eq!(status.more_in, Duration::from_millis(500));
        assert_eq!(status.quota, 10);
        assert!(!status.in_flight);
        assert_eq!(
            status_of(&bucket, [1, 10, 0, 0, 10]).more_in,
            Duration::ZERO
        );
        let fixed = Algorithm::fixed_window(5, Duration::from_secs(60)).unwrap();
        let status = status_of(&fixed, [0, 0, 42_000, 42_000, 5]);
        assert_eq!(status.more_in, Duration::from_secs(42));
        let slots = Algorithm::concurrency(5, Duration::from_secs(60)).unwrap();
        let status = status_of(&slots, [0, 0, 3_000, 60_000, 5]);
        assert!(status.in_flight);
        assert_eq!(status.more_in, Duration::ZERO);
    }

    #[test]
    fn a_denied_sliding_window_reports_its_exact_wait() {
        let window = Algorithm::sliding_window(10, Duration::from_secs(60)).unwrap();
        let status = status_of(&window, [0, 0, 1200, 50_000, 10]);
        assert_eq!(status.more_in, Duration::from_millis(1200));
    }
}
