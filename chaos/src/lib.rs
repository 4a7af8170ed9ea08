//! The chaos soak and the Sentinel failover test of redis-ratelimit: faults that arrive while
//! traffic runs, and a checker that proves the README's bounds held over the whole run.
//!
//! - [`catalogue`]: the soak's limiters (every algorithm, known parameters, their fallback);
//! - [`load`]: the offered load, 0.5×, 1× and 3× each limiter's rate on a seeded schedule;
//! - [`plant`]: bugs planted on purpose, which the checker must catch;
//! - [`record`]: the decision and fault logs;
//! - [`run`]: a run's directory, named by its seed, kept to be checked again;
//! - [`checker`]: every limiter's true bound over every interval, with the allowances of
//!   the faults and fallback episodes that overlap it;
//! - [`proxy`]: a userspace TCP proxy that delays (per direction, jittered), stalls,
//!   blackholes and resets one link;
//! - [`regions`]: one quota across regions on real processes (`make regions`);
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
pub mod load;
pub mod plant;
pub mod proxy;
pub mod record;
pub mod regions;
pub mod run;
pub mod setup;
pub mod soak_cluster;
