//! Hostile and careless input against the policy store, its replicas and `rlctl`, each the
//! reproduction of an outside review's finding: a store whose version went backwards (wiped,
//! restored, failed over to a lagging replica, then rebuilt), fields `rlctl` cannot read, a
//! non-integer version, `help` as a name, a `--who` or a file name that forges history
//! lines, and an import `override set` would refuse.

use std::time::Duration;

use redis_ratelimit_client::RateLimiter;
use redis_ratelimit_plans::edit::{self, Table};
use redis_ratelimit_plans::plan_store;
use redis_ratelimit_plans::snapshot::Rule;
use redis_ratelimit_plans::spec::Pattern;
use redis_ratelimit_plans::{PlanOptions, PlanSource, PlanStatus};
use redis_ratelimit_testkit::helpers::{commandstat_calls, write_marks};
use redis_ratelimit_testkit::server::{Server, wait_until_async};

use crate::plans::{check, limiter, plan_set, quotas, rlctl, rlctl_ok, spec, store_version, url};

/// The four keys of the store that hold its content (the audit stream is the fifth).
const CONTENT_KEYS: [&str; 4] = [
    plan_store::VERSION_KEY,
    plan_store::PLANS_KEY,
    plan_store::TENANTS_KEY,
    plan_store::OVERRIDES_KEY,
];

fn wipe(server: &Server) {
    let _: u64 = redis::cmd("DEL")
        .arg(&CONTENT_KEYS[..])
        .query(&mut server.conn())
        .unwrap();
}

/// Backstop checks often: a wipe publishes no notification.
fn quick() -> PlanOptions {
    PlanOptions {
        check_every: Duration::from_millis(100),
        ..PlanOptions::default()
    }
}

/// Polls (at most 3 s) until `source` holds a snapshot at exactly `version` whose limits
/// for `tenant` are `wanted` (name, quota).
async fn until_followed(source: &PlanSource, version: u64, tenant: &str, wanted: &[(&str, u64)]) {
    let now = || -> Vec<(String, u64)> {
        source
            .resolve(tenant, &[])
            .iter()
            .map(|effective| {
                let quota = effective.spec.algorithm().quota();
                (effective.spec.name().to_string(), quota)
            })
            .collect()
    };
    let want: Vec<(String, u64)> = wanted.iter().map(|(n, q)| (n.to_string(), *q)).collect();
    let (now, want) = (&now, &want);
    let followed = wait_until_async(Duration::from_secs(3), || async move {
        source.version() == version && now() == *want
    })
    .await;
    assert!(
        followed,
        "after 3 s the source is at version {} ({}) with {:?} for {tenant}, wanted version \
         {version} with {want:?}",
        source.version(),
        source.status(),
        now()
    );
}

/// A server whose store has plan `pro` (1000 a minute) and acme on it (version 2).
fn acme_on_pro() -> Server {
    let server = Server::start(&[]);
    plan_set(&server, "pro", &["per-minute=sliding:1000/60s"]);
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    server
}

fn plans_of(limiter: &RateLimiter) -> &PlanSource {
    limiter.policy_source::<PlanSource>().unwrap()
}

/// The review's sequence: version 3 with an override for acme; the four keys deleted; the
/// store rebuilt to version 2. The replica must take version 2 (acme at 7, not 5000), and
/// say so.
#[tokio::test]
async fn a_store_rebuilt_at_a_lower_version_is_followed() {
    let server = acme_on_pro();
    rlctl_ok(
        &server,
        &["override", "set", "acme", "per-minute=sliding:5000/60s"],
    );
    let limiter = limiter(&server, quick()).await;
    assert_eq!(
        quotas(&check(&limiter, "acme").await),
        [("per-minute".into(), 5000)]
    );

    wipe(&server);
    // Wiped and not yet rebuilt: the store is empty, and so is the replica's view.
    until_followed(plans_of(&limiter), 0, "acme", &[]).await;
    plan_set(&server, "small", &["per-minute=sliding:7/60s"]);
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "small"]);
    assert_eq!(store_version(&server), 2);
    until_followed(plans_of(&limiter), 2, "acme", &[("per-minute", 7)]).await;
    assert_eq!(plans_of(&limiter).status(), PlanStatus::Loaded(2));
    assert_eq!(
        quotas(&check(&limiter, "acme").await),
        [("per-minute".into(), 7)]
    );
}

