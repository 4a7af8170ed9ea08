//! One quota across regions on real processes (`make regions`, `docs/regions.md`): a home
//! (a `redis-server` primary with the module, two replicas in a chain, three Sentinels of
//! quorum 2: [`HomeReplicas`]), three regional
//! `redis-server`s with the module, each region's lease agent (the client's
//! [`regions::run`]) reaching home through a [`Proxy`] with that region's one-way latency
//! (35, 70, 120 ms, jittered), load generators calling `RL.REGIONAL` on their own region's
//! Redis (70/20/10 of an offered load twice the global rate), and faults while it runs:
//! four cuts of one region from home (blackholed, then reset), two home stalls (`SIGSTOP` of
//! the primary) and one failover through Sentinel (the agents ask the first Sentinel for the
//! primary, as a client asks the first of its list that answers, and reconnect). Every
//! admission is logged on the host's one clock; [`check`] holds the merged log to each
//! global limit's bound.
//!
//! - [`limits`]: the global limits, their floors and pools, both modes;
//! - [`check`]: the bounds over the merged log, the hot region's utilization, the regional
//!   decision's latency and the agents' calls to home.

pub mod burst;
pub mod check;
pub mod limits;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;
use redis_ratelimit_client::regions::{
    self, AgentConfig, AgentError, HotLimit, LogLeases, Refresh, ServerForm,
};
use redis_ratelimit_testkit::sentinel::Sentinel;
use redis_ratelimit_testkit::server::{Server, info_field, wait_until};

use crate::catalogue::Shape;
use crate::proxy::{Direction, Latency, LinkFault, Proxy};
use crate::record::now_us;
use limits::{GlobalLimit, Split};

/// The Sentinel's name for home.
const HOME: &str = "home";
/// One-way latency from each region to home.
pub const ONE_WAY_MS: [u64; 3] = [35, 70, 120];
/// The regions' share of the offered load, hot first.
pub const TRAFFIC_PERCENT: [u64; 3] = [70, 20, 10];

/// The run's split: weights as the traffic, `f = ½`, `P = 500 ms`, `a = 400 ms` (the
/// farthest region's round trip is 240 ms, 264 ms with its jitter, plus the `WAIT`).
pub const SPLIT: Split = Split {
    weights: TRAFFIC_PERCENT,
    floor_percent: 50,
    period: Duration::from_millis(500),
    margin: Duration::from_millis(400),
};

/// A bug planted on purpose, which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The agent installs the units it asked for rather than those home granted (a
    /// `PARTIAL` grant's field 1 ignored): leases hold units no pool gave.
    AskedNotGranted,
}

/// How home's replicas are wired. The agents' `WAIT 1` makes a grant count once one
/// replica has it; after a failover it answers only once the new primary has a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeReplicas {
    /// Primary → replica → replica (the second a replica of the first): the primary's only
    /// replica, the one that acknowledges every `WAIT`, is the one Sentinel promotes, and it
    /// keeps its own replica, so the new primary acknowledges at once. Chained so that
    /// nothing acknowledges a grant the promoted replica will not have: with both replicas
    /// on the primary, a manual failover promotes one while the demoted primary still takes
    /// grants and the other still acknowledges them until Sentinel repoints it (up to its
    /// 1 s `INFO` period during a failover), grants the new primary never saw.
    Chained,
    /// Both replicas of the primary (the case above; `REGIONS_HOME=flat`): measured to
    /// over-admit across the failover (README *Regions*).
    Flat,
    /// One replica (`REGIONS_HOME=one`): after a failover nothing acknowledges until the
    /// demoted primary has resynced as the new one's replica, which Sentinel orders only
    /// when it next looks at it (its 10 s `INFO` period).
    One,
}

impl HomeReplicas {
    /// From `REGIONS_HOME` (`chained`, the default, `flat` or `one`).
    pub fn from_env() -> HomeReplicas {
        match std::env::var("REGIONS_HOME").as_deref() {
            Ok("flat") => HomeReplicas::Flat,
            Ok("one") => HomeReplicas::One,
            _ => HomeReplicas::Chained,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HomeReplicas::Chained => "primary → replica → replica",
            HomeReplicas::Flat => "primary → 2 replicas",
            HomeReplicas::One => "primary → 1 replica",
        }
    }
}

/// Sentinels watching home, and the quorum that must agree it is down.
pub const SENTINELS: (usize, usize) = (3, 2);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The load's length.
    pub duration: Duration,
    pub plant: Option<Plant>,
    /// Whether to inject the faults (cuts, stalls, the failover).
    pub faults: bool,
    pub home: HomeReplicas,
    /// Where the logs go.
    pub dir: PathBuf,
}

