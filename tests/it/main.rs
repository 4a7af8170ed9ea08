//! Integration tests: the module loaded into real `redis-server` processes.
//!
//! One test binary (faster to build than one per file); one file per concern. These tests
//! never link the crate itself: they only load the built module into servers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(clippy::arithmetic_side_effects, missing_docs)]

use redis_ratelimit_testkit::{binaries, cluster as cluster_support, helpers, server};

mod acl;
mod adversarial;
mod algorithms;
mod cluster;
mod concurrency;
mod errors;
mod failover;
mod inflight;
mod keyspace;
mod limiter_model;
mod memo;
mod memory;
mod multi;
mod pacing;
mod partial;
mod peek_refund;
mod persistence;
mod protocol;
mod regional;
mod replication;
mod slot_migration;
mod throttle;
mod token_bucket;
