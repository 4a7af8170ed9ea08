//! The service's decision logic on the client library's in-memory store: matching,
//! `replaces`, unlimited, probes, shadow mode (per rule and global), limits of 0, every
//! descriptor's status and the header fields; the request/answer expectations of the
//! reference's `ratelimit_test.go` and `integration_test.go`, and the defects a migration
//! from it met (each test names the one it pins).

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_client::store::{MemoryStore, Store, StoreBackend};
use redis_ratelimit_client::{Fallback, Profile, RateLimiter};
use redis_ratelimit_plans::PlanOptions;

use super::{Engine, EngineSettings, PROFILE};
use crate::cli::DEFAULT_MAX_DEPTH;
use crate::config::{Unit, assemble};
use crate::headers::{self, FieldsDraft, HeaderSettings};
use crate::plans::Plans;
use crate::request::{Bounds, CheckRequest, Descriptor};
use crate::verdict::{CheckFailure, Decider, Status, UNLIMITED_REMAINING, Verdict};

/// An engine on a fresh in-memory store over config files (name, YAML).
fn engine(files: &[(&str, &str)]) -> (Engine, Arc<MemoryStore>) {
    engine_in(files, false)
}

fn engine_in(files: &[(&str, &str)], shadow_mode: bool) -> (Engine, Arc<MemoryStore>) {
    engine_failing(files, shadow_mode, Fallback::Local)
}

