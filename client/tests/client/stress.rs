//! The client under stress: four runs on real processes (Redis with the module,
//! the demo service, this test's own bounded loopback load generator), each asserting that
//! what the fleet admitted is within the algorithm's allowance plus the stated bound
//! (README, Guarantees):
//!
//! 1. 16 connections, the default timeout, Redis healthy: no fallback decision at all, and
//!    admitted ≤ allowance;
//! 2. the same with 4 connections;
//! 3. leases of 10 under 16 connections: admitted ≤ allowance + the units outstanding in
//!    leases (≤ replicas × max claim), no fallback, fewer Redis calls per request than 1/5;
//! 4. a pre-exhausted key while Redis is stopped and resumed (`SIGSTOP`/`SIGCONT`) four
//!    times, under 8 connections: admitted ≤ the refill over the run (+1 for rounding).
//!
//! The figures are printed (`cargo test -p redis-ratelimit-client --test client stress --
//! --nocapture --test-threads=1`), with Redis's own CPU per request (`INFO cpu`).
//! `RL_STRESS_S=20` runs the healthy runs for 20 s each (default 5).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::server::{Server, info_field};

use super::fleet::{Client, Replica, fleet, metric, module_calls, url};

/// The bucket: 100 tokens, refilled over 60 s.
const LIMIT: u64 = 100;
const WINDOW: &str = "60";

/// What a load run saw.
struct Load {
    admitted: u64,
    denied: u64,
    elapsed: Duration,
}

