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
//! # Clock
//!
//! `now` comes from the server. If it steps backwards below `empty_at_ns`, the bucket is
//! simply emptier (it never admits more than it would have at the later time) and the state
//! is not rewound: an admitted call always moves `empty_at_ns` forward.

use super::decision::{
    Algorithm, CallCost, Commit, Decision, Evaluation, Retry, change_is_the_new_state,
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

/// Why token bucket parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenBucketParamError {
    /// More than [`MAX_RATE_PER_SECOND`] tokens per second.
    RateTooHigh,
    /// An empty bucket would take longer than [`MAX_REFILL_NS`] to refill.
    RefillTooLong,
}

/// Validated parameters of one token bucket call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketParams {
    capacity: u64,
    interval_ns: u64,
    cost: u64,
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
            }),
            _ => Err(TokenBucketParamError::RefillTooLong),
        }
    }

    /// The bucket's capacity in tokens.
    pub fn capacity(&self) -> u64 {
        self.capacity
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

impl CallCost for TokenBucketParams {
    /// Tokens this call asks for.
    fn cost(&self) -> u64 {
        self.cost
    }

    fn with_cost(&self, cost: u64) -> Self {
        Self {
            cost: cost.max(1),
            ..*self
        }
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
    /// `[-MAX_REFILL_NS, MAX_NOW_US]`.
    pub fn from_parts(empty_at_ns: i64, interval_ns: u64) -> Option<Self> {
        let earliest = 0i128.saturating_sub(i128::from(MAX_REFILL_NS));
        let latest = i128::from(MAX_NOW_US).saturating_mul(i128::from(NS_PER_US));
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
    /// An empty instant ahead of the clock (the clock stepped back) means no tokens at all
    /// under any rate; that gap is clock skew, not tokens, so it is kept as it is rather than
    /// rescaled (which could push the instant far beyond any valid state).
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
/// Bounds: `0 ≤ now ≤ 2^62` (see [`MAX_NOW_US`]), `1 ≤ refill ≤ MAX_REFILL_NS < 2^62`, and the
/// clamped empty instant lies in `[now − refill, …]`, so `now − empty_at ≤ 2^63 − 1`; the
/// cost in nanoseconds is only formed once `cost ≤ capacity`, so it is at most `refill`. The
/// saturating operations only say so.
struct View {
    now: i64,
    interval: i64,
    refill: i64,
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
            empty_at,
        }
    }

    /// Nanoseconds of refill a call needs; only meaningful when `cost ≤ capacity`.
    fn needed(&self, params: &TokenBucketParams) -> i64 {
        i64::try_from(params.cost)
            .unwrap_or(i64::MAX)
            .saturating_mul(self.interval)
    }

    /// When a call of `params.cost` is admitted, for a bucket empty at `empty_at`.
    fn retry(&self, params: &TokenBucketParams, empty_at: i64) -> Retry {
        if params.cost > params.capacity {
            return Retry::Never;
        }
        let missing = self
            .needed(params)
            .saturating_sub(self.now.saturating_sub(empty_at));
        if missing <= 0 {
            Retry::Now
        } else {
            Retry::AfterMs(ceil_ms_from_ns(missing).max(1))
        }
    }

    fn decision(
        &self,
        params: &TokenBucketParams,
        allowed: bool,
        empty_at: i64,
        retry: Retry,
    ) -> Decision {
        let available = self.now.saturating_sub(empty_at).max(0);
        Decision {
            allowed,
            remaining: available
                .checked_div(self.interval)
                .map_or(0, |tokens| tokens.unsigned_abs()),
            retry,
            reset_after_ms: ceil_ms_from_ns(
                empty_at
                    .saturating_add(self.refill)
                    .saturating_sub(self.now),
            ),
            limit: params.capacity,
        }
    }

    /// The state to store for a bucket now empty at `empty_at` (in `[now − refill, now]`),
    /// expiring when it is full again.
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
                    decision: view.decision(params, true, empty_at, Retry::Now),
                    commit: Some(view.commit(params, empty_at)),
                }
            }
            denied => Evaluation {
                decision: view.decision(params, false, view.empty_at, denied),
                commit: None,
            },
        }
    }

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

    change_is_the_new_state!(TokenBucket);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::testing::{self, Driver, MS, SECOND, Step, T0_US, cost_of};
    use proptest::prelude::*;

    fn params(capacity: u64, rate: &str, cost: u64) -> TokenBucketParams {
        TokenBucketParams::new(
            capacity,
            Decimal::parse_positive(rate.as_bytes()).unwrap(),
            cost,
        )
        .unwrap()
    }

    /// A bucket driven through a sequence of calls, as the glue would drive it.
    type Bucket = Driver<TokenBucketAlgorithm>;

    #[rustfmt::skip]
    #[test]
    fn drains_then_refills() {
        // capacity 3, one token per second
        let p = params(3, "1", 1);
        let mut bucket = Bucket::default();
        let cases: &[(i64, bool, u64, i64, u64)] = &[
            // (now offset µs, allowed, remaining, retry_after_ms, reset_after_ms)
            (0,                   true,  2, 0,    1000),
            (0,                   true,  1, 0,    2000),
            (0,                   true,  0, 0,    3000),
            (0,                   false, 0, 1000, 3000),
            (999 * MS,            false, 0, 1,    2001),
            (SECOND,              true,  0, 0,    3000),
            (SECOND + 500 * MS,   false, 0, 500,  2500),
            (10 * SECOND,         true,  2, 0,    1000),
        ];
        for &(offset, allowed, remaining, retry, reset) in cases {
            let d = bucket.call(&p, T0_US + offset);
            assert_eq!(
                d.reply_fields(),
                [i64::from(allowed), remaining as i64, retry, reset as i64, 3],
                "at +{offset}µs"
            );
        }
    }

    #[test]
    fn cost_above_capacity_is_never_admitted_and_writes_nothing() {
        let p = params(5, "10", 6);
        let evaluation = TokenBucketAlgorithm::evaluate(None, &p, T0_US);
        assert_eq!(evaluation.decision.reply_fields(), [0, 5, -1, 0, 5]);
        assert!(evaluation.commit.is_none());
    }

    #[test]
    fn a_missing_bucket_is_full_and_expires_when_full_again() {
        let p = params(10, "2", 4);
        let evaluation = TokenBucketAlgorithm::evaluate(None, &p, T0_US);
        assert_eq!(evaluation.decision.reply_fields(), [1, 6, 0, 2000, 10]);
        assert_eq!(evaluation.commit.unwrap().expires_at_ms, T0_US / MS + 2000);
    }

    #[test]
    fn expiry_rounds_up_to_the_millisecond() {
        let p = params(1, "3", 1); // 333,333,334 ns per token
        let evaluation = TokenBucketAlgorithm::evaluate(None, &p, T0_US);
        assert_eq!(evaluation.commit.unwrap().expires_at_ms, T0_US / MS + 334);
        assert_eq!(evaluation.decision.reset_after_ms, 334);
    }

    #[test]
    fn capacity_change_clamps_tokens() {
        let mut bucket = Bucket::default();
        assert!(bucket.call(&params(10, "1", 1), T0_US).allowed); // 9 left
        let d = bucket.call(&params(5, "1", 1), T0_US);
        assert_eq!((d.allowed, d.remaining), (true, 4));
        let d = bucket.call(&params(20, "1", 1), T0_US);
        assert_eq!(
            (d.allowed, d.remaining),
            (true, 3),
            "growing the capacity adds no tokens"
        );
    }

    #[test]
    fn rate_change_keeps_accrued_tokens() {
        let mut bucket = Bucket::default();
        for _ in 0..10 {
            assert!(bucket.call(&params(10, "10", 1), T0_US).allowed);
        }
        // 500 ms later, 5 tokens accrued at 10/s; the rate drops to 1/s: still 5 tokens.
        let d = bucket.call(&params(10, "1", 1), T0_US + 500 * MS);
        assert_eq!((d.allowed, d.remaining), (true, 4));
        // And refill now runs at 1/s: one more token after a second.
        let d = bucket.call(&params(10, "1", 1), T0_US + 1500 * MS);
        assert_eq!((d.allowed, d.remaining), (true, 4));
    }

    #[test]
    fn clock_going_backwards_neither_rewinds_nor_admits_more() {
        let p = params(2, "1", 1);
        let mut bucket = Bucket::default();
        assert!(bucket.call(&p, T0_US).allowed);
        assert!(bucket.call(&p, T0_US).allowed);
        let stored = bucket.state.unwrap();
        let d = bucket.call(&p, T0_US - 3600 * SECOND);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(bucket.state, Some(stored), "a denied call writes nothing");
        // Once the clock is past the point again, refill resumes from the stored state.
        assert!(bucket.call(&p, T0_US + SECOND).allowed);
        assert!(bucket.state.unwrap().empty_at_ns() > stored.empty_at_ns());
    }

    #[test]
    fn refund_gives_back_tokens_up_to_the_capacity() {
        let p = params(10, "1", 3);
        let mut bucket = Bucket::default();
        let nothing = TokenBucketAlgorithm::refund(None, &p, T0_US);
        assert!(
            nothing.commit.is_none(),
            "a missing bucket is full: nothing to give back"
        );
        assert_eq!(nothing.decision.reply_fields(), [0, 10, 0, 0, 10]);
        bucket.call(&p, T0_US); // 7 left
        bucket.call(&p, T0_US); // 4 left
        let refund = TokenBucketAlgorithm::refund(bucket.state.as_ref(), &p, T0_US);
        assert_eq!(refund.decision.reply_fields(), [1, 7, 0, 3000, 10]);
        bucket.state = Some(refund.commit.unwrap().change);
        let refund =
            TokenBucketAlgorithm::refund(bucket.state.as_ref(), &params(10, "1", 5), T0_US);
        assert_eq!(
            refund.decision.reply_fields(),
            [1, 10, 0, 0, 10],
            "clamped to the capacity"
        );
        let state = refund.commit.unwrap().change;
        let again = TokenBucketAlgorithm::refund(Some(&state), &p, T0_US);
        assert!(again.commit.is_none(), "already full");
        assert!(!again.decision.allowed);
    }

    #[test]
    fn a_refund_after_the_clock_stepped_back_and_the_rate_changed_stays_valid() {
        // Found by the `decode` fuzz target: the skew gap used to be rescaled by the ratio of
        // the intervals, storing an instant beyond what the decoder accepts.
        let empty = TokenBucketAlgorithm::evaluate(
            None,
            &params(1_000_000_000, "1e9", 1_000_000_000),
            T0_US,
        );
        let state = empty.commit.unwrap().change;
        let refund =
            TokenBucketAlgorithm::refund(Some(&state), &params(1, "0.001", 1), T0_US - SECOND);
        let change = refund.commit.unwrap().change;
        assert!(TokenBucket::from_parts(change.empty_at_ns, change.interval_ns).is_some());
        assert!(
            change.empty_at_ns <= state.empty_at_ns,
            "the refund gives back, never takes"
        );
    }

    #[test]
    fn sub_microsecond_rates_round_the_interval_up() {
        let p = params(1_000_000, "300000", 1); // 3333.33 ns per token → 3334
        assert_eq!(p.interval_ns(), 3334);
        // A full second admits floor(1e9 / 3334) = 299,940 tokens on top of the burst: never
        // more than the requested 300,000.
        let mut bucket = Bucket::default();
        let burst = params(1_000_000, "300000", 1_000_000);
        assert!(bucket.call(&burst, T0_US).allowed);
        let later = bucket.call(&params(1_000_000, "300000", 1), T0_US + SECOND);
        assert_eq!(later.remaining + 1, 299_940);
    }

    #[test]
    fn parameters_are_validated() {
        let rate = |s: &str| Decimal::parse_positive(s.as_bytes()).unwrap();
        assert_eq!(
            TokenBucketParams::new(1, rate("1000000001"), 1),
            Err(TokenBucketParamError::RateTooHigh)
        );
        assert!(TokenBucketParams::new(1, rate("1e9"), 1).is_ok());
        assert!(TokenBucketParams::new(1_000_000_000_000_000, rate("1e6"), 1).is_ok());
        assert_eq!(
            TokenBucketParams::new(1_000_000_000_000_000, rate("1"), 1),
            Err(TokenBucketParamError::RefillTooLong)
        );
        assert_eq!(
            TokenBucketParams::new(1, rate("1e-12"), 1),
            Err(TokenBucketParamError::RefillTooLong)
        );
        assert_eq!(
            TokenBucketParams::new(u64::MAX, rate("1e9"), 1),
            Err(TokenBucketParamError::RefillTooLong)
        );
    }

    #[test]
    fn decoding_refuses_unreachable_states() {
        assert!(TokenBucket::from_parts(0, 0).is_none());
        assert!(TokenBucket::from_parts(0, MAX_REFILL_NS + 1).is_none());
        assert!(TokenBucket::from_parts(i64::MAX, 1).is_none());
        assert!(TokenBucket::from_parts(i64::MIN, 1).is_none());
        assert!(TokenBucket::from_parts(T0_US * 1000, 1).is_some());
    }

    /// An independent model: the textbook bucket (level, last refill), in exact integer
    /// token-nanoseconds (one token = `interval` units), for non-decreasing time.
    struct Textbook {
        level: i128,
        last_ns: i128,
    }

    impl Textbook {
        fn call(&mut self, capacity: u64, interval: u64, cost: u64, now_us: i64) -> (bool, u64) {
            let now = i128::from(now_us) * 1000;
            let full = i128::from(capacity) * i128::from(interval);
            self.level = (self.level + (now - self.last_ns)).min(full);
            self.last_ns = now;
            let needed = i128::from(cost) * i128::from(interval);
            let allowed = cost <= capacity && self.level >= needed;
            if allowed {
                self.level -= needed;
            }
            (allowed, (self.level / i128::from(interval)) as u64)
        }
    }

    fn arb_params() -> impl Strategy<Value = (u64, u64)> {
        // (capacity, interval_ns) spanning tiny to huge buckets, fast to slow rates.
        prop_oneof![
            (1u64..20, 1u64..5_000_000_000),
            (1u64..1_000_000, 1u64..100_000),
            (1_000_000_000_000u64..1_000_000_000_000_000, 1u64..3000),
        ]
    }

    /// Steps from T0 of calls given as (µs since the previous call, cost in ‰ of the capacity).
    fn steps(
        (capacity, interval): (u64, u64),
        calls: &[(i64, u64)],
    ) -> Vec<Step<TokenBucketParams>> {
        testing::steps(
            T0_US,
            calls.iter().map(|&(elapsed, per_mille)| {
                let cost = cost_of(capacity, per_mille);
                let params = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
                (elapsed, params)
            }),
        )
    }

    proptest! {
        #[test]
        fn matches_the_textbook_bucket((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            let mut bucket = Bucket::default();
            let mut model = Textbook { level: i128::from(capacity) * i128::from(interval), last_ns: i128::from(T0_US) * 1000 };
            for step in steps((capacity, interval), &calls) {
                let decision = bucket.call(&step.params, step.now_us);
                let (allowed, remaining) = model.call(capacity, interval, step.params.cost(), step.now_us);
                prop_assert_eq!((decision.allowed, decision.remaining), (allowed, remaining));
            }
        }

        #[test]
        fn never_admits_more_than_capacity_plus_refill((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            let steps = steps((capacity, interval), &calls);
            let admitted = testing::admitted::<TokenBucketAlgorithm>(&steps, TokenBucketParams::cost);
            // Every window [t_i, t_j] of admitted calls respects capacity + elapsed / interval.
            for i in 0..admitted.len() {
                let mut total: u128 = 0;
                for j in i..admitted.len() {
                    total += u128::from(admitted[j].1);
                    let window_ns = (admitted[j].0 - admitted[i].0) as u128 * 1000;
                    prop_assert!(total <= u128::from(capacity) + window_ns / u128::from(interval));
                }
            }
        }

        #[test]
        fn waiting_retry_after_is_enough_and_necessary((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            testing::check_retry_after_is_honest::<TokenBucketAlgorithm>(&steps((capacity, interval), &calls))?;
        }

        #[test]
        fn reset_after_and_expiry_are_when_the_bucket_is_full((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            // A call costing the whole capacity is admitted exactly when the bucket is full.
            let drain = TokenBucketParams::from_interval(capacity, interval, capacity).unwrap();
            testing::check_reset_and_expiry_are_when_unused::<TokenBucketAlgorithm>(&steps((capacity, interval), &calls), &drain)?;
        }

        #[test]
        fn peeking_between_calls_changes_nothing((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            // Evaluating (a peek) at any instant leaves later decisions unchanged: no drift.
            testing::check_peeking_changes_nothing::<TokenBucketAlgorithm>(&steps((capacity, interval), &calls))?;
        }

        #[test]
        fn refunding_an_admitted_call_undoes_it((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
            let steps = steps((capacity, interval), &calls);
            testing::check_refund_undoes_an_admission::<TokenBucketAlgorithm>(&steps, TokenBucketParams::cost)?;
        }

        #[test]
        fn a_backwards_clock_never_admits_more(
            (capacity, interval) in arb_params(),
            calls in prop::collection::vec((testing::arb_clock_jump_us(), testing::arb_cost_per_mille()), 1..60),
        ) {
            // With a clock that jumps back and forth, an earlier clock never sees more tokens,
            // everything admitted still fits in the capacity plus the refill from the first
            // admission to the latest instant seen (the empty instant only moves forward, by
            // exactly what is admitted, and never past the clock), and an admitted call never
            // moves the stored empty instant backwards.
            let steps = steps((capacity, interval), &calls);
            let transitions = testing::check_earlier_clocks_never_see_more_room::<TokenBucketAlgorithm>(&steps)?;
            let mut first = None;
            let mut admitted = 0u128;
            for transition in &transitions {
                if transition.decision.allowed {
                    first.get_or_insert(transition.step.now_us);
                    admitted += u128::from(transition.step.params.cost());
                    if let (Some(b), Some(a)) = (transition.before, transition.after) {
                        prop_assert!(a.empty_at_ns() > b.empty_at_ns());
                    }
                }
                if let Some(first) = first {
                    let refill = (transition.latest_us - first) as u128 * 1000 / u128::from(interval);
                    prop_assert!(admitted <= u128::from(capacity) + refill);
                }
            }
        }

        #[test]
        fn commits_stay_decodable_under_clock_skew_and_rate_changes(
            empty_at_us in 0i64..=MAX_NOW_US,
            skew_us in prop_oneof![-10_000_000_000i64..0, 0i64..10_000_000_000, Just(0)],
            old_interval in prop_oneof![1u64..=10, 1u64..=MAX_REFILL_NS],
            interval in prop_oneof![1u64..=10, 1u64..=MAX_REFILL_NS],
            capacity in 1u64..=1_000_000,
            cost in 1u64..=1_000_000,
        ) {
            // A valid stored state, then calls and refunds at a clock on either side of its
            // empty instant, with another rate: every commit must be a state the decoder
            // accepts (replicas, RDB and RESTORE go through it).
            let state = TokenBucket::from_parts(empty_at_us.saturating_mul(1000), old_interval).unwrap();
            let capacity = capacity.min(MAX_REFILL_NS / interval).max(1);
            let p = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
            let now = empty_at_us.saturating_add(skew_us);
            testing::check_extremes::<TokenBucketAlgorithm>(Some(&state), &p, now, capacity, |change| {
                TokenBucket::from_parts(change.empty_at_ns, change.interval_ns).is_some()
            })?;
        }

        #[test]
        fn extremes_never_overflow(
            capacity in 1u64..=u64::MAX,
            interval in 1u64..=MAX_REFILL_NS,
            cost in 1u64..=u64::MAX,
            now in testing::arb_extreme_now_us(),
            empty_at in any::<i64>(),
            old_interval in 1u64..=MAX_REFILL_NS,
        ) {
            let capacity = capacity.min(MAX_REFILL_NS / interval).max(1);
            let p = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
            let state = TokenBucket::from_parts(empty_at, old_interval);
            testing::check_extremes::<TokenBucketAlgorithm>(state.as_ref(), &p, now, capacity, |change| {
                TokenBucket::from_parts(change.empty_at_ns, change.interval_ns).is_some()
            })?;
        }
    }
}
