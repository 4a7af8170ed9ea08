//! Plans and overrides against a real server with the module: the store's atomic
//! writes, the audit stream and notifications, `rlctl` (good and bad input), precedence
//! and expiry through the limiter, what a change does to existing state, and how a
//! replica's view follows the store (notifications, the backstop, a cut subscription,
//! Redis absent at start). The fleet measurement is in `plans_fleet`.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use redis_ratelimit_client::policy::PolicyBuilder;
use redis_ratelimit_client::store::{MemoryStore, RedisStore};
use redis_ratelimit_client::{Algorithm, Decision, Inputs, Limit, Policy, RateLimiter, Source};
use redis_ratelimit_plans::edit;
use redis_ratelimit_plans::plan_store::{self, PlanStoreError};
use redis_ratelimit_plans::spec::LimitSpec;
use redis_ratelimit_plans::{PlanOptions, PlanSource, PlanStatus};
use redis_ratelimit_testkit::helpers::{cut_subscriptions, pubsub_clients, write_marks};
use redis_ratelimit_testkit::server::{Server, wait_until_async};

pub(super) fn url(server: &Server) -> String {
    format!("redis://127.0.0.1:{}/", server.port)
}

/// Runs `rlctl --redis URL ARGS...`.
pub(super) fn rlctl(server: &Server, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlctl"))
        .args(["--redis", &url(server), "--who", "test"])
        .args(args)
        .output()
        .unwrap()
}

