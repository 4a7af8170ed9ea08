//! The command line (clap, derived): the flags, their checks, and the [`Options`] the rest of
//! the service reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use redis_ratelimit_client::Fallback;
use redis_ratelimit_client::store::BatchOptions;
use redis_ratelimit_plans::PlanOptions;

use crate::config::{self, FileBounds};
use crate::headers::{FieldsDraft, HeaderSettings, TripleNames};
use crate::metrics;
use crate::reference_env::{self, RedisSpec, RedisType, SocketType};
use crate::request::Bounds;
use crate::serve::{self, Limits};
use crate::tls::TlsFiles;

/// Everything the command line says.
#[derive(Clone, Debug)]
pub struct Options {
    /// The store's URL(s).
    pub redis: Vec<String>,
    /// The region file, when this service is one region of shared quotas.
    pub region_config: Option<PathBuf>,
    /// A Redis Cluster.
    pub cluster: bool,
    /// The config directory.
    pub config: PathBuf,
    /// The gRPC listener.
    pub grpc_listen: Option<SocketAddr>,
    /// The HTTP listener.
    pub http_listen: Option<SocketAddr>,
    /// Lease size.
    pub lease: Option<u64>,
    /// Store call timeout.
    pub timeout: Duration,
    /// The runtime's worker threads (`None`: tokio's default, one per core).
    pub worker_threads: Option<usize>,
    /// How concurrent checks share a write to Redis.
    pub batch: BatchOptions,
    /// Failure mode.
    pub failure: Fallback,
    /// Replica count.
    pub replicas: u64,
    /// Header fields.
    pub headers: HeaderSettings,
    /// Key prefix.
    pub key_prefix: String,
    /// Request bounds.
    pub bounds: Bounds,
    /// HTTP bearer token file.
    pub http_token_file: Option<PathBuf>,
    /// gRPC TLS.
    pub grpc_tls: Option<TlsFiles>,
    /// HTTP TLS.
    pub http_tls: Option<TlsFiles>,
    /// Config polling period (`None`: not watched).
    pub watch: Option<Duration>,
    /// The policy store's backstop version check (plans).
    pub plans_check: Duration,
    /// What the config directory may hold.
    pub config_bounds: FileBounds,
    /// Both listeners' connection bounds.
    pub limits: Limits,
    /// How long a stop waits for requests in flight before it closes connections.
    pub shutdown_timeout: Duration,
    /// gRPC bearer token file.
    pub grpc_token_file: Option<PathBuf>,
    /// Whether `/metrics` requires the HTTP token.
    pub metrics_need_token: bool,
    /// The web origins allowed to call the HTTP API.
    pub http_allowed_origins: Vec<String>,
    /// Distinct `rule` label values per domain in the descriptor metrics.
    pub max_metric_rules: usize,
    /// The most key sets each per-key table of the limiter keeps (and requests holding
    /// in-flight slots).
    pub max_tracked_keys: usize,
    /// The global shadow mode: every denial reported, none enforced.
    pub shadow_mode: bool,
    /// The reference's dynamic metadata in answers (`RESPONSE_DYNAMIC_METADATA`).
    pub response_dynamic_metadata: bool,
    /// `/healthcheck` fails while no domain is loaded.
    pub healthy_with_config: bool,
    /// The most verbose log level.
    pub log_level: tracing::Level,
    /// The environment variables a setting was read from (their names).
    pub from_environment: Vec<&'static str>,
}

/// A listener's address, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Listen(Option<SocketAddr>);

/// `--failure-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FailureMode {
    /// Admit every request.
    Allow,
    /// Deny every request.
    Deny,
    /// Decide locally, this replica's share of each limit.
    Local,
}

/// `--headers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HeaderForm {
    /// No IETF fields.
    Off,
    /// `RateLimit: "name";r=R;t=T` and `RateLimit-Policy`.
    #[value(name = "draft-11")]
    Draft11,
    /// `RateLimit: "name";a=A;w=W;c=C` and `RateLimit-Policy`.
    #[value(name = "draft-12")]
    Draft12,
}

/// `--log-level` (the reference's `LOG_LEVEL` names, any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogLevel {
    /// Everything.
    Trace,
    /// Each request's decision steps.
    Debug,
    /// Start, stop, reloads.
    Info,
    /// What goes wrong and is worked around.
    #[value(alias = "warning")]
    Warn,
    /// What fails.
    #[value(alias = "fatal", alias = "panic")]
    Error,
}

/// Where the reference's settings are shown in `--help`.
const REFERENCE: &str = "envoyproxy/ratelimit's settings (the flags win over the variables)";

