//! The response header fields of a decision: `RateLimit-Policy` and `RateLimit` (the IETF
//! httpapi draft, `draft-ietf-httpapi-ratelimit-headers-11`), `Retry-After`, the legacy
//! `X-RateLimit-*` triple, and the `application/problem+json` body of a refusal.
//!
//! Per the draft both fields are Structured Field lists of items named after the quota
//! policy, here each limit of the checked policy:
//!
//! ```text
//! RateLimit-Policy: "per-key";q=100;w=60, "daily";q=5000;w=86400
//! RateLimit: "per-key";r=42;t=1, "daily";r=4990;t=36000
//! ```
//!
//! `q` is the limit's quota and `w` its window in seconds (for a token bucket, the time it
//! takes to refill completely; an in-flight limit has `qu="concurrent-requests"` and no
//! window, and no `t`: a slot comes back when a request ends), `r` the units left, and `t`
//! the seconds until more than `r`
//! is available (rounded up): exactly when the next token or window comes for buckets,
//! GCRA and fixed windows; for the sliding algorithms their reset time when admitted (an
//! upper bound) and their exact wait when denied. So on a refusal `t` never points past
//! `Retry-After`, as the draft requires. For the sliding algorithms `t` can reach twice `w`:
//! units taken late in one window still weigh on the next (the counter's previous window,
//! the log's entries), so the limiter is back to unused up to two windows after a call.
//! A regional limit (`Limit::regional`, `docs/regions.md`) reports its region's floor: `q`
//! and `w` are the floor's, `r` the floor's units left plus the live lease's, and an extra
//! parameter says why the call was decided so, `regional="floor"`, `"lease"`,
//! `"lease_exhausted"` or `"home_unreachable"` (no live lease: `r` is the floor's alone,
//! the quota the region keeps without home).
//! `RateLimit-Policy` is the policy as configured, whatever decided; during a local
//! fallback `RateLimit` shows this replica's share of it. Seconds are whole (the draft has no fractions), and
//! `Retry-After` is at least 1 so a client never retries in a busy loop.

use std::fmt::Write as _;
use std::time::Duration;

use http::HeaderValue;
use http::header::{HeaderMap, HeaderName};

