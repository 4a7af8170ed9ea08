//! Sliding log: the exact sliding window, for contracts that cannot tolerate approximation.
//!
//! A call of `cost` units at `now` is admitted iff the units admitted in the half-open
//! interval `(now − window, now]`, plus `cost`, do not exceed `limit`. A unit admitted at `t`
//! therefore counts until `t + window` exclusive and has left the window at exactly
//! `t + window`.
//!
//! # Representation
//!
//! The state is the log itself: one `i64` timestamp (Unix µs) **per admitted unit**, oldest
//! first, in a ring buffer (`VecDeque<i64>`), plus `as_of`, the latest instant a change was
//! computed at (see *Clock*). A call of cost 5 pushes five equal timestamps. Packing
//! `(timestamp, count)` pairs into the same 8 bytes would save memory for costly calls, but
//! the two questions every evaluation asks — "how many units are in the window" and "when
//! does the k-th oldest of them leave" — would then need a scan or a prefix-sum structure;
//! with one entry per unit they are a binary search and an index:
//!
//! ```text
//! start      = number of entries with t ≤ at − window   (partition_point, O(log n))
//! in window  = len − start
//! k-th oldest unit in the window = entries[start + k − 1]  (O(1))
//! ```
//!
//! Timestamps never depend on the window or the limit, so both may change between calls on
//! the same key: each call simply re-evaluates the stored timestamps with its own parameters
//! (see *Parameter changes*).
//!
//! # Cost per call
//!
//! - [`SlidingLogAlgorithm::evaluate`] and [`SlidingLogAlgorithm::refund`] only read: a
//!   binary search over the stored timestamps, O(log n), never linear in the number of
//!   expired entries, no allocation. Denied calls and peeks stop there.
//! - [`SlidingLogAlgorithm::apply`] drops the expired entries from the front of the ring
//!   buffer (O(1) for `i64`: the head moves) and pushes `cost` entries (O(cost)), or drops
//!   the refunded entries from the back (O(1)). Reallocations are amortised O(1) per entry
//!   pushed or dropped (see *Memory*).
//!
//! # Memory
//!
//! Exactly 8 bytes per stored entry, plus a fixed header of [`SlidingLog::HEADER_BYTES`]
//! (40 on 64-bit targets: the ring buffer's pointer, capacity, head and length, and `as_of`;
//! 8-byte aligned). After every [`apply`](SlidingLogAlgorithm::apply),
//! [`create`](SlidingLogAlgorithm::create) and [`SlidingLog::from_entries`], the buffer's
//! capacity is at most `2 × len + 8` entries: growth doubles the capacity only when the
//! entries no longer fit (so it stays below `2 × len`), and when the capacity exceeds
//! `2 × len + 8` the buffer is shrunk to `1.5 × len + 4`. After a shrink, at least a quarter
//! of the entries must be dropped, or half as many pushed, before the next reallocation, so
//! reallocation copies are amortised O(1) per entry. [`SlidingLog::allocated_bytes`] reports
//! header plus capacity.
//!
//! After an admitted call every stored entry is in the window (the expired ones are dropped
//! by the same change), and the window holds at most `limit` units, so a log never stores
//! more than the largest `limit` used on it, which is bounded by the server setting
//! `ratelimit.max-log-entries` (at most [`MAX_STORED_ENTRIES`]). Entries that expire while no
//! call is admitted stay stored until the next admitted call or refund, or until the key
//! expires, which it does exactly when the newest entry leaves the window.
//!
//! # Clock
//!
//! `now` comes from the server, clamped to `[0, MAX_NOW_US]`. The log remembers `as_of`, the
//! latest instant any change (admission or refund) was computed at; it is never below a
//! stored timestamp. A call is evaluated at `at = max(now, as_of)`: if the clock stepped
//! back, the call is decided as if made at `as_of`, where every stored entry counts, so it
//! never sees more room than at any later instant; an admitted call is recorded at `at`, so
//! timestamps stay sorted and never move back, and the recorded instants form an exact log
//! even across backward steps. (The newest timestamp alone would not do: a refund can remove
//! the newest entries after an admission dropped entries that had expired relative to them;
//! a clock then stepping back would reopen room those dropped entries still occupied.)
//! Durations the client is told (`retry_after_ms`, `reset_after_ms`) are measured from the
//! real `now`, so they stay exact: a call at `now + retry_after` is admitted even though the
//! clock was behind.
//!
//! # Parameter changes
//!
//! The limit is only compared against, so lowering it below the units in the window simply
//! denies calls (with an exact retry) until enough units have left. The window is applied to
//! the stored timestamps at each call: widening it brings back into the count any stored
//! entry that falls in the wider window, but an admitted call drops the entries expired
//! under *its* window for good, and the key's expiry follows the window of the last admitted
//! call (or refund). A later, wider window therefore never counts units that an earlier,
//! narrower window already forgot.
//!
//! # Replication
//!
//! What an admitted call or refund changes is a [`SlidingLogChange`]: a few integers
//! ("at `at_us`, drop the `expired` oldest entries, then push `units` entries" or "... then
//! drop the `units` newest entries"), not the log. Applying the same change to identical
//! logs yields identical logs; applying it to a log that does not match (a diverged replica)
//! saturates instead of panicking and keeps the log sorted and bounded.

