//! Unit and property tests of the sliding window.

use super::*;
use crate::testing::{self, Driver, MS, SECOND, T0_US, window_params as params};
use crate::time::{MAX_WINDOW_US, MIN_WINDOW_US};
use crate::window::{MAX_WINDOW_LIMIT, WindowParamError};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn state(start: i64, previous: u32, current: u32) -> Option<SlidingWindow> {
    SlidingWindow::from_parts(start, previous, current)
}

/// A key driven through a sequence of calls, as the glue would drive it.
type Key = Driver<SlidingWindowAlgorithm>;

#[rustfmt::skip]
#[test]
fn weights_the_previous_window_by_its_overlap() {
    // 10 per second; T0 is on a second boundary.
    let p = params(10, SECOND, 1);
    let mut key = Key::default();
    for _ in 0..10 {
        assert!(key.call(&p, T0_US + 900 * MS).allowed);
    }
    let cases: &[(i64, u64, bool, u64, i64, u64)] = &[
        // (now offset µs, cost, allowed, remaining, retry_after_ms, reset_after_ms)
        (999 * MS,            1, false, 0, 101,  1001),  // full until 10 × 0.9 + 1 ≤ 10
        (SECOND,              1, false, 0, 100,  1000),  // 10 × 1.0 + 0
        (SECOND + 100 * MS,   1, true,  0, 0,    1900),  // 10 × 0.9 + 1 = 10
        (SECOND + 100 * MS,   1, false, 0, 100,  1900),  // 9 + 1 + 1 until 8 + 1 + 1
        (SECOND + 250 * MS,   1, true,  0, 0,    1750),  // 7.5 + 2 = 9.5: floor(0.5) left
        (SECOND + 250 * MS,   1, false, 0, 50,   1750),  // 7.5 + 3 > 10 until 7 + 3
        (SECOND + 500 * MS,   3, true,  0, 0,    1500),  // 5 + 5 = 10
        (SECOND + 600 * MS,   2, false, 1, 100,  1400),  // 4 + 5 = 9; 2 fit at 3 + 5 + 2
        (2 * SECOND,          5, true,  0, 0,    2000),  // 5 × 1.0 + 5 = 10
        (2 * SECOND + 1,      1, false, 0, 200,  2000),  // 5 × 0.8 + 5 + 1 = 10
        (2 * SECOND + 1,     10, false, 0, 2000, 2000),  // 10 fit only when nothing counts
        (4 * SECOND,         10, true,  0, 0,    2000),  // two windows on
    ];
    for &(offset, cost, allowed, remaining, retry, reset) in cases {
        let d = key.call(&params(10, SECOND, cost), T0_US + offset);
        assert_eq!(
            d.reply_fields(),
            [i64::from(allowed), remaining as i64, retry, reset as i64, 10],
            "at +{offset}µs, cost {cost}"
        );
    }
}

#[test]
fn retry_is_the_exact_earliest_microsecond() {
    // 3 in the previous window, 1 in this one, limit 4, cost 1: admitted once
    // 3 × (W − e) ≤ 2 × W, i.e. e ≥ W / 3 = 333,333.33 µs, so at e = 333,334 µs.
    let p = params(4, SECOND, 1);
    let s = state(T0_US, 3, 1);
    let at = |offset: i64| SlidingWindowAlgorithm::evaluate(s.as_ref(), &p, T0_US + offset);
    assert!(!at(333_333).decision.allowed);
    assert!(at(333_334).decision.allowed);
    assert_eq!(at(0).decision.retry, Retry::AfterMs(334));
    assert_eq!(at(333_000).decision.retry, Retry::AfterMs(1));
    // Not in this window: 1 + 4 > 4. In the next, 1 × (W − e) ≤ 0 × W only at its end.
    let whole = params(4, SECOND, 4);
    let d = SlidingWindowAlgorithm::evaluate(s.as_ref(), &whole, T0_US + 10);
    assert_eq!(d.decision.retry, Retry::AfterMs(2000));
    // With 3 in the current window and cost 2: the next window, once 3 × (W − e) ≤ 2 × W.
    let s = state(T0_US, 0, 3);
    let d = SlidingWindowAlgorithm::evaluate(s.as_ref(), &params(4, SECOND, 2), T0_US + 10);
    assert_eq!(d.decision.retry, Retry::AfterMs(1334));
}

