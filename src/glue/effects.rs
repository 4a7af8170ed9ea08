//! The effects protocol: how writes reach replicas and the AOF.
//!
//! Commands decide on the primary with the primary's clock and replicate their *effects*,
//! never themselves: `RL.FX key effect [key effect ...]`, where each effect (encoded by
//! [`redis_ratelimit_wire::codec`]) carries the key's new state or change and its absolute
//! expiry. Replicas and AOF replay therefore hold exactly the primary's state whatever their
//! own clocks say.
//!
//! This module owns every step of it:
//! - [`commit`]: the primary applies a command's writes all or nothing, then propagates
//!   their effects as **one** op (one `RL.FX` with a key/effect pair per written
//!   key), so a replica applies all of a multi-key call or none and no MULTI/EXEC wrapper
//!   is needed, then announces the writes;
//! - [`set_state`]: a replica (or AOF load) validates every pair as strictly as an RDB load,
//!   then applies them all or nothing, and passes the command on verbatim to its own AOF and
//!   sub-replicas;
//! - [`commit_lease`]: a region's lease is a plain string with an absolute expiry,
//!   propagated as `SET key units PXAT end_ms`;
//! - [`rewrite_aof`]: the AOF rewrite emits one `RL.FX` per key with its whole state
//!   (expiry 0: Redis appends its own `PEXPIREAT`).

use std::cell::Cell;
use std::ffi::CStr;

use redis_module::raw;

use super::api::{Call, OwnedString, api};
use super::lease::LeaseKey;
use super::scratch::{self, Reusable};
use super::store::{self, LimiterKey, Update, Write};
use redis_ratelimit_core::Commit;
use redis_ratelimit_core::kinds::{Change, KindAlgorithm, LimiterRef};
use redis_ratelimit_wire::codec::{self, EffectBody, Encoded};
use redis_ratelimit_wire::commands::Command;
use redis_ratelimit_wire::error::CommandError;

/// The internal command that carries replicated and AOF-rewritten state.
///
/// Short on purpose: Redis 7.0's `RedisModule_Replicate` looks the command up by name on every
/// call (`lookupCommandByCString`: the name copied into an sds, split on `|`, hashed case
/// insensitively), about 40 instructions a character. `rl.setstate` cost an admitted
/// `RL.TOKENBUCKET` about 240 instructions more than `rl.fx` (bench/instructions.sh).
pub const SET_STATE: &CStr = Command::Effects.name();

/// The same command under its earlier name, which AOF files and primaries of earlier versions
/// send: still accepted (and passed on as received), never sent.
pub const LEGACY_SET_STATE: &CStr = Command::LegacyEffects.name();

/// The keyspace event of a key written by either name (unchanged from earlier versions).
const SET_STATE_EVENT: &CStr = c"rl.setstate";

/// A write a command evaluated on the primary, with the effect replicas will apply for it.
pub struct Replicated {
    write: Write,
    effect: Encoded,
}

impl Replicated {
    /// The write recording `commit` in `key`, and its effect.
    pub fn new(key: LimiterKey, commit: Commit<Change>) -> Self {
        let effect = codec::encode_effect(commit.expires_at_ms, &commit.change);
        Replicated {
            write: Write::new(key, Update::Change(commit.change), commit.expires_at_ms),
            effect,
        }
    }
}

impl AsMut<Write> for Replicated {
    fn as_mut(&mut self) -> &mut Write {
        &mut self.write
    }
}

/// Commits one command's writes: applies them all or nothing (with their expiries),
/// propagates their effects as one op, and announces each write to WATCH, client tracking
/// and keyspace notifications (`event`).
pub fn commit(
    call: &Call<'_>,
    event: &CStr,
    writes: &mut [Replicated],
) -> Result<(), CommandError> {
    store::apply(writes)?;
    match &*writes {
        [] => {}
        [single] => {
            call.replicate(SET_STATE, single.write.key.name(), single.effect.as_bytes());
        }
        several => propagate_several(call, several),
    }
    for replicated in &*writes {
        call.announce_write(event, replicated.write.key.name());
    }
    Ok(())
}

/// Commits one key's write: [`commit`] for a single write, without staging it.
pub fn commit_one(
    call: &Call<'_>,
    event: &CStr,
    mut key: LimiterKey,
    commit: Commit<Change>,
) -> Result<(), CommandError> {
    let effect = codec::encode_effect(commit.expires_at_ms, &commit.change);
    store::apply_one(&mut key, commit)?;
    call.replicate(SET_STATE, key.name(), effect.as_bytes());
    call.announce_write(event, key.name());
    Ok(())
}

/// [`commit_one`] for a change of algorithm `A`, known statically: encoded and applied as its
/// own type (the single-key commands' path, with no dispatch on kinds).
pub fn commit_one_as<A: KindAlgorithm>(
    call: &Call<'_>,
    event: &CStr,
    mut key: LimiterKey,
    commit: Commit<A::Change>,
) -> Result<(), CommandError> {
    let mut effect = Encoded::default();
    codec::write_effect(
        commit.expires_at_ms,
        A::erase_ref(&commit.change),
        &mut effect,
    );
    store::apply_one_as::<A>(&mut key, commit)?;
    call.replicate(SET_STATE, key.name(), effect.as_bytes());
    call.announce_write(event, key.name());
    Ok(())
}

