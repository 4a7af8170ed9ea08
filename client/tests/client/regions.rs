//! The regional lease agent against real servers: a home (with a replica, for `WAIT`) and a
//! region, each a `redis-server` with the module.

use std::time::Duration;

use redis::Value;
use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::regions::{self, AgentConfig, AgentError, HotLimit};
use redis_ratelimit_testkit::server::{Server, primary_and_replica};

const HOUR: Duration = Duration::from_secs(3600);

/// A connection without the redis crate's own response timeout (500 ms by default in 1.x):
/// the agent's `WAIT` on the home primary may take up to its `wait_timeout`, longer while a
/// just-started replica is still syncing.
async fn connect(server: &Server) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Asks for `wait_replicas` (a replica that is there answers at once; a missing one is
/// waited for 200 ms).
fn config(wait_replicas: u32) -> AgentConfig {
    AgentConfig {
        period: Duration::from_secs(60),
        margin: Duration::from_secs(5),
        drift_ppm: 1_000,
        wait_replicas,
        wait_timeout: Duration::from_millis(200),
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
        },
        HotLimit {
            pool_key: "pool:gc".into(),
            pool: Algorithm::gcra(9, 1, HOUR).unwrap(),
            lease_key: "{gc}lease".into(),
            lease_units: 4,
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
    let Value::Array(fields) = reply else {
        panic!("{reply:?}")
    };
    let (Value::Int(allowed), Value::BulkString(why), Value::Int(left)) =
        (&fields[0], &fields[5], &fields[6])
    else {
        panic!("{fields:?}")
    };
    (*allowed, String::from_utf8(why.clone()).unwrap(), *left)
}

#[tokio::test]
async fn the_agent_leases_partial_grants_acknowledged_by_a_replica_and_regions_spend_them() {
    let (home, _home_replica) = primary_and_replica();
    let region = Server::start(&[]);
    let (mut home_con, mut region_con) = (connect(&home).await, connect(&region).await);
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
    let (mut home_con, mut region_con) = (connect(&home).await, connect(&region).await);
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
    let (mut home_con, mut region_con) = (connect(&home).await, connect(&region).await);
    let limits = vec![HotLimit {
        pool_key: "pool:fw".into(),
        pool: Algorithm::fixed_window(10, Duration::from_secs(60)).unwrap(),
        lease_key: "{fw}lease".into(),
        lease_units: 4,
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
