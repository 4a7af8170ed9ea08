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
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::guard::Caller;
use super::json::{ok, problem, store_failed};
use super::read::snapshot;
use super::state::Console;

/// What every write takes besides its verb's fields.
#[derive(Clone, Copy, Debug)]
pub struct How {
    /// Preview only.
    dry_run: bool,
    /// Write only if the store is still at this version.
    if_version: Option<u64>,
}

/// A write's JSON body: its verb's fields, and [`How`]'s.
pub trait WriteBody: DeserializeOwned + Send + 'static {
    /// The `dry_run` and `if_version` every body carries.
    fn how(&self) -> How;
    /// The change the body asks for, or what is wrong with a field read here and not by
    /// the plans crate (`ttl`): a 400.
    fn change(self) -> Result<Change, String>;
}

/// A body type: its verb's fields, then [`How`]'s (`dry_run`, `if_version`; last, so an
/// unknown field's refusal lists them in the order it always has), unknown fields refused,
/// and `$change` turning `$body` into its [`Change`].
macro_rules! write_body {
    (
        $(#[$doc:meta])*
        $name:ident { $($(#[$field_meta:meta])* $field:ident: $field_type:ty,)* }
        |$body:ident| $change:expr
    ) => {
        $(#[$doc])*
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$field_meta])* $field: $field_type,)*
            #[serde(default)]
            dry_run: bool,
            #[serde(default)]
            if_version: Option<u64>,
        }

        impl WriteBody for $name {
            fn how(&self) -> How {
                How {
                    dry_run: self.dry_run,
                    if_version: self.if_version,
                }
            }

            fn change(self) -> Result<Change, String> {
                let $body = self;
                $change
            }
        }
    };
}

write_body! {
    /// `POST /admin/v1/plan/set`: `{"name", "limits": [...], "replace"}`.
    PlanSet {
        name: String,
        limits: Vec<String>,
        #[serde(default)]
        replace: bool,
    }
    |body| Ok(Change::PlanSet {
        name: body.name,
        limits: body.limits,
        replace: body.replace,
    })
}

write_body! {
    /// `POST /admin/v1/plan/delete`: `{"name"}`.
    PlanDelete { name: String, }
    |body| Ok(Change::PlanDelete { name: body.name })
}

write_body! {
    /// `POST /admin/v1/tenant/set`: `{"tenant", "plan"}`.
    TenantSet { tenant: String, plan: String, }
    |body| Ok(Change::TenantSet {
        tenant: body.tenant,
        plan: body.plan,
    })
}

write_body! {
    /// `POST /admin/v1/tenant/delete`: `{"tenant"}`.
    TenantDelete { tenant: String, }
    |body| Ok(Change::TenantDelete {
        tenant: body.tenant,
    })
}

write_body! {
    /// `POST /admin/v1/override/set`: `{"pattern", "limits": [...], "all", "add", "ttl"}`.
    OverrideSet {
        pattern: String,
        limits: Vec<String>,
        #[serde(default)]
        all: bool,
        #[serde(default)]
        add: bool,
        /// `90s`, `2h`, `7d`: temporary.
        #[serde(default)]
        ttl: Option<String>,
    }
    |body| {
        let ttl = match body.ttl.as_deref().filter(|ttl| !ttl.is_empty()) {
            None => None,
            Some(text) => Some(parse_duration(text).map_err(|error| format!("ttl: {error}"))?),
        };
        Ok(Change::OverrideSet {
            pattern: body.pattern,
            limits: body.limits,
            all: body.all,
            add: body.add,
            ttl,
        })
    }
}

write_body! {
    /// `POST /admin/v1/override/delete`: `{"pattern", "limit"}`.
    OverrideDelete {
        pattern: String,
        #[serde(default)]
        limit: Option<String>,
    }
    |body| Ok(Change::OverrideDelete {
        pattern: body.pattern,
        limit: body.limit.filter(|limit| !limit.is_empty()),
    })
}

write_body! {
    /// `POST /admin/v1/override/prune`: `{}`.
    Prune {}
    |_body| Ok(Change::OverridePrune)
}

write_body! {
    /// `POST /admin/v1/import`: `{"toml"}`, the store made to hold exactly it.
    Import {
        /// The store as `export` writes it.
        toml: String,
    }
    |body| Ok(Change::Import {
        label: "(console)".into(),
        text: body.toml,
    })
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

/// `POST /admin/v1/<verb>` with `Body` (routed once per verb in `console::router`): a body
/// that cannot be read is refused, the rest runs as [`run`] says.
pub async fn apply_write<Body: WriteBody>(
    State(console): State<Arc<Console>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Body>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable(&rejection),
    };
    let how = body.how();
    match body.change() {
        Ok(change) => run(&console, &caller, change, how).await,
        Err(wrong) => problem(
            StatusCode::BAD_REQUEST,
            &format!("{wrong}; nothing was written"),
        ),
    }
}
