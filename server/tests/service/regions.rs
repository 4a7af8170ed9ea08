//! The service as one region of a quota shared across regions: its limits decided by
//! `RL.REGIONAL` on its own Redis, and its lease agent leasing from a home Redis the limits
//! it found hot, and not the cold ones.

use std::time::Duration;

use redis_ratelimit_testkit::server::{Server, wait_until};

use crate::harness::{Service, TempDir};

/// 8 an hour per key: with two regions of equal weight and half the quota in floors, this
/// region's floor is 2 an hour and home's pool 4.
const API: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 8, name: per-key}
"#;

fn region_file(home: &Server) -> String {
    format!(
        "region: eu\nhome_url: redis://127.0.0.1:{}/\nweights: {{eu: 1, us: 1}}\n\
         floor_percent: 50\nperiod_ms: 200\nmargin_ms: 300\nwait_replicas: 0\n\
         wait_timeout_ms: 100\nlease_units: 3\nmax_hot_keys: 10\n",
        home.port
    )
}

fn body(key: &str) -> String {
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"api_key","value":"{key}"}}]}}],"hitsAddend":1}}"#
    )
}

fn allowed(service: &Service, key: &str) -> bool {
    let (_, answer) = service.check_json(&body(key));
    answer["allowed"].as_bool().unwrap()
}

/// Waits (bounded) for the agent to install a lease for the key `hot` in `region`, and
/// returns its units left.
fn hot_lease_units(service: &Service, region: &Server) -> String {
    assert!(
        wait_until(Duration::from_secs(10), || !keys(region, "*hot*:lease")
            .is_empty()),
        "no lease for the hot key: {}",
        service.log()
    );
    let lease_key = keys(region, "*hot*:lease").remove(0);
    redis::cmd("GET")
        .arg(&lease_key)
        .query(&mut region.conn())
        .unwrap()
}

fn keys(server: &Server, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .unwrap();
    keys.sort();
    keys
}

/// The agent's successful refreshes so far, from `/metrics`.
fn refreshes(service: &Service) -> u64 {
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    metrics
        .lines()
        .find(|line| line.starts_with("ratelimit_region_refreshes_total{result=\"ok\"}"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_hot_key_gets_leases_from_home_and_a_cold_one_does_not() {
    hot_and_cold(API, Server::start(&[]), Server::start(&[]), false);
}

/// A sliding window of 8 an hour splits as the fixed window does (floor 2, pool 4), its pool
/// asked with `RL.SLIDING` and its leases ending with home's window.
const SLIDING: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 8, algorithm: sliding_window, name: per-key}
"#;

#[test]
fn a_hot_sliding_window_key_gets_leases_and_never_exceeds_its_floor_and_the_pool() {
    hot_and_cold(SLIDING, Server::start(&[]), Server::start(&[]), false);
}

/// The same with a region that runs the Functions library (the service loads it; the
/// agent installs through `FCALL rl_regionlease`) and a home that runs it too.
#[test]
fn a_region_and_a_home_on_the_functions_library_lease_alike() {
    let home = Server::start_without_module(&[]);
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(redis_ratelimit_client::store::LIBRARY)
        .query(&mut home.conn())
        .unwrap();
    hot_and_cold(API, home, Server::start_without_module(&[]), true);
}

fn hot_and_cold(limits: &str, home: Server, region: Server, functions: bool) {
    let dir = TempDir::new("region");
    let mut file = region_file(&home);
    if functions {
        file.push_str("home_backend: functions\n");
    }
    dir.write("region.yaml", &file);
    let region_path = dir.0.join("region.yaml");
    let url = format!("redis://127.0.0.1:{}/", region.port);
    let mut service = Service::start(
        &url,
        &[("api.yaml", limits)],
        &["--region-config", region_path.to_str().unwrap()],
    );
    // The cold key: one call, the floor keeps half its 2.
    let (_, answer) = service.check_json(&body("cold"));
    assert_eq!(answer["allowed"], true);
    let backend = if functions { "functions" } else { "module" };
    assert_eq!(answer["backend"], backend, "{answer}");
    assert_eq!(answer["statuses"][0]["regional"], "floor", "{answer}");
    // The hot key: its floor of 2, then denied (no lease yet: home_unreachable).
    assert!(allowed(&service, "hot"));
    assert!(allowed(&service, "hot"));
    assert!(
        !allowed(&service, "hot"),
        "the floor is 2 and no lease lives yet"
    );
    // The agent leases for it within a few periods: the next calls are paid by the lease.
    let units = hot_lease_units(&service, &region);
    assert_eq!(units, "3", "a lease of k = 3 units");
    let mut admitted = 2 + (0..10).filter(|_| allowed(&service, "hot")).count();
    assert!(admitted >= 5, "the lease's 3 units paid: {admitted}");
    assert_eq!(
        keys(&home, "pool:*hot*").len(),
        1,
        "home's pool gave the units"
    );
    // Two more refreshes: the cold key was never leased, on either side.
    let seen = refreshes(&service);
    assert!(
        wait_until(Duration::from_secs(10), || refreshes(&service) >= seen + 2),
        "the agent stopped refreshing: {}",
        service.log()
    );
    assert!(
        keys(&home, "pool:*cold*").is_empty(),
        "a cold key asks home nothing"
    );
    assert!(keys(&region, "*cold*:lease").is_empty());
    // Never more than the floor of 2 and home's pool of 4 (the rest of the 8 is the other
    // region's floor); the pool's last unit may lapse unspent in a lease replaced by the
    // next refresh's empty grant (the exact mode: no give-backs).
    admitted += (0..10).filter(|_| allowed(&service, "hot")).count();
    assert!(
        (5..=6).contains(&admitted),
        "floor 2 + at most the pool's 4: {admitted}"
    );
    // A clean stop: the agent ends, its leases are left to lapse (no give-backs).
    assert!(service.terminate(), "{}", service.log());
    assert!(service.log().contains("region lease agent stopped"));
}

/// A token bucket of 8 an hour (bursts of 8): with two regions of equal weight and half in
/// floors, this region's floor is a bucket of 2 refilled one per 30 min, and home's pool 4
/// at one per 15 min less the pre-pay of one lease lifetime's refill (⌈0.5 s / 900 s⌉ = 1):
/// 3. Over the test (seconds) no floor or pool refills a token.
const BUCKET: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 8, algorithm: token_bucket, name: per-key}
"#;

/// GCRA of 8 an hour, bursts of 8: the floor 2 at once (2 an hour), the pool 4 less the
/// pre-pay of 1: 3 at once (3 an hour).
const GCRA: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 8, algorithm: gcra, name: per-key}
"#;

