//! The client library's tests, one binary (faster to build than one per file), one file per
//! concern:
//!
//! - `limiter`, `http`: the limiter and the tower layer on the in-memory store;
//! - `layers`: two stacked tower layers (a default policy and a route's) on a real server;
//! - `redis_store`: the Redis store against a real server with the module;
//! - `regions`: the regional lease agent against a home and a region;
//! - `fleet`: demo-service processes behind a round-robin load generator, and a cluster;
//! - `plans_fleet`: demo-service replicas following the policy store (the
//!   `redis-ratelimit-plans` crate, whose own tests are in `plans/tests/plans/`);
//! - `cluster_stall`: one stopped primary of a cluster and the limiters on the other shards;
//! - `burst`: 1,000 concurrent checks on a loaded machine, decided by the store;
//! - `replay`: a reply lost after the server ran the command is never sent again;
//! - `valkey_migration`: the cluster store through Valkey 9.1's atomic slot migration;
//! - `without_lua`: a Valkey 9.1 without its Lua engine or the module (the backend probe);
//! - `top_keys`: the fleet's top denied keys from three replicas on a real server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

mod batching;
mod burst;
mod cluster_stall;
mod continuity;
mod fleet;
mod http;
mod jobs;
mod layers;
mod limiter;
mod plans_fleet;
mod redis_store;
mod regions;
mod replay;
mod stress;
mod top_keys;
mod valkey_migration;
mod without_lua;

/// Held by the tests that load the machine (fleets of processes, load generators): run one
/// at a time, so a test with a short timeout is not starved by another's load on a 2-core
/// machine.
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
