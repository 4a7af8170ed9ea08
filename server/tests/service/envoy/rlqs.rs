//! A real Envoy 1.40.0 with `examples/envoy-rlqs/envoy.yaml` as it is (only its addresses
//! changed; validated first with `envoy --mode validate`) in front of the service with
//! `--rlqs` and `examples/envoy-rlqs/config/edge.yaml`: the `rate_limit_quota` filter's
//! bucket is the `x-tenant` header; both fallbacks deny. Checked over real HTTP:
//!
//! - a new bucket's first request is denied (`no_assignment_behavior: DENY_ALL`), then the
//!   assignment admits; a request without the header is the `{tenant: anonymous}` bucket,
//!   of limit 0: `DENY_ALL`;
//! - one tenant offered about 3x its quota (20/s) for 14 s: in every span of whole 1 s
//!   windows the requests admitted are at most the quota of each window plus the tokens
//!   outstanding at its start, from the service's own accounting
//!   (`ratelimit_rlqs_tokens_total` charged minus refunded, minus the requests admitted
//!   before the span); at least half the quota is admitted in every window; the others are
//!   Envoy's 429 and never reach the backend; tokens are refunded (Envoy's reports, every
//!   5 s in 1.40, settle the leases).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_ratelimit_testkit::server::{Server, wait_until};

use super::backend::Backend;
use super::proxy::{Envoy, replace_once};
use crate::harness::{Service, redis_url};

const QUOTA_PER_SECOND: u64 = 20;
/// One request every 16 ms: about 3x the quota.
const REQUEST_EVERY: Duration = Duration::from_millis(16);
/// Long enough for settlement: Envoy 1.40 reports every 5 s, a replaced lease settles
/// after two reports.
const LOAD: Duration = Duration::from_secs(14);

fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/envoy-rlqs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The example with its addresses substituted, and nothing else.
fn example_config(service: std::net::SocketAddr, backend: std::net::SocketAddr) -> String {
    let text = example("envoy.yaml");
    let any_port = "{address: 127.0.0.1, port_value: 0}";
    let at = |address: std::net::SocketAddr| {
        format!(
            "{{address: {}, port_value: {}}}",
            address.ip(),
            address.port()
        )
    };
    let text = replace_once(&text, "{address: 0.0.0.0, port_value: 10000}", any_port);
    let text = replace_once(&text, "{address: 127.0.0.1, port_value: 9901}", any_port);
    let text = replace_once(
        &text,
        "{address: ratelimit, port_value: 8081}",
        &at(service),
    );
    replace_once(&text, "{address: backend, port_value: 8080}", &at(backend))
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The service's RLQS tokens `what` (charged, refunded) so far.
fn tokens(service: &Service, what: &str) -> u64 {
    let label = format!("what=\"{what}\"");
    service
        .http("GET", "/metrics", "", &[])
        .body
        .lines()
        .filter(|line| line.starts_with("ratelimit_rlqs_tokens_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// One sample of the service's accounting: taken between `from` and `to` (Unix seconds).
struct Sample {
    from: f64,
    to: f64,
    charged: u64,
    refunded: u64,
}

/// One request through Envoy: sent at, answered at, admitted.
struct Sent {
    sent: f64,
    answered: f64,
    admitted: bool,
}

/// Per whole 1 s window (epoch-aligned, as the limit's Redis windows): (admitted, the quota
/// plus the tokens outstanding at its start `s`). Each side is counted so that timing can
/// only loosen the check by the requests in flight: a request answered at or after `s` and
/// sent before `s + 1` counts as admitted in the window, and as unspent at `s`; the tokens
/// charged are read from the first sample taken wholly after `s` (a charge just before `s`
/// is in it), those refunded from the last sample wholly before `s`.
fn windows(sent: &[Sent], samples: &[Sample]) -> Vec<(u64, u64)> {
    let admitted: Vec<&Sent> = sent.iter().filter(|request| request.admitted).collect();
    let mut out = Vec::new();
    let Some(first) = sent.first() else {
        return out;
    };
    let last = sent.last().map_or(0.0, |request| request.answered);
    let mut start = first.sent.ceil();
    while start + 1.0 <= last {
        let in_window = admitted
            .iter()
            .filter(|request| request.answered >= start && request.sent < start + 1.0)
            .count() as u64;
        let spent_before = admitted
            .iter()
            .filter(|request| request.answered < start)
            .count() as u64;
        let charged = samples
            .iter()
            .find(|sample| sample.from >= start)
            .map(|sample| sample.charged);
        let refunded = samples
            .iter()
            .rev()
            .find(|sample| sample.to <= start)
            .map_or(0, |sample| sample.refunded);
        let Some(charged) = charged else { break };
        let outstanding = charged
            .saturating_sub(refunded)
            .saturating_sub(spent_before);
        out.push((in_window, QUOTA_PER_SECOND + outstanding));
        start += 1.0;
    }
    out
}

#[test]
fn envoy_rate_limit_quota_admits_within_the_quota_plus_the_outstanding_tokens() {
    let redis = Server::start(&[]);
    let service = Service::start(
        &redis_url(&redis),
        &[("edge.yaml", &example("config/edge.yaml"))],
        &["--rlqs"],
    );
    let backend = Backend::start();
    let envoy = Envoy::start(&example_config(service.grpc, backend.address));

    // No assignment yet: denied; then the assignment admits.
    let first = envoy.status_of("/", &[("x-tenant", "warm")]);
    assert_eq!(first, 429, "no_assignment_behavior denies");
    let admitted = wait_until(Duration::from_secs(10), || {
        envoy.status_of("/", &[("x-tenant", "warm")]) == 200
    });
    assert!(
        admitted,
        "the warm tenant was never admitted:\n{}",
        service.log()
    );
    // Without the header: {tenant: anonymous}, of limit 0.
    for _ in 0..5 {
        let anonymous = envoy.status_of("/", &[]);
        assert_eq!(anonymous, 429, "anonymous is DENY_ALL");
    }
    let served_before = backend.served();

    let sampling = Arc::new(AtomicBool::new(true));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (sampling, samples) = (Arc::clone(&sampling), Arc::clone(&samples));
        let metrics_at = service.http;
        std::thread::spawn(move || {
            while sampling.load(Ordering::SeqCst) {
                let from = now_seconds();
                let body = crate::harness::http(metrics_at, "GET", "/metrics", "", &[]).body;
                let to = now_seconds();
                let read = |what: &str| {
                    let label = format!("what=\"{what}\"");
                    body.lines()
                        .filter(|line| {
                            line.starts_with("ratelimit_rlqs_tokens_total{")
                                && line.contains(&label)
                        })
                        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                        .sum::<f64>() as u64
                };
                samples.lock().unwrap().push(Sample {
                    from,
                    to,
                    charged: read("charged"),
                    refunded: read("refunded"),
                });
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // The hot tenant's first assignment is awaited before the load: its no-assignment
    // denials are not part of the bound.
    let ready = wait_until(Duration::from_secs(10), || {
        envoy.status_of("/", &[("x-tenant", "hot")]) == 200
    });
    assert!(ready, "the hot tenant was never admitted");
    let mut sent = vec![Sent {
        sent: now_seconds(),
        answered: now_seconds(),
        admitted: true,
    }];
    let started = std::time::Instant::now();
    let mut next = started;
    while started.elapsed() < LOAD {
        let at = now_seconds();
        let status = envoy.status_of("/", &[("x-tenant", "hot")]);
        let answered = now_seconds();
        assert!(matches!(status, 200 | 429), "{status}");
        sent.push(Sent {
            sent: at,
            answered,
            admitted: status == 200,
        });
        next += REQUEST_EVERY;
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    // One more sample after the last window.
    std::thread::sleep(Duration::from_millis(50));
    sampling.store(false, Ordering::SeqCst);
    sampler.join().unwrap();
    let samples = samples.lock().unwrap();

    let admitted_total = sent.iter().filter(|request| request.admitted).count();
    let denied_total = sent.len() - admitted_total;
    let windows = windows(&sent, &samples);
    println!(
        "RLQS through Envoy {}: one tenant at {:.0}/s offered, quota {QUOTA_PER_SECOND}/s: \
         {admitted_total} admitted, {denied_total} denied (429); (admitted, quota + \
         outstanding) per 1 s window: {windows:?}; tokens charged {}, refunded {}",
        super::proxy::ENVOY_VERSION,
        sent.len() as f64 / LOAD.as_secs_f64(),
        tokens(&service, "charged"),
        tokens(&service, "refunded"),
    );
    assert!(windows.len() >= 10, "{windows:?}");
    for first in 0..windows.len() {
        let mut admitted = 0;
        for (offset, window) in windows[first..].iter().enumerate() {
            admitted += window.0;
            let bound = windows[first].1 + offset as u64 * QUOTA_PER_SECOND;
            assert!(
                admitted <= bound,
                "{} windows from {first}: admitted {admitted} > bound {bound}: {windows:?}",
                offset + 1
            );
        }
    }
    // Demand is 3x the quota: at least half of it is used in every window, the rest denied.
    for (admitted, _) in &windows {
        assert!(
            *admitted as f64 >= 0.5 * QUOTA_PER_SECOND as f64,
            "utilisation: {windows:?}"
        );
    }
    assert!(
        tokens(&service, "refunded") > 0,
        "leases settled from Envoy's reports: {windows:?}"
    );
    assert!(
        denied_total as f64 >= 0.4 * sent.len() as f64,
        "{windows:?}"
    );
    // A 429 never reaches the backend.
    assert_eq!(backend.served() - served_before, admitted_total);
}
