//! Sliding window counter: a fixed window's 16 bytes, without most of its boundary burst.
//!
//! # Estimate
//!
//! Windows are epoch-aligned as in [`super::fixed_window`]. At `e` microseconds into the
//! current window (`0 ≤ e < W`), the units used in the trailing `W` microseconds are
//! estimated by assuming the previous window's `p` units were spread evenly over it:
//!
//! ```text
//! estimate = p × (W − e) / W + c        (c: units admitted in the current window)
//! ```
//!
//! A call of `cost` is admitted iff `estimate + cost ≤ limit`, decided exactly in integers
//! as `p × (W − e) + (c + cost) × W ≤ limit × W` (i128; no rounding anywhere). The estimate
//! never increases while time passes, so every denied call has a true earliest instant at
//! which it would be admitted: `retry` is that instant, found in closed form (the smallest
//! `e` solving the inequality in this window, else in the next one, where `p' = c`, `c' = 0`),
//! rounded up to the millisecond.
//!
//! # Representation
//!
//! One state, 16 bytes: the start of the window `current` belongs to, plus `previous` and
//! `current` counts (a Lua version needs two keys). Rolling forward is a pure function of
//! the clock: one window later `previous := current, current := 0`; two or more, both 0. The
//! estimate is 0 from the end of the window after the last admitted unit's window on, and the
//! key expires exactly then.
//!
//! # Error against an exact sliding window
//!
//! Compare with an exact sliding log, which admits at `t` iff the units it admitted in
//! `(t − W, t]` plus the cost fit in the limit. For a fixed limit `L` and window `W` (µs),
//! with the clock not going backwards (all proven below and tested with random traffic):
//!
//! - **Aligned windows**: each epoch-aligned window admits at most `L` units, like a fixed
//!   window (the estimate includes `c` in full).
//! - **Any window**: any `W` consecutive microseconds admit at most `2L − ⌈2L / W⌉` units,
//!   and this is attained (`L` units in the last microsecond of a window, then
//!   `L − ⌈2L / W⌉` one microsecond before the end of the next). Proof: such an interval
//!   starting `a` µs into window `k` (`1 ≤ a < W`, else it is one aligned window) holds at
//!   most the `n ≤ L` units of window `k`, plus those admitted in window `k + 1` up to its
//!   last admission at some `e ≤ a − 1 ≤ W − 2`, which satisfy `h ≤ L − n × (W − e) / W ≤
//!   L − 2n / W`; `h` is an integer, so the total is at most `n + L − ⌈2n / W⌉`, which never
//!   decreases as `n` grows and is `2L − ⌈2L / W⌉` at `n = L`. A fixed window allows `2L`; an
//!   exact log `L`.
//! - **When it is conservative**: at `t`, `e` into window `k`, if the previous window's units
//!   are front-loaded — at most `p × (W − e) / W` of them lie at offsets after `e`, the part
//!   still inside `(t − W, t]` — the estimate is at least the exact count, so the counter
//!   never admits a call an exact log over the same admitted history would deny. In
//!   particular this holds whenever all of the previous window's traffic came in its first
//!   microsecond, or was evenly spaced from its start.
//! - **When it is exact**: with the previous window's `p` units evenly spaced from its start
//!   (unit `j` at offset `⌊j × W / p⌋`), the estimate exceeds the exact count by less than
//!   `1 + p / W` units (less than 2 when `p ≤ W`): up to rounding, the counter is then the
//!   exact sliding window. It is most permissive when the previous window's traffic came at
//!   its very end, which is where the excess over `L` above comes from.
//!
//! # Clock
//!
//! `now` is clamped to `[0, MAX_NOW_US]`. If it steps back before the stored window, the
//! call is judged as if at the stored window's start (`e = 0`: the previous window at full
//! weight, the most conservative point of that window), and the stored start is never moved
//! back. As the estimate never increases with time, an earlier clock never admits more than
//! the latest one.
//!
//! # Changing parameters
//!
//! A new `limit` applies at once. A new `window` maps the stored start onto the new grid:
//! the counts are attributed to the new-size window holding the stored start (the stored
//! start itself when the size is unchanged) and roll forward from there, so windows are
//! always aligned to the current size. The stored start can then move back, by less than one
//! new window; only a changed window does that, never the clock.

use super::decision::{
    Algorithm, CallCost, Commit, Decision, Evaluation, Retry, change_is_the_new_state,
};
use super::time::{MAX_NOW_US, ceil_div, ceil_ms_from_us, expiry_ms_from_us, window_start_us};

use super::window::WindowParams;

/// What a sliding window counter stores between calls: 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    window_start_us: i64,
    previous: u32,
    current: u32,
}

impl SlidingWindow {
    /// Rebuilds a stored state, refusing values no evaluation can produce (corrupt or forged
    /// payloads): the start must lie in `[0, MAX_NOW_US]`, where clamped clocks put it.
    ///
    /// Any counts are accepted: every `u32` is reachable with a large enough limit, and
    /// zeros are what refunds leave.
    pub fn from_parts(window_start_us: i64, previous: u32, current: u32) -> Option<Self> {
        (0..=MAX_NOW_US).contains(&window_start_us).then_some(Self {
            window_start_us,
            previous,
            current,
        })
    }

