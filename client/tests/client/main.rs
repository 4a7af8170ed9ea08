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

use std::collections::BTreeMap;

use ::http::Response;
use axum::Router;
use axum::body::Body;
use metrics_util::debugging::{DebugValue, Snapshotter};
use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::store::{Acquire, LimitCall};
use tower::ServiceExt;

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
mod top_vectors;
mod valkey_migration;
mod without_lua;

/// A call of one unit on one limit.
fn one<'a>(key: &'a str, algorithm: &'a Algorithm) -> Acquire<'a> {
    Acquire {
        limits: vec![LimitCall {
            key,
            algorithm,
            weight: 1,
            max_wait: None,
            lease_suffix: None,
        }],
        units: 1,
        partial_min: None,
        holder: None,
    }
}

/// Every series `snapshotter`'s recorder holds, as `name{label=value,...}` and its value (a
/// histogram's: how many samples).
fn series(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    let mut series = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        let value = match value {
            DebugValue::Counter(count) => count as f64,
            DebugValue::Gauge(value) => value.into_inner(),
            DebugValue::Histogram(values) => values.len() as f64,
        };
        series.insert(format!("{}{{{}}}", key.name(), labels.join(",")), value);
    }
    series
}

/// Sends `request`, its body empty, through `app`.
async fn send(app: &Router, request: ::http::request::Builder) -> Response<Body> {
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// A response's header field, as text.
fn header<'a>(response: &'a Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// Held by the tests that load the machine (fleets of processes, load generators): run one
/// at a time, so a test with a short timeout is not starved by another's load on a 2-core
/// machine.
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
