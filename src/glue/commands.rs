//! The command table: names, flags, arity and key specs, and the thin handlers.
//!
//! Each handler parses its arguments (pure, in [`crate::args`]), then hands over to the one
//! shared driver in [`super::limit`]. Adding an algorithm means one parser, one table row
//! and one handler line here.

use std::ffi::{CStr, c_int};
use std::mem::size_of;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode, api, log};
use super::limit::{self, Operation};
use super::stats::{self, LimiterCommand};
use super::{config, datatype};
use crate::args::{self, Memo};
use crate::core::Algorithm;
use crate::core::fixed_window::{FixedWindowAlgorithm, WindowParams};
use crate::core::gcra::GcraParams;
use crate::core::sliding_log::{SlidingLogAlgorithm, SlidingLogParams};
use crate::core::sliding_window::SlidingWindowAlgorithm;
use crate::core::token_bucket::{TokenBucketAlgorithm, TokenBucketParams};
use crate::error::CommandError;
use crate::limiter::{self, EffectBody, Kind, KindState};
use crate::value;

/// The internal command that carries replicated and AOF-rewritten state.
pub const SET_STATE: &CStr = c"rl.setstate";

/// How a command accesses its key (declared to Redis for ACLs and Cluster routing).
#[derive(Clone, Copy)]
enum KeyAccess {
    /// Reads and updates the key's value.
    ReadWrite,
    /// Only reads the key's value.
    ReadOnly,
}

/// A module command's registration.
struct CommandSpec {
    name: &'static CStr,
    handler: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *mut *mut raw::RedisModuleString,
        c_int,
    ) -> c_int,
    flags: &'static CStr,
    /// Redis arity: the argument count with the name; negative means "at least".
    arity: c_int,
    key_access: KeyAccess,
    summary: &'static CStr,
    complexity: &'static CStr,
}

/// Defines the C entry point of a command around a safe body.
macro_rules! entry_point {
    ($entry:ident => $body:path) => {
        unsafe extern "C" fn $entry(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            // SAFETY: Redis calls command functions with a live context and `argc` arguments.
            let call = unsafe { Call::new(ctx, argv, argc) };
            dispatch(&call, $body)
        }
    };
}

entry_point!(token_bucket_entry => token_bucket);
entry_point!(sliding_entry => sliding);
entry_point!(fixed_entry => fixed);
entry_point!(sliding_log_entry => sliding_log);
entry_point!(throttle_entry => throttle);
entry_point!(peek_entry => peek);
entry_point!(refund_entry => refund);
entry_point!(set_state_entry => set_state);

const COMMANDS: [CommandSpec; 8] = [
    CommandSpec {
        name: c"rl.tokenbucket",
        handler: token_bucket_entry,
        flags: c"write deny-oom fast",
        arity: -4,
        key_access: KeyAccess::ReadWrite,
        summary: c"Takes cost tokens from a token bucket if it holds enough",
        complexity: c"O(1)",
    },
    CommandSpec {
        name: c"rl.sliding",
        handler: sliding_entry,
        flags: c"write deny-oom fast",
        arity: -4,
        key_access: KeyAccess::ReadWrite,
        summary: c"Counts cost units in a sliding window (weighted previous + current window)",
        complexity: c"O(1)",
    },
    CommandSpec {
        name: c"rl.fixed",
        handler: fixed_entry,
        flags: c"write deny-oom fast",
        arity: -4,
        key_access: KeyAccess::ReadWrite,
        summary: c"Counts cost units in fixed windows aligned to the Unix epoch",
        complexity: c"O(1)",
    },
    CommandSpec {
        name: c"rl.slidinglog",
        handler: sliding_log_entry,
        flags: c"write deny-oom",
        arity: -4,
        key_access: KeyAccess::ReadWrite,
        summary: c"Counts cost units in an exact sliding window (a log of admitted units)",
        complexity: c"O(log N + cost), amortised",
    },
    CommandSpec {
        name: c"cl.throttle",
        handler: throttle_entry,
        flags: c"write deny-oom fast",
        arity: -5,
        key_access: KeyAccess::ReadWrite,
        summary:
            c"redis-cell compatible GCRA rate limiting, with server time and effects replication",
        complexity: c"O(1)",
    },
    CommandSpec {
        name: c"rl.peek",
        handler: peek_entry,
        flags: c"readonly fast",
        arity: -5,
        key_access: KeyAccess::ReadOnly,
        summary: c"Returns what a limiter call would return now, changing nothing",
        complexity: c"O(1); O(log N) for SLIDINGLOG",
    },
    CommandSpec {
        name: c"rl.refund",
        handler: refund_entry,
        flags: c"write fast",
        arity: -5,
        key_access: KeyAccess::ReadWrite,
        summary: c"Gives back the cost of a call that was admitted but not performed",
        complexity: c"O(1); O(cost) for SLIDINGLOG",
    },
    CommandSpec {
        name: SET_STATE,
        handler: set_state_entry,
        flags: c"write deny-oom",
        arity: 3,
        key_access: KeyAccess::ReadWrite,
        summary: c"Internal: applies a limiter state computed by the primary",
        complexity: c"O(1); O(N) for a whole SLIDINGLOG",
    },
];

