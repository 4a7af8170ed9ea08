//! Running one algorithm against one key: the shared body of every limiter command.
//!
//! Open the key, read the clock once, evaluate, and only if the call changes the state:
//! store it, set its absolute expiry, replicate the resulting state (never the command) and
//! announce the write. Then reply. A denied call writes and propagates nothing.

use std::ffi::CStr;

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode};
use super::commands::SET_STATE;
use super::stats::CommandStats;
use super::{clock, datatype};
use crate::core::{Algorithm, Commit, Decision, Evaluation};
use crate::error::CommandError;
use crate::limiter::{self, KindState};
use crate::value;

/// Evaluates a limiter call on `key_name`, records an admitted call, counts and replies.
pub fn acquire<A>(
    call: &Call<'_>,
    command: &'static CStr,
    stats: &CommandStats,
    key_name: *mut raw::RedisModuleString,
    params: &A::Params,
) -> Result<(), CommandError>
where
    A: Algorithm,
    A::State: KindState,
{
    let key = call
        .open_key(key_name, KeyMode::Write)
        .ok_or(CommandError::Message("ERR the key could not be opened"))?;
    let limiter_type = datatype::limiter_type();
    let now_us = clock::now_us();
    let decision = match key.content(limiter_type) {
        KeyContent::Other => return Err(CommandError::WrongType),
        KeyContent::Empty => {
            let Evaluation { decision, commit } = A::evaluate(None, params, now_us);
            if let Some(Commit {
                change,
                expires_at_ms,
            }) = commit
            {
                let state = A::create(change);
                let encoded = limiter::encode(state.as_limiter());
                if let Err(raw_value) = key.set_value(limiter_type, value::boxed(state)) {
                    // SAFETY: Redis refused the value, so it is still ours to free.
                    unsafe { value::free(raw_value) };
                    return Err(CommandError::Message("ERR the limiter could not be stored"));
                }
                record_write(
                    call,
                    &key,
                    command,
                    key_name,
                    encoded.as_bytes(),
                    expires_at_ms,
                );
            }
            decision
        }
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type and nothing else borrows it
            // while the key is open.
            let state = unsafe { value::state_mut::<A::State>(raw_value) }
                .map_err(|held| kind_mismatch(held, A::State::KIND))?;
            let Evaluation { decision, commit } = A::evaluate(Some(state), params, now_us);
            if let Some(Commit {
                change,
                expires_at_ms,
            }) = commit
            {
                A::apply(state, change);
                let encoded = limiter::encode(state.as_limiter());
                record_write(
                    call,
                    &key,
                    command,
                    key_name,
                    encoded.as_bytes(),
                    expires_at_ms,
                );
            }
            decision
        }
    };
    reply(call, stats, &decision);
    Ok(())
}

fn kind_mismatch(held: Option<limiter::Kind>, wanted: limiter::Kind) -> CommandError {
    match held {
        Some(held) => CommandError::KindMismatch { held, wanted },
        None => CommandError::Message("ERR the key holds a limiter this module cannot read"),
    }
}

/// Sets the expiry, replicates the new state with its absolute expiry as one
/// `RL.SETSTATE key state expire_at_ms` (one op, so no MULTI/EXEC wrapper), and announces
/// the write to WATCH, client tracking and keyspace notifications.
fn record_write(
    call: &Call<'_>,
    key: &Key,
    command: &CStr,
    key_name: *mut raw::RedisModuleString,
    state: &[u8],
    expires_at_ms: i64,
) {
    key.expire_at_ms(expires_at_ms);
    call.replicate(SET_STATE, key_name, state, expires_at_ms);
    call.announce_write(command, key_name);
}

fn reply(call: &Call<'_>, stats: &CommandStats, decision: &Decision) {
    stats.record(decision.allowed);
    call.reply_integers(&decision.reply_fields());
}