use std::collections::VecDeque;
use std::iter;
use std::mem::size_of;
use std::ops::Deref;
use std::time::Duration;

use super::decision::{Algorithm, CallCost, Commit, Decision, Evaluation, Retry};
use super::facts::{QuotaFacts, Recovery};
use super::time::{MAX_NOW_US, ceil_ms_from_us, expiry_ms_from_us};
use super::window::WindowParams;

/// Most entries a log ever stores, and the largest value `ratelimit.max-log-entries` may take.
pub const MAX_STORED_ENTRIES: u64 = 10_000_000;

/// The default of `ratelimit.max-log-entries` (the module's setting; the Functions library's
/// fixed bound): the largest sliding log limit a server accepts unless configured otherwise.
pub const DEFAULT_MAX_LOG_ENTRIES: u64 = 10_000;

/// [`MAX_STORED_ENTRIES`] as a length.
const MAX_LEN: usize = 10_000_000;

/// Capacity slack (in entries) allowed on top of twice the length, so small logs do not
/// reallocate on every call.
const SLACK: usize = 8;

/// Why sliding log parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingLogParamError {
    /// A window shorter than [`MIN_WINDOW_US`](super::time::MIN_WINDOW_US).
    WindowTooShort,
    /// A window longer than [`MAX_WINDOW_US`](super::time::MAX_WINDOW_US).
    WindowTooLong,
    /// A limit above the server's `ratelimit.max-log-entries`.
    LimitAboveMaxEntries {
        /// The largest limit accepted (the setting, capped at [`MAX_STORED_ENTRIES`]).
        max_entries: u64,
    },
}

/// Validated parameters of one sliding log call: a window's parameters, read through [`Deref`]
/// ([`limit`](WindowParams::limit), [`window_us`](WindowParams::window_us),
/// [`cost`](WindowParams::cost)), whose limit is bounded by the server's
/// `ratelimit.max-log-entries` rather than by
/// [`MAX_WINDOW_LIMIT`](super::window::MAX_WINDOW_LIMIT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingLogParams(WindowParams);

