//! The regional lease agent against real servers: a home (with a replica, for `WAIT`) and a
//! region, each a `redis-server` with the module.

use std::time::Duration;

use redis::Value;
use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::regions::{self, AgentConfig, AgentError, HotLimit, ServerForm};
use redis_ratelimit_testkit::server::{Server, primary_and_replica};

const HOUR: Duration = Duration::from_secs(3600);

/// Asks for `wait_replicas` (a replica that is there answers at once; a missing one is
/// waited for 200 ms).
fn config(wait_replicas: u32) -> AgentConfig {
    AgentConfig {
        period: Duration::from_secs(60),
        margin: Duration::from_secs(5),
        drift_ppm: 1_000,
        wait_replicas,
        wait_timeout: Duration::from_millis(200),
        home: ServerForm::Module,
        region: ServerForm::Module,
        log_leases: regions::LogLeases::StampedAtEnd,
    }
}

/// Two hot limits: a token bucket pool of 10 (own command) and a GCRA pool of 10
/// (through `RL.MULTI`), leased 4 units at a time.
fn hot_limits() -> Vec<HotLimit> {
    vec![
        HotLimit {
            pool_key: "pool:tb".into(),
            pool: Algorithm::token_bucket(10, HOUR).unwrap(),
            lease_key: "{api}lease".into(),
            lease_units: 4,
            slot_holder: "eu".into(),
        },
        HotLimit {
            pool_key: "pool:gc".into(),
            pool: Algorithm::gcra(9, 1, HOUR).unwrap(),
            lease_key: "{gc}lease".into(),
            lease_units: 4,
            slot_holder: "eu".into(),
        },
    ]
}

/// `RL.REGIONAL` on the region: (allowed, why, lease units left).
async fn regional(
    region: &mut redis::aio::MultiplexedConnection,
    floor_key: &str,
    lease_key: &str,
) -> (i64, String, i64) {
    let reply: Value = redis::cmd("RL.REGIONAL")
        .arg(floor_key)
        .arg(lease_key)
        .arg(&["FIXED", "1", "86400"][..])
        .query_async(region)
        .await
        .unwrap();
    regional_fields(&reply)
}

/// A regional reply's admitted field, its why and its seventh field (the lease's units left,
/// or the leased slots free).
fn regional_fields(reply: &Value) -> (i64, String, i64) {
    let Value::Array(fields) = reply else {
        panic!("{reply:?}")
    };
    let (Value::Int(allowed), Value::BulkString(why), Value::Int(seventh)) =
        (&fields[0], &fields[5], &fields[6])
    else {
        panic!("{fields:?}")
    };
    (*allowed, String::from_utf8(why.clone()).unwrap(), *seventh)
}

#[tokio::test]
async fn the_agent_leases_partial_grants_acknowledged_by_a_replica_and_regions_spend_them() {
    let (home, _home_replica) = primary_and_replica();
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let limits = hot_limits();
    let config = AgentConfig {
        wait_timeout: Duration::from_secs(10),
        ..config(1)
    };

    let first = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(first.granted, [4, 4]);
    assert_eq!(first.replaced, [Some(0), Some(0)]);
    let pttl: i64 = redis::cmd("PTTL")
        .arg("{api}lease")
        .query_async(&mut region_con)
        .await
        .unwrap();
    assert!(
        pttl <= config.lease_lifetime_ms() && pttl > config.lease_lifetime_ms() - 5_000,
        "a lease lives T = P + a derated, counted from the request: {pttl} ms"
    );

    // The region spends its floor, then the lease, then says the lease is exhausted.
    let whys: Vec<(i64, String, i64)> = {
        let mut whys = Vec::new();
        for _ in 0..6 {
            whys.push(regional(&mut region_con, "{api}floor", "{api}lease").await);
        }
        whys
    };
    assert_eq!(
        whys,
        [
            (1, "floor".into(), 4),
            (1, "lease".into(), 3),
            (1, "lease".into(), 2),
            (1, "lease".into(), 1),
            (1, "lease".into(), 0),
            (0, "lease_exhausted".into(), 0),
        ]
    );

    // The pool runs down: 10 = 4 + 4 + 2 (PARTIAL), then nothing; each lease replaces the
    // last, whose unspent units lapse.
    let second = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(second.granted, [4, 4]);
    assert_eq!(
        second.replaced,
        [Some(0), Some(4)],
        "the GCRA lease went unspent"
    );
    let third = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(third.granted, [2, 2]);
    let fourth = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(fourth.granted, [0, 0]);
    assert_eq!(
        regional(&mut region_con, "{api}floor", "{api}lease").await,
        (0, "lease_exhausted".into(), 0),
        "home answered: nothing left, which is not home unreachable"
    );
}

