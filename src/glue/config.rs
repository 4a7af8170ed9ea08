//! Module configuration: `CONFIG GET/SET ratelimit.<name>`, or `ratelimit.<name> <value>`
//! lines after `loadmodule` in redis.conf.

use std::ffi::{CStr, c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::raw;
use redis_ratelimit_core::sliding_log::{DEFAULT_MAX_LOG_ENTRIES, MAX_STORED_ENTRIES};

use super::api::api;

/// An integer setting with its bounds.
pub struct NumericConfig {
    name: &'static CStr,
    value: AtomicI64,
    default: i64,
    min: i64,
    max: i64,
}

impl NumericConfig {
    const fn new(name: &'static CStr, default: i64, min: i64, max: i64) -> Self {
        NumericConfig {
            name,
            value: AtomicI64::new(default),
            default,
            min,
            max,
        }
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// Largest `limit` `RL.SLIDINGLOG` accepts, so that no call can make a log grow without
/// bound (each admitted unit in the window costs 8 bytes).
pub static MAX_LOG_ENTRIES: NumericConfig = NumericConfig::new(
    c"max-log-entries",
    DEFAULT_MAX_LOG_ENTRIES as i64,
    1,
    MAX_STORED_ENTRIES as i64,
);

/// Largest `limit` of an in-flight limit (`RL.ACQUIRE`, `CONCURRENCY`): each call walks the
/// holders, so the bound keeps a call's work and a key's memory small (1,000 holders with
/// 128-byte ids: at most 137 KB per key).
pub static MAX_HOLDERS: NumericConfig = NumericConfig::new(c"max-holders", 1_000, 1, 100_000);

/// Milliseconds added to the clock the module reads: lets tests simulate a node whose clock
/// is skewed, or one past the last instant the module computes with. Up to 100 years either
/// way. Redis's own expiry clock is not shifted. Only in builds with `test-hooks`.
#[cfg(feature = "test-hooks")]
pub static TEST_CLOCK_OFFSET_MS: NumericConfig = NumericConfig::new(
    c"test-clock-offset-ms",
    0,
    -3_155_760_000_000,
    3_155_760_000_000,
);

#[cfg(not(feature = "test-hooks"))]
const CONFIGS: &[&NumericConfig] = &[&MAX_LOG_ENTRIES, &MAX_HOLDERS];
#[cfg(feature = "test-hooks")]
const CONFIGS: &[&NumericConfig] = &[&MAX_LOG_ENTRIES, &MAX_HOLDERS, &TEST_CLOCK_OFFSET_MS];

unsafe extern "C" fn get_numeric(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    // SAFETY: privdata is the address of a static NumericConfig, given at registration.
    let config = unsafe { &*privdata.cast::<NumericConfig>() };
    config.get()
}

unsafe extern "C" fn set_numeric(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _error: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in get_numeric. Redis has already checked the bounds.
    let config = unsafe { &*privdata.cast::<NumericConfig>() };
    config.value.store(value, Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

/// Registers the settings and applies values from the server's configuration. Must run
/// during `OnLoad`.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let (Some(register), Some(load)) = (
        api!(RedisModule_RegisterNumericConfig),
        api!(RedisModule_LoadConfigs),
    ) else {
        return Err("the server lacks the module configuration API".into());
    };
    for &config in CONFIGS {
        // Typed first, so that the pointer can only be the setting's own address.
        let setting: *const NumericConfig = config;
        let privdata = setting.cast_mut().cast::<c_void>();
        // SAFETY: called during OnLoad; the name is static and NUL-terminated; privdata points
        // to a static that outlives the module.
        let status = unsafe {
            register(
                ctx,
                config.name.as_ptr(),
                config.default,
                raw::REDISMODULE_CONFIG_DEFAULT,
                config.min,
                config.max,
                Some(get_numeric),
                Some(set_numeric),
                None,
                privdata,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "could not register ratelimit.{}",
                config.name.to_string_lossy()
            ));
        }
    }
    // SAFETY: called during OnLoad, after every configuration is registered.
    if unsafe { load(ctx) } != raw::REDISMODULE_OK as c_int {
        return Err("invalid ratelimit.* values in the server configuration".into());
    }
    Ok(())
}
