//! Unit and property tests of GCRA (redis-cell's algorithm).

use super::*;
use crate::testing::{self, Driver, MS, SECOND, Step, T0_US};
use proptest::prelude::*;

const NS_PER_S: i64 = 1_000_000_000;

/// A line-by-line port of redis-cell 0.4.0's `CL.THROTTLE`: `Rate::per_period`,
/// `RateLimiter::new` and `RateLimiter::rate_limit` (src/cell/mod.rs), the rounding of the
/// reply (src/lib.rs), and the store's TTL (src/cell/store.rs). `time::OffsetDateTime` and
/// `time::Duration` are kept as i128 nanoseconds; their accessors are ported from time
/// 0.3.36. The release build's wrapping `i64` products are `wrapping_mul`. The store is
/// Redis with an ideal expiry: the key exists while its TAT is in the future.
mod redis_cell {
    const NANOS_PER_SECOND: i128 = 1_000_000_000;

    fn as_seconds_f64(d: i128) -> f64 {
        let seconds = (d / NANOS_PER_SECOND) as i64;
        let nanoseconds = (d % NANOS_PER_SECOND) as i32;
        seconds as f64 + nanoseconds as f64 / 1e9
    }

    fn subsec_milliseconds(d: i128) -> i16 {
        ((d % NANOS_PER_SECOND) as i32 / 1_000_000) as i16
    }

    fn whole_microseconds(d: i128) -> i128 {
        (d / NANOS_PER_SECOND) * 1_000_000 + (d % NANOS_PER_SECOND) / 1_000
    }

    fn whole_milliseconds(d: i128) -> i128 {
        (d / NANOS_PER_SECOND) * 1_000 + (d % NANOS_PER_SECOND) / 1_000_000
    }

    /// `Rate::per_period(n, Duration::seconds(period)).period`, in nanoseconds.
    pub fn per_period(n: i64, period: i64) -> i64 {
        let ns: i128 = i128::from(period) * NANOS_PER_SECOND;
        if n == 0 || ns == 0 {
            return 0;
        }
        ((ns as f64) / (n as f64)) as i64
    }

    /// One call's result.
    pub struct Call {
        /// The reply, or the error text after `Cell error: `.
        pub reply: Result<[i64; 5], &'static str>,
        /// An admitted call's TTL was negative (the TAT went before now).
        pub negative_ttl: bool,
    }

    #[derive(Default)]
    pub struct Store {
        /// The key's value: the TAT in nanoseconds, as `nanoseconds(new_tat)` writes it.
        pub value: Option<u64>,
    }

    impl Store {
        /// `get_with_time`: the key exists while its TAT is in the future.
        fn get(&self, now: i128) -> Option<u64> {
            self.value.filter(|&v| now < i128::from(v))
        }

        /// `CL.THROTTLE key max_burst count period quantity` at `now` (ns).
        pub fn throttle(
            &mut self,
            max_burst: i64,
            count: i64,
            period: i64,
            quantity: i64,
            now: i128,
        ) -> Call {
            // lib.rs / RateLimiter::new
            let emission_interval = per_period(count, period);
            let delay_variation_tolerance =
                emission_interval.wrapping_mul(max_burst.wrapping_add(1));
            let limit = max_burst.wrapping_add(1);
            // rate_limit
            let mut remaining: i64 = 0;
            let mut retry_after: i128 = -NANOS_PER_SECOND;
            if emission_interval == 0 {
                return Call {
                    reply: Err("Zero rates are not supported"),
                    negative_ttl: false,
                };
            }
            let increment = i128::from(emission_interval.wrapping_mul(quantity));
            let dvt = i128::from(delay_variation_tolerance);
            let tat_val = self.get(now);
            let tat = match tat_val {
                None => now,
                Some(v) => i128::from(v),
            };
            let new_tat = if now > tat {
                now + increment
            } else {
                tat + increment
            };
            let allow_at = new_tat - dvt;
            let diff = now - allow_at;
            let limited;
            let ttl;
            let mut negative_ttl = false;
            if diff < 0 {
                if increment <= dvt {
                    retry_after = -diff;
                }
                limited = true;
                ttl = tat - now;
            } else {
                let new_tat_ns = new_tat as u64;
                ttl = new_tat - now;
                // set_if_not_exists_with_ttl / compare_and_swap_with_ttl: write, then
                // RedisModule_SetExpire(whole ms), which refuses negatives but -1
                // (REDISMODULE_NO_EXPIRE).
                self.value = Some(new_tat_ns);
                negative_ttl = ttl < 0;
                let expire = whole_milliseconds(ttl);
                if expire < 0 && expire != -1 {
                    return Call {
                        reply: Err("Error while setting key expire"),
                        negative_ttl,
                    };
                }
                limited = false;
            }
            let ei = i128::from(emission_interval);
            let next = dvt - ttl;
            if next > -ei {
                remaining =
                    (whole_microseconds(next) as f64 / whole_microseconds(ei) as f64) as i64;
            }
            let reset_after = ttl;
            // lib.rs: round partial seconds up
            let mut retry_after_s = as_seconds_f64(retry_after) as i64;
            if subsec_milliseconds(retry_after) > 0 {
                retry_after_s += 1
            }
            let mut reset_after_s = as_seconds_f64(reset_after) as i64;
            if subsec_milliseconds(reset_after) > 0 {
                reset_after_s += 1
            }
            Call {
                reply: Ok([
                    i64::from(limited),
                    limit,
                    remaining,
                    retry_after_s,
                    reset_after_s,
                ]),
                negative_ttl,
            }
        }
    }
}

