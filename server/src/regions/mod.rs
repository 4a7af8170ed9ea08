//! The service as one region of a quota shared across regions (`--region-config`,
//! `docs/regions.md`): its limits decided by `RL.REGIONAL` (this region's floor, then a lease
//! from home's pool), and the lease agent as a task of the service, choosing the hot limits
//! itself. The region file is read by `crate::config` ([`crate::config::RegionConfig`]).
//!
//! - [`split`]: each limit split into this region's floor and home's pool
//!   (`core::regional::split`);
//! - [`check`]: a limits config this region cannot share, refused naming the rule and field;
//! - [`hot_keys`]: the demand noted per limit, and the hot limits chosen from it;
//! - [`agent`]: the lease agent's task and its metrics.

pub mod agent;
pub mod check;
pub mod hot_keys;
pub mod split;
