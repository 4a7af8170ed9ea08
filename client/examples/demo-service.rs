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
//! Prometheus text of the limiter's metrics. Anything else is a quick 404.
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
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redis_ratelimit_client::http::{Check, RateLimitLayer};
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, StoreBackend};
use redis_ratelimit_client::{
    Algorithm, Backend, Fallback, Lease, Limit, Policy, RateLimiter, Replicas,
};
use redis_ratelimit_plans::{PlanOptions, PlanSource};

const USAGE: &str = "\
usage: demo-service --redis URL --listen ADDR --limit N --window SECONDS
                    [--replicas K] [--lease N] [--timeout-ms MS] [--plans [--plans-check-ms MS]]
                    [--backend auto|module|functions|scripts]

A rate-limited HTTP service: GET / is limited per x-api-key header (requests without one
share the key 'anonymous') by a token bucket of --limit tokens refilled over --window
seconds, decided in Redis for every replica; GET /metrics is Prometheus text.

  --redis URL        the Redis server with the module, e.g. redis://127.0.0.1:6379/
  --listen ADDR      where to listen, e.g. 127.0.0.1:8080 (port 0: any free port)
  --limit N          tokens per key
  --window SECONDS   time to refill an empty bucket
  --replicas K       replicas of this service; without Redis each allows limit / K (default 1)
  --lease N          claim N tokens per Redis call and spend them from memory (default off)
  --timeout-ms MS    longest wait for Redis before the local fallback decides (default 50)
  --backend NAME     what runs the limits in Redis: auto (default: the module if loaded, else
                     the Functions library, loaded if absent, else it as a script), module,
                     functions or scripts
  --plans            limit GET / by the plan of the tenant in the x-tenant header, read from
                     the policy store in Redis (rlctl edits it); --limit and --window are the
                     defaults of tenants without a plan
  --plans-check-ms MS  the backstop: compare the store's version this often (default 500)
  -h, --help         this text";

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

/// The arguments, or `None` when help was asked for (and printed).
fn parse_args() -> Result<Option<Args>, String> {
    let mut redis = None;
    let mut listen = None;
    let mut limit = None;
    let mut window = None;
    let mut replicas = 1;
    let mut lease = None;
    let mut timeout = redis_ratelimit_client::policy::DEFAULT_TIMEOUT;
    let mut plans = None;
    let mut backend = Backend::Auto;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            return Ok(None);
        }
        if flag == "--plans" {
            plans = plans.or(Some(PlanOptions::default().check_every));
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a positive integer (got '{value}')"))
        };
        match flag.as_str() {
            "--redis" => redis = Some(value.clone()),
            "--listen" => {
                listen = Some(
                    value
                        .parse()
                        .map_err(|_| format!("bad --listen '{value}'"))?,
                )
            }
            "--limit" => limit = Some(number()?),
            "--window" => window = Some(Duration::from_secs(number()?)),
            "--replicas" => replicas = number()?,
            "--lease" => lease = Some(number()?),
            "--timeout-ms" => timeout = Duration::from_millis(number()?),
            "--plans-check-ms" => plans = Some(Duration::from_millis(number()?)),
            "--backend" => {
                backend = Backend::parse(&value).ok_or(format!("bad --backend '{value}'"))?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(Some(Args {
        redis: redis.ok_or("--redis is required")?,
        listen: listen.ok_or("--listen is required")?,
        limit: limit.ok_or("--limit is required")?,
        window: window.ok_or("--window is required")?,
        replicas,
        lease,
        timeout,
        plans,
        backend,
    }))
}

fn policy(args: &Args) -> Result<Policy, Box<dyn std::error::Error>> {
    let bucket = Algorithm::token_bucket(args.limit, args.window)?;
    // The hash tag keeps every key of one API key in one cluster slot.
    let mut builder = match args.plans {
        // Plans: the bucket is the default; keys are the store's (per tenant).
        Some(_) => Policy::from_store("demo", "tenant"),
        None => Policy::builder("demo"),
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
    let mut limiter = RateLimiter::builder(store)
        .policy(policy(&args)?)
        .replicas(Replicas::fixed(args.replicas));
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
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-service: {error}\n(demo-service --help lists the options)");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-service: {error}");
            ExitCode::FAILURE
        }
    }
}