fn params(max_burst: i64, count: i64, period: i64, quantity: i64) -> GcraParams {
    GcraParams::new(max_burst, count, period, quantity).unwrap()
}

/// The evaluation's decision must be the cell outcome, in the Decision's units.
fn assert_decision_matches(decision: &Decision, cell: &CellOutcome) {
    assert_eq!(decision.allowed, !cell.limited);
    assert_eq!(decision.limit, u64::try_from(cell.limit).unwrap());
    assert_eq!(
        decision.remaining,
        u64::try_from(cell.remaining).unwrap_or(0)
    );
    assert_eq!(
        decision.reset_after_ms,
        ceil_ms_from_ns(cell.reset_after_ns)
    );
    let retry = match (cell.limited, cell.retry_after_ns) {
        (false, None) => Retry::Now,
        (true, None) => Retry::Never,
        (true, Some(ns)) => Retry::AfterMs(ceil_ms_from_ns(ns).max(1)),
        (false, Some(_)) => panic!("an admitted call has no retry"),
    };
    assert_eq!(decision.retry, retry);
}

/// A key driven through a sequence of calls, as the glue would drive it.
type Key = Driver<GcraAlgorithm>;

impl Driver<GcraAlgorithm> {
    /// A `CL.THROTTLE` call, checking that its decision, write and expiry agree with the
    /// cell outcome.
    fn throttle(&mut self, params: &GcraParams, now_us: i64) -> (Decision, CellOutcome) {
        self.expire(now_us);
        let (evaluation, cell) = GcraAlgorithm::throttle(self.state.as_ref(), params, now_us);
        assert_decision_matches(&evaluation.decision, &cell);
        assert_eq!(
            evaluation,
            GcraAlgorithm::evaluate(self.state.as_ref(), params, now_us)
        );
        if let Some(commit) = &evaluation.commit {
            let tat = commit.change.tat_ns();
            assert_eq!(
                commit.expires_at_ms,
                (tat + 999_999).div_euclid(1_000_000).max(1)
            );
            // At its expiry the state is a missing key; a millisecond earlier it is not.
            let at = commit.expires_at_ms * MS;
            assert!(
                at <= MAX_NOW_US || tat > MAX_NOW_US * 1000,
                "beyond the clamped clock"
            );
            if at <= MAX_NOW_US {
                assert_eq!(
                    GcraAlgorithm::throttle(Some(&commit.change), params, at),
                    GcraAlgorithm::throttle(None, params, at)
                );
            }
            assert!(i128::from(tat) > i128::from(at - MS) * 1000);
        }
        let decision = evaluation.decision;
        self.commit(evaluation.commit);
        (decision, cell)
    }

    fn reply(&mut self, params: &GcraParams, now_us: i64) -> [i64; 5] {
        cell_reply(&self.throttle(params, now_us).1)
    }
}

