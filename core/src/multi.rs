//! Several limits decided as one call: every limit admits its cost, or none is charged.
//!
//! A request is usually subject to several limits at once (the infrastructure's, the tenant's
//! plan, the user's, the endpoint's). Checking them one by one either charges the earlier
//! limits for a request a later one denies, or needs refunds that race with other clients.
//! Here every limit is evaluated against the same `now` before anything is written, and two
//! pure rules turn the per-limit evaluations into one call:
//!
//! - [`units_to_evaluate`]: how many units every limit is asked for (under a partial grant,
//!   the most that *all* of them can give);
//! - [`bind`]: which limit decides what the client is told, and the call's summary decision.
//!
//! Limit `i` is charged `units × weight_i`, so one call can count requests and bytes.

use super::decision::{Decision, Retry};
use super::grant::Grant;

/// The units every limit of a call is evaluated with (limit `i` is charged `units × w_i`).
///
/// A whole call asks for its `cost`. A partial call asks for the most units every limit can
/// grant: limit `i`, able to grant `g_i` of its own units now, can give `⌊g_i / w_i⌋` of the
/// call's; the call takes the smallest of those, capped at `cost`, or `min` when that is
/// below `min` (then some limit denies, and the evaluations say when `min` fits).
///
/// `grantable` yields `(g_i, w_i)` for each limit, with `w_i ≥ 1`.
pub fn units_to_evaluate(
    cost: u64,
    grant: Grant,
    grantable: impl IntoIterator<Item = (u64, u64)>,
) -> u64 {
    match grant {
        Grant::Whole => cost,
        Grant::Partial { min } => {
            let min = min.clamp(1, cost.max(1));
            let all_can_give = grantable
                .into_iter()
                .map(|(units, weight)| units.checked_div(weight).unwrap_or(units))
                .fold(cost, u64::min);
            all_can_give.max(min)
        }
    }
}

/// The limit that decides a multi-limit call, and the call's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Index of the binding limit.
    pub binding: usize,
    /// The call's decision: admitted only if every limit admits; `remaining` and `limit` are
    /// the binding limit's; `retry` is the binding limit's when denied and, when admitted,
    /// the longest wait any limit imposes (a token bucket with a maximum wait paces the call:
    /// the caller proceeds once every limit lets it); `reset_after_ms` is the largest of all,
    /// when every limit is back to unused.
    pub decision: Decision,
}

/// Picks the binding limit among the per-limit decisions of one call, where limit `i` was
/// asked for `costs[i]` units; `None` for an empty call.
///
/// - Denied (some limit denies): the denying limit that makes the client wait longest, a
///   limit that can never admit this cost before any other.
/// - Admitted: the limit with the fewest calls of this cost left (`remaining_i / cost_i`),
///   the one that will deny first.
///
/// Ties go to the lowest index, so the order of the limits states their precedence.
pub fn bind(decisions: &[Decision], costs: &[u64]) -> Option<Bound> {
    let allowed = decisions.iter().all(|decision| decision.allowed);
    let reset_after_ms = decisions.iter().map(|d| d.reset_after_ms).max()?;
    let binding = if allowed {
        let calls_left = |index: usize, decision: &Decision| {
            let cost = costs.get(index).copied().unwrap_or(1).max(1);
            decision.remaining.checked_div(cost).unwrap_or(0)
        };
        // min_by_key keeps the first of equal elements.
        decisions
            .iter()
            .enumerate()
            .min_by_key(|(index, decision)| calls_left(*index, decision))
    } else {
        // max_by_key keeps the last of equal elements: search from the end for the first.
        decisions
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, decision)| !decision.allowed)
            .max_by_key(|(_, decision)| wait_rank(decision.retry))
    };
    let (binding, chosen) = binding?;
    let retry = if allowed {
        decisions
            .iter()
            .map(|decision| decision.retry)
            .max_by_key(|&retry| wait_rank(retry))
            .unwrap_or(chosen.retry)
    } else {
        chosen.retry
    };
    Some(Bound {
        binding,
        decision: Decision {
            allowed,
            retry,
            reset_after_ms,
            ..*chosen
        },
    })
}

