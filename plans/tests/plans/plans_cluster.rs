//! The policy store on a Redis Cluster: every key in the `{rl-policy}` slot, so `rlctl
//! --cluster` and `PlanSource::connect_cluster`, given only a node that does *not* own that
//! slot, still write and follow it (a plain connection there would answer `MOVED`), and a
//! change made through one node reaches a source subscribed on another.

use std::process::Command;
use std::time::Duration;

use redis_ratelimit_plans::plan_store;
use redis_ratelimit_plans::{PlanOptions, PlanSource, PlanStatus};
use redis_ratelimit_testkit::cluster::{Cluster, keyslot};
use redis_ratelimit_testkit::server::{Server, wait_until_async};

fn url(node: &Server) -> String {
    format!("redis://127.0.0.1:{}/", node.port)
}

/// Runs `rlctl --redis URLS ARGS...` and returns (success, stdout + stderr).
fn rlctl(urls: &str, extra: &[&str], args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rlctl"))
        .args(["--redis", urls, "--who", "test"])
        .args(extra)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

async fn until_version(source: &PlanSource, version: u64) {
    let reached = wait_until_async(Duration::from_secs(5), || async move {
        source.version() >= version
    })
    .await;
    assert!(
        reached,
        "the source is still at version {} ({:?}), wanted {version}",
        source.version(),
        source.status()
    );
}

#[tokio::test]
async fn rlctl_and_a_source_reach_the_store_through_any_node_of_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let owner = cluster.owner(keyslot(plan_store::VERSION_KEY));
    let others: Vec<&Server> = cluster
        .primaries()
        .into_iter()
        .filter(|node| node.port != owner.port)
        .collect();
    let (elsewhere, another) = (others[0], others[1]);

    // Without --cluster, a node that does not own the slot refuses: the error says so and
    // what to do, and nothing is written.
    let (written, said) = rlctl(
        &url(elsewhere),
        &[],
        &["plan", "set", "pro", "--limit", "a=fixed:5/1d"],
    );
    assert!(!written && said.contains("add --cluster"), "{said}");
    // Several URLs without --cluster are refused before anything is sent.
    let both = format!("{},{}", url(elsewhere), url(another));
    let (written, said) = rlctl(&both, &[], &["list"]);
    assert!(!written && said.contains("--cluster"), "{said}");

    let source = PlanSource::connect_cluster(&[url(another).as_str()], PlanOptions::default())
        .await
        .unwrap();
    assert_eq!(source.status(), PlanStatus::Loaded(0));

    let (written, said) = rlctl(
        &url(elsewhere),
        &["--cluster"],
        &["plan", "set", "pro", "--limit", "a=fixed:5/1d"],
    );
    assert!(written, "{said}");
    let (written, said) = rlctl(
        &both,
        &["--cluster"],
        &["tenant", "set", "acme", "--plan", "pro"],
    );
    assert!(written, "{said}");
    // The keys are on the owner of the slot, and only there.
    let version: Option<u64> = redis::cmd("GET")
        .arg(plan_store::VERSION_KEY)
        .query(&mut owner.conn())
        .unwrap();
    assert_eq!(version, Some(2));
    for node in [elsewhere, another] {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut node.conn()).unwrap();
        assert!(keys.is_empty(), "keys on a node without the slot: {keys:?}");
    }
    // The source, subscribed on `another`, follows both changes.
    until_version(&source, 2).await;
    let effective = source.resolve("acme", &[]);
    assert_eq!(effective.len(), 1, "{effective:?}");
    let (read, said) = rlctl(&url(another), &["--cluster"], &["get", "acme"]);
    assert!(read && said.contains("a=fixed:5/1d"), "{said}");
}