    /// Unix microseconds at which the window holding `current` starts.
    pub fn window_start_us(&self) -> i64 {
        self.window_start_us
    }

    /// Units admitted in the window before that one.
    pub fn previous(&self) -> u32 {
        self.previous
    }

    /// Units admitted in the window starting at [`Self::window_start_us`].
    pub fn current(&self) -> u32 {
        self.current
    }
}

/// The smallest `e ≥ 0` with `weight × (W − e) ≤ room × W`, for `0 ≤ room`: how far into a
/// window whose previous window held `weight` units there is room for `room` more units
/// beyond the current count. At most `W`.
fn earliest_elapsed(weight: i128, room: i128, window: i128) -> i128 {
    if weight <= room {
        return 0;
    }
    // weight × e ≥ (weight − room) × W, with weight > room ≥ 0.
    ceil_div(weight.saturating_sub(room).saturating_mul(window), weight)
}

/// A counter seen at one instant, in i128 microseconds and units.
///
/// Bounds: instants < 2^54, `W < 2^52`, counts and limit < 2^32, cost < 2^64, so every
/// product below is under 2^117; the saturating operations only say so.
struct View {
    now: i128,
    window: i128,
    /// Start of the window `current` belongs to: the current window, or a later one when
    /// the clock went back.
    start: i128,
    /// Microseconds into that window, 0 when the clock is before it.
    elapsed: i128,
    previous: u64,
    current: u64,
}

impl View {
    fn new(state: Option<&SlidingWindow>, params: &WindowParams, now_us: i64) -> View {
        let now_us = now_us.clamp(0, MAX_NOW_US);
        let window = i128::from(params.window_us());
        let current_start = i128::from(window_start_us(now_us, params.window_us()));
        let (start, previous, current) = match state {
            Some(stored) => {
                let stored_start =
                    i128::from(window_start_us(stored.window_start_us, params.window_us()));
                let (previous, current) = (u64::from(stored.previous), u64::from(stored.current));
                if stored_start >= current_start {
                    (stored_start, previous, current)
                } else if stored_start.saturating_add(window) == current_start {
                    (current_start, current, 0)
                } else {
                    (current_start, 0, 0)
                }
            }
            None => (current_start, 0, 0),
        };
        let now = i128::from(now_us);
        View {
            now,
            window,
            start,
            elapsed: now.saturating_sub(start).max(0),
            previous,
            current,
        }
    }

    /// `estimate × W` for these counts at this instant.
    fn weighted(&self, previous: u64, current: u64) -> i128 {
        let previous_weight = self.window.saturating_sub(self.elapsed);
        i128::from(previous)
            .saturating_mul(previous_weight)
            .saturating_add(i128::from(current).saturating_mul(self.window))
    }

    fn limit_weighted(&self, params: &WindowParams) -> i128 {
        i128::from(params.limit()).saturating_mul(self.window)
    }

    /// Whether a call of `params.cost` fits: `estimate + cost ≤ limit`, times `W`. (A cost
    /// that saturates the addition is far above any limit, and still refused.)
    fn admits(&self, params: &WindowParams, previous: u64, current: u64) -> bool {
        let with_cost = current.saturating_add(params.cost());
        self.weighted(previous, with_cost) <= self.limit_weighted(params)
    }

    /// The earliest instant (µs) at which a call of `params.cost` is admitted with these
    /// counts, if no other call comes first; `None` if never (the cost exceeds the limit).
    fn admitted_at(&self, params: &WindowParams, previous: u64, current: u64) -> Option<i128> {
        if params.cost() > params.limit() {
            return None;
        }
        let limit = i128::from(params.limit());
        let cost = i128::from(params.cost());
        let window = self.window;
        let room = limit
            .saturating_sub(i128::from(current))
            .saturating_sub(cost);
        if room >= 0 {
            // In this window, once the previous window's weight has shrunk enough (at e = W,
            // the start of the next window, its weight is 0 and the room suffices).
            let elapsed = earliest_elapsed(i128::from(previous), room, window);
            return Some(if elapsed <= self.elapsed {
                self.now
            } else {
                self.start.saturating_add(elapsed)
            });
        }
        // In the next window, where `current` becomes the previous window (at e = W, two
        // windows on, nothing counts and cost ≤ limit fits).
        let room = limit.saturating_sub(cost);
        let elapsed = earliest_elapsed(i128::from(current), room, window);
        Some(self.start.saturating_add(window).saturating_add(elapsed))
    }

    fn retry(&self, params: &WindowParams, previous: u64, current: u64) -> Retry {
        match self.admitted_at(params, previous, current) {
            None => Retry::Never,
            Some(at) if at <= self.now => Retry::Now,
            Some(at) => Retry::AfterMs(ceil_ms_from_us(at.saturating_sub(self.now)).max(1)),
        }
    }