/// Runs rlctl and insists it succeeded; returns its stdout.
pub(super) fn rlctl_ok(server: &Server, args: &[&str]) -> String {
    let output = rlctl(server, args);
    assert!(
        output.status.success(),
        "rlctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `rlctl plan set <plan> --limit <spec>...`, which must succeed.
pub(super) fn plan_set(server: &Server, plan: &str, limits: &[&str]) {
    let mut args = vec!["plan", "set", plan];
    for limit in limits {
        args.extend(["--limit", limit]);
    }
    rlctl_ok(server, &args);
}

pub(super) fn spec(text: &str) -> LimitSpec {
    LimitSpec::parse(text).unwrap()
}

/// A limiter on `server` with policy `api` from the store for input `tenant` (default: a
/// fixed window of 1 a day), and its source with `options`.
/// Policy "api", its limits from the store by its "tenant" input, with one default: `name`,
/// a fixed window of `limit` per `window` on `key`.
fn from_store(name: &str, limit: u64, window: Duration, key: &str) -> PolicyBuilder {
    Policy::from_store("api", "tenant")
        .limit(Limit::new(name, Algorithm::fixed_window(limit, window).unwrap(), key).unwrap())
}

pub(super) async fn limiter(server: &Server, options: PlanOptions) -> RateLimiter {
    let source = PlanSource::connect(&url(server), options).await.unwrap();
    let policy = from_store("per-day", 1, Duration::from_secs(86_400), "unused")
        .deny_cache(false)
        // Debug builds on a shared machine: no decision from the fallback.
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let store = RedisStore::new(&url(server)).unwrap();
    store.connect().await.unwrap();
    RateLimiter::builder(store)
        .policy(policy)
        .policy_source(source)
        .build()
        .unwrap()
}

pub(super) async fn check(limiter: &RateLimiter, tenant: &str) -> Decision {
    let decision = limiter
        .check("api", &Inputs::new().with("tenant", tenant))
        .await
        .unwrap();
    assert_ne!(decision.source, Source::Fallback, "{decision:?}");
    decision
}

/// Each limit's (name, quota) in a decision.
pub(super) fn quotas(decision: &Decision) -> Vec<(String, u64)> {
    decision
        .limits
        .iter()
        .map(|limit| (limit.name.to_string(), limit.quota))
        .collect()
}

/// Polls until the limiter's source is at `version`, at most `timeout`; returns how long.
async fn until_version(limiter: &RateLimiter, version: u64, timeout: Duration) -> Duration {
    let started = Instant::now();
    while limiter.policy_source::<PlanSource>().unwrap().version() < version {
        assert!(
            started.elapsed() < timeout,
            "still at version {} after {timeout:?}, wanted {version}",
            limiter.policy_source::<PlanSource>().unwrap().version()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    started.elapsed()
}

pub(super) fn store_version(server: &Server) -> u64 {
    let version: Option<u64> = redis::cmd("GET")
        .arg(plan_store::VERSION_KEY)
        .query(&mut server.conn())
        .unwrap();
    version.unwrap_or(0)
}

/// Runs an `rlctl` change and waits (at most 2 s) until `limiter` follows the store's new
/// version.
async fn rlctl_followed(server: &Server, limiter: &RateLimiter, args: &[&str]) {
    rlctl_ok(server, args);
    until_version(limiter, store_version(server), Duration::from_secs(2)).await;
}

#[tokio::test]
async fn concurrent_writers_one_is_refused_as_stale_and_no_update_is_lost() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "free", "--limit", "a=fixed:1/1d"]);
    rlctl_ok(&server, &["plan", "set", "pro", "--limit", "a=fixed:9/1d"]);
    let client = server.client();
    let mut first = client.get_multiplexed_async_connection().await.unwrap();
    let mut second = client.get_multiplexed_async_connection().await.unwrap();
    let (read, _) = plan_store::read(&mut first).await.unwrap();
    // Two admins read version 2 and change different tenants at once.
    let alice = edit::tenant_set(&read, "alice", "pro").unwrap();
    let bob = edit::tenant_set(&read, "bob", "free").unwrap();
    let (one, two) = tokio::join!(
        plan_store::write(
            &mut first,
            read.version,
            "admin-1",
            "tenant set alice",
            &alice
        ),
        plan_store::write(&mut second, read.version, "admin-2", "tenant set bob", &bob),
    );
    let (refused, winner) = match (one, two) {
        (Ok(version), Err(error)) | (Err(error), Ok(version)) => (error, version),
        other => panic!("exactly one write must win: {other:?}"),
    };
    assert_eq!(winner, 3);
    assert!(matches!(
        refused,
        PlanStoreError::Stale {
            expected: 2,
            current: 3
        }
    ));
    let message = refused.to_string();
    assert!(
        message.contains("version 3") && message.contains("version 2"),
        "{message}"
    );
    // The loser reads again and retries: both changes are there.
    let (read, _) = plan_store::read(&mut first).await.unwrap();
    let lost = if read.tenants.contains_key("alice") {
        &bob
    } else {
        &alice
    };
    plan_store::write(&mut first, read.version, "admin", "retry", lost)
        .await
        .unwrap();
    let (read, _) = plan_store::read(&mut first).await.unwrap();
    assert_eq!(read.version, 4);
    assert_eq!(read.tenants.get("alice").map(String::as_str), Some("pro"));
    assert_eq!(read.tenants.get("bob").map(String::as_str), Some("free"));
    // rlctl's --if-version refuses a stale write too, with exit status 3, writing nothing.
    let marks = write_marks(&mut server.conn());
    let output = rlctl(
        &server,
        &[
            "--if-version",
            "3",
            "tenant",
            "set",
            "carol",
            "--plan",
            "pro",
        ],
    );
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("at version 4") && stderr.contains("from version 3"),
        "{stderr}"
    );
    assert_eq!(write_marks(&mut server.conn()), marks);
}

