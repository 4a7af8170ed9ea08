//! Concurrent acquires batched into shared writes (`RedisStoreOptions::batch`): each keeps
//! its own reply and all-or-nothing, a refusal stays with its own check, and a check on an
//! idle store is never held. (How many reads batching saves Redis is measured by `make
//! bench-service`, not asserted here.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::store::{
    Acquire, BatchOptions, LimitCall, RedisStore, RedisStoreOptions, Store, StoreError,
};
use redis_ratelimit_testkit::server::Server;

use super::one;

const HOUR: Duration = Duration::from_secs(3600);

/// Writes wait up to `window` to share a round trip, 64 at most.
fn within(window: Duration) -> BatchOptions {
    BatchOptions { window, max: 64 }
}

fn store(server: &Server, batch: BatchOptions) -> Arc<RedisStore> {
    let options = RedisStoreOptions {
        batch,
        ..RedisStoreOptions::default()
    };
    Arc::new(
        RedisStore::with_options(&format!("redis://127.0.0.1:{}/", server.port), options).unwrap(),
    )
}

/// `checks` concurrent acquires over `keys` keys of 7 an hour (and, for some, a second key
/// of 5), plus some on a key holding a string: what each key admitted, and the refusals.
async fn race(
    server: &Server,
    store: Arc<RedisStore>,
    checks: usize,
    keys: usize,
) -> (Vec<u64>, usize, usize) {
    for i in 0..3 {
        let _: () = redis::cmd("SET")
            .arg(format!("string{i}"))
            .arg("x")
            .query(&mut server.conn())
            .unwrap();
    }
    let window = Arc::new(Algorithm::fixed_window(7, HOUR).unwrap());
    let tight = Arc::new(Algorithm::fixed_window(5, HOUR).unwrap());
    let mut tasks = Vec::new();
    for i in 0..checks {
        let (store, window, tight) = (Arc::clone(&store), Arc::clone(&window), Arc::clone(&tight));
        tasks.push(tokio::spawn(async move {
            let key = format!("k{}", i % keys);
            let mut limits = vec![LimitCall {
                key: &key,
                algorithm: &window,
                weight: 1,
                max_wait: None,
                lease_suffix: None,
            }];
            // Every fourth check also takes the shared tight limit: all or nothing.
            if i % 4 == 0 {
                limits.push(LimitCall {
                    key: "shared",
                    algorithm: &tight,
                    weight: 1,
                    max_wait: None,
                    lease_suffix: None,
                });
            }
            let wrong = format!("string{}", i % 3);
            if i % 10 == 9 {
                limits = vec![LimitCall {
                    key: &wrong,
                    algorithm: &window,
                    weight: 1,
                    max_wait: None,
                    lease_suffix: None,
                }];
            }
            let request = Acquire {
                limits,
                units: 1,
                partial_min: None,
                holder: None,
            };
            (i, store.acquire(&request).await.map(|grant| grant.granted))
        }));
    }
    let mut admitted = vec![0u64; keys];
    let mut refused = 0;
    let mut shared = 0;
    for task in tasks {
        let (i, result) = task.await.unwrap();
        match result {
            Ok(granted) => {
                admitted[i % keys] += granted;
                if i % 4 == 0 {
                    shared += granted as usize;
                }
            }
            Err(StoreError::Server(detail)) => {
                assert_eq!(i % 10, 9, "check {i} refused: {detail}");
                assert!(detail.contains("WRONGTYPE"), "{detail}");
                refused += 1;
            }
            Err(other) => panic!("check {i}: {other}"),
        }
    }
    (admitted, refused, shared)
}

#[tokio::test]
async fn concurrent_checks_share_writes_and_keep_their_own_replies() {
    let server = Server::start(&[]);
    let batched = store(&server, within(Duration::from_millis(5)));
    batched.connect().await.unwrap();
    let (admitted, refused, shared) = race(&server, Arc::clone(&batched), 400, 20).await;
    // A key only these checks take admits its 7 exactly; the keys of the checks that also
    // take the shared limit of 5 admit 5 in all; the keys 9 and 19 only appear in checks on
    // the string keys, refused with WRONGTYPE and charged nothing.
    for (key, count) in admitted.iter().enumerate() {
        if key % 4 != 0 && key % 10 != 9 {
            assert_eq!(*count, 7, "key {key}: {admitted:?}");
        }
    }
    let with_shared: u64 = (0..20)
        .filter(|key| key % 4 == 0)
        .map(|key| admitted[key])
        .sum();
    assert_eq!((with_shared, shared, refused), (5, 5, 40), "{admitted:?}");
    // What each key holds is what its checks were told (denied ones charged nothing).
    for (key, count) in admitted.iter().enumerate() {
        let reply: Vec<i64> = redis::cmd("RL.PEEK")
            .arg(format!("k{key}"))
            .arg("FIXED")
            .arg(7)
            .arg(3600)
            .query(&mut server.conn())
            .unwrap();
        // A peek answers as the next call would: the remaining after one more unit.
        assert_eq!(reply[1], (6 - *count as i64).max(0), "key {key}");
    }
}

#[tokio::test]
async fn a_check_on_an_idle_store_is_never_held() {
    let server = Server::start(&[]);
    let store = store(&server, within(Duration::from_millis(200)));
    store.connect().await.unwrap();
    let window = Algorithm::fixed_window(100, HOUR).unwrap();
    for i in 0..20 {
        let key = format!("idle{i}");
        let request = one(&key, &window);
        let started = Instant::now();
        assert_eq!(store.acquire(&request).await.unwrap().granted, 1);
        // Held for the window, it would take 200 ms.
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn without_batching_every_check_is_its_own_read() {
    let server = Server::start(&[]);
    let single = store(&server, BatchOptions::OFF);
    single.connect().await.unwrap();
    let (admitted, refused, shared) = race(&server, single, 120, 12).await;
    assert!(admitted.iter().all(|&count| count <= 7), "{admitted:?}");
    assert_eq!((refused, shared), (12, 5));
}