#[tokio::test]
async fn a_batch_no_replica_acknowledged_is_not_installed() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let error = regions::refresh(&mut home_con, &mut region_con, &hot_limits(), &config(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            AgentError::NotAcknowledged {
                acknowledged: 0,
                wanted: 1
            }
        ),
        "{error}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg("{api}lease")
        .arg("{gc}lease")
        .query_async(&mut region_con)
        .await
        .unwrap();
    assert_eq!(exists, 0, "no lease installed");
    assert_eq!(
        regional(&mut region_con, "{api}floor", "{api}lease")
            .await
            .1,
        "floor"
    );
    assert_eq!(
        regional(&mut region_con, "{api}floor", "{api}lease")
            .await
            .1,
        "home_unreachable"
    );
    // Without WAIT (a home without replicas), the same batch is installed.
    let installed = regions::refresh(&mut home_con, &mut region_con, &hot_limits(), &config(0))
        .await
        .unwrap();
    assert_eq!(installed.granted, [4, 4]);
    let last = regions::refresh(&mut home_con, &mut region_con, &hot_limits(), &config(0))
        .await
        .unwrap();
    assert_eq!(
        last.granted,
        [2, 2],
        "the unacknowledged grants were taken at home all the same: lost, never doubled"
    );
}

#[tokio::test]
async fn a_fixed_window_lease_ends_with_the_home_window_it_was_granted_in() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let limits = vec![HotLimit {
        pool_key: "pool:fw".into(),
        pool: Algorithm::fixed_window(10, Duration::from_secs(60)).unwrap(),
        lease_key: "{fw}lease".into(),
        lease_units: 4,
        slot_holder: "eu".into(),
    }];
    let (seconds, micros): (i64, i64) =
        redis::cmd("TIME").query_async(&mut home_con).await.unwrap();
    let home_now_ms = seconds * 1_000 + micros / 1_000;
    let window_end_ms = (home_now_ms / 60_000 + 1) * 60_000;
    let refresh = regions::refresh(&mut home_con, &mut region_con, &limits, &config(0))
        .await
        .unwrap();
    assert_eq!(refresh.granted, [4]);
    let end_ms = refresh.expires_at_ms[0];
    assert!(
        end_ms < window_end_ms,
        "the lease ({end_ms}) ends before the home window ({window_end_ms}), not T after"
    );
    if window_end_ms - home_now_ms > 1_000 {
        assert!(
            end_ms > window_end_ms - 1_000,
            "{end_ms} vs {window_end_ms}"
        );
        assert_eq!(refresh.replaced, [Some(0)]);
        let installed: i64 = redis::cmd("PEXPIRETIME")
            .arg("{fw}lease")
            .query_async(&mut region_con)
            .await
            .unwrap();
        assert_eq!(installed, end_ms);
    }
}

/// Home's `TIME` in Unix milliseconds.
async fn home_time_ms(home: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query_async(home).await.unwrap();
    seconds * 1_000 + micros / 1_000
}

