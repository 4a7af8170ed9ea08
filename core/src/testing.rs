//! Test support shared by the algorithms' unit tests.
//!
//! Every algorithm is property-tested the same way: random traffic becomes a list of
//! [`Step`]s (an instant, the call's parameters, whether it is a refund), a [`Driver`] stores
//! state and expiry through them as the glue does, and the `check_*` functions verify what
//! every [`Algorithm`] promises:
//!
//! - [`check_retry_after_is_honest`]: waiting `retry_after` is enough and necessary;
//! - [`check_peeking_changes_nothing`]: evaluations that are not stored leave no trace;
//! - [`check_reset_and_expiry_are_when_unused`]: `reset_after` and the key's expiry are the
//!   instants the limiter is back to its unused state;
//! - [`check_earlier_clocks_never_see_more_room`]: a clock that goes back never admits more;
//! - [`check_refund_undoes_an_admission`] and [`check_extremes`];
//! - [`check_grantable_is_exact`]: the closed forms of [`Algorithm::grantable`] against their
//!   definition, [`bisected_grantable`];
//! - [`check_windowed_limiter`]: all of the above that the fixed and sliding windows share,
//!   over the same window traffic.
//!
//! What is specific to an algorithm (its model, bounds and representation) stays in its own
//! tests, which build the steps from their own parameters and may add assertions over what the
//! checks hand back.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::decision::{Algorithm, CallCost, Commit, Decision, Evaluation, Retry};
use super::time::MAX_NOW_US;
use super::window::{MAX_WINDOW_LIMIT, WindowParams};

/// An ordinary Unix time, in µs: 2023-11-14T22:14:00Z, a whole minute.
pub(crate) const T0_US: i64 = 1_700_000_040_000_000;
/// A millisecond, in µs.
pub(crate) const MS: i64 = 1_000;
/// A second, in µs.
pub(crate) const SECOND: i64 = 1_000_000;

/// The result of a check: `Err` is a failed property, which proptest then shrinks.
pub(crate) type Checked<T = ()> = Result<T, TestCaseError>;

/// One key driven through a sequence of calls, as the glue drives it: commits are applied to
/// the stored state (or create it) and set the key's expiry, and the key is deleted once its
/// expiry has passed.
pub(crate) struct Driver<A: Algorithm> {
    /// The stored state; `None` for a missing key.
    pub(crate) state: Option<A::State>,
    /// The key's expiry (Unix ms), as last committed.
    pub(crate) expires_at_ms: Option<i64>,
}

impl<A: Algorithm> Default for Driver<A> {
    fn default() -> Self {
        Self {
            state: None,
            expires_at_ms: None,
        }
    }
}

impl<A: Algorithm> Driver<A> {
    /// Deletes the key once its expiry has passed, as Redis does: a key whose expiry is the
    /// current millisecond still exists, and its state must already behave as a missing key.
    pub(crate) fn expire(&mut self, now_us: i64) {
        if self
            .expires_at_ms
            .is_some_and(|expiry| now_us.div_euclid(MS) > expiry)
        {
            *self = Self::default();
        }
    }

    /// Stores a commit, if any: applies its change (creating the state of a missing key) and
    /// sets the key's expiry.
    pub(crate) fn commit(&mut self, commit: Option<Commit<A::Change>>) {
        if let Some(commit) = commit {
            match &mut self.state {
                Some(state) => A::apply(state, commit.change),
                None => self.state = Some(A::create(commit.change)),
            }
            self.expires_at_ms = Some(commit.expires_at_ms);
        }
    }

    /// Stores what `evaluation` commits and returns its decision.
    pub(crate) fn store(&mut self, evaluation: Evaluation<A::Change>) -> Decision {
        self.commit(evaluation.commit);
        evaluation.decision
    }

    /// A call at `now_us`.
    pub(crate) fn call(&mut self, params: &A::Params, now_us: i64) -> Decision {
        self.expire(now_us);
        let evaluation = A::evaluate(self.state.as_ref(), params, now_us);
        self.store(evaluation)
    }

