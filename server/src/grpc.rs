//! Envoy's rate limit service, v3 (`envoy.service.ratelimit.v3.RateLimitService`), as the
//! `envoy.filters.http.ratelimit` filter (and Istio, Envoy Gateway, Contour, Gloo, Emissary)
//! calls it.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ResponseUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::{self, ListValue, Struct, Value, value::Kind};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status as GrpcStatus};

use crate::answer::{self, Answer};
use crate::auth::Token;
use crate::config::Unit;
use crate::engine::Engine;
use crate::headers::{self, HeaderSettings};
use crate::metrics;
use crate::request::{BadRequest, CheckRequest, Descriptor};
use crate::verdict::Verdict;

/// Largest request message accepted.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The gRPC service.
pub struct Rls {
    engine: Arc<Engine>,
    headers: HeaderSettings,
}

impl Rls {
    /// The service over an engine.
    pub fn new(engine: Arc<Engine>, headers: HeaderSettings) -> Self {
        Self { engine, headers }
    }
}

/// The service as served.
pub type Service = InterceptedService<RateLimitServiceServer<Rls>, Authenticate>;

/// The service as served: messages bounded, and with `token`, only for callers whose
/// metadata presents it (`authorization: Bearer <token>`).
pub fn service(engine: Arc<Engine>, headers: HeaderSettings, token: Option<Token>) -> Service {
    let server = RateLimitServiceServer::new(Rls::new(engine, headers))
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    InterceptedService::new(server, Authenticate { token })
}

/// Refuses calls that do not present the token, if there is one, with `UNAUTHENTICATED`.
#[derive(Clone)]
pub struct Authenticate {
    token: Option<Token>,
}

impl Authenticate {
    /// Refuses callers without `token`, if there is one.
    pub fn new(token: Option<Token>) -> Self {
        Self { token }
    }
}

impl Interceptor for Authenticate {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, GrpcStatus> {
        let Some(token) = &self.token else {
            return Ok(request);
        };
        let authorization = request
            .metadata()
            .get("authorization")
            .map(|value| value.as_bytes());
        if token.admits(authorization) {
            Ok(request)
        } else {
            Err(GrpcStatus::unauthenticated(
                "this service needs 'authorization: Bearer <token>' in the call's metadata",
            ))
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, GrpcStatus> {
        let request = request.into_inner();
        let check = match from_proto(&request) {
            Ok(check) => check,
            Err(error) => {
                // Not the request's domain: an unknown one would be a new label.
                metrics::request("grpc", "", "bad_request");
                return Err(GrpcStatus::invalid_argument(error.0));
            }
        };
        match answer::check(&self.engine, "grpc", &check).await {
            Answer::Verdict(verdict) => {
                Ok(Response::new(to_proto(&check, &verdict, &self.headers)))
            }
            Answer::BadRequest(error) => Err(GrpcStatus::invalid_argument(error)),
            Answer::Internal(error) => Err(GrpcStatus::internal(error)),
        }
    }
}

/// tonic answers a request body that is not the message with `INTERNAL`, as gRPC's status
/// code guide has it for a parse error; the service calls it what it is for its caller,
/// `INVALID_ARGUMENT` (bad input is refused as such, whatever the transport). Errors before
/// any message are trailers-only responses, so the status is in the headers.
pub fn invalid_protobuf_is_invalid_argument<B>(
    mut response: http::Response<B>,
) -> http::Response<B> {
    let headers = response.headers_mut();
    let internal = headers
        .get("grpc-status")
        .is_some_and(|status| status.as_bytes() == b"13");
    // Not the message's encoding, or a message cut short (its length prefix says more than
    // the stream carried).
    let undecodable = headers.get("grpc-message").is_some_and(|message| {
        let message = message.as_bytes();
        message.starts_with(b"failed%20to%20decode")
            || message.starts_with(b"Unexpected%20EOF%20decoding")
    });
    if internal && undecodable {
        headers.insert("grpc-status", http::HeaderValue::from_static("3"));
    }
    response
}

/// The service's view of a gRPC request.
pub fn from_proto(request: &RateLimitRequest) -> Result<CheckRequest, BadRequest> {
    let descriptors = request
        .descriptors
        .iter()
        .enumerate()
        .map(|(index, descriptor)| descriptor_from_proto(index, descriptor))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CheckRequest {
        domain: request.domain.clone(),
        descriptors,
        hits_addend: u64::from(request.hits_addend),
    })
}

fn descriptor_from_proto(
    index: usize,
    descriptor: &RateLimitDescriptor,
) -> Result<Descriptor, BadRequest> {
    if descriptor.is_negative_hits {
        return Err(BadRequest(format!(
            "descriptors[{index}].is_negative_hits is not supported"
        )));
    }
    let limit = match &descriptor.limit {
        None => None,
        Some(limit) => {
            let unit = RateLimitUnit::try_from(limit.unit)
                .ok()
                .and_then(|unit| match unit {
                    RateLimitUnit::Second => Some(Unit::Second),
                    RateLimitUnit::Minute => Some(Unit::Minute),
                    RateLimitUnit::Hour => Some(Unit::Hour),
                    RateLimitUnit::Day => Some(Unit::Day),
                    RateLimitUnit::Month => Some(Unit::Month),
                    RateLimitUnit::Year => Some(Unit::Year),
                    RateLimitUnit::Unknown => None,
                })
                .ok_or_else(|| {
                    BadRequest(format!(
                        "descriptors[{index}].limit.unit is not a known unit"
                    ))
                })?;
            Some((limit.requests_per_unit, unit))
        }
    };
    Ok(Descriptor {
        entries: descriptor
            .entries
            .iter()
            .map(|entry| (entry.key.clone(), entry.value.clone()))
            .collect(),
        limit,
        hits_addend: descriptor.hits_addend.as_ref().map(|hits| hits.value),
    })
}

/// The unit as the response's enum.
fn response_unit(unit: Unit) -> ResponseUnit {
    match unit {
        Unit::Second => ResponseUnit::Second,
        Unit::Minute => ResponseUnit::Minute,
        Unit::Hour => ResponseUnit::Hour,
        Unit::Day => ResponseUnit::Day,
        Unit::Week => ResponseUnit::Week,
        Unit::Month => ResponseUnit::Month,
        Unit::Year => ResponseUnit::Year,
    }
}

/// The response to a decided request.
pub fn to_proto(
    request: &CheckRequest,
    verdict: &Verdict,
    settings: &HeaderSettings,
) -> RateLimitResponse {
    let statuses = verdict
        .statuses
        .iter()
        .map(|status| DescriptorStatus {
            code: if status.ok { Code::Ok } else { Code::OverLimit } as i32,
            current_limit: status.limit.as_ref().map(|limit| RateLimit {
                name: limit.name.clone(),
                requests_per_unit: u32::try_from(limit.requests_per_unit).unwrap_or(u32::MAX),
                unit: response_unit(limit.unit) as i32,
            }),
            limit_remaining: u32::try_from(status.remaining).unwrap_or(u32::MAX),
            duration_until_reset: status.consulted.then(|| protobuf::Duration {
                seconds: i64::try_from(status.reset_after.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(status.reset_after.subsec_nanos()).unwrap_or(0),
            }),
            ..Default::default()
        })
        .collect();
    let hits: Vec<u64> = request
        .descriptors
        .iter()
        .map(|descriptor| request.hits(descriptor))
        .collect();
    let response_headers_to_add = headers::fields(verdict, settings, &hits)
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key,
            value,
            ..Default::default()
        })
        .collect();
    RateLimitResponse {
        overall_code: if verdict.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        statuses,
        response_headers_to_add,
        dynamic_metadata: metadata(verdict),
        ..Default::default()
    }
}

