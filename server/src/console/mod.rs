//! The operator console (`--admin-listen`, off by default): a page to see and change plans,
//! tenants and overrides, a tenant's live usage, who is throttled now and this replica's
//! health, and the JSON API under `/admin/v1/` it is built on (scripts use it too). The
//! page is HTML, CSS and plain JavaScript embedded in the binary (`assets/`), fetched from
//! this listener only.
//!
//! Security, as a page of a browser that visits other sites must have it:
//! - who: the users file ([`users`]), by token (a session cookie after signing in, or
//!   `Authorization: Bearer`) or a mutual-TLS client certificate; a viewer or an editor
//!   ([`guard`]);
//! - writes: JSON only, the CSRF token of an ambient credential and the listener's own
//!   origin, the editor role ([`guard::writes`]);
//! - output: the page writes every value from the store (tenant ids, names, keys: user
//!   input) with `textContent`, never as HTML, and every answer says `Content-Security-
//!   Policy: script-src 'self'` (no inline script, no other origin), `nosniff`, no framing.

mod guard;
mod health;
mod json;
mod policy_store;
mod read;
mod session;
mod state;
mod top;
mod usage;
pub mod users;
mod write;

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Json, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use redis_ratelimit_plans::spec::check_tenant;
use serde::Deserialize;
use serde_json::json;

use self::guard::Caller;
use self::json::{ok, problem};
use self::session::COOKIE;
pub use self::state::{Console, ConsoleError, Parts};
use self::top::TopQuery;
use self::write::{
    Import, OverrideDelete, OverrideSet, PlanDelete, PlanSet, Prune, TenantDelete, TenantSet,
    apply_write,
};

/// The largest request body (an imported TOML file included).
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Every answer's `Content-Security-Policy`: this origin's script, style and API only; no
/// inline script or style, no plugin, no frame, no form to elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The routes.
pub fn router(console: Arc<Console>) -> Router {
    let authenticate = || middleware::from_fn_with_state(Arc::clone(&console), guard::authenticate);
    let reads = Router::new()
        .route("/admin/v1/session", get(read::session))
        .route("/admin/v1/list", get(read::list))
        .route("/admin/v1/tenants", get(read::tenants))
        .route("/admin/v1/tenant", get(read::tenant))
        .route("/admin/v1/usage", get(usage))
        .route("/admin/v1/history", get(read::history))
        .route("/admin/v1/export", get(read::export))
        .route("/admin/v1/top", get(top))
        .route("/admin/v1/health", get(health::health));
    let writes = Router::new()
        .route("/admin/v1/plan/set", post(apply_write::<PlanSet>))
        .route("/admin/v1/plan/delete", post(apply_write::<PlanDelete>))
        .route("/admin/v1/tenant/set", post(apply_write::<TenantSet>))
        .route("/admin/v1/tenant/delete", post(apply_write::<TenantDelete>))
        .route("/admin/v1/override/set", post(apply_write::<OverrideSet>))
        .route(
            "/admin/v1/override/delete",
            post(apply_write::<OverrideDelete>),
        )
        .route("/admin/v1/override/prune", post(apply_write::<Prune>))
        .route("/admin/v1/import", post(apply_write::<Import>))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&console),
            guard::writes,
        ));
    let signed_in = Router::new()
        .merge(reads)
        .merge(writes)
        .route("/admin/logout", post(logout))
        .route_layer(authenticate());
    Router::new()
        .merge(signed_in)
        .route("/", get(|| async { Redirect::to("/admin/") }))
        .route("/admin", get(|| async { Redirect::to("/admin/") }))
        .route(
            "/admin/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/admin/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
        .route(
            "/admin/console.css",
            get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }),
        )
        .route("/admin/login", post(login))
        .fallback(|| async { problem(StatusCode::NOT_FOUND, "no such page of the console") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&console),
            time_bound,
        ))
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

