//! The soak's load generator: one client process of a fleet, on the client library, checking
//! every limiter of the catalogue in a loop and logging each decision (limiter, cost,
//! outcome, source, send and receive instants) for the checker.
//!
//! ```text
//! chaos-load --cluster IP:PORT,IP:PORT... | --sentinel redis+sentinel://H:P,H:P/NAME
//!            --client N --duration-ms MS --log PATH
//!            [--set soak|counter] [--interval-ms MS] [--timeout-ms MS] [--seed S]
//! ```
//!
//! Each limiter gets its own task, one check every `--interval-ms` (jittered by the seed);
//! an admitted in-flight check holds its slot for a moment, then releases it. At the end it
//! refunds its leases, flushes the log and prints `done <decisions>`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit_chaos::catalogue::{self, HOLD, SoakLimiter};
use redis_ratelimit_chaos::record::{DecisionRecord, Source, now_us};
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, SentinelStore, Store};
use redis_ratelimit_client::{Inputs, RateLimiter};

const USAGE: &str = "usage: chaos-load --cluster IP:PORT,... | --sentinel URL --client N \
                     --duration-ms MS --log PATH [--set soak|counter] [--interval-ms MS] \
                     [--timeout-ms MS] [--seed S]";

enum Target {
    Cluster(Vec<String>),
    Sentinel(String),
}

struct Args {
    target: Target,
    client: u32,
    duration: Duration,
    log: String,
    set: String,
    interval: Duration,
    timeout: Duration,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut target = None;
    let mut client = None;
    let mut duration = None;
    let mut log = None;
    let mut set = "soak".to_string();
    let mut interval = Duration::from_millis(50);
    let mut timeout = Duration::from_millis(250);
    let mut seed = 1;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a non-negative integer (got '{value}')"))
        };
        match flag.as_str() {
            "--cluster" => {
                target = Some(Target::Cluster(
                    value
                        .split(',')
                        .map(|node| format!("redis://{node}/"))
                        .collect(),
                ));
            }
            "--sentinel" => target = Some(Target::Sentinel(value.clone())),
            "--client" => {
                client = Some(u32::try_from(number()?).map_err(|_| "--client is too large")?);
            }
            "--duration-ms" => duration = Some(Duration::from_millis(number()?)),
            "--log" => log = Some(value.clone()),
            "--set" => set.clone_from(&value),
            "--interval-ms" => interval = Duration::from_millis(number()?.max(1)),
            "--timeout-ms" => timeout = Duration::from_millis(number()?.max(1)),
            "--seed" => seed = number()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        target: target.ok_or("--cluster or --sentinel is required")?,
        client: client.ok_or("--client is required")?,
        duration: duration.ok_or("--duration-ms is required")?,
        log: log.ok_or("--log is required")?,
        set,
        interval,
        timeout,
        seed,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("chaos-load: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("chaos-load: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(count) => {
            println!("done {count}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("chaos-load: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<usize, String> {
    let options = RedisStoreOptions {
        connect_timeout: Duration::from_millis(500),
        ..RedisStoreOptions::default()
    };
    let store: Arc<dyn Store> = match &args.target {
        Target::Cluster(nodes) => {
            let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
            Arc::new(RedisStore::cluster(&nodes, options).map_err(|e| e.to_string())?)
        }
        Target::Sentinel(url) => {
            Arc::new(SentinelStore::from_url(url, options).map_err(|e| e.to_string())?)
        }
    };
    let limiters = match args.set.as_str() {
        "soak" => catalogue::limiters(),
        "counter" => catalogue::counter(),
        other => return Err(format!("unknown --set {other}")),
    };
    let mut builder = RateLimiter::builder_shared(store);
    for limiter in &limiters {
        builder = builder.policy(limiter.policy(args.timeout)?);
    }
    let limiter = builder.build().map_err(|error| error.to_string())?;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<String>();
    let file = std::fs::File::create(&args.log).map_err(|e| format!("{}: {e}", args.log))?;
    let writer = tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::new(file);
        let mut count = 0usize;
        while let Some(line) = receiver.blocking_recv() {
            if writeln!(out, "{line}").is_err() {
                break;
            }
            count = count.saturating_add(1);
        }
        out.flush().map(|()| count).map_err(|e| e.to_string())
    });
    let deadline = Instant::now()
        .checked_add(args.duration)
        .ok_or("--duration-ms is too large")?;
    let mut tasks = Vec::new();
    for (index, soak_limiter) in limiters.into_iter().enumerate() {
        let seed = args.seed ^ (u64::from(args.client) << 32) ^ (index as u64).wrapping_add(1);
        tasks.push(tokio::spawn(drive(
            limiter.clone(),
            soak_limiter,
            Driver {
                client: args.client,
                interval: args.interval,
                deadline,
                seed,
            },
            sender.clone(),
        )));
    }
    drop(sender);
    for task in tasks {
        task.await.map_err(|error| error.to_string())?;
    }
    limiter.release_leases().await;
    drop(limiter);
    writer.await.map_err(|error| error.to_string())?
}

struct Driver {
    client: u32,
    interval: Duration,
    deadline: Instant,
    seed: u64,
}

/// Checks one limiter until the deadline, sending each decision's line to the writer.
async fn drive(
    limiter: RateLimiter,
    soak_limiter: SoakLimiter,
    driver: Driver,
    lines: tokio::sync::mpsc::UnboundedSender<String>,
) {
    let mut random = driver.seed.max(1);
    let inputs = Inputs::new();
    while Instant::now() < driver.deadline {
        random = xorshift(random);
        let cost = random
            .checked_rem(soak_limiter.max_cost())
            .unwrap_or(0)
            .saturating_add(1);
        let send_us = now_us();
        let result = limiter.check_cost(&soak_limiter.name, &inputs, cost).await;
        let recv_us = now_us();
        let (allowed, source, mut release_us) = match &result {
            Ok(decision) => (decision.allowed, source(decision.source), None),
            Err(_) => (false, Source::Error, None),
        };
        if let Ok(decision) = &result {
            if let Some(in_flight) = decision.in_flight.as_ref().filter(|_| decision.allowed) {
                tokio::time::sleep(HOLD).await;
                release_us = Some(now_us());
                limiter.release(in_flight).await;
            }
        }
        let record = DecisionRecord {
            client: driver.client,
            limiter: soak_limiter.name.clone(),
            cost,
            allowed,
            source,
            send_us,
            recv_us,
            release_us,
        };
        if lines.send(record.line()).is_err() {
            return;
        }
        // Jitter of ±50 %, so the clients' calls interleave differently each run.
        let interval_us = u64::try_from(driver.interval.as_micros()).unwrap_or(u64::MAX);
        let jitter = random.checked_rem(interval_us).unwrap_or(0);
        tokio::time::sleep(Duration::from_micros(
            (interval_us >> 1).saturating_add(jitter),
        ))
        .await;
    }
}

fn source(source: redis_ratelimit_client::Source) -> Source {
    match source {
        redis_ratelimit_client::Source::Store(_) => Source::Store,
        redis_ratelimit_client::Source::Lease(_) => Source::Lease,
        redis_ratelimit_client::Source::Cache(_) => Source::Cache,
        redis_ratelimit_client::Source::Fallback => Source::Fallback,
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