/// One admitted call: its send and receive instants (µs, host clock), region, limit index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    pub send_us: u64,
    pub recv_us: u64,
    pub region: usize,
    pub limit: usize,
    /// Whether the lease (not the floor) admitted it.
    pub leased: bool,
}

/// Which fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The region's links to home blackholed, then reset.
    Cut(usize),
    /// Home's primary stopped (`SIGSTOP`).
    Stall,
    /// `SENTINEL FAILOVER`, until Sentinel names the new primary.
    Failover,
}

/// A call's holder for an in-flight floor's words: the region's and the call's number.
fn with_holder(words: &[String], region: usize, call: u64) -> Vec<String> {
    words
        .iter()
        .map(|word| {
            if word == limits::HOLDER {
                format!("r{region}-{call}")
            } else {
                word.clone()
            }
        })
        .collect()
}

/// A fault the run injected: `[from_us, to_us]` and what.
#[derive(Clone, Debug)]
pub struct Fault {
    pub from_us: u64,
    pub to_us: u64,
    pub kind: FaultKind,
    pub what: String,
}

/// One region's agent, as its callbacks saw it.
#[derive(Clone, Debug, Default)]
pub struct AgentStats {
    pub refreshes_ok: u64,
    /// Failed refreshes by the error's first words.
    pub errors: BTreeMap<String, u64>,
    /// Units home granted per limit (as the agent reported them).
    pub granted: Vec<u64>,
    /// Times the agent reconnected to a primary Sentinel named.
    pub primaries_followed: u64,
    /// When each refresh that installed its leases ended (µs, host clock).
    pub installed_at_us: Vec<u64>,
}

/// One region's load.
#[derive(Clone, Debug, Default)]
pub struct LoadStats {
    pub calls: u64,
    pub errors: u64,
    /// Round trip of one pipeline of every limit's `RL.REGIONAL` (µs).
    pub round_trips_us: Vec<u64>,
    /// Decisions per reason (`floor`, `lease`, `lease_exhausted`, `home_unreachable`).
    pub whys: BTreeMap<String, u64>,
    /// The region server's `RL.REGIONAL` p50 / p99 / p99.9 (µs, `INFO latencystats`).
    pub server_percentiles_us: Option<(f64, f64, f64)>,
}

/// What a run produced.
pub struct Outcome {
    pub limits: Vec<GlobalLimit>,
    pub lease_units: Vec<Vec<u64>>,
    pub started_us: u64,
    pub ended_us: u64,
    pub admissions: Vec<Admission>,
    pub faults: Vec<Fault>,
    pub agents: Vec<AgentStats>,
    pub loads: Vec<LoadStats>,
    pub dir: PathBuf,
    pub home: HomeReplicas,
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "regions: {line}");
}

/// `k` for each region and limit: the hot region's excess demand over one `T`; the cold
/// ones their weight's share of the pool's refill over one `P` (at least 1), so that they
/// do not empty the pool the hot region leases from.
pub fn lease_units(limit: &GlobalLimit, offered_per_s: &[u64; 3]) -> Vec<u64> {
    let pool = limit.pool(&SPLIT);
    let (pool_quota, pool_rate) = (limits::units(&pool), limits::per_second(&pool));
    let per_period = |region: usize| {
        let period_ms = u64::try_from(SPLIT.period.as_millis()).unwrap_or(1);
        let refill = if pool_rate > 0 {
            pool_rate * period_ms / 1000
        } else {
            // A window pool: its limit over the windows one period spans.
            pool_quota * period_ms / 2000
        };
        (refill * SPLIT.weights[region] / SPLIT.weight_total()).max(1)
    };
    (0..3)
        .map(|region| {
            // An in-flight pool's slots are held, not spent: the hot region asks for all of
            // them (each a holder a refresh renews), a cold one for its share.
            if matches!(limit.shape, Shape::Concurrency { .. }) {
                return if region == 0 {
                    pool_quota
                } else {
                    per_period(region)
                };
            }
            if region == 0 {
                let floor = limit.floor(&SPLIT, 0);
                let floor_rate = match limits::per_second(&floor) {
                    0 => limits::units(&floor) / 2,
                    rate => rate,
                };
                let lifetime_ms = u64::try_from(SPLIT.lifetime().as_millis()).unwrap_or(1);
                (offered_per_s[0].saturating_sub(floor_rate) * lifetime_ms)
                    .div_ceil(1000)
                    .max(1)
            } else {
                per_period(region)
            }
        })
        .collect()
}

