//! The limiter commands' identities: the keyspace event their writes emit, and their
//! counters of admitted and denied calls, shown by `INFO ratelimit`.

use std::ffi::{CStr, c_int};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use super::api::{api, c_string};

/// One limiter command: its event name and its admitted and denied calls.
pub struct LimiterCommand {
    /// Keyspace event name of its writes (`rl.tokenbucket`).
    pub event: &'static CStr,
    /// Field prefix in `INFO` (`tokenbucket` → `ratelimit_tokenbucket_admitted`).
    name: &'static str,
    admitted: AtomicU64,
    denied: AtomicU64,
}

impl LimiterCommand {
    const fn new(event: &'static CStr, name: &'static str) -> Self {
        LimiterCommand {
            event,
            name,
            admitted: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        }
    }

    /// Counts one decision.
    pub fn record(&self, allowed: bool) {
        let counter = if allowed {
            &self.admitted
        } else {
            &self.denied
        };
        // Commands run on the main thread only, so a plain load and store (no locked
        // read-modify-write instruction) is exact; atomics just make INFO's read sound.
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }
}

/// `RL.TOKENBUCKET`.
pub static TOKEN_BUCKET: LimiterCommand = LimiterCommand::new(c"rl.tokenbucket", "tokenbucket");
/// `RL.SLIDING`.
pub static SLIDING: LimiterCommand = LimiterCommand::new(c"rl.sliding", "sliding");
/// `RL.FIXED`.
pub static FIXED: LimiterCommand = LimiterCommand::new(c"rl.fixed", "fixed");
/// `RL.SLIDINGLOG`.
pub static SLIDING_LOG: LimiterCommand = LimiterCommand::new(c"rl.slidinglog", "slidinglog");
/// `CL.THROTTLE`.
pub static THROTTLE: LimiterCommand = LimiterCommand::new(c"cl.throttle", "throttle");
/// `RL.PEEK`: calls that would have been admitted or denied.
pub static PEEK: LimiterCommand = LimiterCommand::new(c"rl.peek", "peek");
/// `RL.REFUND`: "admitted" when something was given back.
pub static REFUND: LimiterCommand = LimiterCommand::new(c"rl.refund", "refund");

static ALL: [&LimiterCommand; 7] = [
    &TOKEN_BUCKET,
    &SLIDING,
    &FIXED,
    &SLIDING_LOG,
    &THROTTLE,
    &PEEK,
    &REFUND,
];

/// The `INFO` callback: section `ratelimit_stats`.
///
/// # Safety
/// Called by Redis with a live INFO context.
pub unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let (Some(section), Some(field)) = (
        api!(RedisModule_InfoAddSection),
        api!(RedisModule_InfoAddFieldULongLong),
    ) else {
        return;
    };
    let add = |name: &str, value: u64| {
        let name = c_string(name);
        // SAFETY: `ctx` is the INFO context Redis passed in; the name is NUL-terminated.
        unsafe { field(ctx, name.as_ptr(), value) };
    };
    let stats: &CStr = c"stats";
    // SAFETY: as above.
    unsafe { section(ctx, stats.as_ptr()) };
    for command in ALL {
        add(
            &format!("{}_admitted", command.name),
            command.admitted.load(Ordering::Relaxed),
        );
        add(
            &format!("{}_denied", command.name),
            command.denied.load(Ordering::Relaxed),
        );
    }
}
