//! The commands' counters of admitted and denied calls, shown by `INFO ratelimit`, and the
//! keyspace event each command's writes emit.

use std::ffi::{CStr, c_int};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use super::api::{api, c_string};

/// One command's identity and counters.
pub struct CommandStats {
    /// Keyspace event name of its writes (`rl.tokenbucket`).
    pub event: &'static CStr,
    /// Field prefix in `INFO` (`tokenbucket` → `ratelimit_tokenbucket_admitted`).
    name: &'static str,
    admitted: AtomicU64,
    denied: AtomicU64,
}

impl CommandStats {
    const fn new(event: &'static CStr, name: &'static str) -> Self {
        CommandStats {
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

/// Declares every counted command once: its static, event name and `INFO` prefix.
macro_rules! counted_commands {
    ($($(#[$doc:meta])* $static:ident = $event:literal, $name:literal;)*) => {
        $($(#[$doc])* pub static $static: CommandStats = CommandStats::new($event, $name);)*

        static ALL: &[&CommandStats] = &[$(&$static),*];
    };
}

counted_commands! {
    /// `RL.TOKENBUCKET`.
    TOKEN_BUCKET = c"rl.tokenbucket", "tokenbucket";
    /// `RL.SLIDING`.
    SLIDING = c"rl.sliding", "sliding";
    /// `RL.FIXED`.
    FIXED = c"rl.fixed", "fixed";
    /// `RL.SLIDINGLOG`.
    SLIDING_LOG = c"rl.slidinglog", "slidinglog";
    /// `CL.THROTTLE`.
    THROTTLE = c"cl.throttle", "throttle";
    /// `RL.MULTI`: calls every limit admitted, or that one denied.
    MULTI = c"rl.multi", "multi";
    /// `RL.ACQUIRE`.
    ACQUIRE = c"rl.acquire", "acquire";
    /// `RL.RELEASE`: "admitted" when a live holder was released.
    RELEASE = c"rl.release", "release";
    /// `RL.PEEK`: calls that would have been admitted or denied.
    PEEK = c"rl.peek", "peek";
    /// `RL.REFUND`: "admitted" when something was given back.
    REFUND = c"rl.refund", "refund";
}

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