impl SlidingLogParams {
    /// Validates at most `limit` (≥ 1) units per sliding window of `window_us` microseconds,
    /// for a call costing `cost` (≥ 1) units, on a server whose `ratelimit.max-log-entries`
    /// is `max_entries` (values above [`MAX_STORED_ENTRIES`] are capped to it).
    ///
    /// A cost above the limit is valid: such a call is always denied and writes nothing.
    /// Zero limits and costs are read as 1 (the argument parser refuses them).
    pub fn new(
        limit: u64,
        window_us: u64,
        cost: u64,
        max_entries: u64,
    ) -> Result<Self, SlidingLogParamError> {
        let params = WindowParams::with_window_checked(
            limit,
            window_us,
            cost,
            SlidingLogParamError::WindowTooShort,
            SlidingLogParamError::WindowTooLong,
        )?;
        let max_entries = max_entries.clamp(1, MAX_STORED_ENTRIES);
        if limit > max_entries {
            return Err(SlidingLogParamError::LimitAboveMaxEntries { max_entries });
        }
        Ok(Self(params))
    }
}

impl CallCost for SlidingLogParams {
    fn cost(&self) -> u64 {
        self.0.cost()
    }

    fn with_cost(&self, cost: u64) -> Self {
        Self(self.0.with_cost(cost))
    }
}

impl QuotaFacts for SlidingLogParams {
    fn advertised_quota(&self) -> u64 {
        self.0.advertised_quota()
    }

    fn window(&self) -> Duration {
        self.0.window()
    }

    /// A window's share: a smaller limit stays within the server's setting.
    fn share(&self, replicas: u64) -> Option<Self> {
        self.0.share(replicas).map(Self)
    }
}

impl Deref for SlidingLogParams {
    type Target = WindowParams;

    fn deref(&self) -> &WindowParams {
        &self.0
    }
}

/// What a sliding log stores between calls: the timestamp (Unix µs) of every admitted unit
/// still stored, oldest first, and the latest instant a change was computed at.
///
/// Invariants (kept by every constructor and by [`SlidingLogAlgorithm::apply`]): timestamps
/// are non-decreasing, within `[0, as_of]`, and `as_of` within `[0, MAX_NOW_US]`; there are
/// at most [`MAX_STORED_ENTRIES`] entries, and the capacity is at most `2 × len + 8`.
#[repr(align(8))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    entries: VecDeque<i64>,
    as_of_us: i64,
}

impl SlidingLog {
    /// Bytes of the fixed part of a log, wherever it is stored.
    pub const HEADER_BYTES: usize = size_of::<SlidingLog>();

    /// Rebuilds a stored log (decoding RDB, `RESTORE` or replicated payloads) from its
    /// [`as_of_us`](Self::as_of_us) and `len` timestamps, refusing what no evaluation can
    /// produce: `as_of_us` outside `[0, MAX_NOW_US]`, more than [`MAX_STORED_ENTRIES`]
    /// entries, an iterator that yields fewer or more than `len`, timestamps outside
    /// `[0, as_of_us]`, or timestamps out of order.
    ///
    /// The buffer is reserved with `try_reserve_exact` after the length check, so a forged
    /// length can neither exceed the bound nor abort the process on allocation failure.
    pub fn from_entries<I: IntoIterator<Item = i64>>(
        as_of_us: i64,
        len: u64,
        entries: I,
    ) -> Option<Self> {
        if !(0..=MAX_NOW_US).contains(&as_of_us) || len > MAX_STORED_ENTRIES {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let mut log = VecDeque::new();
        log.try_reserve_exact(len).ok()?;
        let mut entries = entries.into_iter();
        let mut previous = 0;
        for _ in 0..len {
            let at = entries.next()?;
            if at < previous || at > as_of_us {
                return None;
            }
            log.push_back(at);
            previous = at;
        }
        if entries.next().is_some() {
            return None;
        }
        Some(Self {
            entries: log,
            as_of_us,
        })
    }

    /// The stored timestamps (Unix µs), oldest first: what an encoder writes and
    /// [`from_entries`](Self::from_entries) reads back.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = i64> + DoubleEndedIterator + '_ {
        self.entries.iter().copied()
    }

    /// The latest instant (Unix µs) a change to this log was computed at: calls made
    /// earlier are evaluated at this instant instead (see the module documentation).
    pub fn as_of_us(&self) -> i64 {
        self.as_of_us
    }

