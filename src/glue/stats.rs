//! The commands' counters of admitted and denied calls, shown by `INFO ratelimit`: one per
//! command the table (`redis_ratelimit_wire::commands`) says is counted, under its name.

use std::ffi::{CStr, c_int};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use redis_ratelimit_wire::commands::Command;

use super::api::{api, c_string};

/// One counted command's decisions.
struct Counters {
    admitted: AtomicU64,
    denied: AtomicU64,
}

impl Counters {
    const fn new() -> Self {
        Counters {
            admitted: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        }
    }
}

/// The counters of every command of the table, by its position (a command not counted
/// keeps zeros, never shown).
static COUNTERS: [Counters; Command::ALL.len()] = [const { Counters::new() }; Command::ALL.len()];

/// Where a command outside the table would count (none is: every command has its row).
static UNLISTED: Counters = Counters::new();

fn counters(command: Command) -> &'static Counters {
    COUNTERS.get(command as usize).unwrap_or(&UNLISTED)
}

/// Counts one decision of `command`.
pub fn record(command: Command, allowed: bool) {
    let counters = counters(command);
    let counter = if allowed {
        &counters.admitted
    } else {
        &counters.denied
    };
    // Commands run on the main thread only, so a plain load and store (no locked
    // read-modify-write instruction) is exact; atomics just make INFO's read sound.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
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
    for command in Command::ALL.iter().copied().filter(|c| c.counted()) {
        let counters = counters(command);
        let name = command.stats_name();
        add(
            &format!("{name}_admitted"),
            counters.admitted.load(Ordering::Relaxed),
        );
        add(
            &format!("{name}_denied"),
            counters.denied.load(Ordering::Relaxed),
        );
    }
}
