//! The model checker of one quota across regions (`docs/regions.md`).
//!
//! `R` regions each decide from their own floor, then from a balance leased from the home
//! region's pool; a lease agent per region tops the balance up every refresh period. All of
//! it runs here in virtual time, seeded, with no I/O and no clock: per-link delay, jitter,
//! loss and partitions, per-region clock drift, lease lifetimes, `WAIT` on grants and home
//! failovers that lose what was not replicated. The floors, the pool and the regional step
//! are the product's own code (`redis-ratelimit-core`: its algorithms, its engine,
//! `core::regional` and the split of a global limit, `core::regional::split`, which the
//! service's region mode and the run on real processes use too), so what is checked is the
//! product's arithmetic, not a copy of it.
//!
//! - [`limit`]: a global limit, as core's quota, and its bound;
//! - [`split`]: its split by core into floors by weight and a pool (pre-paid or carryover),
//!   with the drift derating, the pool as the lease agent asks it;
//! - [`net`]: the links and the seeded randomness;
//! - [`sim`]: the scenario and the run (home, regions, agents), returning every admission;
//! - [`check`]: each algorithm's bound over every interval of the admission log.
//!
//! A test harness: a panic is a failed check, so the arithmetic lints are relaxed here as in
//! the chaos crate.
#![allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

pub mod check;
pub mod limit;
pub mod net;
pub mod sim;
pub mod split;
