//! The policy store's tests, one binary, one file per concern:
//!
//! - `plans`: `rlctl` and the store on a real server, store-backed policies through the
//!   limiter;
//! - `plans_cluster`: `rlctl` and a source through any node of a cluster;
//! - `hostile`: hostile and careless input against the store, its replicas and `rlctl`;
//! - `top`: `rlctl top` merging the fleet's top-keys reports of two client languages, and
//!   the plan as the key class of a store-backed policy's metrics;
//! - `typos`: careless writes `rlctl` refuses (a misspelt limit name, a limit the server
//!   refuses, a plan set that would drop limits).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

mod hostile;
mod plans;
mod plans_cluster;
mod top;
mod typos;
