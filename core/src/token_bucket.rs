//! Token bucket: up to `capacity` tokens, refilled continuously at `rate` tokens per second.
//!
//! # Representation
//!
//! The state is the instant `empty_at_ns` at which the bucket held (or, extrapolating the
//! refill backwards, would have held) zero tokens, plus the refill interval of one token:
//!
//! ```text
//! tokens(now) = min(capacity, (now − empty_at_ns) / interval_ns)
//! ```
//!
//! Refilling is therefore not a step that mutates anything: the token count at any instant is
//! a pure function of the state, so "refill at t1, then at t2" is the same as "refill at t2"
//! by construction, and no fraction of a token is ever dropped. An admitted call of `cost`
//! tokens moves `empty_at_ns` forward by `cost × interval_ns` (after clamping the bucket to
//! its capacity). Because the state does not depend on the capacity, a call with a different
//! capacity simply clamps the tokens to it.
//!
//! # Precision
//!
//! Time is kept in integer nanoseconds. The interval of one token is `1e9 / rate`
//! nanoseconds **rounded up**, so the effective rate is `1e9 / ceil(1e9 / rate)`: never above
//! the requested rate, and below it by less than `rate / 1e9` relative (1 ppm at 1000/s,
//! 0.1% at 1,000,000/s). Rates that divide 1e9 (0.5, 1, 4, 10, 1000, 250000, ...) are exact.
//! Within that effective rate every decision is exact integer arithmetic: over any interval
//! `Δ`, admitted tokens never exceed `capacity + Δ / interval`.
//!
//! # Pacing: a maximum wait
//!
//! With a maximum wait `max_wait_ns` (0 by default: the behaviour above, exactly), a call that
//! finds too few tokens is still admitted if the tokens it needs will have refilled within the
//! wait: it takes them now and `empty_at_ns` moves past `now` (the bucket is in debt). The
//! caller is told to wait until `empty_at_ns` (the reply's retry field, rounded up to the
//! millisecond, so that a caller that waits that long finds its tokens refilled) and proceeds
//! then. Admission is `empty_at + cost × interval ≤ now + max_wait`; a call that would wait
//! longer is denied, consumes nothing, and is told when it could be admitted with a wait
//! within `max_wait`.
//!
//! Counting each admitted call at the instant its caller proceeds, `max(now, empty_at)` after
//! the call, the bound above still holds exactly: over any interval `Δ` between two such
//! instants, admitted tokens never exceed `capacity + Δ / interval`. With a capacity of 1 the
//! bucket is the leaky bucket as a queue: each call proceeds exactly one interval after the
//! previous one, or at once when the queue is empty. A refund gives a reservation back (a
//! caller that gave up waiting): `empty_at_ns` moves back by its cost, never beyond a full
//! bucket.
//!
//! A bucket in debt holds no tokens (`remaining` is 0), is full again one `refill` after
//! `empty_at_ns` (`reset_after` and the key's expiry), and its debt is kept *in time* when
//! the rate changes: the queue ends at the instant its last caller was promised, and calls at
//! the new rate are spaced from there (rescaling the debt could move that instant before a
//! promised one, and let calls through closer than the new rate allows). The state needs no
//! new field: a stored `empty_at_ns` is at most [`MAX_WAIT_NS`] ahead of the latest clock.
//!
//! # Clock
//!
//! `now` comes from the server. If it steps backwards below `empty_at_ns`, the bucket is
//! simply emptier (it never admits more than it would have at the later time) and the state
//! is not rewound: an admitted call always moves `empty_at_ns` forward.

use super::facts::{QuotaFacts, Recovery, part};
use std::time::Duration;

use super::decision::{
    Algorithm, Commit, Decision, Evaluation, Retry, change_is_the_new_state, cost_is_a_field,
};
use super::number::Decimal;
use super::time::{
    MAX_NOW_US, NS_PER_SECOND, NS_PER_US, ceil_ms_from_ns, expiry_ms_from_ns, saturating_i64,
};

/// Longest time an empty bucket may take to refill: 100 Julian years, in nanoseconds.
///
/// Bounding `capacity × interval` keeps every instant the algorithm computes within an
/// `i64` of nanoseconds until [`MAX_NOW_US`].
pub const MAX_REFILL_NS: u64 = 100 * 31_557_600 * NS_PER_SECOND;

/// Highest accepted rate: one token per nanosecond.
pub const MAX_RATE_PER_SECOND: u64 = NS_PER_SECOND;

