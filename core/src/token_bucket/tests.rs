//! Unit and property tests of the token bucket.

use super::*;
use crate::decision::CallCost;
use crate::testing::{self, Driver, MS, SECOND, Step, T0_US, cost_of};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

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
    let cases: &[testing::Reply] = &[
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
    testing::assert_replies(&mut bucket, &p, 3, cases);
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
    // In debt: at most the longest wait past the latest clock.
    let latest = MAX_NOW_US * 1000 + MAX_WAIT_NS as i64;
    assert!(TokenBucket::from_parts(latest, 1).is_some());
    assert!(TokenBucket::from_parts(latest + 1, 1).is_none());
    assert!(TokenBucket::from_parts(-(MAX_REFILL_NS as i64), 1).is_some());
    assert!(TokenBucket::from_parts(-(MAX_REFILL_NS as i64) - 1, 1).is_none());
}

/// `params` accepting to wait up to `max_wait_ms` for its tokens.
fn waiting(params: TokenBucketParams, max_wait_ms: i64) -> TokenBucketParams {
    params
        .with_max_wait_ns(max_wait_ms as u64 * 1_000_000)
        .unwrap()
}

#[test]
fn the_max_wait_is_bounded_and_off_by_default() {
    let p = params(10, "1", 1);
    assert_eq!(p.max_wait_ns(), 0);
    assert_eq!(p.with_max_wait_ns(0), Ok(p), "0 is the default");
    assert_eq!(
        p.with_max_wait_ns(MAX_WAIT_NS).unwrap().max_wait_ns(),
        MAX_WAIT_NS
    );
    assert_eq!(p.with_max_wait_ns(MAX_WAIT_NS + 1), Err(MaxWaitTooLong));
    assert_eq!(p.with_max_wait_ns(u64::MAX), Err(MaxWaitTooLong));
    assert_eq!(MAX_WAIT_NS, 86_400_000_000_000);
    let paced = waiting(p, 5);
    assert_eq!(
        paced.with_cost(3).max_wait_ns(),
        5_000_000,
        "kept across costs"
    );
}

#[rustfmt::skip]
#[test]
fn a_bucket_of_one_is_a_queue() {
    // Capacity 1, 10 per second, callers accept to wait up to a second: calls are spaced
    // exactly 100 ms apart, up to ten ahead of the first.
    let p = waiting(params(1, "10", 1), 1000);
    let mut bucket = Bucket::default();
    let cases: &[(i64, bool, i64, u64)] = &[
        // (now offset ms, allowed, retry_after_ms (the wait when admitted), reset_after_ms)
        (0,   true,  0,    100),   // full: proceeds at once
        (0,   true,  100,  200),   // proceeds at +100 ms
        (0,   true,  200,  300),
        (50,  true,  250,  350),   // proceeds at +300 ms
        (50,  true,  350,  450),
        (60,  true,  440,  540),   // the sixth call, at +500 ms
        (60,  true,  540,  640),
        (60,  true,  640,  740),
        (60,  true,  740,  840),
        (60,  true,  840,  940),
        (60,  true,  940,  1040),  // at +1000 ms: the longest wait accepted
        (60,  false, 40,   1040),  // +1100 ms would wait 1040 ms: in 40 ms, 1000
        (100, true,  1000, 1100),  // exactly a second
        (2000, true, 0,    100),   // the queue has drained: at once again
    ];
    for &(offset_ms, allowed, retry, reset) in cases {
        let d = bucket.call(&p, T0_US + offset_ms * MS);
        assert_eq!(
            d.reply_fields(),
            [i64::from(allowed), 0, retry, reset as i64, 1],
            "at +{offset_ms} ms"
        );
    }
}

#[test]
fn a_wait_rounds_up_to_the_millisecond() {
    let p = waiting(params(1, "3", 1), 1000); // 333,333,334 ns per token
    let mut bucket = Bucket::default();
    assert_eq!(bucket.call(&p, T0_US).retry, Retry::Now);
    let d = bucket.call(&p, T0_US + 1);
    // Its token refills at T0 + 333,333.334 µs: 333,332.334 µs from now, so 334 ms.
    assert_eq!(d.retry, Retry::AfterMs(334));
    let empty_at = bucket.state.unwrap().empty_at_ns();
    assert_eq!(empty_at, T0_US * 1000 + 333_333_334);
    assert!(
        empty_at <= (T0_US + 1 + 334 * MS) * 1000,
        "waiting that long is enough"
    );
}

