//! What the HTTP handlers share: the engine, the answers' settings, health and access.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use crate::auth::Token;
use crate::engine::Engine;
use crate::headers::HeaderSettings;

/// What the handlers share.
pub struct Api {
    /// The decisions.
    pub engine: Arc<Engine>,
    /// The header fields to return.
    pub headers: HeaderSettings,
    /// The Prometheus exporter.
    pub metrics: PrometheusHandle,
    /// Whether the store answers (the health probe's last result).
    pub store_reachable: Arc<AtomicBool>,
    /// Whether the failure mode denies (then the service is not ready without the store).
    pub fails_closed: bool,
    /// `/healthcheck` fails while no domain is loaded.
    pub healthy_with_config: bool,
    /// The bearer token `/v1/*` requires, if any.
    pub token: Option<Token>,
    /// Whether `/metrics` requires the token too.
    pub metrics_need_token: bool,
    /// The `Origin`s whose pages may call the API (a request from any other is refused).
    pub allowed_origins: Vec<String>,
    /// The longest a request may take, its body included.
    pub request_timeout: Duration,
}

/// An `application/problem+json` answer (RFC 9457).
pub fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": title,
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