/// redis-cell's own `it_rate_limits` (src/cell/mod.rs): limit 5, one per second.
#[rustfmt::skip]
#[test]
fn redis_cells_own_table() {
    let mut key = Key::default();
    let s = |n: i64| Some(n * NS_PER_S);
    // (now offset ms, volume, remaining, reset_after ns, retry_after ns, limited)
    type Case = (i64, i64, i64, i64, Option<i64>, bool);
    let cases: &[Case] = &[
        // You can never make a request larger than the maximum.
        (0,    6, 5, 0,                None, true),
        // Rate limit normal requests appropriately.
        (0,    1, 4, NS_PER_S,         None, false),
        (0,    1, 3, 2 * NS_PER_S,     None, false),
        (0,    1, 2, 3 * NS_PER_S,     None, false),
        (0,    1, 1, 4 * NS_PER_S,     None, false),
        (0,    1, 0, 5 * NS_PER_S,     None, false),
        (0,    1, 0, 5 * NS_PER_S,     s(1), true),
        (3000, 1, 2, 3_000_000_000,    None, false),
        (3100, 1, 1, 3_900_000_000,    None, false),
        (4000, 1, 1, 4_000_000_000,    None, false),
        (8000, 1, 4, 1_000_000_000,    None, false),
        (9500, 1, 4, 1_000_000_000,    None, false),
        // Zero-volume request just peeks at the state.
        (9500, 0, 4, NS_PER_S,         None, false),
        // High-volume request uses up more of the limit.
        (9500, 2, 2, 3 * NS_PER_S,     None, false),
        // Large requests cannot exceed limits
        (9500, 5, 2, 3 * NS_PER_S,     s(3), true),
    ];
    for &(offset_ms, volume, remaining, reset_after_ns, retry_after_ns, limited) in cases {
        let (_, cell) = key.throttle(&params(4, 1, 1, volume), T0_US + offset_ms * MS);
        assert_eq!(
            cell,
            CellOutcome { limited, limit: 5, remaining, retry_after_ns, reset_after_ns },
            "at +{offset_ms} ms, volume {volume}"
        );
    }
}

#[test]
fn documented_replies() {
    // README: CL.THROTTLE user123 15 30 60
    assert_eq!(
        Key::default().reply(&params(15, 30, 60, 1), T0_US),
        [0, 16, 15, -1, 2]
    );
    // redis-cell's report of `cl.throttle user123 5 5 3600`
    assert_eq!(
        Key::default().reply(&params(5, 5, 3600, 1), T0_US),
        [0, 6, 5, -1, 720]
    );
    // redis-cell's report of a burst of 1000 (before it rounded the reply up, the reset read 0)
    assert_eq!(
        Key::default().reply(&params(1000, 1000, 60, 1), T0_US),
        [0, 1001, 1000, -1, 1]
    );
    // tests/e2e.rs: CL.THROTTLE user123 0 1 2 1
    let p = params(0, 1, 2, 1);
    let mut key = Key::default();
    assert_eq!(key.reply(&p, T0_US), [0, 1, 0, -1, 2]);
    assert_eq!(key.reply(&p, T0_US), [1, 1, 0, 2, 2]);
    assert_eq!(key.reply(&p, T0_US + 2 * SECOND), [0, 1, 0, -1, 2]);
    // redis-cell's report of `CL.THROTTLE somekey 0 3 60 1`, rounded up as 0.4.0 does
    let p = params(0, 3, 60, 1);
    let mut key = Key::default();
    assert_eq!(key.reply(&p, T0_US), [0, 1, 0, -1, 20]);
    assert_eq!(key.reply(&p, T0_US + 500 * MS), [1, 1, 0, 20, 20]);
    assert_eq!(key.reply(&p, T0_US + 1500 * MS), [1, 1, 0, 19, 19]);
}

#[test]
fn replies_round_like_redis_cell() {
    let two_24 = 1i64 << 24;
    let cases: &[(i64, i64)] = &[
        (0, 0),
        (1, 0), // under a millisecond: 0, where ceil_ms would give 1 ms, so 1 s
        (999_999, 0),
        (1_000_000, 1),
        (999_999_999, 1),
        (NS_PER_S, 1),
        (NS_PER_S + 500_000, 1), // 1.0005 s: the sub-millisecond part is dropped
        (NS_PER_S + 1_000_000, 2),
        (2 * NS_PER_S - 1, 2),
        (-1, 0),
        (-NS_PER_S, -1),
        (-1_500_000_000, -1),
        // as_seconds_f64 rounds x.999999999 up to x + 1 from 2^24 s on; the millisecond
        // check then adds another second.
        ((two_24 / 2) * NS_PER_S + 999_999_999, two_24 / 2 + 1),
        (two_24 * NS_PER_S + 999_999_999, two_24 + 2),
        (two_24 * NS_PER_S + 999_999_000, two_24 + 1),
    ];
    for &(ns, seconds) in cases {
        assert_eq!(cell_seconds(ns), seconds, "{ns} ns");
    }
    let outcome = CellOutcome {
        limited: true,
        limit: 3,
        remaining: -1,
        retry_after_ns: None,
        reset_after_ns: 1,
    };
    assert_eq!(cell_reply(&outcome), [1, 3, -1, -1, 0]);
}

