//! Running one algorithm against one key: the shared body of every limiter command.
//!
//! Open the key, read the clock once, evaluate, and only if the call changes the state:
//! store it, set its absolute expiry, replicate the effect (never the command) and announce
//! the write. Then reply. A denied call, a peek, or a refund with nothing to give back
//! writes and propagates nothing.

use std::ffi::{CStr, c_void};

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode};
use super::commands::SET_STATE;
use super::reply::{self, Reply};
use super::stats::LimiterCommand;
use super::{clock, datatype};
use crate::core::gcra::{CellOutcome, GcraAlgorithm, GcraParams};
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
        Operation::Acquire => write::<A, _>(call, command.event, key_name, params, decide::<A>)?,
        Operation::Refund => write::<A, _>(call, command.event, key_name, params, give_back::<A>)?,
    };
    respond(call, command, &decision);
    Ok(())
}

/// `CL.THROTTLE`: the GCRA, replying with redis-cell's fields.
pub fn throttle(
    call: &Call<'_>,
    command: &LimiterCommand,
    key_name: *mut raw::RedisModuleString,
    params: &GcraParams,
) -> Result<(), CommandError> {
    let outcome: CellOutcome = write::<GcraAlgorithm, _>(
        call,
        command.event,
        key_name,
        params,
        GcraAlgorithm::throttle,
    )?;
    respond(call, command, &outcome);
    Ok(())
}

fn respond(call: &Call<'_>, command: &LimiterCommand, outcome: &impl Reply) {
    command.record(outcome.allowed());
    reply::send(call, outcome);
}

/// An evaluation and what the client is told about it.
type Evaluator<A, R> = fn(
    Option<&<A as Algorithm>::State>,
    &<A as Algorithm>::Params,
    i64,
) -> (Evaluation<<A as Algorithm>::Change>, R);

fn decide<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    now_us: i64,
) -> (Evaluation<A::Change>, Decision) {
    let evaluation = A::evaluate(state, params, now_us);
    let decision = evaluation.decision;
    (evaluation, decision)
}

fn give_back<A: Algorithm>(
    state: Option<&A::State>,
    params: &A::Params,
    now_us: i64,
) -> (Evaluation<A::Change>, Decision) {
    let evaluation = A::refund(state, params, now_us);
    let decision = evaluation.decision;
    (evaluation, decision)
}

/// Opens a key for a command; failing to is an error.
pub fn open(
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

/// Evaluates with `evaluator`, records the commit if any, and returns what the client is
/// told.
fn write<A: Effect, R>(
    call: &Call<'_>,
    event: &CStr,
    key_name: *mut raw::RedisModuleString,
    params: &A::Params,
    evaluator: Evaluator<A, R>,
) -> Result<R, CommandError> {
    let key = open(call, key_name, KeyMode::Write)?;
    let limiter_type = datatype::limiter_type();
    let now_us = clock::now_us();
    // Store the commit, if any, and keep what replicas must apply.
    let (reply, effect) = match key.content(limiter_type) {
        KeyContent::Other => return Err(CommandError::WrongType),
        KeyContent::Empty => {
            let (Evaluation { commit, .. }, reply) = evaluator(None, params, now_us);
            let effect = match commit {
                Some(Commit {
                    change,
                    expires_at_ms,
                }) => {
                    let state = A::create(change.clone());
                    let effect = limiter::encode_effect::<A>(expires_at_ms, &state, &change);
                    store_new(&key, value::boxed(state))?;
                    Some((effect, expires_at_ms))
                }
                None => None,
            };
            (reply, effect)
        }
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type and nothing else borrows it
            // while the key is open.
            let state = unsafe { value::state_mut::<A::State>(raw_value) }
                .map_err(|held| kind_mismatch(held, A::State::KIND))?;
            let (Evaluation { commit, .. }, reply) = evaluator(Some(state), params, now_us);
            let effect = commit.map(
                |Commit {
                     change,
                     expires_at_ms,
                 }| {
                    let replicated = change.clone();
                    A::apply(state, change);
                    (
                        limiter::encode_effect::<A>(expires_at_ms, state, &replicated),
                        expires_at_ms,
                    )
                },
            );
            (reply, effect)
        }
    };
    if let Some((effect, expires_at_ms)) = effect {
        record_write(
            call,
            &key,
            event,
            key_name,
            effect.as_bytes(),
            expires_at_ms,
        );
    }
    Ok(reply)
}

/// Puts a new value into an empty (or replaced) key, freeing it if Redis refuses it.
pub fn store_new(key: &Key, raw_value: *mut c_void) -> Result<(), CommandError> {
    key.set_value(datatype::limiter_type(), raw_value)
        .map_err(|refused| {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { value::free(refused) };
            CommandError::Message("ERR the limiter could not be stored")
        })
}

/// The error for a key holding another kind of limiter (`held`) than a command works on.
pub fn kind_mismatch(held: Option<Kind>, wanted: Kind) -> CommandError {
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