/// Runs a command body; turns its error, or a panic (a bug), into an error reply.
fn dispatch(call: &Call<'_>, body: fn(&Call<'_>) -> Result<(), CommandError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(|| body(call))) {
        Ok(Ok(())) => {}
        Ok(Err(CommandError::WrongArity)) => call.reply_wrong_arity(),
        Ok(Err(error)) => call.reply_error(&error.to_string()),
        Err(_) => {
            log(
                c"warning",
                "ratelimit: internal error in a command; see the panic above",
            );
            call.reply_error("ERR internal error in the ratelimit module (see the server log)");
        }
    }
    raw::REDISMODULE_OK as c_int
}

fn check_arity(call: &Call<'_>, min: usize, max: usize) -> Result<(), CommandError> {
    if (min..=max).contains(&call.arg_count()) {
        Ok(())
    } else {
        Err(CommandError::WrongArity)
    }
}

fn key_name(call: &Call<'_>) -> Result<*mut raw::RedisModuleString, CommandError> {
    call.arg(1).ok_or(CommandError::WrongArity)
}

/// The arguments after `skip` fixed ones.
fn args_after<'a>(call: &Call<'a>, skip: usize) -> Result<super::api::ArgList<'a>, CommandError> {
    call.args_from(skip).ok_or(CommandError::WrongArity)
}

// The last arguments each algorithm parsed (commands run on the main thread only).
thread_local! {
    static TOKEN_BUCKET_ARGS: Memo<TokenBucketParams> = const { Memo::new() };
    static WINDOW_ARGS: Memo<WindowParams> = const { Memo::new() };
    static SLIDING_LOG_ARGS: Memo<SlidingLogParams> = const { Memo::new() };
    static THROTTLE_ARGS: Memo<GcraParams> = const { Memo::new() };
}

/// `RL.TOKENBUCKET key capacity rate [cost]`
fn token_bucket(call: &Call<'_>) -> Result<(), CommandError> {
    acquire(call, Kind::TokenBucket, &stats::TOKEN_BUCKET)
}

/// `RL.SLIDING key limit window [cost]`
fn sliding(call: &Call<'_>) -> Result<(), CommandError> {
    acquire(call, Kind::SlidingWindow, &stats::SLIDING)
}

/// `RL.FIXED key limit window [cost]`
fn fixed(call: &Call<'_>) -> Result<(), CommandError> {
    acquire(call, Kind::FixedWindow, &stats::FIXED)
}

/// `RL.SLIDINGLOG key limit window [cost]`
fn sliding_log(call: &Call<'_>) -> Result<(), CommandError> {
    acquire(call, Kind::SlidingLog, &stats::SLIDING_LOG)
}

/// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command and reply.
fn throttle(call: &Call<'_>) -> Result<(), CommandError> {
    let arguments = args_after(call, 2)?;
    let params = THROTTLE_ARGS.with(|memo| memo.parse(&arguments, 0, args::throttle))?;
    limit::throttle(call, &stats::THROTTLE, key_name(call)?, &params)
}