#[test]
fn cost_above_limit_is_never_admitted_and_writes_nothing() {
    testing::assert_six_of_five_is_never_admitted::<SlidingWindowAlgorithm>(&params(5, SECOND, 6));
    let huge = params(5, SECOND, u64::MAX);
    let evaluation = SlidingWindowAlgorithm::evaluate(state(T0_US, 4, 1).as_ref(), &huge, T0_US);
    assert_eq!(evaluation.decision.reply_fields(), [0, 0, -1, 2000, 5]);
}

#[test]
fn expires_when_the_estimate_reaches_zero() {
    let p = params(10, 1_500, 4); // windows of 1.5 ms: ends fall between milliseconds
    let evaluation = SlidingWindowAlgorithm::evaluate(None, &p, T0_US + 100);
    assert_eq!(evaluation.decision.reply_fields(), [1, 6, 0, 3, 10]);
    let commit = evaluation.commit.unwrap();
    assert_eq!(Some(commit.change), state(T0_US, 0, 4));
    assert_eq!(
        commit.expires_at_ms,
        T0_US / MS + 3,
        "the end of the next window"
    );
    // Only a previous window left: the end of the current one.
    let d = SlidingWindowAlgorithm::evaluate(
        state(T0_US, 0, 4).as_ref(),
        &params(10, 1_500, 10),
        T0_US + 1_600,
    );
    assert_eq!(d.decision.reply_fields(), [0, 6, 2, 2, 10]); // 4 × 1400/1500 + 10 > 10
}

#[test]
fn clock_going_backwards_weights_the_previous_window_fully() {
    let p = params(10, SECOND, 1);
    let s = state(T0_US + 10 * SECOND, 8, 1);
    let d = SlidingWindowAlgorithm::evaluate(s.as_ref(), &p, T0_US + 10 * SECOND + 500 * MS);
    assert_eq!(
        d.decision.remaining, 4,
        "4 + 2 = 6 at the stored window's middle"
    );
    // An hour back: judged at the stored window's start, where 8 + 1 + 1 = 10.
    let d = SlidingWindowAlgorithm::evaluate(s.as_ref(), &p, T0_US - 3600 * SECOND);
    assert_eq!((d.decision.allowed, d.decision.remaining), (true, 0));
    let commit = d.commit.unwrap();
    assert_eq!(
        Some(commit.change),
        state(T0_US + 10 * SECOND, 8, 2),
        "not rewound"
    );
    let d = SlidingWindowAlgorithm::evaluate(Some(&commit.change), &p, T0_US - 3600 * SECOND);
    assert!(!d.decision.allowed);
    // Admitted once 8 × (W − e) ≤ 7 × W in the stored window: an hour and 125 ms on.
    assert_eq!(d.decision.retry, Retry::AfterMs(3_610_125));
    assert_eq!(d.decision.reset_after_ms, 3_612_000);
}

#[test]
fn a_changed_window_realigns_the_counts() {
    let mut key = Key::default();
    let second = params(10, SECOND, 4);
    assert!(key.call(&second, T0_US + 30 * SECOND).allowed);
    assert!(key.call(&second, T0_US + 31 * SECOND).allowed); // (prev 4, cur 4) at +31 s
    // Growing to a minute: the counts are placed in the minute holding +31 s, the current
    // one, so the previous 4 weigh (60 − 31.5) / 60 and the current 4 in full.
    let minute = params(10, 60 * SECOND, 1);
    let d = key.call(&minute, T0_US + 31 * SECOND + 500 * MS);
    assert_eq!((d.allowed, d.remaining), (true, 3)); // 10 − (1.9 + 5)
    assert_eq!(key.state, state(T0_US, 4, 5), "re-aligned on the minute");
    // Shrinking back to a second: the minute's counts are more than a second old.
    let d = key.call(&second, T0_US + 40 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 6));
}