    /// Number of stored entries (units), including any that have expired since the last
    /// change.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log stores no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest stored timestamp, if any.
    pub fn newest_us(&self) -> Option<i64> {
        self.entries.back().copied()
    }

    /// Bytes this log occupies: the header plus the buffer's capacity, for `MEMORY USAGE`.
    pub fn allocated_bytes(&self) -> usize {
        self.entries
            .capacity()
            .saturating_mul(size_of::<i64>())
            .saturating_add(Self::HEADER_BYTES)
    }

    fn drop_oldest(&mut self, count: usize) {
        let count = count.min(self.entries.len());
        self.entries.drain(..count);
    }

    fn drop_newest(&mut self, count: usize) {
        self.entries
            .truncate(self.entries.len().saturating_sub(count));
    }

    /// Pushes `units` entries at `as_of` (never below a stored timestamp), never beyond
    /// [`MAX_STORED_ENTRIES`] entries in total.
    fn push(&mut self, units: u32) {
        let room = MAX_LEN.saturating_sub(self.entries.len());
        let units = usize::try_from(units).unwrap_or(usize::MAX).min(room);
        self.entries.extend(iter::repeat_n(self.as_of_us, units));
    }

    /// Shrinks the buffer to `1.5 × len + 4` when its capacity exceeds `2 × len + 8`.
    fn trim_slack(&mut self) {
        let len = self.entries.len();
        if self.entries.capacity() > len.saturating_mul(2).saturating_add(SLACK) {
            let target = len.saturating_add(len / 2).saturating_add(SLACK / 2);
            self.entries.shrink_to(target);
        }
    }
}

/// What a change does after dropping the expired entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingLogAction {
    /// Push `units` entries at the change's instant (an admitted call).
    Admit {
        /// Units admitted, in `1..=MAX_STORED_ENTRIES`.
        units: u32,
    },
    /// Drop the `units` newest entries (a refund).
    Refund {
        /// Units given back, in `1..=MAX_STORED_ENTRIES`.
        units: u32,
    },
}

/// How an admitted call or a refund changes a log: what is stored and replicated, a few
/// integers rather than the log.
///
/// Applying it raises the log's `as_of` to `at_us`, drops the `expired` oldest entries, then
/// performs the action. Every value of this type has passed [`SlidingLogChange::new`]'s
/// validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLogChange {
    at_us: i64,
    expired: u32,
    action: SlidingLogAction,
}

impl SlidingLogChange {
    /// Validates a change (as decoded from a replicated payload): `at_us` within
    /// `[0, MAX_NOW_US]`, `expired` at most [`MAX_STORED_ENTRIES`], the action's `units` in
    /// `1..=MAX_STORED_ENTRIES`.
    pub fn new(at_us: i64, expired: u32, action: SlidingLogAction) -> Option<Self> {
        let units = match action {
            SlidingLogAction::Admit { units } | SlidingLogAction::Refund { units } => units,
        };
        let valid = (0..=MAX_NOW_US).contains(&at_us)
            && u64::from(expired) <= MAX_STORED_ENTRIES
            && (1..=MAX_STORED_ENTRIES).contains(&u64::from(units));
        valid.then_some(Self {
            at_us,
            expired,
            action,
        })
    }

    /// Unix µs the change was computed at; admitted units are recorded at this instant.
    pub fn at_us(&self) -> i64 {
        self.at_us
    }

    /// Oldest entries to drop before the action (those that left the window).
    pub fn expired(&self) -> u32 {
        self.expired
    }

    /// What to do once the expired entries are dropped.
    pub fn action(&self) -> SlidingLogAction {
        self.action
    }
}

/// The log a missing key stands for.
static EMPTY: VecDeque<i64> = VecDeque::new();

