//! Test support shared by every test suite of the workspace that needs a real server: the
//! module's integration tests, the container tests and the client library's fleet tests.
//!
//! - [`server`]: one `redis-server` with the module, on a free loopback port, in its own
//!   temporary directory, stopped and removed on drop (even when a test panics);
//! - [`cluster`]: a loopback Redis Cluster of such servers; [`sentinel`]: Redis Sentinels
//!   monitoring one (a single one, or a group with a quorum);
//! - [`docker`]: containers of the module's image on private networks (the container tests),
//!   and [`docker_cluster`]: a Redis Cluster of them;
//! - [`proxy`]: a loopback TCP proxy that drops a reply after the server ran its command;
//! - [`helpers`]: small wrappers over the module's commands and server introspection;
//! - [`binaries`]: which programs run: `$REDIS_SERVER` (default: `redis-server` on `PATH`),
//!   and `redis-cli` / `redis-check-rdb` beside it, so the whole suite runs against another
//!   build or Valkey with one variable.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

pub mod binaries;
pub mod cluster;
pub mod docker;
pub mod docker_cluster;
pub mod helpers;
pub mod http;
pub mod proxy;
pub mod sentinel;
pub mod server;