#[test]
fn refund_takes_from_current_then_previous() {
    let p = params(10, SECOND, 3);
    let nothing = SlidingWindowAlgorithm::refund(None, &p, T0_US);
    assert!(
        nothing.commit.is_none(),
        "a missing counter has nothing to give back"
    );
    assert_eq!(nothing.decision.reply_fields(), [0, 10, 0, 0, 10]);
    let mut key = Key {
        state: state(T0_US, 4, 2),
        expires_at_ms: None,
    };
    let d = key.refund(&p, T0_US + 500 * MS); // 2 from current, 1 from previous
    assert_eq!(key.state, state(T0_US, 3, 0));
    assert_eq!(d.reply_fields(), [1, 8, 0, 500, 10]); // 10 − 3 × 0.5
    assert_eq!(
        key.expires_at_ms,
        Some(T0_US / MS + 1000),
        "only a previous window left"
    );
    let d = key.refund(&params(10, SECOND, 50), T0_US + 500 * MS);
    assert_eq!(d.reply_fields(), [1, 10, -1, 0, 10]);
    assert_eq!(key.state, state(T0_US, 0, 0));
    assert_eq!(
        key.expires_at_ms,
        Some(T0_US / MS + 500),
        "empty: expires at once"
    );
    // Rolled out entirely: nothing to give back, nothing written.
    let key_state = state(T0_US, 4, 2);
    let stale = SlidingWindowAlgorithm::refund(key_state.as_ref(), &p, T0_US + 2 * SECOND);
    assert!(!stale.decision.allowed && stale.commit.is_none());
    // One window on, `current` has become the previous window and is refunded from.
    let rolled = SlidingWindowAlgorithm::refund(key_state.as_ref(), &p, T0_US + SECOND);
    assert_eq!(
        rolled.commit.unwrap().change,
        state(T0_US + SECOND, 0, 0).unwrap()
    );
}

#[test]
fn the_worst_case_interval_is_attained() {
    // L units in the last microsecond of a window, then L − ⌈2L/W⌉ one microsecond
    // before the end of the next: 2L − ⌈2L/W⌉ units within W consecutive microseconds.
    for (limit, window) in [(100u64, SECOND), (1_000, 1_000), (7, 1_500), (3, 1_000)] {
        let mut key = Key::default();
        let first = T0_US + window - 1;
        assert!(key.call(&params(limit, window, limit), first).allowed);
        let burst = limit - (2 * limit).div_ceil(window as u64);
        let second = T0_US + 2 * window - 2;
        if burst > 0 {
            assert!(!key.call(&params(limit, window, burst + 1), second).allowed);
            assert!(key.call(&params(limit, window, burst), second).allowed);
        }
        assert!(second - first < window);
        assert_eq!(
            limit + burst,
            2 * limit - (2 * limit).div_ceil(window as u64)
        );
    }
}

#[test]
fn back_loaded_traffic_can_exceed_an_exact_log() {
    // Why the conservative bound needs front-loaded traffic: 10 units at the very end of
    // a window still fill an exact log 500 ms later, but weigh only 5 in the estimate.
    let mut key = Key::default();
    assert!(
        key.call(&params(10, SECOND, 10), T0_US + SECOND - 1)
            .allowed
    );
    assert!(
        key.call(&params(10, SECOND, 5), T0_US + SECOND + 500 * MS)
            .allowed
    );
}

#[test]
fn parameters_are_shared_with_the_fixed_window() {
    assert_eq!(
        WindowParams::new(MAX_WINDOW_LIMIT + 1, SECOND as u64, 1),
        Err(WindowParamError::LimitTooLarge)
    );
    assert!(WindowParams::new(MAX_WINDOW_LIMIT, MAX_WINDOW_US, u64::MAX).is_ok());
}

#[test]
fn decoding_refuses_unreachable_states() {
    assert!(SlidingWindow::from_parts(-1, 0, 1).is_none());
    assert!(SlidingWindow::from_parts(MAX_NOW_US + 1, 0, 1).is_none());
    assert!(SlidingWindow::from_parts(i64::MIN, 0, 0).is_none());
    let s = SlidingWindow::from_parts(T0_US, 7, u32::MAX).unwrap();
    assert_eq!(
        (s.window_start_us(), s.previous(), s.current()),
        (T0_US, 7, u32::MAX)
    );
    assert!(SlidingWindow::from_parts(0, 0, 0).is_some());
    assert!(SlidingWindow::from_parts(MAX_NOW_US, u32::MAX, u32::MAX).is_some());
}

#[test]
fn state_is_sixteen_bytes() {
    assert_eq!(std::mem::size_of::<SlidingWindow>(), 16);
    assert_eq!(std::mem::align_of::<SlidingWindow>(), 8);
}

/// An independent model: units admitted per window index, never forgotten, with the
/// estimate computed from the two windows around `now` (for non-decreasing time).
struct PerWindow {
    window: i64,
    used: BTreeMap<i64, u64>,
}

