//! The service's benchmark (`make bench-service`): checks per second and latency through the
//! service (gRPC and HTTP), what each check costs Redis (main-thread CPU, calls) with and
//! without leases, and side by side on the same Redis the reference's pattern
//! (envoyproxy/ratelimit's `fixed_cache_impl.go`: a pipeline of `INCRBY` + `EXPIRE` per
//! descriptor); then 16 clients racing over a request of three descriptors, one of which
//! denies: what each approach admits and what the denied requests charged the others.
//!
//! Starts its own `redis-server` with the release module (`RL_MODULE_PATH`) and the release
//! service binary beside this example; writes a Markdown report.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-server --example bench-service -- \
//!     [--out target/bench/service.md] [--requests 40000]
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_ratelimit_testkit::helpers::commandstat_calls_of;
use redis_ratelimit_testkit::server::{Server, info_field, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFIG: &str = r#"
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100000000, name: per-user}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100000000, name: per-tenant, algorithm: sliding_window}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 100000000, name: per-route, algorithm: token_bucket}
  - key: race_user
    rate_limit: {unit: day, requests_per_unit: 1000, name: race-user}
  - key: race_tenant
    rate_limit: {unit: day, requests_per_unit: 1000, name: race-tenant}
  - key: race_route
    rate_limit: {unit: day, requests_per_unit: 40, name: race-route}
"#;
const CLIENTS: usize = 16;
const USERS: usize = 1000;

struct Service {
    child: Child,
    grpc: SocketAddr,
    http: SocketAddr,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_service(redis: &Server, config: &std::path::Path, extra: &[&str]) -> Service {
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|examples| examples.parent())
        .unwrap()
        .join("redis-ratelimit-server");
    assert!(
        binary.exists(),
        "{} is missing: cargo build --release -p redis-ratelimit-server",
        binary.display()
    );
    let mut child = Command::new(binary)
        .args([
            "--redis",
            &format!("redis://127.0.0.1:{}/", redis.port),
            "--config",
        ])
        .arg(config)
        .args([
            "--grpc-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--timeout-ms", "1000", "--watch-ms", "0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let find = |prefix: &str| -> Option<SocketAddr> {
        let log = log.lock().unwrap();
        let line = log.lines().find(|line| line.contains(prefix))?;
        line.split(prefix)
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    assert!(wait_until(Duration::from_secs(20), || {
        find("gRPC (Envoy RLS v3) on ").is_some() && find("HTTP API on ").is_some()
    }));
    Service {
        child,
        grpc: find("gRPC (Envoy RLS v3) on ").unwrap(),
        http: find("HTTP API on ").unwrap(),
    }
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
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

/// Users of the runs with leases: few enough that each lease is spent within its lifetime.
const HOT_USERS: usize = 16;

/// Request `i`: one descriptor (a user of `users`), or three (user, tenant, route).
fn request(i: usize, three: bool, users: usize) -> RateLimitRequest {
    let user = format!("u{}", i % users);
    let mut descriptors = vec![descriptor(&[("user", &user)])];
    if three {
        let tenant = format!("t{}", i % 10);
        descriptors.push(descriptor(&[("tenant", &tenant)]));
        descriptors.push(descriptor(&[("route", "search")]));
    }
    RateLimitRequest {
        domain: "bench".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn json_request(i: usize, three: bool) -> String {
    let mut descriptors = vec![format!(
        r#"{{"entries":[{{"key":"user","value":"u{}"}}]}}"#,
        i % USERS
    )];
    if three {
        descriptors.push(format!(
            r#"{{"entries":[{{"key":"tenant","value":"t{}"}}]}}"#,
            i % 10
        ));
        descriptors.push(r#"{"entries":[{"key":"route","value":"search"}]}"#.to_string());
    }
    format!(
        r#"{{"domain":"bench","descriptors":[{}]}}"#,
        descriptors.join(",")
    )
}

/// Commands of the rate-limit paths so far (not PING, INFO), and `INCRBY`+`EXPIRE` pipelines
/// count one command each (the reference's round trip carries 2 per descriptor).
fn redis_calls(server: &Server) -> u64 {
    let commands = [
        "rl.multi",
        "rl.fixed",
        "rl.sliding",
        "rl.tokenbucket",
        "rl.refund",
        "incrby",
        "expire",
        "get",
    ];
    commandstat_calls_of(&mut server.conn(), &commands)
}

struct Run {
    label: String,
    checks: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cpu_ns: u64,
    calls: u64,
    round_trips_per_check: Option<f64>,
}

impl Run {
    fn row(&self) -> String {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let q = |q: f64| {
            sorted
                .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
                .map_or("–".to_string(), |d| {
                    format!("{:.0}", d.as_secs_f64() * 1e6)
                })
        };
        let per_check = |value: u64| value as f64 / self.checks as f64;
        format!(
            "| {} | {:.0} | {} | {} | {:.2} | {:.2} | {} |",
            self.label,
            self.checks as f64 / self.elapsed.as_secs_f64(),
            q(0.5),
            q(0.99),
            per_check(self.cpu_ns) / 1e3,
            per_check(self.calls),
            self.round_trips_per_check.map_or_else(
                || format!("{:.2}", per_check(self.calls)),
                |trips| format!("{trips:.2}")
            ),
        )
    }
}

/// Redis's CPU and calls, and the clock, at the start of a run.
struct Measure {
    cpu_ns: u64,
    calls: u64,
    started: Instant,
}

impl Measure {
    fn start(redis: &Server) -> Self {
        Self {
            cpu_ns: redis.main_thread_cpu_ns(),
            calls: redis_calls(redis),
            started: Instant::now(),
        }
    }

    /// Waits for the clients' `tasks` (each returns its latencies) and reads the run.
    async fn finish(
        self,
        label: &str,
        redis: &Server,
        requests: usize,
        tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
        round_trips_per_check: Option<f64>,
    ) -> Run {
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.unwrap());
        }
        Run {
            label: label.into(),
            checks: requests,
            elapsed: self.started.elapsed(),
            latencies,
            cpu_ns: redis.main_thread_cpu_ns() - self.cpu_ns,
            calls: redis_calls(redis) - self.calls,
            round_trips_per_check,
        }
    }
}

/// `requests` checks from CLIENTS concurrent gRPC clients.
async fn grpc_run(
    label: &str,
    redis: &Server,
    service: &Service,
    requests: usize,
    three: bool,
    users: usize,
) -> Run {
    let measure = Measure::start(redis);
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let mut grpc = RateLimitServiceClient::connect(format!("http://{}", service.grpc))
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in (client..requests).step_by(CLIENTS) {
                let sent = Instant::now();
                let response = grpc
                    .should_rate_limit(request(i, three, users))
                    .await
                    .unwrap()
                    .into_inner();
                latencies.push(sent.elapsed());
                assert_eq!(response.overall_code, Code::Ok as i32);
            }
            latencies
        }));
    }
    measure.finish(label, redis, requests, tasks, None).await
}

