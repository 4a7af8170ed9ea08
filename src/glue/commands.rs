//! The command bodies: read the clock once, parse the arguments (pure, in
//! [`redis_ratelimit_wire::args`], remembered per command in a [`Memo`]), hand over to the
//! [`driver`], count and reply.

use std::cell::Cell;

use redis_module::raw;

use super::api::{ArgBuffer, Call};
use super::driver::{self, MultiBuffers, Outcome};
use super::stats;
use super::{clock, config, reply, scratch};
use redis_ratelimit_core::Decision;
use redis_ratelimit_core::gcra::GcraParams;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_wire::args::multi::{self, MultiArgs};
use redis_ratelimit_wire::args::regional;
use redis_ratelimit_wire::args::remembered::{self, MultiContext};
use redis_ratelimit_wire::args::{self, CallArgs, Memo, Settings};
use redis_ratelimit_wire::commands::{Command, Syntax};
use redis_ratelimit_wire::error::CommandError;

/// Number of kinds, for per-kind tables.
const KINDS: usize = Kind::ALL.len();

// The last arguments each command parsed (commands run on the main thread only).
thread_local! {
    // One memo per kind, so services alternating algorithms keep every parse.
    static CALL_ARGS: [Memo<(Kind, Settings), CallArgs>; KINDS] =
        const { [const { Memo::new() }; KINDS] };
    static PEEK_ARGS: Memo<Settings, CallArgs> = const { Memo::new() };
    static REFUND_ARGS: Memo<Settings, Quota> = const { Memo::new() };
    static THROTTLE_ARGS: Memo<(), GcraParams> = const { Memo::new() };
    static MULTI_ARGS: Memo<MultiContext, MultiArgs> = const { Memo::new() };
    static MULTI_BUFFERS: Cell<Option<MultiBuffers>> = const { Cell::new(None) };
    static REGIONAL_ARGS: Memo<Settings, Quota> = const { Memo::new() };
}

/// The command's key: argument 1.
fn key_name(call: &Call<'_>) -> Result<*mut raw::RedisModuleString, CommandError> {
    // Not `ok_or`: the error it builds would be dropped on every call.
    match call.arg(1) {
        Some(name) => Ok(name),
        None => Err(CommandError::WrongArity),
    }
}

/// `RL.TOKENBUCKET key capacity rate [cost] [PARTIAL [MIN m] | MAXWAIT ms]`
pub fn token_bucket(call: &Call<'_>) -> Result<(), CommandError> {
    limiter_call(call, Command::TokenBucket)
}

/// `RL.SLIDING key limit window [cost] [PARTIAL [MIN m]]`
pub fn sliding(call: &Call<'_>) -> Result<(), CommandError> {
    limiter_call(call, Command::Sliding)
}

/// `RL.FIXED key limit window [cost] [PARTIAL [MIN m]]`
pub fn fixed(call: &Call<'_>) -> Result<(), CommandError> {
    limiter_call(call, Command::Fixed)
}

/// `RL.SLIDINGLOG key limit window [cost] [PARTIAL [MIN m]]`
pub fn sliding_log(call: &Call<'_>) -> Result<(), CommandError> {
    limiter_call(call, Command::SlidingLog)
}

/// The server settings arguments are checked against.
fn settings() -> Settings {
    Settings {
        max_log_entries: u64::try_from(config::MAX_LOG_ENTRIES.get()).unwrap_or(1),
        max_holders: u64::try_from(config::MAX_HOLDERS.get()).unwrap_or(1),
    }
}

/// A limiter command (of [`Syntax::Call`]) on its key, with the algorithm's arguments after
/// the key.
fn limiter_call(call: &Call<'_>, command: Command) -> Result<(), CommandError> {
    let Syntax::Call(kind) = command.syntax() else {
        return Err(CommandError::WrongArity);
    };
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let settings = settings();
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(2.., &mut buffer);
    let (outcome, grant) = CALL_ARGS.with(|memos| {
        let Some(memo) = memos.get(kind as usize) else {
            return Err(CommandError::WrongArity);
        };
        memo.with(
            arguments,
            (kind, settings),
            remembered::limiter_call,
            |parsed| {
                driver::acquire(call, command.name(), name, parsed, now_us)
                    .map(|outcome| (outcome, parsed.grant))
            },
        )
    })??;
    respond(call, command, outcome, grant);
    Ok(())
}