/// A sliding window pool's lease (`W` = 60 s, shorter than `T` = 65 s) ends by the end of
/// the home window it was granted in, in `form` on both sides: the old agent, ending it `T`
/// after the sending, would end it up to 65 s later, past that window's end.
async fn a_sliding_window_lease_ends_with_the_home_window(
    home: &Server,
    region: &Server,
    form: ServerForm,
) {
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    if form == ServerForm::Functions {
        load_library(&mut home_con).await;
        load_library(&mut region_con).await;
    }
    let config = AgentConfig {
        home: form,
        region: form,
        ..config(0)
    };
    let limits = vec![HotLimit {
        pool_key: "pool:sw".into(),
        pool: Algorithm::sliding_window(10, Duration::from_secs(60)).unwrap(),
        lease_key: "{sw}lease".into(),
        lease_units: 4,
        slot_holder: "eu".into(),
    }];
    // Bounded: a refresh straddling a window's end is retried (at most once in practice).
    for _ in 0..3 {
        let before_ms = home_time_ms(&mut home_con).await;
        let refresh = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
            .await
            .unwrap();
        let after_ms = home_time_ms(&mut home_con).await;
        let window_end_ms = (before_ms / 60_000 + 1) * 60_000;
        if after_ms >= window_end_ms {
            continue;
        }
        // The grant lies between `before` and `after`, both in one window: its window.
        let end_ms = refresh.expires_at_ms[0];
        assert!(
            end_ms <= window_end_ms,
            "the lease ({end_ms}) ends by the home window's end ({window_end_ms}), not T after"
        );
        if window_end_ms - before_ms <= 1_000 {
            return;
        }
        assert!(
            end_ms > window_end_ms - 1_000,
            "{end_ms} vs {window_end_ms}"
        );
        assert_eq!(refresh.granted, [4]);
        assert_eq!(refresh.replaced, [Some(0)]);
        let installed: i64 = redis::cmd("PEXPIRETIME")
            .arg("{sw}lease")
            .query_async(&mut region_con)
            .await
            .unwrap();
        assert_eq!(installed, end_ms, "the region key ends with the lease");
        return;
    }
    panic!("every refresh straddled a window's end");
}

#[tokio::test]
async fn a_sliding_window_lease_ends_with_the_home_window_on_the_module() {
    let (home, region) = (Server::start(&[]), Server::start(&[]));
    a_sliding_window_lease_ends_with_the_home_window(&home, &region, ServerForm::Module).await;
}

#[tokio::test]
async fn a_sliding_window_lease_ends_with_the_home_window_through_fcall() {
    let (home, region) = (
        Server::start_without_module(&[]),
        Server::start_without_module(&[]),
    );
    a_sliding_window_lease_ends_with_the_home_window(&home, &region, ServerForm::Functions).await;
}

/// A policy of one regional limit: a fixed window floor of 2 a day, its lease in
/// `{api}floor:lease`.
fn regional_policy() -> redis_ratelimit_client::Policy {
    use redis_ratelimit_client::{Limit, Policy};
    let floor = Algorithm::fixed_window(2, Duration::from_secs(86_400)).unwrap();
    Policy::builder("regional")
        .limit(
            Limit::new("global", floor, "{{api}}floor")
                .unwrap()
                .regional(":lease")
                .unwrap(),
        )
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// What the limiter's checks said: (allowed, why, remaining, the `RateLimit` and
/// `RateLimit-Policy` fields).
type Said = (bool, &'static str, u64, String, String);

async fn check_regional(limiter: &redis_ratelimit_client::RateLimiter) -> Said {
    use redis_ratelimit_client::Inputs;
    use redis_ratelimit_client::http::headers;
    let decision = limiter.check("regional", &Inputs::new()).await.unwrap();
    let regional = decision.regional().expect("a regional limit says why");
    assert!(decision.source.is_store(), "{decision:?}");
    if decision.allowed {
        assert_eq!(decision.wait, Duration::ZERO, "{decision:?}");
    }
    (
        decision.allowed,
        regional.why_str(),
        decision.remaining(),
        headers::service_field(&decision).unwrap(),
        headers::policy_field(&decision, None).unwrap(),
    )
}

/// The floor, then (no lease) `home_unreachable` with the floor's quota in the headers, then
/// a lease's units, then `lease_exhausted`: the decisions and their header fields say why,
/// on the module and on the Functions library alike, and the metric counts them by why.
async fn regional_decisions_say_why(server: &Server, backend: redis_ratelimit_client::Backend) {
    use redis_ratelimit_client::RateLimiter;
    use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions};
    let options = RedisStoreOptions {
        backend,
        ..RedisStoreOptions::default()
    };
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let store = RedisStore::with_options(&url, options).unwrap();
    let limiter = RateLimiter::builder(store)
        .policy(regional_policy())
        .build()
        .unwrap();
    let mut said = Vec::new();
    for _ in 0..3 {
        said.push(check_regional(&limiter).await);
    }
    let mut region = server.async_conn_untimed().await;
    let (seconds, _): (i64, i64) = redis::cmd("TIME").query_async(&mut region).await.unwrap();
    let mut install = match backend {
        redis_ratelimit_client::Backend::Functions => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg("rl_regionlease").arg(1);
            cmd
        }
        _ => redis::cmd("RL.REGIONLEASE"),
    };
    let _: i64 = install
        .arg("{api}floor:lease")
        .arg(2)
        .arg((seconds + 3600) * 1000)
        .query_async(&mut region)
        .await
        .unwrap();
    for _ in 0..3 {
        said.push(check_regional(&limiter).await);
    }
    let summary: Vec<(bool, &str, u64)> = said.iter().map(|s| (s.0, s.1, s.2)).collect();
    assert_eq!(
        summary,
        [
            (true, "floor", 1),
            (true, "floor", 0),
            (false, "home_unreachable", 0),
            (true, "lease", 1),
            (true, "lease", 0),
            (false, "lease_exhausted", 0),
        ],
        "{backend}: {said:?}"
    );
    // The headers show the floor's quota (2 a day) and why.
    for (_, why, remaining, service, policy) in &said {
        assert_eq!(policy, "\"global\";q=2;w=86400", "{backend}");
        assert!(
            service.starts_with(&format!("\"global\";r={remaining};t="))
                && service.ends_with(&format!(";regional=\"{why}\"")),
            "{backend}: {service}"
        );
    }
}