/// `RL.PEEK key ALGORITHM args...`: the reply the real call would get now; changes nothing.
fn peek(call: &Call<'_>) -> Result<(), CommandError> {
    let kind = args::algorithm(call.arg_bytes(2))?;
    run(
        call,
        &stats::PEEK,
        Operation::Peek,
        kind,
        &args_after(call, 3)?,
    )
}

/// `RL.REFUND key ALGORITHM args...`: gives back `cost` units, never beyond the limit.
fn refund(call: &Call<'_>) -> Result<(), CommandError> {
    let kind = args::algorithm(call.arg_bytes(2))?;
    run(
        call,
        &stats::REFUND,
        Operation::Refund,
        kind,
        &args_after(call, 3)?,
    )
}

/// The algorithm commands: arguments after the key.
fn acquire(call: &Call<'_>, kind: Kind, command: &LimiterCommand) -> Result<(), CommandError> {
    run(
        call,
        command,
        Operation::Acquire,
        kind,
        &args_after(call, 2)?,
    )
}

/// Runs `operation` of the algorithm of `kind` with its arguments.
///
/// The one place that maps an algorithm to its argument parser and implementation.
fn run(
    call: &Call<'_>,
    command: &LimiterCommand,
    operation: Operation,
    kind: Kind,
    arguments: &[&[u8]],
) -> Result<(), CommandError> {
    let key = key_name(call)?;
    match kind {
        Kind::TokenBucket => {
            let params =
                TOKEN_BUCKET_ARGS.with(|memo| memo.parse(arguments, 0, args::token_bucket))?;
            limit::run::<TokenBucketAlgorithm>(call, command, operation, key, &params)
        }
        Kind::SlidingWindow => {
            let params = WINDOW_ARGS.with(|memo| memo.parse(arguments, 0, args::window))?;
            limit::run::<SlidingWindowAlgorithm>(call, command, operation, key, &params)
        }
        Kind::FixedWindow => {
            let params = WINDOW_ARGS.with(|memo| memo.parse(arguments, 0, args::window))?;
            limit::run::<FixedWindowAlgorithm>(call, command, operation, key, &params)
        }
        Kind::SlidingLog => {
            let max_entries = u64::try_from(config::MAX_LOG_ENTRIES.get()).unwrap_or(1);
            let params = SLIDING_LOG_ARGS.with(|memo| {
                memo.parse(arguments, max_entries, |args| {
                    args::sliding_log(args, max_entries)
                })
            })?;
            limit::run::<SlidingLogAlgorithm>(call, command, operation, key, &params)
        }
        // Only CL.THROTTLE works on these keys; args::algorithm never names them.
        Kind::Gcra => Err(CommandError::Message(
            "ERR CL.THROTTLE keys are only used by CL.THROTTLE",
        )),
    }
}

/// `RL.SETSTATE key effect`: applies an effect computed by the primary.
///
/// Only the replication link and AOF loading may call it: on Redis before 8.0 there is no
/// way to hide a module command from clients, so it checks who is calling. It validates the
/// payload as strictly as an RDB load, and propagates itself verbatim so a replica's own AOF
/// and sub-replicas get it too. The payload carries the absolute expiry (Unix ms; 0 means
/// none: the AOF rewrite follows it with Redis's own `PEXPIREAT`).
fn set_state(call: &Call<'_>) -> Result<(), CommandError> {
    check_arity(call, 3, 3)?;
    let trusted = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
    if call.context_flags() & trusted == 0 {
        return Err(CommandError::Message(
            "ERR RL.SETSTATE is internal: only the replication link and AOF loading may call it",
        ));
    }
    let key_name = key_name(call)?;
    let effect = limiter::decode_effect(call.arg_bytes(2))
        .map_err(|error| CommandError::Dynamic(format!("ERR invalid limiter state: {error}")))?;
    let key = limit::open(call, key_name, KeyMode::Write)?;
    match effect.body {
        EffectBody::State(limiter) => store(&key, limiter)?,
        EffectBody::SlidingLogChange(change) => apply_change::<SlidingLogAlgorithm>(&key, change)?,
    }
    if effect.expires_at_ms > 0 {
        key.expire_at_ms(effect.expires_at_ms);
    } else {
        key.persist();
    }
    call.replicate_verbatim();
    call.announce_write(SET_STATE, key_name);
    call.reply_simple(c"OK");
    Ok(())
}

