//! SIGKILL (`docker kill`) under `appendfsync everysec`: after a restart the state is the
//! AOF's, and it holds every admitted call but at most the last moments before the kill.
//!
//! Redis writes the AOF buffer to the file before it sends replies, so a killed process
//! should lose nothing it acknowledged (the page cache survives the process); what
//! `everysec` can lose, about one second of writes (two if the disk stalls), is what a crash
//! of the whole machine loses. The test measures the loss and asserts the documented bound.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::docker::{Network, Spec, Volume};
use redis_ratelimit_testkit::helpers::{keys, mixed_traffic, snapshot};
use redis_ratelimit_testkit::server::wait_until;

use crate::{bucket_tokens, setup};

/// The counting limiter: a token bucket whose refill (one token per 1000 s) is negligible
/// while the test runs, so `capacity - tokens` is the number of admitted calls.
const COUNTER_CAPACITY: i64 = 1_000_000;
const COUNTER_RATE: &str = "0.001";

/// The most acknowledged writes `appendfsync everysec` may lose, as time before the crash:
/// one second between fsyncs, plus one more when a slow fsync postpones the write.
pub const EVERYSEC_LOSS_BOUND: Duration = Duration::from_secs(2);

#[test]
fn sigkill_with_everysec_loses_at_most_the_last_second() {
    let Some(setup) = setup() else { return };
    let network = Network::create("crash");
    let volume = Volume::create("crash");
    let node = Spec::new(&setup.image, "crash", &network)
        .volume(&volume)
        .args(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ])
        .start();

    // Limiters of every kind, written well before the kill.
    let keys = keys("crash", 25);
    mixed_traffic(&mut node.conn(), &keys);
    let before = snapshot(&mut node.conn(), &keys);

    // A writer admits calls on the counter as fast as it can and records, for every
    // acknowledged call, when the reply arrived; it stops at the first error (the kill).
    let acks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acks, stop, mut con) = (acks.clone(), stop.clone(), node.conn());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let reply: redis::RedisResult<Vec<i64>> = redis::cmd("RL.TOKENBUCKET")
                    .arg("counter")
                    .arg(COUNTER_CAPACITY)
                    .arg(COUNTER_RATE)
                    .query(&mut con);
                match reply {
                    Ok(reply) => {
                        assert_eq!(reply[0], 1, "the counter never runs out");
                        acks.lock().unwrap().push(Instant::now());
                    }
                    Err(_) => return,
                }
            }
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || acks.lock().unwrap().len()
            >= 2_000),
        "the writer got {} replies in 10 s",
        acks.lock().unwrap().len()
    );
    let killed_at = Instant::now();
    node.kill();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let acks = acks.lock().unwrap().clone();

    node.start_again();
    assert!(
        node.logs().contains("DB loaded from append only file"),
        "the restart did not load the AOF:\n{}",
        node.logs_tail(20)
    );
    let mut con = node.conn();
    assert_eq!(snapshot(&mut con, &keys), before, "limiters written before");
    let recovered =
        COUNTER_CAPACITY - bucket_tokens(&mut con, "counter", COUNTER_CAPACITY, COUNTER_RATE);
    let acknowledged = acks.len() as i64;
    // The call in flight at the kill may have been applied without its reply arriving.
    assert!(
        recovered <= acknowledged + 1,
        "{recovered} calls recovered, only {acknowledged} acknowledged"
    );
    let lost = (acknowledged - recovered).max(0);
    let lost_window = if lost == 0 {
        Duration::ZERO
    } else {
        // The oldest lost call was acknowledged right after the last one kept.
        killed_at.saturating_duration_since(acks[recovered as usize])
    };
    let _ = writeln!(
        std::io::stderr(),
        "SIGKILL with appendfsync everysec: {acknowledged} calls acknowledged, {recovered} \
         recovered from the AOF, {lost} lost (acknowledged up to {} ms before the kill)",
        lost_window.as_millis()
    );
    assert!(
        lost_window <= EVERYSEC_LOSS_BOUND,
        "lost {lost} calls acknowledged up to {lost_window:?} before the kill"
    );
}
