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
    hot_and_cold(Server::start(&[]), Server::start(&[]), false);
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
    hot_and_cold(home, Server::start_without_module(&[]), true);
}

fn hot_and_cold(home: Server, region: Server, functions: bool) {
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
        &[("api.yaml", API)],
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
    assert!(
        wait_until(Duration::from_secs(10), || !keys(&region, "*hot*:lease")
            .is_empty()),
        "no lease for the hot key: {}",
        service.log()
    );
    let lease_key = keys(&region, "*hot*:lease").remove(0);
    let units: String = redis::cmd("GET")
        .arg(&lease_key)
        .query(&mut region.conn())
        .unwrap();
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
