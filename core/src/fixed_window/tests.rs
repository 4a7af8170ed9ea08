//! Unit and property tests of the fixed window.

use super::*;
use crate::testing::{self, Driver, MS, SECOND, T0_US, window_params as params};
use crate::time::{MAX_WINDOW_US, MIN_WINDOW_US};
use crate::window::MAX_WINDOW_LIMIT;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A key driven through a sequence of calls, as the glue would drive it.
type Key = Driver<FixedWindowAlgorithm>;

#[rustfmt::skip]
#[test]
fn counts_within_epoch_aligned_windows() {
    // 3 per second; T0 is on a second boundary.
    let p = params(3, SECOND, 1);
    let mut key = Key::default();
    let cases: &[testing::Reply] = &[
        // (now offset µs, allowed, remaining, retry_after_ms, reset_after_ms)
        (0,                      true,  2, 0,    1000),
        (400 * MS,               true,  1, 0,    600),
        (999 * MS,               true,  0, 0,    1),
        (999 * MS + 1,           false, 0, 1,    1),
        (SECOND,                 true,  2, 0,    1000),
        (SECOND + 1,             true,  1, 0,    1000),
        (SECOND + 2,             true,  0, 0,    1000),
        (SECOND + 250 * MS,      false, 0, 750,  750),
        (SECOND + 250 * MS + 1,  false, 0, 750,  750),
        (5 * SECOND + 999 * MS,  true,  2, 0,    1),
    ];
    testing::assert_replies(&mut key, &p, 3, cases);
}

#[test]
fn windows_reset_on_the_epoch_grid() {
    // A minute window resets at the whole minute, whenever the first call came.
    let p = params(1, 60 * SECOND, 1);
    let mut key = Key::default();
    let first = T0_US + 59 * SECOND;
    assert!(key.call(&p, first).allowed);
    let d = key.call(&p, first + 500 * MS);
    assert_eq!((d.allowed, d.retry), (false, Retry::AfterMs(500)));
    assert_eq!(key.expires_at_ms, Some((T0_US + 60 * SECOND) / MS));
    assert!(key.call(&p, T0_US + 60 * SECOND).allowed);
    // A day window resets at midnight UTC: T0 is 22:14:00.
    let day = params(1, 86_400 * SECOND, 1);
    let d = FixedWindowAlgorithm::evaluate(None, &day, T0_US).decision;
    assert_eq!(d.reset_after_ms, ((86_400 - 80_040) * SECOND / MS) as u64);
}

#[test]
fn cost_above_limit_is_never_admitted_and_writes_nothing() {
    let p = params(5, SECOND, 6);
    testing::assert_six_of_five_is_never_admitted::<FixedWindowAlgorithm>(&p);
    let state = FixedWindow::from_parts(T0_US, 2).unwrap();
    let evaluation = FixedWindowAlgorithm::evaluate(Some(&state), &p, T0_US + MS);
    assert_eq!(evaluation.decision.reply_fields(), [0, 3, -1, 999, 5]);
    let huge = params(5, SECOND, u64::MAX);
    assert_eq!(
        FixedWindowAlgorithm::evaluate(Some(&state), &huge, T0_US)
            .decision
            .retry,
        Retry::Never
    );
}

#[test]
fn expiry_is_the_end_of_the_window_rounded_up() {
    let p = params(10, 1_500, 4); // windows of 1.5 ms: ends fall between milliseconds
    let at = T0_US + 100; // in the window [T0, T0 + 1500)
    let evaluation = FixedWindowAlgorithm::evaluate(None, &p, at);
    assert_eq!(evaluation.decision.reply_fields(), [1, 6, 0, 2, 10]);
    let commit = evaluation.commit.unwrap();
    assert_eq!(commit.change, FixedWindow::from_parts(T0_US, 4).unwrap());
    assert_eq!(
        commit.expires_at_ms,
        T0_US / MS + 2,
        "1.5 ms rounds up to 2"
    );
}

