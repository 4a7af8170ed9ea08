//! The service's benchmark (`make bench-service`): the service and the reference's Redis
//! pattern (envoyproxy/ratelimit's `fixed_cache_impl.go`: a pipeline of `INCRBY key 1` +
//! `EXPIRE key ttl` per descriptor) driven side by side at the same offered rates, open loop
//! (checks are sent on a schedule, whether or not earlier ones have been answered), on the
//! same Redis in the same run: achieved checks/s, p50/p99, what each check costs Redis
//! (main-thread CPU, commands, reads) and the service process (its CPU); then 16 clients
//! racing over a request of three descriptors, one of which denies: what each approach
//! admits and what the denied requests charged the others; then, through a real Envoy, the
//! latency the RLS filter adds (`envoy.rs`) and RLS against RLQS at the same offered rates
//! (`rlqs.rs`).
//!
//! Starts its own `redis-server` with the release module (`RL_MODULE_PATH`) and the release
//! service binary beside this example; writes a Markdown report.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-server --example bench-service -- \
//!     [--out target/bench/service.md] [--seconds 3] [--repeats 3] [--rates 2000,10000,max] \
//!     [--envoy-rlqs on] [--envoy-rates 300,1500] [--envoy-seconds 10]
//! ```
//!
//! Only the RLS-vs-RLQS section: `--paths none --extras off --envoy-rlqs on`.
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
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Set (to the address to listen on), this example is the null RLS instead of the benchmark.
const NULL_RLS_ENV: &str = "RL_BENCH_NULL_RLS_LISTEN";

/// Set too, the null RLS has none of the service's per-request layers (path `nullbare`).
const NULL_RLS_BARE_ENV: &str = "RL_BENCH_NULL_RLS_BARE";

mod envoy;
mod http;
mod load;
mod null_rls;
mod rlqs;
mod rlqs_report;

struct Service {
    child: Child,
    grpc: SocketAddr,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release service binary beside this example.
fn service_binary() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|examples| examples.parent())
        .unwrap()
        .join("redis-ratelimit-server")
}

fn start_service(
    binary: &std::path::Path,
    redis: &Server,
    config: &std::path::Path,
    extra: &[String],
) -> Service {
    // `NAME=VALUE` words set the environment (e.g. TOKIO_WORKER_THREADS=1), the rest are flags.
    let (env, extra): (Vec<&String>, Vec<&String>) = extra.iter().partition(|word| {
        word.split_once('=')
            .is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    });
    assert!(
        binary.exists(),
        "{} is missing: cargo build --release -p redis-ratelimit-server",
        binary.display()
    );
    let child = Command::new(binary)
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
        .envs(env.iter().filter_map(|word| word.split_once('=')))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listeners(child, true)
}

