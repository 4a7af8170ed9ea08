//! The soak's load generator: one client process of a fleet, on the client library, checking
//! every limiter of the catalogue and logging each decision (limiter, cost, outcome, source,
//! send and receive instants) for the checker.
//!
//! ```text
//! chaos-load --cluster IP:PORT,IP:PORT... | --sentinel redis+sentinel://H:P,H:P/NAME
//!            | --redis redis://H:P/
//!            --client N --duration-ms MS --log PATH
//!            [--clients N] [--set soak|counter] [--load mix|0.5|1|3] [--interval-ms MS]
//!            [--timeout-ms MS] [--seed S] [--plant NAME]
//! ```
//!
//! Each limiter gets its own task (an in-flight limiter several), offered `--load` times its
//! rate across the `--clients` processes: `mix` (the default) changes between 0.5×, 1× and
//! 3× every few seconds on a schedule drawn from the seed, the same in every process; with
//! `--interval-ms`, one check every that many ms instead (jittered). An admitted in-flight
//! check holds its slot for a moment, then releases it. The local fallback takes `1 /
//! clients` of each quota. `--plant` makes some limiters misbehave on purpose (see
//! `redis_ratelimit_chaos::plant`). At the end it refunds its leases, flushes the log and
//! prints `done <decisions>`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{ArgGroup, CommandFactory, Parser};

use redis_ratelimit_chaos::catalogue::{self, HOLD, Shape, SoakLimiter};
use redis_ratelimit_chaos::load::{self, Mix, Phase};
use redis_ratelimit_chaos::plant::Plant;
use redis_ratelimit_chaos::record::{DecisionRecord, Source, now_us};
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, SentinelStore, Store};
use redis_ratelimit_client::{Inputs, RateLimiter, Replicas};

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "chaos-load",
    about = "The soak's load generator: one client process of a fleet, checking every limiter \
             of the catalogue and logging each decision for the checker",
    args_override_self = true,
    group(ArgGroup::new("target").required(true).args(["cluster", "sentinel", "redis"]))
)]
struct Flags {
    /// The cluster's nodes
    #[arg(long, value_name = "IP:PORT,...", value_delimiter = ',')]
    cluster: Option<Vec<String>>,

    /// A redis+sentinel://H:P,H:P/NAME URL
    #[arg(long, value_name = "URL")]
    sentinel: Option<String>,

    /// One server, redis://H:P/
    #[arg(long, value_name = "URL")]
    redis: Option<String>,

    /// This process's number in the fleet
    #[arg(long, value_name = "N")]
    client: u32,

    /// Processes in the fleet (each takes 1 / N of a quota when it falls back locally)
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = at_least_one)]
    clients: u64,

    /// How long to run
    #[arg(long, value_name = "MS")]
    duration_ms: u64,

    /// Where to write the decisions
    #[arg(long, value_name = "PATH")]
    log: String,

    /// Which limiters: soak or counter
    #[arg(long, value_name = "NAME", default_value = "soak")]
    set: String,

    /// The offered load: mix (0.5x, 1x and 3x in turn, from the seed), 0.5, 1 or 3
    #[arg(long, value_name = "LEVEL", default_value = "mix", value_parser = Mix::parse)]
    load: Mix,

    /// One check every that many ms instead (jittered)
    #[arg(long, value_name = "MS", value_parser = at_least_one)]
    interval_ms: Option<u64>,

    /// The store's timeout
    #[arg(long, value_name = "MS", default_value_t = 250, value_parser = at_least_one)]
    timeout_ms: u64,

    /// The seed of the schedule
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,

    /// Make some limiters misbehave on purpose
    #[arg(long, value_name = "NAME", value_parser = Plant::parse)]
    plant: Option<Plant>,
}

/// A count, 0 read as 1.
fn at_least_one(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map(|value| value.max(1))
        .map_err(|_| "a non-negative integer is expected".to_string())
}

enum Target {
    Cluster(Vec<String>),
    Sentinel(String),
    Redis(String),
}

struct Args {
    target: Target,
    client: u32,
    clients: u64,
    duration: Duration,
    log: String,
    set: String,
    load: Mix,
    interval: Option<Duration>,
    timeout: Duration,
    seed: u64,
    plant: Option<Plant>,
}

impl Args {
    fn parse() -> Args {
        let flags = Flags::parse();
        // The group makes exactly one of the three present.
        let target = match (flags.cluster, flags.sentinel, flags.redis) {
            (Some(nodes), _, _) => Target::Cluster(
                nodes
                    .iter()
                    .map(|node| format!("redis://{node}/"))
                    .collect(),
            ),
            (_, Some(url), _) => Target::Sentinel(url),
            (_, _, Some(url)) => Target::Redis(url),
            (None, None, None) => Flags::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "--cluster, --sentinel or --redis is required",
                )
                .exit(),
        };
        Args {
            target,
            client: flags.client,
            clients: flags.clients,
            duration: Duration::from_millis(flags.duration_ms),
            log: flags.log,
            set: flags.set,
            load: flags.load,
            interval: flags.interval_ms.map(Duration::from_millis),
            timeout: Duration::from_millis(flags.timeout_ms),
            seed: flags.seed,
            plant: flags.plant,
        }
    }
}