#[test]
fn clock_going_backwards_keeps_counting_in_the_stored_window() {
    let p = params(2, SECOND, 1);
    let mut key = Key::default();
    assert!(key.call(&p, T0_US + 10 * SECOND).allowed);
    let stored = key.state.unwrap();
    // An hour back: still the stored window, with its count.
    let d = key.call(&p, T0_US - 3600 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert_eq!(
        key.state.unwrap().window_start_us(),
        stored.window_start_us(),
        "not rewound"
    );
    let d = key.call(&p, T0_US - 3600 * SECOND);
    assert!(!d.allowed);
    // Until the stored window is over, however far back the clock went.
    assert_eq!(d.retry, Retry::AfterMs(3611 * 1000));
    assert!(key.call(&p, T0_US + 11 * SECOND).allowed);
}

#[test]
fn a_changed_window_keeps_the_count_only_inside_the_current_window() {
    let mut key = Key::default();
    let second = params(5, SECOND, 2);
    assert!(key.call(&second, T0_US + 30 * SECOND).allowed); // 2 in [T0+30 s, T0+31 s)
    // Growing to a minute: those 2 units lie in the current minute, so they count, and
    // the stored start moves to the minute's start.
    let minute = params(5, 60 * SECOND, 2);
    let d = key.call(&minute, T0_US + 30 * SECOND + 500 * MS);
    assert_eq!(
        (d.allowed, d.remaining, d.reset_after_ms),
        (true, 1, 29_500)
    );
    assert_eq!(key.state.unwrap().window_start_us(), T0_US);
    // Shrinking back to a second: the minute's units cannot be placed in the current
    // second, so they are forgotten.
    let d = key.call(&second, T0_US + 40 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 3));
}

#[test]
fn a_changed_limit_applies_to_the_stored_count() {
    let mut key = Key::default();
    assert!(key.call(&params(10, SECOND, 6), T0_US).allowed);
    let d = key.call(&params(5, SECOND, 1), T0_US);
    assert_eq!(
        (d.allowed, d.remaining, d.retry),
        (false, 0, Retry::AfterMs(1000))
    );
    let d = key.call(&params(8, SECOND, 1), T0_US);
    assert_eq!((d.allowed, d.remaining), (true, 1));
}

#[test]
fn refund_gives_back_units_of_the_window_that_still_counts() {
    let p = params(10, SECOND, 3);
    let nothing = FixedWindowAlgorithm::refund(None, &p, T0_US);
    assert!(
        nothing.commit.is_none(),
        "a missing window has nothing to give back"
    );
    assert_eq!(nothing.decision.reply_fields(), [0, 10, 0, 0, 10]);
    let mut key = Key::default();
    key.call(&p, T0_US); // 7 left
    key.call(&p, T0_US); // 4 left
    let d = key.refund(&p, T0_US + 100 * MS);
    assert_eq!(d.reply_fields(), [1, 7, 0, 900, 10]);
    let d = key.refund(&params(10, SECOND, 5), T0_US + 100 * MS);
    assert_eq!(
        d.reply_fields(),
        [1, 10, 0, 0, 10],
        "saturates at an empty window"
    );
    assert_eq!(key.state.unwrap().count(), 0);
    assert_eq!(
        key.expires_at_ms,
        Some(T0_US / MS + 100),
        "empty: expires at once"
    );
    key.state = FixedWindow::from_parts(T0_US, 1);
    key.expires_at_ms = None;
    let d = key.refund(&p, T0_US + SECOND);
    assert!(!d.allowed, "the window is over: nothing to give back");
    assert_eq!(
        key.state,
        FixedWindow::from_parts(T0_US, 1),
        "nothing written"
    );
    // Over a lowered limit, a refund gives back but the same call still waits.
    key.state = FixedWindow::from_parts(T0_US, 10);
    let d = key.refund(&params(5, SECOND, 3), T0_US + 200 * MS);
    assert_eq!(d.reply_fields(), [1, 0, 800, 800, 5]);
    let d = FixedWindowAlgorithm::refund(key.state.as_ref(), &params(10, SECOND, 12), T0_US);
    assert_eq!(d.decision.retry, Retry::Never);
}

