//! Careless writes `rlctl` refuses, each an outside review's reproduction: an override of a
//! misspelt limit name (`per-mnute`, which added a limit of 1 a second instead of changing
//! one), a sliding log above the server's `ratelimit.max-log-entries` (every check of it
//! refused by the server, so decided by the fallback), and a `plan set` that silently
//! dropped the limits it was not given.

use std::process::{Command, Output};

use redis_ratelimit_testkit::helpers::write_marks;
use redis_ratelimit_testkit::server::Server;

use crate::plans::{plan_set, rlctl, rlctl_ok, store_version};

/// Runs rlctl and insists it refused the input (exit 2) with `expected` in its error, and
/// wrote nothing; returns stderr.
fn refused(server: &Server, args: &[&str], expected: &[&str]) -> String {
    let mut con = server.conn();
    let marks = write_marks(&mut con);
    let output = rlctl(server, args);
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(2), "rlctl {args:?}: {stderr}");
    for wanted in expected {
        assert!(
            stderr.contains(wanted),
            "rlctl {args:?}: wanted '{wanted}' in: {stderr}"
        );
    }
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert_eq!(write_marks(&mut con), marks, "rlctl {args:?} wrote");
    stderr
}

fn pro_with_acme(server: &Server) {
    plan_set(
        server,
        "pro",
        &["per-minute=sliding:1000/60s", "per-day=fixed:100000/1d"],
    );
    rlctl_ok(server, &["tenant", "set", "acme", "--plan", "pro"]);
}

#[tokio::test]
async fn an_override_of_a_limit_the_tenant_does_not_have_is_refused_unless_added() {
    let server = Server::start(&[]);
    pro_with_acme(&server);
    refused(
        &server,
        &["override", "set", "acme", "per-mnute=sliding:1/1s"],
        &[
            "override 'acme': tenant 'acme' (plan 'pro') has no limit named 'per-mnute' \
             (did you mean 'per-minute'?); its limits: per-day, per-minute",
            "--add",
        ],
    );
    // One unknown name among good ones refuses the whole change.
    refused(
        &server,
        &[
            "override",
            "set",
            "acme",
            "per-minute=sliding:5/60s",
            "per-dya=fixed:5/1d",
        ],
        &["no limit named 'per-dya' (did you mean 'per-day'?)"],
    );
    // A wildcard: the names of the store's plans and overrides.
    refused(
        &server,
        &["override", "set", "acme-*", "perminute=sliding:5/60s"],
        &[
            "no plan or override of the store has a limit named 'perminute' (did you mean \
             'per-minute'?); the limits the store names: per-day, per-minute",
        ],
    );
    // Far from every name: no guess.
    let stderr = refused(
        &server,
        &["override", "set", "acme", "burst=token:5/1s"],
        &["has no limit named 'burst'; its limits"],
    );
    assert!(!stderr.contains("did you mean"), "{stderr}");
    assert_eq!(
        effective(&server, "acme"),
        [
            "per-minute=sliding:1000/1m plan pro",
            "per-day=fixed:100000/1d plan pro"
        ],
        "the refused overrides changed acme"
    );

    // What is meant goes through: a limit acme has, a limit added on purpose, a whole set,
    // a wildcard of a known name, a tenant on no plan with a name the store knows.
    let version = store_version(&server);
    rlctl_ok(
        &server,
        &["override", "set", "acme", "per-minute=sliding:5000/60s"],
    );
    rlctl_ok(
        &server,
        &["override", "set", "acme", "burst=token:5/1s", "--add"],
    );
    // Once added, the name is acme's: changing it needs no --add.
    rlctl_ok(&server, &["override", "set", "acme", "burst=token:9/1s"]);
    rlctl_ok(
        &server,
        &["override", "set", "beta", "--all", "only=token:50/1s"],
    );
    // (acme-* covers acme-eu, not acme: the dash is part of the prefix.)
    rlctl_ok(
        &server,
        &["override", "set", "acme-*", "per-day=fixed:7/1d"],
    );
    rlctl_ok(&server, &["override", "set", "zeta", "per-day=fixed:3/1d"]);
    assert_eq!(store_version(&server), version + 6);
    assert_eq!(
        effective(&server, "acme"),
        [
            "per-minute=sliding:5000/1m override 'acme'",
            "per-day=fixed:100000/1d plan pro",
            "burst=token:9/1s override 'acme'",
        ]
    );
}

