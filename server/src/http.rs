//! The HTTP JSON API, for every language: `POST /v1/check` takes the gRPC request in
//! proto3's JSON mapping and answers the decision; `POST /v1/release` gives in-flight slots
//! back; `GET /v1/top` the fleet's most denied keys (`top.rs`); `GET /metrics`, `/healthz`,
//! `/readyz`; and the reference's `POST /json` and `GET /healthcheck` (`reference_http.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::answer::{self, Answer};
pub use crate::api::Api;
use crate::api::problem;
use crate::headers::{self, HeaderSettings};
use crate::json_request::from_json;
use crate::metrics;
use crate::reference_http;
use crate::request::CheckRequest;
use crate::top;
use crate::verdict::Verdict;

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The routes.
pub fn router(api: Arc<Api>) -> Router {
    let token = || middleware::from_fn_with_state(Arc::clone(&api), bearer);
    let guarded = Router::new()
        .route("/v1/check", post(check))
        .route("/v1/release", post(release))
        .route_layer(token())
        .route_layer(middleware::from_fn(json_only));
    // The reference's endpoint takes a body of any content type, as the reference does (its
    // own example posts with curl's form type): a web page is kept out by the Origin check,
    // which every browser's POST meets, and the token guards it as it guards `/v1/*`.
    let reference = Router::new()
        .route("/json", post(reference_http::check))
        .route_layer(token());
    let metrics = if api.metrics_need_token {
        get(metrics_text).route_layer(token())
    } else {
        get(metrics_text)
    };
    Router::new()
        .merge(guarded)
        .merge(reference)
        .route("/v1/top", get(top::top).route_layer(token()))
        .route("/metrics", metrics)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/healthcheck", get(reference_http::healthcheck))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&api),
            same_origin,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&api), time_bound))
        .with_state(api)
}

fn bad_request(detail: &str) -> Response {
    metrics::request("http", "", "bad_request");
    problem(StatusCode::BAD_REQUEST, "Bad Request", detail)
}

async fn bearer(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    if let Some(token) = &api.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if !token.admits(given) {
            let mut response = problem(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "this API needs 'Authorization: Bearer <token>'",
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    next.run(request).await
}

/// A browser names the page's origin in `Origin` on every cross-origin request and every
/// POST: one not allowed is refused, so a web page cannot spend limits through a
/// browser on the machine (other clients send no `Origin`).
async fn same_origin(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let allowed = api
            .allowed_origins
            .iter()
            .any(|allowed| allowed.as_bytes() == origin.as_bytes());
        if !allowed {
            return problem(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "requests from web pages are refused (Origin is not in --http-allow-origin)",
            );
        }
    }
    next.run(request).await
}

/// `/v1/*` takes JSON only: `application/json` (or `application/*+json`). A browser
/// sends a cross-origin POST without asking first only as text/plain or a form, so this
/// also keeps pages out (besides the Origin check, which alone guards `/json`).
async fn json_only(request: Request, next: Next) -> Response {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let essence = content_type
        .and_then(|value| value.split(';').next())
        .map(|essence| essence.trim().to_ascii_lowercase());
    let json = essence.as_deref().is_some_and(|essence| {
        essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json"))
    });
    if !json {
        return problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type",
            &format!(
                "the body must be 'Content-Type: application/json', not {}",
                content_type.map_or("none".to_string(), |value| format!("'{value}'"))
            ),
        );
    }
    next.run(request).await
}

