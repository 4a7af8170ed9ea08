//! Plans and per-tenant overrides, kept in Redis and changed in one place: a policy built
//! with [`Policy::from_store`](crate::Policy::from_store) takes its limits, for the tenant
//! a check names, from the policy store, and every replica follows changes within a
//! fraction of a second.
//!
//! - [`spec`]: the text of a limit (`per-minute=sliding:1000/60s`), durations, patterns;
//! - [`snapshot`]: one reading of the store and the precedence rule (exact override >
//!   longest wildcard > plan > the policy's default);
//! - [`edit`]: changes as checked edits of the store;
//! - [`store`]: the Redis layout, the atomic write, the audit stream;
//! - [`PlanSource`]: a replica's view, kept current by notifications and a version check;
//! - [`PlanServer`]: where the store is (one server or a cluster) and a connection to it;
//! - [`file`](mod@file): the TOML export/import form.
//!
//! Keys of a store-backed policy do not depend on the plan: limit `per-minute` of policy
//! `api` for tenant `acme` is always `rl:plan:{acme}:api:per-minute:sliding`, so a change of
//! plan or override applies to the state the tenant has (a bucket keeps its tokens, clamped
//! to a lower capacity; a window keeps its count). The algorithm kind is part of the key, so
//! a change of algorithm starts a fresh key rather than reading another kind's state.

mod connection;
pub mod edit;
pub mod file;
pub mod snapshot;
mod source;
pub mod spec;
pub mod store;

pub use connection::{PlanConnection, PlanServer};
pub use source::{PlanOptions, PlanSource, PlanStatus};

/// The key template of limit `limit` (of kind `kind`) of store-backed policy `policy`,
/// whose tenant is the input `tenant_input`: one slot per tenant (the hash tag), the same
/// key whatever plan or override sets the limit.
pub fn key_template(tenant_input: &str, policy: &str, limit: &str, kind: spec::Kind) -> String {
    format!(
        "rl:plan:{{{{{{{tenant_input}}}}}}}:{policy}:{limit}:{}",
        kind.as_str()
    )
}