/// `RL.PEEK key ALGORITHM args... [cost] [PARTIAL [MIN m]]`: the reply the real call would
/// get now; changes nothing.
pub fn peek(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let settings = settings();
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(2.., &mut buffer);
    let (outcome, grant) = PEEK_ARGS.with(|memo| {
        memo.with(arguments, settings, remembered::peek, |parsed| {
            driver::peek(call, name, parsed, now_us).map(|outcome| (outcome, parsed.grant))
        })
    })??;
    respond(call, Command::Peek, outcome, grant);
    Ok(())
}

/// `RL.REFUND key ALGORITHM args... [cost]`: gives back `cost` units, never beyond the
/// limit.
pub fn refund(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let settings = settings();
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(2.., &mut buffer);
    let decision = REFUND_ARGS.with(|memo| {
        memo.with(arguments, settings, remembered::refund, |quota| {
            driver::refund(call, Command::Refund.name(), name, quota, now_us)
        })
    })??;
    stats::record(Command::Refund, decision.allowed);
    reply::decision(call, &decision);
    Ok(())
}

/// `RL.ACQUIRE key limit holder ttl_ms`: takes (or renews) one of `limit` in-flight slots
/// for `holder` until `ttl_ms` from now.
///
/// Not memoized: the holder changes with every request.
pub fn acquire(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let quota = args::quota::acquire(
        call.args_bytes(2.., &mut ArgBuffer::new()),
        settings().max_holders,
    )?;
    let call_args = CallArgs {
        quota,
        grant: Grant::Whole,
    };
    let outcome = driver::acquire(call, Command::Acquire.name(), name, &call_args, now_us)?;
    respond(call, Command::Acquire, outcome, Grant::Whole);
    Ok(())
}

/// `RL.RELEASE key holder`: 1 if that live holder's slot was freed, 0 if it was unknown or
/// had expired (a missing key included); the key goes with its last holder.
pub fn release(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let holder = args::quota::holder(call.arg_bytes(2))?;
    let now_us = clock::now_us()?;
    let released = driver::release(call, Command::Release.name(), name, &holder, now_us)?;
    stats::record(Command::Release, released);
    call.reply_integer(i64::from(released));
    Ok(())
}

/// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command and reply.
pub fn throttle(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(2.., &mut buffer);
    let params =
        THROTTLE_ARGS.with(|memo| memo.with(arguments, (), remembered::throttle, |p| *p))?;
    let cell = driver::throttle(call, Command::Throttle.name(), name, &params, now_us)?;
    stats::record(Command::Throttle, !cell.limited);
    reply::cell(call, &cell);
    Ok(())
}

/// `RL.MULTI numkeys key [key ...] limit [limit ...] [COST c] [WEIGHTS w1 ... wN]
/// [PARTIAL [MIN m]]`: every limit admits its cost and all are charged, or none is.
pub fn multi(call: &Call<'_>) -> Result<(), CommandError> {
    if call.is_keys_position_request() {
        report_counted_keys(call);
        return Ok(());
    }
    let key_count = multi::key_count(call.arg_bytes(1))?;
    let first_limit = key_count.checked_add(2).ok_or(CommandError::WrongArity)?;
    let names = call.arg_strings(2..first_limit);
    if names.len() != key_count {
        return Err(CommandError::WrongArity);
    }
    let mut key_buffer = ArgBuffer::new();
    let key_bytes = call.args_bytes(2..first_limit, &mut key_buffer);
    if let Some(index) = multi::repeated_key(key_bytes) {
        return Err(multi::repeated_key_error(
            key_bytes.get(index).copied().unwrap_or_default(),
        ));
    }
    let now_us = clock::now_us()?;
    let settings = settings();
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(first_limit.., &mut buffer);
    scratch::reusing(&MULTI_BUFFERS, |buffers| {
        let context = MultiContext {
            key_count,
            settings,
        };
        let (outcome, grant) = MULTI_ARGS
            .with(|memo| {
                memo.with(arguments, context, remembered::multi_limits, |parsed| {
                    driver::acquire_many(
                        call,
                        Command::Multi.name(),
                        names,
                        parsed,
                        now_us,
                        buffers,
                    )
                    .map(|outcome| (outcome, parsed.grant))
                })
            })
            .map_err(|error| error.naming_keys(key_bytes))??;
        stats::record(Command::Multi, outcome.bound.decision.allowed);
        let first = first_field(outcome.units, &outcome.bound.decision, grant);
        reply::multi(call, &outcome, buffers.engine.per_limit(), first);
        Ok(())
    })
}