/// The flags as clap reads them, before the checks that involve several of them.
#[derive(Debug, Parser)]
#[command(
    name = "redis-ratelimit-server",
    version,
    about = "A rate-limit service on the redis-ratelimit module: Envoy's RLS v3 over gRPC and an \
             HTTP JSON API, configured by envoyproxy/ratelimit YAML files",
    override_usage = "redis-ratelimit-server --redis URL --config DIR [options]",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Args {
    /// redis://[user:password@]host:port/ or rediss:// (TLS);
    /// redis+sentinel://h1:port,h2:port/primary-name[/db] (Sentinel); with --cluster, a
    /// comma-separated list of seed nodes
    #[arg(long, value_name = "URL", env = "REDIS_URL")]
    redis: Option<String>,

    /// The store is a Redis Cluster
    #[arg(long)]
    cluster: bool,

    /// The envoyproxy/ratelimit YAML files (*.yaml, *.yml), watched
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,

    /// This service is one region of quotas shared across regions: the region file (home,
    /// weights, floor share, the lease agent's settings; see docs/regions.md)
    #[arg(long, value_name = "FILE")]
    region_config: Option<PathBuf>,

    /// Envoy RLS v3 ('off' disables it) [default: 127.0.0.1:8081; with GRPC_HOST or
    /// GRPC_PORT, their address]
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    grpc_listen: Option<Listen>,

    /// HTTP JSON API, /metrics, /healthz, /readyz ('off' disables it) [default:
    /// 127.0.0.1:8080; with HOST or PORT, their address]
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    http_listen: Option<Listen>,

    /// Claim N units per store call and spend them from memory (default: off)
    #[arg(long, value_name = "N", value_parser = count)]
    lease: Option<u64>,

    /// How long Redis may stay silent while store calls wait for it before they are decided
    /// by the fallback (a call is given up when its server, or its slot on a Cluster, had
    /// calls waiting and sent no reply for this long, not when the call's own timer fires)
    #[arg(long, value_name = "MS", default_value = "20", value_parser = positive_ms)]
    timeout_ms: Duration,

    /// Longest a check waits to share a write to Redis with the checks arriving while an
    /// earlier call is in flight (0: each check its own write; a check on an idle
    /// connection is never held)
    #[arg(long, value_name = "US", default_value = "200", value_parser = batch_window)]
    batch_window_us: Duration,

    /// Most checks in one write to Redis
    #[arg(long, value_name = "N", default_value = "64", value_parser = batch_max)]
    batch_max: usize,

    /// The runtime's worker threads (default: one per core, or TOKIO_WORKER_THREADS); on a
    /// machine the service shares, 1 spends less CPU per check (fewer hand-offs between
    /// threads: docs/bench-service.md)
    #[arg(long, value_name = "N", value_parser = worker_threads)]
    worker_threads: Option<usize>,

    /// What a check does when the store is out of reach
    #[arg(long, value_name = "MODE", value_enum, default_value = "local")]
    failure_mode: FailureMode,

    /// Replicas of this service: the local fallback enforces quota/N
    #[arg(long, value_name = "N", default_value = "1", value_parser = count)]
    replicas: u64,

    /// The IETF RateLimit fields
    #[arg(long, value_name = "FORM", value_enum, default_value = "draft-11")]
    headers: HeaderForm,

    /// Send the RateLimit fields on denials only
    #[arg(long)]
    headers_on_denied_only: bool,

    /// Also X-RateLimit-Limit, -Remaining, -Reset
    #[arg(long)]
    legacy_headers: bool,

    /// Prefix of every Redis key
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "rls:",
        env = "CACHE_KEY_PREFIX"
    )]
    key_prefix: String,

    /// Descriptors per request, at most 16 (one RL.MULTI takes 16 keys)
    #[arg(long, value_name = "N", default_value = "16", value_parser = max_descriptors)]
    max_descriptors: usize,

    /// Entries per descriptor
    #[arg(long, value_name = "N", default_value = "8", value_parser = at_least_one)]
    max_entries: usize,

    /// Bytes of a key, value or domain
    #[arg(long, value_name = "N", default_value = "256", value_parser = at_least_one)]
    max_value_bytes: usize,

    /// Require 'Authorization: Bearer <token>' on /v1/* and /json (token read from PATH)
    #[arg(long, value_name = "PATH")]
    http_token_file: Option<PathBuf>,

    /// Serve gRPC over TLS: the certificate chain (with --grpc-tls-key)
    #[arg(long, value_name = "PEM")]
    grpc_tls_cert: Option<PathBuf>,

    /// Serve gRPC over TLS: the private key (with --grpc-tls-cert)
    #[arg(long, value_name = "PEM")]
    grpc_tls_key: Option<PathBuf>,

    /// Serve HTTP over TLS: the certificate chain (with --http-tls-key)
    #[arg(long, value_name = "PEM")]
    http_tls_cert: Option<PathBuf>,

    /// Serve HTTP over TLS: the private key (with --http-tls-cert)
    #[arg(long, value_name = "PEM")]
    http_tls_key: Option<PathBuf>,

    /// How often the config directory is checked for changes (0: never)
    #[arg(long, value_name = "MS", default_value = "1000", value_parser = count)]
    watch_ms: u64,

    /// Limits with 'tenant_key' (plans): the policy store's version is checked this often
    /// besides its change notifications
    #[arg(long, value_name = "MS", value_parser = positive_ms)]
    plans_check_ms: Option<Duration>,

    /// Deepest nesting of YAML collections in a config file (a descriptor level takes two)
    #[arg(
        long,
        value_name = "N",
        default_value_t = config::DEFAULT_MAX_DEPTH,
        value_parser = at_least_one
    )]
    config_max_depth: usize,

    /// Largest config file, in bytes (1 MiB)
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = config::DEFAULT_MAX_FILE_BYTES,
        value_parser = count
    )]
    config_max_file_bytes: u64,

    /// Most config files in the directory
    #[arg(
        long,
        value_name = "N",
        default_value_t = config::DEFAULT_MAX_FILES,
        value_parser = at_least_one
    )]
    config_max_files: usize,

    /// Connections open at once on each listener (the others wait in the kernel's backlog)
    #[arg(
        long,
        value_name = "N",
        default_value_t = serve::DEFAULT_MAX_CONNECTIONS,
        value_parser = at_least_one
    )]
    max_connections: usize,

    /// A connection's TLS handshake and first bytes, and each HTTP/1.1 request head, within
    /// this; an HTTP/1.1 connection idle this long is closed
    #[arg(
        long,
        value_name = "MS",
        default_value_t = serve::DEFAULT_HEADER_TIMEOUT_MS,
        value_parser = positive
    )]
    header_timeout_ms: u64,

    /// The longest one request may take, its body included (HTTP: 408; gRPC: CANCELLED)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = serve::DEFAULT_REQUEST_TIMEOUT_MS,
        value_parser = positive
    )]
    request_timeout_ms: u64,

    /// HTTP/2 streams open at once on one connection (gRPC and h2c)
    #[arg(
        long,
        value_name = "N",
        default_value_t = serve::DEFAULT_MAX_STREAMS,
        value_parser = streams
    )]
    max_streams: u32,

    /// gRPC requests one connection has handled at once; past it, RESOURCE_EXHAUSTED at once (a
    /// queue would wait outside the request timeout)
    #[arg(
        long,
        value_name = "N",
        default_value_t = serve::DEFAULT_GRPC_CONCURRENCY,
        value_parser = at_least_one
    )]
    grpc_concurrency: usize,

    /// HTTP/2 keep-alive: a ping this often, the connection closed when one goes unanswered
    /// for 10 s (0: no pings)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = serve::DEFAULT_KEEPALIVE_MS,
        value_parser = count
    )]
    keepalive_ms: u64,

    /// On SIGTERM, how long requests in flight may take before the connections still open
    /// are closed (leases are given back after)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = serve::DEFAULT_SHUTDOWN_TIMEOUT_MS,
        value_parser = count
    )]
    shutdown_timeout_ms: u64,

    /// Require a client certificate this CA signed on the gRPC listener (mutual TLS)
    #[arg(long, value_name = "PEM", requires = "grpc_tls_cert")]
    grpc_tls_client_ca: Option<PathBuf>,

    /// Require a client certificate this CA signed on the HTTP listener (mutual TLS)
    #[arg(long, value_name = "PEM", requires = "http_tls_cert")]
    http_tls_client_ca: Option<PathBuf>,

    /// Require 'authorization: Bearer <token>' in every gRPC call's metadata (token read
    /// from PATH)
    #[arg(long, value_name = "PATH")]
    grpc_token_file: Option<PathBuf>,

    /// /metrics requires the --http-token-file token too
    #[arg(long, requires = "http_token_file")]
    metrics_need_token: bool,

    /// Distinct 'rule' label values per domain in ratelimit_service_descriptors_total (the
    /// request's own values with detailed_metric); past it, rule="_other"
    #[arg(
        long,
        value_name = "N",
        default_value_t = metrics::DEFAULT_MAX_RULE_LABELS,
        value_parser = at_least_one
    )]
    max_metric_rules: usize,

    /// The most distinct key sets each of the limiter's per-key tables keeps (the store's
    /// last answers the failure mode continues from, denials remembered, leases, the local
    /// failure mode's states; and admitted requests holding in-flight slots): past it, the
    /// expired entries go, or else the one answered longest ago
    #[arg(
        long,
        value_name = "N",
        default_value_t = redis_ratelimit_client::expiring::DEFAULT_MAX_KEYS,
        value_parser = at_least_one
    )]
    max_tracked_keys: usize,

    /// A descriptor's 'limit' override (the caller's own limit, as in the reference):
    /// honoured, or refused as a bad request
    #[arg(long, value_name = "POLICY", value_enum, default_value = "allow")]
    limit_overrides: LimitOverrides,

    /// An Origin whose web pages may call the HTTP API (repeatable); a request from any
    /// other Origin is refused
    #[arg(long, value_name = "ORIGIN")]
    http_allow_origin: Vec<String>,

    /// Report every denial (per descriptor, in metrics) but admit every request: the
    /// global shadow mode, for a migration
    #[arg(long, env = "SHADOW_MODE")]
    shadow_mode: bool,

    /// The most verbose log lines written
    #[arg(
        long,
        value_name = "LEVEL",
        value_enum,
        ignore_case = true,
        default_value = "info",
        env = "LOG_LEVEL"
    )]
    log_level: LogLevel,

    #[command(flatten)]
    reference: ReferenceArgs,
}