    /// A refund at `now_us`.
    pub(crate) fn refund(&mut self, params: &A::Params, now_us: i64) -> Decision {
        self.expire(now_us);
        let evaluation = A::refund(self.state.as_ref(), params, now_us);
        self.store(evaluation)
    }

    /// The call or refund `step` describes.
    pub(crate) fn step(&mut self, step: &Step<A::Params>) -> Decision {
        if step.refund {
            self.refund(&step.params, step.now_us)
        } else {
            self.call(&step.params, step.now_us)
        }
    }
}

/// A row of a reply table: now (µs after [`T0_US`]), then the reply's allowed, remaining,
/// retry_after_ms and reset_after_ms.
pub(crate) type Reply = (i64, bool, u64, i64, u64);

/// Calls `key` with `params` (whose limit is `limit`) at each row's instant: the reply must
/// be the row's, the instant named when it is not.
pub(crate) fn assert_replies<A: Algorithm>(
    key: &mut Driver<A>,
    params: &A::Params,
    limit: i64,
    rows: &[Reply],
) {
    for &(offset, allowed, remaining, retry, reset) in rows {
        assert_eq!(
            key.call(params, T0_US + offset).reply_fields(),
            [
                i64::from(allowed),
                remaining as i64,
                retry,
                reset as i64,
                limit
            ],
            "at +{offset}µs"
        );
    }
}

/// A cost of 6 against a limit of 5 (`params`) on a missing key: denied for good (retry
/// -1), 5 remaining, and nothing to write.
pub(crate) fn assert_six_of_five_is_never_admitted<A: Algorithm>(params: &A::Params) {
    let evaluation = A::evaluate(None, params, T0_US);
    assert_eq!(evaluation.decision.reply_fields(), [0, 5, -1, 0, 5]);
    assert!(evaluation.commit.is_none());
}

/// One call (or refund) of a traffic sequence.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step<P> {
    /// The server clock, Unix µs.
    pub(crate) now_us: i64,
    /// The call's parameters.
    pub(crate) params: P,
    /// A refund of the params' cost rather than a call.
    pub(crate) refund: bool,
}

/// Calls from `start_us`, each given as (µs since the previous call, its parameters).
pub(crate) fn steps<P>(start_us: i64, calls: impl IntoIterator<Item = (i64, P)>) -> Vec<Step<P>> {
    let mut now_us = start_us;
    calls
        .into_iter()
        .map(|(elapsed_us, params)| {
            now_us += elapsed_us;
            Step {
                now_us,
                params,
                refund: false,
            }
        })
        .collect()
}

/// `state` once `commit` (if any) is stored, as the driver would store it.
fn committed<A: Algorithm>(
    state: Option<A::State>,
    commit: Option<Commit<A::Change>>,
) -> Option<A::State> {
    let mut driver = Driver::<A> {
        state,
        expires_at_ms: None,
    };
    driver.commit(commit);
    driver.state
}

/// Whether a clock can show `at_us`: later clocks are clamped to [`MAX_NOW_US`], so a limiter
/// that would change after it (a state stored for up to 100 years) is never seen to.
fn observable(at_us: i64) -> bool {
    at_us <= MAX_NOW_US
}

/// A call with `params` at `now_us + retry` is admitted, and a millisecond earlier it is not.
fn assert_retry_is_exact<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    now_us: i64,
    retry: Retry,
) -> Checked {
    if let Retry::AfterMs(wait_ms) = retry {
        let on_time = now_us + wait_ms as i64 * MS;
        if !observable(on_time) {
            return Ok(());
        }
        let too_early = A::evaluate(state, params, on_time - MS);
        prop_assert!(
            !too_early.decision.allowed,
            "admitted 1 ms before retry_after"
        );
        let admitted = A::evaluate(state, params, on_time).decision.allowed;
        prop_assert!(admitted, "denied after waiting retry_after");
    }
    Ok(())
}

