//! A rate-limited HTTP service: one replica of a fleet that shares one quota per API key.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-client --example demo-service -- \
//!     --redis redis://127.0.0.1:6379/ --listen 127.0.0.1:8080 --limit 100 --window 60 \
//!     [--replicas 3] [--lease 10] [--timeout-ms 50] [--backend auto|module|functions|scripts]
//! ```
//!
//! `GET /` is limited per `x-api-key` header (requests without one share the key
//! `anonymous`) by a token bucket of `--limit` tokens refilled over `--window` seconds. When
//! Redis is out of reach each replica falls back to `limit / replicas`. `GET /metrics` is the
//! Prometheus text of the limiter's metrics (docs/operating.md); every replica reports its
//! denials for the fleet's top keys once a second (`rlctl top demo`). Anything else is a
//! quick 404.
//!
//! With `--plans`, `GET /` is limited instead by the limits the policy store gives
//! the tenant named in the `x-tenant` header (`anonymous` without one), followed through
//! its change notifications and a version check every `--plans-check-ms` (default 500);
//! `--limit`/`--window` are then the defaults (a tenant on no plan, or Redis not read yet).
//!
//! `--backend` picks what runs the limits in Redis (default `auto`: the module if loaded, else
//! the Functions library, loaded if absent, else the library as a script).
//!
//! On start it prints `listening on ADDR` (with the real port when `--listen` ends in `:0`),
//! and on stderr `demo-service: backend NAME` once connected.
//! On SIGTERM or Ctrl-C it refunds its unspent leases before exiting.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use clap::Parser;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redis_ratelimit_client::http::{Check, RateLimitLayer};
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, StoreBackend};
use redis_ratelimit_client::top::TopKeys;
use redis_ratelimit_client::{
    Algorithm, Backend, Fallback, Lease, Limit, Policy, RateLimiter, Replicas,
};
use redis_ratelimit_plans::{PlanOptions, PlanSource};

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "demo-service",
    about = "A rate-limited HTTP service: GET / is limited per x-api-key header (requests \
             without one share the key 'anonymous') by a token bucket of --limit tokens \
             refilled over --window seconds, decided in Redis for every replica; GET /metrics \
             is Prometheus text",
    args_override_self = true
)]
struct Flags {
    /// The Redis server with the module, e.g. redis://127.0.0.1:6379/
    #[arg(long, value_name = "URL")]
    redis: String,

    /// Where to listen, e.g. 127.0.0.1:8080 (port 0: any free port)
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,

    /// Tokens per key
    #[arg(long, value_name = "N")]
    limit: u64,

    /// Time to refill an empty bucket
    #[arg(long, value_name = "SECONDS")]
    window: u64,

    /// Replicas of this service; without Redis each allows limit / K
    #[arg(long, value_name = "K", default_value_t = 1)]
    replicas: u64,

    /// Claim N tokens per Redis call and spend them from memory [default: off]
    #[arg(long, value_name = "N")]
    lease: Option<u64>,

    /// Longest wait for Redis before the local fallback decides
    #[arg(long, value_name = "MS", default_value_t = default_timeout_ms())]
    timeout_ms: u64,

    /// What runs the limits in Redis: auto (the module if loaded, else the Functions
    /// library, loaded if absent, else it as a script), module, functions or scripts
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = backend)]
    backend: Backend,

    /// Limit GET / by the plan of the tenant in the x-tenant header, read from the policy
    /// store in Redis (rlctl edits it); --limit and --window are the defaults of tenants
    /// without a plan
    #[arg(long)]
    plans: bool,

    /// The backstop of --plans (which it implies): compare the store's version this often
    /// [default: 500]
    #[arg(long, value_name = "MS")]
    plans_check_ms: Option<u64>,
}

fn default_timeout_ms() -> u64 {
    u64::try_from(redis_ratelimit_client::policy::DEFAULT_TIMEOUT.as_millis()).unwrap_or(u64::MAX)
}

fn backend(name: &str) -> Result<Backend, String> {
    Backend::parse(name).ok_or_else(|| "one of auto, module, functions or scripts".to_string())
}

