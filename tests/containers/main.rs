//! Container tests: the module's image run as real hosts with their own addresses on private
//! Docker networks (restarts with volumes, SIGKILL, a Redis Cluster, a network partition).
//!
//! Where no Docker engine answers, every test passes after one loud line
//! `CONTAINER TESTS SKIPPED: <why>` on stderr (never a silent pass). The image is
//! `$RL_TEST_IMAGE` (`make containers` builds it once per run from the release module, with
//! the same Dockerfile as `make docker`), default `redis-ratelimit:latest`. The tests run one
//! at a time (they measure timings, and a 2-core machine is small for two clusters).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(clippy::arithmetic_side_effects, missing_docs)]

use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock};

use redis_ratelimit_testkit::docker;

mod cluster;
mod crash;
mod partition;
mod standalone;

/// What a container test needs: the image to run, and the engine to itself.
pub struct Setup {
    pub image: String,
    _serial: MutexGuard<'static, ()>,
}

/// `Some` when a Docker engine answers; `None` (after the one loud skip line of the run)
/// when not. Panics when the engine answers but the image is missing.
pub fn setup() -> Option<Setup> {
    static ENGINE: OnceLock<Result<String, String>> = OnceLock::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    let engine = ENGINE.get_or_init(|| {
        let engine = docker::engine();
        if let Err(why) = &engine {
            // Straight to stderr: the test harness captures eprintln! of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "CONTAINER TESTS SKIPPED: no Docker engine answers ({why})"
            );
        }
        engine
    });
    if engine.is_err() {
        return None;
    }
    let serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let image = std::env::var("RL_TEST_IMAGE")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| "redis-ratelimit:latest".into());
    assert!(
        docker::image_exists(&image),
        "image {image} is missing: `make containers` builds it (or `make docker`, then \
         RL_TEST_IMAGE=redis-ratelimit:latest)"
    );
    Some(Setup {
        image,
        _serial: serial,
    })
}

/// Whole tokens in a token bucket as the node behind `con` holds it: a peek of one unit
/// reports what would be left, and whether it would be admitted.
pub fn bucket_tokens(con: &mut redis::Connection, key: &str, capacity: i64, rate: &str) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg("TOKENBUCKET")
        .arg(capacity)
        .arg(rate)
        .query(con)
        .unwrap_or_else(|error| panic!("RL.PEEK {key}: {error}"));
    reply[1] + reply[0]
}