/// Waiting `retry_after` is enough and necessary: after every denied step, the same call is
/// admitted once `retry_after` has passed and not a millisecond earlier. The same holds for the
/// decision of a refund at that instant, which describes the limiter after the refund (the
/// refund itself is not stored). (An admitted call's `retry` is the wait before its caller
/// proceeds, which the algorithms that pace check themselves.) Instants past [`MAX_NOW_US`],
/// which no clock shows, are not checked.
/// Returns the steps' decisions, for assertions about their exact values.
pub(crate) fn check_retry_after_is_honest<A: Algorithm>(
    steps: &[Step<A::Params>],
) -> Checked<Vec<Decision>>
where
    A::State: Clone,
{
    let mut driver = Driver::<A>::default();
    let mut decisions = Vec::with_capacity(steps.len());
    for step in steps {
        let decision = driver.step(step);
        let (params, now_us) = (&step.params, step.now_us);
        // A refund's retry always says when the call is admitted.
        if step.refund || !decision.allowed {
            assert_retry_is_exact::<A>(driver.state.as_ref(), params, now_us, decision.retry)?;
        }
        let refund = A::refund(driver.state.as_ref(), params, now_us);
        let after = committed::<A>(driver.state.clone(), refund.commit);
        assert_retry_is_exact::<A>(after.as_ref(), params, now_us, refund.decision.retry)?;
        decisions.push(decision);
    }
    Ok(decisions)
}

/// Peeking between calls changes nothing: evaluating a call and a refund without storing them,
/// between two steps, leaves the state as it was, and a key peeked at decides every step
/// exactly like one that was not.
pub(crate) fn check_peeking_changes_nothing<A: Algorithm>(steps: &[Step<A::Params>]) -> Checked
where
    A::State: Clone + PartialEq + Debug,
{
    let mut plain = Driver::<A>::default();
    let mut peeked = Driver::<A>::default();
    let mut previous_us = steps.first().map_or(0, |step| step.now_us);
    for step in steps {
        let elapsed = step.now_us - previous_us;
        let before = peeked.state.clone();
        let _ = A::evaluate(
            peeked.state.as_ref(),
            &step.params,
            previous_us + elapsed / 2,
        );
        let _ = A::refund(
            peeked.state.as_ref(),
            &step.params,
            previous_us + elapsed / 3,
        );
        prop_assert_eq!(&peeked.state, &before);
        prop_assert_eq!(plain.step(step), peeked.step(step));
        previous_us = step.now_us;
    }
    Ok(())
}

/// `reset_after` and the key's expiry are when the limiter is unused again, that is when a
/// call of `drain` (one costing the whole limit) is admitted:
///
/// - after every step, at `now + reset_after` and not a millisecond earlier;
/// - after every commit, at the expiry and not a millisecond earlier, unless the state was
///   stored already unused (then it may expire at once: within the millisecond).
///
/// Instants past [`MAX_NOW_US`], which no clock shows, are not checked.
pub(crate) fn check_reset_and_expiry_are_when_unused<A: Algorithm>(
    steps: &[Step<A::Params>],
    drain: &A::Params,
) -> Checked {
    let unused =
        |state: Option<&A::State>, at_us: i64| A::evaluate(state, drain, at_us).decision.allowed;
    let mut driver = Driver::<A>::default();
    for step in steps {
        let now = step.now_us;
        driver.expire(now);
        let evaluation = if step.refund {
            A::refund(driver.state.as_ref(), &step.params, now)
        } else {
            A::evaluate(driver.state.as_ref(), &step.params, now)
        };
        let committed = evaluation.commit.is_some();
        let decision = driver.store(evaluation);
        let state = driver.state.as_ref();
        let expiry = driver.expires_at_ms.filter(|_| committed);
        if let Some(expiry_us) = expiry.map(|ms| ms * MS).filter(|&at| observable(at)) {
            prop_assert!(unused(state, expiry_us), "unused at expiry");
            if unused(state, now) {
                prop_assert!(expiry_us - now < MS, "stored unused: may go at once");
            } else {
                prop_assert!(
                    !unused(state, expiry_us - MS),
                    "still used 1 ms before expiry"
                );
            }
        }
        let reset_us = now + decision.reset_after_ms as i64 * MS;
        if !observable(reset_us) {
            continue;
        }
        prop_assert!(unused(state, reset_us), "unused at reset_after");
        if decision.reset_after_ms > 0 {
            prop_assert!(
                !unused(state, reset_us - MS),
                "still used 1 ms before reset_after"
            );
        }
    }
    Ok(())
}

