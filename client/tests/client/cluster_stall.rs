//! One primary of a Redis Cluster that stops answering (SIGSTOP: its connections stay open,
//! nothing comes back) while one process checks limiters on every shard: how many checks of
//! the limiters on the *other* shards the store still decides, before and after the cluster
//! client has to refresh its slot map (a slot moved between the two healthy primaries, so a
//! call gets `MOVED`). The `redis` crate's cluster client refreshes under a lock every request
//! waits for, and asks the nodes (the stopped one included): through it, 0.0-0.6 % of the
//! other shards' checks were decided by the store after the move. The store routes keyed
//! calls by its own slot map over one connection per node (`store/cluster.rs`), so at least
//! 90 % must be, before and after the move; what this measures is printed, and stated in
//! `README.md` (*Chaos soak*).

use std::time::{Duration, Instant};

use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions};
use redis_ratelimit_client::{Algorithm, Fallback, Inputs, Limit, Policy, RateLimiter, Source};
use redis_ratelimit_testkit::cluster::{Cluster, keyslot, node_id};
use redis_ratelimit_testkit::server::{Server, wait_until};

/// The check timeout, as the chaos soak's clients use.
const TIMEOUT: Duration = Duration::from_millis(250);
/// How long the primary stays stopped.
const STALL: Duration = Duration::from_secs(5);
/// When, into the stall, a slot moves and a call gets `MOVED`.
const MOVE_AT: Duration = Duration::from_millis(1500);
/// Concurrent callers per shard.
const CALLERS: usize = 4;
/// The policy whose key is in the slot that moves.
const MOVING: &str = "moving";

/// One check's outcome: its shard (0 is the stopped one), whether the store decided it, how
/// long after the stop it started, how long it took.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    shard: usize,
    by_store: bool,
    at: Duration,
    took: Duration,
}

#[test]
fn a_stalled_primary_and_the_other_shards_limiters() {
    // Alone on the machine: a check has a 250 ms timeout.
    let _heavy = super::exclusive();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // On a worker thread, where `block_in_place` may run the cluster's setup.
    runtime.block_on(async { tokio::spawn(measure()).await.unwrap() });
}

