//! The console API's reads, as `rlctl`'s: `GET /admin/v1/session` (who is signed in),
//! `list`, `tenants?q=` (search), `tenant?tenant=` (`rlctl get`), `history` (`rlctl
//! history`) and `export`.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use redis_ratelimit_plans::plan_store::{self, PlanStoreError};
use redis_ratelimit_plans::snapshot::Snapshot;
use redis_ratelimit_plans::spec::check_tenant;
use redis_ratelimit_plans::{PlanConnection, file, history};
use serde::Deserialize;
use serde_json::json;

use super::guard::Caller;
use super::json::{self, ok, problem, store_failed};
use super::state::Console;

/// The most tenants a search answers.
pub const MAX_FOUND: usize = 100;

/// The most audit entries one history answers.
pub const MAX_HISTORY: u64 = 1_000;

/// The store read whole, with the server's clock, and the connection it was read on.
pub async fn snapshot(
    console: &Console,
) -> Result<(PlanConnection, Snapshot, u64), PlanStoreError> {
    let mut connection = console.policy_store.connection().await?;
    match plan_store::read(&mut connection).await {
        Ok((snapshot, now_ms)) => Ok((connection, snapshot, now_ms)),
        Err(error) => {
            console.policy_store.failed(&error).await;
            Err(error)
        }
    }
}

/// `GET /admin/v1/session`: the caller, their role and the CSRF token their writes carry.
pub async fn session(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let csrf = caller
        .ambient()
        .map(|credential| console.sessions.csrf(&credential));
    ok(&json!({
        "user": caller.user.name,
        "role": caller.user.role.as_str(),
        "csrf": csrf,
    }))
}

/// `GET /admin/v1/list`: plans, tenants, overrides.
pub async fn list(State(console): State<Arc<Console>>) -> Response {
    match snapshot(&console).await {
        Ok((_, snapshot, now_ms)) => ok(&json::list(&snapshot, now_ms)),
        Err(error) => store_failed(&error),
    }
}

/// A search.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// Part of a tenant's id.
    #[serde(default)]
    q: String,
}

/// `GET /admin/v1/tenants?q=TEXT`: the tenants the store names (on a plan, or under an
/// exact override) whose id contains TEXT, at most [`MAX_FOUND`].
pub async fn tenants(
    State(console): State<Arc<Console>>,
    Query(search): Query<Search>,
) -> Response {
    let (_, snapshot, _) = match snapshot(&console).await {
        Ok(read) => read,
        Err(error) => return store_failed(&error),
    };
    // In order and each once already: the first MAX_FOUND are the first by id.
    let mut found: Vec<&str> = snapshot
        .named_tenants()
        .into_iter()
        .filter(|tenant| tenant.contains(search.q.as_str()))
        .collect();
    let more = found.len().saturating_sub(MAX_FOUND);
    found.truncate(MAX_FOUND);
    let tenants: Vec<_> = found
        .iter()
        .map(|tenant| json!({"tenant": tenant, "plan": snapshot.tenants.get(*tenant)}))
        .collect();
    ok(&json!({"version": snapshot.version, "tenants": tenants, "more": more}))
}

/// One tenant.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantQuery {
    /// The tenant's id.
    tenant: String,
}

/// `GET /admin/v1/tenant?tenant=ID`: `rlctl get`: its plan, the overrides that match it
/// (live or expired), its effective limits and the rule each comes from; and the version
/// this replica follows.
pub async fn tenant(
    State(console): State<Arc<Console>>,
    Query(query): Query<TenantQuery>,
) -> Response {
    if let Err(error) = check_tenant(&query.tenant) {
        return problem(StatusCode::BAD_REQUEST, &error.0);
    }
    let (_, snapshot, now_ms) = match snapshot(&console).await {
        Ok(read) => read,
        Err(error) => return store_failed(&error),
    };
    let tenant = query.tenant.as_str();
    let effective: Vec<_> = snapshot
        .resolve(tenant, &[], now_ms)
        .iter()
        .map(json::effective)
        .collect();
    let overrides: Vec<_> = snapshot
        .overrides
        .values()
        .filter(|entry| entry.pattern.matches(tenant))
        .map(|entry| json::override_entry(entry, now_ms))
        .collect();
    let replica = console
        .engine
        .plans()
        .source()
        .map(|source| source.version());
    ok(&json!({
        "tenant": tenant,
        "plan": snapshot.tenants.get(tenant),
        "plan_exists": snapshot.tenants.get(tenant).is_some_and(|plan| snapshot.plans.contains_key(plan)),
        "version": snapshot.version,
        "replica_version": replica,
        "effective": effective,
        "overrides": overrides,
        "plans": snapshot.plans.keys().collect::<Vec<_>>(),
    }))
}

/// A history query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Only the entries that concern this tenant.
    tenant: Option<String>,
    /// How many (default 20, at most [`MAX_HISTORY`]).
    count: Option<u64>,
}

/// `GET /admin/v1/history?tenant=&count=`: `rlctl history`, newest first.
pub async fn history(
    State(console): State<Arc<Console>>,
    Query(query): Query<HistoryQuery>,
) -> Response {
    let count = query.count.unwrap_or(20).clamp(1, MAX_HISTORY);
    let tenant = query.tenant.as_deref().filter(|tenant| !tenant.is_empty());
    if let Some(Err(error)) = tenant.map(check_tenant) {
        return problem(StatusCode::BAD_REQUEST, &error.0);
    }
    let (mut connection, snapshot, _) = match snapshot(&console).await {
        Ok(read) => read,
        Err(error) => return store_failed(&error),
    };
    let scanned = if tenant.is_some() {
        history::SCANNED_FOR_TENANT
    } else {
        count
    };
    let entries = match plan_store::history(&mut connection, scanned).await {
        Ok(entries) => entries,
        Err(error) => {
            console.policy_store.failed(&error).await;
            return store_failed(&error);
        }
    };
    let shown: Vec<_> = history::shown(&snapshot, &entries, tenant, count)
        .map(json::audit)
        .collect();
    ok(&json!({"version": snapshot.version, "entries": shown}))
}

/// `GET /admin/v1/export`: `rlctl export`, the store as TOML.
pub async fn export(State(console): State<Arc<Console>>) -> Response {
    let (_, snapshot, _) = match snapshot(&console).await {
        Ok(read) => read,
        Err(error) => return store_failed(&error),
    };
    match file::export(&snapshot) {
        Ok(toml) => ok(&json!({"version": snapshot.version, "toml": toml})),
        Err(error) => problem(StatusCode::INTERNAL_SERVER_ERROR, &error.0),
    }
}