/// One step of [`check_earlier_clocks_never_see_more_room`], for further assertions.
pub(crate) struct Transition<'a, A: Algorithm> {
    /// The step.
    pub(crate) step: &'a Step<A::Params>,
    /// The latest clock seen so far, this step's included.
    pub(crate) latest_us: i64,
    /// The state before the step.
    pub(crate) before: Option<A::State>,
    /// The step's decision.
    pub(crate) decision: Decision,
    /// The state after the step.
    pub(crate) after: Option<A::State>,
}

/// With a clock that goes back and forth, a call never sees more room than it would at the
/// latest clock seen so far: it is admitted only if it would be there, and with no more
/// remaining when both agree. Key expiry is left out (the state itself is under test). Returns
/// the transitions, for assertions about the algorithm's own state.
pub(crate) fn check_earlier_clocks_never_see_more_room<A: Algorithm>(
    steps: &[Step<A::Params>],
) -> Checked<Vec<Transition<'_, A>>>
where
    A::State: Clone,
{
    check_earlier_clocks_never_see_more_room_by::<A>(steps, |params| *params)
}

/// [`check_earlier_clocks_never_see_more_room`], measuring the room before each step with the
/// call `probe` makes of the step's parameters (for a limiter whose admission also depends on
/// who calls, such as a concurrency limit's renewals).
pub(crate) fn check_earlier_clocks_never_see_more_room_by<A: Algorithm>(
    steps: &[Step<A::Params>],
    probe: impl Fn(&A::Params) -> A::Params,
) -> Checked<Vec<Transition<'_, A>>>
where
    A::State: Clone,
{
    let mut driver = Driver::<A>::default();
    let mut latest_us = i64::MIN;
    let mut transitions = Vec::with_capacity(steps.len());
    for step in steps {
        latest_us = latest_us.max(step.now_us);
        driver.expires_at_ms = None;
        let before = driver.state.clone();
        let probe = probe(&step.params);
        let here = A::evaluate(before.as_ref(), &probe, step.now_us).decision;
        let latest = A::evaluate(before.as_ref(), &probe, latest_us).decision;
        prop_assert!(
            !here.allowed || latest.allowed,
            "admitted, but not at a later clock"
        );
        if here.allowed == latest.allowed {
            prop_assert!(
                here.remaining <= latest.remaining,
                "more left than at a later clock"
            );
        }
        let decision = driver.step(step);
        transitions.push(Transition {
            step,
            latest_us,
            before,
            decision,
            after: driver.state.clone(),
        });
    }
    Ok(transitions)
}

/// Refunding an admitted call undoes it: the refund gives back exactly the call's `cost`, and
/// the same call then gets exactly what it got the first time. (A call admitted with a wait
/// took units still to come, so its `remaining`, clamped at 0, cannot show what was given
/// back; the same call getting the same decision again still does.)
pub(crate) fn check_refund_undoes_an_admission<A: Algorithm>(
    steps: &[Step<A::Params>],
    cost: impl Fn(&A::Params) -> u64,
) -> Checked {
    let mut driver = Driver::<A>::default();
    for step in steps {
        let (params, now_us) = (&step.params, step.now_us);
        driver.expire(now_us);
        let before = A::evaluate(driver.state.as_ref(), params, now_us).decision;
        if driver.call(params, now_us).allowed {
            let refund = driver.refund(params, now_us);
            prop_assert!(refund.allowed);
            if before.retry == Retry::Now {
                prop_assert_eq!(refund.remaining, before.remaining + cost(params));
            }
            prop_assert_eq!(driver.call(params, now_us), before);
        }
    }
    Ok(())
}