async fn measure() {
    let cluster = tokio::task::block_in_place(|| {
        let cluster = Cluster::start(3, 0);
        // No failure detection while the primary is stopped: without a replica to promote,
        // the others would mark it failed after the node timeout and answer CLUSTERDOWN for
        // every slot, which is not what is measured here.
        for node in &cluster.nodes {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-node-timeout")
                .arg(120_000)
                .query(&mut node.conn())
                .unwrap();
        }
        cluster
    });
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let store = RedisStore::cluster(&node_refs, RedisStoreOptions::default()).unwrap();
    let primaries = cluster.primaries();
    let mut builder = RateLimiter::builder(store);
    for (shard, primary) in primaries.iter().enumerate() {
        builder = builder.policy(policy(
            &format!("shard{shard}"),
            &cluster.tag_on(primary, "s"),
        ));
    }
    // Never called before the move, so its slot holds no key and can be given away.
    let moving_tag = cluster.tag_on(primaries[1], MOVING);
    builder = builder.policy(policy(MOVING, &moving_tag));
    let limiter = builder.build().unwrap();
    let warmed = wait_until(Duration::from_secs(20), || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let mut all = true;
                for shard in 0..primaries.len() {
                    all &= check(&limiter, shard, Instant::now()).await.by_store;
                }
                all
            })
        })
    });
    assert!(warmed, "the store never decided every shard's limiter");

    let paused = primaries[0].pause();
    let stopped = Instant::now();
    let callers: Vec<_> = (0..primaries.len())
        .flat_map(|shard| (0..CALLERS).map(move |_| shard))
        .map(|shard| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut outcomes: Vec<Outcome> = Vec::new();
                while stopped.elapsed() < STALL {
                    outcomes.push(check(&limiter, shard, stopped).await);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                outcomes
            })
        })
        .collect();
    // The schedule is what is measured: the share decided by the store before and after a
    // slot moves, MOVE_AT into the stall.
    tokio::time::sleep(MOVE_AT).await;
    tokio::task::block_in_place(|| move_slot(keyslot(&moving_tag), primaries[1], primaries[2]));
    let moved = limiter.check(MOVING, &Inputs::new()).await.unwrap();
    let mut outcomes: Vec<Outcome> = Vec::new();
    for caller in callers {
        outcomes.extend(caller.await.unwrap());
    }
    drop(paused);

    let decided = |stopped_shard: bool, from: Duration, to: Duration| {
        let runs: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| (o.shard == 0) == stopped_shard && o.at >= from && o.at < to)
            .collect();
        let by_store = runs.iter().filter(|o| o.by_store).count();
        (by_store, runs.len())
    };
    let share = |(by_store, all): (usize, usize)| by_store as f64 * 100.0 / all.max(1) as f64;
    let before = decided(false, Duration::ZERO, MOVE_AT);
    let after = decided(false, MOVE_AT, STALL);
    let stalled = decided(true, Duration::ZERO, STALL);
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap();
    println!(
        "cluster stall: {STALL:?} SIGSTOP of one of 3 primaries, {CALLERS} callers per shard, \
         timeout {TIMEOUT:?}; other shards' checks decided by the store: {} of {} ({:.1} %) \
         before a slot moved at {MOVE_AT:?}, {} of {} ({:.1} %) after (the moved limiter by \
         {:?}); stopped shard {} of {}; slowest check {slowest:?}",
        before.0,
        before.1,
        share(before),
        after.0,
        after.1,
        share(after),
        moved.source,
        stalled.0,
        stalled.1,
    );
    assert!(before.1 > 0 && after.1 > 0 && stalled.1 > 0, "{outcomes:?}");
    assert_eq!(
        stalled.0, 0,
        "the store decided checks on the stopped primary"
    );
    assert!(
        slowest < TIMEOUT * 2 + Duration::from_millis(500),
        "a check took {slowest:?} with a timeout of {TIMEOUT:?}"
    );
    assert!(
        share(before) >= 90.0,
        "one stopped primary stalled the other shards' limiters before any topology change: \
         {} of {} checks decided by the store",
        before.0,
        before.1
    );
    assert!(
        share(after) >= 90.0,
        "one stopped primary stalled the other shards' limiters once the slot map changed: \
         {} of {} checks decided by the store",
        after.0,
        after.1
    );

    // Resumed: every limiter is decided by the store again.
    let recovered = wait_until(Duration::from_secs(20), || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(async { check(&limiter, 0, Instant::now()).await.by_store })
        })
    });
    assert!(
        recovered,
        "the resumed primary's limiter never came back to the store"
    );
}

/// A policy of one token bucket no test exhausts, keyed in hash tag `tag`, falling back open
/// (the source of a decision says whether the store made it).
fn policy(name: &str, tag: &str) -> Policy {
    // The key template takes `{{`/`}}` for a literal hash tag.
    let key = format!("rl:{}", tag.replace('{', "{{").replace('}', "}}"));
    Policy::builder(name)
        .limit(
            Limit::new(
                "l",
                Algorithm::token_bucket(1_000_000, Duration::from_secs(1)).unwrap(),
                &key,
            )
            .unwrap(),
        )
        .timeout(TIMEOUT)
        .fallback(Fallback::Open)
        .build()
        .unwrap()
}

/// Gives the empty `slot` of `from` to `to` on both (the stopped node is not told).
fn move_slot(slot: u16, from: &Server, to: &Server) {
    let target = node_id(to);
    for node in [to, from] {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&target)
            .query(&mut node.conn())
            .unwrap();
    }
    let _: String = redis::cmd("CLUSTER")
        .arg("BUMPEPOCH")
        .query(&mut to.conn())
        .unwrap();
}

/// One check of shard `shard`'s limiter.
async fn check(limiter: &RateLimiter, shard: usize, stopped: Instant) -> Outcome {
    let started = Instant::now();
    let decision = limiter
        .check(&format!("shard{shard}"), &Inputs::new())
        .await
        .unwrap();
    Outcome {
        shard,
        by_store: matches!(decision.source, Source::Store(_)),
        at: started.saturating_duration_since(stopped),
        took: started.elapsed(),
    }
}
