//! A write is never sent twice (issue 36, item 2): a proxy lets a charge or a refund reach
//! the server, drops the server's reply and closes the client's connection. The call ends
//! as an unknown outcome (an outage to the caller, which falls back), and the server was
//! charged exactly once: read back on the server afterwards. On one server (the
//! connection manager reconnects but never resends) and on a Redis Cluster (the cluster
//! client's own retries, 16 by default, would resend through a new connection).

use std::time::Duration;

use redis_ratelimit_client::store::{
    Acquire, LimitCall, RedisStore, RedisStoreOptions, Refund, Store, StoreError,
};
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter, Source};
use redis_ratelimit_testkit::cluster::{Cluster, view};
use redis_ratelimit_testkit::proxy::CuttingProxy;
use redis_ratelimit_testkit::server::{Server, wait_until, wait_until_async};

const HOUR: Duration = Duration::from_secs(3600);
const CAPACITY: u64 = 100;

fn call<'a>(key: &'a str, algorithm: &'a Algorithm) -> LimitCall<'a> {
    LimitCall {
        key,
        algorithm,
        weight: 1,
        max_wait: None,
        lease_suffix: None,
    }
}

fn charge<'a>(key: &'a str, algorithm: &'a Algorithm, units: u64) -> Acquire<'a> {
    Acquire {
        limits: vec![call(key, algorithm)],
        units,
        partial_min: None,
        holder: None,
    }
}

/// The units left in `key`'s bucket, read on `store` (a peek of one unit shows what would be
/// left after taking it).
async fn left(store: &RedisStore, key: &str, bucket: &Algorithm) -> u64 {
    let view = store.peek(&charge(key, bucket, 1)).await.unwrap().views[0];
    view.remaining + 1
}

/// A charge of 5 and a refund of 30 whose replies are lost: each reached the server once.
async fn lost_replies_charge_once(through: &RedisStore, direct: &RedisStore, proxy: &CuttingProxy) {
    let bucket = Algorithm::token_bucket(CAPACITY, HOUR).unwrap();
    let key = "{replay}:bucket";
    through.acquire(&charge(key, &bucket, 1)).await.unwrap();
    assert_eq!(left(direct, key, &bucket).await, CAPACITY - 1);

    proxy.cut_next_reply();
    let lost = match through.acquire(&charge(key, &bucket, 5)).await {
        Ok(grant) => panic!("the charge was sent again after its reply was lost: {grant:?}"),
        Err(error) => error,
    };
    assert!(
        lost.is_unavailability(),
        "a lost reply is an outage: {lost}"
    );
    assert_eq!(proxy.replies_cut(), 1);
    assert_eq!(
        left(direct, key, &bucket).await,
        CAPACITY - 1 - 5,
        "the charge of 5 whose reply was lost ran once"
    );

    direct.acquire(&charge(key, &bucket, 50)).await.unwrap();
    // The cut connection made again (its handshake's replies must not be the ones cut).
    answers_again(through, key, &bucket).await;
    proxy.cut_next_reply();
    let refund = Refund {
        limits: vec![call(key, &bucket)],
        units: 30,
        holder: None,
    };
    let refunded = through.refund(&refund).await;
    assert!(
        matches!(refunded, Err(StoreError::Unavailable(_))),
        "{refunded:?}"
    );
    assert_eq!(proxy.replies_cut(), 2);
    assert_eq!(
        left(direct, key, &bucket).await,
        CAPACITY - 1 - 5 - 50 + 30,
        "the refund of 30 whose reply was lost ran once"
    );
    // The store answers again afterwards (a new connection).
    answers_again(through, key, &bucket).await;
}

/// Waits (bounded) until `store` answers a read again after a cut.
async fn answers_again(store: &RedisStore, key: &str, bucket: &Algorithm) {
    let reconnected = wait_until_async(Duration::from_secs(10), || async move {
        store.peek(&charge(key, bucket, 1)).await.is_ok()
    })
    .await;
    assert!(reconnected, "never reconnected");
}

#[tokio::test]
async fn a_lost_reply_is_never_sent_again_on_one_server() {
    let server = Server::start(&[]);
    let proxy = CuttingProxy::start(server.port);
    let through = RedisStore::new(&format!("redis://127.0.0.1:{}/", proxy.port)).unwrap();
    let direct = RedisStore::new(&format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    lost_replies_charge_once(&through, &direct, &proxy).await;
}

#[tokio::test]
async fn a_check_whose_reply_is_lost_falls_back_and_charged_once() {
    let server = Server::start(&[]);
    let proxy = CuttingProxy::start(server.port);
    let store = RedisStore::new(&format!("redis://127.0.0.1:{}/", proxy.port)).unwrap();
    let direct = RedisStore::new(&format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let bucket = Algorithm::token_bucket(CAPACITY, HOUR).unwrap();
    let policy = Policy::builder("api")
        .limit(Limit::new("bucket", bucket.clone(), "check:{key}").unwrap())
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(store).policy(policy).build().unwrap();
    let inputs = Inputs::new().with("key", "k");
    assert!(
        limiter
            .check_cost("api", &inputs, 3)
            .await
            .unwrap()
            .source
            .is_store()
    );
    proxy.cut_next_reply();
    let decision = limiter.check_cost("api", &inputs, 3).await.unwrap();
    assert_eq!(proxy.replies_cut(), 1);
    assert_eq!(
        decision.source,
        Source::Fallback,
        "an unknown outcome is decided by the fallback"
    );
    assert_eq!(
        left(&direct, "check:k", &bucket).await,
        CAPACITY - 6,
        "charged once by the store, never sent again"
    );
}

/// Each primary of a cluster behind a proxy of its own, announced to clients instead of
/// the node (`cluster-announce-port`), so the cluster client's connections all go through
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_never_sent_again_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(3, 0))
        .await
        .unwrap();
    let key_slot = redis_ratelimit_wire::slot::key_slot(b"{replay}:bucket");
    let owner = view(&cluster.nodes[0])
        .into_iter()
        .find(|node| {
            node.slots
                .iter()
                .any(|(from, to)| (*from..=*to).contains(&key_slot))
        })
        .expect("a node serving the key's slot")
        .port;
    let proxies: Vec<(u16, CuttingProxy)> = cluster
        .nodes
        .iter()
        .map(|node| (node.port, CuttingProxy::start(node.port)))
        .collect();
    for (port, proxy) in &proxies {
        let mut con = cluster.node(*port).conn();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port)
            .arg("cluster-announce-bus-port")
            .arg(port + 10_000)
            .query(&mut con)
            .unwrap();
    }
    // Every node announces the proxies' ports in its slot map.
    let proxy_ports: Vec<u16> = proxies.iter().map(|(_, proxy)| proxy.port).collect();
    let announced = wait_until(Duration::from_secs(20), || {
        cluster.nodes.iter().all(|node| {
            view(node)
                .iter()
                .filter(|line| line.primary)
                .all(|line| proxy_ports.contains(&line.port))
        })
    });
    assert!(announced, "the nodes never announced the proxies");
    let seeds: Vec<String> = proxy_ports
        .iter()
        .map(|port| format!("redis://127.0.0.1:{port}/"))
        .collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let through = RedisStore::cluster(&seeds, RedisStoreOptions::default()).unwrap();
    let direct = RedisStore::cluster(&seeds, RedisStoreOptions::default()).unwrap();
    direct.connect().await.unwrap();
    through.connect().await.unwrap();
    let proxy = &proxies
        .iter()
        .find(|(port, _)| *port == owner)
        .expect("the owner's proxy")
        .1;
    lost_replies_charge_once(&through, &direct, proxy).await;
}
