//! "Throttled now": the fleet's most denied keys of each policy and limit, read from the
//! top-keys summaries the limiters write into Redis (issue 39; the storage format
//! `docs/operating.md` sets, version 1), merged as it says.
//!
//! The page reads them through [`TopSource`], so that the reader the client library will
//! have for the same format can stand in for [`RedisTop`] without the page changing.
//!
//! Format v1, in short: one hash per minute `rl:top:{rl-top}:v1:<minute start, Unix s>`,
//! one field per replica, policy and limit, each value a JSON summary `{"v":1, "policy",
//! "limit", "capacity", "denials", "floor", "keys": [[key, count, error], ...]}`. Merged
//! over the window's minutes: a key's count is the sum of its count where listed and each
//! other summary's floor, its guaranteed count the sum of `count - error` where listed;
//! the bound on any count's excess is the sum of the floors; concentration is the top 10's
//! guaranteed counts over the denials.

use std::collections::BTreeMap;
use std::sync::Arc;

use redis_ratelimit_client::store::BoxFuture;
use serde::Deserialize;

use super::policy_store::PolicyStore;

/// The key of the summaries of the minute starting at `bucket_s`.
pub fn bucket_key(bucket_s: u64) -> String {
    format!("rl:top:{{rl-top}}:v1:{bucket_s}")
}

/// The most minutes a query reads (the format keeps 15 by default).
pub const MAX_MINUTES: u64 = 15;

/// The most keys a query answers per limit.
pub const MAX_COUNT: usize = 100;

/// The most summaries one query merges (every replica, policy, limit and minute).
pub const MAX_SUMMARIES: usize = 20_000;

/// The largest summary read (a summary of 128 keys of 256 bytes is about 40 KiB).
pub const MAX_SUMMARY_BYTES: usize = 1024 * 1024;

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

/// One key of a limit's top.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCount {
    /// The rendered key.
    pub key: String,
    /// Its count: its true denials are at most this.
    pub count: u64,
    /// Its guaranteed denials: at least this.
    pub lower: u64,
}

/// One policy and limit's top over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitTop {
    /// The policy (the service: the domain).
    pub policy: String,
    /// The limit.
    pub limit: String,
    /// Denials in the window, fleet-wide.
    pub denials: u64,
    /// No count is more than this over the truth, and a key denied more is listed.
    pub bound: u64,
    /// The summaries merged (replicas × minutes).
    pub summaries: usize,
    /// The most denied keys, most first.
    pub keys: Vec<KeyCount>,
    /// The share of the denials the top 10 take (guaranteed counts): near 1, a few keys are
    /// throttled; low, denials spread across many keys.
    pub top10_share: f64,
}

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

/// One summary, as format v1 writes it (members a reader does not know are ignored).
#[derive(Clone, Debug, Deserialize)]
struct Summary {
    v: u64,
    policy: String,
    limit: String,
    #[serde(default)]
    denials: u64,
    #[serde(default)]
    floor: u64,
    #[serde(default)]
    keys: Vec<(String, u64, u64)>,
}

/// Merges the summaries of one policy and limit, as the format says.
fn merge(policy: &str, limit: &str, summaries: &[Summary], count: usize) -> LimitTop {
    let mut keys: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for summary in summaries {
        for (key, _, _) in &summary.keys {
            keys.entry(key.as_str()).or_insert((0, 0));
        }
    }
    for (key, (total, lower)) in &mut keys {
        for summary in summaries {
            match summary.keys.iter().find(|(listed, _, _)| listed == key) {
                Some((_, count, error)) => {
                    *total = total.saturating_add(*count);
                    *lower = lower.saturating_add(count.saturating_sub(*error));
                }
                None => *total = total.saturating_add(summary.floor),
            }
        }
    }
    let mut ranked: Vec<KeyCount> = keys
        .into_iter()
        .map(|(key, (count, lower))| KeyCount {
            key: key.to_string(),
            count,
            lower,
        })
        .collect();
    ranked.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    let denials = summaries
        .iter()
        .fold(0u64, |sum, summary| sum.saturating_add(summary.denials));
    let top10: u64 = ranked
        .iter()
        .take(10)
        .fold(0u64, |sum, key| sum.saturating_add(key.lower));
    #[allow(clippy::cast_precision_loss)]
    let top10_share = if denials == 0 {
        0.0
    } else {
        (top10 as f64 / denials as f64).min(1.0)
    };
    ranked.truncate(count);
    LimitTop {
        policy: policy.to_string(),
        limit: limit.to_string(),
        denials,
        bound: summaries
            .iter()
            .fold(0u64, |sum, summary| sum.saturating_add(summary.floor)),
        summaries: summaries.len(),
        keys: ranked,
        top10_share,
    }
}

/// Merges every summary read, by policy and limit, keeping those `query` asks for.
fn merge_all(values: &[String], query: &TopQuery) -> Vec<LimitTop> {
    let mut groups: BTreeMap<(String, String), Vec<Summary>> = BTreeMap::new();
    for value in values.iter().take(MAX_SUMMARIES) {
        if value.len() > MAX_SUMMARY_BYTES {
            continue;
        }
        let Ok(summary) = serde_json::from_str::<Summary>(value) else {
            continue;
        };
        let wanted = summary.v == 1
            && query
                .policy
                .as_ref()
                .is_none_or(|policy| *policy == summary.policy)
            && query
                .limit
                .as_ref()
                .is_none_or(|limit| *limit == summary.limit);
        if wanted {
            groups
                .entry((summary.policy.clone(), summary.limit.clone()))
                .or_default()
                .push(summary);
        }
    }
    groups
        .iter()
        .map(|((policy, limit), summaries)| merge(policy, limit, summaries, query.count))
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
        let current = seconds.saturating_sub(seconds.checked_rem(60).unwrap_or(0));
        let mut values = Vec::new();
        for minute in 0..query.minutes.clamp(1, MAX_MINUTES) {
            let key = bucket_key(current.saturating_sub(minute.saturating_mul(60)));
            let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut connection)
                .await?;
            values.extend(fields.into_values());
            if values.len() >= MAX_SUMMARIES {
                break;
            }
        }
        Ok(merge_all(&values, query))
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
            r#"{"v":1,"policy":"other","limit":"l","capacity":1,"denials":1,"floor":0,"keys":[["k",1,0]]}"#,
            r#"{"v":2,"policy":"api","limit":"per-minute","keys":[["future",100000,0]]}"#,
            "not json",
        ]
        .map(String::from);
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
