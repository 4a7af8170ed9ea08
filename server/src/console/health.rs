//! `GET /admin/v1/health`: this replica's store reachability (the probe's `PING`), the
//! circuit breaker, the decisions the failure mode made, the config in force and the
//! policy store's version as the store has it and as this replica follows it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::response::Response;
use redis_ratelimit_plans::history::utc;
use serde_json::json;

use super::json::ok;
use super::read::snapshot;
use super::state::Console;

/// The health of this replica.
pub async fn health(State(console): State<Arc<Console>>) -> Response {
    let engine = &console.engine;
    let revision = engine.revision();
    let config = engine.config();
    let counts = engine.tally().counts();
    let store_version = match snapshot(&console).await {
        Ok((_, snapshot, _)) => json!({"version": snapshot.version, "stamp": snapshot.stamp}),
        Err(error) => json!({"error": error.to_string()}),
    };
    let replica = engine.plans().source().map(|source| {
        json!({
            "version": source.version(),
            "status": source.status().to_string(),
        })
    });
    let mut domains: Vec<&String> = config.domains.keys().collect();
    domains.sort();
    ok(&json!({
        "store": {
            "reachable": console.store_reachable.load(Ordering::Relaxed),
            "breaker_open": engine.limiter().store_unreachable(),
            "failure_mode": console.failure_mode,
        },
        "decisions": {
            "store": counts.store,
            "fallback": counts.fallback,
            "last_fallback": counts.last_fallback_ms.map(|ms| json!({"ms": ms, "utc": utc(ms)})),
        },
        "config": {
            "generation": revision.generation,
            "fingerprint": format!("{:016x}", revision.fingerprint),
            "loaded": {"ms": revision.loaded_at_ms, "utc": utc(revision.loaded_at_ms)},
            "domains": domains,
            "files": config.files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>(),
            "uses_plans": config.uses_plans(),
        },
        "plans": {
            "store": store_version,
            "replica": replica,
        },
    }))
}