/// Runs the checks under a recorder, and asserts the regional metric by why.
fn regional_decisions_counted(server: &Server, backend: redis_ratelimit_client::Backend) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(regional_decisions_say_why(server, backend));
    });
    let mut counted = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != "ratelimit_regional_decisions_total" {
            continue;
        }
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        if let DebugValue::Counter(count) = value {
            counted.insert(labels.join(","), count);
        }
    }
    let expected: std::collections::BTreeMap<String, u64> = [
        ("policy=regional,why=floor", 2),
        ("policy=regional,why=home_unreachable", 1),
        ("policy=regional,why=lease", 2),
        ("policy=regional,why=lease_exhausted", 1),
    ]
    .into_iter()
    .map(|(labels, count)| (labels.to_string(), count))
    .collect();
    assert_eq!(counted, expected, "{backend}");
}

#[test]
fn regional_decisions_say_why_on_the_module() {
    let server = Server::start(&[]);
    regional_decisions_counted(&server, redis_ratelimit_client::Backend::Module);
}

#[test]
fn regional_decisions_say_why_on_the_functions_library() {
    let server = Server::start_without_module(&[]);
    regional_decisions_counted(&server, redis_ratelimit_client::Backend::Functions);
}

/// Loads the Functions library on a server without the module.
async fn load_library(con: &mut redis::aio::MultiplexedConnection) {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(redis_ratelimit_client::store::LIBRARY)
        .query_async(con)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_agent_speaks_the_functions_librarys_fcall_form_to_home_and_region() {
    let home = Server::start_without_module(&[]);
    let region = Server::start_without_module(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    load_library(&mut home_con).await;
    load_library(&mut region_con).await;
    let config = AgentConfig {
        home: ServerForm::Functions,
        region: ServerForm::Functions,
        ..config(0)
    };
    let limits = hot_limits();
    let first = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(first.granted, [4, 4]);
    assert_eq!(first.replaced, [Some(0), Some(0)]);
    let second = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(second.granted, [4, 4]);
    assert_eq!(
        second.replaced,
        [Some(4), Some(4)],
        "unspent, replaced whole"
    );
    let third = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(
        third.granted,
        [2, 2],
        "the pools of 10 ran down through FCALL"
    );
    let left: String = redis::cmd("GET")
        .arg("{api}lease")
        .query_async(&mut region_con)
        .await
        .unwrap();
    assert_eq!(left, "2");
}

/// A sliding log pool's grant counts for `W + T` at home: its entries outlive the lease by
/// the whole window, as if stamped at the lease's end.
#[tokio::test]
async fn a_sliding_log_pools_lease_is_counted_at_home_for_w_plus_t() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let window = Duration::from_secs(600);
    let limits = vec![HotLimit {
        pool_key: "pool:log".into(),
        pool: Algorithm::sliding_log(4, window).unwrap(),
        lease_key: "{log}lease".into(),
        lease_units: 3,
        slot_holder: "eu".into(),
    }];
    let config = config(0);
    let lifetime_ms = (config.period + config.margin).as_millis() as i64;
    let first = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(first.granted, [3]);
    let pttl: i64 = redis::cmd("PTTL")
        .arg("pool:log")
        .query_async(&mut home_con)
        .await
        .unwrap();
    let window_ms = window.as_millis() as i64;
    // The entries' expiry is rounded up to the next millisecond from the server's clock in
    // microseconds, and PTTL counts from the current millisecond truncated: up to 1 ms more
    // (seen on Redis 8.6.3: 665,001 ms for W + T = 665,000).
    assert!(
        pttl > window_ms + lifetime_ms - 5_000 && pttl <= window_ms + lifetime_ms + 1,
        "the grant's entries live W + T at home: {pttl} ms"
    );
    // The pool of 4 has 1 left for the next lease.
    let second = regions::refresh(&mut home_con, &mut region_con, &limits, &config)
        .await
        .unwrap();
    assert_eq!(second.granted, [1]);
}

/// A stalled home (it keeps the connection and answers nothing) fails the refresh within
/// the lease's lifetime, installing nothing, instead of holding the agent forever.
#[tokio::test]
async fn a_stalled_home_fails_the_refresh_within_the_lease_lifetime() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let config = AgentConfig {
        period: Duration::from_millis(200),
        margin: Duration::from_millis(100),
        ..config(0)
    };
    let stalled = home.pause();
    let started = std::time::Instant::now();
    let refresh = regions::refresh(&mut home_con, &mut region_con, &hot_limits(), &config).await;
    let took = started.elapsed();
    drop(stalled);
    assert!(
        matches!(refresh, Err(AgentError::TooLate { .. })),
        "{refresh:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "within T (300 ms) and a margin: {took:?}"
    );
    let lease: Option<String> = redis::cmd("GET")
        .arg("{api}lease")
        .query_async(&mut region_con)
        .await
        .unwrap();
    assert_eq!(lease, None, "nothing installed");
}