/// `denied_by` (and `shadow_denied_by`) name the limits that denied, so an access log can
/// say which rule fired; `decided_by` says whether the store or the failure mode decided,
/// and `backend` which store backend (`module`, `functions`, `scripts`) answered.
/// With `RESPONSE_DYNAMIC_METADATA`, the reference's fields too (`domain`, `descriptors`,
/// `hitsAddend`, `metadata`), on every answer.
fn metadata(verdict: &Verdict) -> Option<Struct> {
    let denied = verdict.denied_by();
    let shadow = verdict.shadow_denied_by();
    let mut fields: HashMap<String, Value> = verdict
        .reference_metadata
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), proto_value(value)))
        .collect();
    if denied.is_empty() && shadow.is_empty() && verdict.allowed {
        return (!fields.is_empty()).then_some(Struct { fields });
    }
    let list = |names: Vec<&str>| Value {
        kind: Some(Kind::ListValue(ListValue {
            values: names
                .into_iter()
                .map(|name| Value {
                    kind: Some(Kind::StringValue(name.to_string())),
                })
                .collect(),
        })),
    };
    fields.insert("denied_by".to_string(), list(denied));
    if !shadow.is_empty() {
        fields.insert("shadow_denied_by".to_string(), list(shadow));
    }
    fields.insert(
        "decided_by".to_string(),
        Value {
            kind: Some(Kind::StringValue(verdict.decider.as_str().to_string())),
        },
    );
    if let Some(backend) = verdict.decider.backend() {
        fields.insert(
            "backend".to_string(),
            Value {
                kind: Some(Kind::StringValue(backend.to_string())),
            },
        );
    }
    Some(Struct { fields })
}

/// A JSON value as a protobuf `Value` (numbers as doubles, as `Struct` holds them).
fn proto_value(value: &serde_json::Value) -> Value {
    use serde_json::Value as Json;
    let kind = match value {
        Json::Null => Kind::NullValue(0),
        Json::Bool(boolean) => Kind::BoolValue(*boolean),
        Json::Number(number) => Kind::NumberValue(number.as_f64().unwrap_or(0.0)),
        Json::String(text) => Kind::StringValue(text.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(proto_value).collect(),
        }),
        Json::Object(fields) => Kind::StructValue(Struct {
            fields: fields
                .iter()
                .map(|(key, value)| (key.clone(), proto_value(value)))
                .collect(),
        }),
    };
    Value { kind: Some(kind) }
}