#[test]
fn millisecond_ceilings_cannot_reproduce_the_reply() {
    // Why CellOutcome exists: 1.0005 s and 1.001 s both round up to 1001 ms, but
    // redis-cell answers 1 and 2.
    assert_eq!(
        ceil_ms_from_ns(1_000_500_000),
        ceil_ms_from_ns(1_001_000_000)
    );
    assert_ne!(cell_seconds(1_000_500_000), cell_seconds(1_001_000_000));
    // It happens in ordinary use: 3 per second (333,333,333 ns) and a µs clock.
    let p = params(0, 3, 1, 1);
    let mut key = Key::default();
    key.throttle(&p, T0_US);
    let (decision, cell) = key.throttle(&p, T0_US + 332_833);
    assert_eq!(cell.retry_after_ns, Some(500_333));
    assert_eq!(decision.retry, Retry::AfterMs(1));
    assert_eq!(
        cell_reply(&cell),
        [1, 1, 0, 0, 0],
        "limited, yet retry and reset after 0 s"
    );
}

#[test]
fn parameters_mirror_redis_cell() {
    use GcraParamError::*;
    assert_eq!(GcraParams::new(0, 0, 1, 1), Err(ZeroRate));
    assert_eq!(GcraParams::new(0, 1, 0, 1), Err(ZeroRate));
    assert_eq!(
        GcraParams::new(-5, 0, 1, 1),
        Err(ZeroRate),
        "redis-cell's error wins"
    );
    assert_eq!(
        GcraParams::new(0, 2_000_000_000, 1, 1),
        Err(ZeroRate),
        "0.5 ns truncates to 0"
    );
    assert_eq!(
        GcraParams::new(0, 1_000_000_000, 1, 1)
            .unwrap()
            .interval_ns(),
        1
    );
    assert_eq!(GcraParams::new(0, -1, 1, 1), Err(NegativeRate));
    assert_eq!(GcraParams::new(0, 1, -1, 1), Err(NegativeRate));
    assert_eq!(
        GcraParams::new(0, -3, -1, 1).unwrap().interval_ns(),
        333_333_333
    );
    assert_eq!(GcraParams::new(-1, 1, 1, 1), Err(NegativeBurst));
    assert_eq!(GcraParams::new(i64::MAX, 1, 1, 1), Err(ToleranceTooLong));
    assert_eq!(
        GcraParams::new(0, 1, 3_155_760_000, 1)
            .unwrap()
            .tolerance_ns(),
        MAX_TOLERANCE_NS
    );
    assert_eq!(
        GcraParams::new(0, 1, 3_155_760_001, 1),
        Err(ToleranceTooLong)
    );
    assert_eq!(
        GcraParams::new(1, 1, 1_577_880_001, 1),
        Err(ToleranceTooLong)
    );
    assert!(GcraParams::new(MAX_TOLERANCE_NS - 1, 1_000_000_000, 1, i64::MIN).is_ok());
    assert_eq!(
        GcraParams::new(MAX_TOLERANCE_NS, 1_000_000_000, 1, 1),
        Err(ToleranceTooLong)
    );
    assert_eq!(
        GcraParams::new(5, i64::MAX, i64::MAX, 1)
            .unwrap()
            .interval_ns(),
        1_000_000_000
    );
    assert_eq!(GcraParams::new(0, i64::MAX, 1, 1), Err(ZeroRate));
    let p = params(15, 30, 60, 7);
    assert_eq!(
        (p.max_burst(), p.limit(), p.interval_ns(), p.quantity()),
        (15, 16, 2 * NS_PER_S, 7)
    );
    assert_eq!(p.tolerance_ns(), 32 * NS_PER_S);
    assert_eq!(p.with_quantity(-2).quantity(), -2);
    // The float division of Rate::per_period, where it differs from integer division:
    // period × 1e9 above 2^53 loses bits when converted.
    let (count, period) = (3, 10_000_000_000);
    assert_eq!(
        emission_interval_ns(count, period),
        Ok(redis_cell::per_period(count, period))
    );
    assert_ne!(
        emission_interval_ns(count, period).unwrap(),
        (i128::from(period) * 1_000_000_000 / i128::from(count)) as i64
    );
}