/// Orders denials by how long they make the client wait; "never" is longest.
fn wait_rank(retry: Retry) -> (bool, u64) {
    match retry {
        Retry::Now => (false, 0),
        Retry::AfterMs(ms) => (false, ms),
        Retry::Never => (true, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, remaining: u64, retry: Retry, reset_after_ms: u64) -> Decision {
        Decision {
            allowed,
            remaining,
            retry,
            reset_after_ms,
            limit: 100,
        }
    }

    fn admitted(remaining: u64, reset_after_ms: u64) -> Decision {
        decision(true, remaining, Retry::Now, reset_after_ms)
    }

    fn denied(retry: Retry, reset_after_ms: u64) -> Decision {
        decision(false, 0, retry, reset_after_ms)
    }

    #[test]
    fn admitted_calls_bind_on_the_fewest_calls_left() {
        // Calls left: 9/1 = 9, 10/5 = 2, 4/2 = 2, 30/1 = 30.
        let decisions = [
            admitted(9, 100),
            admitted(10, 700),
            admitted(4, 50),
            admitted(30, 10),
        ];
        let bound = bind(&decisions, &[1, 5, 2, 1]).unwrap();
        assert_eq!(bound.binding, 1, "ties go to the lowest index");
        assert_eq!(bound.decision, admitted(10, 700));
    }

    #[test]
    fn admitted_calls_wait_for_the_slowest_pacing_limit() {
        // The second limit paces the call (admitted, proceed in 250 ms); the first binds.
        let paced = decision(true, 40, Retry::AfterMs(250), 900);
        let decisions = [admitted(1, 100), paced, admitted(7, 50)];
        let bound = bind(&decisions, &[1; 3]).unwrap();
        assert_eq!(bound.binding, 0);
        assert_eq!(
            bound.decision,
            decision(true, 1, Retry::AfterMs(250), 900),
            "the caller waits for the paced limit"
        );
    }

    #[test]
    fn denied_calls_bind_on_the_longest_wait() {
        let decisions = [
            admitted(5, 100),
            denied(Retry::AfterMs(200), 300),
            denied(Retry::AfterMs(900), 1000),
            denied(Retry::AfterMs(900), 5000),
        ];
        let bound = bind(&decisions, &[1; 4]).unwrap();
        assert_eq!(bound.binding, 2);
        assert_eq!(bound.decision, denied(Retry::AfterMs(900), 5000));
    }

    #[test]
    fn a_limit_that_can_never_admit_binds_a_denial() {
        let decisions = [
            denied(Retry::AfterMs(u64::MAX), 1),
            denied(Retry::Never, 0),
            denied(Retry::Never, 0),
        ];
        let bound = bind(&decisions, &[1; 3]).unwrap();
        assert_eq!(bound.binding, 1);
        assert_eq!(bound.decision.retry, Retry::Never);
        assert_eq!(bound.decision.reset_after_ms, 1);
        assert_eq!(bind(&[], &[]), None);
    }

    #[test]
    fn partial_calls_take_what_every_limit_can_give() {
        let partial = |min| Grant::Partial { min };
        // Weights 1, 2, 3 able to grant 10, 9, 30 of their units: 10, 4, 10 of the call's.
        let grantable = [(10, 1), (9, 2), (30, 3)];
        assert_eq!(units_to_evaluate(8, partial(1), grantable), 4);
        assert_eq!(
            units_to_evaluate(3, partial(1), grantable),
            3,
            "capped by cost"
        );
        assert_eq!(
            units_to_evaluate(8, partial(4), grantable),
            4,
            "min exactly met"
        );
        assert_eq!(
            units_to_evaluate(8, partial(5), grantable),
            5,
            "below min: ask for min, which some limit denies"
        );
        assert_eq!(
            units_to_evaluate(8, partial(99), grantable),
            8,
            "min ≤ cost"
        );
        assert_eq!(units_to_evaluate(8, Grant::Whole, grantable), 8);
        assert_eq!(units_to_evaluate(8, partial(1), [(0, 1)]), 1);
    }
}
