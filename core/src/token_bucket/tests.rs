//! Unit and property tests of the token bucket.

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
    let refund = TokenBucketAlgorithm::refund(bucket.state.as_ref(), &params(10, "1", 5), T0_US);
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
    let empty =
        TokenBucketAlgorithm::evaluate(None, &params(1_000_000_000, "1e9", 1_000_000_000), T0_US);
    let state = empty.commit.unwrap().change;
    let refund = TokenBucketAlgorithm::refund(Some(&state), &params(1, "0.001", 1), T0_US - SECOND);
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
fn steps((capacity, interval): (u64, u64), calls: &[(i64, u64)]) -> Vec<Step<TokenBucketParams>> {
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
    fn grantable_is_exact((capacity, interval) in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_grantable_is_exact::<TokenBucketAlgorithm>(&steps((capacity, interval), &calls), TokenBucketParams::capacity)?;
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