#[test]
fn a_hot_token_bucket_key_gets_leases_and_never_exceeds_its_floor_and_the_prepaid_pool() {
    bucket_hot_and_cold(BUCKET, "", 2, 3);
}

#[test]
fn a_hot_gcra_key_gets_leases_and_never_exceeds_its_floor_and_the_prepaid_pool() {
    bucket_hot_and_cold(GCRA, "", 2, 3);
}

/// `pool_mode: carryover`: the pool keeps its whole 4 (no pre-pay), leased whole.
#[test]
fn a_carryover_pool_keeps_its_whole_capacity() {
    bucket_hot_and_cold(BUCKET, "pool_mode: carryover\n", 2, 4);
}

/// The hot key is admitted its floor, then leases from home's pool, never more than floor +
/// pool over the test; the cold key never reaches home.
fn bucket_hot_and_cold(limits: &str, extra: &str, floor: usize, pool: usize) {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let dir = TempDir::new("region");
    // k = 10: a lease takes the whole pre-paid pool, so its units show the pool's capacity.
    let mut file = region_file(&home).replace("lease_units: 3", "lease_units: 10");
    file.push_str(extra);
    dir.write("region.yaml", &file);
    let region_path = dir.0.join("region.yaml");
    let url = format!("redis://127.0.0.1:{}/", region.port);
    let mut service = Service::start(
        &url,
        &[("api.yaml", limits)],
        &["--region-config", region_path.to_str().unwrap()],
    );
    let (_, answer) = service.check_json(&body("cold"));
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["statuses"][0]["regional"], "floor", "{answer}");
    for call in 0..floor {
        assert!(allowed(&service, "hot"), "floor call {call}");
    }
    let (_, answer) = service.check_json(&body("hot"));
    assert_eq!(
        answer["allowed"], false,
        "the floor is spent, no lease yet: {answer}"
    );
    assert_eq!(
        answer["statuses"][0]["regional"], "home_unreachable",
        "{answer}"
    );
    let units = hot_lease_units(&service, &region);
    assert_eq!(
        units,
        pool.to_string(),
        "a lease of the whole pool (k = 10): its capacity, less the pre-pay when pre-paid"
    );
    let mut admitted = floor + (0..10).filter(|_| allowed(&service, "hot")).count();
    assert!(admitted > floor, "the lease paid: {admitted}");
    assert_eq!(
        keys(&home, "pool:*hot*").len(),
        1,
        "home's pool gave the units"
    );
    let seen = refreshes(&service);
    assert!(
        wait_until(Duration::from_secs(10), || refreshes(&service) >= seen + 2),
        "the agent stopped refreshing: {}",
        service.log()
    );
    admitted += (0..10).filter(|_| allowed(&service, "hot")).count();
    assert!(
        admitted <= floor + pool,
        "at most the floor {floor} + the pre-paid pool {pool}: {admitted}"
    );
    assert!(
        keys(&home, "pool:*cold*").is_empty(),
        "a cold key asks home nothing"
    );
    assert!(keys(&region, "*cold*:lease").is_empty());
    assert!(service.terminate(), "{}", service.log());
}

