//! The command line's tests: defaults, every flag, every refusal's text, the reference's
//! environment variables, and `--help` against the one of the flags' first layout.

#![allow(clippy::unwrap_used)]
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use clap::error::ErrorKind;
use redis_ratelimit_client::Fallback;
use redis_ratelimit_client::store::BatchOptions;
use redis_ratelimit_plans::PlanOptions;

use super::*;
use crate::header_settings::FieldsDraft;
use crate::metrics;
use crate::tls::TlsFiles;

fn parse_line(line: &str) -> Result<Options, clap::Error> {
    parse(std::iter::once("redis-ratelimit-server").chain(line.split_whitespace()))
}

fn error(line: &str) -> String {
    parse_line(line).unwrap_err().to_string()
}

const BASE: &str = "--redis redis://127.0.0.1:6379/ --config /tmp/c";

#[test]
fn the_defaults() {
    let options = parse_line(BASE).unwrap();
    assert_eq!(
        options.store.urls,
        vec!["redis://127.0.0.1:6379/".to_string()]
    );
    assert_eq!(options.config.dir, PathBuf::from("/tmp/c"));
    assert_eq!(options.listen.grpc, Some("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(options.listen.http, Some("127.0.0.1:8080".parse().unwrap()));
    assert_eq!(options.limiter.lease, None);
    assert_eq!(options.store.batch(), BatchOptions::default());
    assert_eq!(options.store.timeout, Duration::from_millis(20));
    assert_eq!(options.limiter.failure(), Fallback::Local);
    assert_eq!(options.limiter.replicas, 1);
    assert_eq!(
        options.answers.fields,
        HeaderSettings {
            draft: FieldsDraft::Draft11,
            on_admitted: true,
            legacy: None
        }
    );
    assert_eq!(options.store.key_prefix, "rls:");
    assert_eq!(options.bounds, Bounds::default());
    assert_eq!(options.config.watch, Some(Duration::from_millis(1000)));
    assert_eq!(
        options.config.plans_check(),
        PlanOptions::default().check_every
    );
    assert!(!options.store.cluster && options.tls.grpc().is_none() && options.tls.http().is_none());
    assert_eq!(options.config.bounds, FileBounds::default());
    assert_eq!(options.limits, Limits::default());
    assert_eq!(
        options.runtime.shutdown_timeout,
        Duration::from_millis(super::runtime::DEFAULT_SHUTDOWN_TIMEOUT_MS)
    );
    assert!(options.access.grpc_token_file.is_none() && !options.access.metrics_need_token);
    assert!(options.access.http_allowed_origins.is_empty());
    assert_eq!(
        options.runtime.max_metric_rules,
        metrics::DEFAULT_MAX_RULE_LABELS
    );
}

#[test]
fn the_bounds_and_security_flags() {
    let options = parse_line(&format!(
        "{BASE} --config-max-depth 8 --config-max-file-bytes 4096 --config-max-files 3 \
         --max-connections 10 --header-timeout-ms 500 --request-timeout-ms 700 \
         --max-streams 4 --grpc-concurrency 2 --keepalive-ms 0 --shutdown-timeout-ms 0 \
         --grpc-tls-cert c --grpc-tls-key k --grpc-tls-client-ca ca --grpc-token-file g \
         --http-token-file h --metrics-need-token --max-metric-rules 5 \
         --limit-overrides refuse --http-allow-origin https://a --http-allow-origin https://b"
    ))
    .unwrap();
    assert_eq!(
        options.config.bounds,
        FileBounds {
            max_depth: 8,
            max_file_bytes: 4096,
            max_files: 3
        }
    );
    assert_eq!(
        options.limits,
        Limits {
            max_connections: 10,
            header_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(700),
            max_streams: 4,
            grpc_concurrency: 2,
            keepalive: None,
        }
    );
    assert_eq!(options.runtime.shutdown_timeout, Duration::ZERO);
    assert_eq!(
        options.tls.grpc().and_then(|tls| tls.client_ca),
        Some(PathBuf::from("ca"))
    );
    assert_eq!(options.access.grpc_token_file, Some(PathBuf::from("g")));
    assert!(options.access.metrics_need_token);
    assert_eq!(options.runtime.max_metric_rules, 5);
    assert!(!options.bounds.limit_overrides);
    assert_eq!(
        options.access.http_allowed_origins,
        vec!["https://a", "https://b"]
    );
    for (line, reason) in [
        ("--metrics-need-token", "--http-token-file"),
        ("--grpc-tls-client-ca ca", "--grpc-tls-cert"),
        ("--header-timeout-ms 0", "must be above 0"),
        (
            "--limit-overrides maybe",
            "[possible values: allow, refuse]",
        ),
    ] {
        let error = error(&format!("{BASE} {line}"));
        assert!(error.contains(reason), "{line}: {error}");
    }
}

#[test]
fn every_flag() {
    let options = parse_line(
        "--redis a:1,b:2 --cluster --config=/etc/rl --grpc-listen off --http-listen 0.0.0.0:9 \
         --lease 10 --timeout-ms 5 --failure-mode deny --replicas 0 --headers draft-12 \
         --headers-on-denied-only --legacy-headers --key-prefix x: --max-descriptors 4 \
         --max-entries 0 --max-value-bytes 64 --http-token-file /t --grpc-tls-cert c \
         --grpc-tls-key k --watch-ms 0 --plans-check-ms 50 --lease 0 --worker-threads 1",
    )
    .unwrap();
    assert_eq!(
        options.store.urls,
        vec!["redis://a:1/".to_string(), "redis://b:2/".to_string()],
        "cluster seeds without a scheme"
    );
    assert!(options.store.cluster);
    assert_eq!(options.config.dir, PathBuf::from("/etc/rl"));
    assert_eq!(options.listen.grpc, None);
    assert_eq!(options.listen.http, Some("0.0.0.0:9".parse().unwrap()));
    assert_eq!(
        options.limiter.lease, None,
        "the last --lease wins, and 0 is off"
    );
    assert_eq!(options.store.timeout, Duration::from_millis(5));
    assert_eq!(options.limiter.failure(), Fallback::Closed);
    assert_eq!(options.limiter.replicas, 1);
    assert_eq!(options.answers.fields.draft, FieldsDraft::Draft12);
    assert!(!options.answers.fields.on_admitted);
    assert_eq!(options.answers.fields.legacy, Some(TripleNames::legacy()));
    assert_eq!(options.store.key_prefix, "x:");
    assert_eq!(options.bounds.max_descriptors, 4);
    assert_eq!(options.bounds.max_entries, 1);
    assert_eq!(options.bounds.max_value_bytes, 64);
    assert_eq!(options.access.http_token_file, Some(PathBuf::from("/t")));
    assert_eq!(
        options.tls.grpc(),
        Some(TlsFiles {
            cert: "c".into(),
            key: "k".into(),
            client_ca: None,
        })
    );
    assert_eq!(options.config.watch, None);
    assert_eq!(options.config.plans_check(), Duration::from_millis(50));
    assert_eq!(options.runtime.worker_threads, Some(1));
}

#[test]
fn errors_name_the_flag_and_the_reason() {
    let cases: &[(&str, &str)] = &[
        ("--config /c", "--redis is required (or REDIS_URL)"),
        ("--redis r", "--config is required (or RUNTIME_ROOT)"),
        ("--timeout-ms 0", "'--timeout-ms <MS>': must be above 0"),
        (
            "--plans-check-ms 0",
            "'--plans-check-ms <MS>': must be above 0",
        ),
        ("--lease -1", "a non-negative integer is expected"),
        (
            "--batch-window-us 100001",
            "'--batch-window-us <US>': is at most 100000 (0.1 s)",
        ),
        ("--batch-max 0", "'--batch-max <N>': is 1 to 1024"),
        (
            "--rlqs-ttl-ms 1",
            "'--rlqs-ttl-ms <MS>': from 2 to 3600000 ms is expected",
        ),
        (
            "--rlqs --grpc-listen off",
            "--rlqs is served on the gRPC listener, which is off",
        ),
        ("--batch-max 1025", "'--batch-max <N>': is 1 to 1024"),
        (
            "--worker-threads 0",
            "'--worker-threads <N>': a number of threads from 1 to 1024 is expected",
        ),
        (
            "--failure-mode maybe",
            "[possible values: allow, deny, local]",
        ),
        (
            "--headers draft-10",
            "[possible values: off, draft-11, draft-12]",
        ),
        (
            "--max-descriptors 17",
            "is 1 to 16 (one RL.MULTI takes 16 keys)",
        ),
        (
            "--grpc-listen nowhere",
            "an address such as 127.0.0.1:8081, or 'off'",
        ),
        (
            "--http-tls-cert c",
            "--http-tls-cert and --http-tls-key go together",
        ),
        (
            "--grpc-listen off --http-listen off",
            "both listeners are off: nothing to serve",
        ),
        ("--frobnicate", "unexpected argument '--frobnicate'"),
        ("--lease", "a value is required for '--lease <N>'"),
    ];
    for (extra, expected) in cases {
        let line = if extra.starts_with("--config") || extra.starts_with("--redis") {
            extra.to_string()
        } else {
            format!("{BASE} {extra}")
        };
        let text = error(&line);
        assert!(text.contains(expected), "{line}: {text}");
        assert_eq!(
            parse_line(&line).unwrap_err().exit_code(),
            2,
            "a usage error: {line}"
        );
    }
}

/// Parses `line` with `env` as the whole environment.
fn parse_env(line: &str, env: &[(&str, &str)]) -> Result<Options, clap::Error> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    parse_with_env(
        std::iter::once("redis-ratelimit-server").chain(line.split_whitespace()),
        move |variable| {
            env.iter()
                .find(|(name, _)| name == variable)
                .map(|(_, value)| value.into())
        },
    )
}

#[test]
fn booleans_in_every_spelling_the_reference_takes() {
    let base = "--redis 127.0.0.1:6379 --config /c";
    type Reader = fn(&Options) -> bool;
    let read: &[(&str, Reader)] = &[
        ("SHADOW_MODE", |options| options.answers.shadow_mode),
        ("REDIS_TLS", |options| {
            options.store.urls[0].starts_with("rediss://")
        }),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", |options| {
            options.answers.fields.legacy.is_some()
        }),
        ("RESPONSE_DYNAMIC_METADATA", |options| {
            options.reference.response_dynamic_metadata
        }),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", |options| {
            options.reference.healthy_with_at_least_one_config
        }),
    ];
    for (variable, value_of) in read {
        for (spelling, expected) in [
            ("1", true),
            ("t", true),
            ("T", true),
            ("TRUE", true),
            ("true", true),
            ("True", true),
            ("0", false),
            ("f", false),
            ("F", false),
            ("FALSE", false),
            ("false", false),
            ("False", false),
        ] {
            let options = parse_env(base, &[(variable, spelling)])
                .unwrap_or_else(|error| panic!("{variable}={spelling}: {error}"));
            assert_eq!(value_of(&options), expected, "{variable}={spelling}");
            assert_eq!(options.from_environment, vec![*variable]);
        }
        for refused in ["yes", "on", "2", "", " true", "tRUE"] {
            let error = parse_env(base, &[(variable, refused)]).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(&format!(
                    "in the environment variable {variable}: a boolean"
                )) && !text.lines().next().unwrap_or_default().contains("--"),
                "{variable}={refused:?}: {text}"
            );
            assert_eq!(error.exit_code(), 2);
        }
    }
    let options = parse_env(
        base,
        &[
            ("REDIS_TLS", "1"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "T"),
        ],
    )
    .unwrap();
    assert_eq!(
        options.store.urls,
        vec!["rediss://127.0.0.1:6379/#insecure"]
    );
    // The command line wins, and a variable it stands for is not read at all.
    let options = parse_env(&format!("{base} --shadow-mode"), &[("SHADOW_MODE", "bad")]).unwrap();
    assert!(options.answers.shadow_mode && options.from_environment.is_empty());
}