struct Args {
    redis: String,
    listen: SocketAddr,
    limit: u64,
    window: Duration,
    replicas: u64,
    lease: Option<u64>,
    timeout: Duration,
    /// Plans: limits from the policy store per `x-tenant`, and the backstop period.
    plans: Option<Duration>,
    /// What runs the limits in Redis.
    backend: Backend,
}

impl From<Flags> for Args {
    fn from(flags: Flags) -> Self {
        let plans = match (flags.plans, flags.plans_check_ms) {
            (_, Some(ms)) => Some(Duration::from_millis(ms)),
            (true, None) => Some(PlanOptions::default().check_every),
            (false, None) => None,
        };
        Self {
            redis: flags.redis,
            listen: flags.listen,
            limit: flags.limit,
            window: Duration::from_secs(flags.window),
            replicas: flags.replicas,
            lease: flags.lease,
            timeout: Duration::from_millis(flags.timeout_ms),
            plans,
            backend: flags.backend,
        }
    }
}

fn policy(args: &Args) -> Result<Policy, Box<dyn std::error::Error>> {
    let bucket = Algorithm::token_bucket(args.limit, args.window)?;
    // The hash tag keeps every key of one API key in one cluster slot.
    let mut builder = match args.plans {
        // Plans: the bucket is the default; keys are the store's (per tenant).
        Some(_) => Policy::from_store("demo", "tenant"),
        // Metrics say what kind of key was limited (the plan's name, with plans).
        None => Policy::builder("demo").key_class("api_key"),
    };
    builder = builder
        .limit(Limit::new("per-key", bucket, "demo:{{{api_key}}}")?)
        .fallback(Fallback::Local)
        .timeout(args.timeout);
    if let Some(units) = args.lease {
        builder = builder.lease(Lease::new(units));
    }
    Ok(builder.build()?)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(redis_ratelimit_client::metrics::STORE_LATENCY.into()),
            &[0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1],
        )?
        .install_recorder()?;
    let options = RedisStoreOptions {
        backend: args.backend,
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::with_options(&args.redis, options)?;
    // Connect now if Redis is there; if not, serve anyway (the fallback decides) and connect
    // when it comes up.
    match store.connect().await {
        Ok(()) => eprintln!(
            "demo-service: backend {}",
            store
                .backend()
                .map_or(args.backend.as_str(), StoreBackend::as_str)
        ),
        Err(error) => {
            eprintln!("demo-service: Redis is not reachable yet ({error}); falling back meanwhile")
        }
    }
    // Every replica reports its denials once a second: `rlctl top demo` or
    // `RateLimiter::top_denied` says who is throttled across the fleet.
    let mut limiter = RateLimiter::builder(store)
        .policy(policy(&args)?)
        .replicas(Replicas::fixed(args.replicas))
        .top_keys(TopKeys::default());
    if let Some(check_every) = args.plans {
        let options = PlanOptions {
            check_every,
            ..PlanOptions::default()
        };
        let source = PlanSource::connect(&args.redis, options).await?;
        eprintln!("demo-service: {}", source.status());
        limiter = limiter.policy_source(source);
    }
    let limiter = limiter.build()?;
    let layer = RateLimitLayer::new(limiter.clone(), |request| {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("anonymous")
        };
        Some(
            Check::new("demo")
                .input("api_key", header("x-api-key"))
                .input("tenant", header("x-tenant")),
        )
    });
    let app = Router::new()
        .route("/", get(|| async { "ok\n" }))
        .route_layer(layer)
        .route("/metrics", get(move || async move { prometheus.render() }));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await?;
    limiter.release_leases().await;
    if let Err(error) = limiter.report_top().await {
        eprintln!("demo-service: the last top-keys report was not written: {error}");
    }
    Ok(())
}

async fn shutdown() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return std::future::pending().await,
        };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // --help prints to stdout (exit 0), a bad flag to stderr (exit 2).
    let args = Args::from(Flags::parse());
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-service: {error}");
            ExitCode::FAILURE
        }
    }
}