#[test]
fn peeks_and_denials_write_nothing() {
    let mut key = Key::default();
    let (evaluation, _) = GcraAlgorithm::throttle(None, &params(2, 1, 1, 0), T0_US);
    assert!(evaluation.decision.allowed && evaluation.commit.is_none());
    key.throttle(&params(2, 1, 1, 3), T0_US); // the whole burst
    let stored = key.state;
    let (evaluation, cell) = GcraAlgorithm::throttle(stored.as_ref(), &params(2, 1, 1, 1), T0_US);
    assert!(evaluation.commit.is_none());
    assert_eq!(cell_reply(&cell), [1, 3, 0, 1, 3]);
    let (evaluation, cell) =
        GcraAlgorithm::throttle(stored.as_ref(), &params(2, 1, 1, 0), T0_US + 500 * MS);
    assert!(evaluation.commit.is_none(), "a peek changes nothing");
    assert_eq!(cell_reply(&cell), [0, 3, 0, -1, 3]);
}

#[test]
fn quantity_above_the_limit_is_never_admitted() {
    let (evaluation, cell) = GcraAlgorithm::throttle(None, &params(4, 1, 1, 6), T0_US);
    assert_eq!(evaluation.decision.retry, Retry::Never);
    assert_eq!(cell_reply(&cell), [1, 5, 5, -1, 0]);
    // Exactly the limit: admitted on a fresh key, and told when once partly used.
    let mut key = Key::default();
    assert_eq!(key.reply(&params(4, 1, 1, 5), T0_US), [0, 5, 0, -1, 5]);
    assert_eq!(
        key.reply(&params(4, 1, 1, 5), T0_US + SECOND),
        [1, 5, 1, 4, 4]
    );
    // A product beyond i64::MAX ns wraps in redis-cell; here it is simply too much.
    let (evaluation, cell) = GcraAlgorithm::throttle(None, &params(0, 1, 1, i64::MAX), T0_US);
    assert_eq!(evaluation.decision.retry, Retry::Never);
    assert_eq!(cell_reply(&cell), [1, 1, 1, -1, 0]);
}

#[test]
fn negative_quantities_give_back_but_not_beyond_now() {
    let p = |q| params(4, 1, 1, q);
    let mut key = Key::default();
    key.throttle(&p(4), T0_US);
    assert_eq!(key.state.unwrap().tat_ns(), (T0_US + 4 * SECOND) * 1000);
    // As in redis-cell (returning tokens): the TAT moves back.
    let mut reference = redis_cell::Store {
        value: key.state.map(|s| s.tat_ns() as u64),
    };
    let now_ns = i128::from(T0_US) * 1000;
    assert_eq!(
        key.reply(&p(-1), T0_US),
        reference.throttle(4, 1, 1, -1, now_ns).reply.unwrap()
    );
    assert_eq!(key.state.unwrap().tat_ns(), (T0_US + 3 * SECOND) * 1000);
    // Beyond now redis-cell fails (a negative TTL); here the limiter is full.
    let call = reference.throttle(4, 1, 1, -10, now_ns);
    assert!(call.negative_ttl);
    assert_eq!(call.reply, Err("Error while setting key expire"));
    assert_eq!(key.reply(&p(-10), T0_US), [0, 5, 5, -1, 0]);
    assert_eq!(key.state.unwrap().tat_ns(), T0_US * 1000);
    let (evaluation, _) = GcraAlgorithm::throttle(None, &p(-1), T0_US);
    assert!(
        evaluation.commit.is_none(),
        "nothing to give back to a missing key"
    );
}

#[test]
fn remaining_follows_redis_cell_quirks() {
    // An interval under 1 µs divides by zero whole microseconds: redis-cell says
    // i64::MAX, here remaining never exceeds the limit (max_burst + 1).
    let (_, cell) = GcraAlgorithm::throttle(None, &params(10, 2_000_000, 1, 1), T0_US);
    assert_eq!(cell.remaining, 11);
    // An interval that is not whole microseconds truncates both operands: 1,500 ns.
    let p = params(2, 666_666, 1, 1);
    assert_eq!(p.interval_ns(), 1_500);
    let (_, cell) = GcraAlgorithm::throttle(None, &p, T0_US);
    assert_eq!(cell.remaining, 3, "above max_burst");
    // After the burst shrinks, remaining can be -1 (2,700 ns interval).
    let (count, now_ns) = (370_370, |us: i64| i128::from(us) * 1000);
    assert_eq!(params(0, count, 1, 1).interval_ns(), 2_700);
    let mut key = Key::default();
    let mut reference = redis_cell::Store::default();
    key.throttle(&params(2, count, 1, 3), T0_US);
    reference.throttle(2, count, 1, 3, now_ns(T0_US));
    let (decision, cell) = key.throttle(&params(0, count, 1, 0), T0_US + 3);
    assert_eq!(cell.remaining, -1);
    assert_eq!(decision.remaining, 0, "Decision::remaining is unsigned");
    let call = reference.throttle(0, count, 1, 0, now_ns(T0_US + 3));
    assert_eq!(call.reply, Ok(cell_reply(&cell)));
    assert_eq!(cell_reply(&cell), [1, 1, -1, 0, 0]);
}