    /// The instant (µs) from which the estimate is 0 for good, if it is not already.
    fn empty_at(&self, previous: u64, current: u64) -> Option<i128> {
        if current > 0 {
            Some(self.start.saturating_add(self.window.saturating_mul(2)))
        } else if previous > 0 {
            Some(self.start.saturating_add(self.window))
        } else {
            None
        }
    }

    /// Whole units that still fit under the limit with these counts: the largest `k` with
    /// `estimate + k ≤ limit`, i.e. `⌊(limit × W − estimate × W) / W⌋`, or 0. At most the
    /// limit.
    fn room(&self, params: &WindowParams, previous: u64, current: u64) -> u64 {
        let left = self
            .limit_weighted(params)
            .saturating_sub(self.weighted(previous, current));
        u64::try_from(left.div_euclid(self.window).max(0)).unwrap_or(u64::MAX)
    }

    fn decision(
        &self,
        params: &WindowParams,
        allowed: bool,
        previous: u64,
        current: u64,
        retry: Retry,
    ) -> Decision {
        let reset_after_ms = self
            .empty_at(previous, current)
            .map_or(0, |at| ceil_ms_from_us(at.saturating_sub(self.now)));
        Decision {
            allowed,
            remaining: self.room(params, previous, current),
            retry,
            reset_after_ms,
            limit: params.limit(),
        }
    }

    /// The state to store with these counts, expiring when the estimate reaches 0 for good
    /// (at once when it already is: such a state is indistinguishable from a missing one).
    fn commit(&self, previous: u64, current: u64) -> Commit<SlidingWindow> {
        let state = SlidingWindow {
            window_start_us: i64::try_from(self.start).unwrap_or(MAX_NOW_US),
            // Never truncate: counts only shrink, or grow up to the limit, which fits a u32.
            previous: u32::try_from(previous).unwrap_or(u32::MAX),
            current: u32::try_from(current).unwrap_or(u32::MAX),
        };
        let expires_at_ms = expiry_ms_from_us(self.empty_at(previous, current).unwrap_or(self.now));
        Commit {
            change: state,
            expires_at_ms,
        }
    }
}

/// The sliding window counter algorithm (`RL.SLIDING`).
pub struct SlidingWindowAlgorithm;

impl Algorithm for SlidingWindowAlgorithm {
    type Params = WindowParams;
    type State = SlidingWindow;
    type Change = SlidingWindow;

    fn evaluate(
        state: Option<&SlidingWindow>,
        params: &WindowParams,
        now_us: i64,
    ) -> Evaluation<SlidingWindow> {
        let view = View::new(state, params, now_us);
        let (previous, current) = (view.previous, view.current);
        if params.cost() <= params.limit() && view.admits(params, previous, current) {
            let current = current.saturating_add(params.cost());
            Evaluation {
                decision: view.decision(params, true, previous, current, Retry::Now),
                commit: Some(view.commit(previous, current)),
            }
        } else {
            let retry = view.retry(params, previous, current);
            Evaluation {
                decision: view.decision(params, false, previous, current, retry),
                commit: None,
            }
        }
    }

    /// Gives back `cost` units: from the current window first, the rest from the previous
    /// one, each saturating at 0. A missing state, or one whose counts have all rolled out,
    /// has nothing to give back.
    fn refund(
        state: Option<&SlidingWindow>,
        params: &WindowParams,
        now_us: i64,
    ) -> Evaluation<SlidingWindow> {
        let view = View::new(state, params, now_us);
        let from_current = view.current.min(params.cost());
        let current = view.current.saturating_sub(from_current);
        let previous = view
            .previous
            .saturating_sub(params.cost().saturating_sub(from_current));
        let refunded = current < view.current || previous < view.previous;
        let retry = view.retry(params, previous, current);
        Evaluation {
            decision: view.decision(params, refunded, previous, current, retry),
            commit: refunded.then(|| view.commit(previous, current)),
        }
    }

    /// The units that fit under the estimate now, up to `up_to`: O(1).
    fn grantable(
        state: Option<&SlidingWindow>,
        params: &WindowParams,
        up_to: u64,
        now_us: i64,
    ) -> u64 {
        let view = View::new(state, params, now_us);
        view.room(params, view.previous, view.current).min(up_to)
    }

    change_is_the_new_state!(SlidingWindow);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
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
        let p = params(5, SECOND, 6);
        let evaluation = SlidingWindowAlgorithm::evaluate(None, &p, T0_US);
        assert_eq!(evaluation.decision.reply_fields(), [0, 5, -1, 0, 5]);
        assert!(evaluation.commit.is_none());
        let huge = params(5, SECOND, u64::MAX);
        let evaluation =
            SlidingWindowAlgorithm::evaluate(state(T0_US, 4, 1).as_ref(), &huge, T0_US);
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
            let mut key = Key::default();
            let mut model = PerWindow { window, used: BTreeMap::new() };
            for step in testing::window_steps(limit, window, &calls) {
                let (cost, now) = (step.params.cost(), step.now_us);
                let decision = key.call(&step.params, now);
                prop_assert_eq!((decision.allowed, decision.remaining), model.call(limit, cost, now));
                prop_assert_eq!(decision.retry == Retry::Never, cost > limit);
            }
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
}