/// Rebuilt to the very version the replica holds, with other contents: still followed
/// (the version alone cannot tell them apart; the stamp each change writes can).
#[tokio::test]
async fn a_store_rebuilt_to_the_same_version_with_other_contents_is_followed() {
    let server = acme_on_pro();
    let source = PlanSource::connect(&url(&server), quick()).await.unwrap();
    until_followed(&source, 2, "acme", &[("per-minute", 1000)]).await;
    // Without notifications a replica sees only the version; with them it is told "2"
    // again. Both must read the new contents.
    let polling = PlanSource::connect(
        &url(&server),
        PlanOptions {
            subscribe: false,
            ..quick()
        },
    )
    .await
    .unwrap();
    until_followed(&polling, 2, "acme", &[("per-minute", 1000)]).await;

    wipe(&server);
    // Rebuilt at once, faster than the backstop sees the empty store.
    rlctl_ok(
        &server,
        &["plan", "set", "pro", "--limit", "per-minute=sliding:3/60s"],
    );
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    assert_eq!(store_version(&server), 2);
    until_followed(&source, 2, "acme", &[("per-minute", 3)]).await;
    until_followed(&polling, 2, "acme", &[("per-minute", 3)]).await;
}

/// The review's second case: the old store was at 64 with a `*` override; rebuilt, every
/// one of its first versions must be the new store's, without the stale override.
#[tokio::test]
async fn after_an_old_store_at_64_no_version_of_the_rebuilt_one_keeps_its_overrides() {
    let server = Server::start(&[]);
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let star = Pattern::parse("*").unwrap();
    let (snapshot, _) = plan_store::read(&mut con).await.unwrap();
    let edits = edit::override_set(
        &snapshot,
        &star,
        &[spec("per-minute=sliding:1/60s")],
        false,
        None,
    )
    .unwrap();
    plan_store::write(&mut con, 0, "test", "override set *", &edits)
        .await
        .unwrap();
    for round in 1..64u64 {
        let (snapshot, _) = plan_store::read(&mut con).await.unwrap();
        let limits = [spec(&format!("filler=fixed:{round}/1d"))];
        let edits = edit::plan_set(&snapshot, "filler", &limits).unwrap();
        plan_store::write(&mut con, snapshot.version, "test", "plan set", &edits)
            .await
            .unwrap();
    }
    assert_eq!(store_version(&server), 64);
    let source = PlanSource::connect(&url(&server), quick()).await.unwrap();
    until_followed(&source, 64, "anyone", &[("per-minute", 1)]).await;

    wipe(&server);
    for version in 1..=8u64 {
        rlctl_ok(
            &server,
            &[
                "plan",
                "set",
                "p",
                "--limit",
                &format!("a=fixed:{version}/1d"),
            ],
        );
        rlctl_ok(&server, &["tenant", "set", "t", "--plan", "p"]);
        // Each rebuild step is two changes: the replica must be at the second, never on the
        // old store's override.
        let at = store_version(&server);
        until_followed(&source, at, "t", &[("a", version)]).await;
        let anyone = source.resolve("anyone", &[]);
        assert!(
            anyone
                .iter()
                .all(|effective| !matches!(effective.rule, Rule::Override { .. })),
            "at version {at} the old store's '*' override still applies: {anyone:?}"
        );
    }
}