/// A log seen by one call at one instant.
///
/// Bounds: every timestamp and `now` lie in `[0, MAX_NOW_US]` (< 2^53) and the window is at
/// most [`MAX_WINDOW_US`](super::time::MAX_WINDOW_US) (< 2^52), so no sum below can overflow
/// an `i64`; the saturating operations only say so.
struct View<'a> {
    entries: &'a VecDeque<i64>,
    /// The clamped clock.
    now: i64,
    window: i64,
    /// The instant the call is evaluated and recorded at: `max(now, as_of)`.
    at: i64,
    /// Index of the oldest entry in the window `(at − window, at]`; also the number of
    /// expired entries.
    start: usize,
}

impl<'a> View<'a> {
    fn new(state: Option<&'a SlidingLog>, params: &SlidingLogParams, now_us: i64) -> Self {
        let entries = state.map_or(&EMPTY, |log| &log.entries);
        let now = now_us.clamp(0, MAX_NOW_US);
        let at = state.map_or(now, |log| log.as_of_us.max(now));
        // At most MAX_WINDOW_US, so the conversion cannot fail.
        let window = i64::try_from(params.window_us()).unwrap_or(i64::MAX);
        let cutoff = at.saturating_sub(window);
        let start = entries.partition_point(|&t| t <= cutoff);
        View {
            entries,
            now,
            window,
            at,
            start,
        }
    }

    /// Units in the window.
    fn in_window(&self) -> u64 {
        let count = self.entries.len().saturating_sub(self.start);
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// A change made by this call.
    fn change(&self, action: SlidingLogAction) -> SlidingLogChange {
        SlidingLogChange {
            at_us: self.at,
            expired: u32::try_from(self.start).unwrap_or(u32::MAX),
            action,
        }
    }

    /// Timestamp of the `k`-th oldest unit in the window (1-based).
    fn nth_in_window(&self, k: u64) -> Option<i64> {
        let index = usize::try_from(k)
            .ok()?
            .checked_sub(1)?
            .checked_add(self.start)?;
        self.entries.get(index).copied()
    }

    /// Milliseconds (rounded up) from now until a unit stored at `t` leaves the window.
    fn ms_until_gone(&self, t: i64) -> u64 {
        ceil_ms_from_us(t.saturating_add(self.window).saturating_sub(self.now))
    }

    /// When a call of `params.cost()` is admitted, with `in_window` units (the oldest of those
    /// currently in the window) still there.
    ///
    /// The oldest `needed = in_window + cost − limit` units must leave, the needed-th oldest
    /// last. A call at `now + d` is decided at `max(now + d, as_of)`, and that unit is in the
    /// window at `as_of`, so it leaves exactly when `now + d` reaches its departure.
    fn retry(&self, params: &SlidingLogParams, in_window: u64) -> Retry {
        if params.cost() > params.limit() {
            return Retry::Never;
        }
        let needed = in_window
            .saturating_add(params.cost())
            .saturating_sub(params.limit());
        if needed == 0 {
            return Retry::Now;
        }
        // needed ≤ in_window because cost ≤ limit; the fallback (everything has left) is
        // unreachable and only errs on the side of waiting.
        let last_to_leave = self.nth_in_window(needed).unwrap_or(self.at);
        Retry::AfterMs(self.ms_until_gone(last_to_leave).max(1))
    }

    /// The decision for a log holding (in its window) its `in_window` oldest units.
    fn decision(&self, params: &SlidingLogParams, allowed: bool, in_window: u64) -> Decision {
        Decision {
            allowed,
            remaining: params.limit().saturating_sub(in_window),
            retry: self.retry(params, in_window),
            reset_after_ms: self
                .nth_in_window(in_window)
                .map_or(0, |newest| self.ms_until_gone(newest)),
            limit: params.limit(),
        }
    }
}

/// The sliding log algorithm.
pub struct SlidingLogAlgorithm;

impl Algorithm for SlidingLogAlgorithm {
    type Params = SlidingLogParams;
    type State = SlidingLog;
    type Change = SlidingLogChange;

