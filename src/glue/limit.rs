//! Running one algorithm against one key: the shared body of every limiter command.
//!
//! Open the key, read the clock once, evaluate, and only if the call changes the state:
//! store it, set its absolute expiry, replicate the effect (never the command) and announce
//! the write. Then reply. A denied call, a peek, or a refund with nothing to give back
//! writes and propagates nothing.

use std::ffi::CStr;

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode};
use super::commands::SET_STATE;
use super::reply::{self, ReplyShape};
use super::stats::CommandStats;
use super::{clock, datatype};
use crate::core::{Algorithm, Commit, Decision, Evaluation};
use crate::error::CommandError;
use crate::limiter::{self, Effect, Kind, KindState};
use crate::value;

/// What a command does to its limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Decide a call and record it if admitted.
    Acquire,
    /// Report what a call would get, changing nothing.
    Peek,
    /// Give back a call's cost.
    Refund,
}

/// How a limiter command presents itself.
pub struct LimiterCommand {
    /// Keyspace event name of its writes (also its name in logs).
    pub event: &'static CStr,
    /// Its `INFO` counters.
    pub stats: &'static CommandStats,
    /// The shape of its reply.
    pub shape: ReplyShape,
}

/// Runs `operation` of algorithm `A` on `key_name`, then counts and replies.
pub fn run<A: Effect>(
    call: &Call<'_>,
    command: &LimiterCommand,
    operation: Operation,
    key_name: *mut raw::RedisModuleString,
    params: &A::Params,
) -> Result<(), CommandError> {
    let decision = match operation {
        Operation::Peek => peek::<A>(call, key_name, params)?,
        Operation::Acquire => write::<A>(call, command.event, key_name, params, A::evaluate)?,
        Operation::Refund => write::<A>(call, command.event, key_name, params, A::refund)?,
    };
    command.stats.record(decision.allowed);
    reply::send(call, command.shape, &decision);
    Ok(())
}

type Evaluator<A> = fn(
    Option<&<A as Algorithm>::State>,
    &<A as Algorithm>::Params,
    i64,
) -> Evaluation<<A as Algorithm>::Change>;

fn open(
    call: &Call<'_>,
    key_name: *mut raw::RedisModuleString,
    mode: KeyMode,
) -> Result<Key, CommandError> {
    call.open_key(key_name, mode)
        .ok_or(CommandError::Message("ERR the key could not be opened"))
}

/// Evaluates without writing: works on replicas and creates nothing.
fn peek<A: Effect>(
    call: &Call<'_>,
    key_name: *mut raw::RedisModuleString,
    params: &A::Params,
) -> Result<Decision, CommandError> {
    // Opening a missing (or, on a replica, logically expired) key for reading gives nothing.
    let key = call.open_key(key_name, KeyMode::Read);
    let content = key.as_ref().map_or(KeyContent::Empty, |key| {
        key.content(datatype::limiter_type())
    });
    let now_us = clock::now_us();
    let evaluation = match content {
        KeyContent::Other => return Err(CommandError::WrongType),
        KeyContent::Empty => A::evaluate(None, params, now_us),
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type; nothing mutates it while the
            // key is open.
            let state = unsafe { value::state_ref::<A::State>(raw_value) }
                .map_err(|held| kind_mismatch(held, A::State::KIND))?;
            A::evaluate(Some(state), params, now_us)
        }
    };
    Ok(evaluation.decision)
}

/// Evaluates with `evaluator` and records the commit, if any.
fn write<A: Effect>(
    call: &Call<'_>,
    event: &CStr,
    key_name: *mut raw::RedisModuleString,
    params: &A::Params,
    evaluator: Evaluator<A>,
) -> Result<Decision, CommandError> {
    let key = open(call, key_name, KeyMode::Write)?;
    let limiter_type = datatype::limiter_type();
    let now_us = clock::now_us();
    match key.content(limiter_type) {
        KeyContent::Other => Err(CommandError::WrongType),
        KeyContent::Empty => {
            let Evaluation { decision, commit } = evaluator(None, params, now_us);
            if let Some(Commit {
                change,
                expires_at_ms,
            }) = commit
            {
                let state = A::create(change.clone());
                let effect = limiter::encode_effect::<A>(expires_at_ms, &state, &change);
                if let Err(raw_value) = key.set_value(limiter_type, value::boxed(state)) {
                    // SAFETY: Redis refused the value, so it is still ours to free.
                    unsafe { value::free(raw_value) };
                    return Err(CommandError::Message("ERR the limiter could not be stored"));
                }
                record_write(
                    call,
                    &key,
                    event,
                    key_name,
                    effect.as_bytes(),
                    expires_at_ms,
                );
            }
            Ok(decision)
        }
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type and nothing else borrows it
            // while the key is open.
            let state = unsafe { value::state_mut::<A::State>(raw_value) }
                .map_err(|held| kind_mismatch(held, A::State::KIND))?;
            let Evaluation { decision, commit } = evaluator(Some(state), params, now_us);
            if let Some(Commit {
                change,
                expires_at_ms,
            }) = commit
            {
                let replicated = change.clone();
                A::apply(state, change);
                let effect = limiter::encode_effect::<A>(expires_at_ms, state, &replicated);
                record_write(
                    call,
                    &key,
                    event,
                    key_name,
                    effect.as_bytes(),
                    expires_at_ms,
                );
            }
            Ok(decision)
        }
    }
}

fn kind_mismatch(held: Option<Kind>, wanted: Kind) -> CommandError {
    match held {
        Some(held) => CommandError::KindMismatch { held, wanted },
        None => CommandError::Message("ERR the key holds a limiter this module cannot read"),
    }
}

/// Sets the expiry, replicates the effect (which carries the absolute expiry) as one
/// `RL.SETSTATE key effect` (one op, so no MULTI/EXEC wrapper), and announces the write to
/// WATCH, client tracking and keyspace notifications.
fn record_write(
    call: &Call<'_>,
    key: &Key,
    event: &CStr,
    key_name: *mut raw::RedisModuleString,
    effect: &[u8],
    expires_at_ms: i64,
) {
    key.expire_at_ms(expires_at_ms);
    call.replicate(SET_STATE, key_name, effect);
    call.announce_write(event, key_name);
}