impl PerWindow {
    fn used(&self, index: i64) -> i128 {
        i128::from(self.used.get(&index).copied().unwrap_or(0))
    }

    /// `(admitted, remaining)` for a call of `cost` at `now_us`, without recording it.
    fn peek(&self, limit: u64, cost: u64, now_us: i64) -> (bool, u64) {
        let (w, index) = (i128::from(self.window), now_us.div_euclid(self.window));
        let e = i128::from(now_us.rem_euclid(self.window));
        let weighted = self.used(index - 1) * (w - e) + self.used(index) * w;
        let budget = i128::from(limit) * w;
        let allowed = weighted + i128::from(cost) * w <= budget;
        let after = if allowed {
            weighted + i128::from(cost) * w
        } else {
            weighted
        };
        (allowed, ((budget - after).div_euclid(w)).max(0) as u64)
    }

    fn call(&mut self, limit: u64, cost: u64, now_us: i64) -> (bool, u64) {
        let (allowed, remaining) = self.peek(limit, cost, now_us);
        if allowed {
            *self.used.entry(now_us.div_euclid(self.window)).or_insert(0) += cost;
        }
        (allowed, remaining)
    }

    /// The first microsecond ≥ `now_us` at which the model admits `cost`, by bisection
    /// (admission only becomes easier as time passes without traffic).
    fn earliest(&self, limit: u64, cost: u64, now_us: i64) -> i64 {
        let (mut low, mut high) = (now_us, now_us + 2 * self.window);
        assert!(self.peek(limit, cost, high).0);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.peek(limit, cost, middle).0 {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        low
    }
}

proptest! {
    #[test]
    fn matches_the_per_window_model((limit, window) in testing::arb_window_params(), calls in testing::arb_window_calls()) {
        let mut model = PerWindow { window, used: BTreeMap::new() };
        testing::check_matches_window_model::<SlidingWindowAlgorithm>((limit, window), &calls, |limit, cost, now| {
            model.call(limit, cost, now)
        })?;
    }

    #[test]
    fn never_admits_more_than_the_limit_per_aligned_window(
        (limit, window) in testing::arb_window_params(),
        calls in testing::arb_window_calls(),
    ) {
        let steps = testing::window_steps(limit, window, &calls);
        let admitted = testing::admitted::<SlidingWindowAlgorithm>(&steps, WindowParams::cost);
        let per_window = testing::per_aligned_window(&admitted, window);
        prop_assert!(per_window.values().all(|&used| used <= limit));
    }

    #[test]
    fn never_admits_more_than_the_proven_bound_per_interval(
        (limit, window) in testing::arb_window_params(),
        calls in testing::arb_window_calls(),
    ) {
        // Any W consecutive microseconds hold at most 2L − ⌈2L/W⌉ < 2L admitted units.
        let bound = 2 * limit - (2 * limit).div_ceil(window as u64);
        let steps = testing::window_steps(limit, window, &calls);
        let admitted = testing::admitted::<SlidingWindowAlgorithm>(&steps, WindowParams::cost);
        let densest = testing::densest(&admitted, window);
        prop_assert!(densest <= bound, "{} > {}", densest, bound);
    }

    #[test]
    fn front_loaded_previous_window_never_admits_what_an_exact_log_denies(
        (limit, window) in testing::arb_window_params(),
        calls in prop::collection::vec(
            (prop_oneof![Just(None), (0u64..1_000).prop_map(Some)], 0u64..2, 0u64..1_200),
            1..60,
        ),
    ) {
        // Calls land at window starts (`None`) or at an offset in ‰ of the window, one or
        // zero windows later, so the previous window is often front-loaded. Whenever it
        // is, for the instant of the call, an admitted call fits in an exact log too.
        let mut key = Key::default();
        let mut admitted: Vec<(i64, u64)> = Vec::new();
        let mut now = T0_US;
        for (offset, windows_on, per_mille) in calls {
            let base = (now.div_euclid(window) + windows_on as i64) * window;
            let next = base + offset.map_or(0, |o| testing::share(window as u64, o) as i64);
            now = now.max(next);
            let cost = testing::cost_of(limit, per_mille);
            let (k, e) = (now.div_euclid(window), now.rem_euclid(window));
            let previous: Vec<_> = admitted.iter().filter(|(at, _)| at.div_euclid(window) == k - 1).collect();
            let p: u64 = previous.iter().map(|(_, c)| c).sum();
            let in_log = |from: i64| -> u64 {
                admitted.iter().filter(|(at, _)| *at > from && *at <= now).map(|(_, c)| c).sum()
            };
            // Front-loaded at e: the previous window's units still inside (now − W, now]
            // are at most p × (W − e) / W.
            let tail: u64 = previous.iter().filter(|(at, _)| at.rem_euclid(window) > e).map(|(_, c)| c).sum();
            let front_loaded = u128::from(tail) * window as u128 <= u128::from(p) * (window - e) as u128;
            if key.call(&params(limit, window, cost), now).allowed {
                if front_loaded {
                    prop_assert!(in_log(now - window) + cost <= limit);
                }
                admitted.push((now, cost));
            }
        }
    }

    #[test]
    fn evenly_spread_traffic_is_estimated_almost_exactly(
        (limit, window) in testing::arb_window_params(),
        units in 1u64..2_000,
        e_per_mille in 0u64..1_000,
    ) {
        // p units at offsets ⌊j × W / p⌋ of the previous window; the estimate exceeds
        // the exact trailing count by less than 1 + p / W.
        let p = units.min(limit);
        let start = T0_US.div_euclid(window) * window;
        let mut key = Key::default();
        for j in 0..p as i128 {
            let offset = (j * window as i128 / p as i128) as i64;
            prop_assert!(key.call(&params(limit, window, 1), start + offset).allowed);
        }
        let e = testing::share(window as u64, e_per_mille) as i64;
        let now = start + window + e;
        let view = View::new(key.state.as_ref(), &params(limit, window, 1), now);
        let estimate_w = view.weighted(view.previous, view.current); // estimate × W
        let exact = (0..p as i128).filter(|j| (j * window as i128 / p as i128) as i64 > e).count() as i128;
        let w = i128::from(window);
        prop_assert!(estimate_w >= exact * w);
        prop_assert!(estimate_w < (exact + 1) * w + p as i128);
    }

    #[test]
    fn retry_after_is_the_true_earliest_instant((limit, window) in testing::arb_window_params(), calls in testing::arb_window_calls()) {
        let steps = testing::window_steps(limit, window, &calls);
        let decisions = testing::check_retry_after_is_honest::<SlidingWindowAlgorithm>(&steps)?;
        let mut model = PerWindow { window, used: BTreeMap::new() };
        for (step, decision) in steps.iter().zip(decisions) {
            let (cost, now) = (step.params.cost(), step.now_us);
            model.call(limit, cost, now);
            if let Retry::AfterMs(wait_ms) = decision.retry {
                // The closed form agrees with a search over every microsecond.
                let earliest = model.earliest(limit, cost, now);
                prop_assert_eq!(wait_ms as i64 * MS, (earliest - now + MS - 1) / MS * MS);
            }
        }
    }

    #[test]
    fn has_the_properties_of_every_windowed_limiter(
        (limit, window) in testing::arb_window_params(),
        calls in testing::arb_window_calls(),
        jumps in testing::arb_window_jumps(),
    ) {
        // Unused: the estimate is zero.
        testing::check_windowed_limiter::<SlidingWindowAlgorithm>((limit, window), &calls, &jumps, |state| {
            (state.window_start_us(), u64::from(state.current()))
        })?;
    }

    #[test]
    fn extremes_never_overflow(
        limit in 1u64..=MAX_WINDOW_LIMIT,
        window in MIN_WINDOW_US..=MAX_WINDOW_US,
        cost in prop_oneof![1u64..=u64::MAX, 1u64..=MAX_WINDOW_LIMIT, Just(u64::MAX)],
        now in testing::arb_extreme_now_us(),
        start in prop_oneof![Just(0i64), Just(MAX_NOW_US), any::<i64>()],
        previous in prop_oneof![Just(u32::MAX), any::<u32>()],
        current in prop_oneof![Just(u32::MAX), any::<u32>()],
    ) {
        let p = WindowParams::new(limit, window, cost).unwrap();
        let state = SlidingWindow::from_parts(start, previous, current);
        let evaluations = testing::check_extremes::<SlidingWindowAlgorithm>(state.as_ref(), &p, now, limit, |change| {
            SlidingWindow::from_parts(change.window_start_us(), change.previous(), change.current()).is_some()
        })?;
        for evaluation in evaluations {
            prop_assert_eq!(evaluation.decision.retry == Retry::Never, cost > limit);
        }
    }
}