#[test]
fn the_runtime_directory_is_joined_as_the_reference_joins_it() {
    let config = |env: &[(&str, &str)]| parse_env("--redis r:1", env).unwrap().config.dir;
    for (env, expected) in [
        (
            &[("RUNTIME_ROOT", "/srv/r"), ("RUNTIME_SUBDIRECTORY", "/x")][..],
            "/srv/r/x/config",
        ),
        (
            &[("RUNTIME_SUBDIRECTORY", "/x")][..],
            "/srv/runtime_data/current/x/config",
        ),
        (
            &[
                ("RUNTIME_ROOT", "/srv/r/"),
                ("RUNTIME_APPDIRECTORY", "/rules/"),
            ][..],
            "/srv/r/rules",
        ),
        (
            &[
                ("RUNTIME_ROOT", "a//b/./"),
                ("RUNTIME_SUBDIRECTORY", "../c"),
            ][..],
            "a/c/config",
        ),
        (
            &[("RUNTIME_ROOT", "/"), ("RUNTIME_SUBDIRECTORY", "../../x")][..],
            "/x/config",
        ),
        (
            &[("RUNTIME_ROOT", ".."), ("RUNTIME_SUBDIRECTORY", "..")][..],
            "../../config",
        ),
        (
            &[("RUNTIME_ROOT", "/r"), ("RUNTIME_SUBDIRECTORY", "")][..],
            "/r/config",
        ),
    ] {
        assert_eq!(config(env), PathBuf::from(expected), "{env:?}");
    }
}

