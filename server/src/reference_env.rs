//! envoyproxy/ratelimit's deployment surface: its environment variables. Those with a
//! counterpart here are the fallbacks of flags (`cli/`), and this module turns the
//! reference's forms into this service's (its `REDIS_URL` with `REDIS_SOCKET_TYPE`,
//! `REDIS_TYPE`, `REDIS_AUTH` and `REDIS_TLS`; its host and port pairs; its runtime
//! directory layout). The others are logged once each, by name, at start: a deployment
//! migrating from the reference carries them, and none is silently ignored.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// `REDIS_SOCKET_TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub enum SocketType {
    /// `host:port`.
    Tcp,
    /// A socket path.
    Unix,
}

/// `REDIS_TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub enum RedisType {
    /// One server.
    Single,
    /// `primary-name,sentinel:port,...`.
    Sentinel,
    /// `node:port,node:port,...`.
    Cluster,
}

/// The store as the reference's variables describe it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisSpec<'a> {
    /// `REDIS_URL`: `host:port` (or a path, for a Unix socket), comma-separated nodes for
    /// a cluster, `name,sentinel,...` for Sentinel. A URL (`redis://...`) is taken as is.
    pub url: &'a str,
    /// `REDIS_SOCKET_TYPE` (a path is a Unix socket, anything else TCP, when not given).
    pub socket: Option<SocketType>,
    /// `REDIS_TYPE` (default single).
    pub kind: Option<RedisType>,
    /// `REDIS_AUTH`: `password` or `user:password`.
    pub auth: Option<&'a str>,
    /// `REDIS_TLS`.
    pub tls: bool,
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`.
    pub skip_verify: bool,
}

/// The store's URLs (several: a cluster's nodes) and whether it is a cluster.
pub fn redis_urls(spec: &RedisSpec<'_>) -> Result<(Vec<String>, bool), String> {
    if spec.url.contains("://") {
        let urls = spec.url.split(',').map(str::to_string).collect();
        return Ok((urls, spec.kind == Some(RedisType::Cluster)));
    }
    let scheme = if spec.tls { "rediss" } else { "redis" };
    let fragment = if spec.tls && spec.skip_verify {
        "#insecure"
    } else {
        ""
    };
    let userinfo = spec.auth.map(userinfo).unwrap_or_default();
    let tcp = |address: &str| format!("{scheme}://{userinfo}{address}/{fragment}");
    let parts: Vec<&str> = spec
        .url
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect();
    match spec.kind.unwrap_or(RedisType::Single) {
        RedisType::Cluster => Ok((parts.into_iter().map(tcp).collect(), true)),
        RedisType::Sentinel => {
            let [name, sentinels @ ..] = parts.as_slice() else {
                return Err("a Sentinel store is 'primary-name,host:port,...'".into());
            };
            if sentinels.is_empty() {
                return Err(format!(
                    "'{name}' names a primary but no sentinel (name,host:port,...)"
                ));
            }
            if spec.auth.is_some() || spec.tls {
                return Err(
                    "REDIS_AUTH and REDIS_TLS are not supported with Sentinel: give --redis \
                     redis+sentinel://..."
                        .into(),
                );
            }
            Ok((
                vec![format!("redis+sentinel://{}/{name}", sentinels.join(","))],
                false,
            ))
        }
        RedisType::Single => {
            let [address] = parts.as_slice() else {
                return Err(format!(
                    "one server is one address, not '{}' (REDIS_TYPE=cluster for several)",
                    spec.url
                ));
            };
            let unix = match spec.socket {
                Some(socket) => socket == SocketType::Unix,
                None => address.starts_with('/'),
            };
            if !unix {
                return Ok((vec![tcp(address)], false));
            }
            let mut url = format!("redis+unix://{address}");
            if let Some((user, password)) = spec.auth.map(split_auth) {
                url.push_str(&format!("?pass={}", encode(password)));
                if let Some(user) = user {
                    url.push_str(&format!("&user={}", encode(user)));
                }
            }
            Ok((vec![url], false))
        }
    }
}

fn split_auth(auth: &str) -> (Option<&str>, &str) {
    match auth.split_once(':') {
        Some((user, password)) => (Some(user), password),
        None => (None, auth),
    }
}

/// `user:password@` (or `:password@`), percent-encoded.
fn userinfo(auth: &str) -> String {
    match split_auth(auth) {
        (Some(user), password) => format!("{}:{}@", encode(user), encode(password)),
        (None, password) => format!(":{}@", encode(password)),
    }
}

/// Percent-encodes all but the unreserved characters of RFC 3986.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The address of a listener the reference configures by host and port (`GRPC_HOST` and
/// `GRPC_PORT`, `HOST` and `PORT`): the reference's defaults for the one not given (all
/// interfaces, `default_port`). A host name is resolved once, at start.
pub fn listen_address(
    host: Option<&str>,
    port: Option<u16>,
    default_port: u16,
) -> Result<SocketAddr, AddressError> {
    let host = host.unwrap_or("0.0.0.0");
    let port = port.unwrap_or(default_port);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|source| AddressError::Unresolved {
            host: host.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| AddressError::NoAddress(host.to_string()))
}

/// Why a listener's host gives no address.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    /// The name could not be resolved.
    #[error("cannot resolve '{host}': {source}")]
    Unresolved {
        /// The host.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The name resolved to nothing.
    #[error("'{0}' has no address")]
    NoAddress(String),
}

/// The reference's config directory: `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY` and
/// `RUNTIME_APPDIRECTORY` (its defaults `/srv/runtime_data/current`, none, `config`) joined as
/// Go's `filepath.Join` joins them: the empty parts skipped, the rest joined by `/` and
/// cleaned (a part starting with `/` does not start over, `.` and `..` are resolved).
pub fn runtime_dir(
    root: Option<&Path>,
    subdirectory: Option<&Path>,
    app: Option<&Path>,
) -> PathBuf {
    let root = root.unwrap_or(Path::new("/srv/runtime_data/current"));
    let app = app.unwrap_or(Path::new("config"));
    go_join(&[root, subdirectory.unwrap_or(Path::new("")), app])
}

/// Go's `filepath.Join` on Unix: the non-empty parts joined by `/`, then `filepath.Clean`
/// (runs of `/` made one, `.` dropped, `..` removing the name before it, or dropped at the
/// root; no trailing `/`; `.` for nothing).
fn go_join(parts: &[&Path]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let joined: Vec<&[u8]> = parts
        .iter()
        .map(|part| part.as_os_str().as_bytes())
        .filter(|part| !part.is_empty())
        .collect();
    let Some(first) = joined.first() else {
        return PathBuf::new();
    };
    let rooted = first.starts_with(b"/");
    let mut names: Vec<&[u8]> = Vec::new();
    for name in joined
        .iter()
        .flat_map(|part| part.split(|byte| *byte == b'/'))
    {
        match name {
            b"" | b"." => {}
            b".." => match names.last() {
                Some(last) if *last != b".." => {
                    names.pop();
                }
                _ if rooted => {}
                _ => names.push(name),
            },
            name => names.push(name),
        }
    }
    let mut cleaned: Vec<u8> = Vec::new();
    if rooted {
        cleaned.push(b'/');
    }
    for (index, name) in names.iter().enumerate() {
        if index > 0 {
            cleaned.push(b'/');
        }
        cleaned.extend_from_slice(name);
    }
    if cleaned.is_empty() {
        cleaned.push(b'.');
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&cleaned))
}

/// A boolean variable as the reference reads it (Go's `strconv.ParseBool`, through
/// `envconfig`): `1`, `t`, `T`, `TRUE`, `true`, `True`, or `0`, `f`, `F`, `FALSE`, `false`,
/// `False`; anything else (an empty value too) is refused, naming the variable.
pub fn parse_bool(variable: &str, value: &std::ffi::OsStr) -> Result<bool, String> {
    match value.to_str() {
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        _ => Err(format!(
            "invalid value {:?} in the environment variable {variable}: a boolean is one of 1, \
             t, T, TRUE, true, True, 0, f, F, FALSE, false, False (as envoyproxy/ratelimit reads \
             it)",
            value.to_string_lossy()
        )),
    }
}

/// Every variable of the reference's settings that this service does not read, with what
/// it does instead.
const UNREAD: &[(&str, &str)] = &[
    ("DEBUG_HOST", NO_DEBUG),
    ("DEBUG_PORT", NO_DEBUG),
    (
        "GRPC_UDS",
        "gRPC is not served on a Unix socket (GRPC_HOST and GRPC_PORT are)",
    ),
    ("GRPC_MAX_CONNECTION_AGE", CONNECTIONS),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", CONNECTIONS),
    ("GRPC_SERVER_USE_TLS", GRPC_TLS),
    ("GRPC_SERVER_TLS_CERT", GRPC_TLS),
    ("GRPC_SERVER_TLS_KEY", GRPC_TLS),
    ("GRPC_CLIENT_TLS_CACERT", GRPC_CLIENT_CA),
    ("GRPC_CLIENT_TLS_SAN", GRPC_CLIENT_CA),
    ("LOG_FORMAT", "logs are text lines"),
    (
        "CONFIG_TYPE",
        "the config is read from files (the reference's FILE)",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "the service starts only with a config that loads",
    ),
    ("CONFIG_GRPC_XDS_NODE_ID", NO_XDS),
    ("CONFIG_GRPC_XDS_NODE_METADATA", NO_XDS),
    ("CONFIG_GRPC_XDS_SERVER_URL", NO_XDS),
    ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", NO_XDS),
    ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", NO_XDS),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", NO_XDS),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", NO_XDS),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", NO_XDS),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", NO_XDS),
    ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", NO_XDS),
    ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", NO_XDS),
    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", NO_XDS),
    ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", NO_XDS),
    ("XDS_CLIENT_BACKOFF_JITTER", NO_XDS),
    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", NO_XDS),
    ("USE_DOG_STATSD", METRICS),
    ("USE_DOG_STATSD_MOGRIFIERS", METRICS),
    ("USE_STATSD", METRICS),
    ("STATSD_HOST", METRICS),
    ("STATSD_PORT", METRICS),
    ("EXTRA_TAGS", METRICS),
    ("STATS_FLUSH_INTERVAL", METRICS),
    ("DISABLE_STATS", METRICS),
    ("USE_PROMETHEUS", METRICS),
    ("PROMETHEUS_ADDR", METRICS),
    ("PROMETHEUS_PATH", METRICS),
    ("PROMETHEUS_MAPPER_YAML", METRICS),
    ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", METRICS),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files whose names start with '.' are never read",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the config directory's files are polled for changes (--watch-ms)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "every key expires with its limiter's state",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "denials are remembered until their retry time by the client library's deny cache",
    ),
    (
        "BACKEND_TYPE",
        "the store is Redis (the module, or its Functions library)",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "a denied request never charges any limit here (all or nothing)",
    ),
    ("REDIS_POOL_SIZE", POOL),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", POOL),
    ("REDIS_PIPELINE_WINDOW", POOL),
    ("REDIS_PIPELINE_LIMIT", POOL),
    ("REDIS_CLUSTER_PIPELINE_PARALLELISM", POOL),
    ("REDIS_TLS_CLIENT_CERT", REDIS_TLS),
    ("REDIS_TLS_CLIENT_KEY", REDIS_TLS),
    ("REDIS_TLS_CACERT", REDIS_TLS),
    (
        "REDIS_SENTINEL_AUTH",
        "the sentinels are asked without a password",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "/readyz and /healthcheck follow the store's PING",
    ),
    (
        "REDIS_TIMEOUT",
        "one store call waits at most --timeout-ms (default 20), then the failure mode decides",
    ),
    ("REDIS_STARTUP_INITIAL_INTERVAL", STARTUP),
    ("REDIS_STARTUP_MAX_INTERVAL", STARTUP),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", STARTUP),
    ("REDIS_PERSECOND", PER_SECOND),
    ("REDIS_PERSECOND_SOCKET_TYPE", PER_SECOND),
    ("REDIS_PERSECOND_TYPE", PER_SECOND),
    ("REDIS_PERSECOND_URL", PER_SECOND),
    ("REDIS_PERSECOND_POOL_SIZE", PER_SECOND),
    ("REDIS_PERSECOND_AUTH", PER_SECOND),
    ("REDIS_PERSECOND_TLS", PER_SECOND),
    ("REDIS_PERSECOND_SENTINEL_AUTH", PER_SECOND),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", PER_SECOND),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", PER_SECOND),
    ("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", PER_SECOND),
    ("REDIS_PERSECOND_TIMEOUT", PER_SECOND),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", PER_SECOND),
    ("MEMCACHE_HOST_PORT", MEMCACHE),
    ("MEMCACHE_MAX_IDLE_CONNS", MEMCACHE),
    ("MEMCACHE_SRV", MEMCACHE),
    ("MEMCACHE_SRV_REFRESH", MEMCACHE),
    ("MEMCACHE_TLS", MEMCACHE),
    ("MEMCACHE_TLS_CLIENT_CERT", MEMCACHE),
    ("MEMCACHE_TLS_CLIENT_KEY", MEMCACHE),
    ("MEMCACHE_TLS_CACERT", MEMCACHE),
    ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", MEMCACHE),
    ("QUOTA_MODE", "quota mode is not implemented"),
    (
        "MERGE_DOMAIN_CONFIG",
        "a domain is defined in one file (two files of one domain are refused)",
    ),
    ("TRACING_ENABLED", TRACING),
    ("TRACING_SERVICE_NAME", TRACING),
    ("TRACING_SERVICE_NAMESPACE", TRACING),
    ("TRACING_SERVICE_INSTANCE_ID", TRACING),
    ("TRACING_EXPORTER_PROTOCOL", TRACING),
    ("TRACING_SAMPLING_RATE", TRACING),
];

const NO_DEBUG: &str = "there is no debug listener (/metrics and /readyz are on the HTTP listener)";
const CONNECTIONS: &str = "connections are bounded by --max-connections, --max-streams, --keepalive-ms and --request-timeout-ms";
const GRPC_TLS: &str = "gRPC is served over TLS with --grpc-tls-cert and --grpc-tls-key";
const GRPC_CLIENT_CA: &str = "client certificates are required with --grpc-tls-client-ca (mutual TLS): one its CA signed is admitted, whatever its name";
const NO_XDS: &str = "the config is not taken from an xDS server";
const METRICS: &str = "metrics are Prometheus text at GET /metrics on the HTTP listener";
const POOL: &str = "the store is one multiplexed connection, pipelined by itself";
const REDIS_TLS: &str = "rediss:// is checked against the web PKI roots; client certificates and private CAs are not supported";
const STARTUP: &str = "the service starts without the store and connects when it answers (the failure mode decides meanwhile)";
const PER_SECOND: &str = "one store holds every limit";
const MEMCACHE: &str = "there is no Memcached backend";
const TRACING: &str = "traces are not exported";

/// The reference's variables set in the environment (as `lookup` reads it) that this
/// service does not read, each with what it does instead, in the table's order.
pub fn unread_present(lookup: impl Fn(&str) -> bool) -> Vec<(&'static str, &'static str)> {
    UNREAD
        .iter()
        .filter(|(name, _)| lookup(name))
        .copied()
        .collect()
}

/// Logs, once each, the reference's variables set here that this service does not read.
pub fn log_unread() {
    for (name, instead) in unread_present(|name| std::env::var_os(name).is_some()) {
        tracing::warn!(
            "{name} is set: envoyproxy/ratelimit's setting has no counterpart here ({instead}); ignored"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn urls(spec: RedisSpec<'_>) -> Result<(Vec<String>, bool), String> {
        redis_urls(&spec)
    }

    #[test]
    fn redis_url_in_the_references_forms() {
        let spec = |url| RedisSpec {
            url,
            ..RedisSpec::default()
        };
        assert_eq!(
            urls(spec("redis:6379")),
            Ok((vec!["redis://redis:6379/".into()], false))
        );
        assert_eq!(
            urls(spec("redis://a:1/,redis://b:2/")),
            Ok((vec!["redis://a:1/".into(), "redis://b:2/".into()], false)),
            "a URL is taken as is"
        );
        assert_eq!(
            urls(RedisSpec {
                auth: Some("p@ss:w/rd"),
                tls: true,
                ..spec("cache.internal:6380")
            }),
            Ok((
                vec!["rediss://p%40ss:w%2Frd@cache.internal:6380/".into()],
                false
            )),
            "user:password, encoded"
        );
        assert_eq!(
            urls(RedisSpec {
                auth: Some("secret"),
                tls: true,
                skip_verify: true,
                ..spec("h:1")
            }),
            Ok((vec!["rediss://:secret@h:1/#insecure".into()], false))
        );
        assert_eq!(
            urls(spec("/var/run/redis.sock")),
            Ok((vec!["redis+unix:///var/run/redis.sock".into()], false)),
            "a path is a Unix socket"
        );
        assert_eq!(
            urls(RedisSpec {
                socket: Some(SocketType::Unix),
                auth: Some("u:p w"),
                ..spec("run/r.sock")
            }),
            Ok((
                vec!["redis+unix://run/r.sock?pass=p%20w&user=u".into()],
                false
            ))
        );
        assert_eq!(
            urls(RedisSpec {
                kind: Some(RedisType::Cluster),
                ..spec("n1:7000, n2:7001")
            }),
            Ok((
                vec!["redis://n1:7000/".into(), "redis://n2:7001/".into()],
                true
            ))
        );
        assert_eq!(
            urls(RedisSpec {
                kind: Some(RedisType::Sentinel),
                ..spec("mymaster,s1:26379,s2:26379")
            }),
            Ok((
                vec!["redis+sentinel://s1:26379,s2:26379/mymaster".into()],
                false
            ))
        );
        assert!(
            urls(RedisSpec {
                kind: Some(RedisType::Sentinel),
                ..spec("mymaster")
            })
            .unwrap_err()
            .contains("no sentinel")
        );
        assert!(
            urls(spec("a:1,b:2"))
                .unwrap_err()
                .contains("REDIS_TYPE=cluster")
        );
    }

    #[test]
    fn listeners_and_the_runtime_directory_as_the_reference_lays_them_out() {
        assert_eq!(
            listen_address(None, Some(9000), 8081).unwrap(),
            "0.0.0.0:9000".parse().unwrap()
        );
        assert_eq!(
            listen_address(Some("127.0.0.1"), None, 8081).unwrap(),
            "127.0.0.1:8081".parse().unwrap()
        );
        assert_eq!(
            listen_address(Some("[::1]"), Some(1), 8081).unwrap(),
            "[::1]:1".parse::<std::net::SocketAddr>().unwrap()
        );
        assert!(matches!(
            listen_address(Some("no such host.invalid"), None, 1),
            Err(AddressError::Unresolved { .. })
        ));
        assert_eq!(
            runtime_dir(
                Some(Path::new("runtime/current")),
                Some(Path::new("ratelimit")),
                None
            ),
            PathBuf::from("runtime/current/ratelimit/config")
        );
        assert_eq!(
            runtime_dir(None, None, Some(Path::new("rules"))),
            PathBuf::from("/srv/runtime_data/current/rules")
        );
    }

    #[test]
    fn only_the_variables_present_are_named_each_once() {
        let present = ["USE_STATSD", "REDIS_POOL_SIZE", "PATH", "REDIS_URL"];
        let named = unread_present(|name| present.contains(&name));
        assert_eq!(
            named.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            ["USE_STATSD", "REDIS_POOL_SIZE"],
            "REDIS_URL is read; PATH is not the reference's"
        );
        let mut names: Vec<&str> = UNREAD.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), UNREAD.len(), "each variable once");
    }
}
