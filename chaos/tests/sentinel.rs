//! Redis Sentinel: one primary, two replicas and three sentinels in containers on a private
//! network; three client processes on `redis+sentinel://` admit calls through the client
//! library's Sentinel store; `docker kill` of the primary. Measured: the time until every
//! client's decisions come from the store again (on the promoted replica), and the
//! over-admission: calls the old primary admitted that never reached the new one. Asserted
//! against the README's bound: at most what the fleet admitted in the second before the kill
//! (the unreplicated tail), and back on the store within 30 s.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::io::Write;
use std::time::Duration;

use redis_ratelimit_chaos::catalogue::{self, COUNTER_LIMIT};
use redis_ratelimit_chaos::fleet::{Fleet, RunDir};
use redis_ratelimit_chaos::record::{DecisionRecord, Source, now_us};
use redis_ratelimit_chaos::setup::image;
use redis_ratelimit_testkit::docker::{Container, Network, REDIS_PORT, Spec, connect};
use redis_ratelimit_testkit::server::{info_field, wait_until};

const SERVICE: &str = "soak";
const CLIENTS: u32 = 3;
const TIMEOUT_MS: u64 = 250;
const DOWN_AFTER_MS: u64 = 1000;

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn sentinel_conf(primary: &str) -> String {
    // Sentinels listen on the image's port 6379 (so the container is ready when it answers
    // PING there); they rewrite this file as they learn, so it is theirs (root).
    format!(
        "port {REDIS_PORT}\n\
         protected-mode no\n\
         sentinel monitor {SERVICE} {primary} {REDIS_PORT} 2\n\
         sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {SERVICE} 10000\n\
         sentinel parallel-syncs {SERVICE} 2\n"
    )
}

/// `SENTINEL MASTER <service>` as field → value.
fn master_fields(sentinel: &Container) -> Vec<(String, String)> {
    let mut con = connect(&sentinel.url());
    let flat: Vec<String> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(SERVICE)
        .query(&mut con)
        .unwrap_or_default();
    flat.chunks(2)
        .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
        .collect()
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
}