#[test]
fn expiry_is_the_tat_rounded_up_to_the_millisecond() {
    let p = params(0, 3, 1, 1); // 333,333,333 ns
    let (evaluation, cell) = GcraAlgorithm::throttle(None, &p, T0_US);
    let commit = evaluation.commit.unwrap();
    assert_eq!(commit.change.tat_ns(), T0_US * 1000 + 333_333_333);
    assert_eq!(commit.expires_at_ms, T0_US / MS + 334);
    assert_eq!(cell.reset_after_ns, 333_333_333);
    assert_eq!(evaluation.decision.reset_after_ms, 334);
}

#[test]
fn refund_moves_the_tat_back_to_at_most_a_full_burst() {
    let p = |q| params(4, 1, 1, q);
    let nothing = GcraAlgorithm::refund(None, &p(2), T0_US);
    assert!(nothing.commit.is_none() && !nothing.decision.allowed);
    assert_eq!(nothing.decision.reply_fields(), [0, 5, 0, 0, 5]);
    let mut key = Key::default();
    key.throttle(&p(3), T0_US); // TAT = now + 3 s
    let refund = GcraAlgorithm::refund(key.state.as_ref(), &p(2), T0_US);
    assert_eq!(refund.decision.reply_fields(), [1, 4, 0, 1000, 5]);
    let commit = refund.commit.unwrap();
    assert_eq!(commit.change.tat_ns(), (T0_US + SECOND) * 1000);
    assert_eq!(commit.expires_at_ms, T0_US / MS + 1000);
    let refund = GcraAlgorithm::refund(Some(&commit.change), &p(5), T0_US);
    assert_eq!(
        refund.decision.reply_fields(),
        [1, 5, 0, 0, 5],
        "clamped to a full burst"
    );
    let full = refund.commit.unwrap().change;
    let again = GcraAlgorithm::refund(Some(&full), &p(1), T0_US);
    assert!(
        again.commit.is_none() && !again.decision.allowed,
        "already full"
    );
    assert!(
        GcraAlgorithm::refund(key.state.as_ref(), &p(0), T0_US)
            .commit
            .is_none()
    );
    // The retry is that of a call of the refunded quantity.
    let refund = GcraAlgorithm::refund(key.state.as_ref(), &p(1), T0_US);
    assert_eq!(refund.decision.retry, Retry::Now);
    let refund = GcraAlgorithm::refund(key.state.as_ref(), &params(1, 1, 1, 1), T0_US);
    assert_eq!(refund.decision.retry, Retry::AfterMs(1000));
    assert!(refund.decision.allowed);
}

#[test]
fn clock_going_backwards_neither_rewinds_nor_admits_more() {
    let p = params(1, 1, 1, 1);
    let mut key = Key::default();
    assert!(key.throttle(&p, T0_US).0.allowed);
    assert!(key.throttle(&p, T0_US).0.allowed);
    let stored = key.state.unwrap();
    let (evaluation, cell) = GcraAlgorithm::throttle(Some(&stored), &p, T0_US - 3600 * SECOND);
    assert!(!evaluation.decision.allowed && evaluation.commit.is_none());
    assert_eq!(cell_reply(&cell), [1, 2, 0, 3601, 3602]);
    assert!(key.throttle(&p, T0_US + SECOND).0.allowed);
    assert!(key.state.unwrap().tat_ns() > stored.tat_ns());
}

#[test]
fn decoding_refuses_unreachable_states() {
    assert!(Gcra::from_parts(-1).is_none());
    assert!(Gcra::from_parts(MAX_TAT_NS + 1).is_none());
    assert!(Gcra::from_parts(i64::MAX).is_none());
    assert_eq!(Gcra::from_parts(0).map(|s| s.tat_ns()), Some(0));
    assert!(Gcra::from_parts(MAX_TAT_NS).is_some());
    assert!(Gcra::from_parts(T0_US * 1000).is_some());
    assert_eq!(std::mem::size_of::<Gcra>(), 8);
    assert_eq!(std::mem::align_of::<Gcra>(), 8);
}