/// Longest accepted maximum wait (`MAXWAIT`): one day, in nanoseconds.
///
/// A caller told to wait holds its request (and usually a connection) for that long: pacing
/// spreads calls over seconds or minutes, and a wait of more than a day is a job to schedule,
/// not a rate to keep. The bound also keeps the arithmetic trivially in range: a stored empty
/// instant is at most this far ahead of [`MAX_NOW_US`], and that instant plus
/// [`MAX_REFILL_NS`] (the key's expiry) stays below `2^62 + 3.2e18 + 8.7e13 < 2^63` ns.
pub const MAX_WAIT_NS: u64 = 86_400 * NS_PER_SECOND;

/// Why token bucket parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenBucketParamError {
    /// More than [`MAX_RATE_PER_SECOND`] tokens per second.
    RateTooHigh,
    /// An empty bucket would take longer than [`MAX_REFILL_NS`] to refill.
    RefillTooLong,
}

/// A maximum wait above [`MAX_WAIT_NS`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxWaitTooLong;

/// Validated parameters of one token bucket call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucketParams {
    capacity: u64,
    interval_ns: u64,
    cost: u64,
    max_wait_ns: u64,
}

impl TokenBucketParams {
    /// Validates `capacity` (≥ 1) tokens refilled at `rate` tokens per second, for a call
    /// costing `cost` (≥ 1) tokens. A cost above the capacity is valid: it is always denied.
    pub fn new(capacity: u64, rate: Decimal, cost: u64) -> Result<Self, TokenBucketParamError> {
        if rate.exceeds_power_of_ten(9) {
            return Err(TokenBucketParamError::RateTooHigh);
        }
        let interval_ns = rate
            .ceil_reciprocal(NS_PER_SECOND)
            .ok_or(TokenBucketParamError::RefillTooLong)?;
        Self::from_interval(capacity, interval_ns, cost)
    }

    /// Validates parameters given the refill interval of one token directly.
    pub fn from_interval(
        capacity: u64,
        interval_ns: u64,
        cost: u64,
    ) -> Result<Self, TokenBucketParamError> {
        debug_assert!(capacity >= 1 && cost >= 1 && interval_ns >= 1);
        match capacity.checked_mul(interval_ns) {
            Some(refill_ns) if refill_ns <= MAX_REFILL_NS => Ok(Self {
                capacity: capacity.max(1),
                interval_ns: interval_ns.max(1),
                cost: cost.max(1),
                max_wait_ns: 0,
            }),
            _ => Err(TokenBucketParamError::RefillTooLong),
        }
    }

    /// The same parameters for a call that accepts to wait up to `max_wait_ns` for its tokens
    /// (see *Pacing* in the module documentation); 0, the default, never waits. Refused above
    /// [`MAX_WAIT_NS`].
    pub fn with_max_wait_ns(self, max_wait_ns: u64) -> Result<Self, MaxWaitTooLong> {
        if max_wait_ns > MAX_WAIT_NS {
            return Err(MaxWaitTooLong);
        }
        Ok(Self {
            max_wait_ns,
            ..self
        })
    }

    /// The bucket's capacity in tokens.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Longest wait, in nanoseconds, the call accepts for its tokens (at most
    /// [`MAX_WAIT_NS`]).
    pub fn max_wait_ns(&self) -> u64 {
        self.max_wait_ns
    }

    /// Nanoseconds to refill one token (the effective rate's reciprocal).
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// [`Self::interval_ns`] as an i64 (it is at most [`MAX_REFILL_NS`]).
    fn interval_i64(&self) -> i64 {
        i64::try_from(self.interval_ns).unwrap_or(i64::MAX)
    }

    /// Nanoseconds an empty bucket takes to refill completely (at most [`MAX_REFILL_NS`]).
    fn refill_ns(&self) -> i64 {
        i64::try_from(self.capacity.saturating_mul(self.interval_ns)).unwrap_or(i64::MAX)
    }
}

cost_is_a_field!(TokenBucketParams);

impl QuotaFacts for TokenBucketParams {
    /// The capacity: the largest burst.
    fn advertised_quota(&self) -> u64 {
        self.capacity
    }

    /// The time an empty bucket takes to refill completely.
    fn window(&self) -> Duration {
        Duration::from_nanos(self.capacity.saturating_mul(self.interval_ns))
    }

    /// `capacity / replicas` tokens, each refilled `replicas` times slower (the refill time
    /// stays within the original's, so the share is valid).
    fn share(&self, replicas: u64) -> Option<Self> {
        Some(Self {
            capacity: part(self.capacity, replicas)?,
            interval_ns: self.interval_ns.checked_mul(replicas.max(1))?,
            ..*self
        })
    }
}

/// What a token bucket stores between calls: 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    empty_at_ns: i64,
    interval_ns: u64,
}

