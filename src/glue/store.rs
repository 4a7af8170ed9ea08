//! Limiters in keys: the module type, opening a key as a limiter, and applying writes to
//! several keys all or nothing.
//!
//! Both writers use [`apply`]: the commands on a primary (with the changes they evaluated)
//! and `RL.FX` on replicas and at AOF load (with the effects it decoded).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode};
use crate::value;
use redis_ratelimit_core::Commit;
use redis_ratelimit_core::kinds::{Change, Kind, KindAlgorithm, KindState, Limiter, LimiterRef};
use redis_ratelimit_wire::error::CommandError;

/// The registered `ratelimit` type; null until `OnLoad` creates it.
static LIMITER_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(null_mut());

/// The module type, for comparing with a key's type and storing values.
pub fn limiter_type() -> *mut raw::RedisModuleType {
    LIMITER_TYPE.load(Ordering::Relaxed)
}

/// Remembers the module type created during `OnLoad`.
pub fn set_limiter_type(created: *mut raw::RedisModuleType) {
    LIMITER_TYPE.store(created, Ordering::Relaxed);
}

/// An open key that is empty or holds a limiter.
pub struct LimiterKey {
    key: Key,
    /// The key's name, as the command received it.
    name: *mut raw::RedisModuleString,
    /// The value, if the key holds one.
    value: Option<*mut c_void>,
}

impl LimiterKey {
    /// Opens `name` for reading and writing; WRONGTYPE if it holds another Redis type.
    pub fn open(call: &Call<'_>, name: *mut raw::RedisModuleString) -> Result<Self, CommandError> {
        // Not `ok_or`: the error it builds would be dropped on every call.
        match call.open_key(name, KeyMode::Write) {
            Some(key) => Self::classify(key, name),
            None => Err(CommandError::Message("ERR the key could not be opened")),
        }
    }

    /// Opens `name` for reading only: `None` if it is missing (or, on a replica, logically
    /// expired); WRONGTYPE if it holds another Redis type.
    pub fn read(
        call: &Call<'_>,
        name: *mut raw::RedisModuleString,
    ) -> Result<Option<Self>, CommandError> {
        call.open_key(name, KeyMode::Read)
            .map(|key| Self::classify(key, name))
            .transpose()
    }

    fn classify(key: Key, name: *mut raw::RedisModuleString) -> Result<Self, CommandError> {
        let value = match key.content(limiter_type()) {
            KeyContent::Other => return Err(CommandError::WrongType),
            KeyContent::Empty => None,
            KeyContent::Limiter(value) => Some(value),
        };
        Ok(LimiterKey { key, name, value })
    }

    /// The key's name.
    pub fn name(&self) -> *mut raw::RedisModuleString {
        self.name
    }

    /// The limiter the key holds, if any.
    pub fn held(&self) -> Option<LimiterRef<'_>> {
        // SAFETY: the value belongs to this module's type and stays alive while the key is
        // open; nothing mutates it while this shared borrow of the key lives (writes take the
        // key by value in `apply`).
        self.value.and_then(|value| unsafe { value::borrow(value) })
    }

    /// The key's state if it holds a limiter of type `S` (`None` if it holds none); `Err`
    /// with the kind it holds instead.
    pub fn held_as<S: KindState>(&self) -> Result<Option<&S>, Kind> {
        let Some(value) = self.value else {
            return Ok(None);
        };
        // SAFETY: as in `held`.
        match unsafe { value::borrow_as::<S>(value) } {
            None => Ok(None),
            Some(state) => state.map(Some),
        }
    }

    /// Stores a new value in the key, which then owns it; hands it back if Redis refuses.
    fn store(&mut self, new_value: *mut c_void) -> Result<(), *mut c_void> {
        self.key.set_value(limiter_type(), new_value)?;
        self.value = Some(new_value);
        Ok(())
    }

    /// Deletes the key's value (Redis frees it).
    fn delete(&mut self) {
        self.key.delete();
        self.value = None;
    }

    /// Sets the key's absolute expiry (Unix ms); 0 removes any expiry.
    fn expire_at_ms(&self, expires_at_ms: i64) {
        if expires_at_ms > 0 {
            self.key.expire_at_ms(expires_at_ms);
        } else {
            self.key.persist();
        }
    }
}

