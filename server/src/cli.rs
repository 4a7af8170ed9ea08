//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use redis_ratelimit_client::Fallback;
use redis_ratelimit_client::plans::PlanOptions;

use crate::config::FileBounds;
use crate::headers::{FieldsDraft, HeaderSettings};
use crate::request::Bounds;
use crate::serve::{DEFAULT_SHUTDOWN_TIMEOUT, Limits};
use crate::tls::TlsFiles;

/// The usage text.
pub const USAGE: &str = "\
usage: redis-ratelimit-server --redis URL --config DIR [options]

  --redis URL               redis://[user:password@]host:port/ or rediss:// (TLS);
                            redis+sentinel://h1:port,h2:port/primary-name[/db] (Sentinel);
                            with --cluster, a comma-separated list of seed nodes
  --cluster                 the store is a Redis Cluster
  --config DIR              the envoyproxy/ratelimit YAML files (*.yaml, *.yml), watched
  --grpc-listen ADDR        Envoy RLS v3 (default 127.0.0.1:8081; 'off' disables it)
  --http-listen ADDR        HTTP JSON API, /metrics, /healthz, /readyz (default 127.0.0.1:8080; 'off')
  --lease N                 claim N units per store call and spend them from memory (default: off)
  --timeout-ms MS           longest wait for one store call (default 20)
  --failure-mode MODE       allow | deny | local when the store is out of reach (default local)
  --replicas N              replicas of this service: the local fallback enforces quota/N (default 1)
  --headers FORM            off | draft-11 | draft-12: the IETF RateLimit fields (default draft-11)
  --headers-on-denied-only  send the RateLimit fields on denials only
  --legacy-headers          also X-RateLimit-Limit, -Remaining, -Reset
  --key-prefix TEXT         prefix of every Redis key (default 'rls:')
  --max-descriptors N       descriptors per request, at most 16 (default 16)
  --max-entries N           entries per descriptor (default 8)
  --max-value-bytes N       bytes of a key, value or domain (default 256)
  --http-token-file PATH    require 'Authorization: Bearer <token>' on /v1/* (token read from PATH)
  --grpc-tls-cert PEM --grpc-tls-key PEM   serve gRPC over TLS
  --http-tls-cert PEM --http-tls-key PEM   serve HTTP over TLS
  --watch-ms MS             how often the config directory is checked for changes (default 1000; 0: never)
  --plans-check-ms MS       limits with 'tenant_key' (plans): the policy store's version is checked
                            this often besides its change notifications (default 500)
";

/// Everything the command line says.
#[derive(Clone, Debug)]
pub struct Options {
    /// The store's URL(s).
    pub redis: Vec<String>,
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
}

fn number(flag: &str, text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{flag} takes a non-negative integer, not '{text}'"))
}

fn address(flag: &str, text: &str) -> Result<Option<SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        format!("{flag} takes an address such as 127.0.0.1:8081 or 'off', not '{text}'")
    })
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut redis = None;
    let mut cluster = false;
    let mut config = None;
    let mut grpc_listen = address("", "127.0.0.1:8081")?;
    let mut http_listen = address("", "127.0.0.1:8080")?;
    let mut lease = None;
    let mut timeout = Duration::from_millis(20);
    let mut failure = Fallback::Local;
    let mut replicas = 1;
    let mut headers = HeaderSettings {
        draft: FieldsDraft::Draft11,
        on_admitted: true,
        legacy: false,
    };
    let mut key_prefix = "rls:".to_string();
    let mut bounds = Bounds::default();
    let mut http_token_file = None;
    let (mut grpc_cert, mut grpc_key, mut http_cert, mut http_key) = (None, None, None, None);
    let mut watch = Some(Duration::from_millis(1000));
    let mut plans_check = PlanOptions::default().check_every;
    // `--flag=value` is `--flag value`.
    let mut args = args
        .into_iter()
        .flat_map(|arg| match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                vec![flag.to_string(), value.to_string()]
            }
            _ => vec![arg],
        })
        .collect::<Vec<_>>()
        .into_iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--redis" => redis = Some(value()?.split(',').map(str::to_string).collect::<Vec<_>>()),
            "--cluster" => cluster = true,
            "--config" => config = Some(PathBuf::from(value()?)),
            "--grpc-listen" => grpc_listen = address(&flag, &value()?)?,
            "--http-listen" => http_listen = address(&flag, &value()?)?,
            "--lease" => lease = Some(number(&flag, &value()?)?).filter(|units| *units > 0),
            "--timeout-ms" => {
                let ms = number(&flag, &value()?)?;
                if ms == 0 {
                    return Err("--timeout-ms must be above 0".into());
                }
                timeout = Duration::from_millis(ms);
            }
            "--failure-mode" => {
                failure = match value()?.as_str() {
                    "allow" => Fallback::Open,
                    "deny" => Fallback::Closed,
                    "local" => Fallback::Local,
                    other => {
                        return Err(format!(
                            "--failure-mode is allow, deny or local, not '{other}'"
                        ));
                    }
                }
            }
            "--replicas" => replicas = number(&flag, &value()?)?.max(1),
            "--headers" => {
                let text = value()?;
                headers.draft = FieldsDraft::parse(&text).ok_or_else(|| {
                    format!("--headers is off, draft-11 or draft-12, not '{text}'")
                })?;
            }
            "--headers-on-denied-only" => headers.on_admitted = false,
            "--legacy-headers" => headers.legacy = true,
            "--key-prefix" => key_prefix = value()?,
            "--max-descriptors" => {
                let max = number(&flag, &value()?)?;
                if !(1..=16).contains(&max) {
                    return Err("--max-descriptors is 1 to 16 (one RL.MULTI takes 16 keys)".into());
                }
                bounds.max_descriptors = usize::try_from(max).unwrap_or(16);
            }
            "--max-entries" => {
                bounds.max_entries =
                    usize::try_from(number(&flag, &value()?)?.max(1)).unwrap_or(usize::MAX)
            }
            "--max-value-bytes" => {
                bounds.max_value_bytes =
                    usize::try_from(number(&flag, &value()?)?.max(1)).unwrap_or(usize::MAX)
            }
            "--http-token-file" => http_token_file = Some(PathBuf::from(value()?)),
            "--grpc-tls-cert" => grpc_cert = Some(PathBuf::from(value()?)),
            "--grpc-tls-key" => grpc_key = Some(PathBuf::from(value()?)),
            "--http-tls-cert" => http_cert = Some(PathBuf::from(value()?)),
            "--http-tls-key" => http_key = Some(PathBuf::from(value()?)),
            "--watch-ms" => {
                let ms = number(&flag, &value()?)?;
                watch = (ms > 0).then(|| Duration::from_millis(ms));
            }
            "--plans-check-ms" => {
                let ms = number(&flag, &value()?)?;
                if ms == 0 {
                    return Err("--plans-check-ms must be above 0".into());
                }
                plans_check = Duration::from_millis(ms);
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    let tls = |cert: Option<PathBuf>, key: Option<PathBuf>, which: &str| match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca: None,
        })),
        (None, None) => Ok(None),
        _ => Err(format!(
            "--{which}-tls-cert and --{which}-tls-key go together"
        )),
    };
    let options = Options {
        redis: redis.ok_or("--redis is required")?,
        cluster,
        config: config.ok_or("--config is required")?,
        grpc_listen,
        http_listen,
        lease,
        timeout,
        failure,
        replicas,
        headers,
        key_prefix,
        bounds,
        http_token_file,
        grpc_tls: tls(grpc_cert, grpc_key, "grpc")?,
        http_tls: tls(http_cert, http_key, "http")?,
        watch,
        plans_check,
        config_bounds: FileBounds::default(),
        limits: Limits::default(),
        shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        grpc_token_file: None,
        metrics_need_token: false,
        http_allowed_origins: Vec::new(),
    };
    if options.grpc_listen.is_none() && options.http_listen.is_none() {
        return Err("both listeners are off: nothing to serve".into());
    }
    Ok(options)
}