#[test]
fn the_store_follows_the_primary_through_a_sentinel_failover() {
    let Some(image) = image() else { return };
    let dir = RunDir::create("sentinel");
    let (network, prefix) = Network::create_with_subnet("sentinel");
    let node = |index: usize| format!("{prefix}.{}", 11 + index);
    let primary = Spec::new(&image, "primary", &network).ip(node(0)).start();
    let replica_args = ["--replicaof", &node(0), "6379"];
    let replicas: Vec<Container> = (1..=2)
        .map(|index| {
            Spec::new(&image, "replica", &network)
                .ip(node(index))
                .args(&replica_args)
                .start()
        })
        .collect();
    for replica in &replicas {
        let up = wait_until(Duration::from_secs(30), || {
            info_field(&mut replica.conn(), "replication", "master_link_status").as_deref()
                == Some("up")
        });
        assert!(up, "{} did not sync with the primary", replica.name);
    }
    let conf = sentinel_conf(&node(0));
    let sentinels: Vec<Container> = (0..3)
        .map(|index| {
            Spec::new(&image, "sentinel", &network)
                .ip(format!("{prefix}.{}", 21 + index))
                .user("root")
                .file("/data/sentinel.conf", &conf)
                .command(&["redis-server", "/data/sentinel.conf", "--sentinel"])
                .start()
        })
        .collect();
    let ready = wait_until(Duration::from_secs(60), || {
        sentinels.iter().all(|sentinel| {
            let fields = master_fields(sentinel);
            field(&fields, "num-slaves").as_deref() == Some("2")
                && field(&fields, "num-other-sentinels").as_deref() == Some("2")
        })
    });
    assert!(
        ready,
        "the sentinels did not find the replicas and each other"
    );

    let url = format!(
        "redis+sentinel://{}/{SERVICE}",
        sentinels
            .iter()
            .map(|s| format!("{}:{REDIS_PORT}", s.ip()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let args = vec![
        "--sentinel".to_string(),
        url,
        "--set".to_string(),
        "counter".to_string(),
        "--interval-ms".to_string(),
        "10".to_string(),
        "--timeout-ms".to_string(),
        TIMEOUT_MS.to_string(),
    ];
    let duration = Duration::from_secs(25);
    let fleet = Fleet::start(
        env!("CARGO_BIN_EXE_chaos-load"),
        &args,
        CLIENTS,
        duration,
        &dir.path,
    );
    // The schedule is the scenario: steady traffic on the store before the kill (the bound
    // is the last second's admissions), the failover in the rest of the fleet's fixed run.
    std::thread::sleep(Duration::from_secs(7));
    let kill_us = now_us();
    primary.kill();
    let decisions = fleet.finish(duration + Duration::from_secs(60));

    // Where the sentinels say the primary is now, and what it holds.
    let promoted = field(&master_fields(&sentinels[0]), "ip").expect("a primary");
    assert_ne!(promoted, node(0), "the sentinels did not fail over");
    let algorithm = catalogue::counter()[0].algorithm().expect("counter");
    let mut con = connect(&format!("redis://{promoted}:{REDIS_PORT}/"));
    let mut peek = redis::cmd("RL.PEEK");
    peek.arg("soak:{counter}").arg(algorithm.wire_name());
    for arg in algorithm.wire_args() {
        peek.arg(arg);
    }
    let reply: Vec<i64> = peek.query(&mut con).expect("RL.PEEK on the new primary");
    let stored = COUNTER_LIMIT as i64 - (reply[1] + reply[0]);

    let units = |keep: &dyn Fn(&DecisionRecord) -> bool| -> i64 {
        decisions
            .iter()
            .filter(|d| keep(d))
            .map(|d| d.cost as i64)
            .sum()
    };
    let admitted = units(&|d| d.allowed && d.source == Source::Store);
    // Calls that timed out may or may not have been applied by the server.
    let in_doubt = units(&|d| d.source == Source::Fallback);
    // The fleet's admissions in the second before the kill: the tail a primary can have
    // acknowledged and not yet streamed to its replicas on a healthy link.
    let tail = units(&|d| d.allowed && d.recv_us <= kill_us && d.recv_us + 1_000_000 > kill_us);
    // At least this many admitted units never reached the new primary (more if some calls in
    // doubt were applied).
    let lost = (admitted - stored).max(0);
    // Each client: from the kill to its first store decision after its first fallback (the
    // outage it saw: calls already on their way to the old primary may still be answered
    // just after the kill).
    let back_after_ms: Vec<u64> = (0..CLIENTS)
        .map(|client| {
            let mine: Vec<&DecisionRecord> =
                decisions.iter().filter(|d| d.client == client).collect();
            let outage = mine
                .iter()
                .filter(|d| d.send_us > kill_us && d.source == Source::Fallback)
                .map(|d| d.send_us)
                .min()
                .unwrap_or_else(|| panic!("client {client} saw no outage after the kill"));
            mine.iter()
                .filter(|d| d.source == Source::Store && d.send_us > outage)
                .map(|d| (d.recv_us - kill_us) / 1000)
                .min()
                .unwrap_or_else(|| {
                    panic!("client {client} never got a store decision after the kill")
                })
        })
        .collect();
    let worst_latency_ms = decisions
        .iter()
        .map(|d| (d.recv_us - d.send_us) / 1000)
        .max()
        .unwrap_or(0);
    say(&format!(
        "sentinel: primary {} killed; {promoted} promoted; each client back on the store after \
         {back_after_ms:?} ms (down-after-milliseconds {DOWN_AFTER_MS}); admitted {admitted} \
         units, the new primary holds {stored}: at least {lost} lost, at most {} (bound: the \
         last second's {tail}); {in_doubt} units fell back (closed) meanwhile, in doubt; \
         slowest check {worst_latency_ms} ms",
        node(0),
        lost + in_doubt,
    ));
    assert!(
        back_after_ms.iter().all(|ms| *ms < 30_000),
        "a client took more than 30 s to reach the new primary: {back_after_ms:?}"
    );
    assert!(
        lost <= tail,
        "the failover lost {lost} admitted calls, more than the unreplicated tail bound {tail}"
    );
    assert!(
        worst_latency_ms <= TIMEOUT_MS + 1000,
        "a check took {worst_latency_ms} ms (timeout {TIMEOUT_MS} ms)"
    );
    drop(sentinels);
    drop(replicas);
}