fn main() -> ExitCode {
    // --help prints to stdout (exit 0), a bad flag to stderr (exit 2).
    let args = Args::parse();
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
        Target::Redis(url) => {
            Arc::new(RedisStore::with_options(url, options).map_err(|e| e.to_string())?)
        }
    };
    let limiters = match args.set.as_str() {
        "soak" => catalogue::limiters(),
        "counter" => catalogue::counter(),
        other => return Err(format!("unknown --set {other}")),
    };
    let replicas = args
        .plant
        .map_or(args.clients, |plant| plant.replicas(args.clients));
    let mut builder = RateLimiter::builder_shared(store).replicas(Replicas::fixed(replicas));
    for limiter in &limiters {
        let shape = args
            .plant
            .map_or(limiter.shape, |plant| plant.shape(limiter));
        builder = builder.policy(limiter.policy(args.timeout, shape)?);
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
    let started = Instant::now();
    let deadline = started
        .checked_add(args.duration)
        .ok_or("--duration-ms is too large")?;
    let duration_ms = u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX);
    let mut tasks = Vec::new();
    for (index, soak_limiter) in limiters.into_iter().enumerate() {
        // The same schedule in every client: the fleet's load follows it.
        let phases = load::phases(args.seed, index, duration_ms, args.load);
        let regrant = args
            .plant
            .is_some_and(|plant| plant.regrants(&soak_limiter, args.client));
        for task in 0..load::tasks(&soak_limiter, args.clients) {
            let seed = args.seed
                ^ (u64::from(args.client) << 32)
                ^ (index as u64).wrapping_add(1)
                ^ task.wrapping_mul(0x1000_0000_01B3);
            let pace = match args.interval {
                Some(interval) => Pace::Every(interval),
                None => Pace::Load(phases.clone()),
            };
            tasks.push(tokio::spawn(drive(
                limiter.clone(),
                soak_limiter.clone(),
                Driver {
                    client: args.client,
                    clients: args.clients,
                    pace,
                    started,
                    deadline,
                    seed,
                    regrant: regrant.then(Regrant::default),
                },
                sender.clone(),
            )));
        }
    }
    drop(sender);
    for task in tasks {
        task.await.map_err(|error| error.to_string())?;
    }
    limiter.release_leases().await;
    drop(limiter);
    writer.await.map_err(|error| error.to_string())?
}

/// How a task spaces its checks.
enum Pace {
    /// Every `interval` (jittered ±50 %).
    Every(Duration),
    /// At the schedule's share of the limiter's rate.
    Load(Vec<Phase>),
}

struct Driver {
    client: u32,
    clients: u64,
    pace: Pace,
    started: Instant,
    deadline: Instant,
    seed: u64,
    /// The planted re-grant of one window, when this task plants it.
    regrant: Option<Regrant>,
}

/// One fixed window granted twice: the first window in which the store denies, its
/// denials turned into admissions until one more limit was admitted.
#[derive(Default)]
struct Regrant {
    window: Option<u64>,
    units: u64,
}

impl Regrant {
    /// Whether a denial of `cost` at `send_us` is turned into an admission.
    fn turns(&mut self, limiter: &SoakLimiter, send_us: u64, cost: u64) -> bool {
        let Shape::FixedWindow { limit, window_ms } = limiter.shape else {
            return false;
        };
        let window = send_us
            .checked_div(window_ms.saturating_mul(1000))
            .unwrap_or(0);
        if *self.window.get_or_insert(window) != window || self.units.saturating_add(cost) > limit {
            return false;
        }
        self.units = self.units.saturating_add(cost);
        true
    }
}

/// Checks one limiter until the deadline, sending each decision's line to the writer.
async fn drive(
    limiter: RateLimiter,
    soak_limiter: SoakLimiter,
    mut driver: Driver,
    lines: tokio::sync::mpsc::UnboundedSender<String>,
) {
    let mut random = driver.seed.max(1);
    let inputs = Inputs::new();
    let mut next = Instant::now();
    while Instant::now() < driver.deadline {
        random = xorshift(random);
        let cost = random
            .checked_rem(soak_limiter.max_cost())
            .unwrap_or(0)
            .saturating_add(1);
        let send_us = now_us();
        let result = limiter.check_cost(&soak_limiter.name, &inputs, cost).await;
        let recv_us = now_us();
        let (mut allowed, source, mut release_us) = match &result {
            Ok(decision) => (decision.allowed, source(decision.source), None),
            Err(_) => (false, Source::Error, None),
        };
        if let Ok(decision) = &result
            && let Some(in_flight) = decision.in_flight.as_ref().filter(|_| decision.allowed)
        {
            tokio::time::sleep(HOLD).await;
            release_us = Some(now_us());
            limiter.release(in_flight).await;
        }
        if let Some(regrant) = driver.regrant.as_mut()
            && !allowed
            && source == Source::Store
            && regrant.turns(&soak_limiter, send_us, cost)
        {
            allowed = true;
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
        let mean_us = match &driver.pace {
            Pace::Every(interval) => u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
            Pace::Load(phases) => {
                let elapsed_ms =
                    u64::try_from(driver.started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let level = load::level_at(phases, elapsed_ms);
                load::interval_us(&soak_limiter, driver.clients, level)
            }
        };
        // Jitter of ±50 %, so the clients' calls interleave differently each run; a task
        // that fell behind (a slow check) goes on at once rather than in a burst.
        let jitter = random.checked_rem(mean_us.max(1)).unwrap_or(0);
        next = next
            .checked_add(Duration::from_micros((mean_us >> 1).saturating_add(jitter)))
            .unwrap_or(driver.deadline)
            .max(Instant::now());
        tokio::time::sleep_until(tokio::time::Instant::from_std(next.min(driver.deadline))).await;
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
