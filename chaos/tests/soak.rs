//! The chaos soak: a 3+3 cluster in containers, a fleet of client processes over every
//! algorithm (each limiter offered 0.5×, 1× and 3× its rate on a seeded schedule; some
//! failing closed, some deciding locally from their share, some failing open), and a fault
//! every few seconds drawn at random (seeded, targets chosen by address) from SIGKILL of a
//! primary, SIGSTOP/SIGCONT, a partition, a restart, `CLUSTER FAILOVER`, and latency, stalls
//! and resets on the link of the proxied shard's primary (through the project's proxy). The
//! checker then proves every limiter kept its algorithm's true bound over every interval,
//! beyond at most the README's allowance for each overlapping fault that could lose its
//! writes and the client's for each fallback episode; every local fallback kept its share;
//! every check was answered in time; every client went back to the store once the last
//! fault healed; no node crashed or logged a module error; every replica is identical to its
//! primary; and memory is back to its baseline once the limiters expired.
//!
//! `SOAK_S` (default 60) is the traffic's duration; `RL_SOAK_SEED` replays a run;
//! `SOAK_PLANT=<name>` plants a bug (`redis_ratelimit_chaos::plant`), and the test then
//! passes only if the checker fails naming the limiters it was planted in. Every log of the
//! run is kept in `target/soak-runs/soak-seed-<seed>[-<plant>]`, which `make soak-check
//! DIR=...` checks again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::io::Write;
use std::time::{Duration, Instant};

use redis_ratelimit_chaos::catalogue;
use redis_ratelimit_chaos::checker::{self, Settings, table};
use redis_ratelimit_chaos::fleet::Fleet;
use redis_ratelimit_chaos::load::{self, Mix};
use redis_ratelimit_chaos::plant::Plant;
use redis_ratelimit_chaos::record::{DecisionRecord, FaultKind, FaultRecord, Source, now_us};
use redis_ratelimit_chaos::run::{self, RunConfig};
use redis_ratelimit_chaos::setup::{Random, image};
use redis_ratelimit_chaos::soak_cluster::SoakCluster;

