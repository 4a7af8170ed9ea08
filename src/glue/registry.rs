//! Registering the commands of the table (`redis_ratelimit_wire::commands`: names, arity,
//! flags) with their key specs, ACL categories and docs, and the C entry points that run the
//! bodies in [`super::commands`] with panics caught.
//!
//! Keys are declared with key specs so that Redis Cluster routes every command to the key's
//! node (`MOVED`/`ASK`, `CROSSSLOT` across slots), ACL key patterns apply, and clients and
//! `COMMAND GETKEYS` find them.

use std::ffi::{CStr, c_int};
use std::mem::size_of;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw;

use super::api::{Call, api, log};
use super::{commands, effects};
use redis_ratelimit_wire::commands::Command;
use redis_ratelimit_wire::error::CommandError;

/// Where a command's keys are, and how it uses them (declared to Redis).
#[derive(Clone, Copy)]
enum Keys {
    /// One key at argument 1, read and updated.
    OneReadWrite,
    /// One key at argument 1, only read.
    OneReadOnly,
    /// Two keys at arguments 1 and 2, read and updated (one slot on a Cluster: Redis
    /// refuses them with `CROSSSLOT` otherwise).
    TwoReadWrite,
    /// `numkeys` at argument 1, then that many keys, read and updated. The command must
    /// also be flagged `getkeys-api` and answer keys position requests: Redis 7.0's cluster
    /// routing reads no key specs of module commands.
    Counted,
    /// Key/value pairs from argument 1, keys read and updated.
    Pairs,
}

/// What registering a command of the table takes beyond the table's name, arity and flags.
struct Registration {
    handler: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *mut *mut raw::RedisModuleString,
        c_int,
    ) -> c_int,
    keys: Keys,
    /// ACL categories on servers that let modules set them (7.2+); `ratelimit` is added
    /// where the server can create categories (7.4+).
    acl_categories: &'static CStr,
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

entry_point!(token_bucket_entry => commands::token_bucket);
entry_point!(sliding_entry => commands::sliding);
entry_point!(fixed_entry => commands::fixed);
entry_point!(sliding_log_entry => commands::sliding_log);
entry_point!(throttle_entry => commands::throttle);
entry_point!(multi_entry => commands::multi);
entry_point!(acquire_entry => commands::acquire);
entry_point!(release_entry => commands::release);
entry_point!(peek_entry => commands::peek);
entry_point!(refund_entry => commands::refund);
entry_point!(regional_entry => commands::regional);
entry_point!(region_lease_entry => commands::region_lease);
entry_point!(set_state_entry => effects::set_state);

/// The ACL category this module adds (Redis 7.4+).
const CATEGORY: &CStr = c"ratelimit";