/// Sends `GET /` for `api_key` on `connections` keep-alive connections (spread over the
/// replicas) until `duration` has passed; every connection waits for each answer before
/// sending the next request, so at most `connections` are in flight.
fn load(replicas: &[Replica], api_key: &str, connections: usize, duration: Duration) -> Load {
    let addrs: Vec<SocketAddr> = replicas.iter().map(|replica| replica.addr).collect();
    let started = Instant::now();
    let deadline = started + duration;
    let counts: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..connections)
            .map(|index| {
                let addr = addrs[index % addrs.len()];
                scope.spawn(move || {
                    let mut client = Client::connect(addr);
                    let (mut admitted, mut denied) = (0, 0);
                    while Instant::now() < deadline {
                        match client.get("/", api_key).status {
                            200 => admitted += 1,
                            429 => denied += 1,
                            other => panic!("unexpected status {other}"),
                        }
                    }
                    (admitted, denied)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    Load {
        admitted: counts.iter().map(|c| c.0).sum(),
        denied: counts.iter().map(|c| c.1).sum(),
        elapsed: started.elapsed(),
    }
}

/// A token bucket's allowance over `elapsed` from full: the capacity plus every token that
/// refills meanwhile (100 per 60 s).
fn allowance(elapsed: Duration) -> u64 {
    LIMIT + (elapsed.as_micros() as u64 * LIMIT) / (60 * 1_000_000)
}

fn fallbacks(replicas: &[Replica]) -> u64 {
    metric(
        replicas,
        &["ratelimit_decisions_total", "source=\"fallback\""],
    ) as u64
}

/// Redis's CPU so far (user + system seconds, `INFO cpu`), as an operator reads it.
fn redis_cpu_s(server: &Server) -> f64 {
    let mut con = server.conn();
    ["used_cpu_user", "used_cpu_sys"]
        .iter()
        .filter_map(|field| info_field(&mut con, "cpu", field)?.parse::<f64>().ok())
        .sum()
}

/// One healthy run: no fallback decision, admitted within the allowance plus `bound`.
fn healthy_run(server: &Server, connections: usize, extra: &[&str], bound: u64, run: &str) {
    let replicas = fleet(
        &url(server),
        1,
        LIMIT,
        &[&["--window", WINDOW], extra].concat(),
    );
    let key = format!("stress-{run}");
    let seconds = std::env::var("RL_STRESS_S")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(5);
    let seen = load(&replicas, &key, connections, Duration::from_secs(seconds));
    let from_fallback = fallbacks(&replicas);
    let allowance = allowance(seen.elapsed);
    println!(
        "stress {run}: -c{connections} {extra:?} {:.1} s: admitted {} / allowance {allowance} \
         (+{bound} stated bound), from the fallback {from_fallback}, denied {}",
        seen.elapsed.as_secs_f64(),
        seen.admitted,
        seen.denied
    );
    assert_eq!(
        from_fallback, 0,
        "{run}: a healthy store produced fallback decisions"
    );
    assert!(
        seen.admitted <= allowance + bound,
        "{run}: admitted {} > allowance {allowance} + {bound}",
        seen.admitted
    );
    assert!(seen.admitted >= LIMIT, "{run}: the quota was not even used");
}

#[test]
fn healthy_store_under_16_connections_never_falls_back() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    healthy_run(&server, 16, &[], 0, "c16");
    healthy_run(&server, 4, &[], 0, "c4");
    // Leases of 10, claims up to 40 when many requests wait: one replica holds at most 40.
    healthy_run(&server, 16, &["--lease", "10"], 40, "c16-lease10");
}

#[test]
fn leases_cut_redis_calls_and_cpu_per_request_on_a_hot_key() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    // A quota nobody reaches: every request is admitted, so each costs Redis a call or a
    // lease spend (a denied request served from the deny cache would cost nothing).
    let mut figures = Vec::new();
    for extra in [&[][..], &["--lease", "10"][..]] {
        let replicas = fleet(&url(&server), 1, 1_000_000_000, extra);
        let (calls, cpu) = (module_calls(&server), redis_cpu_s(&server));
        let seen = load(&replicas, "hot", 16, Duration::from_secs(3));
        let calls = module_calls(&server) - calls;
        let cpu_us = (redis_cpu_s(&server) - cpu) * 1e6 / seen.admitted as f64;
        let per_request = calls as f64 / seen.admitted as f64;
        println!(
            "hot key -c16 {extra:?}: {} requests, {per_request:.3} module calls per request, \
             Redis CPU {cpu_us:.2} us per request (INFO cpu)",
            seen.admitted
        );
        if fallbacks(&replicas) > 0 {
            let text = Client::connect(replicas[0].addr).get("/metrics", "-").body;
            let lines: Vec<&str> = text
                .lines()
                .filter(|line| line.starts_with("ratelimit") && !line.contains("_bucket"))
                .collect();
            panic!(
                "a healthy store produced fallback decisions:\n{}",
                lines.join("\n")
            );
        }
        figures.push(per_request);
    }
    assert!(
        figures[1] * 5.0 <= figures[0],
        "leases of 10 under 16 connections: {:.3} calls per request against {:.3}",
        figures[1],
        figures[0]
    );
}

#[test]
fn a_flapping_store_over_an_exhausted_key_admits_only_the_refill() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    let replicas = fleet(&url(&server), 1, LIMIT, &["--window", WINDOW]);
    // Exhaust the key through the store.
    let mut client = Client::connect(replicas[0].addr);
    let started = Instant::now();
    let mut exhausted = 0;
    while client.get("/", "flap").status == 200 {
        exhausted += 1;
        assert!(exhausted <= LIMIT + 10, "the key is never exhausted");
    }
    assert!(
        fallbacks(&replicas) == 0,
        "the store did not decide the quota"
    );
    let flaps = std::thread::scope(|scope| {
        let flapper = scope.spawn(|| {
            // The flapping is what is tested: 1.5 s stopped, 1.5 s running, four times.
            for _ in 0..4 {
                let resume = server.pause();
                std::thread::sleep(Duration::from_millis(1500));
                drop(resume);
                std::thread::sleep(Duration::from_millis(1500));
            }
        });
        let seen = load(&replicas, "flap", 8, Duration::from_secs(12));
        flapper.join().unwrap();
        seen
    });
    let elapsed = started.elapsed();
    // The bucket was full at the first request; everything refilled since is the allowance.
    let refill = allowance(elapsed) - LIMIT;
    let admitted = exhausted + flaps.admitted;
    let from_fallback = fallbacks(&replicas);
    let fallback_admitted = metric(&replicas, &["outcome=\"fallback_allowed\""]);
    let owed = metric(&replicas, &["ratelimit_fallback_units_owed_total"]);
    let settled = metric(&replicas, &["ratelimit_fallback_units_settled_total"]);
    let opened = metric(&replicas, &["ratelimit_circuit_opened_total"]);
    println!(
        "stress flap: 4 x 1.5 s SIGSTOP / 1.5 s SIGCONT, -c8 {:.1} s: admitted {} after the \
         quota / refill {refill} (allowance {}), from the fallback {from_fallback} decisions, \
         {fallback_admitted} admitted ({owed} units owed, {settled} settled with the store), \
         circuit opened {opened} times",
        flaps.elapsed.as_secs_f64(),
        admitted - LIMIT.min(admitted),
        allowance(elapsed),
    );
    assert!(
        admitted <= allowance(elapsed) + 1,
        "admitted {admitted} > allowance {} + 1: the flapping store granted shares again",
        allowance(elapsed)
    );
    assert!(from_fallback > 0, "Redis stopped, yet no fallback decision");
}