/// `RL.REGIONAL floor_key lease_key ALGORITHM <parameters> [cost]`: a region's call, taken
/// from its floor, or else from its lease (both keys in one slot on a Cluster).
pub fn regional(call: &Call<'_>) -> Result<(), CommandError> {
    let floor_name = key_name(call)?;
    let Some(lease_name) = call.arg(2) else {
        return Err(CommandError::WrongArity);
    };
    if call.arg_bytes(1) == call.arg_bytes(2) {
        return Err(regional::SAME_KEY);
    }
    let now_us = clock::now_us()?;
    let settings = settings();
    let mut buffer = ArgBuffer::new();
    let arguments = call.args_bytes(3.., &mut buffer);
    let outcome = REGIONAL_ARGS.with(|memo| {
        memo.with(arguments, settings, remembered::regional, |floor| {
            driver::regional(
                call,
                Command::Regional.name(),
                floor_name,
                lease_name,
                floor,
                now_us,
            )
        })
    })??;
    stats::record(Command::Regional, outcome.allowed);
    reply::regional(call, &outcome);
    Ok(())
}

/// `RL.REGIONLEASE key units expires_at_ms`: installs a region's lease, replacing the one
/// the key held; replies with the units the replaced lease had left (0 if none lived).
///
/// Not memoized: every lease has its own expiry.
pub fn region_lease(call: &Call<'_>) -> Result<(), CommandError> {
    let name = key_name(call)?;
    let now_us = clock::now_us()?;
    let lease = regional::lease(call.args_bytes(2.., &mut ArgBuffer::new()), now_us)?;
    let replaced = driver::region_lease(
        call,
        Command::RegionLease.name(),
        name,
        lease.units,
        lease.expires_at_ms,
        now_us,
    )?;
    stats::record(Command::RegionLease, true);
    call.reply_integer(i64::try_from(replaced).unwrap_or(i64::MAX));
    Ok(())
}

/// Tells Redis where the keys of `numkeys key [key ...]` are. Redis 7.0's cluster routing
/// asks the command itself (`getkeys-api`) rather than reading key specs, which only
/// `COMMAND GETKEYS` and ACLs use there: without this, keys of another node would be
/// served locally and keys of several slots would not get `CROSSSLOT`.
fn report_counted_keys(call: &Call<'_>) {
    let Ok(key_count) = multi::key_count(call.arg_bytes(1)) else {
        return;
    };
    let first_key = 2;
    for index in (first_key..call.arg_count()).take(key_count) {
        call.report_key_at(index);
    }
}

/// Counts and replies to a single-key call.
fn respond(call: &Call<'_>, command: Command, outcome: Outcome, grant: Grant) {
    stats::record(command, outcome.decision.allowed);
    let first = first_field(outcome.units, &outcome.decision, grant);
    reply::decision_with_first(call, &outcome.decision, first);
}

/// Field 1 of a reply: whether the call was admitted, or under a partial grant the units
/// granted.
fn first_field(units: u64, decision: &Decision, grant: Grant) -> i64 {
    match grant {
        Grant::Whole => i64::from(decision.allowed),
        Grant::Partial { .. } => i64::try_from(units).unwrap_or(i64::MAX),
    }
}
