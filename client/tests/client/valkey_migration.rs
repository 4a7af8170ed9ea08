//! The cluster store through Valkey 9.1's atomic slot migration (`CLUSTER MIGRATESLOTS`, the
//! pinned Valkey of `make valkey-server`): while a slot holding the store's limiter and
//! 10,000 others moves to another primary, every call is answered (the redirects followed
//! inside the store), and the limiter is never charged above its limit across the move.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions, Store};
use redis_ratelimit_testkit::binaries::valkey_server;
use redis_ratelimit_testkit::cluster::{Cluster, keyslot, node_id};
use redis_ratelimit_testkit::server::{wait_until, wait_until_async};

use super::one;

/// The limit of the limiter the store charges during the move.
const LIMIT: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_store_follows_an_atomic_slot_migration() {
    let cluster = Cluster::start_program(&valkey_server(), 3, 0);
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0], primaries[1]);
    let tag = cluster.tag_on(source, "store");
    let slot = keyslot(&tag);
    let mut fillers = redis::pipe();
    for index in 0..10_000 {
        fillers
            .cmd("RL.TOKENBUCKET")
            .arg(format!("{tag}fill:{index}"))
            .arg(&["100", "0.001"])
            .ignore();
    }
    let () = fillers.query(&mut source.conn()).expect("the fillers");
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = Arc::new(RedisStore::cluster(&urls, RedisStoreOptions::default()).unwrap());
    store.connect().await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let moving = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let key = format!("{tag}checked");
    let load = {
        let (store, stop, moving) = (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&moving));
        let calls = Arc::clone(&calls);
        tokio::spawn(async move {
            let window = Algorithm::fixed_window(LIMIT, Duration::from_secs(86_400)).unwrap();
            let (mut answered, mut during, mut granted, mut errors) = (0u64, 0u64, 0u64, vec![]);
            while !stop.load(Ordering::Relaxed) {
                let request = one(&key, &window);
                match store.acquire(&request).await {
                    Ok(grant) => {
                        answered += 1;
                        calls.fetch_add(1, Ordering::Relaxed);
                        during += u64::from(moving.load(Ordering::Relaxed));
                        granted += grant.granted;
                    }
                    Err(error) => errors.push(error.to_string()),
                }
            }
            (answered, during, granted, errors)
        })
    };
    let mut con = source.conn();
    assert!(
        answered_beyond(&calls, 50).await,
        "the store answered no calls before the move"
    );
    moving.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let reply: redis::RedisResult<Value> = redis::cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(node_id(target))
        .query(&mut con);
    let moved = reply.is_ok()
        && wait_until(Duration::from_secs(30), || {
            let owner = cluster.owner(slot).port;
            owner == target.port
        });
    let elapsed = started.elapsed();
    moving.store(false, Ordering::Relaxed);
    let after_move = calls.load(Ordering::Relaxed) + 100;
    let answered_after = answered_beyond(&calls, after_move).await;
    stop.store(true, Ordering::Relaxed);
    let (answered, during, granted, errors) = load.await.unwrap();
    eprintln!(
        "the cluster store through a Valkey 9.1.2 slot migration of 10,001 limiters: moved in \
         {} ms, {during} calls answered during the move, {answered} in all, {granted} granted, \
         errors: {errors:?}",
        elapsed.as_millis()
    );
    assert!(reply.is_ok(), "CLUSTER MIGRATESLOTS: {reply:?}");
    assert!(moved, "slot {slot} did not move to the target");
    assert!(errors.is_empty(), "the store's errors: {errors:?}");
    assert!(answered_after, "the store answered no calls after the move");
    assert!(during > 0, "no call answered during the move");
    assert!(granted <= LIMIT, "{granted} granted of a limit of {LIMIT}");
}

/// Polls (at most 10 s) until the store has answered `count` calls.
async fn answered_beyond(calls: &AtomicU64, count: u64) -> bool {
    wait_until_async(Duration::from_secs(10), || async move {
        calls.load(Ordering::Relaxed) >= count
    })
    .await
}