#[test]
fn denied_calls_wait_for_room_within_the_max_wait_and_take_nothing() {
    let p = waiting(params(10, "1", 4), 5000);
    let mut bucket = Bucket::default();
    assert!(bucket.call(&params(10, "1", 10), T0_US).allowed); // empty
    let d = bucket.call(&p, T0_US);
    assert_eq!(
        d.reply_fields(),
        [1, 0, 4000, 14_000, 10],
        "4 tokens in debt"
    );
    let stored = bucket.state;
    // Another 4 would refill at +8 s, 3 s beyond the 5 s accepted: retry in 3 s.
    let d = bucket.call(&p, T0_US);
    assert_eq!(d.reply_fields(), [0, 0, 3000, 14_000, 10]);
    assert_eq!(bucket.state, stored, "a denied call takes nothing");
    let d = bucket.call(&p, T0_US + 3 * SECOND);
    assert_eq!(d.reply_fields(), [1, 0, 5000, 15_000, 10]);
    // A cost above the capacity never fits, whatever the wait.
    let over = waiting(params(10, "1", 11), 86_400_000);
    assert_eq!(bucket.call(&over, T0_US + 100 * SECOND).retry, Retry::Never);
}

#[test]
fn a_refund_gives_a_reservation_back_never_beyond_a_full_bucket() {
    let p = waiting(params(2, "1", 1), 10_000);
    let mut bucket = Bucket::default();
    for wait_ms in [0, 0, 1000, 2000, 3000] {
        assert_eq!(bucket.call(&p, T0_US).retry, Retry::from_wait_ms(wait_ms));
    }
    // The caller told to wait 3 s gives up: the next call takes its place.
    let d = bucket.refund(&p, T0_US);
    assert_eq!(d.reply_fields(), [1, 0, 0, 4000, 2]);
    assert_eq!(bucket.call(&p, T0_US).retry, Retry::AfterMs(3000));
    // Refunds give back reservations, then tokens, never beyond the capacity.
    let everything = waiting(params(2, "1", 2), 10_000);
    for remaining in [0, 1, 2] {
        assert_eq!(bucket.refund(&everything, T0_US).remaining, remaining);
    }
    assert!(!bucket.refund(&everything, T0_US).allowed, "already full");
}

#[test]
fn a_rate_change_keeps_the_debt_in_time() {
    // 10 queued calls at 1/s (the queue ends at +10 s), then the rate rises to 10/s: the
    // next call is spaced 100 ms after the end of the queue, not before it.
    let slow = waiting(params(1, "1", 1), 60_000);
    let mut bucket = Bucket::default();
    for _ in 0..10 {
        assert!(bucket.call(&slow, T0_US).allowed);
    }
    assert_eq!(
        bucket.state.unwrap().empty_at_ns(),
        (T0_US + 9 * SECOND) * 1000
    );
    let fast = waiting(params(1, "10", 1), 60_000);
    let d = bucket.call(&fast, T0_US + SECOND);
    assert_eq!(d.retry, Retry::AfterMs(8100));
    assert_eq!(d.reset_after_ms, 8200);
    // And a slower rate spaces the next call by the slower interval.
    let slower = waiting(params(1, "0.5", 1), 60_000);
    let d = bucket.call(&slower, T0_US + SECOND);
    assert_eq!(d.retry, Retry::AfterMs(10_100));
}

/// An independent model: the textbook bucket (level, last refill), in exact integer
/// token-nanoseconds (one token = `interval` units), for non-decreasing time. With a maximum
/// wait, the level may go down to `−max_wait`: the caller waits until it is back to 0.
struct Textbook {
    level: i128,
    last_ns: i128,
}

