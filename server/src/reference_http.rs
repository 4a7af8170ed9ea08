//! The reference's HTTP endpoints, answered as it answers them: `POST /json` takes a
//! `RateLimitRequest` in proto3's JSON mapping and answers the `RateLimitResponse` in the
//! same mapping (200, or 429 when over the limit; a request it cannot take is `400 Bad
//! Request`, as plain text); `GET /healthcheck` answers `OK`, or 500 when unhealthy.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ResponseUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{Struct, Value as ProtoValue, value::Kind};
use serde_json::{Map, Value, json};

use crate::answer::{self, Answer};
use crate::api::Api;
use crate::grpc;
use crate::json_request::from_json;

/// `POST /json`.
pub async fn check(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let Ok(request) = from_json(&body) else {
        return status_text(StatusCode::BAD_REQUEST);
    };
    // The reference answers 400 for any check that fails, internal errors included.
    let Answer::Verdict(verdict) = answer::check(&api.engine, "json", &request).await else {
        return status_text(StatusCode::BAD_REQUEST);
    };
    let response = grpc::to_proto(&request, &verdict, &api.headers);
    let status = if response.overall_code == Code::OverLimit as i32 {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        response_json(&response).to_string(),
    )
        .into_response()
}

/// `GET /healthcheck`: unhealthy while the store is out of reach and the failure mode
/// denies (as `/readyz`), and with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` while no
/// domain is loaded.
pub async fn healthcheck(State(api): State<Arc<Api>>) -> Response {
    let store_down = api.fails_closed && !api.store_reachable.load(Ordering::Relaxed);
    let no_config = api.healthy_with_config && api.engine.config().domains.is_empty();
    if store_down || no_config {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    "OK".into_response()
}

/// An empty answer of `status`, with its reason as the body (Go's `http.Error`).
fn status_text(status: StatusCode) -> Response {
    let reason = status.canonical_reason().unwrap_or("Error");
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{reason}\n"),
    )
        .into_response()
}

/// A response in proto3's JSON mapping: field names in lowerCamelCase, enums by name,
/// durations as seconds with an `s`, and fields at their default value left out.
pub fn response_json(response: &RateLimitResponse) -> Value {
    let mut fields = Map::new();
    if let Ok(code) = Code::try_from(response.overall_code)
        && code != Code::Unknown
    {
        fields.insert("overallCode".into(), json!(code.as_str_name()));
    }
    if !response.statuses.is_empty() {
        let statuses = response.statuses.iter().map(status_json).collect();
        fields.insert("statuses".into(), Value::Array(statuses));
    }
    if !response.response_headers_to_add.is_empty() {
        let headers = response
            .response_headers_to_add
            .iter()
            .map(|header| json!({"key": header.key, "value": header.value}))
            .collect();
        fields.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        fields.insert("dynamicMetadata".into(), struct_json(metadata));
    }
    Value::Object(fields)
}

fn status_json(status: &DescriptorStatus) -> Value {
    let mut fields = Map::new();
    if let Ok(code) = Code::try_from(status.code)
        && code != Code::Unknown
    {
        fields.insert("code".into(), json!(code.as_str_name()));
    }
    if let Some(limit) = &status.current_limit {
        let mut current = Map::new();
        if !limit.name.is_empty() {
            current.insert("name".into(), json!(limit.name));
        }
        if limit.requests_per_unit != 0 {
            current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
        }
        if let Ok(unit) = ResponseUnit::try_from(limit.unit)
            && unit != ResponseUnit::Unknown
        {
            current.insert("unit".into(), json!(unit.as_str_name()));
        }
        fields.insert("currentLimit".into(), Value::Object(current));
    }
    if status.limit_remaining != 0 {
        fields.insert("limitRemaining".into(), json!(status.limit_remaining));
    }
    if let Some(duration) = &status.duration_until_reset {
        fields.insert(
            "durationUntilReset".into(),
            json!(duration_json(duration.seconds, duration.nanos)),
        );
    }
    Value::Object(fields)
}

/// A `google.protobuf.Duration` as proto3 JSON: `1s`, `1.500s`, `0.000001s`.
fn duration_json(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        return format!("{seconds}s");
    }
    let (digits, width) = match nanos {
        n if n % 1_000_000 == 0 => (n / 1_000_000, 3),
        n if n % 1_000 == 0 => (n / 1_000, 6),
        n => (n, 9),
    };
    format!("{seconds}.{digits:0width$}s")
}

fn struct_json(value: &Struct) -> Value {
    Value::Object(
        value
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &ProtoValue) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(number)) => json!(number),
        Some(Kind::StringValue(text)) => json!(text),
        Some(Kind::BoolValue(boolean)) => json!(boolean),
        Some(Kind::StructValue(inner)) => struct_json(inner),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
    use envoy_types::pb::google::protobuf::Duration;

    use super::*;

    #[test]
    fn the_response_in_proto3_json_as_the_reference_writes_it() {
        // The reference README's /json answer: defaults left out (no limitRemaining of 0).
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: ResponseUnit::Minute as i32,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration {
                        seconds: 58,
                        nanos: 0,
                    }),
                    ..Default::default()
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(RateLimit {
                        name: "per-key".into(),
                        requests_per_unit: 2,
                        unit: ResponseUnit::Minute as i32,
                    }),
                    limit_remaining: 1,
                    duration_until_reset: Some(Duration {
                        seconds: 0,
                        nanos: 500_000_000,
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            response_json(&response),
            json!({
                "overallCode": "OVER_LIMIT",
                "statuses": [
                    {"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"},
                     "durationUntilReset": "58s"},
                    {"code": "OK", "currentLimit": {"name": "per-key", "requestsPerUnit": 2, "unit": "MINUTE"},
                     "limitRemaining": 1, "durationUntilReset": "0.500s"}
                ]
            })
        );
        assert_eq!(duration_json(1, 1_000), "1.000001s");
        assert_eq!(duration_json(0, 7), "0.000000007s");
    }
}