impl TokenBucket {
    /// Rebuilds a stored state, refusing values no evaluation can produce (corrupt or forged
    /// payloads): the interval must be a valid one and the empty instant within
    /// `[-MAX_REFILL_NS, MAX_NOW_US + MAX_WAIT_NS]` (a bucket in debt is empty until after the
    /// clock, by at most the longest wait).
    pub fn from_parts(empty_at_ns: i64, interval_ns: u64) -> Option<Self> {
        let earliest = 0i128.saturating_sub(i128::from(MAX_REFILL_NS));
        let latest = i128::from(MAX_NOW_US)
            .saturating_mul(i128::from(NS_PER_US))
            .saturating_add(i128::from(MAX_WAIT_NS));
        let valid = (1..=MAX_REFILL_NS).contains(&interval_ns)
            && (earliest..=latest).contains(&i128::from(empty_at_ns));
        valid.then_some(Self {
            empty_at_ns,
            interval_ns,
        })
    }

    /// Unix nanoseconds at which the bucket held (or would have held) zero tokens.
    pub fn empty_at_ns(&self) -> i64 {
        self.empty_at_ns
    }

    /// Refill interval of one token, in nanoseconds, as of the last admitted call.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The empty instant expressed with the refill interval of `params`.
    ///
    /// When the rate changed since the last admitted call, the tokens held at `now_ns` under
    /// the old rate (clamped to the new capacity) are kept, rounded down to the new interval,
    /// and refill continues at the new rate.
    ///
    /// An empty instant ahead of the clock (a bucket in debt, or a clock that stepped back)
    /// means no tokens at all under any rate. That gap is kept in time rather than rescaled:
    /// debt ends when the last queued caller was promised its tokens (see *Pacing*), and clock
    /// skew is not tokens (rescaling it could push the instant far beyond any valid state).
    fn empty_at_for(&self, params: &TokenBucketParams, now_ns: i64) -> i64 {
        if self.interval_ns == params.interval_ns || self.empty_at_ns >= now_ns {
            return self.empty_at_ns;
        }
        // Rare (the rate changed), so computed in i128: 0 < elapsed < 2^64 and capacity ×
        // old_interval < 2^124, so no product below can overflow.
        let now = i128::from(now_ns);
        let old_interval = i128::from(self.interval_ns);
        let elapsed = now.saturating_sub(i128::from(self.empty_at_ns));
        let old_full = i128::from(params.capacity).saturating_mul(old_interval);
        let rescaled = if elapsed >= old_full {
            i128::from(params.refill_ns())
        } else {
            elapsed
                .saturating_mul(i128::from(params.interval_ns))
                .div_euclid(old_interval)
        };
        // rescaled lies in [0, refill], so the result lies in [now − refill, now].
        saturating_i64(now.saturating_sub(rescaled))
    }
}

/// A bucket seen at one instant, in i64 nanoseconds.
///
/// Bounds: `0 ≤ now ≤ 2^62` (see [`MAX_NOW_US`]), `1 ≤ refill ≤ MAX_REFILL_NS < 2^62`,
/// `max_wait ≤ MAX_WAIT_NS < 2^47`, and the clamped empty instant lies in
/// `[now − refill, 2^62 + max_wait]`, so `|now − empty_at| < 2^62 + 2^47`; the cost in
/// nanoseconds is only formed once `cost ≤ capacity`, so it is at most `refill`. Every sum
/// below therefore stays within an i64; the saturating operations only say so.
struct View {
    now: i64,
    interval: i64,
    refill: i64,
    max_wait: i64,
    /// The empty instant, clamped so the bucket holds at most its capacity.
    empty_at: i64,
}

impl View {
    fn new(state: Option<&TokenBucket>, params: &TokenBucketParams, now_us: i64) -> View {
        let now = now_us.clamp(0, MAX_NOW_US).saturating_mul(NS_PER_US as i64);
        let refill = params.refill_ns();
        let full_since = now.saturating_sub(refill);
        let empty_at = state
            .map_or(full_since, |s| s.empty_at_for(params, now))
            .max(full_since);
        View {
            now,
            interval: params.interval_i64(),
            refill,
            max_wait: i64::try_from(params.max_wait_ns).unwrap_or(i64::MAX),
            empty_at,
        }
    }

    /// Nanoseconds of refill a call needs; only meaningful when `cost ≤ capacity`.
    fn needed(&self, params: &TokenBucketParams) -> i64 {
        i64::try_from(params.cost)
            .unwrap_or(i64::MAX)
            .saturating_mul(self.interval)
    }