    fn evaluate(
        state: Option<&SlidingLog>,
        params: &SlidingLogParams,
        now_us: i64,
    ) -> Evaluation<SlidingLogChange> {
        let view = View::new(state, params, now_us);
        let in_window = view.in_window();
        let admitted = params.cost() <= params.limit()
            && in_window.saturating_add(params.cost()) <= params.limit();
        if !admitted {
            return Evaluation {
                decision: view.decision(params, false, in_window),
                commit: None,
            };
        }
        // cost ≤ limit ≤ MAX_STORED_ENTRIES, so the conversion cannot fail.
        let units = u32::try_from(params.cost()).unwrap_or(u32::MAX);
        Evaluation {
            decision: Decision {
                allowed: true,
                remaining: params
                    .limit()
                    .saturating_sub(in_window.saturating_add(params.cost())),
                retry: Retry::Now,
                reset_after_ms: view.ms_until_gone(view.at),
                limit: params.limit(),
            },
            commit: Some(Commit {
                change: view.change(SlidingLogAction::Admit { units }),
                expires_at_ms: expiry_ms_from_us(view.at.saturating_add(view.window)),
            }),
        }
    }

    /// Removes the `cost` newest units in the window (fewer if the window holds fewer). A
    /// refund that empties the log expires at the instant it was computed at: from then on
    /// the log is indistinguishable from a missing key.
    fn refund(
        state: Option<&SlidingLog>,
        params: &SlidingLogParams,
        now_us: i64,
    ) -> Evaluation<SlidingLogChange> {
        let view = View::new(state, params, now_us);
        let in_window = view.in_window();
        let given_back = params.cost().min(in_window);
        let after = in_window.saturating_sub(given_back);
        let decision = view.decision(params, given_back > 0, after);
        let commit = u32::try_from(given_back)
            .ok()
            .filter(|&units| units > 0)
            .map(|units| Commit {
                change: view.change(SlidingLogAction::Refund { units }),
                expires_at_ms: expiry_ms_from_us(
                    view.nth_in_window(after)
                        .map_or(view.at, |newest| newest.saturating_add(view.window)),
                ),
            });
        Evaluation { decision, commit }
    }

    /// What is left of the limit in the window, up to `up_to`: one binary search, O(log n).
    fn grantable(
        state: Option<&SlidingLog>,
        params: &SlidingLogParams,
        up_to: u64,
        now_us: i64,
    ) -> u64 {
        let view = View::new(state, params, now_us);
        params.limit().saturating_sub(view.in_window()).min(up_to)
    }

    /// Raises the log's `as_of` to the change's instant, drops the change's expired entries,
    /// then pushes its units (at `as_of`) or drops its newest units; finally trims excess
    /// capacity. On a log that does not match the one the change was computed from it
    /// saturates: it drops at most what is stored, records admitted units at the log's own
    /// `as_of` if that is later than the change's instant (so the log stays sorted), and
    /// stores at most [`MAX_STORED_ENTRIES`] entries.
    /// Each unit comes back one window after it was taken.
    fn recovery(_params: &SlidingLogParams) -> Recovery {
        Recovery::Sliding
    }

    fn apply(state: &mut SlidingLog, change: SlidingLogChange) {
        state.as_of_us = state.as_of_us.max(change.at_us).clamp(0, MAX_NOW_US);
        state.drop_oldest(usize::try_from(change.expired).unwrap_or(usize::MAX));
        match change.action {
            SlidingLogAction::Admit { units } => state.push(units),
            SlidingLogAction::Refund { units } => {
                state.drop_newest(usize::try_from(units).unwrap_or(usize::MAX));
            }
        }
        state.trim_slack();
    }

    /// An empty log with the change applied (a refund leaves it empty).
    fn create(change: SlidingLogChange) -> SlidingLog {
        let mut log = SlidingLog::default();
        Self::apply(&mut log, change);
        log
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