impl Textbook {
    fn new(capacity: u64, interval: u64) -> Self {
        Textbook {
            level: i128::from(capacity) * i128::from(interval),
            last_ns: i128::from(T0_US) * 1000,
        }
    }

    /// The whole decision of a call.
    fn call(&mut self, params: &TokenBucketParams, now_us: i64) -> Decision {
        let ms = |ns: i128| (ns + 999_999).div_euclid(1_000_000) as u64;
        let (capacity, cost) = (params.capacity(), params.cost());
        let interval = i128::from(params.interval_ns());
        let max_wait = i128::from(params.max_wait_ns());
        let now = i128::from(now_us) * 1000;
        let full = i128::from(capacity) * interval;
        self.level = (self.level + (now - self.last_ns)).min(full);
        self.last_ns = now;
        let needed = i128::from(cost) * interval;
        let allowed = cost <= capacity && self.level - needed >= -max_wait;
        let retry = if allowed {
            self.level -= needed;
            Retry::from_wait_ms(ms(-self.level.min(0)))
        } else if cost > capacity {
            Retry::Never
        } else {
            Retry::AfterMs(ms(needed - max_wait - self.level))
        };
        Decision {
            allowed,
            remaining: (self.level.max(0) / interval) as u64,
            retry,
            reset_after_ms: ms(full - self.level),
            limit: capacity,
        }
    }
}

impl Retry {
    /// `Now` for no wait, else the wait.
    fn from_wait_ms(wait_ms: u64) -> Retry {
        if wait_ms == 0 {
            Retry::Now
        } else {
            Retry::AfterMs(wait_ms)
        }
    }
}

/// (capacity, interval_ns, max_wait_ns) spanning tiny to huge buckets, fast to slow rates,
/// and no wait (often), waits of a few intervals, or up to a day.
fn arb_params() -> impl Strategy<Value = (u64, u64, u64)> {
    prop_oneof![
        (1u64..20, 1u64..5_000_000_000),
        (1u64..1_000_000, 1u64..100_000),
        (1_000_000_000_000u64..1_000_000_000_000_000, 1u64..3000),
    ]
    .prop_flat_map(|(capacity, interval)| {
        let intervals = interval.saturating_mul(5).min(MAX_WAIT_NS);
        let max_wait = prop_oneof![
            2 => Just(0u64),
            2 => 0..=intervals,
            1 => 0..=MAX_WAIT_NS,
        ];
        (Just(capacity), Just(interval), max_wait)
    })
}

/// Steps from T0 of calls given as (µs since the previous call, cost in ‰ of the capacity).
fn steps(
    (capacity, interval, max_wait): (u64, u64, u64),
    calls: &[(i64, u64)],
) -> Vec<Step<TokenBucketParams>> {
    testing::steps(
        T0_US,
        calls.iter().map(|&(elapsed, per_mille)| {
            let cost = cost_of(capacity, per_mille);
            let params = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
            (elapsed, params.with_max_wait_ns(max_wait).unwrap())
        }),
    )
}

/// The exact instant (ns) the caller of an admitted call, told `retry`, may proceed: when
/// the tokens it took have refilled (`empty_at` after the call), or at once. Asserts that the
/// wait it was told, rounded up, is enough and less than a millisecond late.
fn proceeds_at(now_us: i64, retry: Retry, empty_at_ns: i64) -> Result<i128, TestCaseError> {
    let now = i128::from(now_us) * 1000;
    let exact = now.max(i128::from(empty_at_ns));
    let told = match retry {
        Retry::Now => now,
        Retry::AfterMs(ms) => now + i128::from(ms) * 1_000_000,
        Retry::Never => return Err(TestCaseError::fail("admitted, never")),
    };
    prop_assert!(
        exact <= told && told - exact < 1_000_000,
        "told {} for {}",
        told,
        exact
    );
    Ok(exact)
}

