//! The one place a check's outcome is counted and logged, for every transport: gRPC and the
//! HTTP API each turn an [`Answer`] into their own response, nothing more.

use crate::engine::Engine;
use crate::metrics;
use crate::request::CheckRequest;
use crate::verdict::{CheckFailure, Verdict};

/// What a check comes to, already counted in the metrics (and, if internal, logged).
pub enum Answer {
    /// The limits decided.
    Verdict(Verdict),
    /// The request is malformed or over a bound: nothing was charged.
    BadRequest(String),
    /// A bug or an impossible limit: nothing was charged.
    Internal(String),
}

/// Checks `request` on `engine` for `transport` (`grpc`, `http`): the requests metric by
/// outcome (a bad request without its domain, which could be a new label), an internal
/// error logged.
pub async fn check(engine: &Engine, transport: &'static str, request: &CheckRequest) -> Answer {
    match engine.check(request).await {
        Ok(verdict) => {
            engine.tally().record(&verdict);
            let code = if verdict.allowed { "ok" } else { "over_limit" };
            metrics::request(transport, &request.domain, code);
            Answer::Verdict(verdict)
        }
        Err(CheckFailure::BadRequest(error)) => {
            metrics::request(transport, "", "bad_request");
            Answer::BadRequest(error.0)
        }
        Err(CheckFailure::Internal(error)) => {
            metrics::request(transport, &request.domain, "error");
            tracing::error!(domain = %request.domain, "check failed: {error}");
            Answer::Internal(error)
        }
    }
}
