//! The life of a limiter call, on one key or several.
//!
//! 1. **Prepare**: open every key (WRONGTYPE for another Redis type), then evaluate every
//!    quota against the key's limiter and the one `now` the command read (a key holding
//!    another algorithm is refused here). Nothing has been written yet, so any error leaves
//!    every key as it was.
//! 2. **Commit**, only when the call changes something: [`effects::commit`] applies all
//!    writes or none, sets their absolute expiries, propagates their effects as one op and
//!    announces them. A denied call, a peek, or a refund with nothing to give back writes and
//!    propagates nothing.
//!
//! A multi-key call works in buffers it reuses from call to call ([`super::scratch`]).
//!
//! Evaluation goes through the type-erased [`Quota`](redis_ratelimit_core::kinds::Quota), so one driver
//! serves every algorithm and a multi-limit call can mix them.

use std::ffi::CStr;

use redis_module::raw;

use super::api::Call;
use super::effects::{self, Replicated};
use super::scratch::Reusable;
use super::store::{LimiterKey, kind_mismatch};
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Change, Kind, Quota};
use redis_ratelimit_core::multi::{self, Bound};
use redis_ratelimit_core::{Commit, Decision, Evaluation};
use redis_ratelimit_wire::args::CallArgs;
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::error::CommandError;

/// What a single-key call decided.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Units taken (0 when denied).
    pub units: u64,
    /// What the client is told.
    pub decision: Decision,
}

/// A call on one key: evaluates `args` and commits what it takes.
pub fn acquire(
    call: &Call<'_>,
    event: &CStr,
    name: *mut raw::RedisModuleString,
    args: &CallArgs,
    now_us: i64,
) -> Result<Outcome, CommandError> {
    let key = LimiterKey::open(call, name)?;
    let granted = args
        .quota
        .evaluate(key.held(), args.grant, now_us)
        .map_err(mismatch_with(&args.quota))?;
    let outcome = Outcome {
        units: granted.units,
        decision: granted.evaluation.decision,
    };
    commit_one(call, event, key, granted.evaluation)?;
    Ok(outcome)
}

/// What a call on one key would get now, changing nothing (works on replicas).
pub fn peek(
    call: &Call<'_>,
    name: *mut raw::RedisModuleString,
    args: &CallArgs,
    now_us: i64,
) -> Result<Outcome, CommandError> {
    let key = LimiterKey::read(call, name)?;
    let held = key.as_ref().and_then(LimiterKey::held);
    let granted = args
        .quota
        .evaluate(held, args.grant, now_us)
        .map_err(mismatch_with(&args.quota))?;
    Ok(Outcome {
        units: granted.units,
        decision: granted.evaluation.decision,
    })
}

/// Gives a call's cost back to one key's limiter.
pub fn refund(
    call: &Call<'_>,
    event: &CStr,
    name: *mut raw::RedisModuleString,
    quota: &Quota,
    now_us: i64,
) -> Result<Decision, CommandError> {
    let key = LimiterKey::open(call, name)?;
    let evaluation = quota
        .refund(key.held(), now_us)
        .map_err(mismatch_with(quota))?;
    let decision = evaluation.decision;
    commit_one(call, event, key, evaluation)?;
    Ok(decision)
}

/// Commits an evaluation of one key, if it changes anything.
pub fn commit_one(
    call: &Call<'_>,
    event: &CStr,
    key: LimiterKey,
    evaluation: Evaluation<Change>,
) -> Result<(), CommandError> {
    match evaluation.commit {
        Some(commit) => record(call, event, key, commit),
        None => Ok(()),
    }
}

/// Commits one key's write.
pub fn record(
    call: &Call<'_>,
    event: &CStr,
    key: LimiterKey,
    commit: Commit<Change>,
) -> Result<(), CommandError> {
    effects::commit(call, event, &mut [Replicated::new(key, commit)])
}

/// What a multi-limit call decided.
#[derive(Clone, Copy, Debug)]
pub struct MultiOutcome {
    /// Units taken from every limit (× its weight); 0 when denied.
    pub units: u64,
    /// The binding limit and the call's decision.
    pub bound: Bound,
}