/// A stalled region fails the refresh within the lease's lifetime too.
#[tokio::test]
async fn a_stalled_region_fails_the_refresh_within_the_lease_lifetime() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (
        home.async_conn_untimed().await,
        region.async_conn_untimed().await,
    );
    let config = AgentConfig {
        period: Duration::from_millis(200),
        margin: Duration::from_millis(100),
        ..config(0)
    };
    let stalled = region.pause();
    let started = std::time::Instant::now();
    let refresh = regions::refresh(&mut home_con, &mut region_con, &hot_limits(), &config).await;
    let took = started.elapsed();
    drop(stalled);
    assert!(matches!(refresh, Err(AgentError::Region(_))), "{refresh:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// An in-flight call on the region: `RL.REGIONAL floor lease CONCURRENCY 1 holder ttl_ms`
/// (the module's, or the library's `FCALL`): (allowed, why, leased slots free).
async fn in_flight_call(
    region: &mut redis::aio::MultiplexedConnection,
    form: ServerForm,
    holder: &str,
    ttl_ms: u64,
) -> (i64, String, i64) {
    let mut cmd = match form {
        ServerForm::Module => redis::cmd("RL.REGIONAL"),
        ServerForm::Functions => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg("rl_regional").arg(2);
            cmd
        }
    };
    let reply: Value = cmd
        .arg("{cc}floor")
        .arg("{cc}lease")
        .arg("CONCURRENCY")
        .arg(1)
        .arg(holder)
        .arg(ttl_ms)
        .query_async(region)
        .await
        .unwrap();
    regional_fields(&reply)
}

