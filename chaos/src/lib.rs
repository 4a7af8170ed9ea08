//! The chaos soak and the Sentinel failover test of redis-ratelimit: faults that arrive while
//! traffic runs, and a checker that proves the README's bounds held over the whole run.
//!
//! - [`catalogue`]: the soak's limiters (every algorithm, known parameters);
//! - [`record`]: the decision and fault logs;
//! - [`checker`]: every limiter's bound over every interval, with the faults' allowances;
//! - [`proxy`]: a userspace TCP proxy that delays, stalls and resets one node's link;
//! - [`soak_cluster`]: a 3+3 cluster of containers with one node behind the proxy, its
//!   faults, and the checks after the run (replicas identical, memory back to baseline);
//! - [`fleet`]: the load generator processes (`chaos-load`) and their logs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

pub mod catalogue;
pub mod checker;
pub mod fleet;
pub mod proxy;
pub mod record;
pub mod setup;
pub mod soak_cluster;
