//! Partial grants: a call that takes what is available, up to its cost.
//!
//! A lease holder asks for up to N units and spends them locally; it needs the server to grant
//! *what is there, up to N*, in whole units, rather than all or nothing. The grant is decided
//! from [`Algorithm::grantable`], then evaluated as an ordinary call of the granted units, so
//! every algorithm's rules (expiry, clock handling, exactness) hold for partial calls as they
//! do for whole ones.

use super::decision::{Algorithm, CallCost, Evaluation};

/// How much of its cost a call may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The whole cost or nothing.
    Whole,
    /// As many whole units as are available, up to the cost, but at least `min` (≥ 1;
    /// callers keep `min ≤ cost`) or nothing.
    Partial {
        /// Fewest units worth taking.
        min: u64,
    },
}

/// A call's evaluation and the units it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted<C> {
    /// Units taken: the granted amount, or 0 when denied (a whole call that is admitted takes
    /// its whole cost).
    pub units: u64,
    /// The evaluation of the call as decided: of the granted units when something is granted;
    /// when nothing is, of the smallest acceptable grant (its `retry` says when that many
    /// units are available, its `remaining` how many are now).
    pub evaluation: Evaluation<C>,
}

impl<C> Granted<C> {
    /// The same grant with its change converted (to a type-erased change, say).
    pub fn map_change<D>(self, convert: impl FnOnce(C) -> D) -> Granted<D> {
        Granted {
            units: self.units,
            evaluation: self.evaluation.map_change(convert),
        }
    }
}

/// Evaluates a call of `params.cost()` units under `grant`, at `now_us`.
pub fn evaluate<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    grant: Grant,
    now_us: i64,
) -> Granted<A::Change> {
    let cost = params.cost();
    let (min, grantable) = match grant {
        Grant::Whole => (cost, cost),
        Grant::Partial { min } => {
            let min = min.clamp(1, cost.max(1));
            (min, A::grantable(state, params, cost, now_us))
        }
    };
    let units = if grantable >= min { grantable } else { min };
    let evaluation = A::evaluate(state, &params.with_cost(units), now_us);
    Granted {
        units: if evaluation.decision.allowed {
            units
        } else {
            0
        },
        evaluation,
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::decision::Retry;
    use crate::number::Decimal;
    use crate::testing::{Driver, MS, T0_US};
    use crate::token_bucket::{TokenBucketAlgorithm, TokenBucketParams};
    use proptest::prelude::*;

    fn bucket(capacity: u64, rate: &str, cost: u64) -> TokenBucketParams {
        let rate = Decimal::parse_positive(rate.as_bytes()).unwrap();
        TokenBucketParams::new(capacity, rate, cost).unwrap()
    }

    /// A bucket of 10 tokens at 1/s, drained to `left` tokens at T0.
    fn drained_to(left: u64) -> Driver<TokenBucketAlgorithm> {
        let mut driver = Driver::default();
        if left < 10 {
            assert!(driver.call(&bucket(10, "1", 10 - left), T0_US).allowed);
        }
        driver
    }

    fn partial(driver: &Driver<TokenBucketAlgorithm>, cost: u64, min: u64) -> (u64, [i64; 5]) {
        let granted = evaluate::<TokenBucketAlgorithm>(
            driver.state.as_ref(),
            &bucket(10, "1", cost),
            Grant::Partial { min },
            T0_US,
        );
        assert_eq!(granted.units > 0, granted.evaluation.commit.is_some());
        (granted.units, granted.evaluation.decision.reply_fields())
    }

    #[rustfmt::skip]
    #[test]
    fn grants_what_is_there_up_to_the_cost() {
        // (tokens left, cost, min) -> (units, [allowed, remaining, retry_ms, reset_ms, limit])
        let cases: &[(u64, u64, u64, u64, [i64; 5])] = &[
            (10, 4, 1,   4, [1, 6, 0, 4000, 10]),    // plenty: the whole cost
            (3,  3, 1,   3, [1, 0, 0, 10000, 10]),   // exactly available
            (3,  4, 1,   3, [1, 0, 0, 10000, 10]),   // one short: what is there
            (3,  4, 3,   3, [1, 0, 0, 10000, 10]),   // MIN exactly available
            (3,  5, 4,   0, [0, 3, 1000, 7000, 10]), // MIN above available: nothing, retry for 4
            (0,  5, 1,   0, [0, 0, 1000, 10000, 10]),// empty: nothing
            (10, 20, 1, 10, [1, 0, 0, 10000, 10]),   // cost above capacity: all there is
            (10, 20, 11, 0, [0, 10, -1, 0, 10]),     // MIN above capacity: never
        ];
        for &(left, cost, min, units, fields) in cases {
            assert_eq!(partial(&drained_to(left), cost, min), (units, fields), "{left} left, cost {cost}, min {min}");
        }
    }

    #[test]
    fn a_whole_grant_is_an_ordinary_call() {
        let driver = drained_to(3);
        let params = bucket(10, "1", 4);
        let granted =
            evaluate::<TokenBucketAlgorithm>(driver.state.as_ref(), &params, Grant::Whole, T0_US);
        let plain = TokenBucketAlgorithm::evaluate(driver.state.as_ref(), &params, T0_US);
        assert_eq!(granted.units, 0);
        assert_eq!(granted.evaluation, plain);
        assert_eq!(plain.decision.retry, Retry::AfterMs(1000));
    }

    proptest! {
        /// A partial grant takes exactly the units a whole call of that many units would be
        /// admitted for, and no whole call of one unit more would be (unless capped by cost).
        #[test]
        fn partial_grants_are_maximal(
            used in 0u64..=10, cost in 1u64..=12, min in 1u64..=12, elapsed_ms in 0i64..3000,
        ) {
            let driver = drained_to(10 - used);
            let params = bucket(10, "1", cost);
            let now_us = T0_US + elapsed_ms * MS;
            let state = driver.state.as_ref();
            let granted = evaluate::<TokenBucketAlgorithm>(state, &params, Grant::Partial { min }, now_us);
            let admits = |units: u64| {
                TokenBucketAlgorithm::evaluate(state, &params.with_cost(units), now_us).decision.allowed
            };
            let min = min.min(cost);
            if granted.units > 0 {
                prop_assert!(granted.units >= min && granted.units <= cost);
                prop_assert!(admits(granted.units));
                prop_assert!(granted.units == cost || !admits(granted.units + 1));
            } else {
                prop_assert!(!admits(min));
                prop_assert!(granted.evaluation.commit.is_none());
            }
        }
    }
}
