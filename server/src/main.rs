//! `redis-ratelimit-server`: a rate-limit service on the redis-ratelimit module, built on
//! its client library. Envoy's RLS v3 over gRPC (a drop-in for envoyproxy/ratelimit, with
//! its YAML config read as is) and an HTTP JSON API for every language; every request's
//! descriptors decided all or nothing.

mod cli;
mod config;
mod engine;
mod grpc;
mod headers;
mod health;
mod http;
mod metrics;
mod plans;
mod reference_env;
mod reference_http;
mod request;
mod resolve;
mod tls;
mod verdict;
mod watch;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, SentinelStore, Store};
use redis_ratelimit_client::{Fallback, Lease, Profile, RateLimiter, Replicas};
use tokio::sync::watch as signal_watch;

use crate::cli::Options;
use crate::engine::{Engine, EngineSettings};

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args_os()) {
        Ok(options) => options,
        // --help and --version print to stdout (exit 0), usage errors to stderr (exit 2).
        Err(error) => error.exit(),
    };
    tracing_subscriber::fmt()
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_max_level(options.log_level)
        .init();
    if !options.from_environment.is_empty() {
        tracing::info!(
            "envoyproxy/ratelimit's settings read from the environment: {}",
            options.from_environment.join(", ")
        );
    }
    reference_env::log_unread();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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

fn store(options: &Options) -> Result<Arc<dyn Store>, String> {
    let store_options = RedisStoreOptions {
        connect_timeout: options.timeout.max(std::time::Duration::from_millis(500)),
        ..RedisStoreOptions::default()
    };
    let store: Result<Arc<dyn Store>, _> = if options.cluster {
        let nodes: Vec<&str> = options.redis.iter().map(String::as_str).collect();
        RedisStore::cluster(&nodes, store_options).map(|store| Arc::new(store) as Arc<dyn Store>)
    } else {
        let url = options.redis.first().ok_or("--redis is empty")?;
        if url.starts_with("redis+sentinel://") {
            // The primary a set of sentinels names, followed through failovers.
            SentinelStore::from_url(url, store_options)
                .map(|store| Arc::new(store) as Arc<dyn Store>)
        } else {
            RedisStore::with_options(url, store_options)
                .map(|store| Arc::new(store) as Arc<dyn Store>)
        }
    };
    store.map_err(|error| format!("--redis: {error}"))
}

/// The client library's limiter every check goes through: one job profile with the
/// failure mode, the store timeout and the lease of the command line.
fn limiter(options: &Options) -> Result<RateLimiter, String> {
    let mut profile = Profile::builder(engine::PROFILE)
        .fallback(options.failure)
        .timeout(options.timeout);
    if let Some(units) = options.lease {
        profile = profile.lease(Lease::new(units));
    }
    let profile = profile.build().map_err(|error| error.to_string())?;
    RateLimiter::builder_shared(store(options)?)
        .profile(profile)
        .replicas(Replicas::fixed(options.replicas.max(1)))
        .build()
        .map_err(|error| error.to_string())
}

