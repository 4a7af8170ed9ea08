//! The console API's writes, `rlctl`'s write verbs as `POST /admin/v1/<verb>` with a JSON
//! body: each becomes a [`Change`] and goes through the plans crate's one code path
//! ([`change::apply`]): the same checks and refusals, one atomic write against the version
//! read (or the one `if_version` names: 409 if the store moved), audited with `who` =
//! `console:<user>`. `"dry_run": true` previews: the edits and the tenants they would move,
//! nothing written.

use std::sync::Arc;

use axum::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::Response;
use redis_ratelimit_plans::change::{self, Change, ChangeError, WriteOptions};
use redis_ratelimit_plans::preview::{self, Moved};
use redis_ratelimit_plans::snapshot::Snapshot;
use redis_ratelimit_plans::spec::parse_duration;
use serde::Deserialize;
use serde_json::{Value, json};

use super::guard::Caller;
use super::json::{ok, problem, store_failed};
use super::read::snapshot;
use super::state::Console;

/// What every write takes besides its verb's fields.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct How {
    /// Preview only.
    #[serde(default)]
    dry_run: bool,
    /// Write only if the store is still at this version.
    #[serde(default)]
    if_version: Option<u64>,
}

/// `plan/set`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSet {
    name: String,
    limits: Vec<String>,
    #[serde(default)]
    replace: bool,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `plan/delete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDelete {
    name: String,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `tenant/set`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSet {
    tenant: String,
    plan: String,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `tenant/delete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantDelete {
    tenant: String,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `override/set`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSet {
    pattern: String,
    limits: Vec<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    add: bool,
    /// `90s`, `2h`, `7d`: temporary.
    #[serde(default)]
    ttl: Option<String>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `override/delete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideDelete {
    pattern: String,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `override/prune` and `import` take only [`How`]'s fields (and `import` its TOML).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prune {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// `import`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Import {
    /// The store as `export` writes it.
    toml: String,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    if_version: Option<u64>,
}

/// A body that cannot be read, said plainly.
fn unreadable(rejection: &JsonRejection) -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        &format!("the body: {}", rejection.body_text()),
    )
}

fn moved(moved: &Moved) -> Value {
    json!({
        "tenants": moved.tenants.iter().map(|tenant| json!({
            "tenant": tenant.tenant,
            "before": tenant.before,
            "after": tenant.after,
        })).collect::<Vec<_>>(),
        "more": moved.more,
        "wildcards": moved.wildcards,
    })
}

/// Runs `change` for `caller` as `how` says, answering what was (or would be) changed.
async fn run(console: &Console, caller: &Caller, change: Change, how: How) -> Response {
    if let Err(error) = change.check_input() {
        return problem(
            StatusCode::BAD_REQUEST,
            &format!("{error}; nothing was written"),
        );
    }
    let (mut connection, snapshot, now_ms) = match snapshot(console).await {
        Ok(read) => read,
        Err(error) => return store_failed(&error),
    };
    let who = format!("console:{}", caller.user.name);
    let options = WriteOptions {
        who: &who,
        dry_run: how.dry_run,
        if_version: how.if_version,
    };
    match change::apply(&mut connection, &snapshot, now_ms, &change, options).await {
        Ok(applied) => {
            if let Some(version) = applied.version {
                tracing::info!(
                    who = who.as_str(),
                    op = applied.planned.op.as_str(),
                    "console: policy store version {} -> {version}",
                    applied.from_version
                );
            }
            ok(&json!({
                "op": applied.planned.op,
                "who": who,
                "dry_run": how.dry_run,
                "from_version": applied.from_version,
                "version": applied.version,
                "written": applied.version.is_some(),
                "edits": edits(&snapshot, &applied.planned.edits),
                "note": applied.planned.note,
                "moved": moved(&applied.moved),
                "warning": applied.assumed,
            }))
        }
        Err(ChangeError::Input(error)) => problem(
            StatusCode::BAD_REQUEST,
            &format!("{error}; nothing was written"),
        ),
        Err(ChangeError::Store(error)) => {
            console.policy_store.failed(&error).await;
            store_failed(&error)
        }
    }
}

fn edits(snapshot: &Snapshot, edits: &[redis_ratelimit_plans::edit::Edit]) -> Vec<Value> {
    edits
        .iter()
        .map(|edit| {
            json!({
                "kind": edit.table.kind(),
                "name": edit.field,
                "old": preview::old_value(snapshot, edit),
                "new": edit.value,
            })
        })
        .collect()
}

/// `POST /admin/v1/plan/set`: `{"name", "limits": [...], "replace"}`.
pub async fn plan_set(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<PlanSet>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::PlanSet {
        name: body.name,
        limits: body.limits,
        replace: body.replace,
    };
    run(&console, &caller, change, how).await
}

/// `POST /admin/v1/plan/delete`: `{"name"}`.
pub async fn plan_delete(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<PlanDelete>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    run(
        &console,
        &caller,
        Change::PlanDelete { name: body.name },
        how,
    )
    .await
}

/// `POST /admin/v1/tenant/set`: `{"tenant", "plan"}`.
pub async fn tenant_set(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<TenantSet>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::TenantSet {
        tenant: body.tenant,
        plan: body.plan,
    };
    run(&console, &caller, change, how).await
}

/// `POST /admin/v1/tenant/delete`: `{"tenant"}`.
pub async fn tenant_delete(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<TenantDelete>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::TenantDelete {
        tenant: body.tenant,
    };
    run(&console, &caller, change, how).await
}

/// `POST /admin/v1/override/set`: `{"pattern", "limits": [...], "all", "add", "ttl"}`.
pub async fn override_set(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<OverrideSet>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let ttl = match body.ttl.as_deref().filter(|ttl| !ttl.is_empty()) {
        None => None,
        Some(text) => match parse_duration(text) {
            Ok(ttl) => Some(ttl),
            Err(error) => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    &format!("ttl: {error}; nothing was written"),
                );
            }
        },
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::OverrideSet {
        pattern: body.pattern,
        limits: body.limits,
        all: body.all,
        add: body.add,
        ttl,
    };
    run(&console, &caller, change, how).await
}

/// `POST /admin/v1/override/delete`: `{"pattern", "limit"}`.
pub async fn override_delete(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<OverrideDelete>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::OverrideDelete {
        pattern: body.pattern,
        limit: body.limit.filter(|limit| !limit.is_empty()),
    };
    run(&console, &caller, change, how).await
}

/// `POST /admin/v1/override/prune`: `{}`.
pub async fn override_prune(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Prune>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    run(&console, &caller, Change::OverridePrune, how).await
}

/// `POST /admin/v1/import`: `{"toml"}`, the store made to hold exactly it.
pub async fn import(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Import>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = How {
        dry_run: body.dry_run,
        if_version: body.if_version,
    };
    let change = Change::Import {
        label: "(console)".into(),
        text: body.toml,
    };
    run(&console, &caller, change, how).await
}
