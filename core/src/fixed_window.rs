//! Fixed window: at most `limit` units in each epoch-aligned window of `window_us`.
//!
//! # Windows
//!
//! Window `k` is `[k × W, (k + 1) × W)` in Unix microseconds (see [`window_start_us`]): a
//! 60 s window resets at every whole minute, a 86400 s window at midnight UTC. Every node,
//! replica and client derives the same boundaries from the clock alone, so a client can
//! predict the reset and a failover does not shift it.
//!
//! # Representation
//!
//! The state is the start of the window its count belongs to, and the units admitted in
//! that window (16 bytes). A stored window that is over counts as empty, so nothing is ever
//! reset in place: the key expires when its window ends, which is exactly when it becomes
//! indistinguishable from a missing key.
//!
//! # Precision
//!
//! Exact: instants are integer microseconds and counts integers, and every decision is one
//! comparison, `count + cost ≤ limit`. Each aligned window admits at most `limit` units.
//! The price of fixed windows is the boundary burst: `limit` units in the last microsecond
//! of one window and `limit` more in the first microsecond of the next, so `W` consecutive
//! microseconds can hold up to `2 × limit`, and that bound is attained. The sliding window
//! counter ([`super::sliding_window`]) smooths it out for the same 16 bytes.
//!
//! # Clock
//!
//! `now` comes from the server and is clamped to `[0, MAX_NOW_US]`. If it steps back into
//! an earlier window, the stored window is kept and keeps counting (the conservative
//! choice: the units it holds were admitted, so they are not forgotten) and its start is
//! never moved back. A clock that goes back never admits more than the latest clock would.
//!
//! # Changing parameters
//!
//! A new `limit` applies at once to the stored count (a lowered limit can leave nothing
//! remaining until the window ends). A new `window` maps the stored start onto the new grid:
//! the count is kept if and only if the new-size window holding the stored start is the
//! current one (or a later one, when the clock went back). Those units were admitted between
//! the stored start and now, so they all lie in the current window and keeping them is
//! exact. Otherwise the count is forgotten: a window change can thus forget units admitted
//! in the current window under the old size (at most one old window's count), but never
//! counts units from outside it. The stored start is then re-aligned to the new grid.

use super::decision::{
    Algorithm, CallCost, Commit, Decision, Evaluation, Retry, change_is_the_new_state,
};
use super::facts::Recovery;
use super::time::{MAX_NOW_US, ceil_ms_from_us, expiry_ms_from_us, window_start_us};
use super::window::WindowParams;

/// What a fixed window stores between calls: 16 bytes (the `u32` leaves 4 bytes of padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    window_start_us: i64,
    count: u32,
}

impl FixedWindow {
    /// Rebuilds a stored state, refusing values no evaluation can produce (corrupt or forged
    /// payloads): the start must lie in `[0, MAX_NOW_US]`, where clamped clocks put it.
    ///
    /// Any count is accepted: every `u32` is reachable with a large enough limit, and 0 is
    /// what a refund of everything leaves (the key then expires at once).
    pub fn from_parts(window_start_us: i64, count: u32) -> Option<Self> {
        (0..=MAX_NOW_US).contains(&window_start_us).then_some(Self {
            window_start_us,
            count,
        })
    }

    /// Unix microseconds at which the window holding the count starts.
    pub fn window_start_us(&self) -> i64 {
        self.window_start_us
    }

    /// Units admitted in that window.
    pub fn count(&self) -> u32 {
        self.count
    }
}

/// A fixed window seen at one instant, in i128 microseconds.
///
/// Bounds: `now ≤ MAX_NOW_US < 2^53`, `window ≤ MAX_WINDOW_US < 2^52`, so no sum below can
/// overflow; the saturating operations only say so.
struct View {
    now: i128,
    /// Start of the window the count belongs to: the current window, or a later one when
    /// the clock went back.
    start: i128,
    window: i128,
    /// Units admitted in that window (0 for a missing or stale state).
    count: u64,
}