/// Whether the call `params` describes, for `units` units, is admitted.
fn admits<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    units: u64,
    now_us: i64,
) -> bool {
    A::evaluate(state, &params.with_cost(units), now_us)
        .decision
        .allowed
}

/// The definition of [`Algorithm::grantable`], as a bisection over [`Algorithm::evaluate`]: the
/// largest `k ≤ up_to` whose call is admitted, or 0. Admission is monotone in the cost, so the
/// invariant below holds; at most 65 evaluations.
pub(crate) fn bisected_grantable<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    up_to: u64,
    now_us: i64,
) -> u64 {
    let admits = |units| admits::<A>(state, params, units, now_us);
    if up_to == 0 || admits(up_to) {
        return up_to;
    }
    // Invariant: `low` units are admitted (0 trivially), `high` units are not.
    let (mut low, mut high) = (0, up_to);
    while high - low > 1 {
        let middle = low.midpoint(high);
        if admits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

/// [`Algorithm::grantable`] is exact: before every step, for `up_to` of 0, 1, 2, the step's
/// cost and one more, the `limit` (read from the step's parameters) and one either side, and
/// `u64::MAX`, it equals the bisection definition ([`bisected_grantable`]), a call of the
/// granted units is admitted, and one of a unit more (when allowed by `up_to`) is not.
pub(crate) fn check_grantable_is_exact<A: Algorithm>(
    steps: &[Step<A::Params>],
    limit: impl Fn(&A::Params) -> u64,
) -> Checked {
    let mut driver = Driver::<A>::default();
    for step in steps {
        let (params, now_us) = (&step.params, step.now_us);
        driver.expire(now_us);
        let state = driver.state.as_ref();
        let (cost, limit) = (params.cost(), limit(params));
        let admits = |units| admits::<A>(state, params, units, now_us);
        let up_tos = [
            0,
            1,
            2,
            cost,
            cost.saturating_add(1),
            limit.saturating_sub(1),
            limit,
            limit.saturating_add(1),
            u64::MAX,
        ];
        for up_to in up_tos {
            let granted = A::grantable(state, params, up_to, now_us);
            let defined = bisected_grantable::<A>(state, params, up_to, now_us);
            prop_assert_eq!(granted, defined, "up to {} units", up_to);
            prop_assert!(granted <= up_to);
            prop_assert!(granted == 0 || admits(granted));
            prop_assert!(granted == up_to || !admits(granted + 1));
        }
        driver.step(step);
    }
    Ok(())
}

/// Nothing overflows or panics at the extremes: a call and a refund of `params` on `state` at
/// `now_us` leave at most `limit` remaining, and commit changes that `decodes` accepts (what
/// an evaluation writes can be read back), expiring at 1 ms or later. Returns both
/// evaluations, for further assertions.
pub(crate) fn check_extremes<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    now_us: i64,
    limit: u64,
    decodes: impl Fn(&A::Change) -> bool,
) -> Checked<[Evaluation<A::Change>; 2]> {
    let evaluations = [
        A::evaluate(state, params, now_us),
        A::refund(state, params, now_us),
    ];
    for evaluation in &evaluations {
        prop_assert!(evaluation.decision.remaining <= limit);
        if let Some(commit) = &evaluation.commit {
            prop_assert!(decodes(&commit.change), "a commit that does not decode");
            prop_assert!(commit.expires_at_ms >= 1);
        }
    }
    Ok(evaluations)
}

/// Drives `steps` and returns the admitted calls, as (instant, `cost`).
pub(crate) fn admitted<A: Algorithm>(
    steps: &[Step<A::Params>],
    cost: impl Fn(&A::Params) -> u64,
) -> Vec<(i64, u64)> {
    let mut driver = Driver::<A>::default();
    steps
        .iter()
        .filter(|step| driver.step(step).allowed)
        .map(|step| (step.now_us, cost(&step.params)))
        .collect()
}

/// The most units `admitted` within any `len_us` consecutive microseconds (the densest such
/// interval starts at an admission).
pub(crate) fn densest(admitted: &[(i64, u64)], len_us: i64) -> u64 {
    let within = |from: i64| -> u64 {
        let interval = from..from + len_us;
        admitted
            .iter()
            .filter(|(at, _)| interval.contains(at))
            .map(|(_, cost)| cost)
            .sum()
    };
    admitted
        .iter()
        .map(|&(from, _)| within(from))
        .max()
        .unwrap_or(0)
}

/// The units `admitted` in each epoch-aligned window of `window_us`, by window index.
pub(crate) fn per_aligned_window(admitted: &[(i64, u64)], window_us: i64) -> BTreeMap<i64, u64> {
    let mut per_window = BTreeMap::new();
    for &(at, cost) in admitted {
        *per_window.entry(at.div_euclid(window_us)).or_insert(0) += cost;
    }
    per_window
}

/// `per_mille` thousandths of `total`, rounded down.
pub(crate) fn share(total: u64, per_mille: u64) -> u64 {
    (u128::from(total) * u128::from(per_mille) / 1000) as u64
}

/// A cost of `per_mille` thousandths of `limit` (above 1000: more than the limit), at least 1.
pub(crate) fn cost_of(limit: u64, per_mille: u64) -> u64 {
    share(limit, per_mille).max(1)
}

/// A call's cost in ‰ of the limit: mostly within it, sometimes above.
pub(crate) fn arb_cost_per_mille() -> impl Strategy<Value = u64> {
    0u64..1200
}

/// Traffic as (µs since the previous call, cost in ‰ of the limit): bursts, calls
/// milliseconds apart and calls seconds apart.
pub(crate) fn arb_calls_us() -> impl Strategy<Value = Vec<(i64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0i64), 0i64..5_000, 0i64..10_000_000],
            arb_cost_per_mille(),
        ),
        1..60,
    )
}