/// Commits a region's lease (its units left until its end): written as a plain string with
/// its absolute expiry, and propagated as `SET key units PXAT end_ms`, which a replica and
/// the AOF apply as they are (the end is absolute, so no clock of theirs changes it).
pub fn commit_lease(
    call: &Call<'_>,
    event: &CStr,
    key: &mut LeaseKey,
    units: u64,
    expires_at_ms: i64,
) -> Result<(), CommandError> {
    let mut digits = [0u8; 20];
    let digits = decimal(units, &mut digits);
    key.store(call, digits, units, expires_at_ms)?;
    call.replicate_set_pxat(key.name(), digits, expires_at_ms);
    call.announce_write(event, key.name());
    Ok(())
}

/// The decimal digits of `value`, written at the end of `buffer`.
fn decimal(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut start = buffer.len();
    for slot in buffer.iter_mut().rev() {
        *slot = b'0'.wrapping_add(u8::try_from(value % 10).unwrap_or(0));
        start = start.saturating_sub(1);
        value /= 10;
        if value == 0 {
            break;
        }
    }
    buffer.get(start..).unwrap_or_default()
}

/// The strings of one multi-key propagation, reused between calls (see [`scratch`]).
#[derive(Default)]
struct Propagation {
    payloads: Vec<OwnedString>,
    argv: Vec<*mut raw::RedisModuleString>,
}

impl Reusable for Propagation {
    fn clear(&mut self) {
        self.argv.clear();
        self.payloads.clear();
    }
}

thread_local! {
    static PROPAGATION: Cell<Option<Propagation>> = const { Cell::new(None) };
}

/// Propagates several writes' effects as one `RL.FX k1 e1 k2 e2 ...`. The payloads
/// become Redis strings (`RedisModule_Replicate` takes a vector of them), which the
/// single-key path avoids by passing its buffer.
fn propagate_several(call: &Call<'_>, writes: &[Replicated]) {
    scratch::reusing(&PROPAGATION, |strings| {
        for replicated in writes {
            let Some(payload) = call.create_string(replicated.effect.as_bytes()) else {
                return;
            };
            strings.argv.push(replicated.write.key.name());
            strings.argv.push(payload.as_ptr());
            strings.payloads.push(payload);
        }
        call.replicate_argv(SET_STATE, &strings.argv);
    });
}

/// `RL.FX key effect [key effect ...]` (also accepted as `RL.SETSTATE`, its earlier name): applies effects computed by a primary.
///
/// Only the replication link and AOF loading may call it: on Redis before 8.0 there is no
/// way to hide a module command from clients, so it checks who is calling. Every payload is
/// decoded and every key checked before any is written.
pub fn set_state(call: &Call<'_>) -> Result<(), CommandError> {
    let argc = call.arg_count();
    if argc < 3 || argc % 2 == 0 {
        return Err(CommandError::WrongArity);
    }
    let trusted = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
    if call.context_flags() & trusted == 0 {
        let legacy = call
            .arg_bytes(0)
            .eq_ignore_ascii_case(LEGACY_SET_STATE.to_bytes());
        return Err(CommandError::Message(if legacy {
            "ERR RL.SETSTATE is internal: only the replication link and AOF loading may call it"
        } else {
            "ERR RL.FX is internal: only the replication link and AOF loading may call it"
        }));
    }
    let pairs = (1..argc).step_by(2);
    let keys: Vec<&[u8]> = pairs.clone().map(|index| call.arg_bytes(index)).collect();
    if redis_ratelimit_wire::args::multi::repeated_key(&keys).is_some() {
        return Err(CommandError::Message("ERR RL.FX got a key twice"));
    }
    let mut writes = Vec::with_capacity(keys.len());
    for index in pairs {
        let name = call.arg(index).ok_or(CommandError::WrongArity)?;
        let record =
            codec::decode_effect(call.arg_bytes(index.saturating_add(1))).map_err(|error| {
                CommandError::Dynamic(format!("ERR invalid limiter state: {error}"))
            })?;
        let update = match record.body {
            EffectBody::State(limiter) => Update::Replace(limiter),
            EffectBody::Change(change) => Update::Change(change),
        };
        writes.push(Write::new(
            LimiterKey::open(call, name)?,
            update,
            record.expires_at_ms,
        ));
    }
    store::apply(&mut writes)?;
    call.replicate_verbatim();
    for write in &writes {
        call.announce_write(SET_STATE_EVENT, write.key.name());
    }
    call.reply_simple(c"OK");
    Ok(())
}

/// Emits what recreates one key's limiter when the AOF is rewritten without an RDB preamble.
pub fn rewrite_aof(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    limiter: LimiterRef<'_>,
) {
    // Expiry 0 means "none here": Redis appends PEXPIREAT for keys with a TTL itself.
    let effect = codec::encode_state_effect(0, limiter);
    let bytes = effect.as_bytes();
    if let Some(emit) = api!(RedisModule_EmitAOF) {
        // SAFETY: "sb" = key string, (buffer, length), matching the arguments.
        unsafe {
            emit(
                io,
                SET_STATE.as_ptr(),
                c"sb".as_ptr(),
                key,
                bytes.as_ptr(),
                bytes.len(),
            )
        };
    }
}
