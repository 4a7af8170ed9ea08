//! `redis-ratelimit-server`: a rate-limit service on the redis-ratelimit module, built on
//! its client library. Envoy's RLS v3 over gRPC (a drop-in for envoyproxy/ratelimit, with
//! its YAML config read as is) and an HTTP JSON API for every language; every request's
//! descriptors decided all or nothing.

mod answer;
mod api;
mod auth;
mod certificate;
mod cli;
mod config;
mod console;
mod engine;
mod grpc;
mod header_settings;
mod headers;
mod health;
mod http;
mod json_request;
mod metrics;
mod plans;
mod reference_env;
mod reference_http;
mod regions;
mod request;
mod resolve;
mod revision;
mod rlqs;
mod serve;
mod start_error;
mod tally;
mod tls;
mod top;
mod verdict;
mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, SentinelStore, Store};
use redis_ratelimit_client::top::TopKeys;
use redis_ratelimit_client::{Fallback, Lease, Profile, RateLimiter, Replicas};

use crate::cli::Options;
use crate::engine::{Engine, EngineSettings};
use crate::serve::conn::Acceptor;
use crate::start_error::StartError;

/// A listener's task: it ends when the listener stops, with its error if it failed.
type Listener = tokio::task::JoinHandle<Result<(), serve::ListenerError>>;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args_os()) {
        Ok(options) => options,
        // --help and --version print to stdout (exit 0), usage errors to stderr (exit 2).
        Err(error) => error.exit(),
    };
    tracing_subscriber::fmt()
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::from(options.runtime.log_level))
        .init();
    if !options.from_environment.is_empty() {
        tracing::info!(
            "envoyproxy/ratelimit's settings read from the environment: {}",
            options.from_environment.join(", ")
        );
    }
    reference_env::log_unread();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = options.runtime.worker_threads {
        builder.worker_threads(threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn store(options: &Options) -> Result<Arc<dyn Store>, StartError> {
    let store_options = RedisStoreOptions {
        connect_timeout: options
            .store
            .timeout
            .max(std::time::Duration::from_millis(500)),
        batch: options.store.batch(),
        ..RedisStoreOptions::default()
    };
    let store: Result<Arc<dyn Store>, _> = if options.store.cluster {
        let nodes: Vec<&str> = options.store.urls.iter().map(String::as_str).collect();
        RedisStore::cluster(&nodes, store_options).map(report_refusal)
    } else {
        let url = options.store.urls.first().ok_or(StartError::NoRedisUrl)?;
        if url.starts_with("redis+sentinel://") {
            // The primary a set of sentinels names, followed through failovers.
            SentinelStore::from_url(url, store_options)
                .map(|store| Arc::new(store) as Arc<dyn Store>)
        } else {
            RedisStore::with_options(url, store_options).map(report_refusal)
        }
    };
    store.map_err(StartError::Store)
}

/// Connects to the store once in the background, so that a store that can never serve
/// checks (no module and no Lua engine, say: the client's backend probe names what is
/// missing) is named in the log at start rather than only counted as `error` decisions. A
/// store out of reach is left to the health probe and the fallback.
fn report_refusal(store: RedisStore) -> Arc<dyn Store> {
    let store = Arc::new(store);
    let probe = Arc::clone(&store);
    tokio::spawn(async move {
        if let Err(error) = probe.connect().await
            && !error.is_unavailability()
        {
            tracing::error!("the store cannot serve checks: {error}");
        }
    });
    store
}

/// The client library's limiter every check goes through: one job profile with the
/// failure mode, the store timeout and the lease of the command line.
fn limiter(options: &Options, store: Arc<dyn Store>) -> Result<RateLimiter, StartError> {
    let mut profile = Profile::builder(engine::PROFILE)
        .fallback(options.limiter.failure())
        .timeout(options.store.timeout);
    if let Some(units) = options.limiter.lease {
        profile = profile.lease(Lease::new(units));
    }
    let profile = profile.build().map_err(StartError::Profile)?;
    let mut builder = RateLimiter::builder_shared(store)
        .profile(profile)
        .replicas(Replicas::fixed(options.limiter.replicas))
        .max_tracked_keys(options.limiter.max_tracked_keys)
        .near_limit_share(1.0 - options.runtime.near_limit_ratio);
    if options.runtime.top_keys > 0 {
        builder = builder.top_keys(TopKeys {
            capacity: options.runtime.top_keys,
            ..TopKeys::default()
        });
    }
    builder.build().map_err(StartError::Limiter)
}

/// Starts the service and serves until SIGINT or SIGTERM, then drains it.
async fn run(options: Options) -> Result<(), StartError> {
    let prometheus = metrics::install(options.runtime.max_metric_rules)?;
    metrics::spawn_upkeep(&prometheus);
    let http_token = read_token(
        "--http-token-file",
        options.access.http_token_file.as_deref(),
    )?;
    let grpc_token = read_token(
        "--grpc-token-file",
        options.access.grpc_token_file.as_deref(),
    )?;
    let (engine, store, seen, agent) = engine(&options).await?;
    let reachable = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(health::probe(
        options.store.urls.clone(),
        options.store.cluster,
        options.store.timeout,
        Arc::clone(&reachable),
    ));
    let watcher = options.config.watch.map(|every| {
        tokio::spawn(watch::watch(
            Arc::clone(&engine),
            options.config.dir.clone(),
            every,
            options.config.bounds,
            seen,
        ))
    });

    let stop = serve::Stop::default();
    let mut servers = Vec::new();
    if options.listen.rlqs && options.listen.rlqs_ttl.subsec_millis() != 0 {
        // Envoy 1.40 reads an assignment's time to live in whole seconds (docs/rlqs.md): a
        // shorter one expires at once there (the fallback's DENY_ALL: under-admission only).
        tracing::warn!(
            "--rlqs-ttl-ms {}: Envoy 1.40 reads whole seconds of an assignment's life, so it \
             holds this one {} s; give a multiple of 1000",
            options.listen.rlqs_ttl.as_millis(),
            options.listen.rlqs_ttl.as_secs()
        );
    }
    let rlqs = options.listen.rlqs.then(|| {
        rlqs::shared::describe();
        rlqs::Rlqs::new(
            Arc::clone(&engine),
            Arc::clone(&store),
            rlqs::Settings {
                ttl: options.listen.rlqs_ttl,
                max_value_bytes: options.bounds.max_value_bytes,
            },
        )
    });
    if let Some(address) = options.listen.grpc {
        let service = grpc::service(
            Arc::clone(&engine),
            options.answers.fields.clone(),
            grpc_token.clone(),
        );
        let quota = rlqs
            .clone()
            .map(|rlqs| rlqs.service(grpc::Authenticate::new(grpc_token)));
        servers.push(start_grpc(&options, address, service, quota, &stop).await?);
    }
    if let Some(address) = options.listen.http {
        let api = http_api(&options, &engine, prometheus, &reachable, http_token);
        servers.push(start_http(&options, address, api, &stop).await?);
    }
    if let Some(address) = options.admin.address() {
        let console = console(&options, &engine, store, &reachable)?;
        servers.push(start_console(&options, address, console, &stop).await?);
    }

    wait_for_signal().await;
    tracing::info!("stopping: finishing requests in flight, giving leases back");
    if let Some(rlqs) = &rlqs {
        // Every RLQS assignment expires at once (TTL 0) and the streams end, so the drain
        // does not wait for them.
        rlqs.stop();
    }
    let result = serve::drain(servers, options.runtime.shutdown_timeout, &stop).await;
    engine.limiter().release_leases().await;
    // The last second's denials, for the fleet's top keys (never retried).
    if let Err(error) = engine.limiter().report_top().await {
        tracing::warn!("top keys: the last report was not written: {error}");
    }
    probe.abort();
    if let Some(agent) = agent {
        // No give-backs: the exact mode lets a stopped region's leases lapse within T.
        agent.abort();
        tracing::info!("region lease agent stopped (its leases lapse)");
    }
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    tracing::info!("stopped");
    result.map_err(StartError::from)
}

/// The engine on the config read at start (refused with its errors logged), with the
/// limiter of the command line and the policy store when the config uses plans; the
/// limiter's store (the console reads live usage on it); and what the watcher compares the
/// config files with.
async fn engine(options: &Options) -> Result<Started, StartError> {
    let (config, seen) = watch::load_at_start(&options.config.dir, &options.config.bounds)
        .ok_or_else(|| StartError::ConfigRefused {
            dir: options.config.dir.clone(),
        })?;
    tracing::info!(
        domains = config.domains.len(),
        files = config.files.len(),
        "config loaded from {}",
        options.config.dir.display()
    );
    let store = store(options)?;
    let limiter = limiter(options, Arc::clone(&store))?;
    let uses_plans = config.uses_plans();
    let plans = plans::Plans::new(
        options.store.urls.clone(),
        options.store.cluster,
        redis_ratelimit_plans::PlanOptions {
            check_every: options.config.plans_check(),
            ..redis_ratelimit_plans::PlanOptions::default()
        },
    );
    let region = options
        .config
        .region_config
        .as_deref()
        .map(|file| region(options, file, &config));
    let region = region.transpose()?;
    let mut engine = Engine::new(
        config,
        limiter,
        plans,
        EngineSettings {
            bounds: options.bounds,
            key_prefix: options.store.key_prefix.clone(),
            shadow_mode: options.answers.shadow_mode,
            reference_metadata: options.reference.response_dynamic_metadata,
            max_held: options.limiter.max_tracked_keys,
            near_limit_ratio: options.runtime.near_limit_ratio,
        },
    )
    .with_fingerprint(seen);
    let mut agent = None;
    if let Some(region) = region {
        let hot = Arc::new(regions::hot_keys::HotKeys::default());
        engine = engine.with_region(Arc::clone(&region), Arc::clone(&hot));
        let region_url = options.store.urls.first().cloned().unwrap_or_default();
        tracing::info!(
            region = region.region,
            home = region.home_url,
            "a region of shared quotas: limits decided by RL.REGIONAL, the lease agent started"
        );
        regions::agent::describe();
        agent = Some(tokio::spawn(regions::agent::run(region, region_url, hot)));
    }
    let engine = Arc::new(engine);
    if uses_plans {
        engine.plans().connect().await?;
    }
    Ok((engine, store, seen, agent))
}

/// What [`engine`] starts: the engine, the limiter's store, the config's fingerprint, the
/// region's lease agent.
type Started = (
    Arc<Engine>,
    Arc<dyn Store>,
    u64,
    Option<tokio::task::JoinHandle<()>>,
);

/// The operator console of the command line (`--admin-listen` given).
fn console(
    options: &Options,
    engine: &Arc<Engine>,
    store: Arc<dyn Store>,
    reachable: &Arc<AtomicBool>,
) -> Result<Arc<console::Console>, StartError> {
    let path = options
        .admin
        .admin_users_file
        .as_deref()
        .ok_or(StartError::NoAdminUsers)?;
    let users = console::users::Users::read(path).map_err(StartError::AdminUsers)?;
    let failure_mode = match options.limiter.failure() {
        Fallback::Open => "allow",
        Fallback::Closed => "deny",
        Fallback::Local => "local",
    };
    let console = console::Console::new(console::Parts {
        engine: Arc::clone(engine),
        store,
        urls: options.store.urls.clone(),
        cluster: options.store.cluster,
        store_timeout: options.store.timeout,
        users,
        store_reachable: Arc::clone(reachable),
        failure_mode,
        tls: options.admin.tls().is_some(),
        request_timeout: options.limits.request_timeout,
    })
    .map_err(StartError::Console)?;
    Ok(Arc::new(console))
}

/// The console's listener bound and serving `console`, in a task of its own.
async fn start_console(
    options: &Options,
    address: SocketAddr,
    console: Arc<console::Console>,
    stop: &serve::Stop,
) -> Result<Listener, StartError> {
    let tls = options
        .admin
        .tls()
        .as_ref()
        .map(|files| tls::acceptor(files, "admin", &[b"http/1.1"]))
        .transpose()
        .map_err(|source| StartError::Tls {
            listener: "console",
            source,
        })?;
    let listener = bind("--admin-listen", address).await?;
    tracing::info!(
        "operator console on {}{}",
        listener.local_addr().unwrap_or(address),
        tls_note(tls.is_some())
    );
    let acceptor = Acceptor::new(listener, options.limits.max_connections, "console");
    let (limits, stop) = (options.limits, stop.clone());
    Ok(tokio::spawn(async move {
        serve::http::serve(acceptor, tls, console::router(console), limits, stop).await;
        Ok(())
    }))
}

/// The region file, checked against the limits config (errors logged).
fn region(
    options: &Options,
    file: &Path,
    config: &config::Config,
) -> Result<Arc<config::RegionConfig>, StartError> {
    let refused = || StartError::RegionRefused {
        file: file.to_path_buf(),
    };
    if options.store.cluster {
        return Err(StartError::RegionOnCluster);
    }
    let region = config::load_region(file, &options.config.bounds).map_err(|error| {
        tracing::error!("{error}");
        refused()
    })?;
    region.check(config).map_err(|errors| {
        for error in &errors {
            tracing::error!("{error}");
        }
        refused()
    })?;
    Ok(Arc::new(region))
}

/// The bearer token in the file given to `flag`, if one was.
fn read_token(flag: &'static str, path: Option<&Path>) -> Result<Option<auth::Token>, StartError> {
    path.map(auth::Token::read)
        .transpose()
        .map_err(|source| StartError::TokenFile { flag, source })
}

/// The gRPC listener (Envoy RLS v3) bound and serving `service`, in a task of its own.
async fn start_grpc(
    options: &Options,
    address: SocketAddr,
    service: grpc::Service,
    rlqs: Option<rlqs::Service>,
    stop: &serve::Stop,
) -> Result<Listener, StartError> {
    let tls = options
        .tls
        .grpc()
        .as_ref()
        .map(|files| tls::acceptor(files, "grpc", &[b"h2"]))
        .transpose()
        .map_err(|source| StartError::Tls {
            listener: "gRPC",
            source,
        })?;
    let listener = bind("--grpc-listen", address).await?;
    tracing::info!(
        "gRPC (Envoy RLS v3{}) on {}{}",
        if rlqs.is_some() { " and RLQS" } else { "" },
        listener.local_addr().unwrap_or(address),
        tls_note(tls.is_some())
    );
    let acceptor = Acceptor::new(listener, options.limits.max_connections, "gRPC");
    let (limits, stop) = (options.limits, stop.clone());
    Ok(tokio::spawn(async move {
        serve::grpc::serve(acceptor, tls, service, rlqs, limits, stop)
            .await
            .map_err(serve::ListenerError::Grpc)
    }))
}

/// What the HTTP API answers with: the engine, the metrics, the store's health, the token
/// and the command line's HTTP settings.
fn http_api(
    options: &Options,
    engine: &Arc<Engine>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    reachable: &Arc<AtomicBool>,
    token: Option<auth::Token>,
) -> Arc<http::Api> {
    Arc::new(http::Api {
        engine: Arc::clone(engine),
        headers: options.answers.fields.clone(),
        metrics,
        store_reachable: Arc::clone(reachable),
        fails_closed: options.limiter.failure() == Fallback::Closed,
        healthy_with_config: options.reference.healthy_with_at_least_one_config,
        token,
        metrics_need_token: options.access.metrics_need_token,
        allowed_origins: options.access.http_allowed_origins.clone(),
        request_timeout: options.limits.request_timeout,
    })
}

/// The HTTP listener bound and serving `api`, in a task of its own.
async fn start_http(
    options: &Options,
    address: SocketAddr,
    api: Arc<http::Api>,
    stop: &serve::Stop,
) -> Result<Listener, StartError> {
    let tls = options
        .tls
        .http()
        .as_ref()
        .map(|files| tls::acceptor(files, "http", &[b"http/1.1"]))
        .transpose()
        .map_err(|source| StartError::Tls {
            listener: "HTTP",
            source,
        })?;
    let listener = bind("--http-listen", address).await?;
    tracing::info!(
        "HTTP API on {}{}",
        listener.local_addr().unwrap_or(address),
        tls_note(tls.is_some())
    );
    let acceptor = Acceptor::new(listener, options.limits.max_connections, "HTTP");
    let (limits, stop) = (options.limits, stop.clone());
    Ok(tokio::spawn(async move {
        serve::http::serve(acceptor, tls, http::router(api), limits, stop).await;
        Ok(())
    }))
}

async fn bind(
    flag: &'static str,
    address: SocketAddr,
) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| StartError::Bind {
            flag,
            address,
            source,
        })
}

fn tls_note(tls: bool) -> &'static str {
    if tls { " (TLS)" } else { "" }
}

/// SIGINT or SIGTERM.
async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
