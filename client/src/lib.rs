//! One exact rate limit across every replica of a service, decided by the `redis-ratelimit`
//! module, with what a service needs around it: policies of several limits, leases that
//! keep most requests off the network, a fallback for when Redis is slow or gone, `429`
//! answers with `Retry-After` and the IETF `RateLimit` header fields, and metrics.
//!
//! # Quick start (axum)
//!
//! With `axum = "0.8"` and `tokio = { version = "1", features = ["macros",
//! "rt-multi-thread"] }` next to this crate in `Cargo.toml`:
//!
//! ```no_run
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use redis_ratelimit_client::http::{Check, RateLimitLayer};
//! use redis_ratelimit_client::store::RedisStore;
//! use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter, Replicas};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let policy = Policy::builder("api")
//!         .limit(Limit::new("per-key", Algorithm::token_bucket(100, Duration::from_secs(60))?, "rl:{{{key}}}")?)
//!         .build()?;
//!     let store = RedisStore::new("redis://127.0.0.1/")?;
//!     if let Err(error) = store.connect().await {
//!         eprintln!("Redis is not reachable yet ({error}); the local fallback decides meanwhile");
//!     }
//!     let limiter = RateLimiter::builder(store)
//!         .policy(policy)
//!         .replicas(Replicas::fixed(3)) // the fallback enforces a share of 100 / 3
//!         .build()?;
//!     limiter.validate("api", &Inputs::new().with("key", "any"))?; // inputs, at start-up
//!     let layer = RateLimitLayer::new(limiter, |request| {
//!         // Without an API key, one shared key (None would let the request through unlimited).
//!         let key = request.headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("anonymous");
//!         Some(Check::new("api").input("key", key))
//!     });
//!     let app = Router::new().route("/", get(|| async { "hello" })).route_layer(layer);
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! # How a check runs
//!
//! 1. The policy's key templates are rendered from the check's [`Inputs`].
//! 2. **Deny cache**: a key set denied for `d` is denied from memory until `d` has passed
//!    (no store call), [`Source::Cache`].
//! 3. **Lease** (opt-in, [`Lease`]): a request is paid from units this replica claimed
//!    earlier, [`Source::Lease`]; when they run out, one store call claims up to `N` more
//!    with a partial grant.
//! 4. **Store**: limits whose keys share a slot go in one `RL.MULTI` (one call for the
//!    whole policy on a single server). On a cluster, groups in different slots are called
//!    most specific key first (a per-user key before a global one, so the hot shared key is
//!    rarely charged and refunded); if a later group denies, the earlier ones are refunded,
//!    so the policy is all-or-nothing. [`Source::Store`].
//! 5. **Fallback**: every store call has a timeout (default 50 ms, from measurement: see
//!    [`DEFAULT_TIMEOUT`](policy::DEFAULT_TIMEOUT)). On timeout or a connection error the
//!    policy's [`Fallback`] decides (open, closed, or `local` at `quota / replicas`,
//!    continuing from the store's last answer for the key and charging the store what it
//!    admitted once it answers again), [`Source::Fallback`]. A circuit breaker stops
//!    calling a dead store after a few outages (a stall that times out every call in flight
//!    counts once) and probes it every half second.
//!
//! # Guarantees
//!
//! | situation | bound on what the fleet admits for a key |
//! |---|---|
//! | store reachable, no leases | exactly what the module admits: one quota whatever the replica count |
//! | with leases (claims up to `M` units) | never more than the store granted; over any interval, at most the limit's allowance for the interval plus the units outstanding in leases at its start (≤ `replicas × M`) |
//! | store unreachable, `local` fallback | over any interval, at most the allowance, plus the leases outstanding, plus the stale part of the replicas' last answers (each replica starts from `⌊remaining / replicas⌋` of the store's last answer, and what it admits is charged to the store when it answers again): nothing more for a key the store had exhausted, however often it flaps (the README's *Fallback bound*) |
//! | during scaling, count lagging | with `n` replicas believing there are `m`, up to `n / m` quotas during a fallback |
//! | a timed-out call | may still have been applied by the server: it charged units nobody used (under-admission, never over) |
//! | a lost refund | under-admits by the refunded units until the limiter refills; never over-admits |
//!
//! # Modules
//!
//! - [`policy`]: policies and limits; [`config`]: the same from a TOML file;
//! - [`job`]: checks whose limits (keys built by the caller) come with the call;
//! - [`store`]: the [`Store`](store::Store) trait, the Redis store, an in-memory store;
//! - [`http`]: the `tower` layer and the header fields;
//! - [`metrics`]: what is recorded through the `metrics` facade;
//! - [`top`]: who is throttled fleet-wide, the most denied keys merged across replicas;
//! - [`expiring`]: a map whose entries expire, in O(log n) each (the deny cache's, and a
//!   service's held in-flight slots).

pub mod algorithm;
mod breaker;
mod clock;
pub mod config;
pub mod decision;
mod deny_cache;
mod error;
pub mod expiring;
mod fx_hash;
pub mod http;
mod in_flight;
pub mod job;
pub mod key;
mod lease;
mod limit_set;
mod limiter;
mod local;
pub mod metrics;
mod outcome;
pub mod policy;
mod policy_source;
pub mod regions;
mod replicas;
pub mod store;
pub mod top;

pub use algorithm::{Algorithm, Rate};
pub use breaker::BreakerConfig;
pub use clock::{Clock, FakeClock, MonotonicClock};
pub use decision::{Decision, LimitStatus, Outcome, Regional, Source, Why};
pub use error::{BuildError, CheckError};
pub use in_flight::InFlight;
pub use job::{Charge, Job, JobLimit, Profile};
pub use key::{Inputs, KeyTemplate};
pub use limiter::{RateLimiter, RateLimiterBuilder};
pub use policy::{Fallback, Lease, Limit, Policy};
pub use policy_source::PolicySource;
pub use replicas::Replicas;
pub use store::{Backend, StoreBackend};

/// The README's examples, compiled and run as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of the repository's front page and of the docs book (`docs/`), which
/// now hold what this crate's README held: compiled and run as doctests with the crate's,
/// so they cannot rot either (`make client-test`).
#[cfg(doctest)]
pub mod book_doctests {
    /// `README.md`.
    #[doc = include_str!("../../README.md")]
    pub struct FrontPage;
    /// `docs/rust/index.md`.
    #[doc = include_str!("../../docs/rust/index.md")]
    pub struct RustClient;
    /// `docs/rust/policies.md`.
    #[doc = include_str!("../../docs/rust/policies.md")]
    pub struct Policies;
    /// `docs/rust/http.md`.
    #[doc = include_str!("../../docs/rust/http.md")]
    pub struct Http;
    /// `docs/guides/plans.md`.
    #[doc = include_str!("../../docs/guides/plans.md")]
    pub struct Plans;
    /// `docs/guides/managed-redis.md`.
    #[doc = include_str!("../../docs/guides/managed-redis.md")]
    pub struct ManagedRedis;
}