/// How each command of the table is registered (the match makes a command added to the
/// table fail to compile until it is given its handler and key spec here).
fn registration(command: Command) -> Registration {
    match command {
        Command::TokenBucket => Registration {
            handler: token_bucket_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary: c"Takes cost tokens from a token bucket if it holds enough",
            complexity: c"O(1)",
        },
        Command::Sliding => Registration {
            handler: sliding_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary: c"Counts cost units in a sliding window (weighted previous + current window)",
            complexity: c"O(1)",
        },
        Command::Fixed => Registration {
            handler: fixed_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary: c"Counts cost units in fixed windows aligned to the Unix epoch",
            complexity: c"O(1)",
        },
        Command::SlidingLog => Registration {
            handler: sliding_log_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write slow",
            summary: c"Counts cost units in an exact sliding window (a log of admitted units)",
            complexity: c"O(log N + cost), amortised",
        },
        Command::Throttle => Registration {
            handler: throttle_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary:
                c"redis-cell compatible GCRA rate limiting, with server time and effects replication",
            complexity: c"O(1)",
        },
        Command::Multi => Registration {
            handler: multi_entry,
            keys: Keys::Counted,
            acl_categories: c"write slow",
            summary:
                c"Checks several limits on several keys at once: all admit and are charged, or none is",
            complexity: c"O(N) for N keys (plus each limit's own cost)",
        },
        Command::Acquire => Registration {
            handler: acquire_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write slow",
            summary: c"Takes or renews one of limit in-flight slots for a holder, for ttl_ms",
            complexity: c"O(N) for N holders",
        },
        Command::Release => Registration {
            handler: release_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write slow",
            summary: c"Frees a holder's in-flight slot",
            complexity: c"O(N) for N holders",
        },
        Command::Peek => Registration {
            handler: peek_entry,
            keys: Keys::OneReadOnly,
            acl_categories: c"read fast",
            summary: c"Returns what a limiter call would return now, changing nothing",
            complexity: c"O(1); O(log N) for SLIDINGLOG",
        },
        Command::Refund => Registration {
            handler: refund_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary: c"Gives back the cost of a call that was admitted but not performed",
            complexity: c"O(1); O(cost) for SLIDINGLOG",
        },
        Command::Regional => Registration {
            handler: regional_entry,
            keys: Keys::TwoReadWrite,
            acl_categories: c"write slow",
            summary:
                c"A region's call under one quota across regions: its floor, then its leased balance",
            complexity: c"O(1); O(log N + cost) for a SLIDINGLOG floor",
        },
        Command::RegionLease => Registration {
            handler: region_lease_entry,
            keys: Keys::OneReadWrite,
            acl_categories: c"write fast",
            summary: c"Installs a region's lease: units until an absolute expiry, replacing the last",
            complexity: c"O(1)",
        },
        Command::Effects => Registration {
            handler: set_state_entry,
            keys: Keys::Pairs,
            acl_categories: c"write slow",
            summary: c"Internal: applies limiter states or changes computed by the primary",
            complexity: c"O(N) for N keys; O(M) for a whole SLIDINGLOG of M entries",
        },
        Command::LegacyEffects => Registration {
            handler: set_state_entry,
            keys: Keys::Pairs,
            acl_categories: c"write slow",
            summary:
                c"Internal: RL.FX under its earlier name (AOF files and primaries of earlier versions)",
            complexity: c"O(N) for N keys; O(M) for a whole SLIDINGLOG of M entries",
        },
    }
}

/// Runs a command body; turns its error, or a panic (a bug), into an error reply.
///
/// Generic and inlined into each entry point, so the body is called directly (and its
/// result checked where it is made) rather than through a function pointer; the failure
/// replies stay out of line.
#[inline(always)]
fn dispatch(call: &Call<'_>, body: impl FnOnce(&Call<'_>) -> Result<(), CommandError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(|| body(call))) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => reply_failure(call, error),
        Err(_) => reply_panic(call),
    }
    raw::REDISMODULE_OK as c_int
}

/// Replies with a command's error.
#[cold]
#[inline(never)]
fn reply_failure(call: &Call<'_>, error: CommandError) {
    match error {
        CommandError::WrongArity => call.reply_wrong_arity(),
        error => call.reply_error(&error.to_string()),
    }
}

/// Logs and replies after a panic in a command (a bug).
#[cold]
#[inline(never)]
fn reply_panic(call: &Call<'_>) {
    log(
        c"warning",
        "ratelimit: internal error in a command; see the panic above",
    );
    call.reply_error("ERR internal error in the ratelimit module (see the server log)");
}

/// Registers every command with its flags, arity, key specs and (where the server supports
/// them) ACL categories. Must run during `OnLoad`.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let (Some(create), Some(get), Some(set_info)) = (
        api!(RedisModule_CreateCommand),
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        return Err("the server lacks the command registration API".into());
    };
    let own_category = add_category(ctx);
    for command in Command::ALL.iter().copied() {
        let spec = registration(command);
        let name = command.name().to_string_lossy();
        let (first, last, step) = spec.keys.legacy_range();
        // SAFETY: called during OnLoad; all strings are NUL-terminated and static.
        let status = unsafe {
            create(
                ctx,
                command.name().as_ptr(),
                Some(spec.handler),
                command.flags().as_ptr(),
                first,
                last,
                step,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create command {name}"));
        }
        // SAFETY: as above; the command was just created.
        let registered = unsafe { get(ctx, command.name().as_ptr()) };
        if registered.is_null() {
            return Err(format!("could not find command {name}"));
        }
        let info = CommandInfo::new(command.arity(), &spec);
        // SAFETY: `info` and everything it points to outlive the call; Redis copies it.
        if unsafe { set_info(registered, &info.info) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not describe command {name}"));
        }
        set_categories(registered, command, &spec, own_category)?;
    }
    Ok(())
}