/// The working memory of a multi-limit call (see [`scratch`]).
#[derive(Default)]
pub struct MultiBuffers {
    keys: Vec<LimiterKey>,
    grantable: Vec<(u64, u64)>,
    costs: Vec<u64>,
    commits: Vec<Option<Commit<Change>>>,
    writes: Vec<Replicated>,
    /// Each limit's own view of the call, for the reply.
    pub per_limit: Vec<Decision>,
}

impl Reusable for MultiBuffers {
    fn clear(&mut self) {
        self.keys.clear();
        self.grantable.clear();
        self.costs.clear();
        self.commits.clear();
        self.writes.clear();
        self.per_limit.clear();
    }
}

/// A call on several distinct keys, limit `i` on `names[i]`: every limit admits its cost and
/// all are charged, or nothing is written. Each limit's view of the call is left in
/// `buffers.per_limit`.
pub fn acquire_many(
    call: &Call<'_>,
    event: &CStr,
    names: &[*mut raw::RedisModuleString],
    args: &MultiArgs,
    now_us: i64,
    buffers: &mut MultiBuffers,
) -> Result<MultiOutcome, CommandError> {
    for &name in names {
        buffers.keys.push(LimiterKey::open(call, name)?);
    }
    let keys = &buffers.keys;
    let units = match args.grant {
        Grant::Whole => args.cost,
        Grant::Partial { .. } => {
            for ((key, quota), weight) in keys
                .iter()
                .zip(args.quotas_for(args.cost))
                .zip(&args.weights)
            {
                let units = quota
                    .grantable(key.held(), quota.cost(), now_us)
                    .map_err(mismatch_with(&quota))?;
                buffers.grantable.push((units, *weight));
            }
            multi::units_to_evaluate(args.cost, args.grant, buffers.grantable.iter().copied())
        }
    };
    for (key, quota) in keys.iter().zip(args.quotas_for(units)) {
        let granted = quota
            .evaluate(key.held(), Grant::Whole, now_us)
            .map_err(mismatch_with(&quota))?;
        buffers.per_limit.push(granted.evaluation.decision);
        buffers.commits.push(granted.evaluation.commit);
        buffers.costs.push(quota.counted_cost());
    }
    let mut bound = multi::bind(&buffers.per_limit, &buffers.costs)
        .ok_or(CommandError::Message("ERR RL.MULTI needs at least one key"))?;
    if !bound.decision.allowed {
        // Nothing is charged: the call's reset is when every limit, as it stands, is back to
        // unused. A limit that alone would have admitted reports its reset as if charged
        // (its own view of the call), so ask it again with a cost it can never admit.
        let mut reset_after_ms = 0;
        for ((key, quota), view) in keys
            .iter()
            .zip(args.quotas_for(units))
            .zip(&buffers.per_limit)
        {
            let as_it_stands = if view.allowed {
                let unchanged = quota.with_cost(u64::MAX);
                let granted = unchanged
                    .evaluate(key.held(), Grant::Whole, now_us)
                    .map_err(mismatch_with(&unchanged))?;
                granted.evaluation.decision.reset_after_ms
            } else {
                view.reset_after_ms
            };
            reset_after_ms = reset_after_ms.max(as_it_stands);
        }
        bound.decision.reset_after_ms = reset_after_ms;
        return Ok(MultiOutcome { units: 0, bound });
    }
    for (key, commit) in buffers.keys.drain(..).zip(buffers.commits.drain(..)) {
        if let Some(commit) = commit {
            buffers.writes.push(Replicated::new(key, commit));
        }
    }
    effects::commit(call, event, &mut buffers.writes)?;
    Ok(MultiOutcome { units, bound })
}

/// Turns the kind a key holds into the error for a call of `quota`.
fn mismatch_with(quota: &Quota) -> impl FnOnce(Kind) -> CommandError + '_ {
    move |held| kind_mismatch(held, quota.kind())
}