const CLIENTS: u32 = 3;
const NODE_TIMEOUT_MS: u64 = 2000;
const TIMEOUT_MS: u64 = 250;
/// What a check may take beyond its store timeout before it counts as a hang. On the shared
/// 2-core machine the first 600 s run saw 54 of 582,372 checks answered 1.25 to 2.46 s after
/// they were sent, 53 of them fallbacks (the 250 ms timeout had fired): two client processes
/// stalled within the same half millisecond, while containers were killed under a load
/// average of 8. That is the host not scheduling the processes, not the client waiting.
const MARGIN_MS: u64 = 3000;
/// How far a node's dataset memory may end above its baseline once every limiter expired.
const MEMORY_SLACK_BYTES: i64 = 1024 * 1024;
/// No fault starts in the run's last seconds, so the last one heals while traffic runs (a
/// kill takes up to about 15 s: failover, restart, resync).
const QUIET_END: Duration = Duration::from_secs(15);

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn chaos_soak() {
    let Some(image) = image() else { return };
    let seconds: u64 = std::env::var("SOAK_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
        .max(20);
    let seed: u64 = std::env::var("RL_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_us() % 1_000_000);
    let plant = std::env::var("SOAK_PLANT")
        .ok()
        .filter(|name| !name.is_empty())
        .map(|name| Plant::parse(&name).unwrap_or_else(|error| panic!("SOAK_PLANT: {error}")));
    let limiters = catalogue::limiters();
    let shares = load::time_shares(seed, limiters.len(), seconds * 1000, Mix::Seeded);
    say(&format!(
        "soak: {seconds} s, seed {seed} (RL_SOAK_SEED={seed} replays the fault schedule, its \
         targets and the load: 0.5×/1×/3× the rate for {}/{}/{} ‰ of the time){}",
        shares[0],
        shares[1],
        shares[2],
        plant.map_or(String::new(), |p| format!("; planted: {}", p.what()))
    ));
    let started = Instant::now();
    let dir = run::fresh_dir("soak", seed, plant).expect("run directory");
    say(&format!("soak: logs kept in {}", dir.display()));
    let settings = Settings {
        node_timeout_ms: NODE_TIMEOUT_MS,
        clients: u64::from(CLIENTS),
        timeout_ms: TIMEOUT_MS,
        margin_ms: MARGIN_MS,
    };
    RunConfig {
        seed,
        seconds,
        settings,
        plant,
        load: Mix::Seeded,
    }
    .write(&dir)
    .expect("run.conf");
    let cluster = SoakCluster::start(&image, NODE_TIMEOUT_MS);
    let keys: Vec<(String, String)> = limiters.iter().map(|l| (l.name.clone(), l.key())).collect();

    let mut args = vec![
        "--cluster".to_string(),
        cluster.client_addresses().join(","),
        "--clients".to_string(),
        CLIENTS.to_string(),
        "--timeout-ms".to_string(),
        TIMEOUT_MS.to_string(),
        "--seed".to_string(),
        seed.to_string(),
    ];
    if let Some(plant) = plant {
        args.extend(["--plant".to_string(), plant.name().to_string()]);
    }
    let at_three = |args: &[String]| {
        let mut args = args.to_vec();
        args.extend(["--load".to_string(), "3".to_string()]);
        args
    };
    // A warm-up, then the memory baseline once its limiters expired: a server's first calls
    // allocate for good what it reuses later (measured: about 120 KB on a fresh server,
    // unchanged by later rounds), which is not a leak.
    let warm_up = Fleet::start(
        env!("CARGO_BIN_EXE_chaos-load"),
        &at_three(&args),
        CLIENTS,
        Duration::from_secs(3),
        &dir.join(run::WARM_UP),
    );
    warm_up.finish(Duration::from_secs(60));
    cluster.growth_after_expiry(&[0; 6]);
    let baseline = cluster.datasets();

    let duration = Duration::from_secs(seconds);
    let fleet = Fleet::start(
        env!("CARGO_BIN_EXE_chaos-load"),
        &args,
        CLIENTS,
        duration,
        &dir.join(run::MAIN),
    );
    let traffic_start = Instant::now();

    // Every kind once in a seeded order, then kinds drawn at random.
    let mut random = Random::new(seed);
    let mut schedule: Vec<FaultKind> = FaultKind::ALL.to_vec();
    for i in (1..schedule.len()).rev() {
        let j = random.below(i as u64 + 1) as usize;
        schedule.swap(i, j);
    }
    let mut faults: Vec<FaultRecord> = Vec::new();
    // The schedule is the soak: 3 s of clean traffic, then faults 1 to 3 s apart (seeded)
    // until QUIET_END before the end of a run of fixed length.
    std::thread::sleep(Duration::from_secs(3));
    while traffic_start.elapsed() + QUIET_END < duration {
        let kind = schedule
            .get(faults.len())
            .copied()
            .unwrap_or_else(|| FaultKind::ALL[random.below(FaultKind::ALL.len() as u64) as usize]);
        let mut draw = |below: u64| random.below(below);
        let fault = cluster.inject(kind, &mut draw, &keys);
        say(&format!(
            "soak: {:>5.1} s  {}",
            traffic_start.elapsed().as_secs_f64(),
            fault.line()
        ));
        faults.push(fault);
        // Written after every fault: a run that fails later keeps its fault log.
        run::write_faults(&dir, &faults).expect("faults.log");
        std::thread::sleep(Duration::from_millis(1000 + random.below(2000)));
    }
    let decisions = fleet.finish(duration + Duration::from_secs(60));
    let stragglers = not_recovered(&decisions, &faults);
    // A last short round on the healed cluster at 3× the rates, so that every limiter's key
    // exists when the replicas are compared, whatever the last fault left (its state is
    // still the one the faults went through: the long-lived limiters carry it for 30 s); and
    // fresh clients on a whole cluster must be decided by the store.
    cluster.wait_healthy();
    let last_round = Fleet::start(
        env!("CARGO_BIN_EXE_chaos-load"),
        &at_three(&args),
        CLIENTS,
        Duration::from_secs(2),
        &dir.join(run::LAST_ROUND),
    )
    .finish(Duration::from_secs(60));
    let off_store = last_round
        .iter()
        .filter(|d| matches!(d.source, Source::Fallback | Source::Error))
        .count();
    assert!(
        off_store * 10 < last_round.len(),
        "after the faults healed, {off_store} of {} checks were not decided by the store",
        last_round.len()
    );
    let compared = cluster.assert_replicas_identical();

    let report = checker::check(&limiters, &decisions, &faults, settings);
    let text = table::markdown(&report, &faults);
    std::fs::write(dir.join(run::REPORT), &text).expect("report.md");
    say(&format!(
        "soak report ({seconds} s, seed {seed}; `make soak-check DIR={}` checks it again):\n{text}",
        dir.display()
    ));

    let growth = cluster.growth_after_expiry(&baseline);
    let troubles = cluster.troubles_in_logs();
    say(&format!(
        "soak: replicas identical ({} keys compared by DEBUG DIGEST-VALUE: {compared:?}); \
         dataset memory after expiry vs baseline (bytes): {growth:?}; {} s in all",
        compared.len(),
        started.elapsed().as_secs()
    ));
    assert!(
        troubles.is_empty(),
        "crashes or module errors in the logs:\n{}",
        troubles.join("\n")
    );
    assert!(
        stragglers.is_empty(),
        "decided only by the fallback after the last fault healed (client, limiter, \
         seconds between the heal and the client's last decision): {stragglers:?}"
    );
    assert!(
        compared.len() >= limiters.len() / 2,
        "the replicas' comparison found only {compared:?} right after the last round"
    );
    // `used_memory_dataset` moves by a few hundred KB with a node's history (a restart, a
    // change of role: measured −170 KB to +270 KB with no limiter left); a leak of even 50
    // bytes per call would exceed 1 MiB over the ~20,000 calls a primary serves in 60 s.
    assert!(
        growth.iter().all(|bytes| *bytes <= MEMORY_SLACK_BYTES),
        "memory not back to its baseline after every limiter expired: {growth:?} bytes"
    );
    assert!(
        report.decisions > 1000,
        "too little traffic: {} decisions",
        report.decisions
    );
    let stored = report.by_source.get("store").map_or(0, |(a, d)| a + d);
    assert!(
        stored * 2 > report.decisions,
        "most decisions should come from the store: {:?}",
        report.by_source
    );
    let broken = report
        .violations
        .iter()
        .map(|v| v.what.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    match plant {
        None => assert!(
            report.violations.is_empty(),
            "bounds broken (seed {seed}; logs in {}):\n{broken}",
            dir.display()
        ),
        Some(plant) => {
            let planted = plant.limiters(&limiters);
            let named = report.limiters_named();
            say(&format!(
                "soak: planted {}: the checker named {named:?}",
                plant.name()
            ));
            assert!(
                !named.is_empty() && named.iter().all(|name| planted.contains(name)),
                "planted {} in {planted:?}, the checker named {named:?}:\n{broken}",
                plant.name()
            );
        }
    }
}

/// How long after the last fault healed every client must be decided by the store (or a
/// lease, or a cached store denial) again: a reconnection and a breaker probe (250 ms timeout, probes every ~1 s).
const RECOVERY: Duration = Duration::from_secs(3);

/// The `(client, limiter)` pairs whose every decision after the last fault healed (plus
/// [`RECOVERY`]) came from the fallback or an error, when the traffic went on at least
/// 2 × [`RECOVERY`] after that heal: a client stuck off the store although the cluster is
/// whole again. Printed with how long the traffic ran after the heal.
fn not_recovered(decisions: &[DecisionRecord], faults: &[FaultRecord]) -> Vec<(u32, String, f64)> {
    use std::collections::BTreeMap;
    let healed_us = faults.iter().map(|f| f.end_us).max().unwrap_or(0);
    let recovery_us = RECOVERY.as_micros() as u64;
    let mut last: BTreeMap<(u32, String), (u64, bool)> = BTreeMap::new();
    for d in decisions {
        let entry = last
            .entry((d.client, d.limiter.clone()))
            .or_insert((0, false));
        entry.0 = entry.0.max(d.recv_us);
        if d.send_us > healed_us + recovery_us
            && !matches!(d.source, Source::Fallback | Source::Error)
        {
            entry.1 = true;
        }
    }
    let stuck: Vec<(u32, String, f64)> = last
        .into_iter()
        .filter(|(_, (last_us, _))| *last_us > healed_us + 2 * recovery_us)
        .filter(|(_, (_, recovered))| !recovered)
        .map(|((client, limiter), (last_us, _))| {
            (client, limiter, (last_us - healed_us) as f64 / 1e6)
        })
        .collect();
    say(&format!(
        "soak: after the last fault healed, {} (client, limiter) pairs decided only by the \
         fallback: {stuck:?}",
        stuck.len()
    ));
    stuck
}
