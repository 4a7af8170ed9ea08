//! The service's own metrics (the client library records its decisions, store calls, leases
//! and breaker under `ratelimit_*`; the policy label is the domain). Exported in Prometheus
//! text at `GET /metrics`.

use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the Prometheus recorder (once per process) and describes the metrics.
pub fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|error| format!("cannot install the metrics recorder: {error}"))?;
    describe_counter!(
        "ratelimit_service_requests_total",
        "Checks answered, by transport (grpc, http, json: the reference's /json), domain and code (ok, over_limit, bad_request, error)"
    );
    describe_counter!(
        "ratelimit_service_descriptors_total",
        "Descriptor decisions by domain, rule (its config path, or the request's values with detailed_metric) and code"
    );
    describe_counter!(
        "ratelimit_service_shadow_denials_total",
        "Requests a shadow_mode limit (or, in the global shadow mode, any limit) would have denied, by domain and rule"
    );
    describe_counter!(
        "ratelimit_service_global_shadow_total",
        "Requests the global shadow mode admitted although a limit denied them (nothing charged), by domain"
    );
    describe_counter!(
        "ratelimit_config_reloads_total",
        "Config reloads by result (ok, refused)"
    );
    describe_gauge!(
        "ratelimit_config_valid",
        "1 when the config directory as it is now was loaded; 0 while a refused change is pending (the previous config is served)"
    );
    gauge!("ratelimit_config_valid").set(1.0);
    Ok(handle)
}

/// A check answered.
pub fn request(transport: &'static str, domain: &str, code: &'static str) {
    counter!(
        "ratelimit_service_requests_total",
        "transport" => transport,
        "domain" => domain.to_string(),
        "code" => code
    )
    .increment(1);
}

/// A descriptor decided.
pub fn descriptor(domain: &str, rule: &str, ok: bool) {
    counter!(
        "ratelimit_service_descriptors_total",
        "domain" => domain.to_string(),
        "rule" => rule.to_string(),
        "code" => if ok { "ok" } else { "over_limit" }
    )
    .increment(1);
}

/// A shadow-mode limit would have denied.
pub fn shadow_denied(domain: &str, rule: &str) {
    counter!(
        "ratelimit_service_shadow_denials_total",
        "domain" => domain.to_string(),
        "rule" => rule.to_string()
    )
    .increment(1);
}

/// The global shadow mode admitted a request some limit denied.
pub fn global_shadow(domain: &str) {
    counter!(
        "ratelimit_service_global_shadow_total",
        "domain" => domain.to_string()
    )
    .increment(1);
}

/// A config reload, applied or refused.
pub fn reload(ok: bool) {
    counter!("ratelimit_config_reloads_total", "result" => if ok { "ok" } else { "refused" })
        .increment(1);
    gauge!("ratelimit_config_valid").set(if ok { 1.0 } else { 0.0 });
}
