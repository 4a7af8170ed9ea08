//! The service under test: a `redis-ratelimit-server` process on ports it picks itself
//! (`127.0.0.1:0`, read back from its log), a config directory of its own, killed and
//! cleaned up on drop even when a test fails; a gRPC client (envoy-types) and a small HTTP
//! client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_testkit::server::{Server, wait_until};
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

/// The binary Cargo built for these tests, or the one `RLS_SERVER_BINARY` names (another
/// build, an earlier release say: to see a test fail before the fix it comes with).
fn binary() -> PathBuf {
    std::env::var_os("RLS_SERVER_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_redis-ratelimit-server")),
        PathBuf::from,
    )
}

/// The command running the service, with at most `open_files` file descriptors if given
/// (`prlimit`, which execs the service: its pid is the service's). The test machine's
/// environment never steers it: the reference's variables are removed.
fn command(open_files: Option<u64>) -> Command {
    let mut command = match open_files {
        None => Command::new(binary()),
        Some(limit) => {
            let mut command = Command::new("prlimit");
            command
                .arg(format!("--nofile={limit}:{limit}"))
                .arg("--")
                .arg(binary());
            command
        }
    };
    for name in REFERENCE_VARIABLES {
        command.env_remove(name);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// The flags of a service on `redis` with the config directory `config`, both listeners on
/// ports they pick, then `extra`.
fn listening(redis: &str, config: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["--redis", redis, "--config"]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    args.push(config.to_string_lossy().into_owned());
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
    args
}

/// A config directory holding `config` (name, text).
fn config_dir(config: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new("config");
    for (name, text) in config {
        dir.write(name, text);
    }
    dir
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
        Self::start_in(redis, config_dir(config), extra)
    }

    pub fn start_in(redis: &str, config: TempDir, extra: &[&str]) -> Service {
        let args = listening(redis, &config.0, extra);
        Self::spawn(&args, &[], config, None)
    }

    /// Starts the service with at most `open_files` file descriptors.
    pub fn start_limited(
        redis: &str,
        config: &[(&str, &str)],
        extra: &[&str],
        open_files: u64,
    ) -> Service {
        let dir = config_dir(config);
        let args = listening(redis, &dir.0, extra);
        Self::spawn(&args, &[], dir, Some(open_files))
    }

    /// Starts the service with only `args` (the watch period and timeout of the other
    /// tests added) and the environment variables `env`, `config` its directory to clean
    /// up: for the settings the reference reads from the environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], config: TempDir) -> Service {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        Self::spawn(&args, env, config, None)
    }

    fn spawn(
        args: &[String],
        env: &[(&str, &str)],
        config: TempDir,
        open_files: Option<u64>,
    ) -> Service {
        let mut child = command(open_files)
            .args(["--watch-ms", "100", "--timeout-ms", "1000"])
            .args(args)
            .envs(env.iter().copied())
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
            // "gRPC (Envoy RLS v3) on ", or "(Envoy RLS v3 and RLQS)" with --rlqs.
            let grpc = bound(&log, "gRPC (Envoy RLS v3) on ")
                .or_else(|| bound(&log, "gRPC (Envoy RLS v3 and RLQS) on "));
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
        let (status, log) = Self::exit_at_start(redis, config, &[]);
        assert!(
            !status.success(),
            "the service exited 0 at start; log:\n{log}"
        );
        log
    }

    /// Runs a service expected to exit at start: its exit status and log. Bounded: a
    /// service still running after 20 s started after all, and is stopped, failing the test.
    pub fn exit_at_start(
        redis: &str,
        config: &[(&str, &str)],
        extra: &[&str],
    ) -> (std::process::ExitStatus, String) {
        let dir = config_dir(config);
        let mut child = command(None)
            .args(listening(redis, &dir.0, extra))
            .spawn()
            .unwrap();
        // Read as it comes, so a service writing much is never blocked on a full pipe.
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut log = String::new();
            let _ = stderr.read_to_string(&mut log);
            log
        });
        let mut status = None;
        let exited = wait_until(Duration::from_secs(20), || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        if !exited {
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = reader.join().unwrap();
        match status {
            Some(status) => (status, log),
            None => panic!("the service started (stopped after 20 s); log:\n{log}"),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
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

    /// SIGKILL, then reaps it: a crash (nothing said to its clients); its log stays readable.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the exit (a graceful stop).
    pub fn terminate(&mut self) -> bool {
        self.terminate_within(Duration::from_secs(20))
            .is_some_and(|(success, _)| success)
    }

    /// SIGTERM, then waits up to `timeout` for the exit: whether it succeeded and when.
    pub fn terminate_within(&mut self, timeout: Duration) -> Option<(bool, Duration)> {
        let sent = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        while sent.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((status.success(), sent.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// The operator console's address (`--admin-listen 127.0.0.1:0` given), from its log.
    pub fn admin(&self) -> SocketAddr {
        let mut address = None;
        let found = wait_until(Duration::from_secs(10), || {
            address = bound(&self.log(), "operator console on ");
            address.is_some()
        });
        assert!(found, "the console did not start; log:\n{}", self.log());
        address.unwrap()
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
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in extra {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    exchange(address, &request)
}

/// Sends one request as written (`Connection: close`) and reads the reply.
pub fn exchange(address: SocketAddr, request: &str) -> Reply {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
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

/// The URL of a test Redis.
pub fn redis_url(redis: &Server) -> String {
    format!("redis://127.0.0.1:{}/", redis.port)
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

/// A self-signed certificate for 127.0.0.1 (openssl), in `dir`: (cert, key).
pub fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|error| {
            panic!("openssl is needed to make the TLS test's certificate: {error}")
        });
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (cert, key)
}

/// Redis with the module, listening over TLS too (returned: its TLS port) with `cert` as its
/// certificate and CA, not asking clients for one; `extra` arguments after. The plain port
/// stays for the test kit.
pub fn tls_redis(cert: &Path, key: &Path, extra: &[&str]) -> (Server, u16) {
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let port = tls_port.to_string();
    let mut args = vec![
        "--tls-port",
        &port,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        cert,
        "--tls-auth-clients",
        "no",
    ];
    args.extend_from_slice(extra);
    (Server::start(&args), tls_port)
}

/// Runs a future to completion on a fresh single-threaded runtime of its own thread (from
/// a synchronous test, or inside `wait_until`'s closure).
pub fn on_runtime<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .unwrap()
}
