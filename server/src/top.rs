//! `GET /v1/top?policy=<domain>[&limit=<name>][&minutes=5][&count=10]`: the fleet's most
//! denied keys of a domain, per limit, merged from every replica's reports in Redis (the
//! client library's [`top`](redis_ratelimit_client::top)), each count with its bound. Behind
//! the bearer token (the keys name tenants).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use redis_ratelimit_client::top::{TopError, TopQuery};
use serde::Deserialize;
use serde_json::json;

use crate::api::{Api, problem};

/// The query's parameters (`domain` is `policy`'s other name).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    policy: Option<String>,
    domain: Option<String>,
    limit: Option<String>,
    minutes: Option<u64>,
    count: Option<usize>,
}

/// The query `params` ask, or what is wrong with them.
fn query(params: Params) -> Result<TopQuery, String> {
    let policy = match (params.policy, params.domain) {
        (Some(policy), None) | (None, Some(policy)) => policy,
        (Some(_), Some(_)) => return Err("give 'policy' or 'domain', not both".into()),
        (None, None) => return Err("'policy' (the domain) is required".into()),
    };
    let mut query = TopQuery::new(&policy);
    if let Some(limit) = params.limit {
        query = query.limit(&limit);
    }
    if let Some(minutes) = params.minutes {
        query = query.minutes(minutes);
    }
    if let Some(count) = params.count {
        query = query.count(count);
    }
    query.check().map_err(|error| error.to_string())?;
    Ok(query)
}

pub async fn top(
    State(api): State<Arc<Api>>,
    params: Result<Query<Params>, QueryRejection>,
) -> Response {
    let bad = |detail: &str| problem(StatusCode::BAD_REQUEST, "Bad Request", detail);
    let params = match params {
        Ok(Query(params)) => params,
        Err(rejection) => return bad(&rejection.body_text()),
    };
    let query = match query(params) {
        Ok(query) => query,
        Err(detail) => return bad(&detail),
    };
    match api.engine.limiter().top_denied(&query).await {
        Ok(limits) => Json(json!({
            "policy": query.policy,
            "minutes": query.minutes,
            "limits": limits,
        }))
        .into_response(),
        Err(TopError::Query(detail)) => bad(&detail),
        Err(TopError::Store(error)) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            &format!("the top keys cannot be read: {error}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn params(policy: Option<&str>, domain: Option<&str>, minutes: Option<u64>) -> Params {
        Params {
            policy: policy.map(str::to_string),
            domain: domain.map(str::to_string),
            limit: None,
            minutes,
            count: None,
        }
    }

    #[test]
    fn a_query_names_one_domain_within_bounds() {
        assert_eq!(
            query(params(Some("edge"), None, None)).unwrap(),
            TopQuery::new("edge")
        );
        assert_eq!(
            query(params(None, Some("edge"), Some(2))).unwrap().minutes,
            2
        );
        assert!(
            query(params(None, None, None))
                .unwrap_err()
                .contains("required")
        );
        assert!(
            query(params(Some("a"), Some("b"), None))
                .unwrap_err()
                .contains("not both")
        );
        assert!(
            query(params(Some("a"), None, Some(0)))
                .unwrap_err()
                .contains("minutes")
        );
    }
}