/// `rlctl get TENANT`'s limits, one line each, spaces collapsed.
fn effective(server: &Server, tenant: &str) -> Vec<String> {
    rlctl_ok(server, &["get", tenant])
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test]
async fn a_sliding_log_above_the_servers_max_log_entries_is_refused() {
    let server = Server::start(&[]);
    refused(
        &server,
        &["plan", "set", "big", "--limit", "per-minute=log:20000/60s"],
        &[
            "limit 'per-minute=log:20000/1m': a sliding log holds at most 10000 entries \
             (this server's ratelimit.max-log-entries)",
            "raise ratelimit.max-log-entries",
        ],
    );
    rlctl_ok(
        &server,
        &["plan", "set", "big", "--limit", "per-minute=log:10000/60s"],
    );
    rlctl_ok(&server, &["tenant", "set", "acme", "--plan", "big"]);
    // The server's setting, not a constant: raised, then lowered.
    let set = |value: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("ratelimit.max-log-entries")
            .arg(value)
            .query(&mut server.conn())
            .unwrap();
    };
    set("30000");
    rlctl_ok(
        &server,
        &["plan", "set", "big", "--limit", "per-minute=log:20000/60s"],
    );
    set("100");
    refused(
        &server,
        &["override", "set", "acme", "per-minute=log:500/60s"],
        &["at most 100 entries (this server's ratelimit.max-log-entries)"],
    );
    let file = server.dir.join("big.toml");
    std::fs::write(&file, "[plans]\nhuge = [\"a=log:101/1s\"]\n").unwrap();
    refused(
        &server,
        &["import", file.to_str().unwrap()],
        &["limit 'a=log:101/1s': a sliding log holds at most 100 entries"],
    );
}

/// rlctl with its own `--redis` URL.
fn rlctl_at(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlctl"))
        .args(["--redis", url, "--who", "test"])
        .args(args)
        .output()
        .unwrap()
}

/// Where `CONFIG GET` cannot tell (no module: the Functions library; an ACL that refuses
/// `CONFIG`), the module's default bounds the limit, and rlctl says so.
#[tokio::test]
async fn without_the_setting_the_default_bounds_the_limit_and_rlctl_says_so() {
    let plain = Server::start_without_module(&[]);
    let url = format!("redis://127.0.0.1:{}/", plain.port);
    let output = rlctl_at(
        &url,
        &["plan", "set", "big", "--limit", "per-minute=log:20000/60s"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "at most 10000 entries (the default of ratelimit.max-log-entries, assumed because \
             the server's setting could not be read: the server has no ratelimit.max-log-entries"
        ),
        "{stderr}"
    );
    // The refusal says it once: no warning besides.
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let output = rlctl_at(
        &url,
        &["plan", "set", "big", "--limit", "per-minute=log:10000/60s"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stderr.contains(
            "warning: limits checked against the module's default ratelimit.max-log-entries \
             (10000): the server has no ratelimit.max-log-entries"
        ),
        "{stderr}"
    );

    let server = Server::start(&[]);
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "ops", "on", ">secret", "~*", "&*", "+@all", "-config",
        ])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://ops:secret@127.0.0.1:{}/", server.port);
    let output = rlctl_at(
        &url,
        &["plan", "set", "big", "--limit", "per-minute=log:20000/60s"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CONFIG GET ratelimit.max-log-entries:")
            && stderr.contains("at most 10000 entries (the default"),
        "{stderr}"
    );
}

#[tokio::test]
async fn plan_set_drops_limits_only_with_replace_and_says_which() {
    let server = Server::start(&[]);
    pro_with_acme(&server);
    refused(
        &server,
        &[
            "plan",
            "set",
            "pro",
            "--limit",
            "per-minute=sliding:2000/60s",
        ],
        &[
            "plan 'pro' also has per-day=fixed:100000/1d, which this would drop: give it \
             again (--limit) to keep it, or add --replace to drop it",
        ],
    );
    // Changing the limits it has, or adding one, drops nothing.
    plan_set(
        &server,
        "pro",
        &[
            "per-day=fixed:5/1d",
            "per-minute=sliding:2000/60s",
            "per-hour=fixed:100/1h",
        ],
    );
    // With --replace: a dry run says what it would drop and writes nothing; the run drops it.
    let replace = [
        "plan",
        "set",
        "pro",
        "--limit",
        "per-minute=sliding:2000/60s",
        "--replace",
    ];
    let version = store_version(&server);
    for (flags, version_after) in [(&["--dry-run"][..], version), (&[], version + 1)] {
        let said = rlctl_ok(&server, &[flags, &replace[..]].concat());
        assert!(
            said.contains("dropped from plan 'pro': per-day=fixed:5/1d per-hour=fixed:100/1h"),
            "{flags:?}: {said}"
        );
        assert_eq!(store_version(&server), version_after, "{flags:?}");
    }
    assert_eq!(
        effective(&server, "acme"),
        ["per-minute=sliding:2000/1m plan pro"]
    );
}
