//! Everything that talks to Redis: registration, the data type, commands, clock, INFO.
//!
//! - [`registry`]: the command table (flags, arity, key specs, ACL categories) and the C
//!   entry points, which catch panics;
//! - [`commands`]: each command's body: read the clock once, parse, drive, count, reply;
//! - [`driver`]: prepare (open keys, evaluate against one `now`) then commit;
//! - [`effects`]: the effects protocol (`RL.FX`): commit and propagate on the primary,
//!   apply on replicas and at AOF load, AOF rewrite;
//! - [`store`]: limiters in keys, and writes applied to several keys all or nothing;
//! - [`scratch`]: working memory multi-key commands reuse between calls;
//! - [`datatype`]: the `ratelimit` type's callbacks; [`options`]: the module options (and
//!   Valkey's atomic slot migration opt-in); [`reply`], [`stats`], [`clock`], [`config`],
//!   and [`api`], the safe wrappers over every FFI call.
//!
//! All `unsafe` FFI is confined to this module and [`crate::value`].

pub mod api;
pub mod clock;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod driver;
pub mod effects;
pub mod lease;
pub mod options;
pub mod registry;
pub mod reply;
pub mod scratch;
pub mod stats;
pub mod store;

use redis_module::raw;

use api::{api, log};

/// Sets the module up during `OnLoad`: checks the server's API, options, panic logging, the
/// data type, the commands and the INFO section.
pub fn on_load(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    api::init_log_context(ctx);
    let missing = api::missing_apis();
    if !missing.is_empty() {
        return Err(format!(
            "this server lacks module APIs: {}",
            missing.join(", ")
        ));
    }
    install_panic_hook();
    options::declare(ctx);
    config::register(ctx)?;
    datatype::register(ctx)?;
    registry::register(ctx)?;
    if let Some(register_info) = api!(RedisModule_RegisterInfoFunc) {
        // Replaces the generic callback `redis_module!` registered, which has no fields.
        // SAFETY: called during OnLoad; the callback lives as long as the module.
        unsafe { register_info(ctx, Some(stats::info)) };
    }
    Ok(())
}

/// Logs panics through Redis before they are caught, so a bug leaves a trace in the server
/// log rather than only on stderr.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        log(
            c"warning",
            &format!("PANIC in the ratelimit module: {info}"),
        );
    }));
}