/// The error for a key holding another kind of limiter (`held`) than a call works on.
fn kind_mismatch(held: Kind, wanted: Kind) -> CommandError {
    CommandError::KindMismatch { held, wanted }
}

/// What a write does to its key.
pub enum Update {
    /// Apply a change to the key's limiter (or create one from it if the key is empty).
    Change(Change),
    /// Store a whole limiter, replacing what the key holds.
    Replace(Limiter),
}

/// One key's write, evaluated and ready to apply.
pub struct Write {
    /// The key, open for writing.
    pub key: LimiterKey,
    /// What to do to it; taken when applied.
    update: Option<Update>,
    /// The key's new absolute expiry (Unix ms); 0 for none.
    expires_at_ms: i64,
    /// A freshly allocated value to store in the key (set while applying).
    new_value: Option<*mut c_void>,
}

impl Write {
    /// A write of `update` to `key`, which then expires at `expires_at_ms` (Unix ms; 0 for
    /// never).
    pub fn new(key: LimiterKey, update: Update, expires_at_ms: i64) -> Self {
        Write {
            key,
            update: Some(update),
            expires_at_ms,
            new_value: None,
        }
    }
}

impl AsMut<Write> for Write {
    fn as_mut(&mut self) -> &mut Write {
        self
    }
}

impl Drop for Write {
    fn drop(&mut self) {
        if let Some(unstored) = self.new_value.take() {
            // SAFETY: allocated by `prepare` and never given to Redis (stored values are
            // taken out of `new_value` when Redis accepts them).
            unsafe { value::free(unstored) };
        }
    }
}

/// Applies `writes` all or nothing, and sets each key's expiry.
///
/// Steps, in order, so that nothing is mutated until nothing can fail:
/// 1. check each change against the kind its key holds and allocate every new value (for a
///    key that is empty, or replaced by a limiter of another kind);
/// 2. store the new values; if Redis refuses one, delete the ones just stored and stop;
/// 3. apply the changes to existing limiters in place (no allocation but a sliding log's
///    growth, where an allocation failure aborts the server as Redis's own do);
/// 4. set the expiries, or delete a key whose limiter holds nothing (see
///    [`LimiterRef::is_vacant`]).
///
/// The keys must be distinct: callers refuse repeated keys before opening any, so no two
/// writes can borrow one value.
pub fn apply<W: AsMut<Write>>(writes: &mut [W]) -> Result<(), CommandError> {
    for write in writes.iter_mut() {
        prepare(write.as_mut())?;
    }
    store_new_values(writes)?;
    for write in writes.iter_mut() {
        let write = write.as_mut();
        if let Some(update) = write.update.take() {
            update_in_place(&write.key, update);
        }
        settle(&mut write.key, write.expires_at_ms);
    }
    Ok(())
}

/// Applies one change to one key and sets its expiry: [`apply`] for a single write, which
/// needs no staging (the only step that can fail, storing a new value, comes first).
pub fn apply_one(key: &mut LimiterKey, commit: Commit<Change>) -> Result<(), CommandError> {
    let Commit {
        change,
        expires_at_ms,
    } = commit;
    match key.held().map(LimiterRef::kind) {
        Some(held) if held != change.kind() => return Err(kind_mismatch(held, change.kind())),
        Some(_) => update_in_place(key, Update::Change(change)),
        None => {
            if let Err(refused) = key.store(value::into_raw(change.create())) {
                // SAFETY: Redis refused the value, so it is still ours to free.
                unsafe { value::free(refused) };
                return Err(NOT_STORED);
            }
        }
    }
    settle(key, expires_at_ms);
    Ok(())
}

