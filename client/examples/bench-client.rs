//! The client library's benchmark (`make bench-client`): what a check costs the service, and
//! what it costs Redis.
//!
//! 1. **Overhead**: latency of one check through the client (sequential requests) against a
//!    plain `GET` on the same connection, with and without leases (p50, p99).
//! 2. **Redis cost**: many API keys, requests in flight concurrently, every request
//!    admitted. Redis calls per admitted request, and admitted requests per second of the
//!    Redis main thread's CPU, for the seed article's Lua token bucket (`EVALSHA`), the
//!    module called on every request, and leases of 10 and 100 units.
//!
//! Starts its own `redis-server` with the release module; writes a Markdown report.
//!
//! ```text
//! cargo run --release -p redis-ratelimit-client --example bench-client -- \
//!     [--out docs/bench-client.md] [--requests 200000] [--latency 20000]
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use redis::aio::ConnectionManager;
use redis_ratelimit_client::store::RedisStore;
use redis_ratelimit_client::{
    Algorithm, Fallback, Inputs, Lease, Limit, Policy, RateLimiter, Source,
};
use redis_ratelimit_testkit::helpers::commandstat_calls_of;
use redis_ratelimit_testkit::server::{Server, info_field};

/// A capacity no run exhausts, refilled slowly: every request is admitted.
const CAPACITY: u64 = 3_000_000;
const RATE: &str = "0.001";
/// Distinct API keys the load is spread over.
const KEYS: usize = 100;
/// Requests in flight at once in the Redis-cost runs.
const IN_FLIGHT: usize = 16;
const ROUNDS: usize = 5;

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "bench-client",
    about = "The client library's benchmark: what a check costs the service, and what it \
             costs Redis; writes a Markdown report"
)]
struct Options {
    /// Where to write the report [default: stdout only]
    #[arg(long, value_name = "PATH")]
    out: Option<String>,

    /// Requests of each Redis-cost run
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    requests: usize,

    /// Sequential requests of each overhead run
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    latency: usize,
}

fn options() -> Options {
    // --help prints to stdout (exit 0), a bad flag to stderr (exit 2).
    Options::parse()
}

fn limiter(port: u16, lease: Option<u64>, name: &str) -> RateLimiter {
    let bucket = Algorithm::token_bucket_with_rate(
        CAPACITY,
        redis_ratelimit_client::Rate::per_second(RATE).unwrap(),
    )
    .unwrap();
    let mut policy = Policy::builder(name)
        .limit(Limit::new("per-key", bucket, &format!("{name}:{{{{{{key}}}}}}")).unwrap())
        .fallback(Fallback::Local)
        .timeout(Duration::from_secs(1));
    if let Some(units) = lease {
        policy = policy.lease(Lease::new(units));
    }
    let store = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    RateLimiter::builder(store)
        .policy(policy.build().unwrap())
        .build()
        .unwrap()
}

/// One way of limiting a request, as the benchmark drives it.
#[derive(Clone)]
enum Approach {
    Get(ConnectionManager),
    Command(ConnectionManager),
    Lua(ConnectionManager, String),
    Client(RateLimiter, String),
}

impl Approach {
    /// Handles one request for API key `key`; returns whether it was admitted and whether
    /// the decision fell back (which would make the figures meaningless).
    async fn request(&mut self, key: usize) -> (bool, bool) {
        match self {
            Approach::Get(con) => {
                let _: Option<String> = redis::cmd("GET")
                    .arg(format!("get:{key}"))
                    .query_async(con)
                    .await
                    .unwrap();
                (true, false)
            }
            Approach::Command(con) => {
                let mut command = redis::cmd("RL.TOKENBUCKET");
                command.arg(format!("cmd:{{{key}}}"));
                (bucket_call(con, command).await, false)
            }
            Approach::Lua(con, sha) => {
                let mut command = redis::cmd("EVALSHA");
                command
                    .arg(sha.as_str())
                    .arg(1)
                    .arg(format!("lua:{{{key}}}"));
                (bucket_call(con, command).await, false)
            }
            Approach::Client(limiter, policy) => {
                let inputs = Inputs::new().with("key", key.to_string());
                let decision = limiter.check(policy, &inputs).await.unwrap();
                (decision.allowed, decision.source == Source::Fallback)
            }
        }
    }
}