/// `requests` checks from CLIENTS concurrent HTTP/1.1 keep-alive connections.
async fn http_run(
    label: &str,
    redis: &Server,
    service: &Service,
    requests: usize,
    three: bool,
) -> Run {
    let measure = Measure::start(redis);
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let address = service.http;
        tasks.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut latencies = Vec::new();
            let mut buffer = Vec::with_capacity(4096);
            for i in (client..requests).step_by(CLIENTS) {
                let body = json_request(i, three);
                let head = format!(
                    "POST /v1/check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let sent = Instant::now();
                stream.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
                buffer.clear();
                // Read the head, then the body by its length.
                let (head_end, length) = loop {
                    let mut chunk = [0u8; 4096];
                    let read = stream.read(&mut chunk).await.unwrap();
                    assert!(read > 0, "connection closed");
                    buffer.extend_from_slice(&chunk[..read]);
                    if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|line| line.strip_prefix("content-length:"))
                            .unwrap()
                            .trim()
                            .parse()
                            .unwrap();
                        break (end + 4, length);
                    }
                };
                while buffer.len() < head_end + length {
                    let mut chunk = [0u8; 4096];
                    let read = stream.read(&mut chunk).await.unwrap();
                    assert!(read > 0);
                    buffer.extend_from_slice(&chunk[..read]);
                }
                latencies.push(sent.elapsed());
                assert!(buffer.windows(14).any(|w| w == b"\"allowed\":true"));
            }
            latencies
        }));
    }
    measure.finish(label, redis, requests, tasks, None).await
}