#[test]
fn decoding_refuses_unreachable_states() {
    assert!(FixedWindow::from_parts(-1, 1).is_none());
    assert!(FixedWindow::from_parts(MAX_NOW_US + 1, 1).is_none());
    assert!(FixedWindow::from_parts(i64::MIN, 1).is_none());
    assert!(FixedWindow::from_parts(i64::MAX, 1).is_none());
    let state = FixedWindow::from_parts(T0_US, u32::MAX).unwrap();
    assert_eq!((state.window_start_us(), state.count()), (T0_US, u32::MAX));
    assert!(FixedWindow::from_parts(0, 0).is_some());
    assert!(FixedWindow::from_parts(MAX_NOW_US, 0).is_some());
}

#[test]
fn state_is_sixteen_bytes() {
    assert_eq!(std::mem::size_of::<FixedWindow>(), 16);
    assert_eq!(std::mem::align_of::<FixedWindow>(), 8);
}

/// An independent model: units admitted per window index, never forgotten.
struct PerWindow {
    window: i64,
    used: BTreeMap<i64, u64>,
}

impl PerWindow {
    fn call(&mut self, limit: u64, cost: u64, now_us: i64) -> (bool, u64) {
        let used = self.used.entry(now_us.div_euclid(self.window)).or_insert(0);
        let allowed = *used + cost <= limit;
        if allowed {
            *used += cost;
        }
        (allowed, limit.saturating_sub(*used))
    }
}

proptest! {
    #[test]
    fn matches_the_per_window_model((limit, window) in testing::arb_window_params(), calls in testing::arb_window_calls()) {
        let mut model = PerWindow { window, used: BTreeMap::new() };
        testing::check_matches_window_model::<FixedWindowAlgorithm>((limit, window), &calls, |limit, cost, now| {
            model.call(limit, cost, now)
        })?;
    }

    #[test]
    fn never_admits_more_than_the_limit_per_window_or_twice_per_interval(
        (limit, window) in testing::arb_window_params(),
        calls in testing::arb_window_calls(),
    ) {
        let steps = testing::window_steps(limit, window, &calls);
        let admitted = testing::admitted::<FixedWindowAlgorithm>(&steps, WindowParams::cost);
        let per_window = testing::per_aligned_window(&admitted, window);
        prop_assert!(per_window.values().all(|&used| used <= limit));
        prop_assert!(testing::densest(&admitted, window) <= 2 * limit);
    }

    #[test]
    fn waiting_retry_after_is_enough_and_necessary((limit, window) in testing::arb_window_params(), calls in testing::arb_window_calls()) {
        let steps = testing::window_steps(limit, window, &calls);
        let decisions = testing::check_retry_after_is_honest::<FixedWindowAlgorithm>(&steps)?;
        for (step, decision) in steps.iter().zip(decisions) {
            if let Retry::AfterMs(wait_ms) = decision.retry {
                // The true earliest instant is the next window's start.
                let now = step.now_us;
                let next_window = (now.div_euclid(window) + 1) * window;
                prop_assert_eq!(wait_ms as i64 * MS, (next_window - now + MS - 1) / MS * MS);
            }
        }
    }

    #[test]
    fn has_the_properties_of_every_windowed_limiter(
        (limit, window) in testing::arb_window_params(),
        calls in testing::arb_window_calls(),
        jumps in testing::arb_window_jumps(),
    ) {
        // Unused: the window holding the count is over.
        testing::check_windowed_limiter::<FixedWindowAlgorithm>((limit, window), &calls, &jumps, |state| {
            (state.window_start_us(), u64::from(state.count()))
        })?;
    }

    #[test]
    fn extremes_never_overflow(
        limit in 1u64..=MAX_WINDOW_LIMIT,
        window in MIN_WINDOW_US..=MAX_WINDOW_US,
        cost in prop_oneof![1u64..=u64::MAX, Just(u64::MAX)],
        now in testing::arb_extreme_now_us(),
        start in prop_oneof![Just(0i64), Just(MAX_NOW_US), any::<i64>()],
        count in any::<u32>(),
    ) {
        let p = WindowParams::new(limit, window, cost).unwrap();
        let state = FixedWindow::from_parts(start, count);
        testing::check_extremes::<FixedWindowAlgorithm>(state.as_ref(), &p, now, limit, |change| {
            FixedWindow::from_parts(change.window_start_us(), change.count()).is_some()
        })?;
    }
}
