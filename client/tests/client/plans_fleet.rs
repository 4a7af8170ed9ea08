//! Plans across a fleet: 3 demo-service replicas with `--plans` under load, and
//! the time from an `rlctl` command to every replica enforcing its change: a tenant moved
//! between plans, an override raising one limit, and a change made while every
//! subscription was just cut (the version check catches up). Each figure counts from the
//! start of the `rlctl` process (so it includes starting it) to the first response of each
//! replica whose `RateLimit-Policy` field shows the new quota.
//!
//! The figures are printed (`cargo test -p redis-ratelimit-client --test client plans_fleet -- --nocapture`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::helpers::{cut_subscriptions, pubsub_clients};
use redis_ratelimit_testkit::server::{Server, wait_until};

use super::fleet::{fleet, url};

/// `rlctl`, built next to this test by the policy store's crate (`make client-test` builds
/// it first; `cargo test -p redis-ratelimit-client` alone does not).
fn rlctl_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile.join("rlctl");
    assert!(
        binary.exists(),
        "{} is missing: build it first with `cargo build -p redis-ratelimit-plans --bin rlctl`",
        binary.display()
    );
    binary
}

/// Runs `rlctl --redis URL ARGS...` and insists it succeeded; returns its stdout.
fn rlctl_ok(server: &Server, args: &[&str]) -> String {
    let output = Command::new(rlctl_binary())
        .args(["--redis", &url(server), "--who", "test"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "rlctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The backstop period the replicas run with.
const CHECK_EVERY_MS: u64 = 500;

/// How long each `rlctl` process took, start to exit (part of every figure).
static RLCTL_TOOK: Mutex<Vec<Duration>> = Mutex::new(Vec::new());

/// `GET /` for `tenant` on a keep-alive connection; returns the `RateLimit-Policy` field.
fn policy_field(reader: &mut BufReader<TcpStream>, tenant: &str) -> String {
    let request = format!("GET / HTTP/1.1\r\nHost: fleet\r\nx-tenant: {tenant}\r\n\r\n");
    reader.get_mut().write_all(request.as_bytes()).unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let (mut field, mut length) = (String::new(), 0);
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "ratelimit-policy" => field = value.trim().to_string(),
            "content-length" => length = value.trim().parse().unwrap(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    field
}

/// Load on one replica: requests back to back, remembering when each new field was first
/// seen.
struct Load {
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Load {
    fn start(addr: SocketAddr, tenant: &'static str) -> Load {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            std::thread::spawn(move || {
                let stream = TcpStream::connect(addr).unwrap();
                stream.set_nodelay(true).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut reader = BufReader::new(stream);
                let mut last = String::new();
                let mut requests = 0;
                while !stop.load(Ordering::Relaxed) {
                    let field = policy_field(&mut reader, tenant);
                    requests += 1;
                    if field != last {
                        seen.lock().unwrap().push((Instant::now(), field.clone()));
                        last = field;
                    }
                }
                requests
            })
        };
        Load {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// When this replica first answered with a field containing `wanted` after `since`.
    fn first_seen(&self, wanted: &str, since: Instant) -> Option<Instant> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .find(|(at, field)| *at >= since && field.contains(wanted))
            .map(|(at, _)| *at)
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs `change`, then waits until every replica shows `wanted`; returns each replica's
/// delay from the start of the command.
fn propagation(server: &Server, loads: &[Load], change: &[&str], wanted: &str) -> Vec<Duration> {
    let started = Instant::now();
    rlctl_ok(server, change);
    RLCTL_TOOK.lock().unwrap().push(started.elapsed());
    loads
        .iter()
        .map(|load| {
            loop {
                if let Some(at) = load.first_seen(wanted, started) {
                    break at - started;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "a replica never enforced {change:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .collect()
}

fn p50_and_max(delays: &mut [Duration]) -> (Duration, Duration) {
    delays.sort();
    (delays[delays.len() / 2], *delays.last().unwrap())
}

#[test]
fn plan_changes_reach_every_replica_within_a_second() {
    let server = Server::start(&[]);
    rlctl_ok(
        &server,
        &[
            "plan",
            "set",
            "free",
            "--limit",
            "per-minute=sliding:100000/60s",
            "--limit",
            "per-hour=fixed:1000000/1h",
        ],
    );
    rlctl_ok(
        &server,
        &[
            "plan",
            "set",
            "pro",
            "--limit",
            "per-minute=sliding:200000/60s",
            "--limit",
            "per-hour=fixed:2000000/1h",
        ],
    );
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "free"]);
    let check_every = CHECK_EVERY_MS.to_string();
    let replicas = fleet(
        &url(&server),
        3,
        1_000,
        &[
            "--plans",
            "--plans-check-ms",
            &check_every,
            "--timeout-ms",
            "100",
        ],
    );
    let loads: Vec<Load> = replicas
        .iter()
        .map(|replica| Load::start(replica.addr, "acme"))
        .collect();
    let mut notified = Vec::new();
    let mut moves = Vec::new();
    let mut raises = Vec::new();
    for round in 0..5u64 {
        // Move acme to pro and back: every replica enforces the plan's quota (per-hour:
        // the override below raises per-minute only).
        let (plan, quota) = if round % 2 == 0 {
            ("pro", 2_000_000)
        } else {
            ("free", 1_000_000)
        };
        let delays = propagation(
            &server,
            &loads,
            &["tenant", "set", "acme", "--plan", plan],
            &format!("\"per-hour\";q={quota};"),
        );
        moves.extend(delays.iter().copied());
        // Raise one limit with an override.
        let raised = 300_000 + round;
        let delays = propagation(
            &server,
            &loads,
            &[
                "override",
                "set",
                "acme",
                &format!("per-minute=sliding:{raised}/60s"),
                "--ttl",
                "1h",
            ],
            &format!("\"per-minute\";q={raised};"),
        );
        raises.extend(delays.iter().copied());
    }
    notified.extend(moves.iter().chain(&raises).copied());
    // Cut every subscription, change at once: the version check catches up.
    let subscribers = pubsub_clients(&mut server.conn());
    assert!(
        subscribers >= 3,
        "{subscribers} subscriptions for 3 replicas"
    );
    let mut cut = Vec::new();
    for round in 0..3u64 {
        cut_subscriptions(&mut server.conn());
        let raised = 400_000 + round;
        cut.extend(propagation(
            &server,
            &loads,
            &[
                "override",
                "set",
                "acme",
                &format!("per-minute=sliding:{raised}/60s"),
            ],
            &format!("\"per-minute\";q={raised};"),
        ));
        // The replicas subscribe again before the next cut.
        assert!(
            wait_until(Duration::from_secs(10), || pubsub_clients(
                &mut server.conn()
            ) >= subscribers),
            "the replicas never subscribed again"
        );
    }
    let requests: u64 = loads.into_iter().map(Load::finish).sum();
    let (moves_p50, moves_max) = p50_and_max(&mut moves);
    let (raises_p50, raises_max) = p50_and_max(&mut raises);
    let (notified_p50, notified_max) = p50_and_max(&mut notified);
    let (cut_p50, cut_max) = p50_and_max(&mut cut);
    let (rlctl_p50, rlctl_max) = p50_and_max(&mut RLCTL_TOOK.lock().unwrap());
    println!(
        "plans fleet (3 replicas, {requests} requests under load): tenant moved between plans p50 {moves_p50:?} max {moves_max:?}; \
         override raising one limit p50 {raises_p50:?} max {raises_max:?}; all notified changes p50 {notified_p50:?} max {notified_max:?} \
         ({} samples); subscriptions cut (backstop {CHECK_EVERY_MS} ms) p50 {cut_p50:?} max {cut_max:?} ({} samples); \
         of which the rlctl process itself, start to exit: p50 {rlctl_p50:?} max {rlctl_max:?}",
        notified.len(),
        cut.len()
    );
    assert!(
        notified_max <= Duration::from_secs(1),
        "a notified change took {notified_max:?}"
    );
    assert!(
        cut_max <= Duration::from_secs(1),
        "after a cut, a change took {cut_max:?}"
    );
}