/// `--limit-overrides`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LimitOverrides {
    /// Honour a descriptor's limit.
    Allow,
    /// Refuse a request with one.
    Refuse,
}

fn streams(text: &str) -> Result<u32, String> {
    u32::try_from(at_least_one(text)?).map_err(|_| "at most 4294967295".to_string())
}

/// envoyproxy/ratelimit's settings, as flags whose fallbacks are its environment
/// variables (`--redis` reads `REDIS_URL`, `--key-prefix` `CACHE_KEY_PREFIX`, `--shadow-mode`
/// `SHADOW_MODE`, `--log-level` `LOG_LEVEL`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = REFERENCE)]
struct ReferenceArgs {
    /// How a --redis that is not a URL is reached: host:port (tcp) or a socket path (unix)
    #[arg(
        long,
        value_name = "TYPE",
        value_enum,
        ignore_case = true,
        env = "REDIS_SOCKET_TYPE"
    )]
    redis_socket_type: Option<SocketType>,

    /// What a --redis that is not a URL names: one server, a Sentinel
    /// (primary-name,sentinel:port,...) or a Cluster (node:port,...)
    #[arg(
        long,
        value_name = "TYPE",
        value_enum,
        ignore_case = true,
        env = "REDIS_TYPE"
    )]
    redis_type: Option<RedisType>,

    /// The store's password, or user:password (for a --redis that is not a URL)
    #[arg(long, value_name = "AUTH", env = "REDIS_AUTH", hide_env_values = true)]
    redis_auth: Option<String>,

    /// The store over TLS (for a --redis that is not a URL)
    #[arg(long, env = "REDIS_TLS")]
    redis_tls: bool,

    /// With --redis-tls, the store's certificate is not checked against its name
    #[arg(long, env = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")]
    redis_tls_skip_hostname_verification: bool,

    /// The gRPC listener's host, when --grpc-listen is not given (default 0.0.0.0)
    #[arg(long, value_name = "HOST", env = "GRPC_HOST")]
    grpc_host: Option<String>,

    /// The gRPC listener's port, when --grpc-listen is not given (default 8081)
    #[arg(long, value_name = "PORT", env = "GRPC_PORT")]
    grpc_port: Option<u16>,

    /// The HTTP listener's host, when --http-listen is not given (default 0.0.0.0)
    #[arg(long, value_name = "HOST", env = "HOST")]
    http_host: Option<String>,

    /// The HTTP listener's port, when --http-listen is not given (default 8080)
    #[arg(long, value_name = "PORT", env = "PORT")]
    http_port: Option<u16>,

    /// With --runtime-subdirectory and --runtime-appdirectory, the config directory when
    /// --config is not given: ROOT/SUBDIRECTORY/APPDIRECTORY (default
    /// /srv/runtime_data/current)
    #[arg(long, value_name = "DIR", env = "RUNTIME_ROOT")]
    runtime_root: Option<PathBuf>,

    /// See --runtime-root
    #[arg(long, value_name = "DIR", env = "RUNTIME_SUBDIRECTORY")]
    runtime_subdirectory: Option<PathBuf>,

    /// See --runtime-root (default config)
    #[arg(long, value_name = "DIR", env = "RUNTIME_APPDIRECTORY")]
    runtime_appdirectory: Option<PathBuf>,

    /// The binding limit's limit, remaining and reset in three header fields (named by the
    /// next three flags)
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED")]
    limit_headers: bool,

    /// With --limit-headers, the limit's field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Limit",
        env = "LIMIT_LIMIT_HEADER"
    )]
    limit_header: String,

    /// With --limit-headers, the remaining units' field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Remaining",
        env = "LIMIT_REMAINING_HEADER"
    )]
    remaining_header: String,

    /// With --limit-headers, the seconds-to-reset field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Reset",
        env = "LIMIT_RESET_HEADER"
    )]
    reset_header: String,

    /// Dynamic metadata as the reference returns it (domain, descriptors, hitsAddend, and
    /// the passed descriptors' rule metadata), besides this service's
    #[arg(long, env = "RESPONSE_DYNAMIC_METADATA")]
    response_dynamic_metadata: bool,

    /// /healthcheck fails while no domain is loaded
    #[arg(long, env = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")]
    healthy_with_at_least_one_config: bool,
}