/// The headers every answer carries.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// Bounds a request's time, its body and the store's reads included.
async fn time_bound(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(console.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => problem(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request took longer than {} ms (--request-timeout-ms)",
                console.request_timeout.as_millis()
            ),
        ),
    }
}

/// A sign-in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    token: String,
}

/// `POST /admin/login` `{"token"}`: opens a session for the token's user (JSON from this
/// listener's own page only), answers who and the CSRF token.
async fn login(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Result<Json<Login>, JsonRejection>,
) -> Response {
    if !guard::is_json(&headers) || !guard::same_origin(&console, &headers) {
        return problem(
            StatusCode::FORBIDDEN,
            "sign in from the console's own page (JSON, same origin)",
        );
    }
    let Ok(Json(login)) = body else {
        return problem(StatusCode::BAD_REQUEST, "the body is {\"token\": \"...\"}");
    };
    let Some(user) = console.users.by_token(login.token.trim().as_bytes()) else {
        return problem(
            StatusCode::UNAUTHORIZED,
            "no user of the users file has this token",
        );
    };
    let id = match console.sessions.open(&user.name) {
        Ok(id) => id,
        Err(error) => return problem(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    };
    tracing::info!(user = user.name.as_str(), "console: signed in");
    let secure = if console.tls { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}={id}; Path=/admin; HttpOnly; SameSite=Strict{secure}");
    let mut response = ok(&json!({
        "user": user.name,
        "role": user.role.as_str(),
        "csrf": console.sessions.csrf(&format!("session:{id}")),
    }));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /admin/logout`: closes the session (with its CSRF token).
async fn logout(
    State(console): State<Arc<Console>>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = guard::forged(&console, &caller, &headers) {
        return refusal;
    }
    if let guard::Credential::Session(id) = &caller.credential {
        console.sessions.close(id);
    }
    let mut response = ok(&json!({"signed_out": true}));
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("rl_console=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}

/// One tenant.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantQuery {
    tenant: String,
}

/// `GET /admin/v1/usage?tenant=ID`: the tenant's live usage of each limit.
async fn usage(State(console): State<Arc<Console>>, Query(query): Query<TenantQuery>) -> Response {
    if let Err(error) = check_tenant(&query.tenant) {
        return problem(StatusCode::BAD_REQUEST, &error.0);
    }
    ok(&usage::usage(&console, &query.tenant).await)
}

/// A top query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopParams {
    policy: Option<String>,
    limit: Option<String>,
    minutes: Option<u64>,
    count: Option<usize>,
}

/// `GET /admin/v1/top?policy=&limit=&minutes=5&count=10`: the fleet's most denied keys of
/// each policy and limit, each with the tenant it counts for when the key names one.
async fn top(State(console): State<Arc<Console>>, Query(params): Query<TopParams>) -> Response {
    let query = TopQuery {
        policy: params.policy.filter(|policy| !policy.is_empty()),
        limit: params.limit.filter(|limit| !limit.is_empty()),
        minutes: params.minutes.unwrap_or(5).clamp(1, top::MAX_MINUTES),
        count: params.count.unwrap_or(10).clamp(1, top::MAX_COUNT),
    };
    let tops = match console.top.top(&query).await {
        Ok(tops) => tops,
        Err(error) => return problem(StatusCode::BAD_GATEWAY, &format!("top keys: {error}")),
    };
    let config = console.engine.config();
    let prefix = console.engine.key_prefix();
    let limits: Vec<_> = tops
        .iter()
        .map(|top| {
            json!({
                "policy": top.policy,
                "limit": top.limit,
                "denials": top.denials,
                "bound": top.bound,
                "summaries": top.summaries,
                "top10_share": top.top10_share,
                "keys": top.keys.iter().map(|key| json!({
                    "key": key.key,
                    "count": key.count,
                    "lower": key.lower,
                    "tenant": usage::tenant_of_key(&config, prefix, &key.key),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    ok(&json!({"minutes": query.minutes, "limits": limits}))
}