impl View {
    fn new(state: Option<&FixedWindow>, params: &WindowParams, now_us: i64) -> View {
        let now_us = now_us.clamp(0, MAX_NOW_US);
        let current = window_start_us(now_us, params.window_us());
        let (start, count) = match state {
            Some(stored) => {
                // The new-size window holding the stored start (itself, if the size is
                // unchanged); it still counts unless the clock has moved past it.
                let stored_start = window_start_us(stored.window_start_us, params.window_us());
                if stored_start >= current {
                    (stored_start, u64::from(stored.count))
                } else {
                    (current, 0)
                }
            }
            None => (current, 0),
        };
        View {
            now: i128::from(now_us),
            start: i128::from(start),
            window: i128::from(params.window_us()),
            count,
        }
    }

    /// The first instant (µs) at which the counted window is over.
    fn end(&self) -> i128 {
        self.start.saturating_add(self.window)
    }

    /// When a call of `params.cost()` is admitted, with `count` units used.
    fn retry(&self, params: &WindowParams, count: u64) -> Retry {
        if params.cost() > params.limit() {
            Retry::Never
        } else if count.saturating_add(params.cost()) <= params.limit() {
            Retry::Now
        } else {
            // Nothing but the end of the window frees units.
            Retry::AfterMs(ceil_ms_from_us(self.end().saturating_sub(self.now)).max(1))
        }
    }

    fn decision(&self, params: &WindowParams, allowed: bool, count: u64, retry: Retry) -> Decision {
        let reset_after_ms = if count == 0 {
            0
        } else {
            ceil_ms_from_us(self.end().saturating_sub(self.now))
        };
        Decision {
            allowed,
            remaining: params.limit().saturating_sub(count),
            retry,
            reset_after_ms,
            limit: params.limit(),
        }
    }

    /// The state to store with `count` units used, expiring when the window ends (at once
    /// when the count is 0: such a state is already indistinguishable from a missing one).
    fn commit(&self, count: u64) -> Commit<FixedWindow> {
        let state = FixedWindow {
            window_start_us: i64::try_from(self.start).unwrap_or(MAX_NOW_US),
            // Never truncates: counts never exceed the limit, and limits fit a u32.
            count: u32::try_from(count).unwrap_or(u32::MAX),
        };
        let expires_at_ms = if count == 0 {
            expiry_ms_from_us(self.now)
        } else {
            expiry_ms_from_us(self.end())
        };
        Commit {
            change: state,
            expires_at_ms,
        }
    }
}

/// The fixed window algorithm (`RL.FIXED`).
pub struct FixedWindowAlgorithm;

impl Algorithm for FixedWindowAlgorithm {
    type Params = WindowParams;
    type State = FixedWindow;
    type Change = FixedWindow;

    fn evaluate(
        state: Option<&FixedWindow>,
        params: &WindowParams,
        now_us: i64,
    ) -> Evaluation<FixedWindow> {
        let view = View::new(state, params, now_us);
        match view.retry(params, view.count) {
            Retry::Now => {
                let count = view.count.saturating_add(params.cost());
                Evaluation {
                    decision: view.decision(params, true, count, Retry::Now),
                    commit: Some(view.commit(count)),
                }
            }
            denied => Evaluation {
                decision: view.decision(params, false, view.count, denied),
                commit: None,
            },
        }
    }

    /// Gives back up to `cost` units of the window that still counts; a missing or stale
    /// state has nothing to give back.
    fn refund(
        state: Option<&FixedWindow>,
        params: &WindowParams,
        now_us: i64,
    ) -> Evaluation<FixedWindow> {
        let view = View::new(state, params, now_us);
        let count = view.count.saturating_sub(params.cost());
        let refunded = count < view.count;
        let retry = view.retry(params, count);
        Evaluation {
            decision: view.decision(params, refunded, count, retry),
            commit: refunded.then(|| view.commit(count)),
        }
    }

    /// What is left of the limit in the window that counts, up to `up_to`: O(1).
    fn grantable(
        state: Option<&FixedWindow>,
        params: &WindowParams,
        up_to: u64,
        now_us: i64,
    ) -> u64 {
        let view = View::new(state, params, now_us);
        params.limit().saturating_sub(view.count).min(up_to)
    }

    /// All units come back when the window ends.
    fn recovery(_params: &WindowParams) -> Recovery {
        Recovery::AtReset
    }

    change_is_the_new_state!(FixedWindow);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
