//! The checker bites: a short run of the soak's fleet (3 `chaos-load` processes over every
//! limiter of the catalogue, 3× their rate) against one loopback `redis-server` with the
//! module, stopped (SIGSTOP) for 2.5 s in the middle so that every fallback decides, once
//! clean and once per planted bug (`redis_ratelimit_chaos::plant`). The clean run must pass
//! the checker, with the local and open fallbacks admitting; each planted run must fail it,
//! naming only limiters the bug was planted in. The logs are kept like the soak's
//! (`planted-seed-<seed>-<plant>` under `target/soak-runs`); `RL_SOAK_SEED` replays a seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::io::Write;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use redis_ratelimit_chaos::catalogue;
use redis_ratelimit_chaos::checker::{self, Report, Settings, table};
use redis_ratelimit_chaos::fleet::Fleet;
use redis_ratelimit_chaos::load::Mix;
use redis_ratelimit_chaos::plant::Plant;
use redis_ratelimit_chaos::record::{FaultKind, FaultRecord, Source, now_us};
use redis_ratelimit_chaos::run::{self, RunConfig};
use redis_ratelimit_client::Fallback;
use redis_ratelimit_testkit::server::{Server, info_field};

const CLIENTS: u32 = 3;
const RUN: Duration = Duration::from_secs(8);
const STOP_AT: Duration = Duration::from_millis(2500);
const STOP_FOR: Duration = Duration::from_millis(2500);

/// One run at a time: each takes most of a shared machine's two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn signal(pid: &str, signal: &str) {
    let status = Command::new("kill").args([signal, pid]).status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "kill {signal} {pid} failed"
    );
}

/// Resumes a stopped server on drop, even when the test panics.
struct Resume(String);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// A short run with `plant`; the checker's report and the faults' log.
fn short_run(plant: Option<Plant>) -> (Report, Vec<FaultRecord>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let seed: u64 = std::env::var("RL_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_us() % 1_000_000);
    let server = Server::start(&[]);
    let pid = info_field(&mut server.conn(), "server", "process_id").expect("process_id");
    let dir = run::fresh_dir("planted", seed, plant).expect("run directory");
    let settings = Settings {
        node_timeout_ms: 2000,
        clients: u64::from(CLIENTS),
        timeout_ms: 250,
        margin_ms: 3000,
    };
    let config = RunConfig {
        seed,
        seconds: RUN.as_secs(),
        settings,
        plant,
        load: Mix::Fixed(3000),
    };
    config.write(&dir).expect("run.conf");
    let mut args = vec![
        "--redis".to_string(),
        format!("redis://127.0.0.1:{}/", server.port),
        "--clients".to_string(),
        CLIENTS.to_string(),
        "--load".to_string(),
        "3".to_string(),
        "--timeout-ms".to_string(),
        settings.timeout_ms.to_string(),
        "--seed".to_string(),
        seed.to_string(),
    ];
    if let Some(plant) = plant {
        args.extend(["--plant".to_string(), plant.name().to_string()]);
    }
    let fleet = Fleet::start(
        env!("CARGO_BIN_EXE_chaos-load"),
        &args,
        CLIENTS,
        RUN,
        &dir.join(run::MAIN),
    );
    // The fault's schedule is the scenario: STOP_AT of traffic on the store, then the server
    // stopped for STOP_FOR (the fallbacks decide), in a run of fixed length.
    std::thread::sleep(STOP_AT);
    let start_us = now_us();
    signal(&pid, "-STOP");
    let resume = Resume(pid.clone());
    std::thread::sleep(STOP_FOR);
    drop(resume);
    let fault = FaultRecord {
        kind: FaultKind::Stop,
        target: format!("127.0.0.1:{}", server.port),
        role: "primary".into(),
        start_us,
        end_us: now_us(),
        detail: format!("SIGSTOP for {} ms", STOP_FOR.as_millis()),
        // One server, no failover: nothing it acknowledged is lost.
        affected: Vec::new(),
        shard: Vec::new(),
    };
    let decisions = fleet.finish(RUN + Duration::from_secs(60));
    let faults = vec![fault];
    run::write_faults(&dir, &faults).expect("faults.log");
    let report = checker::check(&catalogue::limiters(), &decisions, &faults, settings);
    let text = table::markdown(&report, &faults);
    std::fs::write(dir.join(run::REPORT), &text).expect("report.md");
    say(&format!(
        "planted {}: seed {seed}, logs in {}\n{text}",
        plant.map_or("nothing", Plant::name),
        dir.display()
    ));
    (report, faults)
}

/// The checker must fail naming some of the limiters `plant` misbehaves in, and no other.
fn caught(plant: Plant) {
    let (report, _) = short_run(Some(plant));
    let planted = plant.limiters(&catalogue::limiters());
    let named = report.limiters_named();
    say(&format!(
        "planted {} ({}): the checker named {named:?}",
        plant.name(),
        plant.what()
    ));
    assert!(
        !named.is_empty(),
        "the checker missed the planted bug {} ({})",
        plant.name(),
        plant.what()
    );
    let innocent: Vec<&String> = named.iter().filter(|n| !planted.contains(n)).collect();
    assert!(
        innocent.is_empty(),
        "the checker blamed {innocent:?}, where {} planted nothing: {:?}",
        plant.name(),
        report.violations
    );
    let unnamed = report
        .violations
        .iter()
        .filter(|v| v.limiter.is_none())
        .count();
    assert_eq!(unnamed, 0, "{:?}", report.violations);
}

#[test]
fn the_clean_run_passes_with_every_fallback_deciding() {
    let (report, _) = short_run(None);
    assert!(
        report.violations.is_empty(),
        "the clean run broke bounds:\n{}",
        report
            .violations
            .iter()
            .map(|v| v.what.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let fallback = |mode: Fallback| -> u64 {
        report
            .rows
            .iter()
            .filter(|row| row.fallback == mode)
            .map(|row| row.fallback_units)
            .sum()
    };
    assert!(fallback(Fallback::Local) > 0, "no local fallback admitted");
    assert!(fallback(Fallback::Open) > 0, "no open fallback admitted");
    let stored = report
        .by_source
        .get(Source::Store.as_str())
        .map_or(0, |(a, d)| a + d);
    assert!(
        stored * 2 > report.decisions,
        "most decisions should come from the store: {:?}",
        report.by_source
    );
}

#[test]
fn a_sliding_log_over_its_limit_is_caught() {
    caught(Plant::SlidingLogOver);
}

#[test]
fn a_fallback_over_its_share_is_caught() {
    caught(Plant::FallbackShare);
}

#[test]
fn a_fixed_window_granted_twice_is_caught() {
    caught(Plant::FixedRegrant);
}

#[test]
fn a_token_bucket_refilling_fast_is_caught() {
    caught(Plant::BucketFast);
}