/// Bounds a request's time, its body included: a body sent a byte at a time holds a
/// connection no longer than this.
async fn time_bound(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(api.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let mut response = problem(
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout",
                &format!(
                    "the request took longer than {} ms (--request-timeout-ms)",
                    api.request_timeout.as_millis()
                ),
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

/// The problem+json answer to a body that cannot be read (over the size bound: 413; cut
/// short: 400).
fn unreadable_body(rejection: BytesRejection) -> Response {
    let status = rejection.status();
    metrics::request("http", "", "bad_request");
    problem(
        status,
        status.canonical_reason().unwrap_or("Bad Request"),
        &rejection.body_text(),
    )
}

/// A proto3 JSON duration: seconds with up to nine decimals and an `s`.
fn json_duration(duration: std::time::Duration) -> String {
    let nanos = duration.subsec_nanos();
    if nanos == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}.{:09}s", duration.as_secs(), nanos)
    }
}

/// The JSON answer: the gRPC response's fields in proto3 JSON, plus `allowed`, the HTTP
/// status a service should answer with (`status`: 200, 429, or 503 when the store is out of
/// reach and the failure mode denies), `deniedBy`, and `inFlight` to release.
fn verdict_json(request: &CheckRequest, verdict: &Verdict, settings: &HeaderSettings) -> Value {
    let statuses: Vec<Value> = verdict
        .statuses
        .iter()
        .map(|status| {
            let mut item = serde_json::Map::new();
            item.insert(
                "code".into(),
                json!(if status.ok { "OK" } else { "OVER_LIMIT" }),
            );
            item.insert("limitRemaining".into(), json!(status.remaining));
            if let Some(limit) = &status.limit {
                item.insert(
                    "currentLimit".into(),
                    json!({
                        "name": limit.name,
                        "requestsPerUnit": limit.requests_per_unit,
                        "unit": limit.unit.name(),
                    }),
                );
            }
            if status.consulted {
                item.insert(
                    "durationUntilReset".into(),
                    json!(json_duration(status.reset_after)),
                );
            }
            if let Some(why) = status.regional {
                item.insert("regional".into(), json!(why));
            }
            if status.shadow {
                item.insert("shadowMode".into(), json!(true));
                item.insert("wouldDeny".into(), json!(status.over));
            }
            Value::Object(item)
        })
        .collect();
    let hits: Vec<u64> = request
        .descriptors
        .iter()
        .map(|descriptor| request.hits(descriptor))
        .collect();
    let headers: serde_json::Map<String, Value> = headers::fields(verdict, settings, &hits)
        .into_iter()
        .map(|(key, value)| (key, Value::String(value)))
        .collect();
    let status = match (verdict.allowed, verdict.unavailable) {
        (true, _) => 200,
        (false, true) => 503,
        (false, false) => 429,
    };
    let mut body = serde_json::Map::new();
    let fields = json!({
        "overallCode": if verdict.allowed { "OK" } else { "OVER_LIMIT" },
        "allowed": verdict.allowed,
        "status": status,
        "statuses": statuses,
        "headers": headers,
        "deniedBy": verdict.denied_by(),
        "decidedBy": verdict.decider.as_str(),
    });
    if let Value::Object(fields) = fields {
        body.extend(fields);
    }
    let shadow = verdict.shadow_denied_by();
    if !shadow.is_empty() {
        body.insert("shadowDeniedBy".into(), json!(shadow));
    }
    if let Some(id) = &verdict.in_flight {
        body.insert("inFlight".into(), json!(id));
    }
    if let Some(backend) = verdict.decider.backend() {
        body.insert("backend".into(), json!(backend));
    }
    Value::Object(body)
}

async fn check(State(api): State<Arc<Api>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable_body(rejection),
    };
    let request = match from_json(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(&error.to_string()),
    };
    match answer::check(&api.engine, "http", &request).await {
        Answer::Verdict(verdict) => {
            let body = verdict_json(&request, &verdict, &api.headers);
            (
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
        // Counted by `answer::check` already.
        Answer::BadRequest(error) => problem(StatusCode::BAD_REQUEST, "Bad Request", &error),
        Answer::Internal(error) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error",
            &error,
        ),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    #[serde(rename = "inFlight", alias = "in_flight")]
    in_flight: String,
}

async fn release(State(api): State<Arc<Api>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable_body(rejection),
    };
    let request: ReleaseRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(&format!("malformed JSON: {error}")),
    };
    if api.engine.release(&request.in_flight).await {
        (
            [(header::CONTENT_TYPE, "application/json")],
            json!({"released": true}).to_string(),
        )
            .into_response()
    } else {
        problem(
            StatusCode::NOT_FOUND,
            "Not Found",
            "no in-flight slots are held under this id (released already, or expired)",
        )
    }
}

async fn metrics_text(State(api): State<Arc<Api>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        api.metrics.render(),
    )
        .into_response()
}

async fn ready(State(api): State<Arc<Api>>) -> Response {
    if api.fails_closed && !api.store_reachable.load(Ordering::Relaxed) {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            "the store is out of reach and the failure mode denies every request",
        );
    }
    "ready\n".into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn durations_read_as_proto3_json() {
        assert_eq!(
            json_duration(std::time::Duration::from_millis(1500)),
            "1.500000000s"
        );
    }
}
