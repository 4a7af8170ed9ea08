//! The engine: what a call decides, on one key or several, wherever the states are kept.
//!
//! Given the states a call's keys hold (missing keys included), its quotas and one `now`,
//! the engine decides the call and says what to write; it never writes. Its callers keep the
//! states: the Redis module in keys (it opens them, runs the engine, then commits the effects),
//! the client library in a map (its local fallback and in-memory store). Both therefore
//! decide every call by the same rules:
//!
//! - every limit is evaluated against the same `now` before anything is written;
//! - under a partial grant every limit is asked for the same number of units: the most all
//!   of them can give ([`multi::units_to_evaluate`] over each algorithm's `grantable`);
//! - the binding limit says what the caller is told ([`multi::bind`]);
//! - the writes are to be made only if every limit admits; a denial writes nothing, and its
//!   reset is when every limit, as it stands, is back to unused;
//! - a key holding another algorithm than its quota's is refused, naming both.
//!
//! A multi-limit call works in [`Buffers`] the caller owns and reuses, so once they have
//! grown to the largest call seen, deciding allocates nothing.

use crate::concurrency::{ConcurrencyAlgorithm, HolderId};
use crate::decision::{Commit, Decision, Evaluation};
use crate::gcra::{CellOutcome, GcraAlgorithm, GcraParams};
use crate::grant::{self, Grant, Granted};
use crate::kinds::{Change, Kind, KindAlgorithm, KindState, LimiterRef, Quota};
use crate::multi::{self, Bound};

/// A key as the engine sees it: the limiter it holds, if any.
pub trait Held {
    /// The key's limiter; `None` for a missing (or expired) key.
    fn held(&self) -> Option<LimiterRef<'_>>;
}

impl Held for Option<LimiterRef<'_>> {
    fn held(&self) -> Option<LimiterRef<'_>> {
        *self
    }
}

/// Why the engine refused a call (nothing is to be written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Key `index` of the call holds another algorithm than its quota's.
    KindMismatch {
        /// Which key (0 for a single-key call).
        index: usize,
        /// What the key holds.
        held: Kind,
        /// What the call works on.
        wanted: Kind,
    },
    /// A multi-limit call without a limit.
    NoLimits,
}

/// The limits of one multi-limit call.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// One quota per key, in key order, each for one unit of the call.
    pub quotas: &'a [Quota],
    /// Limit `i` is charged `units × weights[i]` (as many weights as quotas; each ≥ 1 and
    /// small enough that `cost × weight` fits, as the parser checks).
    pub weights: &'a [u64],
    /// Units the call asks for.
    pub cost: u64,
    /// Whether fewer units may be granted.
    pub grant: Grant,
}

impl Limits<'_> {
    /// Each limit's quota for a call of `units` units: `units × weight` each.
    pub fn quotas_for(&self, units: u64) -> impl Iterator<Item = Quota> + '_ {
        self.quotas
            .iter()
            .zip(self.weights)
            .map(move |(quota, weight)| quota.with_cost(units.saturating_mul(*weight)))
    }
}

/// What a multi-limit call decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Units taken from every limit (× its weight); 0 when denied.
    pub units: u64,
    /// The binding limit and the call's decision: when it admits, the writes in
    /// [`Buffers::take_commits`] are to be made, all of them.
    pub bound: Bound,
}

/// The working memory of a multi-limit call, owned by the caller and reused from call to
/// call (emptied by [`Buffers::clear`] or by the next [`acquire_many`]).
#[derive(Debug, Default)]
pub struct Buffers {
    grantable: Vec<(u64, u64)>,
    costs: Vec<u64>,
    per_limit: Vec<Decision>,
    commits: Vec<Option<Commit<Change>>>,
}

impl Buffers {
    /// Empties the buffers, keeping their capacity.
    pub fn clear(&mut self) {
        self.grantable.clear();
        self.costs.clear();
        self.per_limit.clear();
        self.commits.clear();
    }

    /// Each limit's own view of the last call, in key order.
    pub fn per_limit(&self) -> &[Decision] {
        &self.per_limit
    }

    /// The last call's write for each key, in key order (`None`: that key is unchanged),
    /// taken out of the buffers.
    pub fn take_commits(&mut self) -> impl Iterator<Item = Option<Commit<Change>>> + '_ {
        self.commits.drain(..)
    }
}

/// A call on one key holding `held`: the units granted, the decision, and what to write.
pub fn acquire(
    held: Option<LimiterRef<'_>>,
    quota: &Quota,
    grant: Grant,
    now_us: i64,
) -> Result<Granted<Change>, Refused> {
    quota
        .evaluate(held, grant, now_us)
        .map_err(mismatch(0, quota.kind()))
}

/// [`acquire`] for a quota of algorithm `A`, known statically (after one
/// [`Quota::visit`](crate::kinds::Quota::visit)): the same evaluation
/// ([`grant::evaluate`]) without dispatching on the kind again, for callers that then write
/// the change as its own type. `held` is the key's state, or the kind it holds instead.
pub fn acquire_as<A: KindAlgorithm>(
    held: Result<Option<&A::State>, Kind>,
    params: &A::Params,
    grant: Grant,
    now_us: i64,
) -> Result<Granted<A::Change>, Refused> {
    let state = held.map_err(mismatch(0, A::State::KIND))?;
    Ok(grant::evaluate::<A>(state, params, grant, now_us))
}