    /// When a call of `params.cost` is admitted (possibly with a wait), for a bucket empty at
    /// `empty_at`.
    fn retry(&self, params: &TokenBucketParams, empty_at: i64) -> Retry {
        if params.cost > params.capacity {
            return Retry::Never;
        }
        // The refill still missing beyond what the call accepts to wait for.
        let missing = self
            .needed(params)
            .saturating_sub(self.now.saturating_sub(empty_at))
            .saturating_sub(self.max_wait);
        if missing <= 0 {
            Retry::Now
        } else {
            Retry::AfterMs(ceil_ms_from_ns(missing).max(1))
        }
    }

    /// How long an admitted call that left the bucket empty at `empty_at` waits before its
    /// caller may proceed: until its tokens have refilled, rounded up.
    fn wait(&self, empty_at: i64) -> Retry {
        match ceil_ms_from_ns(empty_at.saturating_sub(self.now)) {
            0 => Retry::Now,
            wait_ms => Retry::AfterMs(wait_ms),
        }
    }

    /// Whole tokens in `refilled_ns` nanoseconds of refill, 0 when it is negative.
    fn whole_tokens(&self, refilled_ns: i64) -> u64 {
        refilled_ns
            .max(0)
            .checked_div(self.interval)
            .map_or(0, i64::unsigned_abs)
    }

    fn decision(
        &self,
        params: &TokenBucketParams,
        allowed: bool,
        empty_at: i64,
        retry: Retry,
    ) -> Decision {
        Decision {
            allowed,
            remaining: self.whole_tokens(self.now.saturating_sub(empty_at)),
            retry,
            reset_after_ms: ceil_ms_from_ns(
                empty_at
                    .saturating_add(self.refill)
                    .saturating_sub(self.now),
            ),
            limit: params.capacity,
        }
    }

    /// The state to store for a bucket now empty at `empty_at` (in
    /// `[now − refill, now + max_wait]`), expiring when it is full again.
    fn commit(&self, params: &TokenBucketParams, empty_at: i64) -> Commit<TokenBucket> {
        Commit {
            change: TokenBucket {
                empty_at_ns: empty_at,
                interval_ns: params.interval_ns,
            },
            expires_at_ms: expiry_ms_from_ns(empty_at.saturating_add(self.refill)),
        }
    }
}

/// The token bucket algorithm.
pub struct TokenBucketAlgorithm;

impl Algorithm for TokenBucketAlgorithm {
    type Params = TokenBucketParams;
    type State = TokenBucket;
    type Change = TokenBucket;

    fn evaluate(
        state: Option<&TokenBucket>,
        params: &TokenBucketParams,
        now_us: i64,
    ) -> Evaluation<TokenBucket> {
        let view = View::new(state, params, now_us);
        match view.retry(params, view.empty_at) {
            Retry::Now => {
                let empty_at = view.empty_at.saturating_add(view.needed(params));
                Evaluation {
                    decision: view.decision(params, true, empty_at, view.wait(empty_at)),
                    commit: Some(view.commit(params, empty_at)),
                }
            }
            denied => Evaluation {
                decision: view.decision(params, false, view.empty_at, denied),
                commit: None,
            },
        }
    }

    /// Gives back `cost` tokens (or a reservation of a caller that gave up waiting), never
    /// beyond a full bucket. The decision's `retry` says when a call of this cost would be
    /// admitted (`Now` when it would be, even with a wait).
    fn refund(
        state: Option<&TokenBucket>,
        params: &TokenBucketParams,
        now_us: i64,
    ) -> Evaluation<TokenBucket> {
        let view = View::new(state, params, now_us);
        let full_since = view.now.saturating_sub(view.refill);
        let empty_at = view
            .empty_at
            .saturating_sub(view.needed(params))
            .max(full_since);
        let refunded = state.is_some() && empty_at < view.empty_at;
        let retry = view.retry(params, empty_at);
        Evaluation {
            decision: view.decision(params, refunded, empty_at, retry),
            commit: refunded.then(|| view.commit(params, empty_at)),
        }
    }

    /// The whole tokens the bucket holds plus those that refill within the call's maximum
    /// wait, at most the capacity, up to `up_to`: a call of `k` is admitted iff
    /// `k ≤ capacity` and `empty_at + k × interval ≤ now + max_wait`. O(1).
    fn grantable(
        state: Option<&TokenBucket>,
        params: &TokenBucketParams,
        up_to: u64,
        now_us: i64,
    ) -> u64 {
        let view = View::new(state, params, now_us);
        let within_wait = view
            .now
            .saturating_sub(view.empty_at)
            .saturating_add(view.max_wait);
        view.whole_tokens(within_wait)
            .min(params.capacity)
            .min(up_to)
    }

    /// One token per refill interval.
    fn recovery(params: &TokenBucketParams) -> Recovery {
        Recovery::Steady {
            interval_ns: params.interval_ns(),
        }
    }

    change_is_the_new_state!(TokenBucket);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