/// The reference's Redis pattern, straight from CLIENTS connections: per check, one
/// pipeline of `INCRBY key hits` + `EXPIRE key ttl` per descriptor (window-start keys).
async fn reference_run(label: &str, redis: &Server, requests: usize, three: bool) -> Run {
    let measure = Measure::start(redis);
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let mut con = redis
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in (client..requests).step_by(CLIENTS) {
                let window = 1_700_000_000u64 / 86_400 * 86_400;
                let mut keys = vec![format!("ref_bench_user_u{}_{window}", i % USERS)];
                if three {
                    keys.push(format!("ref_bench_tenant_t{}_{window}", i % 10));
                    keys.push(format!("ref_bench_route_search_{window}"));
                }
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("INCRBY")
                        .arg(key)
                        .arg(1)
                        .cmd("EXPIRE")
                        .arg(key)
                        .arg(86_400)
                        .ignore();
                }
                let sent = Instant::now();
                let counts: Vec<u64> = pipe.query_async(&mut con).await.unwrap();
                latencies.push(sent.elapsed());
                assert!(counts.iter().all(|count| *count <= 100_000_000));
            }
            latencies
        }));
    }
    measure
        .finish(label, redis, requests, tasks, Some(1.0))
        .await
}

/// 16 clients × 10 requests of [user, tenant, route] where the route (40 a day) denies:
/// (admitted, units the denied requests charged the user and tenant limits).
async fn race_service(service: &Service) -> (u64, u64) {
    let three = || RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![
            descriptor(&[("race_user", "u")]),
            descriptor(&[("race_tenant", "t")]),
            descriptor(&[("race_route", "r")]),
        ],
        hits_addend: 0,
    };
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let mut grpc = RateLimitServiceClient::connect(format!("http://{}", service.grpc))
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                let response = grpc.should_rate_limit(three()).await.unwrap().into_inner();
                admitted += u64::from(response.overall_code == Code::Ok as i32);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    // What the user and tenant limits were charged: their quota minus what is left (hits 0
    // asks without consuming).
    let mut grpc = RateLimitServiceClient::connect(format!("http://{}", service.grpc))
        .await
        .unwrap();
    let mut charged = 0;
    for key in ["race_user", "race_tenant"] {
        let mut probe = descriptor(&[(key, if key == "race_user" { "u" } else { "t" })]);
        probe.hits_addend = Some(UInt64Value { value: 0 });
        let response = grpc
            .should_rate_limit(RateLimitRequest {
                domain: "bench".into(),
                descriptors: vec![probe],
                hits_addend: 0,
            })
            .await
            .unwrap()
            .into_inner();
        charged += 1000 - u64::from(response.statuses[0].limit_remaining);
    }
    (admitted, charged.saturating_sub(2 * admitted))
}

/// The same race with the reference's pattern: admitted when every `INCRBY` result is within
/// its limit; every descriptor is charged either way.
async fn race_reference(redis: &Server) -> (u64, u64) {
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let mut con = redis
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                let counts: (u64, u64, u64) = redis::pipe()
                    .cmd("INCRBY")
                    .arg("ref_race_user_u")
                    .arg(1)
                    .cmd("EXPIRE")
                    .arg("ref_race_user_u")
                    .arg(86_400)
                    .ignore()
                    .cmd("INCRBY")
                    .arg("ref_race_tenant_t")
                    .arg(1)
                    .cmd("EXPIRE")
                    .arg("ref_race_tenant_t")
                    .arg(86_400)
                    .ignore()
                    .cmd("INCRBY")
                    .arg("ref_race_route_r")
                    .arg(1)
                    .cmd("EXPIRE")
                    .arg("ref_race_route_r")
                    .arg(86_400)
                    .ignore()
                    .query_async(&mut con)
                    .await
                    .unwrap();
                admitted += u64::from(counts.0 <= 1000 && counts.1 <= 1000 && counts.2 <= 40);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let mut con = redis.conn();
    let user: u64 = redis::cmd("GET")
        .arg("ref_race_user_u")
        .query(&mut con)
        .unwrap();
    let tenant: u64 = redis::cmd("GET")
        .arg("ref_race_tenant_t")
        .query(&mut con)
        .unwrap();
    (admitted, (user + tenant).saturating_sub(2 * admitted))
}