proptest! {
    #[test]
    fn matches_the_textbook_bucket(bucket_params in arb_params(), calls in testing::arb_calls_us()) {
        // Every field of every decision; without a wait, this is the bucket as it always was.
        let mut bucket = Bucket::default();
        let mut model = Textbook::new(bucket_params.0, bucket_params.1);
        for step in steps(bucket_params, &calls) {
            prop_assert_eq!(bucket.call(&step.params, step.now_us), model.call(&step.params, step.now_us));
        }
    }

    #[test]
    fn without_a_max_wait_no_call_waits_or_goes_into_debt(
        (capacity, interval, _) in arb_params(),
        calls in testing::arb_calls_us(),
    ) {
        let mut bucket = Bucket::default();
        for step in steps((capacity, interval, 0), &calls) {
            let decision = bucket.call(&step.params, step.now_us);
            prop_assert!(!decision.allowed || decision.retry == Retry::Now);
            if let Some(state) = bucket.state {
                prop_assert!(state.empty_at_ns() <= step.now_us * 1000);
            }
        }
    }

    #[test]
    fn callers_that_wait_as_told_never_exceed_the_rate(
        (capacity, interval, max_wait) in arb_params(),
        calls in testing::arb_calls_us(),
    ) {
        // Counting each admitted call when its caller proceeds, every interval between two
        // such instants respects capacity + elapsed / interval.
        let mut bucket = Bucket::default();
        let mut proceeds: Vec<(i128, u64)> = Vec::new();
        for step in steps((capacity, interval, max_wait), &calls) {
            let decision = bucket.call(&step.params, step.now_us);
            if decision.allowed {
                let empty_at = bucket.state.unwrap().empty_at_ns();
                let at = proceeds_at(step.now_us, decision.retry, empty_at)?;
                prop_assert!(at - i128::from(step.now_us) * 1000 <= i128::from(max_wait));
                proceeds.push((at, step.params.cost()));
            }
        }
        prop_assert!(proceeds.windows(2).all(|pair| pair[0].0 <= pair[1].0), "in order");
        for i in 0..proceeds.len() {
            let mut total: u128 = 0;
            for j in i..proceeds.len() {
                total += u128::from(proceeds[j].1);
                let elapsed_ns = (proceeds[j].0 - proceeds[i].0) as u128;
                prop_assert!(total <= u128::from(capacity) + elapsed_ns / u128::from(interval));
            }
        }
    }

    #[test]
    fn with_a_capacity_of_one_callers_proceed_one_interval_apart(
        interval in prop_oneof![1u64..5_000, 1_000_000u64..5_000_000_000],
        intervals_of_wait in 0u64..8,
        calls in testing::arb_calls_us(),
    ) {
        // The leaky bucket as a queue: each caller proceeds exactly one interval after the
        // previous one, or when it calls if the queue is empty; a call is admitted iff that
        // is within the maximum wait.
        let max_wait = (interval * intervals_of_wait).min(MAX_WAIT_NS);
        let mut bucket = Bucket::default();
        let mut previous: Option<i128> = None;
        for step in steps((1, interval, max_wait), &calls) {
            let p = step.params.with_cost(1);
            let now = i128::from(step.now_us) * 1000;
            let due = previous.map_or(now, |previous| now.max(previous + i128::from(interval)));
            let decision = bucket.call(&p, step.now_us);
            prop_assert_eq!(decision.allowed, due - now <= i128::from(max_wait));
            if decision.allowed {
                let at = proceeds_at(step.now_us, decision.retry, bucket.state.unwrap().empty_at_ns())?;
                prop_assert_eq!(at, due);
                previous = Some(at);
            }
        }
    }

    #[test]
    fn waiting_retry_after_is_enough_and_necessary(bucket_params in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_retry_after_is_honest::<TokenBucketAlgorithm>(&steps(bucket_params, &calls))?;
    }

    #[test]
    fn reset_after_and_expiry_are_when_the_bucket_is_full(
        (capacity, interval, max_wait) in arb_params(),
        calls in testing::arb_calls_us(),
    ) {
        // A call costing the whole capacity, without a wait, is admitted exactly when the
        // bucket is full.
        let drain = TokenBucketParams::from_interval(capacity, interval, capacity).unwrap();
        let steps = steps((capacity, interval, max_wait), &calls);
        testing::check_reset_and_expiry_are_when_unused::<TokenBucketAlgorithm>(&steps, &drain)?;
    }

    #[test]
    fn grantable_is_exact(bucket_params in arb_params(), calls in testing::arb_calls_us()) {
        let steps = steps(bucket_params, &calls);
        testing::check_grantable_is_exact::<TokenBucketAlgorithm>(&steps, TokenBucketParams::capacity)?;
    }

    #[test]
    fn peeking_between_calls_changes_nothing(bucket_params in arb_params(), calls in testing::arb_calls_us()) {
        // Evaluating (a peek) at any instant leaves later decisions unchanged: no drift.
        testing::check_peeking_changes_nothing::<TokenBucketAlgorithm>(&steps(bucket_params, &calls))?;
    }

    #[test]
    fn refunding_an_admitted_call_undoes_it(bucket_params in arb_params(), calls in testing::arb_calls_us()) {
        let steps = steps(bucket_params, &calls);
        testing::check_refund_undoes_an_admission::<TokenBucketAlgorithm>(&steps, TokenBucketParams::cost)?;
    }

    #[test]
    fn a_backwards_clock_never_admits_more(
        (capacity, interval, max_wait) in arb_params(),
        calls in prop::collection::vec((testing::arb_clock_jump_us(), testing::arb_cost_per_mille()), 1..60),
    ) {
        // With a clock that jumps back and forth, an earlier clock never sees more tokens,
        // everything admitted still fits in the capacity plus the refill from the first
        // admission to the latest instant seen plus the maximum wait (the empty instant only
        // moves forward, by exactly what is admitted, and never past the clock plus the
        // wait), and an admitted call never moves the stored empty instant backwards.
        let steps = steps((capacity, interval, max_wait), &calls);
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
                let span_ns = (transition.latest_us - first) as u128 * 1000 + u128::from(max_wait);
                prop_assert!(admitted <= u128::from(capacity) + span_ns / u128::from(interval));
            }
        }
    }

    #[test]
    fn commits_stay_decodable_under_clock_skew_debt_and_rate_changes(
        empty_at_us in 0i64..=MAX_NOW_US,
        debt_ns in prop_oneof![Just(0u64), Just(MAX_WAIT_NS), 0u64..=MAX_WAIT_NS],
        skew_us in prop_oneof![-10_000_000_000i64..0, 0i64..10_000_000_000, Just(0)],
        old_interval in prop_oneof![1u64..=10, 1u64..=MAX_REFILL_NS],
        interval in prop_oneof![1u64..=10, 1u64..=MAX_REFILL_NS],
        capacity in 1u64..=1_000_000,
        cost in 1u64..=1_000_000,
        max_wait in prop_oneof![Just(0u64), Just(MAX_WAIT_NS), 0u64..=MAX_WAIT_NS],
    ) {
        // A valid stored state (in debt or not), then calls and refunds at a clock on either
        // side of its empty instant, with another rate and any wait: every commit must be a
        // state the decoder accepts (replicas, RDB and RESTORE go through it).
        let empty_at = empty_at_us.saturating_mul(1000).saturating_add(debt_ns as i64);
        let state = TokenBucket::from_parts(empty_at, old_interval).unwrap();
        let capacity = capacity.min(MAX_REFILL_NS / interval).max(1);
        let p = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
        let p = p.with_max_wait_ns(max_wait).unwrap();
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
        max_wait in prop_oneof![Just(0u64), Just(MAX_WAIT_NS), 0u64..=MAX_WAIT_NS],
    ) {
        let capacity = capacity.min(MAX_REFILL_NS / interval).max(1);
        let p = TokenBucketParams::from_interval(capacity, interval, cost).unwrap();
        let p = p.with_max_wait_ns(max_wait).unwrap();
        let state = TokenBucket::from_parts(empty_at, old_interval);
        testing::check_extremes::<TokenBucketAlgorithm>(state.as_ref(), &p, now, capacity, |change| {
            TokenBucket::from_parts(change.empty_at_ns, change.interval_ns).is_some()
        })?;
        let up_to = TokenBucketAlgorithm::grantable(state.as_ref(), &p, u64::MAX, now);
        prop_assert!(up_to <= capacity);
    }
}
