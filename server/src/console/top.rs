//! "Throttled now": the fleet's most denied keys of each policy and limit, read from the
//! top-keys summaries the limiters write into Redis (issue 39; the storage format
//! `docs/operating.md` sets, version 1), merged as it says.
//!
//! The page reads them through [`TopSource`] (a test can stand in for [`RedisTop`]); the
//! format is decoded and merged by the client library's `top` module, the one reading of it.
//!
//! Format v1, in short: one hash per minute `rl:top:{rl-top}:v1:<minute start, Unix s>`,
//! one field per replica, policy and limit, each value a JSON summary `{"v":1, "policy",
//! "limit", "capacity", "denials", "floor", "keys": [[key, count, error], ...]}`. Merged
//! over the window's minutes: a key's count is the sum of its count where listed and each
//! other summary's floor, its guaranteed count the sum of `count - error` where listed;
//! the bound on any count's excess is the sum of the floors; concentration is the top 10's
//! guaranteed counts over the denials.

use std::collections::BTreeSet;
use std::sync::Arc;

use redis_ratelimit_client::store::BoxFuture;
use redis_ratelimit_client::top::{self, TopDenied, merge, report};

use super::policy_store::PolicyStore;

/// The most minutes a query reads (the format keeps 15 by default).
pub const MAX_MINUTES: u64 = 15;

/// The most keys a query answers per limit.
pub const MAX_COUNT: usize = 100;

/// The most summaries one query merges (every replica, policy, limit and minute).
pub const MAX_SUMMARIES: usize = 20_000;

/// What to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopQuery {
    /// One policy (`None`: all).
    pub policy: Option<String>,
    /// One limit (`None`: all).
    pub limit: Option<String>,
    /// The window, in minutes (the current one and those before), 1 to [`MAX_MINUTES`].
    pub minutes: u64,
    /// Keys per limit, 1 to [`MAX_COUNT`].
    pub count: usize,
}

/// One policy and limit's top over the window, as the client library merges it.
pub type LimitTop = TopDenied;

/// Why the top could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// Redis failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The policy store's connection could not be made.
    #[error("{0}")]
    Connect(#[from] redis_ratelimit_plans::plan_store::PlanStoreError),
}

/// Where "Throttled now" reads the fleet's top denied keys.
pub trait TopSource: Send + Sync + 'static {
    /// The tops `query` asks for, by policy then limit.
    fn top<'a>(&'a self, query: &'a TopQuery) -> BoxFuture<'a, Result<Vec<LimitTop>, TopError>>;
}

/// Merges every summary read, by policy and limit, keeping those `query` asks for: the
/// client library's decoder and merge of format v1 (the one reading of the format, shared
/// with `rlctl top`, the service's `GET /v1/top` and the clients).
fn merge_all(hashes: &[Vec<(String, String)>], query: &TopQuery) -> Vec<LimitTop> {
    let (reports, _unreadable) = top::decode_all(hashes);
    let policies: BTreeSet<&str> = reports
        .iter()
        .map(|report| report.policy.as_str())
        .filter(|policy| {
            query
                .policy
                .as_deref()
                .is_none_or(|wanted| wanted == *policy)
        })
        .collect();
    policies
        .into_iter()
        .flat_map(|policy| merge::merge(&reports, policy, query.limit.as_deref(), query.count))
        .collect()
}

/// The summaries in Redis, read on the console's connection to the store's server.
pub struct RedisTop {
    /// The connection.
    pub store: Arc<PolicyStore>,
}

impl RedisTop {
    async fn read(&self, query: &TopQuery) -> Result<Vec<LimitTop>, TopError> {
        let mut connection = self.store.connection().await?;
        let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await?;
        let mut hashes = Vec::new();
        let mut summaries: usize = 0;
        for key in report::window_keys(seconds, query.minutes.clamp(1, MAX_MINUTES)) {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut connection)
                .await?;
            summaries = summaries.saturating_add(fields.len());
            hashes.push(fields);
            if summaries >= MAX_SUMMARIES {
                break;
            }
        }
        Ok(merge_all(&hashes, query))
    }
}

impl TopSource for RedisTop {
    fn top<'a>(&'a self, query: &'a TopQuery) -> BoxFuture<'a, Result<Vec<LimitTop>, TopError>> {
        Box::pin(async move {
            let read = self.read(query).await;
            if let Err(TopError::Redis(error)) = &read {
                let error = redis_ratelimit_plans::plan_store::PlanStoreError::Redis(error.clone());
                self.store.failed(&error).await;
            }
            read
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn query() -> TopQuery {
        TopQuery {
            policy: None,
            limit: None,
            minutes: 5,
            count: 10,
        }
    }

    #[test]
    fn summaries_merge_as_the_format_says() {
        // Two replicas: one lists acme exactly, the other is full (floor 3) and lists
        // globex with an error of 2.
        let values = [
            r#"{"v":1,"policy":"api","limit":"per-minute","replica":"a","client":"rust","capacity":128,"denials":900,"floor":0,"keys":[["rls:api:tenant=acme|x",900,0]]}"#,
            r#"{"v":1,"policy":"api","limit":"per-minute","replica":"b","client":"rust","capacity":2,"denials":320,"floor":3,"keys":[["rls:api:tenant=globex|x",312,2],["rls:api:tenant=initech|x",5,3]]}"#,
            r#"{"v":1,"policy":"other","limit":"l","replica":"c","client":"python","capacity":1,"denials":1,"floor":0,"keys":[["k",1,0]]}"#,
            r#"{"v":2,"policy":"api","limit":"per-minute","keys":[["future",100000,0]]}"#,
            "not json",
        ]
        .map(String::from);
        let values = [values
            .iter()
            .enumerate()
            .map(|(field, value)| (field.to_string(), value.clone()))
            .collect::<Vec<_>>()];
        let tops = merge_all(&values, &query());
        assert_eq!(tops.len(), 2);
        let api = &tops[0];
        assert_eq!(
            (api.policy.as_str(), api.limit.as_str()),
            ("api", "per-minute")
        );
        assert_eq!(api.denials, 1_220);
        assert_eq!(api.bound, 3);
        let keys: Vec<(&str, u64, u64)> = api
            .keys
            .iter()
            .map(|key| (key.key.as_str(), key.count, key.lower))
            .collect();
        assert_eq!(
            keys,
            [
                ("rls:api:tenant=acme|x", 903, 900),
                ("rls:api:tenant=globex|x", 312, 310),
                ("rls:api:tenant=initech|x", 5, 2),
            ]
        );
        assert!((api.top10_share - 1_212.0 / 1_220.0).abs() < 1e-9);
        let only = merge_all(
            &values,
            &TopQuery {
                policy: Some("other".into()),
                ..query()
            },
        );
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].keys[0].key, "k");
    }
}