/// The offered load per region (calls a second, each asking every limit once): twice the
/// global rate of 40/s, split 70/20/10.
pub fn offered_per_s() -> [u64; 3] {
    TRAFFIC_PERCENT.map(|percent| 80 * percent / 100)
}

/// Runs it: starts every process, runs the load and the faults for `options.duration`,
/// stops everything (the servers, the Sentinel and the proxies stop on drop, on failure
/// too) and returns the logs.
pub fn run(options: &Options) -> Outcome {
    std::fs::create_dir_all(&options.dir).expect("the run's directory");
    let limits = limits::limits();
    let offered = offered_per_s();
    let lease_units: Vec<Vec<u64>> = limits
        .iter()
        .map(|limit| lease_units(limit, &offered))
        .collect();

    // Home: a primary and its replicas as `options.home` wires them; the Sentinels, each
    // naming the primary (they find its replica and each other while the load runs; the
    // failover waits for both).
    let replicas = if options.home == HomeReplicas::One {
        1
    } else {
        2
    };
    let home: Vec<Server> = (0..=replicas)
        .map(|_| Server::start(&["--repl-diskless-sync-delay", "0"]))
        .collect();
    for (index, node) in home.iter().enumerate().skip(1) {
        let upstream = match options.home {
            HomeReplicas::Chained => index - 1,
            HomeReplicas::Flat | HomeReplicas::One => 0,
        };
        node.replicate_from(&home[upstream]);
    }
    let sentinels = Sentinel::start_group(&home[0], HOME, SENTINELS.0, SENTINELS.1);
    let sentinel = &sentinels[0];
    let regions_servers: Vec<Server> = (0..3).map(|_| Server::start(&[])).collect();

    // Each region's link to each home node, through a proxy with the region's latency.
    let proxies: Vec<Vec<(u16, Proxy)>> = ONE_WAY_MS
        .iter()
        .map(|one_way_ms| {
            home.iter()
                .map(|node| {
                    let target: SocketAddr = format!("127.0.0.1:{}", node.port).parse().unwrap();
                    let proxy =
                        Proxy::start("127.0.0.1:0".parse().unwrap(), target).expect("a proxy");
                    let latency = Latency {
                        base: Duration::from_millis(*one_way_ms),
                        jitter: Duration::from_millis(one_way_ms / 10),
                    };
                    proxy.set_latency(Direction::ToTarget, latency);
                    proxy.set_latency(Direction::FromTarget, latency);
                    (node.port, proxy)
                })
                .collect()
        })
        .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<Arc<Mutex<AgentStats>>> = (0..3)
        .map(|_| {
            Arc::new(Mutex::new(AgentStats {
                granted: vec![0; limits.len()],
                ..AgentStats::default()
            }))
        })
        .collect();
    let config = AgentConfig {
        period: SPLIT.period,
        margin: SPLIT.margin,
        drift_ppm: 1_000,
        wait_replicas: 1,
        wait_timeout: Duration::from_millis(100),
        home: ServerForm::Module,
        region: ServerForm::Module,
        // The harness widens its log pools itself (`Mode::LogWidened`) and measures the
        // plain `W` pool beside it (`Mode::LogAtGrant`): the agent asks them as given.
        log_leases: LogLeases::AsGiven,
    };
    let mut agent_tasks = Vec::new();
    for region in 0..3 {
        let hot: Vec<HotLimit> = limits
            .iter()
            .zip(&lease_units)
            .map(|(limit, units)| HotLimit {
                pool_key: format!("pool:{}", limit.name),
                pool: limit.pool_algorithm(&SPLIT),
                lease_key: format!("{{{}}}lease", limit.name),
                lease_units: units[region],
                slot_holder: format!("r{region}"),
            })
            .collect();
        let links: Vec<(u16, SocketAddr)> = proxies[region]
            .iter()
            .map(|(port, proxy)| (*port, proxy.listen))
            .collect();
        agent_tasks.push(runtime.spawn(agent(
            Link {
                links,
                sentinel_port: sentinel.port,
                region_port: regions_servers[region].port,
            },
            hot,
            config,
            Arc::clone(&agents[region]),
            Arc::clone(&stop),
            options.plant,
        )));
    }
    // The agents lease before the load starts.
    let leasing = wait_until(Duration::from_secs(20), || {
        agents
            .iter()
            .all(|stats| stats.lock().unwrap().refreshes_ok > 0)
    });
    assert!(
        leasing,
        "the agents did not lease: {:?}",
        agents
            .iter()
            .map(|a| a.lock().unwrap().clone())
            .collect::<Vec<_>>()
    );

    say(&format!(
        "home {} ({}: {:?}), sentinels {:?}, regions {:?}, {} s{}",
        home[0].port,
        options.home.as_str(),
        home.iter()
            .skip(1)
            .map(|node| node.port)
            .collect::<Vec<_>>(),
        sentinels
            .iter()
            .map(|sentinel| sentinel.port)
            .collect::<Vec<_>>(),
        regions_servers
            .iter()
            .map(|server| server.port)
            .collect::<Vec<_>>(),
        options.duration.as_secs(),
        options
            .plant
            .map(|plant| format!(", planted {plant:?}"))
            .unwrap_or_default()
    ));
    let started_us = now_us();
    let started = Instant::now();
    let load_tasks: Vec<_> = (0..3)
        .map(|region| {
            let words: Vec<Vec<String>> = limits
                .iter()
                .map(|limit| {
                    let mut words = vec![
                        format!("{{{}}}floor", limit.name),
                        format!("{{{}}}lease", limit.name),
                    ];
                    words.extend(limit.floor_words(&SPLIT, region));
                    words
                })
                .collect();
            runtime.spawn(load(
                region,
                regions_servers[region].port,
                offered[region],
                words,
                Arc::clone(&stop),
            ))
        })
        .collect();

    let faults = if options.faults {
        inject(&options.duration, started, &proxies, &home, &sentinels)
    } else {
        Vec::new()
    };
    let left = options.duration.saturating_sub(started.elapsed());
    std::thread::sleep(left);
    stop.store(true, Ordering::SeqCst);
    let ended_us = now_us();
    let mut admissions = Vec::new();
    let mut loads = Vec::new();
    for task in load_tasks {
        let (mut admitted, stats) = runtime.block_on(task).expect("a load task");
        admissions.append(&mut admitted);
        loads.push(stats);
    }
    for task in agent_tasks {
        task.abort();
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    for (stats, server) in loads.iter_mut().zip(&regions_servers) {
        stats.server_percentiles_us = regional_percentiles(server);
    }
    admissions.sort_by_key(|admission| (admission.recv_us, admission.send_us));
    let agents: Vec<AgentStats> = agents
        .iter()
        .map(|stats| stats.lock().unwrap().clone())
        .collect();
    let outcome = Outcome {
        limits,
        lease_units,
        started_us,
        ended_us,
        admissions,
        faults,
        agents,
        loads,
        dir: options.dir.clone(),
        home: options.home,
    };
    write_logs(&outcome);
    outcome
}

/// Where a region's agent reaches home: a proxy per home node (keyed by the node's port,
/// as Sentinel names it), the Sentinel, and its own region's server.
struct Link {
    links: Vec<(u16, SocketAddr)>,
    sentinel_port: u16,
    region_port: u16,
}

async fn primary_port(sentinel: &mut redis::aio::MultiplexedConnection) -> Option<u16> {
    let address: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(HOME)
        .query_async(sentinel)
        .await
        .ok()?;
    address.get(1)?.parse().ok()
}

async fn manager(addr: SocketAddr) -> redis::RedisResult<redis::aio::ConnectionManager> {
    // The home link's response timeout outlasts the WAIT (100 ms) and the farthest round
    // trip (264 ms with jitter); a blackholed link fails the refresh after it.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(800)))
        .set_connection_timeout(Some(Duration::from_millis(800)))
        .set_number_of_retries(1);
    redis::Client::open(format!("redis://{addr}/"))?
        .get_connection_manager_with_config(config)
        .await
}

/// One region's agent: asks Sentinel for home's primary, runs [`regions::run`] on a
/// connection to it (through the region's proxy), and when Sentinel names another primary,
/// drops that agent and starts one on the new primary.
async fn agent(
    link: Link,
    limits: Vec<HotLimit>,
    config: AgentConfig,
    stats: Arc<Mutex<AgentStats>>,
    stop: Arc<AtomicBool>,
    plant: Option<Plant>,
) {
    let region_addr: SocketAddr = format!("127.0.0.1:{}", link.region_port).parse().unwrap();
    let Ok(mut sentinel) =
        redis::Client::open(format!("redis://127.0.0.1:{}/", link.sentinel_port))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
    else {
        return;
    };
    let (plant_tx, mut plant_rx) = tokio::sync::mpsc::unbounded_channel::<(String, u64, i64)>();
    if plant.is_some() {
        let Ok(mut region) = manager(region_addr).await else {
            return;
        };
        tokio::spawn(async move {
            while let Some((key, units, end_ms)) = plant_rx.recv().await {
                let _: redis::RedisResult<Value> = redis::cmd("RL.REGIONLEASE")
                    .arg(key)
                    .arg(units)
                    .arg(end_ms)
                    .query_async(&mut region)
                    .await;
            }
        });
    }
    while !stop.load(Ordering::SeqCst) {
        let Some(port) = primary_port(&mut sentinel).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(&(_, home_addr)) = link.links.iter().find(|(node, _)| *node == port) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (Ok(home), Ok(region)) = (manager(home_addr).await, manager(region_addr).await) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        stats.lock().unwrap().primaries_followed += 1;
        let reporting = Arc::clone(&stats);
        let planting = plant_tx.clone();
        let asked: Vec<(String, u64)> = limits
            .iter()
            .map(|limit| (limit.lease_key.clone(), limit.lease_units))
            .collect();
        let running = tokio::spawn(regions::run(
            home,
            region,
            limits.clone(),
            config,
            move |result: Result<Refresh, AgentError>| {
                let mut stats = reporting.lock().unwrap();
                match result {
                    Ok(refresh) => {
                        stats.refreshes_ok += 1;
                        stats.installed_at_us.push(now_us());
                        for (index, (units, end_ms)) in refresh
                            .granted
                            .iter()
                            .zip(&refresh.expires_at_ms)
                            .enumerate()
                        {
                            stats.granted[index] += units;
                            if plant == Some(Plant::AskedNotGranted) {
                                let (key, asked_units) = &asked[index];
                                if units < asked_units && refresh.replaced[index].is_some() {
                                    let _ = planting.send((key.clone(), *asked_units, *end_ms));
                                }
                            }
                        }
                    }
                    Err(error) => {
                        let text = error.to_string();
                        let kind: String = text
                            .split(':')
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .take(40)
                            .collect();
                        *stats.errors.entry(kind).or_default() += 1;
                    }
                }
            },
        ));
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if stop.load(Ordering::SeqCst) {
                running.abort();
                return;
            }
            if primary_port(&mut sentinel)
                .await
                .is_some_and(|now| now != port)
            {
                running.abort();
                break;
            }
        }
    }
}

