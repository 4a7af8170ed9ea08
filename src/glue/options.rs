//! The module options declared at load (`RedisModule_SetModuleOptions`): the ones every
//! supported server understands, and Valkey's atomic slot migration opt-in where the server
//! is Valkey and knows that option.
//!
//! # Redis 8.4+ atomic slot migration needs nothing from the module
//!
//! Redis's own atomic slot migration (`CLUSTER MIGRATION IMPORT`, Redis 8.4 on) has no
//! opt-in: read in Redis 8.6.3's source (Debian's `redis` 5:8.6.3-1), `redismodule.h`
//! defines no option for it (the options stop at `1 << 3`, `_REDISMODULE_OPTIONS_FLAGS_NEXT`
//! being `1 << 4`), and `cluster_asm.c` refuses a task only while a module holds
//! `RedisModule_ClusterDisableTrim`, which this module never calls. So nothing is declared
//! on Redis, and the limiters move as follows (`tests/it/slot_migration.rs` checks each
//! step on Redis 8.6.3 under load):
//!
//! - the slot's snapshot: `slotSnapshotSaveKeyValuePair` writes every module-type key as
//!   `RESTORE key <ttl> <DUMP payload> ABSTTL` (`o->type == OBJ_MODULE`), so a limiter
//!   travels through the type's RDB save and load, as `DUMP`/`RESTORE` and `MIGRATE` do;
//! - the calls made on the source during the move: `asmFeedMigrationClient` sends the
//!   target the replication stream's commands whose keys are in the slot, found by their
//!   key specs (`getSlotFromCommand`; a keyless command is skipped, a cross-slot one cancels
//!   the task). Those are this module's `RL.FX key effect ...`, which declares its keys
//!   and only ever carries the keys of one call, in one slot as a cluster requires;
//! - the target applies both with clients flagged `CLIENT_MASTER | CLIENT_INTERNAL |
//!   CLIENT_ASM_IMPORTING` (`cluster_asm.c`, the RDB channel's and the buffered stream's),
//!   and `RM_GetContextFlags` sets `REDISMODULE_CTX_FLAGS_REPLICATED` for any
//!   `CLIENT_MASTER` client (`module.c`: "Module command received from MASTER, is
//!   replicated"), so `RL.FX` accepts them as it accepts the primary link. Were it refused,
//!   the error would go to the source unread (Redis logs it as `== CRITICAL ==` and counts
//!   `unexpected_error_replies`) and the limiter would stay behind: the test fails on
//!   that count, and on a limiter admitting above its limit (both seen with `RL.FX`
//!   refusing primaries' import clients on purpose).
//!
//! The server events Redis 8.4 adds (`REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION`, 18: import
//! and migrate started, failed, completed, and `MIGRATE_MODULE_PROPAGATE` to send commands
//! ahead of the snapshot; `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION_TRIM`, 19; the
//! `REDISMODULE_NOTIFY_KEY_TRIMMED` keyspace event) are for modules that keep state outside
//! their keys. This one keeps none (no aux data, no index of keys, no per-slot counters), so
//! it subscribes to none and sends nothing ahead. Not subscribing to `KEY_TRIMMED` also
//! lets Redis trim the moved slot from the source in the background (an active, per-key
//! trim is chosen only for such subscribers or client tracking): the values are then freed
//! on a BIO thread, as `FLUSHALL ASYNC` frees them, which the type's `free` allows.

use std::ffi::c_int;

use redis_module::raw;

use super::api::{self, api, log};

