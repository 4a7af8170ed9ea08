//! Where limits are decided: the [`Store`] trait, what it is asked and what it answers.
//!
//! The limiter never builds Redis commands itself. It asks a store to *acquire* units from a
//! group of limits whose keys share a slot (all-or-nothing, or a partial grant for leases)
//! and to *refund* units. [`RedisStore`] turns that into `RL.*` commands;
//! [`MemoryStore`] runs the same core algorithms in process, for tests and examples that
//! have no server.

pub(crate) mod backend;
mod batch;
mod cluster;
mod command;
mod connection;
mod contract;
mod error;
mod liveness;
mod memory;
mod redis;
mod reply;
mod request;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;

pub use self::backend::{Backend, LIBRARY};
pub use self::batch::BatchOptions;
pub use self::contract::{BoxFuture, Capabilities, Store};
pub use self::error::StoreError;
pub use self::memory::MemoryStore;
pub use self::redis::{MultiSupport, RedisStore, RedisStoreOptions};
pub use self::request::{Acquire, HashFields, HashWrite, LimitCall, Refund};
#[cfg(feature = "sentinel")]
pub use self::sentinel::{
    RESOLVE_PACE, SentinelStore, SentinelUrlError, parse_url as parse_sentinel_url,
};
pub use crate::outcome::{GroupGrant, StoreBackend, View};