/// The null RLS: this example again, in its hidden mode ([`NULL_RLS_ENV`]).
fn start_null_rls(workers: Option<usize>, bare: bool) -> Service {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(workers) = workers {
        command.env("TOKIO_WORKER_THREADS", workers.to_string());
    }
    if bare {
        command.env(NULL_RLS_BARE_ENV, "1");
    }
    let child = command
        .env(NULL_RLS_ENV, "127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listeners(child, false)
}

/// Waits for the process to log its gRPC listener (and the HTTP one, with `http`).
fn wait_for_listeners(mut child: Child, http: bool) -> Service {
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    // `line` is what starts the listener's line; its address follows `on`.
    let find = |line: &str| -> Option<SocketAddr> {
        let log = log.lock().unwrap();
        let found = log.lines().find(|text| text.contains(line))?;
        found
            .split(line)
            .nth(1)?
            .split(" on ")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    // "gRPC (Envoy RLS v3) on …", or "gRPC (Envoy RLS v3 and RLQS) on …" with `--rlqs`.
    let grpc = "gRPC (Envoy RLS v3";
    assert!(wait_until(Duration::from_secs(20), || {
        find(grpc).is_some() && (!http || find("HTTP API").is_some())
    }));
    Service {
        child,
        grpc: find(grpc).unwrap(),
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

/// The service variants each rate is run on (label, extra flags): as deployed (concurrent
/// checks batched), and each check its own write to Redis, as before batching.
const SERVICES: &[(&str, &str, &[&str])] = &[
    ("service", "service", &[]),
    (
        "unbatched",
        "service, `--batch-window-us 0`",
        &["--batch-window-us", "0"],
    ),
];

/// The null RLS's row.
const NULL_LABEL: &str = "null RLS (same gRPC stack, answers OK at once, no Redis)";

/// What a check costs, from the counters this benchmark reads before and after a run.
#[derive(Clone, Copy, Default)]
struct Counters {
    redis_cpu_ns: u64,
    redis_commands: u64,
    redis_reads: u64,
    service_cpu_ns: u64,
}

impl Counters {
    fn read(redis: &Redis, service: Option<u32>) -> Self {
        Self {
            redis_cpu_ns: redis.server.main_thread_cpu_ns(),
            redis_commands: redis_commands(&redis.server),
            redis_reads: proc_reads(redis.pid),
            service_cpu_ns: service.map_or(0, process_cpu_ns),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            redis_cpu_ns: self.redis_cpu_ns.saturating_sub(before.redis_cpu_ns),
            redis_commands: self.redis_commands.saturating_sub(before.redis_commands),
            redis_reads: self.redis_reads.saturating_sub(before.redis_reads),
            service_cpu_ns: self.service_cpu_ns.saturating_sub(before.service_cpu_ns),
        }
    }
}

/// The Redis server and its process id (for `/proc`).
struct Redis {
    server: Server,
    pid: u32,
}

/// Commands of the rate-limit paths (not PING, INFO): `RL.*` and the reference's `INCRBY` and
/// `EXPIRE`.
fn redis_commands(server: &Server) -> u64 {
    let commands = [
        "rl.multi",
        "rl.batch",
        "rl.fixed",
        "rl.sliding",
        "rl.tokenbucket",
        "rl.peek",
        "rl.refund",
        "incrby",
        "expire",
    ];
    commandstat_calls_of(&mut server.conn(), &commands)
}

/// The read system calls a process made (`/proc/<pid>/io`'s `syscr`): for Redis, about one
/// per client connection that had something to read at each wake-up, so its round trips.
fn proc_reads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("syscr:"))
                .and_then(|value| value.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The on-CPU time of every thread of a process (`/proc/<pid>/task/*/schedstat`), ns.
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Which path a run drives.
#[derive(Clone)]
enum Path {
    /// The service over gRPC (its process id, for its CPU).
    Service {
        label: String,
        clients: Vec<RateLimitServiceClient<tonic::transport::Channel>>,
        pid: u32,
        /// False for the null RLS, which answers without Redis.
        redis: bool,
    },
    /// The reference's pattern straight to Redis.
    Reference {
        connections: Vec<redis::aio::MultiplexedConnection>,
    },
}

impl Path {
    fn label(&self) -> &str {
        match self {
            Path::Service { label, .. } => label,
            Path::Reference { .. } => "reference pattern (INCRBY + EXPIRE per descriptor)",
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Path::Service { pid, .. } => Some(*pid),
            Path::Reference { .. } => None,
        }
    }

    /// A path of the service that decides on Redis (not the reference, not the null RLS).
    fn is_real_service(&self) -> bool {
        matches!(self, Path::Service { redis: true, .. })
    }

    /// One check (`i`-th of the run), answered or failed.
    async fn check(&self, i: usize, three: bool) -> bool {
        match self {
            Path::Service { clients, .. } => {
                let mut grpc = clients[i % clients.len()].clone();
                match grpc.should_rate_limit(request(i, three, USERS)).await {
                    Ok(response) => response.into_inner().overall_code == Code::Ok as i32,
                    Err(_) => false,
                }
            }
            Path::Reference { connections } => {
                let mut con = connections[i % connections.len()].clone();
                let window = 1_700_000_000u64 / 86_400 * 86_400;
                let mut pipe = redis::pipe();
                let mut add = |key: String| {
                    pipe.cmd("INCRBY")
                        .arg(&key)
                        .arg(1)
                        .cmd("EXPIRE")
                        .arg(&key)
                        .arg(86_400)
                        .ignore();
                };
                add(format!("ref_bench_user_u{}_{window}", i % USERS));
                if three {
                    add(format!("ref_bench_tenant_t{}_{window}", i % 10));
                    add(format!("ref_bench_route_search_{window}"));
                }
                let counts: Result<Vec<u64>, _> = pipe.query_async(&mut con).await;
                counts.is_ok_and(|counts| counts.iter().all(|count| *count <= 100_000_000))
            }
        }
    }
}

/// Most checks in flight at once; a check due while that many are pending is not sent
/// (counted as dropped), so an overloaded path cannot queue without bound.
const MAX_IN_FLIGHT: usize = 4096;

/// One paced run's figures.
#[derive(Clone)]
struct Run {
    offered: f64,
    achieved: f64,
    p50_us: f64,
    p99_us: f64,
    dropped: usize,
    failed: usize,
    checks: usize,
    cost: Counters,
}

impl Run {
    fn per_check(&self, value: u64) -> f64 {
        value as f64 / self.checks.max(1) as f64
    }
    fn redis_cpu_us(&self) -> f64 {
        self.per_check(self.cost.redis_cpu_ns) / 1e3
    }
    fn service_cpu_us(&self) -> f64 {
        self.per_check(self.cost.service_cpu_ns) / 1e3
    }
}

/// Sends `rate` checks a second for `seconds` on `path`, open loop: check `i` is due at
/// `i / rate` s from the start and is sent then (from a thread of its own that sleeps to each
/// instant, on the runtime's workers), whatever is still pending; its latency runs from that
/// instant to its answer, so a path that falls behind is charged the queueing.
async fn paced(redis: &Redis, path: &Path, rate: f64, seconds: f64, three: bool) -> Run {
    let total = (rate * seconds).round() as usize;
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
    let before = Counters::read(redis, path.pid());
    let runtime = tokio::runtime::Handle::current();
    let pacer = {
        let path = path.clone();
        let latencies = Arc::clone(&latencies);
        let in_flight = Arc::clone(&in_flight);
        let failed = Arc::clone(&failed);
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut dropped = 0;
            for i in 0..total {
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
                    dropped += 1;
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                let path = path.clone();
                let latencies = Arc::clone(&latencies);
                let in_flight = Arc::clone(&in_flight);
                let failed = Arc::clone(&failed);
                let done = done_tx.clone();
                runtime.spawn(async move {
                    let ok = path.check(i, three).await;
                    let latency = due.elapsed();
                    latencies.lock().unwrap().push(latency);
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                    drop(done);
                });
            }
            drop(done_tx);
            (start, dropped)
        })
    };
    // Every task holds a sender: the channel closes when the pacer and the last check are done.
    let _ = done_rx.recv().await;
    let (start, dropped) = pacer.join().unwrap();
    let elapsed = start.elapsed();
    let cost = Counters::read(redis, path.pid()).since(before);
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
    latencies.sort_unstable();
    let quantile = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    Run {
        offered: rate,
        achieved: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: quantile(0.5),
        p99_us: quantile(0.99),
        dropped,
        failed: failed.load(Ordering::Relaxed),
        checks: latencies.len(),
        cost,
    }
}

/// The most checks a second the service answers with CLIENTS clients each waiting for its
/// answer before sending the next (closed loop, `seconds` long).
async fn closed_loop_rate(path: &Path, seconds: f64, three: bool) -> f64 {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            let mut i = client;
            while Instant::now() < deadline {
                path.check(i, three).await;
                done += 1;
                i += CLIENTS;
            }
            done
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await.unwrap();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The median of `values`, and their spread (max - min) relative to it.
fn median_and_spread(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(0.0);
    let spread = values.last().unwrap_or(&0.0) - values.first().unwrap_or(&0.0);
    (median, if median > 0.0 { spread / median } else { 0.0 })
}

/// The repeats of one (path, rate, descriptors) cell, summarised: the run with the median
/// Redis CPU per check, and the spread of that figure over the repeats.
struct Cell {
    label: String,
    three: bool,
    median: Run,
    redis_cpu_spread: f64,
    service_cpu_median: f64,
    service_cpu_spread: f64,
}

impl Cell {
    fn new(label: &str, three: bool, mut runs: Vec<Run>) -> Self {
        let (_, redis_cpu_spread) = median_and_spread(runs.iter().map(Run::redis_cpu_us).collect());
        let (service_cpu_median, service_cpu_spread) =
            median_and_spread(runs.iter().map(Run::service_cpu_us).collect());
        runs.sort_by(|a, b| a.redis_cpu_us().total_cmp(&b.redis_cpu_us()));
        let median = runs[runs.len() / 2].clone();
        Self {
            label: label.to_string(),
            three,
            median,
            redis_cpu_spread,
            service_cpu_median,
            service_cpu_spread,
        }
    }

    fn row(&self, service: bool) -> String {
        let run = &self.median;
        let lost = if run.dropped + run.failed > 0 {
            format!(" ({} dropped, {} failed)", run.dropped, run.failed)
        } else {
            String::new()
        };
        format!(
            "| {:.0} | {} | {} | {:.0}{lost} | {:.0} | {:.0} | {:.2} (±{:.0} %) | {:.2} | {:.2} | {} |",
            run.offered,
            if self.three { 3 } else { 1 },
            self.label,
            run.achieved,
            run.p50_us,
            run.p99_us,
            run.redis_cpu_us(),
            self.redis_cpu_spread * 50.0,
            run.per_check(run.cost.redis_commands),
            run.per_check(run.cost.redis_reads),
            if service {
                format!(
                    "{:.1} (±{:.0} %)",
                    self.service_cpu_median,
                    self.service_cpu_spread * 50.0
                )
            } else {
                "–".to_string()
            },
        )
    }
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

/// What starts the part of a report kept by hand (measurements of other runs): a new report
/// keeps it, from this line on, after its own.
const KEPT_MARKER: &str = "<!-- kept by hand: make bench-service keeps what follows -->";

/// Prints the report, writes it to `out` (keeping the file's hand-kept part), then stops the
/// services and removes their configuration directory.
fn publish<Service>(
    report: &str,
    out: &std::path::Path,
    services: Vec<Service>,
    config: &std::path::Path,
) {
    print!("{report}");
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    write_report(out, report);
    eprintln!("bench-service: wrote {}", out.display());
    drop(services);
    let _ = std::fs::remove_dir_all(config);
}

/// Writes `report` to `out`, followed by the hand-kept part of the file already there.
fn write_report(out: &std::path::Path, report: &str) {
    let kept = std::fs::read_to_string(out)
        .ok()
        .and_then(|old| old.find(KEPT_MARKER).map(|at| old[at..].to_string()))
        .unwrap_or_default();
    let separator = if kept.is_empty() { "" } else { "\n" };
    std::fs::write(out, format!("{report}{separator}{kept}")).unwrap();
}

fn main() {
    if let Ok(listen) = std::env::var(NULL_RLS_ENV) {
        null_rls::main(&listen);
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

/// Opens `CLIENTS` gRPC connections to `service`.
async fn grpc_clients(service: &Service) -> Vec<RateLimitServiceClient<tonic::transport::Channel>> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            RateLimitServiceClient::connect(format!("http://{}", service.grpc))
                .await
                .unwrap(),
        );
    }
    clients
}

async fn bench() {
    let mut out = PathBuf::from("target/bench/service.md");
    let mut seconds = 3.0f64;
    let mut repeats = 3usize;
    let mut rates = "2000,10000,max".to_string();
    let mut chosen = "service,unbatched,reference,null".to_string();
    let mut descriptor_counts = "1,3".to_string();
    let mut extras = true;
    let mut envoy_rlqs = true;
    let mut envoy_rates = "300,1500".to_string();
    let mut envoy_seconds = 10.0f64;
    // (label, binary, extra flags): services compared side by side with the default ones.
    let mut variants: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().expect("a value");
        match flag.as_str() {
            "--out" => out = PathBuf::from(value),
            "--seconds" => seconds = value.parse().expect("a number of seconds"),
            "--repeats" => repeats = value.parse().expect("a number"),
            "--rates" => rates = value,
            // Which of the default paths run: service, unbatched, reference, null.
            "--paths" => chosen = value,
            // 1, 3 or both.
            "--descriptors" => descriptor_counts = value,
            // `--extras off`: no closed-loop Envoy run and no race.
            "--extras" => extras = value != "off",
            // `--envoy-rlqs off`: no RLS-vs-RLQS section; its rates (the quota is a third of
            // each) and seconds a run.
            "--envoy-rlqs" => envoy_rlqs = value != "off",
            "--envoy-rates" => envoy_rates = value,
            "--envoy-seconds" => envoy_seconds = value.parse().expect("a number of seconds"),
            // `LABEL=WORDS`: this service binary with these flags (space-separated; words
            // `NAME=VALUE` set its environment) too.
            "--variant" => {
                let (label, flags) = value.split_once('=').expect("LABEL=FLAGS");
                variants.push((
                    label.to_string(),
                    service_binary(),
                    flags.split_whitespace().map(str::to_string).collect(),
                ));
            }
            // `LABEL=BINARY`: another build of the service (a baseline) too.
            "--binary" => {
                let (label, binary) = value.split_once('=').expect("LABEL=BINARY");
                variants.push((label.to_string(), PathBuf::from(binary), Vec::new()));
            }
            other => panic!("unknown flag {other}"),
        }
    }
    let chosen: Vec<&str> = chosen.split(',').collect();
    let config = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("bench.yaml"), CONFIG).unwrap();
    let server = Server::start(&[]);
    let pid = info_field(&mut server.conn(), "server", "process_id")
        .and_then(|pid| pid.parse().ok())
        .unwrap();
    let redis = Redis { server, pid };
    let mut services = Vec::new();
    let mut paths = Vec::new();
    let mut starts: Vec<(String, PathBuf, Vec<String>)> = SERVICES
        .iter()
        .filter(|(name, ..)| chosen.contains(name))
        .map(|(_, label, extra)| {
            (
                label.to_string(),
                service_binary(),
                extra.iter().map(|flag| flag.to_string()).collect(),
            )
        })
        .collect();
    starts.extend(variants);
    for (label, binary, extra) in starts {
        let service = start_service(&binary, &redis.server, &config, &extra);
        paths.push(Path::Service {
            label,
            clients: grpc_clients(&service).await,
            pid: service.child.id(),
            redis: true,
        });
        services.push(service);
    }
    // `null`: the null RLS with tokio's default workers (one per core); `null1`: one worker;
    // `nullbare`: without the service's per-request layers.
    for (name, workers, bare, label) in [
        ("null", None, false, ""),
        ("null1", Some(1), false, ", 1 runtime worker"),
        (
            "nullbare",
            None,
            true,
            ", tonic's defaults (no timeout, limit or shedding layers)",
        ),
    ] {
        if !chosen.contains(&name) {
            continue;
        }
        let null = start_null_rls(workers, bare);
        paths.push(Path::Service {
            label: format!("{NULL_LABEL}{label}"),
            clients: grpc_clients(&null).await,
            pid: null.child.id(),
            redis: false,
        });
        services.push(null);
    }
    if chosen.contains(&"reference") {
        let mut connections = Vec::new();
        for _ in 0..CLIENTS {
            connections.push(
                redis
                    .server
                    .client()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
            );
        }
        paths.push(Path::Reference { connections });
    }

    eprintln!("bench-service: warm-up…");
    for path in &paths {
        paced(&redis, path, 2000.0, 1.0, true).await;
    }
    let mut cells = Vec::new();
    let mut maxima = Vec::new();
    for three in [false, true] {
        if !descriptor_counts
            .split(',')
            .any(|count| count == if three { "3" } else { "1" })
        {
            continue;
        }
        let mut offered = Vec::new();
        for rate in rates.split(',') {
            if rate == "max" && !paths.iter().any(Path::is_real_service) {
                // No service path to find it with (`--paths none`).
                continue;
            } else if rate == "max" {
                // The most the slowest service path answers closed loop: every path is then
                // offered about that rate.
                let mut max = f64::MAX;
                for path in paths.iter().filter(|path| path.is_real_service()) {
                    max = max.min(closed_loop_rate(path, seconds.min(2.0), three).await);
                }
                // Four fifths of it: a closed loop never queues, an open one at its rate
                // does as soon as the machine slows down.
                let max = (max * 0.8 / 500.0).floor() * 500.0;
                maxima.push((three, max));
                offered.push(max);
            } else {
                offered.push(rate.parse::<f64>().expect("a rate"));
            }
        }
        for rate in offered {
            eprintln!(
                "bench-service: {rate:.0}/s, {} descriptor(s)…",
                if three { 3 } else { 1 }
            );
            let mut runs: Vec<Vec<Run>> = vec![Vec::new(); paths.len()];
            // The paths alternate within each repeat, so a slow spell of the machine falls
            // on both.
            for _ in 0..repeats {
                for (index, path) in paths.iter().enumerate() {
                    runs[index].push(paced(&redis, path, rate, seconds, three).await);
                }
            }
            for (path, runs) in paths.iter().zip(runs) {
                cells.push((path.clone(), Cell::new(path.label(), three, runs)));
            }
        }
    }
    let extras = if extras && !services.is_empty() && paths[0].is_real_service() {
        eprintln!("bench-service: through Envoy…");
        let through_envoy =
            tokio::task::block_in_place(|| envoy::envoy_added_latency(&services[0], 6000));
        eprintln!("bench-service: the race…");
        let ours = race_service(&services[0]).await;
        let reference = race_reference(&redis.server).await;
        Some((through_envoy, ours, reference))
    } else {
        None
    };

    let rlqs_section = if envoy_rlqs {
        let settings = rlqs::Settings {
            rates: envoy_rates
                .split(',')
                .map(|rate| rate.parse().expect("a rate"))
                .collect(),
            seconds: envoy_seconds,
            repeats,
        };
        tokio::task::block_in_place(|| rlqs_report::section(&redis, &settings))
    } else {
        String::new()
    };

    let mut report = String::new();
    writeln!(report, "# The rate-limit service: benchmark\n").unwrap();
    writeln!(
        report,
        "`make bench-service`: one redis-server {} with the release module and the release \
         service on loopback, on one machine ({} cores; load average at the end: {}). Each path \
         is offered the same rate, open loop (check `i` sent at `i / rate` s whatever is \
         pending, from {CLIENTS} gRPC connections to the service, or {CLIENTS} Redis \
         connections for the reference), for {seconds} s, {repeats} times, the paths \
         alternating; each row is the repeat with the median Redis CPU, ± half the spread \
         (max − min) over the repeats. Users: {USERS}; 3 descriptors are user, tenant (10) \
         and route (1). Latency runs from the instant a check was due to its answer. Redis \
         CPU is its main thread's on-CPU time (schedstat), commands are `INFO commandstats` \
         deltas and reads its `read` system calls (`/proc/<pid>/io`), all per check; service \
         CPU is the on-CPU time of all the service's threads per check, the median over the \
         repeats. The null RLS is the floor under it: the same tonic/hyper gRPC stack with \
         the service's server settings, serving the same RLS v3 method, answering OK at once \
         without Redis (this example in a hidden mode, its own process). The reference is \
         envoyproxy/ratelimit's Redis pattern (`fixed_cache_impl.go`: one pipeline of \
         `INCRBY key 1` + `EXPIRE key ttl` per descriptor) sent by this benchmark straight \
         to Redis, without a service of its own (its service CPU is not measured).\n",
        info_field(&mut redis.server.conn(), "server", "redis_version").unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    )
    .unwrap();
    for (three, max) in &maxima {
        writeln!(
            report,
            "The highest rate, {max:.0}/s with {} descriptor(s), is four fifths of what the \
             service answered closed loop ({CLIENTS} clients each waiting for its answer), \
             rounded down to 500.",
            if *three { 3 } else { 1 }
        )
        .unwrap();
    }
    writeln!(report).unwrap();
    writeln!(
        report,
        "| offered/s | descriptors | path | achieved/s | p50 µs | p99 µs | Redis CPU µs/check | \
         Redis commands/check | Redis reads/check | service CPU µs/check |"
    )
    .unwrap();
    writeln!(report, "|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|").unwrap();
    for (path, cell) in &cells {
        writeln!(report, "{}", cell.row(path.pid().is_some())).unwrap();
    }
    writeln!(
        report,
        "\n**Redis CPU per check, service / reference pattern** (target: ≤ 1.0 at 2,000/s, \
         ≤ 0.5 at 10,000/s and above):\n"
    )
    .unwrap();
    writeln!(
        report,
        "| offered/s | descriptors | path | ratio |\n|--:|--:|---|--:|"
    )
    .unwrap();
    for (path, cell) in &cells {
        if !path.is_real_service() {
            continue;
        }
        let reference = cells
            .iter()
            .find(|(other, other_cell)| {
                other.pid().is_none()
                    && other_cell.three == cell.three
                    && other_cell.median.offered == cell.median.offered
            })
            .map(|(_, cell)| cell.median.redis_cpu_us());
        // Without the reference path (`--paths`), no ratio.
        let Some(reference) = reference else {
            continue;
        };
        writeln!(
            report,
            "| {:.0} | {} | {} | {:.2} |",
            cell.median.offered,
            if cell.three { 3 } else { 1 },
            cell.label,
            cell.median.redis_cpu_us() / reference
        )
        .unwrap();
    }
    let Some((
        through_envoy,
        (ours_admitted, ours_charged),
        (reference_admitted, reference_charged),
    )) = extras
    else {
        report.push_str(&rlqs_section);
        publish(&report, &out, services, &config);
        return;
    };
    match &through_envoy {
        Ok([(plain_p50, plain_p99), (limited_p50, limited_p99)]) => writeln!(
            report,
            "\n**Through a real Envoy** (1.40.0, `--concurrency 1`; 4 keep-alive HTTP/1.1 \
             connections each sending its next request when answered, 6,000 requests a \
             listener, the listeners alternating in 3 rounds; one listener routes straight to \
             a backend answering `200`, the other asks the service first \
             (`envoy.filters.http.ratelimit`, one descriptor): added by the rate-limit \
             filter, p50 **{:.0} µs** and p99 **{:.0} µs** (p50/p99 {plain_p50:.0}/{plain_p99:.0} \
             µs without it, {limited_p50:.0}/{limited_p99:.0} µs with it).",
            limited_p50 - plain_p50,
            limited_p99 - plain_p99,
        )
        .unwrap(),
        Err(reason) => {
            writeln!(report, "\n**Through a real Envoy**: not measured: {reason}").unwrap()
        }
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
    report.push_str(&rlqs_section);
    publish(&report, &out, services, &config);
}