/// Stores a whole limiter in `key`, in place when it holds the same kind.
fn store(key: &Key, limiter: limiter::Limiter) -> Result<(), CommandError> {
    let limiter_type = datatype::limiter_type();
    let leftover = match key.content(limiter_type) {
        KeyContent::Other => return Err(CommandError::WrongType),
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type and is not borrowed elsewhere.
            unsafe { value::overwrite(raw_value, limiter) }.err()
        }
        KeyContent::Empty => Some(limiter),
    };
    match leftover {
        Some(limiter) => limit::store_new(key, value::into_raw(limiter)),
        None => Ok(()),
    }
}

/// Applies a replicated change to the state in `key` (creating it if the key is empty).
fn apply_change<A: Algorithm<State: KindState>>(
    key: &Key,
    change: A::Change,
) -> Result<(), CommandError> {
    match key.content(datatype::limiter_type()) {
        KeyContent::Other => Err(CommandError::WrongType),
        KeyContent::Empty => limit::store_new(key, value::boxed(A::create(change))),
        KeyContent::Limiter(raw_value) => {
            // SAFETY: the value belongs to this module's type and is not borrowed elsewhere.
            let state = unsafe { value::state_mut::<A::State>(raw_value) }
                .map_err(|held| limit::kind_mismatch(held, A::State::KIND))?;
            A::apply(state, change);
            Ok(())
        }
    }
}

/// Registers every command with its flags, arity and key spec. Must run during `OnLoad`.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let (Some(create), Some(get), Some(set_info)) = (
        api!(RedisModule_CreateCommand),
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        return Err("the server lacks the command registration API".into());
    };
    for spec in &COMMANDS {
        let name = spec.name.to_string_lossy();
        // SAFETY: called during OnLoad; all strings are NUL-terminated and static. The key is
        // at position 1 (first = last = 1, step 1).
        let status = unsafe {
            create(
                ctx,
                spec.name.as_ptr(),
                Some(spec.handler),
                spec.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create command {name}"));
        }
        // SAFETY: as above; the command was just created.
        let command = unsafe { get(ctx, spec.name.as_ptr()) };
        if command.is_null() {
            return Err(format!("could not find command {name}"));
        }
        let info = CommandInfo::new(spec);
        // SAFETY: `info` and everything it points to outlive the call; Redis copies it.
        if unsafe { set_info(command, &info.info) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not describe command {name}"));
        }
    }
    Ok(())
}

/// A `RedisModuleCommandInfo` with the storage its pointers refer to.
struct CommandInfo {
    info: raw::RedisModuleCommandInfo,
    _version: Box<raw::RedisModuleCommandInfoVersion>,
    _key_specs: Box<[raw::RedisModuleCommandKeySpec; 2]>,
}

impl CommandInfo {
    fn new(spec: &CommandSpec) -> Self {
        let version = Box::new(raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
        });
        let flags = match spec.key_access {
            KeyAccess::ReadWrite => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
            KeyAccess::ReadOnly => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        };
        let mut key_specs = Box::new([key_spec_at_index_1(u64::from(flags)), terminator()]);
        let info = raw::RedisModuleCommandInfo {
            version: &*version,
            summary: spec.summary.as_ptr(),
            complexity: spec.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: spec.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: std::ptr::null_mut(),
        };
        CommandInfo {
            info,
            _version: version,
            _key_specs: key_specs,
        }
    }
}

/// One key at argument index 1.
fn key_spec_at_index_1(flags: u64) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags,
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}

/// The all-zero key spec that ends the list.
fn terminator() -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: 0,
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 0 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 0,
                limit: 0,
            },
        },
    }
}