/// (max_burst, count, period), spanning everyday limits, fast intervals with
/// sub-microsecond parts or below 1 µs, and intervals of years.
fn arb_config() -> impl Strategy<Value = (i64, i64, i64)> {
    prop_oneof![
        (0i64..5, 1i64..20, 1i64..20),
        (0i64..200, 1i64..5_000, 1i64..3_600),
        (0i64..50, 100_000i64..2_000_000_000, 1i64..3),
        (0i64..3, 1i64..4, 1_000_000i64..1_000_000_000),
    ]
    .prop_filter("valid parameters", |&(b, c, p)| {
        GcraParams::new(b, c, p, 1).is_ok()
    })
}

/// (use the second configuration, quantity kind, a raw quantity, µs since the last call)
fn arb_calls() -> impl Strategy<Value = Vec<(bool, u8, i64, i64)>> {
    let step = prop_oneof![
        Just(0i64),
        0i64..1_000,
        0i64..3_000_000,
        (0i64..5_000).prop_map(|ms| ms * MS),
        0i64..1_000_000_000_000,
    ];
    prop::collection::vec((any::<bool>(), 0u8..8, -5i64..1000, step), 1..80)
}

fn quantity_of(kind: u8, raw: i64, max_burst: i64) -> i64 {
    match kind {
        0 => 0,
        1..=3 => 1,
        4 => max_burst + 1,
        5 => max_burst + 2,
        6 => raw,
        _ => -1,
    }
}

/// Steps from T0 of [`arb_calls`] traffic alternating between two configurations.
fn steps(
    first: (i64, i64, i64),
    second: (i64, i64, i64),
    calls: &[(bool, u8, i64, i64)],
) -> Vec<Step<GcraParams>> {
    testing::steps(
        T0_US,
        calls.iter().map(|&(use_second, kind, raw, step)| {
            let (max_burst, count, period) = if use_second { second } else { first };
            let quantity = quantity_of(kind, raw, max_burst);
            (step, params(max_burst, count, period, quantity))
        }),
    )
}

/// The TAT that matters at `now`: one in the future.
fn effective(tat: Option<i128>, now_ns: i128) -> Option<i128> {
    tat.filter(|&t| t > now_ns)
}

