//! A Redis Cluster of 3 primaries and 3 replicas in containers, each with its own address:
//! a cluster client routes every limiter command to the node serving its key, replicas hold
//! the same state, and resharding with the image's `redis-cli --cluster reshard` moves
//! limiters with their exact state.

use std::time::Instant;

use redis_ratelimit_testkit::cluster::keyslot;
use redis_ratelimit_testkit::docker::connect;
use redis_ratelimit_testkit::docker_cluster::url;
use redis_ratelimit_testkit::docker_cluster::{ContainerCluster, readonly_conn};
use redis_ratelimit_testkit::server::caught_up;

use crate::setup;

/// Short enough to keep failovers quick, long enough for a loaded 2-core machine.
pub const NODE_TIMEOUT_MS: u64 = 2_000;

/// Every limiter command, each on its own key sharing `base`'s slot (a hash tag), with slow
/// refills and day-long windows: (key, command, the first reply field when it admits).
fn every_command(base: &str) -> Vec<(String, redis::Cmd, i64)> {
    let cases: [(&str, &str, &[&str]); 7] = [
        ("tb", "RL.TOKENBUCKET", &["10", "0.001"]),
        ("sw", "RL.SLIDING", &["10", "86400"]),
        ("fw", "RL.FIXED", &["10", "86400", "2"]),
        ("sl", "RL.SLIDINGLOG", &["10", "86400", "2"]),
        ("cl", "CL.THROTTLE", &["9", "1", "1000"]),
        ("tb", "RL.PEEK", &["TOKENBUCKET", "10", "0.001"]),
        ("sl", "RL.REFUND", &["SLIDINGLOG", "10", "86400"]),
    ];
    cases
        .iter()
        .map(|(suffix, command, args)| {
            let key = format!("{{{base}}}:{suffix}");
            let mut cmd = redis::cmd(command);
            cmd.arg(&key).arg(*args);
            // CL.THROTTLE answers `limited`, the others `allowed`.
            let admitted = if *command == "CL.THROTTLE" { 0 } else { 1 };
            (key, cmd, admitted)
        })
        .collect()
}

/// Keys `primary_ip` itself stores in `key`'s slot.
fn stored_on(ip: &str, key: &str) -> bool {
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(keyslot(key))
        .arg(100)
        .query(&mut connect(&url(ip)))
        .unwrap();
    keys.iter().any(|stored| stored == key)
}

/// (DUMP, PEXPIRETIME) of `key` on the node at `ip`, read even from a replica.
fn state_on(ip: &str, key: &str) -> (Option<Vec<u8>>, i64) {
    let mut con = readonly_conn(ip);
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(&mut con).unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).unwrap();
    (dump, expiry)
}

/// Waits until the replica at `replica_ip` has applied everything its primary had written.
fn wait_replicated(primary_ip: &str, replica_ip: &str) {
    assert!(
        caught_up(
            &mut connect(&url(primary_ip)),
            &mut connect(&url(replica_ip))
        ),
        "replica {replica_ip} did not catch up with {primary_ip}"
    );
}

#[test]
fn a_cluster_client_routes_every_command_and_resharding_keeps_state() {
    let Some(setup) = setup() else { return };
    let cluster = ContainerCluster::start(&setup.image, 3, 1, NODE_TIMEOUT_MS);
    let mut con = cluster.client().get_connection().unwrap();

    // Every command on 40 slots through the cluster client: each first call of a fresh
    // limiter is admitted, and the peek and refund answer for the same limiters.
    let bases: Vec<String> = (0..40).map(|i| format!("routed{i}")).collect();
    let mut keys = Vec::new();
    for base in &bases {
        for (key, cmd, admitted) in every_command(base) {
            let reply: Vec<i64> = cmd.query(&mut con).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(reply.len(), 5, "{key}: {reply:?}");
            assert_eq!(reply[0], admitted, "{key}: {reply:?}");
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }

    // Each key lives on the primary serving its slot, and the primaries share them.
    let primaries = cluster.primaries();
    for key in &keys {
        let slot = keyslot(key);
        let owner = primaries
            .iter()
            .find(|p| {
                p.slots
                    .iter()
                    .any(|(from, to)| (*from..=*to).contains(&slot))
            })
            .unwrap();
        assert!(stored_on(&owner.ip, key), "{key} is not on {}", owner.ip);
    }
    for primary in &primaries {
        let stored: i64 = redis::cmd("DBSIZE")
            .query(&mut connect(&url(&primary.ip)))
            .unwrap();
        assert!(stored > 0, "{} stores no limiter", primary.ip);
    }
    // Every replica holds its primary's limiters exactly.
    for primary in &primaries {
        let replica_ip = cluster.replica_of(primary);
        wait_replicated(&primary.ip, &replica_ip);
        for key in keys.iter().filter(|key| stored_on(&primary.ip, key)) {
            assert_eq!(
                state_on(&replica_ip, key),
                state_on(&primary.ip, key),
                "{key}"
            );
        }
    }

    // Resharding: redis-cli moves the source's 50 lowest slots to the target, with the
    // limiters in them.
    let (source, target) = (&primaries[0], &primaries[1]);
    let first_slot = source.slots.iter().map(|(from, _)| *from).min().unwrap();
    let moved_slots = first_slot..first_slot + 50;
    let moving: Vec<String> = (0..100_000)
        .map(|i| format!("reshard{i}"))
        .filter(|base| moved_slots.contains(&keyslot(&format!("{{{base}}}"))))
        .take(5)
        .collect();
    assert_eq!(moving.len(), 5);
    let mut moving_keys: Vec<String> = Vec::new();
    let mut token_buckets = Vec::new();
    for base in &moving {
        for (key, cmd, _) in every_command(base) {
            let reply: Vec<i64> = cmd.query(&mut con).unwrap();
            if moving_keys.contains(&key) {
                continue;
            }
            if key.ends_with(":tb") {
                token_buckets.push((key.clone(), reply[1]));
            }
            moving_keys.push(key);
        }
    }
    let before: Vec<_> = moving_keys
        .iter()
        .map(|k| state_on(&source.ip, k))
        .collect();
    assert!(before.iter().all(|(dump, _)| dump.is_some()));

    let started = Instant::now();
    let reshard = cluster.nodes[0].cli(&[
        "--cluster",
        "reshard",
        &format!("{}:6379", source.ip),
        "--cluster-from",
        &source.id,
        "--cluster-to",
        &target.id,
        "--cluster-slots",
        "50",
        "--cluster-yes",
    ]);
    let reshard_ms = started.elapsed().as_millis() as i64;
    reshard.unwrap_or_else(|error| panic!("reshard: {error}"));
    cluster.wait_healthy();
    for (key, (dump, expiry)) in moving_keys.iter().zip(&before) {
        assert!(stored_on(&target.ip, key), "{key} did not move");
        let (dump_after, expiry_after) = state_on(&target.ip, key);
        assert_eq!(&dump_after, dump, "{key}: state changed in the move");
        // MIGRATE sends the time to live, which the target adds to its own clock.
        assert!(
            (expiry_after - expiry).abs() <= reshard_ms + 1,
            "{key}: PEXPIRETIME {expiry} became {expiry_after} (reshard took {reshard_ms} ms)"
        );
    }
    // The client follows the move, and the limiters go on from their state.
    for (key, remaining) in token_buckets {
        let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
            .arg(&key)
            .arg(10)
            .arg("0.001")
            .query(&mut con)
            .unwrap();
        assert_eq!(reply[..2], [1, remaining - 1], "{key}");
    }
}