#[tokio::test]
async fn every_change_is_audited_and_published() {
    let server = Server::start(&[]);
    let mut pubsub = server.client().get_async_pubsub().await.unwrap();
    pubsub.subscribe(plan_store::CHANNEL).await.unwrap();
    let changes: &[&[&str]] = &[
        &[
            "plan",
            "set",
            "pro",
            "--limit",
            "per-minute=sliding:1000/60s",
            "--limit",
            "per-day=fixed:100000/1d",
        ],
        &["tenant", "set", "acme", "--plan", "pro"],
        &[
            "override",
            "set",
            "acme",
            "per-minute=sliding:5000/60s",
            "per-day=fixed:7/1d",
            "--ttl",
            "7d",
        ],
        &["override", "delete", "acme", "per-day"],
        &[
            "plan",
            "set",
            "pro",
            "--limit",
            "per-minute=sliding:2000/60s",
            "--replace",
        ],
        &["tenant", "delete", "acme"],
    ];
    for change in changes {
        rlctl_ok(&server, change);
    }
    let mut messages = pubsub.on_message();
    for version in 1..=changes.len() {
        let message = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::StreamExt::next(&mut messages),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(
            message.get_payload::<String>().unwrap(),
            version.to_string()
        );
    }
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let entries = plan_store::history(&mut con, 100).await.unwrap();
    let summary: Vec<String> = entries
        .iter()
        .rev()
        .map(|entry| {
            format!(
                "v{} {} {} {} | {} -> {}",
                entry.get("version"),
                entry.get("who"),
                entry.get("kind"),
                entry.get("name"),
                entry.get("old"),
                entry.get("new"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "v1 test plan pro |  -> per-minute=sliding:1000/1m per-day=fixed:100000/1d",
            "v2 test tenant acme |  -> pro",
            // One change of two fields: two entries of one version.
            "v3 test override acme per-minute |  -> expires=EXP per-minute=sliding:5000/1m",
            "v3 test override acme per-day |  -> expires=EXP per-day=fixed:7/1d",
            "v4 test override acme per-day | expires=EXP per-day=fixed:7/1d -> ",
            "v5 test plan pro | per-minute=sliding:1000/1m per-day=fixed:100000/1d -> per-minute=sliding:2000/1m",
            "v6 test tenant acme | pro -> ",
        ]
        .map(|line| {
            let expires = entries
                .iter()
                .find_map(|entry| entry.get("new").split(' ').next().filter(|w| w.starts_with("expires=")).map(String::from))
                .unwrap();
            line.replace("expires=EXP", &expires)
        })
    );
    assert!(
        entries
            .iter()
            .all(|entry| entry.get("at_ms").parse::<u64>().is_ok())
    );
    let history = rlctl_ok(&server, &["history", "--tenant", "acme"]);
    assert_eq!(history.lines().count(), 5, "{history}");
    let listed = rlctl_ok(&server, &["list"]);
    assert!(
        listed.contains("acme: per-minute=sliding:5000/1m (until "),
        "{listed}"
    );
}

#[tokio::test]
async fn bad_rlctl_input_is_refused_clearly_and_writes_nothing() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "pro", "--limit", "a=fixed:5/1d"]);
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    let bad_file = server.dir.join("bad.toml");
    std::fs::write(
        &bad_file,
        "[plans]\nfree = [\"a=fixed:1/1d\"]\n[tenants]\nx = \"gold\"\n",
    )
    .unwrap();
    let bad_file = bad_file.to_str().unwrap().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["plan", "set", "x", "--limit", "per-minute=sliding:0/60s"],
            "bad limit 'per-minute=sliding:0/60s': limit must be greater than 0 (got '0')",
        ),
        (
            &["plan", "set", "x", "--limit", "m=leaky:1/1s"],
            "unknown algorithm 'leaky'",
        ),
        (
            &["plan", "set", "x", "--limit", "m=fixed:1/1y"],
            "bad duration '1y'",
        ),
        (
            &["plan", "set", "x", "--limit", "m=gcra:5/1500ms"],
            "GCRA period",
        ),
        (
            &[
                "plan",
                "set",
                "x",
                "--limit",
                "m=fixed:1/1s",
                "--limit",
                "m=fixed:2/1s",
            ],
            "two limits are named 'm'",
        ),
        (&["plan", "set", "x"], "plan set needs at least one --limit"),
        (
            &["plan", "set", "bad name", "--limit", "m=fixed:1/1s"],
            "bad name 'bad name'",
        ),
        (&["plan", "delete", "pro"], "plan 'pro' is in use by acme"),
        (
            &["tenant", "set", "acme", "--plan", "gold"],
            "there is no plan 'gold'",
        ),
        (
            &["tenant", "set", "ac{me}", "--plan", "pro"],
            "bad tenant 'ac{me}'",
        ),
        (
            &["override", "set", "a*b", "m=fixed:1/1s"],
            "bad tenant 'a*b'",
        ),
        (
            &["override", "set", "acme", "m=fixed:1/1s", "--ttl", "0s"],
            "--ttl: bad duration '0s'",
        ),
        (
            &["override", "set", "acme"],
            "override set needs at least one limit",
        ),
        (
            &["override", "delete", "nobody"],
            "there is no override for 'nobody'",
        ),
        (
            &["tenant", "set", "acme", "--plan", "pro", "--ttl", "1d"],
            "--ttl does not apply",
        ),
        (
            &["import", &bad_file],
            "tenant 'x' is on plan 'gold', which is not defined",
        ),
        (
            &["import", "/nonexistent/file.toml"],
            "cannot read /nonexistent/file.toml",
        ),
        (&["frobnicate"], "unknown command 'frobnicate'"),
        (&["--bogus", "list"], "unknown option --bogus"),
    ];
    let mut con = server.conn();
    let marks = write_marks(&mut con);
    for (args, expected) in cases {
        let output = rlctl(&server, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "rlctl {args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "rlctl {args:?}: wanted '{expected}' in: {stderr}"
        );
    }
    // Dry runs and no-op changes write nothing either.
    let dry = rlctl_ok(
        &server,
        &["--dry-run", "tenant", "set", "acme", "--plan", "pro"],
    );
    assert!(dry.contains("nothing to change"), "{dry}");
    let dry = rlctl_ok(
        &server,
        &["--dry-run", "plan", "set", "pro", "--limit", "a=fixed:6/1d"],
    );
    assert!(
        dry.contains("dry run, nothing written") && dry.contains("a=fixed:5/1d -> a=fixed:6/1d"),
        "{dry}"
    );
    assert_eq!(write_marks(&mut con), marks);
    assert_eq!(store_version(&server), 2);
}

