//! The console API's answers: JSON bodies, and `application/problem+json` (RFC 9457)
//! refusals whose `detail` says what is wrong.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use redis_ratelimit_plans::history::{rule_text, utc};
use redis_ratelimit_plans::plan_store::{AuditEntry, PlanStoreError};
use redis_ratelimit_plans::snapshot::{Effective, Override, Rule, Snapshot};
use redis_ratelimit_plans::spec::Pattern;
use serde_json::{Value, json};

/// A JSON answer.
pub fn ok(body: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A refusal.
pub fn problem(status: StatusCode, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// A store failure: the other side's fault (502), a write that came second (409), bad data
/// in the store (500).
pub fn store_failed(error: &PlanStoreError) -> Response {
    let status = match error {
        PlanStoreError::Stale { .. } => StatusCode::CONFLICT,
        PlanStoreError::Redis(_) | PlanStoreError::NoLuaEngine => StatusCode::BAD_GATEWAY,
        PlanStoreError::Corrupt(_) | PlanStoreError::BadVersion(_) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    problem(status, &format!("policy store: {error}"))
}

/// An instant (ms) and its UTC text.
fn instant(at_ms: Option<u64>) -> Value {
    match at_ms {
        Some(at) => json!({"ms": at, "utc": utc(at)}),
        None => Value::Null,
    }
}

/// Where an effective limit comes from, as `rlctl get` says it.
pub fn rule(rule: &Rule) -> Value {
    match rule {
        Rule::Default => json!({"kind": "default", "text": rule.to_string()}),
        Rule::Plan(plan) => json!({"kind": "plan", "plan": plan, "text": rule.to_string()}),
        Rule::Override {
            pattern,
            expires_at_ms,
        } => json!({
            "kind": match pattern {
                Pattern::Exact(_) => "override",
                Pattern::Prefix(_) => "wildcard override",
            },
            "pattern": pattern.to_string(),
            "expires": instant(*expires_at_ms),
            "text": rule_text(rule),
        }),
    }
}

/// One effective limit.
pub fn effective(limit: &Effective) -> Value {
    json!({
        "name": limit.spec.name(),
        "limit": limit.spec.to_string(),
        "rule": rule(&limit.rule),
    })
}

/// One override.
pub fn override_entry(entry: &Override, now_ms: u64) -> Value {
    json!({
        "field": entry.field(),
        "pattern": entry.pattern.to_string(),
        "limit": entry.limit,
        "all": entry.limit.is_none(),
        "limits": entry.limits.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "expires": instant(entry.expires_at_ms),
        "live": entry.live(now_ms),
    })
}

/// The whole store, as `rlctl list` shows it.
pub fn list(snapshot: &Snapshot, now_ms: u64) -> Value {
    json!({
        "version": snapshot.version,
        "now": instant(Some(now_ms)),
        "plans": snapshot.plans.iter().map(|(name, limits)| json!({
            "name": name,
            "limits": limits.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "tenants": snapshot.tenants.values().filter(|plan| *plan == name).count(),
        })).collect::<Vec<_>>(),
        "tenants": snapshot.tenants.iter().map(|(tenant, plan)| json!({
            "tenant": tenant, "plan": plan,
        })).collect::<Vec<_>>(),
        "overrides": snapshot.overrides.values()
            .map(|entry| override_entry(entry, now_ms)).collect::<Vec<_>>(),
        "unreadable": snapshot.unreadable.iter().map(|bad| json!({
            "table": bad.table.kind(), "field": bad.field, "value": bad.value,
            "reason": bad.reason.0,
        })).collect::<Vec<_>>(),
    })
}

/// One audit entry.
pub fn audit(entry: &AuditEntry) -> Value {
    json!({
        "id": entry.id,
        "version": entry.get("version"),
        "at": instant(entry.get("at_ms").parse().ok()),
        "who": entry.get("who"),
        "op": entry.get("op"),
        "kind": entry.get("kind"),
        "name": entry.get("name"),
        "old": entry.get("old"),
        "new": entry.get("new"),
    })
}
