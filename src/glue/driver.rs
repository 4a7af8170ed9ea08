//! The life of a limiter call, on one key or several: open keys, engine, effects.
//!
//! 1. **Open** every key (WRONGTYPE for another Redis type).
//! 2. **Decide**: the pure engine ([`engine`]) evaluates every quota against the key's
//!    limiter and the one `now` the command read (a key holding another algorithm is refused
//!    there). Nothing has been written yet, so any error leaves every key as it was.
//! 3. **Commit**, only when the call changes something: [`effects::commit`] applies all
//!    writes or none, sets their absolute expiries, propagates their effects as one op and
//!    announces them. A denied call, a peek, or a refund with nothing to give back writes and
//!    propagates nothing.
//!
//! A multi-key call works in buffers it reuses from call to call ([`super::scratch`]).

use std::ffi::CStr;

use redis_module::raw;
use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::engine::{self, Held, Verdict};
use redis_ratelimit_core::gcra::{CellOutcome, GcraParams};
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Change, KindAlgorithm, LimiterRef, Quota, QuotaVisitor};
use redis_ratelimit_core::regional::{self, Why};
use redis_ratelimit_core::time::US_PER_MS;
use redis_ratelimit_core::{Commit, Decision, Evaluation};
use redis_ratelimit_wire::args::CallArgs;
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::error::CommandError;

use super::api::Call;
use super::effects::{self, Replicated};
use super::lease::LeaseKey;
use super::scratch::Reusable;
use super::store::LimiterKey;

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
    args.quota.visit(AcquireOne {
        call,
        event,
        key,
        grant: args.grant,
        now_us,
    })
}

/// The rest of [`acquire`], monomorphised for the quota's algorithm: decided, encoded and
/// written as the algorithm's own types, with no dispatch on kinds after the one visit.
struct AcquireOne<'c, 'a> {
    call: &'c Call<'a>,
    event: &'c CStr,
    key: LimiterKey,
    grant: Grant,
    now_us: i64,
}

impl QuotaVisitor for AcquireOne<'_, '_> {
    type Output = Result<Outcome, CommandError>;

    fn visit<A: KindAlgorithm>(self, params: &A::Params) -> Self::Output {
        let held = self.key.held_as::<A::State>();
        let granted = engine::acquire_as::<A>(held, params, self.grant, self.now_us)?;
        let outcome = Outcome {
            units: granted.units,
            decision: granted.evaluation.decision,
        };
        if let Some(commit) = granted.evaluation.commit {
            effects::commit_one_as::<A>(self.call, self.event, self.key, commit)?;
        }
        Ok(outcome)
    }
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
    let granted = engine::acquire(held, &args.quota, args.grant, now_us)?;
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
    let evaluation = engine::refund(key.held(), quota, now_us)?;
    let decision = evaluation.decision;
    commit_one(call, event, key, evaluation)?;
    Ok(decision)
}

/// Frees `holder`'s in-flight slot in one key: whether that live holder was there (the key
/// goes with its last holder).
pub fn release(
    call: &Call<'_>,
    event: &CStr,
    name: *mut raw::RedisModuleString,
    holder: &HolderId,
    now_us: i64,
) -> Result<bool, CommandError> {
    let key = LimiterKey::open(call, name)?;
    match engine::release(key.held(), holder, now_us)? {
        Some(commit) => record(call, event, key, commit).map(|()| true),
        None => Ok(false),
    }
}

/// A `CL.THROTTLE` call on one key: commits what it takes, and returns redis-cell's view.
pub fn throttle(
    call: &Call<'_>,
    event: &CStr,
    name: *mut raw::RedisModuleString,
    params: &GcraParams,
    now_us: i64,
) -> Result<CellOutcome, CommandError> {
    let key = LimiterKey::open(call, name)?;
    let (evaluation, cell) = engine::throttle(key.held(), params, now_us)?;
    commit_one(call, event, key, evaluation)?;
    Ok(cell)
}