/// One region's load: `per_s` calls a second, each one pipeline of every limit's
/// `RL.REGIONAL` on the region's own server; every admission logged.
async fn load(
    region: usize,
    port: u16,
    per_s: u64,
    limits: Vec<Vec<String>>,
    stop: Arc<AtomicBool>,
) -> (Vec<Admission>, LoadStats) {
    let mut stats = LoadStats::default();
    let mut admitted = Vec::new();
    let Ok(mut con) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
    else {
        return (admitted, stats);
    };
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / per_s.max(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        let mut pipe = redis::pipe();
        for words in &limits {
            pipe.cmd("RL.REGIONAL")
                .arg(with_holder(words, region, stats.calls).as_slice());
        }
        let send_us = now_us();
        let started = Instant::now();
        let replies: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut con).await;
        let recv_us = now_us();
        stats.calls += 1;
        let Ok(replies) = replies else {
            stats.errors += 1;
            continue;
        };
        stats
            .round_trips_us
            .push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        for (limit, reply) in replies.iter().enumerate() {
            let Value::Array(fields) = reply else {
                stats.errors += 1;
                continue;
            };
            let why = match fields.get(5) {
                Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::from("?"),
            };
            if matches!(fields.first(), Some(Value::Int(1))) {
                admitted.push(Admission {
                    send_us,
                    recv_us,
                    region,
                    limit,
                    leased: why == "lease",
                });
            }
            *stats.whys.entry(why).or_default() += 1;
        }
    }
    (admitted, stats)
}

