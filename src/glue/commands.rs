//! The command table: names, flags, arity and key specs, and the thin handlers.
//!
//! Each handler parses its arguments (pure, in [`crate::args`]), then hands over to the one
//! shared driver in [`super::limit`]. Adding an algorithm means one parser, one table row
//! and one handler line here.

use std::ffi::{CStr, c_int};
use std::mem::size_of;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw;

use super::api::{Call, KeyContent, KeyMode, api, log};
use super::{datatype, limit, stats};
use crate::args;
use crate::core::token_bucket::TokenBucketAlgorithm;
use crate::error::CommandError;
use crate::limiter;
use crate::value;

/// The internal command that carries replicated and AOF-rewritten state.
pub const SET_STATE: &CStr = c"rl.setstate";

/// How a command accesses its key (declared to Redis for ACLs and Cluster routing).
#[derive(Clone, Copy)]
enum KeyAccess {
    /// Reads and updates the key's value.
    ReadWrite,
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
entry_point!(set_state_entry => set_state);

const COMMANDS: [CommandSpec; 2] = [
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
        name: SET_STATE,
        handler: set_state_entry,
        flags: c"write deny-oom",
        arity: 4,
        key_access: KeyAccess::ReadWrite,
        summary: c"Internal: stores a limiter state computed by the primary",
        complexity: c"O(1)",
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

/// `RL.TOKENBUCKET key capacity rate [cost]`
fn token_bucket(call: &Call<'_>) -> Result<(), CommandError> {
    check_arity(call, 4, 5)?;
    let arguments = [call.arg_bytes(2), call.arg_bytes(3), call.arg_bytes(4)];
    let given = call.arg_count().saturating_sub(2);
    let params = args::token_bucket(arguments.get(..given).unwrap_or_default())?;
    limit::acquire::<TokenBucketAlgorithm>(
        call,
        c"rl.tokenbucket",
        &stats::TOKEN_BUCKET,
        key_name(call)?,
        &params,
    )
}

/// `RL.SETSTATE key state expire_at_ms`: stores a state computed elsewhere.
///
/// Only the replication link and AOF loading may call it: on Redis before 8.0 there is no
/// way to hide a module command from clients, so it checks who is calling. It validates the
/// state as strictly as an RDB load, and propagates itself verbatim so a replica's own AOF
/// and sub-replicas get it too. `expire_at_ms` is absolute Unix milliseconds; 0 means no
/// expiry (the AOF rewrite follows it with Redis's own `PEXPIREAT`).
fn set_state(call: &Call<'_>) -> Result<(), CommandError> {
    check_arity(call, 4, 4)?;
    let trusted = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
    if call.context_flags() & trusted == 0 {
        return Err(CommandError::Message(
            "ERR RL.SETSTATE is internal: only the replication link and AOF loading may call it",
        ));
    }
    let key_name = key_name(call)?;
    let limiter = limiter::decode(call.arg_bytes(2))
        .map_err(|error| CommandError::Dynamic(format!("ERR invalid limiter state: {error}")))?;
    let expire_arg = call.arg_bytes(3);
    let expires_at_ms = match expire_arg {
        b"0" => 0,
        other => args::positive_integer("expire_at_ms", other).and_then(|ms| {
            i64::try_from(ms).map_err(|_| {
                crate::error::ArgError::new("expire_at_ms", crate::error::Rule::TooLarge, other)
            })
        })?,
    };
    let key = call
        .open_key(key_name, KeyMode::Write)
        .ok_or(CommandError::Message("ERR the key could not be opened"))?;
    let limiter_type = datatype::limiter_type();
    let leftover = match key.content(limiter_type) {
        KeyContent::Other => return Err(CommandError::WrongType),
        // SAFETY: the value belongs to this module's type and is not borrowed elsewhere.
        KeyContent::Limiter(raw_value) => unsafe { value::overwrite(raw_value, limiter) }.err(),
        KeyContent::Empty => Some(limiter),
    };
    if let Some(limiter) = leftover {
        if let Err(raw_value) = key.set_value(limiter_type, value::into_raw(limiter)) {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { value::free(raw_value) };
            return Err(CommandError::Message("ERR the limiter could not be stored"));
        }
    }
    if expires_at_ms > 0 {
        key.expire_at_ms(expires_at_ms);
    } else {
        key.persist();
    }
    call.replicate_verbatim();
    call.announce_write(SET_STATE, key_name);
    call.reply_simple(c"OK");
    Ok(())
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
