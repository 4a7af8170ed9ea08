//! The fleet's top denied keys on a real server: three replicas (three limiters, each with
//! its own reporter writing to Redis once a second) check a Zipf(1.1) stream over 100,000
//! keys against a limit of one per hour, so every check after a key's first is denied (by
//! the store, then by the deny cache). Read back merged: the true top 10 is found, every
//! count is within its stated bound, and each replica wrote at most once a second. The
//! figures in docs/operating.md are this test's output (`--nocapture`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit_client::store::RedisStore;
use redis_ratelimit_client::top::report::{self, Report};
use redis_ratelimit_client::top::summary::SpaceSaving;
use redis_ratelimit_client::top::{TopKeys, TopQuery};
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};
use redis_ratelimit_testkit::server::{Server, info_field};

/// Distinct keys drawn from.
const KEYS: usize = 100_000;
/// The Zipf exponent.
const EXPONENT: f64 = 1.1;
/// Checks per replica.
const CHECKS_PER_REPLICA: usize = 100_000;
const REPLICAS: usize = 3;
/// The summaries' size (the default).
const CAPACITY: usize = 128;

/// Draws key ranks 0..n with probability ∝ 1 / (rank + 1)^s, by inverse CDF.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|rank| {
                total += (rank as f64).powf(-exponent);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn draw(&self, uniform: f64) -> usize {
        let target = uniform * self.cumulative.last().copied().unwrap_or(0.0);
        self.cumulative
            .partition_point(|&at| at < target)
            .min(self.cumulative.len() - 1)
    }
}

/// A seeded generator of uniform numbers in [0, 1) (SplitMix64).
struct Uniform(u64);