/// Server clocks (Unix µs) at and beyond the bounds the algorithms clamp to, and anywhere.
pub(crate) fn arb_extreme_now_us() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(0i64),
        Just(MAX_NOW_US),
        Just(i64::MAX),
        any::<i64>()
    ]
}

/// A step of a clock that jumps back and forth, by up to 20 s, in µs.
pub(crate) fn arb_clock_jump_us() -> impl Strategy<Value = i64> {
    -20_000_000i64..20_000_000
}

/// Parameters of a windowed limiter (fixed or sliding window) in the tests' units.
pub(crate) fn window_params(limit: u64, window_us: i64, cost: u64) -> WindowParams {
    WindowParams::new(limit, window_us as u64, cost).unwrap()
}

/// (limit, window µs) of a windowed limiter: tiny to huge limits, windows of a millisecond to
/// a day, some not a whole number of milliseconds.
pub(crate) fn arb_window_params() -> impl Strategy<Value = (u64, i64)> {
    prop_oneof![
        (
            1u64..20,
            prop_oneof![
                Just(1_000i64),
                Just(1_500),
                Just(SECOND),
                1_000i64..3_000_000
            ]
        ),
        (
            1u64..100_000,
            prop_oneof![Just(60 * SECOND), 1_000i64..100_000_000]
        ),
        (
            1_000_000u64..=MAX_WINDOW_LIMIT,
            prop_oneof![Just(86_400 * SECOND), 1_000i64..10_000]
        ),
    ]
}

/// Traffic of a windowed limiter as (time since the previous call in ‰ of the window, cost in
/// ‰ of the limit): mostly within a window, sometimes across one or several.
pub(crate) fn arb_window_calls() -> impl Strategy<Value = Vec<(i64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0i64), 0i64..100, 0i64..1_200, 0i64..5_000],
            arb_cost_per_mille(),
        ),
        1..60,
    )
}