/// Two regions lease one in-flight pool of 3 slots, 2 at a time, each slot a pool holder
/// `<region>:<i>` living `T`: a refresh renews a region's holders (never more of them), the
/// other region gets what is left, and a region gives a leased slot only to a call ending by
/// the lease's end; the module's commands and the library's `FCALL` forms alike.
#[tokio::test]
async fn an_in_flight_pool_is_leased_as_holders_that_each_refresh_renews() {
    for form in [ServerForm::Module, ServerForm::Functions] {
        let start = |args| match form {
            ServerForm::Module => Server::start(args),
            ServerForm::Functions => Server::start_without_module(args),
        };
        let (home, eu, us) = (start(&[]), start(&[]), start(&[]));
        let mut home_con = home.async_conn_untimed().await;
        let mut eu_con = eu.async_conn_untimed().await;
        let mut us_con = us.async_conn_untimed().await;
        if form == ServerForm::Functions {
            for con in [&mut home_con, &mut eu_con, &mut us_con] {
                load_library(con).await;
            }
        }
        let config = AgentConfig {
            home: form,
            region: form,
            ..config(0)
        };
        let pool = |slot_holder: &str| HotLimit {
            pool_key: "pool:cc".into(),
            pool: Algorithm::concurrency(3, Duration::from_secs(1)).unwrap(),
            lease_key: "{cc}lease".into(),
            lease_units: 2,
            slot_holder: slot_holder.into(),
        };
        let (eu_pool, us_pool) = (vec![pool("eu")], vec![pool("us")]);
        let first = regions::refresh(&mut home_con, &mut eu_con, &eu_pool, &config)
            .await
            .unwrap();
        assert_eq!(
            (first.granted.as_slice(), first.replaced.as_slice()),
            (&[2][..], &[Some(0)][..])
        );
        let again = regions::refresh(&mut home_con, &mut eu_con, &eu_pool, &config)
            .await
            .unwrap();
        assert_eq!(
            again.granted,
            [2],
            "{form:?}: the same two holders, renewed"
        );
        let other = regions::refresh(&mut home_con, &mut us_con, &us_pool, &config)
            .await
            .unwrap();
        assert_eq!(other.granted, [1], "{form:?}: what the first region left");
        // Home holds the three, living T = P + a (65 s) from the last grant.
        let holders: Value = match form {
            ServerForm::Module => redis::cmd("RL.PEEK")
                .arg("pool:cc")
                .arg("CONCURRENCY")
                .arg(3)
                .query_async(&mut home_con)
                .await
                .unwrap(),
            ServerForm::Functions => redis::cmd("FCALL")
                .arg("rl_peek")
                .arg(1)
                .arg("pool:cc")
                .arg("CONCURRENCY")
                .arg(3)
                .query_async(&mut home_con)
                .await
                .unwrap(),
        };
        let Value::Array(fields) = holders else {
            panic!("{holders:?}")
        };
        let (Value::Int(free), Value::Int(reset_ms)) = (&fields[1], &fields[3]) else {
            panic!("{fields:?}")
        };
        assert_eq!(*free, 0, "{form:?}: no slot left at home");
        assert!(
            (60_000..=65_000).contains(reset_ms),
            "{form:?}: the last holder ends T after its grant: {reset_ms} ms"
        );
        // The first region: its floor's slot, then its two leased slots for calls ending
        // by the lease's end (T derated: 64.935 s), then none.
        let calls = [
            ("a", 60_000, (1, "floor", 2)),
            ("b", 70_000, (0, "lease_exhausted", 2)),
            ("b", 60_000, (1, "lease", 1)),
            ("c", 60_000, (1, "lease", 0)),
            ("d", 1_000, (0, "lease_exhausted", 0)),
        ];
        for (holder, ttl_ms, (allowed, why, free)) in calls {
            assert_eq!(
                in_flight_call(&mut eu_con, form, holder, ttl_ms).await,
                (allowed, why.to_string(), free),
                "{form:?}: {holder} for {ttl_ms} ms"
            );
        }
    }
}