/// Commits an evaluation of one key, if it changes anything.
fn commit_one(
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
fn record(
    call: &Call<'_>,
    event: &CStr,
    key: LimiterKey,
    commit: Commit<Change>,
) -> Result<(), CommandError> {
    effects::commit_one(call, event, key, commit)
}

/// The working memory of a multi-limit call (see [`super::scratch`]).
#[derive(Default)]
pub struct MultiBuffers {
    keys: Vec<LimiterKey>,
    writes: Vec<Replicated>,
    /// The engine's: each limit's own view of the call (for the reply) and the writes.
    pub engine: engine::Buffers,
}

impl Reusable for MultiBuffers {
    fn clear(&mut self) {
        self.keys.clear();
        self.writes.clear();
        self.engine.clear();
    }
}

impl Held for LimiterKey {
    fn held(&self) -> Option<LimiterRef<'_>> {
        LimiterKey::held(self)
    }
}

/// A call on several distinct keys, limit `i` on `names[i]`: every limit admits its cost and
/// all are charged, or nothing is written. Each limit's view of the call is left in
/// `buffers.engine`.
pub fn acquire_many(
    call: &Call<'_>,
    event: &CStr,
    names: &[*mut raw::RedisModuleString],
    args: &MultiArgs,
    now_us: i64,
    buffers: &mut MultiBuffers,
) -> Result<Verdict, CommandError> {
    for &name in names {
        buffers.keys.push(LimiterKey::open(call, name)?);
    }
    let verdict = engine::acquire_many(&buffers.keys, args.limits(), now_us, &mut buffers.engine)?;
    if verdict.bound.decision.allowed {
        for (key, commit) in buffers.keys.drain(..).zip(buffers.engine.take_commits()) {
            if let Some(commit) = commit {
                buffers.writes.push(Replicated::new(key, commit));
            }
        }
        effects::commit(call, event, &mut buffers.writes)?;
    }
    Ok(verdict)
}

/// What a regional call decided, for its reply.
#[derive(Clone, Copy, Debug)]
pub struct RegionalOutcome {
    /// Whether the call was admitted, and by which part.
    pub allowed: bool,
    /// Why.
    pub why: Why,
    /// The floor's own decision (what the headers show: the region's own quota).
    pub floor: Decision,
    /// The units left in the live lease after the call (0 when none lives).
    pub lease_units: u64,
}

/// A region's call: its floor (`floor_name`, checked against `floor`, of the floor's cost),
/// then, if the floor denies, the lease in `lease_name`. Both keys are opened and checked
/// before anything is decided; then exactly one of them is written: the floor's commit when
/// the floor admitted, or the lease's units left when the lease paid. An in-flight call's
/// holder is the floor's commit whichever admitted it (its lease is only read).
pub fn regional(
    call: &Call<'_>,
    event: &CStr,
    floor_name: *mut raw::RedisModuleString,
    lease_name: *mut raw::RedisModuleString,
    floor: &Quota,
    now_us: i64,
) -> Result<RegionalOutcome, CommandError> {
    let floor_key = LimiterKey::open(call, floor_name)?;
    let mut lease_key = LeaseKey::open(call, lease_name)?;
    let held = lease_key.lease();
    let admission = regional::admit(Some((floor_key.held(), floor)), floor.cost(), held, now_us)?;
    let Some(granted) = admission.floor else {
        return Err(CommandError::Message("ERR a regional call has a floor"));
    };
    let outcome = RegionalOutcome {
        allowed: admission.allowed,
        why: admission.why,
        floor: granted.evaluation.decision,
        lease_units: admission.lease_units,
    };
    if let Some(commit) = granted.evaluation.commit {
        effects::commit_one(call, event, floor_key, commit)?;
    }
    if let Some(left) = admission.lease {
        let expires_at_ms = left.expires_at_us.div_euclid(US_PER_MS_I64);
        effects::commit_lease(call, event, &mut lease_key, left.units, expires_at_ms)?;
    }
    Ok(outcome)
}

/// Installs a lease of `units` until `expires_at_ms` in `name`, replacing what it held:
/// the units the replaced lease had left at `now_us` (0 if none lived).
pub fn region_lease(
    call: &Call<'_>,
    event: &CStr,
    name: *mut raw::RedisModuleString,
    units: u64,
    expires_at_ms: i64,
    now_us: i64,
) -> Result<u64, CommandError> {
    let mut key = LeaseKey::open(call, name)?;
    let replaced = key.lease().map_or(0, |lease| lease.live_units(now_us));
    effects::commit_lease(call, event, &mut key, units, expires_at_ms)?;
    Ok(replaced)
}

/// Microseconds in a millisecond, signed.
const US_PER_MS_I64: i64 = US_PER_MS as i64;
