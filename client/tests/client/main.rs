//! The client library's tests, one binary (faster to build than one per file), one file per
//! concern:
//!
//! - `limiter`, `http`: the limiter and the tower layer on the in-memory store;
//! - `redis_store`: the Redis store against a real server with the module;
//! - `fleet`: demo-service processes behind a round-robin load generator, and a cluster.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

mod fleet;
mod http;
mod limiter;
mod plans;
mod plans_fleet;
mod redis_store;
