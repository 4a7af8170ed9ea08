//! Plans and per-tenant overrides, kept in Redis and changed in one place: a policy built
//! with [`Policy::from_store`](redis_ratelimit_client::Policy::from_store) takes its limits,
//! for the tenant a check names, from a [`PlanSource`] given to the limiter
//! ([`RateLimiterBuilder::policy_source`](redis_ratelimit_client::RateLimiterBuilder::policy_source)),
//! and every replica follows changes within a fraction of a second.
//!
//! - [`spec`]: the text of a limit (`per-minute=sliding:1000/60s`), durations, patterns;
//! - [`snapshot`]: one reading of the store and the precedence rule (exact override >
//!   longest wildcard > plan > the policy's default);
//! - [`edit`]: changes as checked edits of the store;
//! - [`plan_store`]: the Redis layout, the atomic write, the audit stream;
//! - [`change`]: the write verbs, checked, previewed ([`preview`]) and written: one code
//!   path for `rlctl` and the service's console; [`history`]: reading the audit stream;
//! - [`PlanSource`]: a replica's view, kept current by notifications and a version check,
//!   and the limiter's [`PolicySource`](redis_ratelimit_client::PolicySource);
//! - [`PlanServer`]: where the store is (one server or a cluster) and a connection to it;
//! - [`file`](mod@file): the TOML export/import form;
//! - `rlctl` (`src/bin/rlctl/`): the command-line tool.
//!
//! Keys of a store-backed policy do not depend on the plan: limit `per-minute` of policy
//! `api` for tenant `acme` is always `rl:plan:{acme}:api:per-minute:sliding`, so a change of
//! plan or override applies to the state the tenant has (a bucket keeps its tokens, clamped
//! to a lower capacity; a window keeps its count). The algorithm kind is part of the key, so
//! a change of algorithm starts a fresh key rather than reading another kind's state.

pub mod change;
mod connection;
pub mod edit;
pub mod file;
pub mod history;
mod key;
pub mod plan_store;
pub mod preview;
pub mod snapshot;
mod source;
pub mod spec;
mod table;

pub use connection::{PlanConnection, PlanServer};
pub use key::key_template;
pub use source::{
    ClassedLimit, DEFAULT_CLASS, OVERRIDE_CLASS, PlanOptions, PlanSource, PlanStatus,
};