use crate::decision::Decision;
use crate::policy::Policy;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy: seconds until the binding limit is back to unused).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Whole seconds, rounded up.
pub fn ceil_seconds(duration: Duration) -> u64 {
    let whole = duration.as_secs();
    if duration.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// The `Retry-After` value of a denial: seconds rounded up, at least 1. `None` when the
/// request can never succeed (no amount of waiting helps) or was admitted.
pub fn retry_after_seconds(decision: &Decision) -> Option<u64> {
    if decision.allowed {
        return None;
    }
    decision.retry_after.map(|wait| ceil_seconds(wait).max(1))
}

/// The `RateLimit-Policy` value: the quotas as configured, so it stays the same whatever
/// decided (the draft asks for a stable policy; during a local fallback the `RateLimit`
/// field shows what is left of this replica's share). From the limits the decision
/// consulted (for a store-backed policy, the tenant's), or when it consulted none (a
/// blanket fallback) from the policy's definition.
pub fn policy_field(decision: &Decision, policy: Option<&Policy>) -> Option<String> {
    let mut field = String::new();
    if decision.limits.is_empty() {
        for limit in policy?.limits() {
            let algorithm = limit.algorithm();
            let in_flight = algorithm.is_in_flight();
            let (quota, window) = (algorithm.quota(), algorithm.window());
            push_policy(&mut field, limit.name(), quota, in_flight, window);
        }
    } else {
        for limit in &decision.limits {
            push_policy(
                &mut field,
                &limit.name,
                limit.configured_quota,
                limit.in_flight,
                limit.window,
            );
        }
    }
    (!field.is_empty()).then_some(field)
}

/// The `RateLimit` value: each consulted limit's remaining units and effective window.
pub fn service_field(decision: &Decision) -> Option<String> {
    let mut field = String::new();
    for limit in &decision.limits {
        push_item(&mut field, &limit.name);
        let _ = write!(field, ";r={}", limit.remaining);
        // A slot comes back when a request ends: no effective window to tell.
        if !limit.in_flight {
            let _ = write!(field, ";t={}", ceil_seconds(limit.more_in));
        }
        if let Some(regional) = limit.regional {
            let _ = write!(field, ";regional=\"{}\"", regional.why_str());
        }
    }
    (!field.is_empty()).then_some(field)
}

/// Appends one quota policy item: its quota and window, or for an in-flight limit its quota
/// in the draft's `concurrent-requests` unit (no window).
fn push_policy(field: &mut String, name: &str, quota: u64, in_flight: bool, window: Duration) {
    push_item(field, name);
    if in_flight {
        let _ = write!(field, ";q={quota};qu=\"concurrent-requests\"");
    } else {
        let _ = write!(field, ";q={quota};w={}", ceil_seconds(window).max(1));
    }
}

/// Appends one list item's name: an sf-string (policy and limit names are restricted to
/// characters that need no escaping).
fn push_item(field: &mut String, name: &str) {
    if !field.is_empty() {
        field.push_str(", ");
    }
    field.push('"');
    field.push_str(name);
    field.push('"');
}

/// Which header fields to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderOptions {
    /// Send the IETF fields on admitted responses too (default true), so clients can slow
    /// down before they are refused.
    pub on_admitted: bool,
    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset` (default false), for clients
    /// written against them.
    pub legacy: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        Self {
            on_admitted: true,
            legacy: false,
        }
    }
}

/// Adds only `Retry-After` (a refusal that consulted no limit: the store was out of reach
/// and the policy fails closed).
pub fn insert_retry_after(headers: &mut HeaderMap, decision: &Decision) {
    if let Some(seconds) = retry_after_seconds(decision)
        && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
    {
        headers.insert(http::header::RETRY_AFTER, value);
    }
}

/// Adds a decision's header fields to `headers`.
///
/// Fields already there are another policy's, checked after this one (a rate-limit layer
/// inside this one admitted the request too): `RateLimit-Policy` and `RateLimit` are lists,
/// so this decision's items go first and theirs stay after; the legacy triple is the one
/// with fewer units remaining.
pub fn insert(
    headers: &mut HeaderMap,
    decision: &Decision,
    policy: Option<&Policy>,
    options: HeaderOptions,
) {
    let joined = |headers: &HeaderMap, name: &HeaderName, value: String| match headers
        .get(name)
        .and_then(|present| present.to_str().ok())
    {
        Some(present) if !present.is_empty() => format!("{value}, {present}"),
        _ => value,
    };
    let policy_value =
        policy_field(decision, policy).map(|v| joined(headers, &RATELIMIT_POLICY, v));
    let service_value = service_field(decision).map(|v| joined(headers, &RATELIMIT, v));
    let fewer_remaining_present = |limit: &crate::decision::LimitStatus| {
        headers
            .get(X_RATELIMIT_REMAINING)
            .and_then(|present| present.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|present| present <= limit.remaining)
    };
    let legacy = decision
        .binding_limit()
        .filter(|limit| options.legacy && !fewer_remaining_present(limit));
    let mut set = |name: HeaderName, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    if let Some(value) = policy_value {
        set(RATELIMIT_POLICY, value);
    }
    if let Some(value) = service_value {
        set(RATELIMIT, value);
    }
    if let Some(seconds) = retry_after_seconds(decision) {
        set(http::header::RETRY_AFTER, seconds.to_string());
    }
    if let Some(limit) = legacy {
        set(X_RATELIMIT_LIMIT, limit.quota.to_string());
        set(X_RATELIMIT_REMAINING, limit.remaining.to_string());
        set(
            X_RATELIMIT_RESET,
            ceil_seconds(limit.reset_after).to_string(),
        );
    }
}

/// The problem type of a quota refusal (draft section 5.1).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem type of a refusal because the limiter's store is out of reach and the policy
/// fails closed (draft section 5.2).
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// The `application/problem+json` body of a refusal: the problem type, a title, the status,
/// a human-readable detail and the draft's `violated-policies` member.
pub fn problem_body(decision: &Decision, status: http::StatusCode) -> String {
    let violated: Vec<&str> = decision.violated().collect();
    let (kind, title) = if status == http::StatusCode::SERVICE_UNAVAILABLE {
        (TEMPORARY_REDUCED_CAPACITY, "Service Unavailable")
    } else {
        (QUOTA_EXCEEDED, "Too Many Requests")
    };
    let detail = match (violated.first(), retry_after_seconds(decision)) {
        (_, _) if status == http::StatusCode::SERVICE_UNAVAILABLE => {
            "The rate limiter cannot reach its store; try again later.".to_string()
        }
        (Some(limit), Some(seconds)) => format!(
            "Limit '{limit}' of policy '{}' is exhausted; retry in {seconds} s.",
            decision.policy
        ),
        (Some(limit), None) => format!(
            "The request costs more than limit '{limit}' of policy '{}' ever allows.",
            decision.policy
        ),
        (None, _) => format!("Policy '{}' refused the request.", decision.policy),
    };
    let mut body = format!(
        "{{\"type\":\"{kind}\",\"title\":\"{title}\",\"status\":{},\"detail\":\"{detail}\"",
        status.as_u16()
    );
    if status == http::StatusCode::SERVICE_UNAVAILABLE {
        // No quota was exceeded: the store could not be asked.
        body.push('}');
        return body;
    }
    body.push_str(",\"violated-policies\":[");
    for (index, name) in violated.iter().enumerate() {
        if index > 0 {
            body.push(',');
        }
        let _ = write!(body, "\"{name}\"");
    }
    body.push_str("]}");
    body
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::decision::{LimitStatus, Outcome, Source};
    use crate::store::StoreBackend;

    fn status(name: &str, remaining: u64, more_in_ms: u64, allowed: bool) -> LimitStatus {
        LimitStatus {
            name: Arc::from(name),
            in_flight: false,
            quota: 100,
            configured_quota: 100,
            window: Duration::from_secs(60),
            allowed,
            remaining,
            retry_after: Some(Duration::from_millis(if allowed { 0 } else { 2_300 })),
            reset_after: Duration::from_millis(30_500),
            more_in: Duration::from_millis(more_in_ms),
            regional: None,
        }
    }

    fn decision(allowed: bool) -> Decision {
        Decision {
            allowed,
            wait: Duration::ZERO,
            source: Source::Store(StoreBackend::Module),
            outcome: if allowed {
                Outcome::Allowed
            } else {
                Outcome::Denied
            },
            policy: "api".into(),
            retry_after: Some(Duration::from_millis(if allowed { 0 } else { 2_300 })),
            limits: vec![
                status("per-key", 0, 2_300, allowed),
                status("daily", 40, 100, true),
            ],
            binding: 0,
            in_flight: None,
        }
    }

    #[test]
    fn fields_follow_the_draft_syntax() {
        let decision = decision(false);
        assert_eq!(
            policy_field(&decision, None).unwrap(),
            r#""per-key";q=100;w=60, "daily";q=100;w=60"#
        );
        assert_eq!(
            service_field(&decision).unwrap(),
            r#""per-key";r=0;t=3, "daily";r=40;t=1"#
        );
        assert_eq!(retry_after_seconds(&decision), Some(3));
    }

    #[test]
    fn in_flight_limits_count_concurrent_requests() {
        let mut decision = decision(true);
        decision.limits[1].in_flight = true;
        decision.limits[1].quota = 5;
        decision.limits[1].configured_quota = 5;
        decision.limits[1].remaining = 3;
        assert_eq!(
            policy_field(&decision, None).unwrap(),
            r#""per-key";q=100;w=60, "daily";q=5;qu="concurrent-requests""#
        );
        assert_eq!(
            service_field(&decision).unwrap(),
            r#""per-key";r=0;t=3, "daily";r=3"#
        );
    }

    #[test]
    fn retry_after_is_at_least_a_second_and_absent_when_hopeless() {
        let mut short = decision(false);
        short.retry_after = Some(Duration::from_millis(1));
        assert_eq!(retry_after_seconds(&short), Some(1));
        short.retry_after = None;
        assert_eq!(retry_after_seconds(&short), None);
        assert_eq!(retry_after_seconds(&decision(true)), None);
    }

    #[test]
    fn legacy_fields_describe_the_binding_limit() {
        let mut headers = HeaderMap::new();
        let options = HeaderOptions {
            legacy: true,
            ..HeaderOptions::default()
        };
        insert(&mut headers, &decision(false), None, options);
        assert_eq!(headers[X_RATELIMIT_LIMIT], "100");
        assert_eq!(headers[X_RATELIMIT_REMAINING], "0");
        assert_eq!(headers[X_RATELIMIT_RESET], "31");
        assert_eq!(headers[http::header::RETRY_AFTER], "3");
    }

    #[test]
    fn a_second_decision_joins_the_lists_and_keeps_the_tighter_legacy_triple() {
        let options = HeaderOptions {
            legacy: true,
            ..HeaderOptions::default()
        };
        let mut inner = decision(true);
        inner.limits.truncate(1);
        inner.limits[0].name = Arc::from("searches");
        inner.limits[0].remaining = 2;
        let mut outer = decision(true);
        outer.limits.truncate(1);
        outer.limits[0].remaining = 5;
        let mut headers = HeaderMap::new();
        insert(&mut headers, &inner, None, options);
        insert(&mut headers, &outer, None, options);
        assert_eq!(
            headers[RATELIMIT_POLICY],
            r#""per-key";q=100;w=60, "searches";q=100;w=60"#
        );
        assert_eq!(
            headers[RATELIMIT],
            r#""per-key";r=5;t=3, "searches";r=2;t=3"#
        );
        assert_eq!(
            headers[X_RATELIMIT_REMAINING], "2",
            "the tighter of the two"
        );
        assert!(!headers.contains_key(http::header::RETRY_AFTER));
    }

    #[test]
    fn the_problem_names_the_violated_limits() {
        let body = problem_body(&decision(false), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            body,
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
             \"title\":\"Too Many Requests\",\"status\":429,\
             \"detail\":\"Limit 'per-key' of policy 'api' is exhausted; retry in 3 s.\",\
             \"violated-policies\":[\"per-key\"]}"
        );
    }

    #[test]
    fn a_failed_closed_refusal_names_no_violated_policy() {
        let mut closed = decision(false);
        closed.limits.clear();
        let body = problem_body(&closed, http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("temporary-reduced-capacity"), "{body}");
        assert!(!body.contains("violated-policies"), "{body}");
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_seconds(Duration::ZERO), 0);
        assert_eq!(ceil_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ceil_seconds(Duration::from_secs(2)), 2);
        assert_eq!(ceil_seconds(Duration::from_millis(2001)), 3);
    }
}