/// Gives a call's cost back to the limiter of one key (never beyond its limit).
pub fn refund(
    held: Option<LimiterRef<'_>>,
    quota: &Quota,
    now_us: i64,
) -> Result<Evaluation<Change>, Refused> {
    quota
        .refund(held, now_us)
        .map_err(mismatch(0, quota.kind()))
}

/// Frees `holder`'s slot in the in-flight limit of one key: the write, if the holder was
/// there and live (`RL.RELEASE`).
pub fn release(
    held: Option<LimiterRef<'_>>,
    holder: &HolderId,
    now_us: i64,
) -> Result<Option<Commit<Change>>, Refused> {
    let state = match held {
        None => None,
        Some(LimiterRef::Concurrency(state)) => Some(state),
        Some(other) => return Err(mismatch(0, Kind::Concurrency)(other.kind())),
    };
    Ok(
        ConcurrencyAlgorithm::release(state, holder, now_us).map(|commit| Commit {
            change: Change::Concurrency(commit.change.into()),
            expires_at_ms: commit.expires_at_ms,
        }),
    )
}

/// A `CL.THROTTLE` call on one key: its evaluation and redis-cell's view of it.
pub fn throttle(
    held: Option<LimiterRef<'_>>,
    params: &GcraParams,
    now_us: i64,
) -> Result<(Evaluation<Change>, CellOutcome), Refused> {
    let state = match held {
        None => None,
        Some(LimiterRef::Gcra(state)) => Some(state),
        Some(other) => return Err(mismatch(0, Kind::Gcra)(other.kind())),
    };
    let (evaluation, cell) = GcraAlgorithm::throttle(state, params, now_us);
    Ok((evaluation.map_change(Change::Gcra), cell))
}

/// A call on several distinct keys, limit `i` on `keys[i]`: every limit admits its cost
/// and all are charged, or none is. Each limit's view of the call and, when it admits, the
/// writes are left in `buffers`.
pub fn acquire_many<K: Held>(
    keys: &[K],
    limits: Limits<'_>,
    now_us: i64,
    buffers: &mut Buffers,
) -> Result<Verdict, Refused> {
    buffers.clear();
    let units = match limits.grant {
        Grant::Whole => limits.cost,
        Grant::Partial { .. } => {
            for (index, ((key, quota), weight)) in keys
                .iter()
                .zip(limits.quotas_for(limits.cost))
                .zip(limits.weights)
                .enumerate()
            {
                let units = quota
                    .grantable(key.held(), quota.cost(), now_us)
                    .map_err(mismatch(index, quota.kind()))?;
                buffers.grantable.push((units, *weight));
            }
            multi::units_to_evaluate(limits.cost, limits.grant, buffers.grantable.iter().copied())
        }
    };
    for (index, (key, quota)) in keys.iter().zip(limits.quotas_for(units)).enumerate() {
        let granted = quota
            .evaluate(key.held(), Grant::Whole, now_us)
            .map_err(mismatch(index, quota.kind()))?;
        buffers.per_limit.push(granted.evaluation.decision);
        buffers.commits.push(granted.evaluation.commit);
        buffers.costs.push(quota.counted_cost());
    }
    let mut bound = multi::bind(&buffers.per_limit, &buffers.costs).ok_or(Refused::NoLimits)?;
    if !bound.decision.allowed {
        buffers.commits.clear();
        bound.decision.reset_after_ms = reset_as_it_stands(keys, limits, units, now_us, buffers)?;
        return Ok(Verdict { units: 0, bound });
    }
    Ok(Verdict { units, bound })
}

/// A denied call's reset: when every limit, as it stands (nothing is charged), is back to
/// unused. A limit that alone would have admitted reports its reset as if charged (its own
/// view of the call), so it is asked again with a cost it can never admit.
fn reset_as_it_stands<K: Held>(
    keys: &[K],
    limits: Limits<'_>,
    units: u64,
    now_us: i64,
    buffers: &Buffers,
) -> Result<u64, Refused> {
    let mut reset_after_ms = 0;
    for (index, ((key, quota), view)) in keys
        .iter()
        .zip(limits.quotas_for(units))
        .zip(&buffers.per_limit)
        .enumerate()
    {
        let as_it_stands = if view.allowed {
            let unchanged = quota.with_cost(u64::MAX);
            let granted = unchanged
                .evaluate(key.held(), Grant::Whole, now_us)
                .map_err(mismatch(index, unchanged.kind()))?;
            granted.evaluation.decision.reset_after_ms
        } else {
            view.reset_after_ms
        };
        reset_after_ms = reset_after_ms.max(as_it_stands);
    }
    Ok(reset_after_ms)
}

/// Turns the kind key `index` holds into the refusal of a call wanting `wanted`.
fn mismatch(index: usize, wanted: Kind) -> impl FnOnce(Kind) -> Refused {
    move |held| Refused::KindMismatch {
        index,
        held,
        wanted,
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