#[tokio::test]
async fn export_then_import_round_trips_in_one_change() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "pro", "--limit", "a=fixed:5/1d"]);
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    rlctl_ok(
        &server,
        &["override", "set", "acme-*", "--all", "b=token:10/1s"],
    );
    let exported = rlctl_ok(&server, &["export"]);
    let file = server.dir.join("policies.toml");
    std::fs::write(&file, &exported).unwrap();
    let other = Server::start(&[]);
    let imported = rlctl_ok(&other, &["import", file.to_str().unwrap()]);
    assert!(imported.contains("version 0 -> 1"), "{imported}");
    assert_eq!(rlctl_ok(&other, &["export"]), exported);
    assert!(rlctl_ok(&other, &["import", file.to_str().unwrap()]).contains("nothing to change"));
}

#[tokio::test]
async fn precedence_and_expiry_through_the_limiter() {
    let server = Server::start(&[]);
    rlctl_ok(
        &server,
        &["plan", "set", "pro", "--limit", "per-day=fixed:2/1d"],
    );
    rlctl_ok(&server, &["tenant", "set", "acme-eu", "--plan", "pro"]);
    rlctl_ok(&server, &["tenant", "set", "acme-us", "--plan", "pro"]);
    rlctl_ok(
        &server,
        &["override", "set", "acme-*", "per-day=fixed:3/1d"],
    );
    rlctl_ok(
        &server,
        &["override", "set", "acme-e*", "per-day=fixed:4/1d"],
    );
    rlctl_ok(
        &server,
        &[
            "override",
            "set",
            "acme-eu",
            "per-day=fixed:5/1d",
            "--ttl",
            "3s",
        ],
    );
    let version = store_version(&server);
    let limiter = limiter(&server, PlanOptions::default()).await;
    until_version(&limiter, version, Duration::from_secs(2)).await;
    let per_day = |quota: u64| vec![("per-day".to_string(), quota)];
    assert_eq!(
        quotas(&check(&limiter, "acme-eu").await),
        per_day(5),
        "exact"
    );
    assert_eq!(
        quotas(&check(&limiter, "acme-eo").await),
        per_day(4),
        "longest wildcard"
    );
    assert_eq!(
        quotas(&check(&limiter, "acme-us").await),
        per_day(3),
        "wildcard over plan"
    );
    assert_eq!(
        quotas(&check(&limiter, "zeta").await),
        per_day(1),
        "the policy's default"
    );
    // acme-eu: 5 admitted in all under its override (one above), then denied.
    for _ in 0..4 {
        assert!(check(&limiter, "acme-eu").await.allowed);
    }
    assert!(!check(&limiter, "acme-eu").await.allowed);
    // The override expires: the longest wildcard applies again, with the same count.
    let expired = {
        let limiter = &limiter;
        wait_until_async(Duration::from_secs(6), || async move {
            let decision = check(limiter, "acme-eu").await;
            let expired = quotas(&decision) == per_day(4);
            if expired {
                assert!(!decision.allowed, "5 counted, 4 allowed: still denied");
            }
            expired
        })
        .await
    };
    assert!(expired, "the override never expired");
    let shown = rlctl_ok(&server, &["get", "acme-eu"]);
    assert!(shown.contains("wildcard override 'acme-e*'"), "{shown}");
    // The expired entry is still listed until pruned; pruning changes nobody's limits.
    assert!(rlctl_ok(&server, &["list"]).contains("(expired "));
    let pruned = rlctl_ok(&server, &["override", "prune"]);
    assert!(
        pruned.contains("override acme-eu per-day: expires="),
        "{pruned}"
    );
    assert!(!rlctl_ok(&server, &["list"]).contains("(expired "));
    let version = version + 1;
    // Deleting the wildcards returns acme-us to its plan.
    rlctl_ok(&server, &["override", "delete", "acme-*"]);
    until_version(&limiter, version + 1, Duration::from_secs(2)).await;
    assert_eq!(quotas(&check(&limiter, "acme-us").await), per_day(2));
}