proptest! {
    #[test]
    fn replies_and_state_match_redis_cell(
        first in arb_config(),
        second in arb_config(),
        calls in arb_calls(),
    ) {
        let mut reference = redis_cell::Store::default();
        let mut key = Key::default();
        let mut now = T0_US;
        for (use_second, kind, raw, step) in calls {
            now += step;
            let (max_burst, count, period) = if use_second { second } else { first };
            let quantity = quantity_of(kind, raw, max_burst);
            let p = params(max_burst, count, period, quantity);
            let now_ns = i128::from(now) * 1000;
            let call = reference.throttle(max_burst, count, period, quantity, now_ns);
            let (_, cell) = key.throttle(&p, now);
            let wraps = i64::try_from(i128::from(p.interval_ns()) * i128::from(quantity)).is_err();
            if call.negative_ttl || wraps {
                // The documented differences: follow our state from here on.
                reference.value = key.state.map(|s| s.tat_ns() as u64);
            } else {
                // Remaining never above the limit: an intentional difference.
                let expected = call.reply.map(|[limited, limit, remaining, retry, reset]| {
                    [limited, limit, remaining.min(limit), retry, reset]
                });
                prop_assert_eq!(expected, Ok(cell_reply(&cell)), "at {} with {:?}", now, (max_burst, count, period, quantity));
            }
            prop_assert_eq!(
                effective(reference.value.map(i128::from), now_ns),
                effective(key.state.map(|s| i128::from(s.tat_ns())), now_ns)
            );
        }
    }

    #[test]
    fn whole_seconds_are_the_millisecond_floor_rounded_up(ns in 1i64..(1i64 << 24) * NS_PER_S) {
        let floor_ms = ns / 1_000_000;
        prop_assert_eq!(cell_seconds(ns), (floor_ms + 999) / 1000);
    }

    #[test]
    fn waiting_retry_after_is_enough_and_necessary(first in arb_config(), second in arb_config(), calls in arb_calls()) {
        testing::check_retry_after_is_honest::<GcraAlgorithm>(&steps(first, second, &calls))?;
    }

    #[test]
    fn reset_after_and_expiry_are_when_the_tat_has_passed(first in arb_config(), second in arb_config(), calls in arb_calls()) {
        // A call of a whole burst is admitted exactly when the TAT is not in the future,
        // whatever the rate.
        let (max_burst, count, period) = first;
        let drain = params(max_burst, count, period, max_burst + 1);
        testing::check_reset_and_expiry_are_when_unused::<GcraAlgorithm>(&steps(first, second, &calls), &drain)?;
    }

    #[test]
    fn grantable_is_exact(first in arb_config(), second in arb_config(), calls in arb_calls()) {
        testing::check_grantable_is_exact::<GcraAlgorithm>(&steps(first, second, &calls), GcraParams::limit)?;
    }

    #[test]
    fn peeking_between_calls_changes_nothing(first in arb_config(), second in arb_config(), calls in arb_calls()) {
        testing::check_peeking_changes_nothing::<GcraAlgorithm>(&steps(first, second, &calls))?;
    }

    #[test]
    fn a_backwards_clock_never_admits_more(
        (max_burst, count, period) in arb_config(),
        calls in prop::collection::vec((testing::arb_clock_jump_us(), 1i64..4), 1..60),
    ) {
        // Everything admitted fits in the burst plus what the rate allows from the first
        // admission to the latest instant seen, and the TAT only moves forward.
        let steps = testing::steps(T0_US, calls.iter().map(|&(step, quantity)| (step, params(max_burst, count, period, quantity))));
        let transitions = testing::check_earlier_clocks_never_see_more_room::<GcraAlgorithm>(&steps)?;
        let mut first = None;
        let mut admitted = 0i128;
        for (transition, &(step, quantity)) in transitions.iter().zip(&calls) {
            let (p, now, before) = (&transition.step.params, transition.step.now_us, transition.before);
            if let (Some(state), Some(earlier)) = (before, now.checked_sub(1 + step.abs())) {
                // An earlier clock admits no more than this one.
                let early = GcraAlgorithm::evaluate(Some(&state), p, earlier).decision.allowed;
                prop_assert!(!early || GcraAlgorithm::evaluate(Some(&state), p, now).decision.allowed);
            }
            // The same call through CL.THROTTLE, with its own checks, writes the same.
            let mut key = Key { state: before, expires_at_ms: None };
            prop_assert_eq!(key.throttle(p, now).0, transition.decision);
            prop_assert_eq!(key.state, transition.after);
            if transition.decision.allowed {
                first.get_or_insert(now);
                admitted += i128::from(quantity);
                if let (Some(b), Some(a)) = (before, transition.after) {
                    prop_assert!(a.tat_ns() > b.tat_ns());
                }
            }
            if let Some(first) = first {
                let rate = i128::from(transition.latest_us - first) * 1000 / i128::from(p.interval_ns());
                prop_assert!(admitted <= i128::from(max_burst) + 1 + rate);
            }
        }
    }

    #[test]
    fn extremes_never_panic(
        max_burst in prop_oneof![Just(0i64), Just(i64::MAX), any::<i64>(), 0i64..1000],
        count in prop_oneof![Just(1i64), Just(i64::MAX), Just(i64::MIN), any::<i64>()],
        period in prop_oneof![Just(1i64), Just(i64::MAX), Just(-1i64), any::<i64>(), 1i64..1_000_000_000],
        quantity in prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), any::<i64>()],
        now in testing::arb_extreme_now_us(),
        tat in prop_oneof![Just(0i64), Just(MAX_TAT_NS), 0i64..=MAX_TAT_NS],
    ) {
        let Ok(p) = GcraParams::new(max_burst, count, period, quantity) else { return Ok(()) };
        prop_assert!(p.tolerance_ns() <= MAX_TOLERANCE_NS && p.interval_ns() >= 1);
        for state in [None, Gcra::from_parts(tat)] {
            let (evaluation, cell) = GcraAlgorithm::throttle(state.as_ref(), &p, now);
            assert_decision_matches(&evaluation.decision, &cell);
            prop_assert!(cell.remaining <= cell.limit);
            prop_assert!(evaluation.decision.remaining <= evaluation.decision.limit);
            let _ = cell_reply(&cell);
            for commit in [evaluation.commit, GcraAlgorithm::refund(state.as_ref(), &p, now).commit].into_iter().flatten() {
                prop_assert_eq!(Gcra::from_parts(commit.change.tat_ns()), Some(commit.change));
                prop_assert!(commit.expires_at_ms >= 1);
            }
        }
    }
}
