//! What a chaos test needs before it starts: a Docker engine and the test image.

use std::io::Write;

use redis_ratelimit_testkit::docker;

/// The image to run (`$RL_TEST_IMAGE`, which `make containers` and `make soak` build), or
/// `None` after one loud `CONTAINER TESTS SKIPPED` line when no Docker engine answers.
/// Panics when the engine answers but the image is missing.
pub fn image() -> Option<String> {
    if let Err(why) = docker::engine() {
        // Straight to stderr: the harness captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "CONTAINER TESTS SKIPPED: no Docker engine answers ({why})"
        );
        return None;
    }
    let image = std::env::var("RL_TEST_IMAGE")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| "redis-ratelimit:latest".into());
    assert!(
        docker::image_exists(&image),
        "image {image} is missing: `make containers` or `make soak` builds it (or `make docker`, \
         then RL_TEST_IMAGE=redis-ratelimit:latest)"
    );
    Some(image)
}

/// A seeded generator of the run's random choices (xorshift64*), so a seed replays a run's
/// fault schedule.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    /// A number in `0..below` (`below` ≥ 1).
    pub fn below(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % below.max(1)
    }
}