/// `rlctl plan set p --limit BUCKET --limit WINDOW`, followed by `limiter`.
async fn plan_p_followed(server: &Server, limiter: &RateLimiter, bucket: &str, window: &str) {
    let args = ["plan", "set", "p", "--limit", bucket, "--limit", window];
    rlctl_followed(server, limiter, &args).await;
}

#[tokio::test]
async fn a_change_applies_to_the_existing_state_never_resets_never_charges_twice() {
    let server = Server::start(&[]);
    plan_set(&server, "p", &["bucket=token:10/1d", "window=fixed:10/1d"]);
    rlctl_ok(&server, &["tenant", "set", "t", "--plan", "p"]);
    let limiter = limiter(&server, PlanOptions::default()).await;
    until_version(&limiter, store_version(&server), Duration::from_secs(2)).await;
    for _ in 0..6 {
        assert!(check(&limiter, "t").await.allowed);
    }
    let remaining =
        |decision: &Decision| -> Vec<u64> { decision.limits.iter().map(|l| l.remaining).collect() };
    // Raised: the bucket keeps its 4 tokens (it does not refill to 20), the window its
    // count of 6 (14 of 20 left); one check charges one unit, once.
    plan_p_followed(
        &server,
        &limiter,
        "bucket=token:20/1d",
        "window=fixed:20/1d",
    )
    .await;
    let decision = check(&limiter, "t").await;
    assert!(decision.allowed);
    assert_eq!(
        quotas(&decision),
        [("bucket".into(), 20), ("window".into(), 20)]
    );
    assert_eq!(remaining(&decision), [3, 13]);
    // Lowered below what is left: the bucket is clamped to 2 tokens, the window's count of
    // 7 is above 5, so it denies; a denial charges nothing.
    plan_p_followed(&server, &limiter, "bucket=token:2/1d", "window=fixed:5/1d").await;
    let decision = check(&limiter, "t").await;
    assert!(!decision.allowed);
    assert_eq!(
        quotas(&decision),
        [("bucket".into(), 2), ("window".into(), 5)]
    );
    assert_eq!(remaining(&decision), [2, 0]);
    // Raised again: the window's count is still 7, nothing was charged by the denial.
    plan_p_followed(&server, &limiter, "bucket=token:2/1d", "window=fixed:8/1d").await;
    let decision = check(&limiter, "t").await;
    assert!(decision.allowed);
    assert_eq!(remaining(&decision), [1, 0]);
    // A change of algorithm is a fresh key of the other kind, never a read of this one's.
    plan_p_followed(
        &server,
        &limiter,
        "bucket=sliding:3/1d",
        "window=fixed:8/1d",
    )
    .await;
    let decision = check(&limiter, "t").await;
    assert!(!decision.allowed, "the window is full");
    assert_eq!(remaining(&decision), [3, 0]);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl:plan:*")
        .query(&mut server.conn())
        .unwrap();
    let mut keys = keys;
    keys.sort();
    assert_eq!(
        keys,
        [
            "rl:plan:{t}:api:bucket:token",
            "rl:plan:{t}:api:window:fixed"
        ],
        "the denied call wrote no sliding key"
    );
}

