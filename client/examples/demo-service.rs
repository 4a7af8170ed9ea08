//! A rate-limited HTTP service: one replica of a fleet that shares one quota per API key.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-client --example demo-service -- \
//!     --redis redis://127.0.0.1:6379/ --listen 127.0.0.1:8080 --limit 100 --window 60 \
//!     [--replicas 3] [--lease 10] [--timeout-ms 5] [--backend auto|module|functions|scripts]
//! ```
//!
//! `GET /` is limited per `x-api-key` header (requests without one share the key
//! `anonymous`) by a token bucket of `--limit` tokens refilled over `--window` seconds. When
//! Redis is out of reach each replica falls back to `limit / replicas`. `GET /metrics` is the
//! Prometheus text of the limiter's metrics. Anything else is a quick 404.
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
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions};
use redis_ratelimit_client::{
    Algorithm, Backend, Fallback, Lease, Limit, Policy, RateLimiter, Replicas,
};

const USAGE: &str = "usage: demo-service --redis URL --listen ADDR --limit N --window SECONDS \
                     [--replicas K] [--lease N] [--timeout-ms MS] \
                     [--backend auto|module|functions|scripts]";

struct Args {
    redis: String,
    listen: SocketAddr,
    limit: u64,
    window: Duration,
    replicas: u64,
    lease: Option<u64>,
    timeout: Duration,
    backend: Backend,
}

fn parse_args() -> Result<Args, String> {
    let mut redis = None;
    let mut listen = None;
    let mut limit = None;
    let mut window = None;
    let mut replicas = 1;
    let mut lease = None;
    let mut timeout = Duration::from_millis(5);
    let mut backend = Backend::Auto;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
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
            "--backend" => {
                backend = Backend::parse(&value).ok_or(format!("bad --backend '{value}'"))?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(Args {
        redis: redis.ok_or("--redis is required")?,
        listen: listen.ok_or("--listen is required")?,
        limit: limit.ok_or("--limit is required")?,
        window: window.ok_or("--window is required")?,
        replicas,
        lease,
        timeout,
        backend,
    })
}

fn policy(args: &Args) -> Result<Policy, Box<dyn std::error::Error>> {
    let bucket = Algorithm::token_bucket(args.limit, args.window)?;
    // The hash tag keeps every key of one API key in one cluster slot.
    let mut builder = Policy::builder("demo")
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
            store.backend().unwrap_or(args.backend)
        ),
        Err(error) => {
            eprintln!("demo-service: Redis is not reachable yet ({error}); falling back meanwhile")
        }
    }
    let limiter = RateLimiter::builder(store)
        .policy(policy(&args)?)
        .replicas(Replicas::fixed(args.replicas))
        .build()?;
    let layer = RateLimitLayer::new(limiter.clone(), |request| {
        let key = request
            .headers
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("anonymous");
        Some(Check::new("demo").input("api_key", key))
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
        Ok(args) => args,
        Err(error) => {
            eprintln!("{error}\n{USAGE}");
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
