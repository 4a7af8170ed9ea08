//! envoyproxy/ratelimit's settings, as flags whose fallbacks are its environment variables.

use std::path::PathBuf;

use crate::header_settings::TripleNames;
use crate::reference_env::{self, RedisSpec, RedisType, SocketType};

/// Where the reference's settings are shown in `--help`.
const REFERENCE: &str = "envoyproxy/ratelimit's settings (the flags win over the variables)";

/// envoyproxy/ratelimit's settings, as flags whose fallbacks are its environment
/// variables (`--redis` reads `REDIS_URL`, `--key-prefix` `CACHE_KEY_PREFIX`, `--shadow-mode`
/// `SHADOW_MODE`, `--log-level` `LOG_LEVEL`).
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = REFERENCE)]
pub struct Reference {
    /// How a --redis that is not a URL is reached: host:port (tcp) or a socket path (unix)
    #[arg(
        long,
        value_name = "TYPE",
        value_enum,
        ignore_case = true,
        env = "REDIS_SOCKET_TYPE"
    )]
    pub redis_socket_type: Option<SocketType>,

    /// What a --redis that is not a URL names: one server, a Sentinel
    /// (primary-name,sentinel:port,...) or a Cluster (node:port,...)
    #[arg(
        long,
        value_name = "TYPE",
        value_enum,
        ignore_case = true,
        env = "REDIS_TYPE"
    )]
    pub redis_type: Option<RedisType>,

    /// The store's password, or user:password (for a --redis that is not a URL)
    #[arg(long, value_name = "AUTH", env = "REDIS_AUTH", hide_env_values = true)]
    pub redis_auth: Option<String>,

    /// The store over TLS (for a --redis that is not a URL)
    #[arg(long, env = "REDIS_TLS")]
    pub redis_tls: bool,

    /// With --redis-tls, the store's certificate is not checked against its name
    #[arg(long, env = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")]
    pub redis_tls_skip_hostname_verification: bool,

    /// The gRPC listener's host, when --grpc-listen is not given (default 0.0.0.0)
    #[arg(long, value_name = "HOST", env = "GRPC_HOST")]
    pub grpc_host: Option<String>,

    /// The gRPC listener's port, when --grpc-listen is not given (default 8081)
    #[arg(long, value_name = "PORT", env = "GRPC_PORT")]
    pub grpc_port: Option<u16>,

    /// The HTTP listener's host, when --http-listen is not given (default 0.0.0.0)
    #[arg(long, value_name = "HOST", env = "HOST")]
    pub http_host: Option<String>,

    /// The HTTP listener's port, when --http-listen is not given (default 8080)
    #[arg(long, value_name = "PORT", env = "PORT")]
    pub http_port: Option<u16>,

    /// With --runtime-subdirectory and --runtime-appdirectory, the config directory when
    /// --config is not given: ROOT/SUBDIRECTORY/APPDIRECTORY (default
    /// /srv/runtime_data/current)
    #[arg(long, value_name = "DIR", env = "RUNTIME_ROOT")]
    pub runtime_root: Option<PathBuf>,

    /// See --runtime-root
    #[arg(long, value_name = "DIR", env = "RUNTIME_SUBDIRECTORY")]
    pub runtime_subdirectory: Option<PathBuf>,

    /// See --runtime-root (default config)
    #[arg(long, value_name = "DIR", env = "RUNTIME_APPDIRECTORY")]
    pub runtime_appdirectory: Option<PathBuf>,

    /// The binding limit's limit, remaining and reset in three header fields (named by the
    /// next three flags)
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED")]
    pub limit_headers: bool,

    /// With --limit-headers, the limit's field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Limit",
        env = "LIMIT_LIMIT_HEADER"
    )]
    pub limit_header: String,

    /// With --limit-headers, the remaining units' field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Remaining",
        env = "LIMIT_REMAINING_HEADER"
    )]
    pub remaining_header: String,

    /// With --limit-headers, the seconds-to-reset field
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Reset",
        env = "LIMIT_RESET_HEADER"
    )]
    pub reset_header: String,

    /// Dynamic metadata as the reference returns it (domain, descriptors, hitsAddend, and
    /// the passed descriptors' rule metadata), besides this service's
    #[arg(long, env = "RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,

    /// /healthcheck fails while no domain is loaded
    #[arg(long, env = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")]
    pub healthy_with_at_least_one_config: bool,
}

impl Reference {
    /// The store `url` (`--redis`) names, as these settings say it is reached (a Cluster
    /// with `cluster`, `--cluster`, when `--redis-type` does not say).
    pub fn redis<'a>(&'a self, url: &'a str, cluster: bool) -> RedisSpec<'a> {
        RedisSpec {
            url,
            socket: self.redis_socket_type,
            kind: self.redis_type.or(cluster.then_some(RedisType::Cluster)),
            auth: self.redis_auth.as_deref(),
            tls: self.redis_tls,
            skip_verify: self.redis_tls_skip_hostname_verification,
        }
    }

    /// The config directory the runtime settings name, when any is given.
    pub fn runtime_dir(&self) -> Option<PathBuf> {
        let parts = [
            &self.runtime_root,
            &self.runtime_subdirectory,
            &self.runtime_appdirectory,
        ];
        parts.iter().any(|part| part.is_some()).then(|| {
            reference_env::runtime_dir(
                self.runtime_root.as_deref(),
                self.runtime_subdirectory.as_deref(),
                self.runtime_appdirectory.as_deref(),
            )
        })
    }

    /// The gRPC listener's host and port.
    pub fn grpc(&self) -> (Option<&str>, Option<u16>) {
        (self.grpc_host.as_deref(), self.grpc_port)
    }

    /// The HTTP listener's host and port.
    pub fn http(&self) -> (Option<&str>, Option<u16>) {
        (self.http_host.as_deref(), self.http_port)
    }

    /// The limit / remaining / reset fields' names.
    pub fn triple_names(&self) -> TripleNames {
        TripleNames {
            limit: self.limit_header.clone(),
            remaining: self.remaining_header.clone(),
            reset: self.reset_header.clone(),
        }
    }
}