#[tokio::test]
async fn the_backstop_catches_up_without_notifications_and_after_a_cut_subscription() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "p", "--limit", "a=fixed:1/1d"]);
    let period = Duration::from_millis(300);
    let polling = limiter(
        &server,
        PlanOptions {
            check_every: period,
            subscribe: false,
            ..PlanOptions::default()
        },
    )
    .await;
    let subscribed = limiter(
        &server,
        PlanOptions {
            check_every: period,
            ..PlanOptions::default()
        },
    )
    .await;
    for round in 0..3u64 {
        rlctl_ok(
            &server,
            &[
                "plan",
                "set",
                "p",
                "--limit",
                &format!("a=fixed:{}/1d", round + 2),
            ],
        );
        let version = store_version(&server);
        let took = until_version(&polling, version, Duration::from_secs(2)).await;
        assert!(
            took <= period + Duration::from_millis(500),
            "the backstop took {took:?}"
        );
    }
    // Cut every subscription, change at once: the version check (or the resubscription's
    // read) catches up within the period.
    let subscribers = pubsub_clients(&mut server.conn());
    assert_eq!(subscribers, 1, "one limiter subscribes");
    cut_subscriptions(&mut server.conn());
    rlctl_ok(&server, &["plan", "set", "p", "--limit", "a=fixed:9/1d"]);
    let took = until_version(&subscribed, store_version(&server), Duration::from_secs(2)).await;
    assert!(
        took <= period + Duration::from_millis(500),
        "after the cut: {took:?}"
    );
    // And notifications work again once resubscribed.
    let resubscribed = {
        let server = &server;
        wait_until_async(Duration::from_secs(5), || async move {
            pubsub_clients(&mut server.conn()) == subscribers
        })
        .await
    };
    assert!(resubscribed, "the limiter never subscribed again");
    rlctl_ok(&server, &["plan", "set", "p", "--limit", "a=fixed:10/1d"]);
    until_version(&subscribed, store_version(&server), Duration::from_secs(2)).await;
}