/// Every limit a region cannot share is refused at start, naming its rule and field; and a
/// reload to one is refused with the config in force kept.
#[test]
fn a_limit_the_region_cannot_share_is_refused_at_start_and_on_reload() {
    let home = Server::start(&[]);
    let region = Server::start(&[]);
    let dir = TempDir::new("region");
    dir.write("region.yaml", &region_file(&home));
    let all_floors = region_file(&home).replace("floor_percent: 50", "floor_percent: 100");
    dir.write("all-floors.yaml", &all_floors);
    let url = format!("redis://127.0.0.1:{}/", region.port);
    let limit = |rate_limit: &str| {
        format!("domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {rate_limit}\n")
    };
    let cases = [
        (
            "region.yaml",
            "{unit: hour, requests_per_unit: 3}",
            "'requests_per_unit' 3 leaves this region a floor of 0",
        ),
        (
            "region.yaml",
            "{unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 3}",
            "'burst' 3 leaves this region a floor of 0",
        ),
        (
            "all-floors.yaml",
            "{unit: hour, requests_per_unit: 8, algorithm: token_bucket}",
            "'floor_percent' 100 leaves home's pool no rate",
        ),
        (
            // 8 a second, bursts of 4: floors 1 + 1, the pool 2 at 4/s; T = 0.5 s pre-pays
            // 2, the whole pool.
            "region.yaml",
            "{unit: second, requests_per_unit: 8, algorithm: token_bucket, burst: 4}",
            "the pre-pay of 2 units",
        ),
        (
            "region.yaml",
            "{unit: second, requests_per_unit: 8, algorithm: concurrency}",
            "'algorithm' is concurrency",
        ),
    ];
    for (file, rate_limit, expected) in cases {
        let path = dir.0.join(file);
        let text = limit(rate_limit);
        let (status, log) = Service::exit_at_start(
            &url,
            &[("api.yaml", &text)],
            &["--region-config", path.to_str().unwrap()],
        );
        assert!(!status.success(), "{rate_limit}: started");
        assert!(
            log.contains("rule 'api_key'") && log.contains(expected),
            "{rate_limit}: {expected}\n{log}"
        );
    }
    // A reload to a token bucket whose pre-pay eats the pool is refused; the bucket of 8 an
    // hour stays in force.
    let region_path = dir.0.join("region.yaml");
    let service = Service::start(
        &url,
        &[("api.yaml", BUCKET)],
        &["--region-config", region_path.to_str().unwrap()],
    );
    service.config.write(
        "api.yaml",
        &limit("{unit: second, requests_per_unit: 8, algorithm: token_bucket, burst: 4}"),
    );
    assert!(
        service.wait_log("config change refused", 1),
        "{}",
        service.log()
    );
    assert!(
        service.log().contains("the pre-pay of 2 units"),
        "{}",
        service.log()
    );
    let (_, answer) = service.check_json(&body("k"));
    assert_eq!(answer["statuses"][0]["regional"], "floor", "{answer}");
    assert_eq!(
        answer["headers"]["ratelimit-policy"], "\"per-key\";q=2;w=3600",
        "the floor of the bucket in force: {answer}"
    );
    assert_eq!(answer["statuses"][0]["limitRemaining"], 1, "{answer}");
    // A caller's own limit the region cannot split (3 an hour: a floor of 0) is refused,
    // never decided whole in this region alone.
    let (code, refused) = service.check_json(
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"o"}],"limit":{"requestsPerUnit":3,"unit":"HOUR"}}]}"#,
    );
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("cannot be shared across regions")),
        "{refused}"
    );
}