#[tokio::main]
async fn main() {
    let mut out = PathBuf::from("target/bench/service.md");
    let mut requests = 40_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().expect("a value");
        match flag.as_str() {
            "--out" => out = PathBuf::from(value),
            "--requests" => requests = value.parse().expect("a number"),
            other => panic!("unknown flag {other}"),
        }
    }
    let config = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("bench.yaml"), CONFIG).unwrap();
    let redis = Server::start(&[]);
    let plain = start_service(&redis, &config, &[]);
    let leased = start_service(&redis, &config, &["--lease", "10"]);
    let warm = requests / 10;
    grpc_run("warm-up", &redis, &plain, warm, true, USERS).await;
    grpc_run("warm-up", &redis, &leased, warm, true, HOT_USERS).await;
    reference_run("warm-up", &redis, warm, true).await;

    let mut runs = Vec::new();
    eprintln!("bench-service: gRPC…");
    let grpc_runs = [
        ("gRPC, 1 descriptor", &plain, false, USERS),
        ("gRPC, 3 descriptors (one RL.MULTI)", &plain, true, USERS),
        ("gRPC, 3 descriptors, 16 users", &plain, true, HOT_USERS),
        (
            "gRPC, 3 descriptors, 16 users, `--lease 10`",
            &leased,
            true,
            HOT_USERS,
        ),
    ];
    for (label, service, three, users) in grpc_runs {
        runs.push(grpc_run(label, &redis, service, requests, three, users).await);
    }
    eprintln!("bench-service: HTTP…");
    runs.push(http_run("HTTP, 1 descriptor", &redis, &plain, requests, false).await);
    runs.push(http_run("HTTP, 3 descriptors", &redis, &plain, requests, true).await);
    eprintln!("bench-service: the reference's pattern…");
    runs.push(
        reference_run(
            "reference pattern, 1 descriptor (INCRBY+EXPIRE, pipelined)",
            &redis,
            requests,
            false,
        )
        .await,
    );
    runs.push(reference_run("reference pattern, 3 descriptors", &redis, requests, true).await);
    eprintln!("bench-service: the race…");
    let (ours_admitted, ours_charged) = race_service(&plain).await;
    let (reference_admitted, reference_charged) = race_reference(&redis).await;

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut report = String::new();
    writeln!(report, "# The rate-limit service: benchmark\n").unwrap();
    writeln!(
        report,
        "`make bench-service` ({requests} checks per run, {CLIENTS} concurrent clients, {USERS} users unless said; one \
         redis-server {} with the release module, the release service on loopback; load average at the end: {}). \
         Redis CPU is its main thread's on-CPU time (schedstat) per check; calls are rate-limit \
         commands per check (the reference's pipeline is one round trip of 2 per descriptor). \
         The reference rows are its Redis pattern sent by this benchmark straight to Redis, with \
         no service hop, on the same 2-core machine that also runs the service and the clients: \
         their checks/s and latency are Redis's alone; compare the Redis columns.\n",
        info_field(&mut redis.conn(), "server", "redis_version").unwrap_or_default(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
    .unwrap();
    writeln!(report, "| path | checks/s | p50 µs | p99 µs | Redis CPU µs/check | Redis commands/check | round trips/check |").unwrap();
    writeln!(report, "|---|---:|---:|---:|---:|---:|---:|").unwrap();
    for run in &runs {
        writeln!(report, "{}", run.row()).unwrap();
    }
    writeln!(
        report,
        "\n**Race**: {CLIENTS} clients × 10 requests of three descriptors (user 1000/day, tenant 1000/day, \
         route 40/day: the route denies).\n\n\
         | approach | admitted (bound 40) | units the denied requests charged the user and tenant limits |\n|---|---:|---:|\n\
         | redis-ratelimit-server | {ours_admitted} | {ours_charged} |\n\
         | reference pattern (INCRBY + EXPIRE per descriptor) | {reference_admitted} | {reference_charged} |\n"
    )
    .unwrap();
    writeln!(
        report,
        "Both admit exactly the route's 40: an `INCRBY` counter is exact. The difference is what a \
         denial costs: the reference increments every descriptor of a request before knowing the \
         outcome, so each of the {} denied requests also took a unit from the user's and the \
         tenant's limits (which other routes share); the service decides all descriptors in one \
         `RL.MULTI` and charges nothing on a denial.",
        CLIENTS * 10 - reference_admitted as usize
    )
    .unwrap();
    print!("{report}");
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&out, &report).unwrap();
    eprintln!("bench-service: wrote {}", out.display());
    drop(plain);
    drop(leased);
    let _ = std::fs::remove_dir_all(&config);
}
