//! Many clients hammering one key per algorithm never get more than each algorithm's bound,
//! measured against the server's own clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::server::Server;

const CLIENTS: usize = 16;

/// (command and arguments after the key, units per call). Limits are small and windows
/// short so that the bounds bite within the run.
const LIMITERS: [(&str, &[&str]); 5] = [
    ("RL.TOKENBUCKET", &["50", "100"]),
    ("CL.THROTTLE", &["49", "100", "1"]),
    ("RL.FIXED", &["100", "0.5"]),
    ("RL.SLIDING", &["100", "0.5"]),
    ("RL.SLIDINGLOG", &["100", "0.5"]),
];

fn server_time_us(con: &mut redis::Connection) -> i64 {
    let time: Vec<String> = redis::cmd("TIME").query(con).unwrap();
    time[0].parse::<i64>().unwrap() * 1_000_000 + time[1].parse::<i64>().unwrap()
}

/// Admitted units may not exceed the algorithm's bound over `[start, end]` (server µs).
fn bound(command: &str, start_us: i64, end_us: i64) -> u64 {
    let elapsed_us = (end_us - start_us) as u64;
    // Windows touched by [start, end] (epoch-aligned 0.5 s windows); the log and the sliding
    // counter admit at most the limit per such window too.
    let windows = ((end_us / 500_000) - (start_us / 500_000) + 1) as u64;
    match command {
        // capacity 50 + 100 per second (+1 for the millisecond clock at the start).
        "RL.TOKENBUCKET" | "CL.THROTTLE" => 50 + elapsed_us * 100 / 1_000_000 + 1,
        _ => 100 * windows,
    }
}

#[test]
fn concurrent_clients_never_exceed_the_bounds() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let run_for = if std::env::var_os("RL_TEST_LONG").is_some() {
        10
    } else {
        2
    };
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new(LIMITERS.iter().map(|_| AtomicU64::new(0)).collect());
    let start_us = server_time_us(&mut con);
    let deadline = Instant::now() + Duration::from_secs(run_for);
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut client = server.conn();
            let admitted = Arc::clone(&admitted);
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    for (index, (command, args)) in LIMITERS.iter().enumerate() {
                        let reply: Vec<i64> = redis::cmd(command)
                            .arg(format!("hot:{index}"))
                            .arg(*args)
                            .query(&mut client)
                            .unwrap();
                        // RL replies start with `allowed`, CL.THROTTLE with `limited`.
                        let allowed = if *command == "CL.THROTTLE" {
                            reply[0] == 0
                        } else {
                            reply[0] == 1
                        };
                        if allowed {
                            admitted[index].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let end_us = server_time_us(&mut con);
    for (index, (command, _)) in LIMITERS.iter().enumerate() {
        let admitted = admitted[index].load(Ordering::Relaxed);
        let bound = bound(command, start_us, end_us);
        eprintln!(
            "{command}: {admitted} admitted, bound {bound}, over {} ms",
            (end_us - start_us) / 1000
        );
        assert!(admitted <= bound, "{command}: {admitted} > {bound}");
        assert!(
            admitted >= 50,
            "{command}: the limiter should admit its burst at least"
        );
    }
}