/// [`apply_one`] for a change of algorithm `A`, known statically: the change is applied (or
/// the new value built) as its own type, with no dispatch on kinds.
pub fn apply_one_as<A: KindAlgorithm>(
    key: &mut LimiterKey,
    commit: Commit<A::Change>,
) -> Result<(), CommandError> {
    let Commit {
        change,
        expires_at_ms,
    } = commit;
    let existing = match key.value {
        // SAFETY: the value belongs to this module's type; the key is open for writing and no
        // other borrow of the value exists (`held` borrows end before the write).
        Some(raw_value) => unsafe { value::borrow_mut_as::<A::State>(raw_value) },
        None => None,
    };
    let vacant = match existing {
        Some(Ok(state)) => {
            A::apply(state, change);
            state.as_limiter().is_vacant()
        }
        Some(Err(held)) => return Err(kind_mismatch(held, A::State::KIND)),
        None => {
            let created = A::create(change);
            let vacant = created.as_limiter().is_vacant();
            if let Err(refused) = key.store(value::into_raw_as(created)) {
                // SAFETY: Redis refused the value, so it is still ours to free.
                unsafe { value::free(refused) };
                return Err(NOT_STORED);
            }
            vacant
        }
    };
    // As `settle`, with the vacancy known from the state's type.
    if vacant {
        key.delete();
    } else {
        key.expire_at_ms(expires_at_ms);
    }
    Ok(())
}

/// The last step of a write: the key's expiry, or its deletion when its limiter holds
/// nothing.
fn settle(key: &mut LimiterKey, expires_at_ms: i64) {
    if key.held().is_some_and(LimiterRef::is_vacant) {
        // The last in-flight holder was released: the key goes rather than waiting for an
        // expiry a missing key would not have.
        key.delete();
    } else {
        key.expire_at_ms(expires_at_ms);
    }
}

/// The error when Redis refuses a new value.
const NOT_STORED: CommandError = CommandError::Message("ERR the limiter could not be stored");

/// Checks a write against its key and allocates the value it will store, if any.
fn prepare(write: &mut Write) -> Result<(), CommandError> {
    let held = write.key.held().map(LimiterRef::kind);
    let needs_new_value = match &write.update {
        Some(Update::Change(change)) => match held {
            Some(held) if held != change.kind() => {
                return Err(kind_mismatch(held, change.kind()));
            }
            Some(_) => false,
            None => true,
        },
        Some(Update::Replace(limiter)) => held != Some(limiter.as_ref().kind()),
        None => false,
    };
    if needs_new_value {
        // The update becomes the new value: taken, not copied (a replaced sliding log can
        // hold up to its limit of entries).
        let limiter = match write.update.take() {
            Some(Update::Change(change)) => change.create(),
            Some(Update::Replace(limiter)) => limiter,
            None => return Ok(()),
        };
        write.new_value = Some(value::into_raw(limiter));
    }
    Ok(())
}

/// Stores every new value; on a refusal, empties again the keys it filled.
fn store_new_values<W: AsMut<Write>>(writes: &mut [W]) -> Result<(), CommandError> {
    for index in 0..writes.len() {
        let Some(write) = writes.get_mut(index).map(AsMut::as_mut) else {
            break;
        };
        let Some(new_value) = write.new_value.take() else {
            continue;
        };
        if let Err(refused) = write.key.store(new_value) {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { value::free(refused) };
            for stored in writes.get_mut(..index).unwrap_or_default() {
                let stored = stored.as_mut();
                if stored.update.is_none() {
                    stored.key.delete();
                }
            }
            return Err(NOT_STORED);
        }
    }
    Ok(())
}

/// Applies an update to the limiter the key holds, of the update's kind (checked by
/// `prepare`).
fn update_in_place(key: &LimiterKey, update: Update) {
    let Some(raw_value) = key.value else { return };
    // SAFETY: the value belongs to this module's type; the key is open for writing and no
    // other borrow of the value exists (`held` borrows end before the update).
    let Some(limiter) = (unsafe { value::borrow_mut(raw_value) }) else {
        return;
    };
    // Both succeed: `prepare` checked the kind.
    let _ = match update {
        Update::Change(change) => change.apply(limiter).map_err(|_| ()),
        Update::Replace(replacement) => replacement.store_into(limiter).map_err(|_| ()),
    };
}