/// `RL.REGIONAL`'s p50 / p99 / p99.9 on `server` (µs), from `INFO latencystats`.
fn regional_percentiles(server: &Server) -> Option<(f64, f64, f64)> {
    let mut con = server.conn();
    let line = info_field(
        &mut con,
        "latencystats",
        "latency_percentiles_usec_rl.regional",
    )?;
    let value = |name: &str| -> Option<f64> {
        line.split(',')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .and_then(|text| text.parse().ok())
    };
    Some((value("p50")?, value("p99")?, value("p99.9")?))
}

/// The faults, at fixed fractions of the run: cuts of the hot region, the second, the hot
/// again and the third (each blackholed for 5 % of the run, at least 1.5 s, then reset);
/// `SIGSTOP` of home's primary for 1 s twice; one Sentinel failover between them.
fn inject(
    duration: &Duration,
    started: Instant,
    proxies: &[Vec<(u16, Proxy)>],
    home: &[Server],
    sentinels: &[Sentinel],
) -> Vec<Fault> {
    let sentinel = &sentinels[0];
    let cut_for = (*duration / 20).max(Duration::from_millis(1500));
    let stall_for = Duration::from_secs(1);
    let plan: [(u32, &str); 7] = [
        (10, "cut 0"),
        (22, "stall"),
        (32, "cut 1"),
        (45, "failover"),
        (60, "cut 0"),
        (72, "stall"),
        (85, "cut 2"),
    ];
    let mut faults = Vec::new();
    for (percent, what) in plan {
        let at = *duration * percent / 100;
        std::thread::sleep(at.saturating_sub(started.elapsed()));
        let from_us = now_us();
        let (kind, described) = match what.split_once(' ') {
            Some(("cut", region)) => {
                let region: usize = region.parse().unwrap();
                for (_, proxy) in &proxies[region] {
                    proxy.set(LinkFault::Blackhole);
                }
                std::thread::sleep(cut_for);
                for (_, proxy) in &proxies[region] {
                    proxy.set(LinkFault::None);
                    proxy.reset_all();
                }
                (
                    FaultKind::Cut(region),
                    format!("region {region} cut from home (blackholed, then reset)"),
                )
            }
            _ if what == "stall" => {
                let primary = sentinel.primary_port().unwrap_or(0);
                let node = home
                    .iter()
                    .find(|node| node.port == primary)
                    .unwrap_or(&home[0]);
                let paused = node.pause();
                std::thread::sleep(stall_for);
                drop(paused);
                (
                    FaultKind::Stall,
                    format!(
                        "home primary {primary} stopped (SIGSTOP) for {} ms",
                        stall_for.as_millis()
                    ),
                )
            }
            _ => {
                let met = wait_until(Duration::from_secs(20), || Sentinel::have_met(sentinels));
                assert!(met, "the Sentinels did not meet each other in 20 s");
                let knows_replica = wait_until(Duration::from_secs(20), || {
                    sentinels
                        .iter()
                        .all(|sentinel| sentinel.replicas().is_some_and(|known| known > 0))
                });
                assert!(knows_replica, "the Sentinels did not find home's replica");
                let before = sentinel.primary_port();
                let mut con = sentinel.conn().expect("the Sentinel");
                let asked = wait_until(Duration::from_secs(10), || {
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(HOME)
                        .query::<()>(&mut con)
                        .is_ok()
                });
                assert!(asked, "SENTINEL FAILOVER was refused for 10 s");
                let moved = wait_until(Duration::from_secs(20), || {
                    sentinel
                        .primary_port()
                        .is_some_and(|now| Some(now) != before)
                });
                assert!(moved, "the Sentinel did not promote the replica");
                (
                    FaultKind::Failover,
                    format!(
                        "Sentinel failover: home primary {} → {}",
                        before.unwrap_or(0),
                        sentinel.primary_port().unwrap_or(0)
                    ),
                )
            }
        };
        say(&format!(
            "{:>5.1} s: {described}",
            started.elapsed().as_secs_f64()
        ));
        faults.push(Fault {
            from_us,
            to_us: now_us(),
            kind,
            what: described,
        });
    }
    faults
}

/// `admissions.log` (send_us recv_us region limit units floor|lease) and `faults.log` in the
/// run's directory, to check again or read.
fn write_logs(outcome: &Outcome) {
    let mut text = String::new();
    for admission in &outcome.admissions {
        text.push_str(&format!(
            "{} {} {} {} 1 {}\n",
            admission.send_us,
            admission.recv_us,
            admission.region,
            outcome.limits[admission.limit].name,
            if admission.leased { "lease" } else { "floor" }
        ));
    }
    let _ = std::fs::write(outcome.dir.join("admissions.log"), text);
    let faults: String = outcome
        .faults
        .iter()
        .map(|fault| format!("{} {} {}\n", fault.from_us, fault.to_us, fault.what))
        .collect();
    let _ = std::fs::write(outcome.dir.join("faults.log"), faults);
}