/// Sends a token-bucket call (`command` up to the key) with the benchmark's bucket and a cost
/// of 1; returns whether it was admitted.
async fn bucket_call(con: &mut ConnectionManager, mut command: redis::Cmd) -> bool {
    let reply: Vec<i64> = command
        .arg(CAPACITY)
        .arg(RATE)
        .arg(1)
        .query_async(con)
        .await
        .unwrap();
    reply[0] == 1
}

/// Round trips so far: calls of the commands a client sends (`INFO commandstats`), not the
/// commands a script runs inside the server (`TIME`, `HMGET`... count there too).
fn server_calls(server: &Server) -> u64 {
    let commands = ["evalsha", "rl.tokenbucket", "rl.multi", "rl.refund"];
    commandstat_calls_of(&mut server.conn(), &commands)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn micros(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

/// `a − b` in µs, signed (a negative p99 difference is noise, and says so).
fn difference(a: Duration, b: Duration) -> String {
    format!("{:+.1} µs", (a.as_secs_f64() - b.as_secs_f64()) * 1e6)
}

#[tokio::main]
async fn main() {
    let options = options();
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".into());
    let server = Server::start(&[]);
    let version = info_field(&mut server.conn(), "server", "redis_version").unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let con = client.get_connection_manager().await.unwrap();
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/lua/token_bucket.lua"
    ))
    .unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query_async(&mut con.clone())
        .await
        .unwrap();
    let approaches: Vec<(&str, Approach)> = vec![
        ("`GET` (plain, same connection)", Approach::Get(con.clone())),
        (
            "seed's Lua token bucket (`EVALSHA`)",
            Approach::Lua(con.clone(), sha),
        ),
        (
            "`RL.TOKENBUCKET` sent directly",
            Approach::Command(con.clone()),
        ),
        (
            "client check, store on every request",
            Approach::Client(limiter(server.port, None, "every"), "every".into()),
        ),
        (
            "client check, leases of 10",
            Approach::Client(limiter(server.port, Some(10), "lease10"), "lease10".into()),
        ),
        (
            "client check, leases of 100",
            Approach::Client(
                limiter(server.port, Some(100), "lease100"),
                "lease100".into(),
            ),
        ),
    ];
    // Warm up every path (connections, script cache, memoized arguments).
    for (_, approach) in &approaches {
        let mut approach = approach.clone();
        for key in 0..KEYS * 2 {
            approach.request(key).await;
        }
    }

    // 1. Latency, one request at a time, rounds interleaved.
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); approaches.len()];
    let per_round = options.latency / ROUNDS;
    for _ in 0..ROUNDS {
        for (index, (_, approach)) in approaches.iter().enumerate() {
            let mut approach = approach.clone();
            for request in 0..per_round {
                let started = Instant::now();
                approach.request(request % KEYS).await;
                latencies[index].push(started.elapsed());
            }
        }
    }
    let mut report = String::new();
    let _ = writeln!(report, "# Client benchmark\n");
    let _ = writeln!(
        report,
        "Produced by `make bench-client` (`client/examples/bench-client.rs`): Redis {version} with \
         the release module on a private port, the client in the same process as the load, \
         release builds, {} logical CPUs shared by Redis and the client. Every request is \
         admitted (a bucket of {CAPACITY} tokens refilled at {RATE}/s per key), spread over \
         {KEYS} API keys. Load average when it started: {} (other work shares the machine: \
         read ratios rather than absolute figures).\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average
    );
    let _ = writeln!(
        report,
        "## Overhead of a check\n\n{} sequential requests per path ({ROUNDS} interleaved rounds). \
         The overhead of a check is its latency minus a plain `GET`'s on the same \
         connection; p99 differences on a shared 2-CPU machine are mostly noise.\n",
        per_round * ROUNDS
    );
    let _ = writeln!(report, "| path | p50 | p99 | p50 − `GET` | p99 − `GET` |");
    let _ = writeln!(report, "|---|--:|--:|--:|--:|");
    let mut sorted: Vec<Vec<Duration>> = latencies;
    for list in &mut sorted {
        list.sort();
    }
    let (get_p50, get_p99) = (quantile(&sorted[0], 0.5), quantile(&sorted[0], 0.99));
    for ((name, _), list) in approaches.iter().zip(&sorted) {
        let (p50, p99) = (quantile(list, 0.5), quantile(list, 0.99));
        let _ = writeln!(
            report,
            "| {name} | {} | {} | {} | {} |",
            micros(p50),
            micros(p99),
            difference(p50, get_p50),
            difference(p99, get_p99),
        );
    }

    // 2. Redis cost: requests in flight concurrently, CPU of the main thread.
    let _ = writeln!(
        report,
        "\n## What Redis pays per admitted request\n\n{} requests per approach, {IN_FLIGHT} in \
         flight, {ROUNDS} interleaved rounds. Redis CPU is the on-CPU time of the server's main \
         thread (schedstat), which serves commands and socket I/O.\n",
        options.requests
    );
    let _ = writeln!(
        report,
        "| approach | round trips to Redis / admitted request | Redis CPU / admitted request | admitted requests per second of Redis CPU | × module on every request |"
    );
    let _ = writeln!(report, "|---|--:|--:|--:|--:|");
    let measured: Vec<usize> = vec![1, 3, 4, 5];
    let mut totals = vec![(0u64, 0u64, 0u64, 0u64); approaches.len()];
    let per_round = options.requests / ROUNDS;
    for _ in 0..ROUNDS {
        for &index in &measured {
            let approach = approaches[index].1.clone();
            let cpu_before = server.main_thread_cpu_ns();
            let calls_before = server_calls(&server);
            let shared = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for _ in 0..IN_FLIGHT {
                let mut approach = approach.clone();
                let next = Arc::clone(&shared);
                tasks.push(tokio::spawn(async move {
                    let (mut admitted, mut fallbacks) = (0u64, 0u64);
                    loop {
                        let request = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if request >= per_round {
                            return (admitted, fallbacks);
                        }
                        let (allowed, fell_back) = approach.request(request % KEYS).await;
                        admitted += u64::from(allowed);
                        fallbacks += u64::from(fell_back);
                    }
                }));
            }
            let (mut admitted, mut fallbacks) = (0, 0);
            for task in tasks {
                let (a, f) = task.await.unwrap();
                admitted += a;
                fallbacks += f;
            }
            let calls = server_calls(&server) - calls_before;
            let cpu = server.main_thread_cpu_ns() - cpu_before;
            let total = &mut totals[index];
            total.0 += admitted;
            total.1 += calls;
            total.2 += cpu;
            total.3 += fallbacks;
        }
    }
    let per_second = |index: usize| {
        let (admitted, _, cpu, _) = totals[index];
        admitted as f64 / (cpu as f64 / 1e9)
    };
    let module = per_second(3);
    for &index in &measured {
        let (admitted, calls, cpu, fallbacks) = totals[index];
        assert_eq!(fallbacks, 0, "{}: decisions fell back", approaches[index].0);
        let _ = writeln!(
            report,
            "| {} | {:.3} | {:.2} µs | {:.0} | {:.2} |",
            approaches[index].0,
            calls as f64 / admitted as f64,
            cpu as f64 / admitted as f64 / 1e3,
            per_second(index),
            per_second(index) / module,
        );
    }
    let _ = writeln!(
        report,
        "\nLeases trade this saving for over-admission: at most the units outstanding in \
         leases (replicas × lease size per key) beyond what the limit allows over an interval; \
         see the client's README."
    );
    print!("{report}");
    if let Some(out) = options.out {
        std::fs::write(&out, &report).unwrap();
        eprintln!("written to {out}");
    }
}
