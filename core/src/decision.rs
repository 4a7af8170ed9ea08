//! What every limiter decides, independent of the algorithm.

use super::facts::Recovery;
use super::time::saturating_i64;

/// When the same call would be admitted, if nothing else happens meanwhile; for an admitted
/// call, when its caller may proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Admitted (or, for a denied call's refund, admissible) now, without waiting.
    Now,
    /// Denied: admitted if repeated after this many milliseconds (rounded up, at least 1).
    /// Admitted (only a token bucket with a maximum wait does this): the caller may proceed
    /// after this many milliseconds (rounded up, at least 1), once the tokens it took have
    /// refilled.
    AfterMs(u64),
    /// Denied, and no amount of waiting helps: the cost exceeds the limit.
    Never,
}

/// The outcome of one call, shared by all algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the call was admitted (and its cost consumed).
    pub allowed: bool,
    /// Whole units still available after this call (rounded down).
    pub remaining: u64,
    /// When this same call would be admitted; for an admitted call, when its caller may
    /// proceed (always [`Retry::Now`] but for a token bucket call with a maximum wait).
    pub retry: Retry,
    /// Milliseconds (rounded up) until the limiter is back to its initial, unused state.
    pub reset_after_ms: u64,
    /// The configured limit (a token bucket's capacity, a window's limit).
    pub limit: u64,
}

impl Decision {
    /// The five integers every `RL.*` command replies with, in wire order:
    /// `[allowed, remaining, retry_after_ms, reset_after_ms, limit]`.
    ///
    /// `retry_after_ms` is 0 when admitted without a wait, the wait when admitted with one,
    /// and -1 when waiting can never help.
    pub fn reply_fields(&self) -> [i64; 5] {
        let retry_after_ms = match self.retry {
            Retry::Now => 0,
            Retry::AfterMs(ms) => saturating_i64(ms),
            Retry::Never => -1,
        };
        [
            i64::from(self.allowed),
            saturating_i64(self.remaining),
            retry_after_ms,
            saturating_i64(self.reset_after_ms),
            saturating_i64(self.limit),
        ]
    }
}

/// What an algorithm wants stored after an admitted call, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit<C> {
    /// The change to apply to the stored state (or to create it from).
    pub change: C,
    /// Unix milliseconds at which the stored state becomes indistinguishable from a missing
    /// key; the key's expiry is set to this instant.
    pub expires_at_ms: i64,
}

/// The result of evaluating a call: the decision, and the write that records it (none when
/// the call changes nothing, e.g. when it is denied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation<C> {
    /// What the client is told.
    pub decision: Decision,
    /// What must be stored, if anything.
    pub commit: Option<Commit<C>>,
}

impl<C> Evaluation<C> {
    /// The same evaluation with its change converted (to a type-erased change, say).
    pub fn map_change<D>(self, convert: impl FnOnce(C) -> D) -> Evaluation<D> {
        Evaluation {
            decision: self.decision,
            commit: self.commit.map(|commit| Commit {
                change: convert(commit.change),
                expires_at_ms: commit.expires_at_ms,
            }),
        }
    }
}

/// The cost of one call: what partial grants and multi-limit calls adjust.
pub trait CallCost: Copy {
    /// Units the call asks for.
    fn cost(&self) -> u64;

    /// The same parameters for a call of `cost` units (0 is read as 1).
    #[must_use]
    fn with_cost(&self, cost: u64) -> Self;
}

/// A rate-limiting algorithm as a pure function of (stored state, parameters, now).
///
/// Evaluation is read-only, so a peek is an evaluation whose commit is dropped, and a
/// check over several keys can evaluate all of them before committing any.
///
/// Contract for implementations:
/// - a missing state (`None`) behaves exactly like a limiter that was never used;
/// - the commit's `expires_at_ms` is the first instant at which the stored state is
///   indistinguishable from a missing one (so the key can expire then), rounded up;
/// - a clock earlier than one already seen never admits more than the later clock would, and
///   never moves stored instants backwards;
/// - no input can panic or overflow.
pub trait Algorithm {
    /// Validated parameters of one call (limits, durations, cost).
    type Params: CallCost;
    /// What the limiter keeps between calls.
    type State;
    /// How an admitted call changes the state.
    type Change;

