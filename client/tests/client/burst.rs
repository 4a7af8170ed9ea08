//! "A healthy Redis decides" (issue 36, item 1): a burst of 1,000 concurrent checks from one
//! process on a token bucket of 5, on the default settings, with the machine loaded by a CPU
//! burner on both cores, admits exactly 5 and every decision comes from the store (a store
//! call or the deny cache remembering one), on a multi-thread and on a current-thread
//! runtime. The fallback is for a store that does not answer, never for a caller whose own
//! runtime is late.

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_client::store::RedisStore;
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Outcome, Policy, RateLimiter, Source};
use redis_ratelimit_testkit::server::Server;

/// Busy-loop child processes, one per core; killed by pid when dropped (even when the test
/// fails).
struct Burners(Vec<Child>);

impl Burners {
    fn start(count: usize) -> Burners {
        Burners(
            (0..count)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("sh for a CPU burner")
                })
                .collect(),
        )
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

const CHECKS: usize = 1_000;
const CAPACITY: u64 = 5;

/// Fires `CHECKS` concurrent checks on one limiter (default settings) on `runtime`, all
/// spawned before any is awaited; returns (admitted, decisions not from the store).
fn burst(runtime: &tokio::runtime::Runtime, server: &Server) -> (usize, Vec<Outcome>, Duration) {
    runtime.block_on(async {
        let store = RedisStore::new(&format!("redis://127.0.0.1:{}/", server.port)).unwrap();
        store.connect().await.unwrap();
        let policy = Policy::builder("api")
            .limit(
                Limit::new(
                    "bucket",
                    Algorithm::token_bucket(CAPACITY, Duration::from_secs(3600)).unwrap(),
                    "burst:{key}",
                )
                .unwrap(),
            )
            .build()
            .unwrap();
        let limiter = Arc::new(RateLimiter::builder(store).policy(policy).build().unwrap());
        let inputs = Arc::new(Inputs::new().with("key", "k"));
        let started = std::time::Instant::now();
        let checks: Vec<_> = (0..CHECKS)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                let inputs = Arc::clone(&inputs);
                tokio::spawn(async move { limiter.check("api", &inputs).await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        let mut not_from_store = Vec::new();
        for check in checks {
            let decision = check.await.unwrap();
            admitted += usize::from(decision.allowed);
            if !matches!(decision.source, Source::Store(_) | Source::Cache(_)) {
                not_from_store.push(decision.outcome);
            }
        }
        (admitted, not_from_store, started.elapsed())
    })
}

fn assert_exact(runtime: tokio::runtime::Runtime, flavor: &str) {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    let _burners = Burners::start(2);
    let (admitted, not_from_store, took) = burst(&runtime, &server);
    println!(
        "burst ({flavor}): {CHECKS} checks on a bucket of {CAPACITY}, 2 CPU burners: \
         admitted {admitted}, {} not from the store, all decided in {took:?}",
        not_from_store.len()
    );
    assert!(
        not_from_store.is_empty(),
        "{flavor}: {} of {CHECKS} decisions came from the fallback with Redis healthy \
         (outcomes {:?})",
        not_from_store.len(),
        &not_from_store[..not_from_store.len().min(5)]
    );
    assert_eq!(admitted, CAPACITY as usize, "{flavor}: admitted");
}

#[test]
fn a_burst_on_a_loaded_machine_is_decided_by_the_store_multi_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    assert_exact(runtime, "multi-thread");
}

#[test]
fn a_burst_on_a_loaded_machine_is_decided_by_the_store_current_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_exact(runtime, "current-thread");
}