/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (`valkeymodule.h` of Valkey
/// 9.0 on, valkey-io/valkey PR #2593; 9.1.2's header: bits 0..5, `1 << 4` being
/// `SKIP_COMMAND_VALIDATION`). Valkey refuses `CLUSTER MIGRATESLOTS` while any loaded module
/// has not set it. Redis does not define the bit: Redis 8.6.3's `redismodule.h` (Debian's
/// `redis` 5:8.6.3-1 source) stops at `ALLOW_NESTED_KEYSPACE_NOTIFICATIONS`, `1 << 3`
/// (`_REDISMODULE_OPTIONS_FLAGS_NEXT` is `1 << 4`), and a later Redis may give it another
/// meaning, so it is set only where the server says it is Valkey.
pub const VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// The options every supported server understands.
///
/// - HANDLE_IO_ERRORS: a short read while loading fails the load instead of aborting the
///   server (and allows diskless loading).
/// - HANDLE_REPL_ASYNC_LOAD: the module keeps no state outside keys, so loading into a
///   temporary database is safe.
/// - NO_IMPLICIT_SIGNAL_MODIFIED: keys are signalled only when really written, so a denied
///   call does not invalidate WATCH or client-side caches.
fn common_options() -> c_int {
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
    c_int::try_from(options).unwrap_or(0)
}

/// Whether to declare atomic slot migration support: only on a server whose `INFO server`
/// says `server_name:valkey` and whose `RedisModule_GetModuleOptionsAll` includes the bit
/// (Valkey 9.0 and later; Valkey 8 does not know it).
///
/// The module supports it because a limiter lives entirely in its key: the migration's
/// snapshot carries each key through the type's AOF rewrite (`RL.FX key <state>`), and the
/// calls that continue on the source during the move reach the target (and its replicas)
/// as the same `RL.FX` effects the replication stream carries; `RL.FX` accepts both because
/// Valkey 9.1 flags the slot import client's commands `REPLICATED`, as the primary link's
/// (`isReplicatedClient` in `VM_GetContextFlags`). The import client's replies are off, so
/// a refusal there would lose the limiter silently: `tests/it/slot_migration.rs` counts every
/// key on the target and its replica. Keys the target loads before it owns
/// the slot are not served until then, and nothing in the module indexes keys elsewhere
/// (no aux data, no per-node key lists), so there is nothing else to keep in step.
///
/// Forkless operations (`HANDLE_FORKLESS`, Valkey after 9.1) are not declared: that opt-in
/// requires every write open of a key to handle a NULL handle while a background pass holds
/// the key, and the module treats a NULL write handle as an error reply it never expects on
/// a healthy server. Valkey 9.1 has no forkless save, so nothing is lost there; a server
/// with it falls back to a fork while this module is loaded.
pub fn declares_atomic_slot_migration(
    server_name: Option<&str>,
    options_all: Option<c_int>,
) -> bool {
    server_name == Some("valkey")
        && options_all.is_some_and(|all| all & VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION != 0)
}

/// Declares the module's options during `OnLoad`, and logs the server-specific ones.
pub fn declare(ctx: *mut raw::RedisModuleCtx) {
    let Some(set_options) = api!(RedisModule_SetModuleOptions) else {
        return;
    };
    let server_name = api::server_info_field(ctx, c"server", c"server_name");
    let mut options = common_options();
    if declares_atomic_slot_migration(server_name.as_deref(), api::module_options_all()) {
        options |= VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION;
        let version = api::server_info_field(ctx, c"server", c"valkey_version").unwrap_or_default();
        log(
            c"notice",
            &format!(
                "ratelimit: Valkey {version}: declaring atomic slot migration support \
                 (CLUSTER MIGRATESLOTS moves limiters as RL.FX effects)"
            ),
        );
    }
    // SAFETY: called during OnLoad with the module's context; the flags are constants this
    // server understands (the Valkey-only bit only where the server is Valkey and knows it).
    unsafe { set_options(ctx, options) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option flag Valkey 9 knows (`_VALKEYMODULE_OPTIONS_FLAGS_NEXT` is 1 << 6).
    const VALKEY_9_ALL: c_int = (1 << 6) - 1;
    /// Valkey 8's (no atomic slot migration).
    const VALKEY_8_ALL: c_int = (1 << 5) - 1;
    /// Redis 7.2 to 8's (`_REDISMODULE_OPTIONS_FLAGS_NEXT` is 1 << 4).
    const REDIS_ALL: c_int = (1 << 4) - 1;

    #[test]
    fn only_a_valkey_that_knows_the_option_gets_it() {
        assert!(declares_atomic_slot_migration(
            Some("valkey"),
            Some(VALKEY_9_ALL)
        ));
        assert!(!declares_atomic_slot_migration(
            Some("valkey"),
            Some(VALKEY_8_ALL)
        ));
        assert!(!declares_atomic_slot_migration(Some("valkey"), None));
    }

    #[test]
    fn redis_never_gets_the_valkey_bit_whatever_it_defines() {
        assert!(!declares_atomic_slot_migration(None, Some(REDIS_ALL)));
        // A later Redis that defines bit 5 as something else: still not set.
        assert!(!declares_atomic_slot_migration(None, Some(VALKEY_9_ALL)));
        assert!(!declares_atomic_slot_migration(
            Some("redis"),
            Some(VALKEY_9_ALL)
        ));
    }
}