    /// Decides a call made at `now_us` (Unix microseconds of the server clock).
    fn evaluate(
        state: Option<&Self::State>,
        params: &Self::Params,
        now_us: i64,
    ) -> Evaluation<Self::Change>;

    /// Gives back the params' cost to the limiter (a call that was admitted but not
    /// performed), never beyond its limit. The decision describes the limiter after the
    /// refund: `allowed` tells whether anything was given back, the other fields are what a
    /// call with these parameters would see now. No commit when there is nothing to give back.
    fn refund(
        state: Option<&Self::State>,
        params: &Self::Params,
        now_us: i64,
    ) -> Evaluation<Self::Change>;

    /// The most units a call with these parameters could take now, up to `up_to`: the
    /// largest `k ≤ up_to` such that the same call costing `k` units is admitted, or 0 when
    /// not even one unit is (and for `up_to = 0`). What a partial grant takes.
    ///
    /// Admission is monotone in the cost for every algorithm (a call admitted for `k` units
    /// would be admitted for fewer), so this is well defined. Every algorithm computes it in
    /// closed form, in about the time of one [`Algorithm::evaluate`], so a partial grant
    /// costs about as much as a plain call; the shared property tests hold each closed form
    /// against the definition (a bisection over `evaluate`).
    fn grantable(
        state: Option<&Self::State>,
        params: &Self::Params,
        up_to: u64,
        now_us: i64,
    ) -> u64;

    /// How the units a call takes come back (for telling a client when it has more).
    fn recovery(params: &Self::Params) -> Recovery;

    /// Applies a committed change to an existing state.
    fn apply(state: &mut Self::State, change: Self::Change);

    /// Builds the state of a limiter that did not exist yet.
    fn create(change: Self::Change) -> Self::State;
}

/// Implements [`CallCost`] for parameters of type `$params` that carry the cost in a
/// `cost: u64` field (kept at least 1).
macro_rules! cost_is_a_field {
    ($params:ty) => {
        impl $crate::decision::CallCost for $params {
            fn cost(&self) -> u64 {
                self.cost
            }

            fn with_cost(&self, cost: u64) -> Self {
                Self {
                    cost: cost.max(1),
                    ..*self
                }
            }
        }
    };
}
pub(crate) use cost_is_a_field;

/// Implements [`Algorithm::apply`] and [`Algorithm::create`], inside an `impl Algorithm`, for an
/// algorithm whose change is the whole new state of type `$state`: applying replaces the state,
/// creating takes the change as it is. (Every algorithm but the sliding log, whose change is an
/// edit of the log.)
macro_rules! change_is_the_new_state {
    ($state:ty) => {
        fn apply(state: &mut $state, change: $state) {
            *state = change;
        }

        fn create(change: $state) -> $state {
            change
        }
    };
}
pub(crate) use change_is_the_new_state;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_fields_follow_the_documented_order() {
        let decision = Decision {
            allowed: false,
            remaining: 3,
            retry: Retry::AfterMs(250),
            reset_after_ms: 900,
            limit: 10,
        };
        assert_eq!(decision.reply_fields(), [0, 3, 250, 900, 10]);
        let never = Decision {
            retry: Retry::Never,
            ..decision
        };
        assert_eq!(never.reply_fields()[2], -1);
        let admitted = Decision {
            allowed: true,
            retry: Retry::Now,
            remaining: u64::MAX,
            ..decision
        };
        assert_eq!(admitted.reply_fields(), [1, i64::MAX, 0, 900, 10]);
    }
}