impl Uniform {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn replica(server: &Server) -> RateLimiter {
    let store = RedisStore::new(&format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let hourly = Algorithm::fixed_window(1, Duration::from_secs(3_600)).unwrap();
    let policy = Policy::builder("api")
        .limit(Limit::new("per-tenant", hourly, "t:{tenant}").unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    RateLimiter::builder(store)
        .policy(policy)
        .top_keys(TopKeys {
            capacity: CAPACITY,
            ..TopKeys::default()
        })
        .build()
        .unwrap()
}

/// One replica's checks of its stream: the keys it saw denied, in order.
async fn run_replica(limiter: RateLimiter, seed: u64, zipf: Arc<Zipf>) -> Vec<String> {
    let mut uniform = Uniform(seed);
    let mut denied = Vec::new();
    for _ in 0..CHECKS_PER_REPLICA {
        let tenant = format!("tenant-{}", zipf.draw(uniform.next()));
        let decision = limiter
            .check("api", &Inputs::new().with("tenant", &tenant))
            .await
            .unwrap();
        if !decision.allowed {
            denied.push(format!("t:{tenant}"));
        }
    }
    // What the reporter had not written yet (it writes every second).
    limiter.report_top().await.unwrap();
    denied
}

#[test]
fn the_fleet_finds_the_true_top_10_within_the_stated_bound() {
    let _heavy = crate::exclusive();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(three_replicas());
}

async fn three_replicas() {
    let server = Server::start(&[]);
    let zipf = Arc::new(Zipf::new(KEYS, EXPONENT));
    let limiters: Vec<RateLimiter> = (0..REPLICAS).map(|_| replica(&server)).collect();
    let hsets_before = hset_calls(&server);
    let started = Instant::now();
    let runs: Vec<_> = limiters
        .iter()
        .enumerate()
        .map(|(index, limiter)| {
            tokio::spawn(run_replica(
                limiter.clone(),
                0x5EED + index as u64,
                Arc::clone(&zipf),
            ))
        })
        .collect();
    let mut streams = Vec::new();
    for run in runs {
        streams.push(run.await.unwrap());
    }
    let seconds = started.elapsed().as_secs_f64();
    let hsets = hset_calls(&server) - hsets_before;

    let mut truth: HashMap<&str, u64> = HashMap::new();
    for key in streams.iter().flatten() {
        *truth.entry(key.as_str()).or_default() += 1;
    }
    let denials: u64 = truth.values().sum();
    let mut ranked: Vec<(&str, u64)> = truth.iter().map(|(k, v)| (*k, *v)).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let tenth = ranked[9].1;

    let top = limiters[0]
        .top_denied(&TopQuery::new("api").minutes(5).count(10))
        .await
        .unwrap();
    assert_eq!(top.len(), 1, "one limit denied: {top:?}");
    let top = &top[0];
    assert_eq!(top.limit, "per-tenant");
    assert_eq!(
        top.denials, denials,
        "every denial counted, every replica reported"
    );
    assert!(
        top.bound <= top.bound_limit,
        "{} > {}",
        top.bound,
        top.bound_limit
    );
    assert_eq!(top.keys.len(), 10);
    let mut worst_error = 0;
    for key in &top.keys {
        let true_count = truth.get(key.key.as_str()).copied().unwrap_or(0);
        assert!(
            key.lower <= true_count && true_count <= key.count,
            "{}: true {true_count} outside {}..={}",
            key.key,
            key.lower,
            key.count
        );
        assert!(
            key.count - key.lower <= top.bound,
            "{key:?} past the bound {}",
            top.bound
        );
        assert!(
            true_count >= tenth,
            "{} (true {true_count}) is not in the true top 10 (10th: {tenth})",
            key.key
        );
        worst_error = worst_error.max(key.count - true_count);
    }
    let true_top: Vec<&str> = ranked.iter().take(10).map(|(key, _)| *key).collect();
    let found = top
        .keys
        .iter()
        .filter(|key| true_top.contains(&key.key.as_str()))
        .count();
    // Any key denied more often than the bound is listed somewhere in the summaries: the
    // true top 10 here are far above it.
    assert!(
        tenth > top.bound,
        "10th true count {tenth} within the bound {}",
        top.bound
    );

    // Bytes: each stored summary (the JSON value), and one in memory.
    let mut con = server.conn();
    let mut stored: Vec<usize> = Vec::new();
    for key in report::window_keys(unix_now(), 5) {
        let fields: HashMap<String, String> =
            redis::cmd("HGETALL").arg(&key).query(&mut con).unwrap();
        for value in fields.values() {
            let report = Report::decode(value).unwrap();
            assert_eq!(report.client, "rust");
            stored.push(value.len());
        }
    }
    let mut memory = SpaceSaving::new(CAPACITY);
    for key in &streams[0] {
        memory.add(key, 1);
    }
    let distinct = truth.len();
    let writes_per_replica_s = hsets as f64 / REPLICAS as f64 / seconds;
    println!(
        "top keys: Zipf({EXPONENT}) over {KEYS} keys, {REPLICAS} replicas x {CHECKS_PER_REPLICA} checks \
         in {seconds:.1} s: {denials} denials of {distinct} keys; recall of the true top 10: \
         {found}/10; worst count error {worst_error} (bound {}, a priori denials/capacity {}); \
         top-10 share {:.3}; stored summaries: {} (mean {} B, max {} B); one summary in memory: \
         {} B; HSET writes: {hsets}, {writes_per_replica_s:.2} per replica per second",
        top.bound,
        top.bound_limit,
        top.top10_share,
        stored.len(),
        stored.iter().sum::<usize>() / stored.len().max(1),
        stored.iter().max().copied().unwrap_or(0),
        memory.bytes(),
    );
    assert_eq!(found, 10, "the true top 10 found");
    // One write a second at most, and the final one each replica made by hand.
    assert!(
        hsets as f64 <= REPLICAS as f64 * (seconds.ceil() + 1.0),
        "{hsets} writes from {REPLICAS} replicas in {seconds:.1} s"
    );
}

fn hset_calls(server: &Server) -> u64 {
    let mut con = server.conn();
    info_field(&mut con, "commandstats", "cmdstat_hset")
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|part| part.strip_prefix("calls="))
                .and_then(|calls| calls.parse().ok())
        })
        .unwrap_or(0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