#[test]
fn a_value_from_the_environment_is_named_by_its_variable() {
    let base = "--redis r:1 --config /c";
    for (variable, value, expected) in [
        (
            "GRPC_PORT",
            "eighty",
            "invalid value \"eighty\" in the environment variable GRPC_PORT: invalid digit",
        ),
        (
            "LOG_LEVEL",
            "loud",
            "invalid value \"loud\" in the environment variable LOG_LEVEL: the possible values are",
        ),
        (
            "REDIS_TYPE",
            "ring",
            "in the environment variable REDIS_TYPE: the possible values are single, sentinel, cluster",
        ),
        (
            "GRPC_HOST",
            "no such host.invalid",
            "GRPC_HOST: cannot resolve",
        ),
    ] {
        let error = parse_env(base, &[(variable, value)]).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(expected), "{variable}={value}: {text}");
        assert!(
            !text.lines().next().unwrap_or_default().contains("--"),
            "{variable}={value} names no flag: {text}"
        );
        assert_eq!(error.exit_code(), 2);
    }
    let text = parse_env("--config /c", &[("REDIS_URL", "a:1,b:2")])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("REDIS_URL: one server is one address"),
        "{text}"
    );
    let text = error("--config /c --redis a:1,b:2");
    assert!(
        text.contains("--redis: one server is one address"),
        "{text}"
    );
    let text = error("--config /c --redis r:1 --grpc-port eighty");
    assert!(
        text.contains("'--grpc-port <PORT>'"),
        "a flag is named as a flag: {text}"
    );
}