/// Every argument that reads a variable of the reference's: its id and the variable.
const FROM_ENVIRONMENT: &[(&str, &str)] = &[
    ("redis", "REDIS_URL"),
    ("key_prefix", "CACHE_KEY_PREFIX"),
    ("shadow_mode", "SHADOW_MODE"),
    ("log_level", "LOG_LEVEL"),
    ("redis_socket_type", "REDIS_SOCKET_TYPE"),
    ("redis_type", "REDIS_TYPE"),
    ("redis_auth", "REDIS_AUTH"),
    ("redis_tls", "REDIS_TLS"),
    (
        "redis_tls_skip_hostname_verification",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    ),
    ("grpc_host", "GRPC_HOST"),
    ("grpc_port", "GRPC_PORT"),
    ("http_host", "HOST"),
    ("http_port", "PORT"),
    ("runtime_root", "RUNTIME_ROOT"),
    ("runtime_subdirectory", "RUNTIME_SUBDIRECTORY"),
    ("runtime_appdirectory", "RUNTIME_APPDIRECTORY"),
    ("limit_headers", "LIMIT_RESPONSE_HEADERS_ENABLED"),
    ("limit_header", "LIMIT_LIMIT_HEADER"),
    ("remaining_header", "LIMIT_REMAINING_HEADER"),
    ("reset_header", "LIMIT_RESET_HEADER"),
    ("response_dynamic_metadata", "RESPONSE_DYNAMIC_METADATA"),
    (
        "healthy_with_at_least_one_config",
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    ),
];

/// A refusal of a value read from a variable (`read`: each flag given one, the variable, its
/// value), said of the variable, not of the flag it stands in for.
fn named_by_variable(
    error: clap::Error,
    read: &[(String, &'static str, std::ffi::OsString)],
) -> clap::Error {
    let Some(ContextValue::String(invalid)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let flag = invalid.split(' ').next().unwrap_or_default();
    let Some((_, variable, value)) = read.iter().find(|(long, ..)| long == flag) else {
        return error;
    };
    let reason = match (
        std::error::Error::source(&error),
        error.get(ContextKind::ValidValue),
    ) {
        (Some(source), _) => source.to_string(),
        (None, Some(ContextValue::Strings(valid))) => {
            format!("the possible values are {}", valid.join(", "))
        }
        (None, _) => error.kind().to_string(),
    };
    usage_error(
        error.kind(),
        format!(
            "invalid value {:?} in the environment variable {variable}: {reason}",
            value.to_string_lossy()
        ),
    )
}

fn listen(text: &str) -> Result<Listen, String> {
    if text == "off" {
        return Ok(Listen(None));
    }
    text.parse()
        .map(|address| Listen(Some(address)))
        .map_err(|_| "an address such as 127.0.0.1:8081, or 'off'".to_string())
}

fn count(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| "a non-negative integer is expected".to_string())
}

/// The most worker threads `--worker-threads` takes.
const MAX_WORKER_THREADS: usize = 1024;

fn worker_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(threads @ 1..=MAX_WORKER_THREADS) => Ok(threads),
        _ => Err(format!(
            "a number of threads from 1 to {MAX_WORKER_THREADS} is expected"
        )),
    }
}

fn positive(text: &str) -> Result<u64, String> {
    match count(text)? {
        0 => Err("must be above 0".into()),
        value => Ok(value),
    }
}

fn positive_ms(text: &str) -> Result<Duration, String> {
    positive(text).map(Duration::from_millis)
}

fn batch_window(text: &str) -> Result<Duration, String> {
    match count(text)? {
        window @ 0..=100_000 => Ok(Duration::from_micros(window)),
        _ => Err("is at most 100000 (0.1 s)".into()),
    }
}

fn batch_max(text: &str) -> Result<usize, String> {
    let limit = BatchOptions::LIMIT_MAX;
    match usize::try_from(count(text)?) {
        Ok(max @ 1..) if max <= limit => Ok(max),
        _ => Err(format!("is 1 to {limit}")),
    }
}

fn at_least_one(text: &str) -> Result<usize, String> {
    Ok(usize::try_from(count(text)?.max(1)).unwrap_or(usize::MAX))
}

fn max_descriptors(text: &str) -> Result<usize, String> {
    match count(text)? {
        max @ 1..=16 => Ok(usize::try_from(max).unwrap_or(16)),
        _ => Err("is 1 to 16 (one RL.MULTI takes 16 keys)".into()),
    }
}

