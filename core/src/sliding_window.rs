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
use super::facts::Recovery;
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

    /// Units come back as the window slides over the previous one.
    fn recovery(_params: &WindowParams) -> Recovery {
        Recovery::Sliding
    }

    change_is_the_new_state!(SlidingWindow);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
