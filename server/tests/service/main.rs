//! The service's tests, one binary, one file per concern:
//!
//! - `features`: every config feature over gRPC (the envoy-types client), the statuses,
//!   headers and metadata, bad input refused without charging, every key expiring;
//! - `atomic`: all or nothing under 16 concurrent clients, and on a Redis Cluster with
//!   descriptors in two slots (refunds);
//! - `operations`: Redis down under each failure mode, a reload under load, a bad config,
//!   a graceful stop giving leases back;
//! - `http_api`: the JSON API, in-flight release, the bearer token, problem+json, metrics;
//! - `operating`: what an operator sees (docs/operating.md): the reference's descriptor
//!   counters, the limit and key class of each decision, quotas, the top denied keys;
//! - `lost_and_refused`: a check whose reply is lost charged once (a cutting proxy), a
//!   hits_addend the store refuses answered 400 / `INVALID_ARGUMENT`;
//! - `plans`: limits with `tenant_key` from the policy store, a plan change and an override
//!   within a second, the YAML default without a store, bad config refused;
//! - `hostile`: hostile and careless input (config bombs, half-written configs, slowloris,
//!   stream and connection floods, no file descriptors left, a stop that never finishes),
//!   memory and descriptors read from /proc, and the security switches;
//! - `python`: an independent client, the stubs `envoy-data-plane` generates from Envoy's protos;
//! - `envoy`: a real Envoy with the example config in front of the service, over real HTTP;
//! - `reference`: envoyproxy/ratelimit's README examples, service and integration tests'
//!   expectations, the defects a migration met, and its environment variables, `/json`
//!   and `/healthcheck`, over gRPC and both HTTP APIs;
//! - `console`: the operator console's API (writes guarded, what it writes enforced) and
//!   its page in a real browser (Debian's chromium, Selenium);
//! - `venv`: the Python packages the Python and Envoy tests use (pinned), installed on first
//!   use.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

mod atomic;
mod console;
mod envoy;
mod features;
mod harness;
mod hostile;
mod hostile_plans;
mod http_api;
mod lost_and_refused;
mod operating;
mod operations;
mod plans;
mod python;
mod reference;
mod regions;
mod rlqs;
mod venv;