/// With the failure mode `fallback` when the store is out of reach.
fn engine_failing(
    files: &[(&str, &str)],
    shadow_mode: bool,
    fallback: Fallback,
) -> (Engine, Arc<MemoryStore>) {
    let config = assemble(
        files
            .iter()
            .map(|(name, text)| (PathBuf::from(name), text.to_string()))
            .collect(),
        DEFAULT_MAX_DEPTH,
    )
    .unwrap_or_else(|errors| panic!("{errors:?}"));
    let store = Arc::new(MemoryStore::new());
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .profile(
            Profile::builder(PROFILE)
                .fallback(fallback)
                .timeout(Duration::from_millis(200))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    // Never connected: limits naming a tenant_key take their YAML defaults.
    let plans = Plans::new(
        vec!["redis://127.0.0.1:1/".into()],
        false,
        PlanOptions::default(),
    );
    let engine = Engine::new(
        config,
        limiter,
        plans,
        EngineSettings {
            bounds: Bounds::default(),
            key_prefix: "rls:".into(),
            shadow_mode,
            reference_metadata: true,
            max_held: redis_ratelimit_client::expiring::DEFAULT_MAX_KEYS,
            near_limit_ratio: 0.8,
        },
    );
    (engine, store)
}

fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor {
        entries: entries
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

fn request(domain: &str, descriptors: Vec<Descriptor>) -> CheckRequest {
    CheckRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

fn one(domain: &str, entries: &[(&str, &str)]) -> CheckRequest {
    request(domain, vec![descriptor(entries)])
}

async fn check(engine: &Engine, request: &CheckRequest) -> Verdict {
    engine.check(request).await.unwrap()
}

/// A status as the gRPC answer has it: ok, requests_per_unit and unit of the current limit,
/// limit_remaining.
type Code = (bool, Option<(u64, Unit)>, u64);

fn codes(verdict: &Verdict) -> Vec<Code> {
    verdict
        .statuses
        .iter()
        .map(|status| {
            (
                status.ok,
                status
                    .limit
                    .as_ref()
                    .map(|limit| (limit.requests_per_unit, limit.unit)),
                status.remaining,
            )
        })
        .collect()
}

const PER_MINUTE: &str = "domain: d
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: baz
    value: qux
    rate_limit: {unlimited: true}
";

#[tokio::test]
async fn a_descriptor_without_a_rule_is_ok_with_no_limit_and_does_not_decide() {
    // ratelimit_test.go, TestService: ("hello", "world") matches nothing.
    let (engine, store) = engine(&[("d.yaml", PER_MINUTE)]);
    let verdict = check(&engine, &one("d", &[("hello", "world")])).await;
    assert!(verdict.allowed);
    assert_eq!(codes(&verdict), [(true, None, 0)]);
    assert_eq!(verdict.decider, Decider::Nothing);
    assert_eq!(store.calls(), 0, "nothing asked");
    // One over its limit beside it: OVER_LIMIT overall, the other stays OK (either order).
    for _ in 0..10 {
        check(&engine, &one("d", &[("foo", "bar")])).await;
    }
    for order in [[0, 1], [1, 0]] {
        let descriptors = [
            descriptor(&[("foo", "bar")]),
            descriptor(&[("hello", "world")]),
        ];
        let verdict = check(
            &engine,
            &request(
                "d",
                order.iter().map(|at| descriptors[*at].clone()).collect(),
            ),
        )
        .await;
        assert!(!verdict.allowed);
        let over = (false, Some((10, Unit::Minute)), 0);
        let none = (true, None, 0);
        let expected = if order[0] == 0 {
            [over, none]
        } else {
            [none, over]
        };
        assert_eq!(codes(&verdict), expected);
    }
}

#[tokio::test]
async fn unlimited_answers_the_most_a_uint32_can_say() {
    // Defect 3 (README Example 5, ratelimit_test.go TestUnlimited): [(foo=bar) 10/min,
    // (hello=world) no rule, (baz=qux) unlimited] -> 9; 0 without a limit; 4294967295.
    let (engine, store) = engine(&[("d.yaml", PER_MINUTE)]);
    let verdict = check(
        &engine,
        &request(
            "d",
            vec![
                descriptor(&[("foo", "bar")]),
                descriptor(&[("hello", "world")]),
                descriptor(&[("baz", "qux")]),
            ],
        ),
    )
    .await;
    assert!(verdict.allowed);
    assert_eq!(
        codes(&verdict),
        [
            (true, Some((10, Unit::Minute)), 9),
            (true, None, 0),
            (true, None, u64::from(u32::MAX)),
        ]
    );
    assert_eq!(UNLIMITED_REMAINING, 4_294_967_295);
    assert!(!verdict.statuses[2].consulted, "never counted");
    assert_eq!(store.calls(), 1, "the unlimited descriptor is not asked");
}

#[tokio::test]
async fn a_whitelisted_value_loads_and_applies_no_limit() {
    // Defect 1 (the reference's basic_config.yaml, `key2: value3`).
    let config = "domain: d
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: foo
    value: vip
";
    let (engine, _) = engine(&[("d.yaml", config)]);
    let vip = check(&engine, &one("d", &[("foo", "vip")])).await;
    assert_eq!(codes(&vip), [(true, None, 0)]);
    let other = check(&engine, &one("d", &[("foo", "x")])).await;
    assert_eq!(codes(&other), [(true, Some((5, Unit::Minute)), 4)]);
}

#[tokio::test]
async fn replaces_works_without_a_name_on_the_replacing_limit() {
    // Defect 2 (README Example 7, as written): the unnamed limit replaces the named one.
    let example7 = include_str!("../../tests/reference/readme/example7.yaml");
    let (engine, _) = engine(&[("e7.yaml", example7)]);
    let basic = descriptor(&[("plan", "basic"), ("account", "acct-1")]);
    let boost = descriptor(&[("plan", "boost"), ("account", "acct-1")]);
    let both = check(
        &engine,
        &request("readme-7", vec![basic.clone(), boost.clone()]),
    )
    .await;
    assert_eq!(
        codes(&both),
        [(true, None, 0), (true, Some((10, Unit::Second)), 9)],
        "the basic limit does not apply beside the boost one"
    );
    let alone = check(&engine, &request("readme-7", vec![basic])).await;
    assert_eq!(
        codes(&alone),
        [(true, Some((5, Unit::Second)), 4)],
        "and was not charged by the request it was replaced in"
    );
    let boost_alone = check(&engine, &request("readme-7", vec![boost])).await;
    assert_eq!(codes(&boost_alone), [(true, Some((10, Unit::Second)), 8)]);
}

#[tokio::test]
async fn hits_are_a_uint32_and_more_than_the_limit_is_a_denial() {
    // Defect 4: a limit counted in bytes meets bodies over a million.
    let config = "domain: bytes
descriptors:
  - key: upload
    rate_limit: {unit: minute, requests_per_unit: 10000000}
";
    let (engine, _) = engine(&[("b.yaml", config)]);
    let mut big = one("bytes", &[("upload", "u1")]);
    big.hits_addend = 4_000_000;
    let verdict = check(&engine, &big).await;
    assert!(verdict.allowed);
    assert_eq!(verdict.statuses[0].remaining, 6_000_000);
    big.hits_addend = u64::from(u32::MAX);
    let over = check(&engine, &big).await;
    assert!(
        !over.allowed,
        "a charge above the limit is denied, not refused"
    );
    assert_eq!(over.retry_after, None, "it can never pass");
    assert_eq!(over.statuses[0].remaining, 6_000_000, "nothing was charged");
    assert!(
        over.statuses[0].reset_after > Duration::ZERO,
        "defect 8: the window still ends"
    );
    let mut huge = one("bytes", &[("upload", "u2")]);
    huge.descriptors[0].hits_addend = Some(u64::MAX);
    assert!(!check(&engine, &huge).await.allowed);
}

#[tokio::test]
async fn a_probe_asks_whether_the_limit_is_over_not_whether_one_more_fits() {
    // Defect 5: {h: 5/minute}; five requests (h=m1); then [(h=m1, hits 0), (h=m2)] is OK:
    // m1 OK with 0 left, m2 charged (4 left).
    let config = "domain: d
descriptors:
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 5}
";
    let (engine, _) = engine(&[("d.yaml", config)]);
    for _ in 0..5 {
        assert!(check(&engine, &one("d", &[("h", "m1")])).await.allowed);
    }
    let mut probe = descriptor(&[("h", "m1")]);
    probe.hits_addend = Some(0);
    let verdict = check(
        &engine,
        &request("d", vec![probe.clone(), descriptor(&[("h", "m2")])]),
    )
    .await;
    assert!(verdict.allowed);
    assert_eq!(
        codes(&verdict),
        [
            (true, Some((5, Unit::Minute)), 0),
            (true, Some((5, Unit::Minute)), 4)
        ]
    );
    assert!(verdict.statuses[0].consulted && !verdict.statuses[0].over);
    // A probe alone charges nothing.
    let mut fresh = descriptor(&[("h", "m3")]);
    fresh.hits_addend = Some(0);
    for _ in 0..3 {
        let verdict = check(&engine, &request("d", vec![fresh.clone()])).await;
        assert_eq!(codes(&verdict), [(true, Some((5, Unit::Minute)), 5)]);
    }
}

#[tokio::test]
async fn a_limit_not_charged_is_shown_as_it_stands() {
    // Defect 7 (README Example 3): [(198.51.100.7), (198.51.100.9)]: the first is blocked
    // (0 per second), the second was not charged, so it has 10 left, and a reset.
    let example3 = include_str!("../../tests/reference/readme/example3.yaml");
    let (engine, store) = engine(&[("e3.yaml", example3)]);
    let verdict = check(
        &engine,
        &request(
            "readme-3",
            vec![
                descriptor(&[("client_ip", "198.51.100.7")]),
                descriptor(&[("client_ip", "198.51.100.9")]),
            ],
        ),
    )
    .await;
    assert!(!verdict.allowed);
    assert_eq!(
        codes(&verdict),
        [
            (false, Some((0, Unit::Second)), 0),
            (true, Some((10, Unit::Second)), 10)
        ]
    );
    let open = &verdict.statuses[1];
    assert!(open.consulted && open.reset_after > Duration::ZERO);
    assert!(open.reset_after <= Duration::from_secs(1));
    // Defect 8: the blocked limit resets at its window's end, not 0 s.
    let blocked = &verdict.statuses[0];
    assert!(blocked.consulted);
    assert!(blocked.reset_after > Duration::ZERO && blocked.reset_after <= Duration::from_secs(1));
    assert_eq!(verdict.retry_after, None, "a limit of 0 never admits");
    assert_eq!(verdict.decider, Decider::Store(Some(StoreBackend::Memory)));
    let again = check(&engine, &one("readme-3", &[("client_ip", "198.51.100.9")])).await;
    assert_eq!(again.statuses[0].remaining, 9, "it was only read");
    assert_eq!(store.calls(), 2);
}

#[tokio::test]
async fn a_blocked_limit_alone_asks_nothing() {
    let example3 = include_str!("../../tests/reference/readme/example3.yaml");
    let (engine, store) = engine(&[("e3.yaml", example3)]);
    let verdict = check(&engine, &one("readme-3", &[("client_ip", "198.51.100.7")])).await;
    assert!(!verdict.allowed);
    assert_eq!(verdict.decider, Decider::Store(None));
    assert_eq!(store.calls(), 0);
    // A probe of a blocked limit: 0 > 0 is false in the reference, so it is OK.
    let mut probe = descriptor(&[("client_ip", "198.51.100.7")]);
    probe.hits_addend = Some(0);
    let verdict = check(&engine, &request("readme-3", vec![probe])).await;
    assert!(!verdict.allowed, "a limit of 0 denies whatever the hits");
}

const SHADOWED: &str = "domain: s
descriptors:
  - key: enforced
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: other
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
";

#[tokio::test]
async fn a_shadow_limit_reports_and_never_denies() {
    // ratelimit_test.go TestRuleShadowMode and TestMixedRuleShadowMode.
    let (engine, _) = engine(&[("s.yaml", SHADOWED)]);
    let both = || {
        request(
            "s",
            vec![
                descriptor(&[("shadowed", "a")]),
                descriptor(&[("other", "a")]),
            ],
        )
    };
    assert!(check(&engine, &both()).await.allowed);
    let over = check(&engine, &both()).await;
    assert!(over.allowed, "shadow limits never deny");
    assert!(
        over.statuses
            .iter()
            .all(|status| status.ok && status.shadow)
    );
    assert!(over.statuses[0].over, "it would have denied");
    assert_eq!(over.shadow_denied_by(), ["shadowed"]);
    assert!(over.denied_by().is_empty());
    // Mixed: the enforced one over denies; the shadow one is OK.
    check(&engine, &one("s", &[("enforced", "b")])).await;
    let mixed = check(
        &engine,
        &request(
            "s",
            vec![
                descriptor(&[("other", "b")]),
                descriptor(&[("enforced", "b")]),
            ],
        ),
    )
    .await;
    assert!(!mixed.allowed);
    assert_eq!(
        codes(&mixed),
        [
            (true, Some((5, Unit::Minute)), 5),
            (false, Some((1, Unit::Minute)), 0)
        ],
        "defect 7: the shadow limit skipped after the denial is read, with its 5 left"
    );
    assert!(mixed.statuses[0].consulted);
    assert_eq!(mixed.denied_by(), ["enforced"]);
}

#[tokio::test]
async fn the_global_shadow_mode_reports_every_denial_and_admits() {
    // Defect 10 (SHADOW_MODE=true; ratelimit_test.go TestServiceGlobalShadowMode): the
    // 11th request on a 10/minute key is OK overall, its status OVER_LIMIT.
    let (engine, store) = engine_in(&[("d.yaml", PER_MINUTE)], true);
    for _ in 0..10 {
        assert!(!check(&engine, &one("d", &[("foo", "k")])).await.shadowed);
    }
    let eleventh = check(
        &engine,
        &request(
            "d",
            vec![
                descriptor(&[("foo", "k")]),
                descriptor(&[("hello", "world")]),
            ],
        ),
    )
    .await;
    assert!(eleventh.allowed && eleventh.shadowed);
    assert_eq!(
        codes(&eleventh),
        [(false, Some((10, Unit::Minute)), 0), (true, None, 0)]
    );
    assert_eq!(eleventh.retry_after, None);
    assert_eq!(eleventh.shadow_denied_by(), ["foo"]);
    assert!(eleventh.denied_by().is_empty());
    let fields = headers::fields(&eleventh, &HeaderSettings::default(), &[1, 1]);
    assert!(
        fields.iter().all(|(name, _)| name != "retry-after"),
        "admitted: no Retry-After"
    );
    assert_eq!(store.calls(), 11);
}

#[tokio::test]
async fn a_descriptor_without_entries_matches_nothing() {
    // Defect 9: the reference answers OK with no limit.
    let (engine, _) = engine(&[("d.yaml", PER_MINUTE)]);
    let verdict = check(&engine, &request("d", vec![descriptor(&[])])).await;
    assert!(verdict.allowed);
    assert_eq!(codes(&verdict), [(true, None, 0)]);
}

#[tokio::test]
async fn empty_domains_and_descriptor_lists_are_bad_requests() {
    // ratelimit_test.go TestEmptyDomain and TestEmptyDescriptors (the reference answers an
    // error; here INVALID_ARGUMENT / 400); an unknown domain is refused the same way (the
    // reference answers OK: a documented difference).
    let (engine, store) = engine(&[("d.yaml", PER_MINUTE)]);
    for (bad, reason) in [
        (one("", &[("foo", "x")]), "'domain' is empty"),
        (request("d", vec![]), "'descriptors' is empty"),
        (one("nowhere", &[("foo", "x")]), "unknown domain 'nowhere'"),
    ] {
        match engine.check(&bad).await {
            Err(CheckFailure::BadRequest(error)) => assert!(error.0.contains(reason), "{error}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.calls(), 0);
}

#[tokio::test]
async fn a_minute_limit_counts_down_then_denies_and_charges_nothing_else() {
    // integration_test.go testBasicBaseConfig: 25 requests on 20/minute, then two limits
    // (20/minute, 10/hour) for 15 requests: after the 10th the hour limit denies and the
    // minute limit is not charged (the reference's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
    // answers).
    let another =
        include_str!("../../tests/reference/runtime/current/ratelimit/config/another.yaml");
    let (engine, _) = engine(&[("another.yaml", another)]);
    for i in 0..25u64 {
        let verdict = check(&engine, &one("rt-another", &[("k2", "r1")])).await;
        let remaining = 20u64.saturating_sub(i + 1);
        assert_eq!(verdict.allowed, i < 20, "request {i}");
        assert_eq!(
            codes(&verdict),
            [(i < 20, Some((20, Unit::Minute)), remaining)]
        );
        let reset = verdict.statuses[0].reset_after;
        assert!(reset > Duration::ZERO && reset <= Duration::from_secs(60));
    }
    for i in 0..15u64 {
        let verdict = check(
            &engine,
            &request(
                "rt-another",
                vec![descriptor(&[("k2", "r2")]), descriptor(&[("k3", "r2")])],
            ),
        )
        .await;
        let (first, second) = if i < 10 {
            (20 - (i + 1), 10 - (i + 1))
        } else {
            (10, 0)
        };
        assert_eq!(verdict.allowed, i < 10, "request {i}");
        assert_eq!(
            codes(&verdict),
            [
                (true, Some((20, Unit::Minute)), first),
                (i < 10, Some((10, Unit::Hour)), second)
            ],
            "request {i}"
        );
        assert!(verdict.statuses.iter().all(|status| status.consulted));
    }
}

#[tokio::test]
async fn matching_is_level_by_level_and_most_specific_first() {
    // README Examples 1, 2, 4 and 6.
    let files = [
        (
            "e1.yaml",
            include_str!("../../tests/reference/readme/example1.yaml"),
        ),
        (
            "e2.yaml",
            include_str!("../../tests/reference/readme/example2.yaml"),
        ),
        (
            "e4.yaml",
            include_str!("../../tests/reference/readme/example4.yaml"),
        ),
        (
            "e4f.yaml",
            include_str!("../../tests/reference/readme/example4_flat.yaml"),
        ),
        (
            "e6.yaml",
            include_str!("../../tests/reference/readme/example6.yaml"),
        ),
    ];
    let (engine, _) = engine(&files);
    let e1 = check(&engine, &one("readme-1", &[("table", "orders")])).await;
    assert_eq!(codes(&e1), [(true, Some((500, Unit::Second)), 499)]);
    assert_eq!(
        codes(&check(&engine, &one("readme-1", &[("table", "users")])).await),
        [(true, None, 0)]
    );
    // Example 2: both descriptors of one request; the logical OR of their decisions.
    let promo = || {
        request(
            "readme-2",
            vec![
                descriptor(&[("kind", "promo"), ("phone", "555")]),
                descriptor(&[("phone", "555")]),
            ],
        )
    };
    for i in 0..5u64 {
        let verdict = check(&engine, &promo()).await;
        assert_eq!(
            codes(&verdict),
            [
                (true, Some((5, Unit::Day)), 4 - i),
                (true, Some((100, Unit::Day)), 99 - i)
            ]
        );
    }
    let sixth = check(&engine, &promo()).await;
    assert!(!sixth.allowed);
    assert_eq!(
        codes(&sixth),
        [
            (false, Some((5, Unit::Day)), 0),
            (true, Some((100, Unit::Day)), 95)
        ]
    );
    // Example 4: the two-entry descriptor matches two levels deep only.
    let deep = [("app", "shop"), ("step", "pay")];
    assert_eq!(
        codes(&check(&engine, &one("readme-4", &deep)).await),
        [(true, Some((300, Unit::Second)), 299)]
    );
    assert_eq!(
        codes(&check(&engine, &one("readme-4-flat", &deep)).await),
        [(true, None, 0)]
    );
    // Example 6: alpha is in shadow mode, beta enforced at 20 per second.
    for _ in 0..12 {
        let alpha = check(
            &engine,
            &one("readme-6", &[("backend", "b"), ("caller", "alpha")]),
        )
        .await;
        assert!(alpha.allowed);
    }
    for i in 0..21u64 {
        let beta = check(
            &engine,
            &one("readme-6", &[("backend", "b"), ("caller", "beta")]),
        )
        .await;
        assert_eq!(beta.allowed, i < 20);
    }
}

#[tokio::test]
async fn shared_wildcards_count_once_and_the_others_per_value() {
    // integration_test.go testShareThreshold.
    let share =
        include_str!("../../tests/reference/runtime/current/ratelimit/config/share_threshold.yaml");
    let (engine, _) = engine(&[("share.yaml", share)]);
    for _ in 0..10 {
        check(&engine, &one("rt-share", &[("doc", "docs/a.pdf")])).await;
    }
    let b = check(&engine, &one("rt-share", &[("doc", "docs/b.csv")])).await;
    assert!(!b.allowed, "docs/b.csv shares docs/a.pdf's counter");
    assert_eq!(codes(&b), [(false, Some((10, Unit::Hour)), 0)]);
    for i in 0..10 {
        let own = check(
            &engine,
            &one("rt-share", &[("doc_own", &format!("own/{i}"))]),
        )
        .await;
        assert_eq!(codes(&own), [(true, Some((10, Unit::Hour)), 9)]);
    }
}

#[tokio::test]
async fn a_limit_override_counts_per_descriptor_with_the_callers_amount() {
    // config_test.go TestConfigLimitOverride: the request's limit, whatever the config.
    let (engine, _) = engine(&[("d.yaml", PER_MINUTE)]);
    let mut overridden = descriptor(&[("foo", "o"), ("sub", "x")]);
    overridden.limit = Some((3, Unit::Day));
    let verdict = check(&engine, &request("d", vec![overridden.clone()])).await;
    assert_eq!(codes(&verdict), [(true, Some((3, Unit::Day)), 2)]);
    overridden.limit = Some((42, Unit::Hour));
    let verdict = check(&engine, &request("d", vec![overridden])).await;
    assert_eq!(codes(&verdict), [(true, Some((42, Unit::Hour)), 41)]);
}

#[tokio::test]
async fn the_header_fields_name_the_binding_limit() {
    let example3 = include_str!("../../tests/reference/readme/example3.yaml");
    let (engine, _) = engine(&[("e3.yaml", example3)]);
    let settings = HeaderSettings {
        draft: FieldsDraft::Draft11,
        on_admitted: true,
        legacy: None,
    };
    let admitted = check(&engine, &one("readme-3", &[("client_ip", "10.0.0.1")])).await;
    let fields = headers::fields(&admitted, &settings, &[1]);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    assert_eq!(
        field("ratelimit-policy").as_deref(),
        Some("\"client_ip\";q=10;w=1")
    );
    assert!(
        field("ratelimit")
            .unwrap()
            .starts_with("\"client_ip\";r=9;t=")
    );
    assert_eq!(field("retry-after"), None);
    for _ in 0..9 {
        check(&engine, &one("readme-3", &[("client_ip", "10.0.0.1")])).await;
    }
    let denied = check(&engine, &one("readme-3", &[("client_ip", "10.0.0.1")])).await;
    assert!(!denied.allowed);
    let fields = headers::fields(&denied, &settings, &[1]);
    let retry = fields.iter().find(|(key, _)| key == "retry-after").unwrap();
    assert_eq!(retry.1, "1");
    let blocked = check(&engine, &one("readme-3", &[("client_ip", "198.51.100.7")])).await;
    let fields = headers::fields(&blocked, &settings, &[1]);
    assert!(
        fields.iter().all(|(key, _)| key != "retry-after"),
        "never passes: no Retry-After"
    );
}

#[tokio::test]
async fn every_status_in_order_whatever_the_mix() {
    // A request of every kind of descriptor, each answered in its place.
    let config = "domain: mix
descriptors:
  - key: limited
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: listed
";
    let (engine, _) = engine(&[("mix.yaml", config)]);
    let mut probe = descriptor(&[("limited", "p")]);
    probe.hits_addend = Some(0);
    let verdict = check(
        &engine,
        &request(
            "mix",
            vec![
                descriptor(&[("quiet", "q")]),
                descriptor(&[("nothing", "n")]),
                probe,
                descriptor(&[("free", "f")]),
                descriptor(&[("listed", "l")]),
                descriptor(&[("limited", "l")]),
            ],
        ),
    )
    .await;
    assert!(verdict.allowed);
    assert_eq!(
        codes(&verdict),
        [
            (true, Some((2, Unit::Minute)), 1),
            (true, None, 0),
            (true, Some((3, Unit::Minute)), 3),
            (true, None, UNLIMITED_REMAINING),
            (true, None, 0),
            (true, Some((3, Unit::Minute)), 2),
        ]
    );
    let consulted: Vec<bool> = verdict
        .statuses
        .iter()
        .map(|s: &Status| s.consulted)
        .collect();
    assert_eq!(consulted, [true, false, true, false, false, true]);
}

#[tokio::test]
async fn a_shadow_in_flight_limit_reads_its_slots_and_holds_none() {
    let config = "domain: slots
descriptors:
  - key: backend
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: concurrency}
";
    let (engine, _) = engine(&[("slots.yaml", config)]);
    for _ in 0..3 {
        let verdict = check(&engine, &one("slots", &[("backend", "b")])).await;
        assert!(verdict.allowed);
        assert_eq!(verdict.in_flight, None, "nothing to release");
        assert_eq!(verdict.statuses[0].remaining, 1, "the one slot stays free");
    }
}

#[tokio::test]
async fn a_limit_of_0_is_a_denial_not_an_outage() {
    let example3 = include_str!("../../tests/reference/readme/example3.yaml");
    let (engine, store) = engine_failing(&[("e3.yaml", example3)], false, Fallback::Closed);
    store.set_down(true);
    let verdict = check(
        &engine,
        &request(
            "readme-3",
            vec![
                descriptor(&[("client_ip", "198.51.100.7")]),
                descriptor(&[("client_ip", "198.51.100.9")]),
            ],
        ),
    )
    .await;
    assert!(!verdict.allowed);
    assert!(!verdict.unavailable, "429, not 503");
}

#[tokio::test]
async fn the_same_descriptor_twice_is_charged_twice_and_answered_in_turn() {
    // Envoy sends one descriptor twice when two actions produce it; the reference counts
    // each in turn (one INCRBY each, in order). This was a 500: "two limits of the job use
    // the key ...".
    let (engine, _) = engine(&[("d.yaml", PER_MINUTE)]);
    let twice = || {
        let mut repeated = descriptor(&[("foo", "a")]);
        repeated.hits_addend = Some(2);
        request("d", vec![descriptor(&[("foo", "a")]), repeated])
    };
    let minute = Some((10, Unit::Minute));
    // 1 then 2 hits of 10: 9 left after the first, 7 after the second.
    let verdict = check(&engine, &twice()).await;
    assert!(verdict.allowed);
    assert_eq!(codes(&verdict), [(true, minute, 9), (true, minute, 7)]);
    let verdict = check(&engine, &twice()).await;
    assert_eq!(codes(&verdict), [(true, minute, 6), (true, minute, 4)]);
    // 2 left: the first fits, the second does not; nothing is charged.
    check(&engine, &one("d", &[("foo", "a")])).await;
    check(&engine, &one("d", &[("foo", "a")])).await;
    let verdict = check(&engine, &twice()).await;
    assert!(!verdict.allowed);
    assert_eq!(codes(&verdict), [(true, minute, 2), (false, minute, 2)]);
    assert_eq!(verdict.denied_by(), ["foo"]);
    let verdict = check(&engine, &one("d", &[("foo", "a")])).await;
    assert_eq!(
        codes(&verdict),
        [(true, minute, 1)],
        "the denial charged nothing"
    );
}

#[tokio::test]
async fn one_key_under_two_limits_in_a_request_is_a_bad_request() {
    let (engine, _) = engine(&[("d.yaml", PER_MINUTE)]);
    let mut overridden = descriptor(&[("foo", "a")]);
    overridden.limit = Some((5, Unit::Minute));
    let mut other = descriptor(&[("foo", "a")]);
    other.limit = Some((7, Unit::Minute));
    let failure = engine
        .check(&request("d", vec![overridden, other]))
        .await
        .unwrap_err();
    assert!(
        matches!(&failure, CheckFailure::BadRequest(bad) if bad.0.contains("descriptors 0 and 1 count on one key under different limits")),
        "{failure:?}"
    );
}
