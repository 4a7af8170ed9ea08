//! The service under test: a `redis-ratelimit-server` process on ports it picks itself
//! (`127.0.0.1:0`, read back from its log), a config directory of its own, killed and
//! cleaned up on drop even when a test fails; a gRPC client (envoy-types) and a small HTTP
//! client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_testkit::server::wait_until;
use tonic::transport::Channel;

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rls-test-{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, text: &str) {
        // Written beside, then renamed: the watcher never reads half a file.
        let partial = self.0.join(format!(".{name}.partial"));
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, self.0.join(name)).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary Cargo built for these tests, or `RLS_SERVER_BINARY` (another build: an older
/// one, to see a test fail before the fix it comes with).
fn binary() -> PathBuf {
    std::env::var_os("RLS_SERVER_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_redis-ratelimit-server")),
        PathBuf::from,
    )
}

/// A running service.
pub struct Service {
    child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    log: Arc<Mutex<String>>,
    pub config: TempDir,
}

impl Service {
    /// Starts the service on `redis` with `config` files (name, text) and `extra` flags.
    pub fn start(redis: &str, config: &[(&str, &str)], extra: &[&str]) -> Service {
        let dir = TempDir::new("config");
        for (name, text) in config {
            dir.write(name, text);
        }
        Self::start_in(redis, dir, extra)
    }

    pub fn start_in(redis: &str, config: TempDir, extra: &[&str]) -> Service {
        let mut args: Vec<String> = ["--redis", redis, "--config"]
            .iter()
            .map(|arg| arg.to_string())
            .collect();
        args.push(config.0.to_string_lossy().into_owned());
        args.extend(
            [
                "--grpc-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ]
            .map(String::from),
        );
        args.extend(extra.iter().map(|arg| arg.to_string()));
        Self::spawn(&args, &[], config)
    }

    /// Starts the service with only `args` (the watch period and timeout of the other
    /// tests added) and the environment variables `env`, `config` its directory to clean
    /// up: for the settings the reference reads from the environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], config: TempDir) -> Service {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        Self::spawn(&args, env, config)
    }

    fn spawn(args: &[String], env: &[(&str, &str)], config: TempDir) -> Service {
        let mut command = Command::new(binary());
        for name in REFERENCE_VARIABLES {
            // The test machine's environment never steers a service under test.
            command.env_remove(name);
        }
        let mut child = command
            .args(["--watch-ms", "100", "--timeout-ms", "1000"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut service = Service {
            child,
            grpc: "0.0.0.0:0".parse().unwrap(),
            http: "0.0.0.0:0".parse().unwrap(),
            log,
            config,
        };
        let started = wait_until(Duration::from_secs(30), || {
            let log = service.log();
            let grpc = bound(&log, "gRPC (Envoy RLS v3) on ");
            let http = bound(&log, "HTTP API on ");
            if let (Some(grpc), Some(http)) = (grpc, http) {
                service.grpc = grpc;
                service.http = http;
                true
            } else {
                false
            }
        });
        assert!(
            started,
            "the service did not start; log:\n{}",
            service.log()
        );
        service
    }

    /// Starts a service expected to refuse to start; returns its log.
    pub fn fail_to_start(redis: &str, config: &[(&str, &str)]) -> String {
        let dir = TempDir::new("config");
        for (name, text) in config {
            dir.write(name, text);
        }
        let mut command = Command::new(binary());
        for name in REFERENCE_VARIABLES {
            command.env_remove(name);
        }
        let mut child = command
            .args(["--redis", redis, "--config"])
            .arg(&dir.0)
            .args([
                "--grpc-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded: a service that starts after all is stopped, and the test fails.
        let mut status = None;
        let stopped = wait_until(Duration::from_secs(20), || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        let mut log = String::new();
        if !stopped {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut log);
        }
        assert!(
            stopped && status.is_some_and(|status| !status.success()),
            "the service started; log:\n{log}"
        );
        log
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log has `needle` `count` times.
    pub fn wait_log(&self, needle: &str, count: usize) -> bool {
        wait_until(Duration::from_secs(20), || {
            self.log().matches(needle).count() >= count
        })
    }

    pub async fn grpc(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// One HTTP/1.1 request; returns the status, the headers (lowercase) and the body.
    pub fn http(&self, method: &str, path: &str, body: &str, extra: &[(&str, &str)]) -> Reply {
        http(self.http, method, path, body, extra)
    }

    pub fn check_json(&self, body: &str) -> (u16, serde_json::Value) {
        let reply = self.http("POST", "/v1/check", body, &[]);
        let value = serde_json::from_str(&reply.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", reply.body));
        (reply.status, value)
    }

    /// SIGTERM, then waits for the exit (a graceful stop).
    pub fn terminate(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address a listener logged it is bound to (an unspecified address reached on
/// loopback).
fn bound(log: &str, prefix: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|line| line.contains(prefix))?;
    let rest = line.split(prefix).nth(1)?;
    let mut address: SocketAddr = rest.split_whitespace().next()?.parse().ok()?;
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Some(address)
}

/// The environment variables of envoyproxy/ratelimit the service reads (or logs).
pub const REFERENCE_VARIABLES: &[&str] = &[
    "REDIS_URL",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "GRPC_HOST",
    "GRPC_PORT",
    "HOST",
    "PORT",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "SHADOW_MODE",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "CACHE_KEY_PREFIX",
    "LOG_LEVEL",
    "RESPONSE_DYNAMIC_METADATA",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "USE_STATSD",
    "REDIS_POOL_SIZE",
];

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

pub fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> Reply {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in extra {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// A descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A request of `descriptors` in `domain`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// Every key's TTL in milliseconds (`-1`: no expiry).
pub fn ttls(con: &mut redis::Connection) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.into_iter()
        .map(|key| {
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(con).unwrap();
            (key, ttl)
        })
        .collect()
}
