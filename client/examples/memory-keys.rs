//! What the limiter keeps per distinct key (`client/README.md`, "Memory per key"): its
//! resident memory after checks of `--keys` distinct keys on a one-hour token bucket, each
//! answered by a store that keeps nothing (so the figure is the client's alone: the store's
//! last answer per key set, which the fallback continues from, and the rest of its per-key
//! tables), with `--max-tracked-keys` as the bound on each table.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-client --example memory-keys -- \
//!     --keys 1000000 [--max-tracked-keys 100000]
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::time::{Duration, Instant};

use clap::Parser;
use redis_ratelimit_client::store::{
    Acquire, BoxFuture, Capabilities, GroupGrant, Refund, Store, StoreBackend, StoreError, View,
};
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};

#[derive(Parser)]
struct Args {
    /// Distinct keys checked, once each
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// The limiter's bound on each per-key table (default: the library's, 100,000)
    #[arg(long)]
    max_tracked_keys: Option<usize>,
}

/// Admits every call at once, keeping nothing.
struct Answering;

impl Store for Answering {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            Ok(GroupGrant {
                granted: request.units,
                binding: 0,
                views: request
                    .limits
                    .iter()
                    .map(|_| View {
                        allowed: true,
                        remaining: 99,
                        retry_after: Some(Duration::ZERO),
                        reset_after: Duration::from_secs(36),
                        limit: 100,
                        regional: None,
                    })
                    .collect(),
                backend: StoreBackend::Module,
            })
        })
    }

    fn refund<'a>(&'a self, _: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            multi: true,
            partial: true,
        }
    }

    fn slot(&self, _: &str) -> Option<u16> {
        None
    }
}

/// This process's resident memory, in KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let policy = Policy::builder("api")
        .limit(
            Limit::new(
                "per-key",
                Algorithm::token_bucket(100, Duration::from_secs(3600)).unwrap(),
                "rl:{key}",
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let mut builder = RateLimiter::builder(Answering).policy(policy);
    if let Some(max) = args.max_tracked_keys {
        builder = builder.max_tracked_keys(max);
    }
    let limiter = builder.build().unwrap();
    let before_kib = rss_kib();
    let started = Instant::now();
    for index in 0..args.keys {
        let inputs = Inputs::new().with("key", format!("user-{index:012}"));
        assert!(limiter.check("api", &inputs).await.unwrap().allowed);
    }
    let after_kib = rss_kib();
    println!(
        "{} distinct keys, max_tracked_keys {}: RSS {:.1} -> {:.1} MiB (+{:.1} MiB, {:.0} B a key), {:.1} s",
        args.keys,
        args.max_tracked_keys
            .map_or_else(|| "default".to_string(), |max| max.to_string()),
        before_kib as f64 / 1024.0,
        after_kib as f64 / 1024.0,
        (after_kib - before_kib) as f64 / 1024.0,
        (after_kib - before_kib) as f64 * 1024.0 / args.keys as f64,
        started.elapsed().as_secs_f64(),
    );
}