/// A clock jumping back and forth by up to two windows: (step in ‰ of the window, cost in ‰ of
/// the limit).
pub(crate) fn arb_window_jumps() -> impl Strategy<Value = Vec<(i64, u64)>> {
    prop::collection::vec((-2_000i64..2_000, arb_cost_per_mille()), 1..60)
}

/// The steps from [`T0_US`] of [`arb_window_calls`] or [`arb_window_jumps`] traffic.
pub(crate) fn window_steps(
    limit: u64,
    window: i64,
    calls: &[(i64, u64)],
) -> Vec<Step<WindowParams>> {
    steps(
        T0_US,
        calls.iter().map(|&(per_mille_of_window, per_mille)| {
            let params = window_params(limit, window, cost_of(limit, per_mille));
            (per_mille_of_window * window / 1000, params)
        }),
    )
}

/// Drives a windowed limiter and `model` (which answers `(admitted, remaining)` for a call of
/// `cost` at `now_us` under `limit`, recording it) side by side over `calls`: they must agree
/// on every call, and a call is refused for ever exactly when its cost exceeds the limit.
pub(crate) fn check_matches_window_model<A: Algorithm<Params = WindowParams>>(
    (limit, window): (u64, i64),
    calls: &[(i64, u64)],
    mut model: impl FnMut(u64, u64, i64) -> (bool, u64),
) -> Checked {
    let mut key = Driver::<A>::default();
    for step in window_steps(limit, window, calls) {
        let (cost, now) = (step.params.cost(), step.now_us);
        let decision = key.call(&step.params, now);
        prop_assert_eq!(
            (decision.allowed, decision.remaining),
            model(limit, cost, now)
        );
        prop_assert_eq!(decision.retry == Retry::Never, cost > limit);
    }
    Ok(())
}

/// The properties every windowed limiter (fixed or sliding window) shares, for `limit` units
/// per `window` µs:
///
/// - over `calls`: [`check_reset_and_expiry_are_when_unused`],
///   [`check_peeking_changes_nothing`], [`check_refund_undoes_an_admission`] and
///   [`check_grantable_is_exact`];
/// - over `jumps`, a clock going back and forth: [`check_earlier_clocks_never_see_more_room`],
///   and an admitted call never moves the stored window's start back, and each stored window
///   counts exactly the units admitted in it, at most `limit`. `window_of` reads a state's
///   (start, count of the window starting there).
pub(crate) fn check_windowed_limiter<A: Algorithm<Params = WindowParams>>(
    (limit, window): (u64, i64),
    calls: &[(i64, u64)],
    jumps: &[(i64, u64)],
    window_of: impl Fn(&A::State) -> (i64, u64),
) -> Checked
where
    A::State: Clone + PartialEq + Debug,
{
    let steps = window_steps(limit, window, calls);
    check_reset_and_expiry_are_when_unused::<A>(&steps, &window_params(limit, window, limit))?;
    check_peeking_changes_nothing::<A>(&steps)?;
    check_refund_undoes_an_admission::<A>(&steps, WindowParams::cost)?;
    check_grantable_is_exact::<A>(&steps, WindowParams::limit)?;

    let steps = window_steps(limit, window, jumps);
    let transitions = check_earlier_clocks_never_see_more_room::<A>(&steps)?;
    let mut used: BTreeMap<i64, u64> = BTreeMap::new();
    for transition in transitions.iter().filter(|t| t.decision.allowed) {
        let (start, count) = window_of(transition.after.as_ref().unwrap());
        if let Some(before) = &transition.before {
            prop_assert!(start >= window_of(before).0, "the stored start moved back");
        }
        let total = used.entry(start).or_insert(0);
        *total += transition.step.params.cost();
        prop_assert!(*total <= limit);
        prop_assert_eq!(*total, count);
    }
    Ok(())
}