/// A field rlctl cannot read (a limit the server refuses, a kind from a newer version, a
/// hand-written override) is skipped with a warning saying how to repair or delete it; every
/// command still works, the field can be deleted or replaced by name, and a non-integer
/// version is a clear error, not a type error.
#[tokio::test]
async fn an_unreadable_field_is_skipped_with_a_warning_and_repaired_by_name() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "pro", "--limit", "a=fixed:5/1d"]);
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "pro"]);
    let replica = PlanSource::connect(&url(&server), quick()).await.unwrap();
    until_followed(&replica, 2, "acme", &[("a", 5)]).await;
    let mut con = server.conn();
    for (key, field, value) in [
        (plan_store::PLANS_KEY, "broken", "per-minute=sliding:0/60s"),
        (plan_store::PLANS_KEY, "newer", "per-minute=leaky:5/60s"),
        (plan_store::OVERRIDES_KEY, "acme per-day", "garbage"),
        (plan_store::OVERRIDES_KEY, "ac{me", "a=fixed:1/1d"),
    ] {
        let _: () = redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .query(&mut con)
            .unwrap();
    }
    let listed = rlctl(&server, &["list"]);
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "rlctl list failed: {stderr}");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(stdout.contains("pro: a=fixed:5/1d"), "{stdout}");
    for needle in [
        "warning: skipped plan 'broken' = 'per-minute=sliding:0/60s'",
        "limit must be greater than 0",
        "'rlctl plan delete broken'",
        "skipped plan 'newer'",
        "unknown algorithm 'leaky'",
        "skipped override 'acme per-day' = 'garbage'",
        "'rlctl override delete acme per-day'",
        "skipped override 'ac{me'",
    ] {
        assert!(stderr.contains(needle), "no '{needle}' in:\n{stderr}");
    }
    assert!(rlctl_ok(&server, &["get", "acme"]).contains("a=fixed:5/1d"));
    // Nobody can be put on a plan that cannot be read.
    let output = rlctl(&server, &["tenant", "set", "zed", "--plan", "broken"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("plan 'broken' cannot be read"));
    // Deleted, repaired, deleted by name (even one no pattern parses to). A replica applies
    // no store it cannot read whole: it keeps version 2, and says so, until the last repair.
    rlctl_ok(&server, &["plan", "delete", "broken"]);
    // Once the replica has read the changed store again (whole, with HGETALL, every 100 ms
    // while its version is not the store's; rlctl has exited), it still holds version 2.
    let reads = commandstat_calls(&mut con, "hgetall");
    let read_again = {
        let server = &server;
        wait_until_async(Duration::from_secs(5), || async move {
            commandstat_calls(&mut server.conn(), "hgetall") > reads
        })
        .await
    };
    assert!(read_again, "the replica never read the store again");
    assert_eq!(replica.status(), PlanStatus::Loaded(2));
    assert_eq!(replica.version(), 2);
    rlctl_ok(
        &server,
        &["plan", "set", "newer", "--limit", "a=fixed:9/1d"],
    );
    rlctl_ok(&server, &["override", "delete", "acme"]);
    rlctl_ok(&server, &["override", "delete", "ac{me"]);
    let clean = rlctl(&server, &["list"]);
    assert!(clean.status.success());
    assert!(
        clean.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(String::from_utf8_lossy(&clean.stdout).contains("newer: a=fixed:9/1d"));
    until_followed(&replica, store_version(&server), "acme", &[("a", 5)]).await;

    // A version that is not a whole number: every command says so, nothing is written.
    let _: () = redis::cmd("SET")
        .arg(plan_store::VERSION_KEY)
        .arg("seven")
        .query(&mut con)
        .unwrap();
    let marks = write_marks(&mut con);
    for args in [
        &["list"][..],
        &["plan", "set", "x", "--limit", "a=fixed:1/1d"],
    ] {
        let output = rlctl(&server, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("{rl-policy}:version) holds 'seven', not a whole number"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(write_marks(&mut con), marks);
}

/// `help` and `-h` are options only: `help` in a name's place is the name.
#[tokio::test]
async fn help_is_an_option_never_a_name() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "help", "--limit", "a=fixed:1/1d"]);
    rlctl_ok(&server, &["tenant", "set", "help", "--plan", "help"]);
    rlctl_ok(&server, &["override", "set", "help", "a=fixed:2/1d"]);
    assert_eq!(store_version(&server), 3);
    let shown = rlctl_ok(&server, &["get", "help"]);
    assert!(shown.contains("tenant help (plan help)"), "{shown}");
    assert!(shown.contains("a=fixed:2/1d"), "{shown}");
    // The option prints the usage and writes nothing.
    let mut con = server.conn();
    let marks = write_marks(&mut con);
    for args in [
        &["--help"][..],
        &["-h"],
        &["tenant", "set", "--help"],
        &["tenant", "set", "acme", "-h", "--plan", "help"],
    ] {
        let usage = rlctl_ok(&server, args);
        assert!(usage.contains("Usage: rlctl"), "{args:?}: {usage}");
    }
    assert_eq!(write_marks(&mut con), marks);
    // A name starting with '-' goes after '--'.
    rlctl_ok(&server, &["tenant", "set", "--plan", "help", "--", "-x"]);
    assert!(rlctl_ok(&server, &["get", "--", "-x"]).contains("tenant -x (plan help)"));
}

/// A `--who` or a file name with a newline cannot forge lines of `rlctl history`: refused
/// on the command line, and escaped when another writer stored one.
#[tokio::test]
async fn who_and_file_names_cannot_forge_history_lines() {
    let server = Server::start(&[]);
    let forged = "v99 2026-01-01T00:00:00Z admin [plan set x] plan x: (none) -> forged";
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rlctl"))
        .args(["--redis", &url(&server), "--who"])
        .arg(format!("mallory\n{forged}"))
        .args(["plan", "set", "p", "--limit", "a=fixed:1/1d"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("control characters"));
    assert_eq!(store_version(&server), 0);
    // Through the library (another writer), and an import of a file named with a newline.
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (snapshot, _) = plan_store::read(&mut con).await.unwrap();
    let edits = edit::plan_set(&snapshot, "p", &[spec("a=fixed:1/1d")]).unwrap();
    plan_store::write(
        &mut con,
        0,
        &format!("mallory\n{forged}"),
        "plan set p",
        &edits,
    )
    .await
    .unwrap();
    let file = server.dir.join(format!("x\n{forged}.toml"));
    std::fs::write(&file, "[plans]\np = [\"a=fixed:2/1d\"]\n").unwrap();
    rlctl_ok(&server, &["import", file.to_str().unwrap()]);
    let history = rlctl_ok(&server, &["history"]);
    assert_eq!(history.lines().count(), 2, "{history}");
    assert!(
        history.lines().all(|line| !line.starts_with("v99")),
        "{history}"
    );
    assert!(history.contains("mallory\\nv99"), "{history}");
}

/// `import` refuses what `override set` refuses (more than 16 limits, two named alike),
/// with the same reason, writing nothing.
#[tokio::test]
async fn import_refuses_what_override_set_refuses() {
    let server = Server::start(&[]);
    rlctl_ok(&server, &["plan", "set", "pro", "--limit", "a=fixed:5/1d"]);
    let twenty: Vec<String> = (0..20).map(|i| format!("l{i}=fixed:1/1d")).collect();
    let quoted: Vec<String> = twenty.iter().map(|text| format!("\"{text}\"")).collect();
    let cases = [
        (
            format!(
                "[[override]]\npattern = \"acme\"\nall = true\nlimits = [{}]\n",
                quoted.join(", ")
            ),
            {
                let mut args = vec!["override", "set", "acme", "--all"];
                args.extend(twenty.iter().map(String::as_str));
                args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            },
            "at most 16 limits",
        ),
        (
            "[[override]]\npattern = \"acme\"\nall = true\nlimits = [\"a=fixed:1/1d\", \"a=fixed:2/1d\"]\n"
                .to_string(),
            ["override", "set", "acme", "--all", "a=fixed:1/1d", "a=fixed:2/1d"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            "two limits are named 'a'",
        ),
    ];
    let mut con = server.conn();
    let marks = write_marks(&mut con);
    for (index, (file_text, override_set, reason)) in cases.iter().enumerate() {
        let file = server.dir.join(format!("bad-{index}.toml"));
        std::fs::write(&file, file_text).unwrap();
        let imported = rlctl(&server, &["import", file.to_str().unwrap()]);
        let args: Vec<&str> = override_set.iter().map(String::as_str).collect();
        let set = rlctl(&server, &args);
        for (what, output) in [("import", &imported), ("override set", &set)] {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
            assert!(
                stderr.contains(&format!("override 'acme': {reason}")),
                "{what}: {stderr}"
            );
        }
    }
    assert_eq!(write_marks(&mut con), marks);
    // A store that holds an unreadable field is made to hold exactly the file too.
    let _: () = redis::cmd("HSET")
        .arg(plan_store::PLANS_KEY)
        .arg("broken")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let file = server.dir.join("good.toml");
    std::fs::write(&file, "[plans]\npro = [\"a=fixed:5/1d\"]\n").unwrap();
    rlctl_ok(&server, &["import", file.to_str().unwrap()]);
    let mut async_con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (snapshot, _) = plan_store::read(&mut async_con).await.unwrap();
    assert!(snapshot.unreadable.is_empty(), "{:?}", snapshot.unreadable);
    assert!(snapshot.unreadable_field(Table::Plans, "broken").is_none());
}