async fn run(options: Options) -> Result<(), String> {
    let prometheus = metrics::install()?;
    let seen = watch::fingerprint(&options.config);
    let config = watch::load_logged(&options.config).ok_or_else(|| {
        format!(
            "{}: the config is refused (errors above)",
            options.config.display()
        )
    })?;
    tracing::info!(
        domains = config.domains.len(),
        files = config.files.len(),
        "config loaded from {}",
        options.config.display()
    );
    let token = match &options.http_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|error| format!("--http-token-file {}: {error}", path.display()))?
                .trim()
                .to_string(),
        )
        .filter(|token| !token.is_empty()),
        None => None,
    };
    if options.http_token_file.is_some() && token.is_none() {
        return Err("--http-token-file: the file is empty".into());
    }
    let limiter = limiter(&options)?;
    let uses_plans = config.uses_plans();
    let plans = plans::Plans::new(
        options.redis.clone(),
        options.cluster,
        redis_ratelimit_client::PlanOptions {
            check_every: options.plans_check,
            ..redis_ratelimit_client::PlanOptions::default()
        },
    );
    let engine = Arc::new(Engine::new(
        config,
        limiter,
        plans,
        EngineSettings {
            bounds: options.bounds,
            key_prefix: options.key_prefix.clone(),
            shadow_mode: options.shadow_mode,
            reference_metadata: options.response_dynamic_metadata,
        },
    ));
    if uses_plans {
        engine.plans().connect().await?;
    }
    let reachable = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(health::probe(
        options.redis.clone(),
        options.cluster,
        options.timeout,
        Arc::clone(&reachable),
    ));
    let watcher = options.watch.map(|every| {
        tokio::spawn(watch::watch(
            Arc::clone(&engine),
            options.config.clone(),
            every,
            seen,
        ))
    });

    let (stop_sender, stop) = signal_watch::channel(false);
    let mut servers = Vec::new();
    if let Some(address) = options.grpc_listen {
        let service = RateLimitServiceServer::new(grpc::Rls::new(
            Arc::clone(&engine),
            options.headers.clone(),
        ))
        .max_decoding_message_size(64 * 1024);
        let mut builder = tonic::transport::Server::builder().layer(
            tower::util::MapResponseLayer::new(grpc::invalid_protobuf_is_invalid_argument),
        );
        if let Some(files) = &options.grpc_tls {
            let read = |path: &std::path::Path| {
                std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))
            };
            let identity =
                tonic::transport::Identity::from_pem(read(&files.cert)?, read(&files.key)?);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|error| format!("gRPC TLS: {error}"))?;
        }
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|error| format!("--grpc-listen {address}: {error}"))?;
        let bound = listener.local_addr().unwrap_or(address);
        tracing::info!(
            "gRPC (Envoy RLS v3) on {bound}{}",
            tls_note(options.grpc_tls.is_some())
        );
        // Without TCP_NODELAY, a response written in two segments waits for the peer's
        // delayed ACK (40 ms).
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut stop = stop.clone();
        let router = builder.add_service(service);
        servers.push(tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stop.wait_for(|stopped| *stopped).await;
                })
                .await
                .map_err(|error| format!("gRPC server: {error}"))
        }));
    }
    if let Some(address) = options.http_listen {
        let api = Arc::new(http::Api {
            engine: Arc::clone(&engine),
            headers: options.headers.clone(),
            metrics: prometheus,
            store_reachable: Arc::clone(&reachable),
            fails_closed: options.failure == Fallback::Closed,
            healthy_with_config: options.healthy_with_config,
            token,
        });
        let app = http::router(api);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|error| format!("--http-listen {address}: {error}"))?;
        let bound = listener.local_addr().unwrap_or(address);
        tracing::info!(
            "HTTP API on {bound}{}",
            tls_note(options.http_tls.is_some())
        );
        let mut stop = stop.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        let server = match &options.http_tls {
            Some(files) => {
                let listener = tls::TlsListener::new(listener, tls::server_config(files)?)
                    .map_err(|error| format!("--http-listen {address}: {error}"))?;
                tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await
                        .map_err(|error| format!("HTTP server: {error}"))
                })
            }
            None => tokio::spawn(async move {
                let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
                    let _ = stream.set_nodelay(true);
                });
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
                    .map_err(|error| format!("HTTP server: {error}"))
            }),
        };
        servers.push(server);
    }

    wait_for_signal().await;
    tracing::info!("stopping: finishing requests in flight, giving leases back");
    let _ = stop_sender.send(true);
    let mut result = Ok(());
    for server in servers {
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => result = Err(error),
            Err(error) => result = Err(format!("a listener task failed: {error}")),
        }
    }
    engine.limiter().release_leases().await;
    probe.abort();
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    tracing::info!("stopped");
    result
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