#[test]
fn help_is_not_an_error() {
    let help = parse_line("--help").unwrap_err();
    assert_eq!(help.kind(), ErrorKind::DisplayHelp);
    assert_eq!(help.exit_code(), 0);
    let text = help.to_string();
    for flag in [
        "--redis",
        "--failure-mode",
        "--plans-check-ms",
        "--grpc-tls-key",
    ] {
        assert!(text.contains(flag), "{flag} in the help");
    }
}

/// A help text's flags, each with its heading and its whole entry (lines as written, the
/// value of an `[env: NAME=value]` dropped), sorted: the order of the flags aside, what
/// `--help` says of each.
fn entries(help: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut heading = String::new();
    for line in help.lines() {
        let line = match line.split_once("[env: ") {
            Some((before, env)) => match env.split_once('=') {
                Some((name, _)) => format!("{before}[env: {name}=]"),
                None => line.to_string(),
            },
            None => line.to_string(),
        };
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = line;
        } else if line.starts_with("  -") || line.starts_with("      -") {
            entries.push(format!("{heading}\n{line}"));
        } else if let Some(entry) = entries.last_mut() {
            entry.push('\n');
            entry.push_str(line.trim_end());
        }
    }
    for entry in &mut entries {
        entry.truncate(entry.trim_end().len());
    }
    entries.sort();
    entries
}

#[test]
fn help_says_what_it_said_of_every_flag() {
    let mut command = Options::command();
    for (help, before) in [
        (command.render_long_help(), include_str!("help-long.txt")),
        (command.render_help(), include_str!("help-short.txt")),
    ] {
        let (now, before) = (entries(&help.to_string()), entries(before));
        assert_eq!(now.len(), 76, "every flag, --help and --version");
        for (now, before) in now.iter().zip(&before) {
            assert_eq!(now, before, "a flag's entry in the help");
        }
        assert_eq!(now, before);
    }
}