#[tokio::test]
async fn without_redis_at_start_the_defaults_apply_and_this_is_reported() {
    let mut server = Server::start(&[]);
    server.kill();
    let options = PlanOptions {
        timeout: Duration::from_millis(200),
        ..PlanOptions::default()
    };
    let source = PlanSource::connect(&url(&server), options).await.unwrap();
    assert!(
        matches!(source.status(), PlanStatus::Defaults(_)),
        "{}",
        source.status()
    );
    assert!(source.status().to_string().contains("defaults apply"));
    let policy = from_store("per-day", 2, Duration::from_secs(86_400), "x")
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(MemoryStore::new())
        .policy(policy)
        .policy_source(source)
        .build()
        .unwrap();
    let decision = check(&limiter, "acme").await;
    assert_eq!(quotas(&decision), [("per-day".into(), 2)]);
    // Redis comes up and gets a plan: the replica follows within its period.
    server.restart(&[]);
    rlctl_ok(
        &server,
        &["plan", "set", "pro", "--limit", "per-day=fixed:50/1d"],
    );
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    until_version(&limiter, 2, Duration::from_secs(3)).await;
    assert_eq!(
        limiter.policy_source::<PlanSource>().unwrap().status(),
        PlanStatus::Loaded(2)
    );
    assert_eq!(
        quotas(&check(&limiter, "acme").await),
        [("per-day".into(), 50)]
    );
    // A store-backed policy needs a source; defaults must be plan limits.
    let orphan = from_store("a", 2, Duration::from_secs(1), "x")
        .build()
        .unwrap();
    let error = RateLimiter::builder(MemoryStore::new())
        .policy(orphan)
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("give the limiter a PlanSource"),
        "{error}"
    );
    assert_eq!(
        *spec("a=fixed:2/1s").algorithm(),
        Algorithm::fixed_window(2, Duration::from_secs(1)).unwrap()
    );
}

#[test]
fn a_toml_policy_can_take_its_limits_from_the_store() {
    let policies = redis_ratelimit_client::config::from_toml(
        r#"
        [[policy]]
        name = "api"
        from_store = "tenant"
        [[policy.limit]]
        name = "per-minute"
        key = "unused"
        algorithm = "sliding_window"
        limit = 100
        window_s = 60
        "#,
    )
    .unwrap();
    assert_eq!(policies[0].store_tenant(), Some("tenant"));
}

#[tokio::test]
async fn leases_of_a_store_backed_policy_are_spent_and_refunded_across_a_change() {
    let server = Server::start(&[]);
    rlctl_ok(
        &server,
        &["plan", "set", "p", "--limit", "per-day=fixed:100/1d"],
    );
    rlctl_ok(&server, &["tenant", "set", "t", "--plan", "p"]);
    let source = PlanSource::connect(&url(&server), PlanOptions::default())
        .await
        .unwrap();
    let policy = from_store("per-day", 1, Duration::from_secs(86_400), "-")
        .lease(redis_ratelimit_client::Lease::new(10).lifetime(Duration::from_millis(200)))
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let store = RedisStore::new(&url(&server)).unwrap();
    store.connect().await.unwrap();
    let limiter = RateLimiter::builder(store)
        .policy(policy)
        .policy_source(source)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(check(&limiter, "t").await.allowed);
    }
    // The plan changes while 7 leased units are unspent; they go back to the same key.
    rlctl_followed(
        &server,
        &limiter,
        &["plan", "set", "p", "--limit", "per-day=fixed:200/1d"],
    )
    .await;
    assert_eq!(
        quotas(&check(&limiter, "t").await),
        [("per-day".into(), 200)]
    );
    limiter.release_leases().await;
    let key = "rl:plan:{t}:api:per-day:fixed";
    let peek = |con: &mut redis::Connection| -> Vec<i64> {
        redis::cmd("RL.PEEK")
            .arg(key)
            .arg("FIXED")
            .arg(200)
            .arg(86_400)
            .query(con)
            .unwrap()
    };
    // 4 spent in all: 200 - 4 = 196 left before a call, 195 after the peeked one.
    assert_eq!(peek(&mut server.conn())[1], 195);
}

/// On a Valkey 9.1 without its Lua engine (its `lua` module unloaded), a write through
/// `rlctl` fails with one line naming what is missing and what to do, and writes nothing
/// (was: `Redis: Could not find scripting engine 'lua'`).
#[test]
fn rlctl_on_a_valkey_without_lua_says_what_is_missing() {
    let server = redis_ratelimit_testkit::server::valkey_without_lua();
    let output = rlctl(&server, &["plan", "set", "free", "--limit", "a=fixed:1/1d"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("this server has no Lua engine")
            && stderr.contains("give the server its Lua engine"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}
