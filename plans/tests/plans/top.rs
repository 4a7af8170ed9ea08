//! `rlctl top` on a real server: a Rust replica's top-keys report and one written as
//! docs/operating.md specifies it (as the Python and Node clients write theirs) are merged,
//! each count with its range and the stated bound; and a store-backed policy's metrics name
//! the tenant's plan as the key class, never the tenant.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis_ratelimit_client::store::RedisStore;
use redis_ratelimit_client::top::TopKeys;
use redis_ratelimit_client::top::report::{bucket_of, key};
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};
use redis_ratelimit_plans::{PlanOptions, PlanSource};
use redis_ratelimit_testkit::server::Server;

use crate::plans::{rlctl, rlctl_ok, url};

/// Five checks of tenant `acme` (on plan gold: 2 a day) through a store-backed policy whose
/// limiter reports its denials; its decision counters by labels.
fn acme_five_times(server: &Server) -> Vec<(String, u64)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let source = PlanSource::connect(&url(server), PlanOptions::default())
                .await
                .unwrap();
            let daily = Algorithm::fixed_window(1, Duration::from_secs(86_400)).unwrap();
            let policy = Policy::from_store("api", "tenant")
                .limit(Limit::new("per-day", daily, "unused").unwrap())
                .deny_cache(false)
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let limiter = RateLimiter::builder(RedisStore::new(&url(server)).unwrap())
                .policy(policy)
                .policy_source(source)
                .top_keys(TopKeys::default())
                .build()
                .unwrap();
            for _ in 0..5 {
                limiter
                    .check("api", &Inputs::new().with("tenant", "acme"))
                    .await
                    .unwrap();
            }
            limiter.report_top().await.unwrap();
        });
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "ratelimit_decisions_total")
        .filter_map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            match value {
                DebugValue::Counter(count) => Some((labels.join(","), count)),
                _ => None,
            }
        })
        .collect()
}

/// A line of `rlctl top`'s table: the key's count and its least count.
fn row(out: &str, key_part: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|line| line.contains(key_part))
        .unwrap_or_else(|| panic!("{key_part} in {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[0].parse().unwrap(), words[1].parse().unwrap())
}

#[test]
fn rlctl_top_merges_every_clients_reports_and_states_the_bound() {
    let server = Server::start(&[]);
    rlctl_ok(
        &server,
        &["plan", "set", "gold", "--limit", "per-day=fixed:2/1d"],
    );
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "gold"]);
    let decisions = acme_five_times(&server);
    assert!(
        decisions.contains(&(
            "policy=api,limit=per-day,key_class=gold,outcome=denied,source=store,backend=module"
                .to_string(),
            3
        )),
        "{decisions:?}"
    );
    assert!(decisions.iter().all(|(labels, _)| !labels.contains("acme")));

    // Another client's report of this minute: 7 denials in a summary of 2 keys, full (any
    // key it does not list was denied at most twice there).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let python = r#"{"v":1,"policy":"api","limit":"per-day","replica":"py0","client":"python","capacity":2,"denials":7,"floor":2,"keys":[["rl:plan:{acme}:api:per-day:fixed",4,0],["rl:plan:{globex}:api:per-day:fixed",3,1]]}"#;
    let _: i64 = redis::cmd("HSET")
        .arg(key(bucket_of(now)))
        .arg("py0:3:api:per-day")
        .arg(python)
        .query(&mut server.conn())
        .unwrap();
    let out = rlctl_ok(&server, &["top", "api"]);
    // acme: 3 here (listed exactly) + 4 there = 7; globex: not listed here (floor 0) and
    // 3 there with an error of 1: at least 2.
    assert!(out.contains("limit 'per-day': 10 denials"), "{out}");
    assert!(out.contains("at most 2 over"), "{out}");
    assert_eq!(row(&out, "{acme}"), (7, 7), "{out}");
    assert_eq!(row(&out, "{globex}"), (3, 2), "{out}");
    let only_one = rlctl_ok(
        &server,
        &["top", "api", "--count", "1", "--limit", "per-day"],
    );
    assert!(!only_one.contains("globex"), "{only_one}");
    assert!(rlctl_ok(&server, &["top", "nobody"]).contains("no denials"));
    let refused = rlctl(&server, &["top", "api", "--minutes", "0"]);
    assert_eq!(refused.status.code(), Some(2));
}