/// A usage error in clap's form (printed with the usage line, exit code 2).
fn usage_error(kind: ErrorKind, message: impl std::fmt::Display) -> clap::Error {
    Args::command().error(kind, message)
}

/// Parses the command line (the program name first), the reference's environment
/// variables standing in for absent flags. `--help` and `--version` are errors of their own
/// kind, printed to stdout with exit code 0 by [`clap::Error::exit`].
pub fn parse<I, T>(args: I) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    parse_with_env(args, |variable| std::env::var_os(variable))
}

/// The command without its environment variables: [`parse_with_env`] reads them itself.
fn without_env() -> clap::Command {
    FROM_ENVIRONMENT
        .iter()
        .fold(Args::command(), |command, (id, _)| {
            command.mut_arg(*id, |arg| arg.env(None))
        })
}

/// [`parse`], the environment read through `lookup`. A variable of the reference's is read
/// as the reference reads it (`envconfig`): a boolean in any form Go's `strconv.ParseBool`
/// takes, any other value as its flag's (an empty one is unset); a value refused is named
/// by its variable.
pub fn parse_with_env<I, T>(
    args: I,
    lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let given = match without_env().try_get_matches_from(&args) {
        Ok(given) => given,
        // The help as clap writes it, with each flag's variable.
        Err(error) if error.exit_code() == 0 => {
            return Err(Args::command()
                .try_get_matches_from(&args)
                .err()
                .unwrap_or(error));
        }
        Err(error) => return Err(error),
    };
    let command = without_env();
    let mut from_environment = Vec::new();
    let mut read: Vec<(String, &'static str, std::ffi::OsString)> = Vec::new();
    let mut extra: Vec<std::ffi::OsString> = Vec::new();
    for (id, variable) in FROM_ENVIRONMENT {
        if given.value_source(id) == Some(ValueSource::CommandLine) {
            continue;
        }
        let Some(value) = lookup(variable) else {
            continue;
        };
        let Some(arg) = command.get_arguments().find(|arg| arg.get_id() == id) else {
            continue;
        };
        let long = format!("--{}", arg.get_long().unwrap_or(id));
        if arg.get_action().takes_values() {
            if value.is_empty() {
                continue;
            }
            let mut flag = std::ffi::OsString::from(format!("{long}="));
            flag.push(&value);
            extra.push(flag);
        } else if reference_env::parse_bool(variable, &value)
            .map_err(|error| usage_error(ErrorKind::InvalidValue, error))?
        {
            extra.push(long.clone().into());
        }
        from_environment.push(*variable);
        read.push((long, variable, value));
    }
    let matches = without_env()
        .try_get_matches_from(args.iter().cloned().chain(extra))
        .map_err(|error| named_by_variable(error, &read))?;
    let args = Args::from_arg_matches(&matches)?;
    let reference = &args.reference;
    let tls = |cert: Option<PathBuf>,
               key: Option<PathBuf>,
               client_ca: Option<PathBuf>,
               which: &str| match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) => Ok(None),
        _ => Err(usage_error(
            ErrorKind::MissingRequiredArgument,
            format!("--{which}-tls-cert and --{which}-tls-key go together"),
        )),
    };
    let required = |text: &str| usage_error(ErrorKind::MissingRequiredArgument, text);
    let redis = args
        .redis
        .as_deref()
        .ok_or_else(|| required("--redis is required (or REDIS_URL)"))?;
    let (redis, cluster) = reference_env::redis_urls(&RedisSpec {
        url: redis,
        socket: reference.redis_socket_type,
        kind: reference
            .redis_type
            .or(args.cluster.then_some(RedisType::Cluster)),
        auth: reference.redis_auth.as_deref(),
        tls: reference.redis_tls,
        skip_verify: reference.redis_tls_skip_hostname_verification,
    })
    .map_err(|error| {
        let named = match from_environment.contains(&"REDIS_URL") {
            true => "REDIS_URL",
            false => "--redis",
        };
        usage_error(ErrorKind::InvalidValue, format!("{named}: {error}"))
    })?;
    let runtime = [
        &reference.runtime_root,
        &reference.runtime_subdirectory,
        &reference.runtime_appdirectory,
    ];
    let config = match (args.config, runtime.iter().any(|part| part.is_some())) {
        (Some(config), _) => config,
        (None, true) => reference_env::runtime_dir(
            reference.runtime_root.as_deref(),
            reference.runtime_subdirectory.as_deref(),
            reference.runtime_appdirectory.as_deref(),
        ),
        (None, false) => return Err(required("--config is required (or RUNTIME_ROOT)")),
    };
    let listener = |given: Option<Listen>,
                    host: &Option<String>,
                    port: Option<u16>,
                    default: SocketAddr,
                    (flag, variable): (&str, &str)| {
        match (given, host, port) {
            (Some(given), ..) => Ok(given.0),
            (None, None, None) => Ok(Some(default)),
            (None, host, port) => {
                reference_env::listen_address(host.as_deref(), port, default.port())
                    .map(Some)
                    .map_err(|error| {
                        // The host is what fails: named as it was given.
                        let named = match from_environment.contains(&variable) {
                            true => variable,
                            false => flag,
                        };
                        usage_error(ErrorKind::InvalidValue, format!("{named}: {error}"))
                    })
            }
        }
    };
    let legacy = match (reference.limit_headers, args.legacy_headers) {
        (true, _) => Some(TripleNames {
            limit: reference.limit_header.clone(),
            remaining: reference.remaining_header.clone(),
            reset: reference.reset_header.clone(),
        }),
        (false, true) => Some(TripleNames::legacy()),
        (false, false) => None,
    };
    let options = Options {
        redis,
        cluster: args.cluster || cluster,
        config,
        grpc_listen: listener(
            args.grpc_listen,
            &reference.grpc_host,
            reference.grpc_port,
            SocketAddr::from(([127, 0, 0, 1], 8081)),
            ("--grpc-host", "GRPC_HOST"),
        )?,
        http_listen: listener(
            args.http_listen,
            &reference.http_host,
            reference.http_port,
            SocketAddr::from(([127, 0, 0, 1], 8080)),
            ("--http-host", "HOST"),
        )?,
        lease: args.lease.filter(|units| *units > 0),
        timeout: args.timeout_ms,
        worker_threads: args.worker_threads,
        batch: BatchOptions {
            window: args.batch_window_us,
            max: args.batch_max,
        },
        failure: match args.failure_mode {
            FailureMode::Allow => Fallback::Open,
            FailureMode::Deny => Fallback::Closed,
            FailureMode::Local => Fallback::Local,
        },
        replicas: args.replicas.max(1),
        headers: HeaderSettings {
            draft: match args.headers {
                HeaderForm::Off => FieldsDraft::Off,
                HeaderForm::Draft11 => FieldsDraft::Draft11,
                HeaderForm::Draft12 => FieldsDraft::Draft12,
            },
            on_admitted: !args.headers_on_denied_only,
            legacy,
        },
        key_prefix: args.key_prefix,
        bounds: Bounds {
            max_descriptors: args.max_descriptors,
            max_entries: args.max_entries,
            max_value_bytes: args.max_value_bytes,
            limit_overrides: args.limit_overrides == LimitOverrides::Allow,
        },
        http_token_file: args.http_token_file,
        region_config: args.region_config,
        grpc_tls: tls(
            args.grpc_tls_cert,
            args.grpc_tls_key,
            args.grpc_tls_client_ca,
            "grpc",
        )?,
        http_tls: tls(
            args.http_tls_cert,
            args.http_tls_key,
            args.http_tls_client_ca,
            "http",
        )?,
        watch: (args.watch_ms > 0).then(|| Duration::from_millis(args.watch_ms)),
        plans_check: args
            .plans_check_ms
            .unwrap_or(PlanOptions::default().check_every),
        config_bounds: FileBounds {
            max_depth: args.config_max_depth,
            max_file_bytes: args.config_max_file_bytes,
            max_files: args.config_max_files,
        },
        limits: Limits {
            max_connections: args.max_connections,
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            request_timeout: Duration::from_millis(args.request_timeout_ms),
            max_streams: args.max_streams,
            grpc_concurrency: args.grpc_concurrency,
            keepalive: (args.keepalive_ms > 0).then(|| Duration::from_millis(args.keepalive_ms)),
        },
        shutdown_timeout: Duration::from_millis(args.shutdown_timeout_ms),
        grpc_token_file: args.grpc_token_file,
        metrics_need_token: args.metrics_need_token,
        http_allowed_origins: args.http_allow_origin,
        max_metric_rules: args.max_metric_rules,
        max_tracked_keys: args.max_tracked_keys,
        shadow_mode: args.shadow_mode,
        response_dynamic_metadata: reference.response_dynamic_metadata,
        healthy_with_config: reference.healthy_with_at_least_one_config,
        log_level: match args.log_level {
            LogLevel::Trace => tracing::Level::TRACE,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Error => tracing::Level::ERROR,
        },
        from_environment,
    };
    if options.grpc_listen.is_none() && options.http_listen.is_none() {
        return Err(usage_error(
            ErrorKind::ArgumentConflict,
            "both listeners are off: nothing to serve",
        ));
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse_line(line: &str) -> Result<Options, clap::Error> {
        parse(std::iter::once("redis-ratelimit-server").chain(line.split_whitespace()))
    }

    fn error(line: &str) -> String {
        parse_line(line).unwrap_err().to_string()
    }

    const BASE: &str = "--redis redis://127.0.0.1:6379/ --config /tmp/c";

    #[test]
    fn the_defaults() {
        let options = parse_line(BASE).unwrap();
        assert_eq!(options.redis, vec!["redis://127.0.0.1:6379/".to_string()]);
        assert_eq!(options.config, PathBuf::from("/tmp/c"));
        assert_eq!(options.grpc_listen, Some("127.0.0.1:8081".parse().unwrap()));
        assert_eq!(options.http_listen, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(options.lease, None);
        assert_eq!(options.batch, BatchOptions::default());
        assert_eq!(options.timeout, Duration::from_millis(20));
        assert_eq!(options.failure, Fallback::Local);
        assert_eq!(options.replicas, 1);
        assert_eq!(
            options.headers,
            HeaderSettings {
                draft: FieldsDraft::Draft11,
                on_admitted: true,
                legacy: None
            }
        );
        assert_eq!(options.key_prefix, "rls:");
        assert_eq!(options.bounds, Bounds::default());
        assert_eq!(options.watch, Some(Duration::from_millis(1000)));
        assert_eq!(options.plans_check, PlanOptions::default().check_every);
        assert!(!options.cluster && options.grpc_tls.is_none() && options.http_tls.is_none());
        assert_eq!(options.config_bounds, FileBounds::default());
        assert_eq!(options.limits, Limits::default());
        assert_eq!(
            options.shutdown_timeout,
            Duration::from_millis(serve::DEFAULT_SHUTDOWN_TIMEOUT_MS)
        );
        assert!(options.grpc_token_file.is_none() && !options.metrics_need_token);
        assert!(options.http_allowed_origins.is_empty());
        assert_eq!(options.max_metric_rules, metrics::DEFAULT_MAX_RULE_LABELS);
    }

    #[test]
    fn the_bounds_and_security_flags() {
        let options = parse_line(&format!(
            "{BASE} --config-max-depth 8 --config-max-file-bytes 4096 --config-max-files 3 \
             --max-connections 10 --header-timeout-ms 500 --request-timeout-ms 700 \
             --max-streams 4 --grpc-concurrency 2 --keepalive-ms 0 --shutdown-timeout-ms 0 \
             --grpc-tls-cert c --grpc-tls-key k --grpc-tls-client-ca ca --grpc-token-file g \
             --http-token-file h --metrics-need-token --max-metric-rules 5 \
             --limit-overrides refuse --http-allow-origin https://a --http-allow-origin https://b"
        ))
        .unwrap();
        assert_eq!(
            options.config_bounds,
            FileBounds {
                max_depth: 8,
                max_file_bytes: 4096,
                max_files: 3
            }
        );
        assert_eq!(
            options.limits,
            Limits {
                max_connections: 10,
                header_timeout: Duration::from_millis(500),
                request_timeout: Duration::from_millis(700),
                max_streams: 4,
                grpc_concurrency: 2,
                keepalive: None,
            }
        );
        assert_eq!(options.shutdown_timeout, Duration::ZERO);
        assert_eq!(
            options.grpc_tls.and_then(|tls| tls.client_ca),
            Some(PathBuf::from("ca"))
        );
        assert_eq!(options.grpc_token_file, Some(PathBuf::from("g")));
        assert!(options.metrics_need_token);
        assert_eq!(options.max_metric_rules, 5);
        assert!(!options.bounds.limit_overrides);
        assert_eq!(options.http_allowed_origins, vec!["https://a", "https://b"]);
        for (line, reason) in [
            ("--metrics-need-token", "--http-token-file"),
            ("--grpc-tls-client-ca ca", "--grpc-tls-cert"),
            ("--header-timeout-ms 0", "must be above 0"),
            (
                "--limit-overrides maybe",
                "[possible values: allow, refuse]",
            ),
        ] {
            let error = error(&format!("{BASE} {line}"));
            assert!(error.contains(reason), "{line}: {error}");
        }
    }

    #[test]
    fn every_flag() {
        let options = parse_line(
            "--redis a:1,b:2 --cluster --config=/etc/rl --grpc-listen off --http-listen 0.0.0.0:9 \
             --lease 10 --timeout-ms 5 --failure-mode deny --replicas 0 --headers draft-12 \
             --headers-on-denied-only --legacy-headers --key-prefix x: --max-descriptors 4 \
             --max-entries 0 --max-value-bytes 64 --http-token-file /t --grpc-tls-cert c \
             --grpc-tls-key k --watch-ms 0 --plans-check-ms 50 --lease 0 --worker-threads 1",
        )
        .unwrap();
        assert_eq!(
            options.redis,
            vec!["redis://a:1/".to_string(), "redis://b:2/".to_string()],
            "cluster seeds without a scheme"
        );
        assert!(options.cluster);
        assert_eq!(options.config, PathBuf::from("/etc/rl"));
        assert_eq!(options.grpc_listen, None);
        assert_eq!(options.http_listen, Some("0.0.0.0:9".parse().unwrap()));
        assert_eq!(options.lease, None, "the last --lease wins, and 0 is off");
        assert_eq!(options.timeout, Duration::from_millis(5));
        assert_eq!(options.failure, Fallback::Closed);
        assert_eq!(options.replicas, 1);
        assert_eq!(options.headers.draft, FieldsDraft::Draft12);
        assert!(!options.headers.on_admitted);
        assert_eq!(options.headers.legacy, Some(TripleNames::legacy()));
        assert_eq!(options.key_prefix, "x:");
        assert_eq!(options.bounds.max_descriptors, 4);
        assert_eq!(options.bounds.max_entries, 1);
        assert_eq!(options.bounds.max_value_bytes, 64);
        assert_eq!(options.http_token_file, Some(PathBuf::from("/t")));
        assert_eq!(
            options.grpc_tls,
            Some(TlsFiles {
                cert: "c".into(),
                key: "k".into(),
                client_ca: None,
            })
        );
        assert_eq!(options.watch, None);
        assert_eq!(options.plans_check, Duration::from_millis(50));
        assert_eq!(options.worker_threads, Some(1));
    }

    #[test]
    fn errors_name_the_flag_and_the_reason() {
        let cases: &[(&str, &str)] = &[
            ("--config /c", "--redis is required (or REDIS_URL)"),
            ("--redis r", "--config is required (or RUNTIME_ROOT)"),
            ("--timeout-ms 0", "'--timeout-ms <MS>': must be above 0"),
            (
                "--plans-check-ms 0",
                "'--plans-check-ms <MS>': must be above 0",
            ),
            ("--lease -1", "a non-negative integer is expected"),
            (
                "--batch-window-us 100001",
                "'--batch-window-us <US>': is at most 100000 (0.1 s)",
            ),
            ("--batch-max 0", "'--batch-max <N>': is 1 to 1024"),
            ("--batch-max 1025", "'--batch-max <N>': is 1 to 1024"),
            (
                "--worker-threads 0",
                "'--worker-threads <N>': a number of threads from 1 to 1024 is expected",
            ),
            (
                "--failure-mode maybe",
                "[possible values: allow, deny, local]",
            ),
            (
                "--headers draft-10",
                "[possible values: off, draft-11, draft-12]",
            ),
            (
                "--max-descriptors 17",
                "is 1 to 16 (one RL.MULTI takes 16 keys)",
            ),
            (
                "--grpc-listen nowhere",
                "an address such as 127.0.0.1:8081, or 'off'",
            ),
            (
                "--http-tls-cert c",
                "--http-tls-cert and --http-tls-key go together",
            ),
            (
                "--grpc-listen off --http-listen off",
                "both listeners are off: nothing to serve",
            ),
            ("--frobnicate", "unexpected argument '--frobnicate'"),
            ("--lease", "a value is required for '--lease <N>'"),
        ];
        for (extra, expected) in cases {
            let line = if extra.starts_with("--config") || extra.starts_with("--redis") {
                extra.to_string()
            } else {
                format!("{BASE} {extra}")
            };
            let text = error(&line);
            assert!(text.contains(expected), "{line}: {text}");
            assert_eq!(
                parse_line(&line).unwrap_err().exit_code(),
                2,
                "a usage error: {line}"
            );
        }
    }

    /// Parses `line` with `env` as the whole environment.
    fn parse_env(line: &str, env: &[(&str, &str)]) -> Result<Options, clap::Error> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        parse_with_env(
            std::iter::once("redis-ratelimit-server").chain(line.split_whitespace()),
            move |variable| {
                env.iter()
                    .find(|(name, _)| name == variable)
                    .map(|(_, value)| value.into())
            },
        )
    }

    #[test]
    fn booleans_in_every_spelling_the_reference_takes() {
        let base = "--redis 127.0.0.1:6379 --config /c";
        type Reader = fn(&Options) -> bool;
        let read: &[(&str, Reader)] = &[
            ("SHADOW_MODE", |options| options.shadow_mode),
            ("REDIS_TLS", |options| {
                options.redis[0].starts_with("rediss://")
            }),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", |options| {
                options.headers.legacy.is_some()
            }),
            ("RESPONSE_DYNAMIC_METADATA", |options| {
                options.response_dynamic_metadata
            }),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", |options| {
                options.healthy_with_config
            }),
        ];
        for (variable, value_of) in read {
            for (spelling, expected) in [
                ("1", true),
                ("t", true),
                ("T", true),
                ("TRUE", true),
                ("true", true),
                ("True", true),
                ("0", false),
                ("f", false),
                ("F", false),
                ("FALSE", false),
                ("false", false),
                ("False", false),
            ] {
                let options = parse_env(base, &[(variable, spelling)])
                    .unwrap_or_else(|error| panic!("{variable}={spelling}: {error}"));
                assert_eq!(value_of(&options), expected, "{variable}={spelling}");
                assert_eq!(options.from_environment, vec![*variable]);
            }
            for refused in ["yes", "on", "2", "", " true", "tRUE"] {
                let error = parse_env(base, &[(variable, refused)]).unwrap_err();
                let text = error.to_string();
                assert!(
                    text.contains(&format!(
                        "in the environment variable {variable}: a boolean"
                    )) && !text.lines().next().unwrap_or_default().contains("--"),
                    "{variable}={refused:?}: {text}"
                );
                assert_eq!(error.exit_code(), 2);
            }
        }
        let options = parse_env(
            base,
            &[
                ("REDIS_TLS", "1"),
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "T"),
            ],
        )
        .unwrap();
        assert_eq!(options.redis, vec!["rediss://127.0.0.1:6379/#insecure"]);
        // The command line wins, and a variable it stands for is not read at all.
        let options =
            parse_env(&format!("{base} --shadow-mode"), &[("SHADOW_MODE", "bad")]).unwrap();
        assert!(options.shadow_mode && options.from_environment.is_empty());
    }

    #[test]
    fn the_runtime_directory_is_joined_as_the_reference_joins_it() {
        let config = |env: &[(&str, &str)]| parse_env("--redis r:1", env).unwrap().config;
        for (env, expected) in [
            (
                &[("RUNTIME_ROOT", "/srv/r"), ("RUNTIME_SUBDIRECTORY", "/x")][..],
                "/srv/r/x/config",
            ),
            (
                &[("RUNTIME_SUBDIRECTORY", "/x")][..],
                "/srv/runtime_data/current/x/config",
            ),
            (
                &[
                    ("RUNTIME_ROOT", "/srv/r/"),
                    ("RUNTIME_APPDIRECTORY", "/rules/"),
                ][..],
                "/srv/r/rules",
            ),
            (
                &[
                    ("RUNTIME_ROOT", "a//b/./"),
                    ("RUNTIME_SUBDIRECTORY", "../c"),
                ][..],
                "a/c/config",
            ),
            (
                &[("RUNTIME_ROOT", "/"), ("RUNTIME_SUBDIRECTORY", "../../x")][..],
                "/x/config",
            ),
            (
                &[("RUNTIME_ROOT", ".."), ("RUNTIME_SUBDIRECTORY", "..")][..],
                "../../config",
            ),
            (
                &[("RUNTIME_ROOT", "/r"), ("RUNTIME_SUBDIRECTORY", "")][..],
                "/r/config",
            ),
        ] {
            assert_eq!(config(env), PathBuf::from(expected), "{env:?}");
        }
    }

    #[test]
    fn a_value_from_the_environment_is_named_by_its_variable() {
        let base = "--redis r:1 --config /c";
        for (variable, value, expected) in [
            (
                "GRPC_PORT",
                "eighty",
                "invalid value \"eighty\" in the environment variable GRPC_PORT: invalid digit",
            ),
            (
                "LOG_LEVEL",
                "loud",
                "invalid value \"loud\" in the environment variable LOG_LEVEL: the possible values are",
            ),
            (
                "REDIS_TYPE",
                "ring",
                "in the environment variable REDIS_TYPE: the possible values are single, sentinel, cluster",
            ),
            (
                "GRPC_HOST",
                "no such host.invalid",
                "GRPC_HOST: cannot resolve",
            ),
        ] {
            let error = parse_env(base, &[(variable, value)]).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(expected), "{variable}={value}: {text}");
            assert!(
                !text.lines().next().unwrap_or_default().contains("--"),
                "{variable}={value} names no flag: {text}"
            );
            assert_eq!(error.exit_code(), 2);
        }
        let text = parse_env("--config /c", &[("REDIS_URL", "a:1,b:2")])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("REDIS_URL: one server is one address"),
            "{text}"
        );
        let text = error("--config /c --redis a:1,b:2");
        assert!(
            text.contains("--redis: one server is one address"),
            "{text}"
        );
        let text = error("--config /c --redis r:1 --grpc-port eighty");
        assert!(
            text.contains("'--grpc-port <PORT>'"),
            "a flag is named as a flag: {text}"
        );
    }

    #[test]
    fn help_is_not_an_error() {
        let help = parse_line("--help").unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert_eq!(help.exit_code(), 0);
        let text = help.to_string();
        for flag in [
            "--redis",
            "--failure-mode",
            "--plans-check-ms",
            "--grpc-tls-key",
        ] {
            assert!(text.contains(flag), "{flag} in the help");
        }
    }
}
