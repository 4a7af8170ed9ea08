//! The `ratelimit` module data type and its callbacks.
//!
//! The callbacks only move bytes: they encode or decode through
//! [`redis_ratelimit_wire::codec`] (the AOF rewrite through [`super::effects`], which owns
//! `RL.FX`) and hand pointers to
//! [`crate::value`]. Every loaded value (RDB file, full sync, `RESTORE` payload)
//! passes the same strict decoder as replicated state; anything it refuses makes the load
//! fail cleanly (NULL), with a log line, never a crash.

use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;

use redis_module::raw;

use super::api::{api, log};
use super::{effects, store};
use crate::value;
use redis_ratelimit_wire::codec::{self, ENCODING_VERSION};

/// Registers the `ratelimit` type. Must run during `OnLoad`.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
    let create = api!(RedisModule_CreateDataType).ok_or("RedisModule_CreateDataType missing")?;
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
    };
    // SAFETY: called during OnLoad; the name is exactly 9 characters; Redis copies `methods`.
    let created = unsafe {
        create(
            ctx,
            c"ratelimit".as_ptr(),
            c_int::from(ENCODING_VERSION),
            &mut methods,
        )
    };
    if created.is_null() {
        return Err("RedisModule_CreateDataType failed (is another module using 'ratelimit'?)");
    }
    store::set_limiter_type(created);
    Ok(())
}

/// Runs a callback body, turning a panic (a bug) into a logged fallback value instead of an
/// aborted server.
fn guarded<T>(callback: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        log(
            c"warning",
            &format!("ratelimit: internal error in {callback}; see the panic above"),
        );
        fallback
    })
}

unsafe extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded("rdb_load", null_mut(), || {
        if encver > c_int::from(ENCODING_VERSION) {
            log(
                c"warning",
                &format!(
                    "ratelimit: refusing a value with encoding version {encver}; this module \
                     reads up to {ENCODING_VERSION} (upgrade the module on this node)"
                ),
            );
            return null_mut();
        }
        let (Some(load), Some(is_error), Some(free)) = (
            api!(RedisModule_LoadStringBuffer),
            api!(RedisModule_IsIOError),
            api!(RedisModule_Free),
        ) else {
            return null_mut();
        };
        let mut len = 0usize;
        // SAFETY: `io` is the loading stream Redis passed in.
        let buffer = unsafe { load(io, &mut len) };
        // SAFETY: as above; with HANDLE_IO_ERRORS set a short read is reported here.
        if buffer.is_null() || unsafe { is_error(io) } != 0 {
            if !buffer.is_null() {
                // SAFETY: the buffer was allocated by Redis for us to free.
                unsafe { free(buffer.cast()) };
            }
            return null_mut();
        }
        // SAFETY: Redis returned `len` readable bytes at `buffer`.
        let bytes = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) };
        let decoded = codec::decode(bytes);
        // SAFETY: the buffer was allocated by Redis for us to free; `bytes` is not used after.
        unsafe { free(buffer.cast()) };
        match decoded {
            Ok(limiter) => value::into_raw(limiter),
            Err(error) => {
                log(
                    c"warning",
                    &format!("ratelimit: refusing a stored limiter: {error}"),
                );
                null_mut()
            }
        }
    })
}

unsafe extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded("rdb_save", (), || {
        // SAFETY: Redis passes a value this module created.
        let Some(limiter) = (unsafe { value::borrow(value) }) else {
            return;
        };
        let encoded = codec::encode(limiter);
        let bytes = encoded.as_bytes();
        if let Some(save) = api!(RedisModule_SaveStringBuffer) {
            // SAFETY: `io` is the saving stream; the buffer is valid for `len` bytes.
            unsafe { save(io, bytes.as_ptr().cast(), bytes.len()) };
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded("aof_rewrite", (), || {
        // SAFETY: Redis passes a value this module created.
        let Some(limiter) = (unsafe { value::borrow(value) }) else {
            return;
        };
        effects::rewrite_aof(io, key, limiter);
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value this module created.
    guarded("mem_usage", 0, || unsafe { value::allocated_bytes(value) })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded("digest", (), || {
        // SAFETY: Redis passes a value this module created.
        let Some(limiter) = (unsafe { value::borrow(value) }) else {
            return;
        };
        let encoded = codec::encode(limiter);
        let bytes = encoded.as_bytes();
        if let (Some(add), Some(end)) = (
            api!(RedisModule_DigestAddStringBuffer),
            api!(RedisModule_DigestEndSequence),
        ) {
            // SAFETY: `md` is the digest Redis passed in; the buffer is valid for its length.
            unsafe {
                add(md, bytes.as_ptr().cast(), bytes.len());
                end(md);
            }
        }
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis frees each value it owns exactly once. Freeing only returns memory to
    // the allocator, so it is safe on the lazy-free thread too.
    guarded("free", (), || unsafe { value::free(value) })
}

unsafe extern "C" fn copy(
    _from_key: *mut raw::RedisModuleString,
    _to_key: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guarded("copy", null_mut(), || {
        // SAFETY: Redis passes a value this module created.
        match unsafe { value::borrow(value) } {
            Some(limiter) => value::into_raw(limiter.to_owned()),
            None => null_mut(),
        }
    })
}