/// Creates the `ratelimit` ACL category where the server can (7.4+); whether it exists.
fn add_category(ctx: *mut raw::RedisModuleCtx) -> bool {
    let Some(add) = api!(RedisModule_AddACLCategory) else {
        return false;
    };
    // SAFETY: called during OnLoad with a static NUL-terminated name.
    unsafe { add(ctx, CATEGORY.as_ptr()) == raw::REDISMODULE_OK as c_int }
}

/// Gives a command its ACL categories where the server lets modules set them (7.2+). On
/// 7.0, category rules skip module commands: ACL rules name RL commands one by one.
fn set_categories(
    registered: *mut raw::RedisModuleCommand,
    command: Command,
    spec: &Registration,
    own_category: bool,
) -> Result<(), String> {
    let Some(set) = api!(RedisModule_SetCommandACLCategories) else {
        return Ok(());
    };
    let categories = if own_category {
        let mut all = spec.acl_categories.to_bytes().to_vec();
        all.push(b' ');
        all.extend_from_slice(CATEGORY.to_bytes());
        super::api::c_string(&String::from_utf8_lossy(&all))
    } else {
        spec.acl_categories.to_owned()
    };
    // SAFETY: the command was created during this OnLoad; the string is NUL-terminated.
    if unsafe { set(registered, categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "could not set the ACL categories of {}",
            command.name().to_string_lossy()
        ));
    }
    Ok(())
}

impl Keys {
    /// The legacy `(first, last, step)` key range of `RedisModule_CreateCommand`; zeros when
    /// only key specs can say where the keys are.
    fn legacy_range(self) -> (c_int, c_int, c_int) {
        match self {
            Keys::OneReadWrite | Keys::OneReadOnly => (1, 1, 1),
            Keys::TwoReadWrite => (1, 2, 1),
            Keys::Counted => (0, 0, 0),
            Keys::Pairs => (1, -1, 2),
        }
    }

    /// The key spec's flags.
    fn flags(self) -> u64 {
        let flags = match self {
            Keys::OneReadOnly => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
            Keys::OneReadWrite | Keys::TwoReadWrite | Keys::Counted | Keys::Pairs => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
        };
        u64::from(flags)
    }

    /// The key spec describing where the keys are.
    fn spec(self) -> raw::RedisModuleCommandKeySpec {
        let mut spec = terminator();
        spec.flags = self.flags();
        spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        spec.bs = raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        };
        match self {
            Keys::OneReadWrite | Keys::OneReadOnly | Keys::TwoReadWrite | Keys::Pairs => {
                let (last_key, key_step) = match self {
                    Keys::Pairs => (-1, 2),
                    Keys::TwoReadWrite => (1, 1),
                    _ => (0, 1),
                };
                spec.find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
                spec.fk = raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                    range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                        lastkey: last_key,
                        keystep: key_step,
                        limit: 0,
                    },
                };
            }
            Keys::Counted => {
                // Search starts at `numkeys` (argument 1): the count is 0 arguments after it,
                // the first key 1 after it, one key per argument.
                spec.find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                spec.fk = raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                    keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                        keynumidx: 0,
                        firstkey: 1,
                        keystep: 1,
                    },
                };
            }
        }
        spec
    }
}

/// A `RedisModuleCommandInfo` with the storage its pointers refer to.
struct CommandInfo {
    info: raw::RedisModuleCommandInfo,
    _version: Box<raw::RedisModuleCommandInfoVersion>,
    _key_specs: Box<[raw::RedisModuleCommandKeySpec; 2]>,
}

impl CommandInfo {
    fn new(arity: c_int, spec: &Registration) -> Self {
        let version = Box::new(raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
        });
        let mut key_specs = Box::new([spec.keys.spec(), terminator()]);
        let info = raw::RedisModuleCommandInfo {
            version: &*version,
            summary: spec.summary.as_ptr(),
            complexity: spec.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity,
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
