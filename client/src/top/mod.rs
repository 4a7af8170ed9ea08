//! Who is throttled, fleet-wide: the most denied keys of each policy and limit, counted in
//! every replica of every service in every client language, merged in Redis, with a stated
//! bound on every count (`docs/operating.md`, "Top denied keys").
//!
//! Each replica counts every denial (decided by the store, the deny cache, a lease or the
//! fallback) under its policy, its binding limit and that limit's rendered key, in a
//! Space-Saving summary ([`summary`]) of at most [`TopKeys::capacity`] keys per policy and
//! limit and per minute: in memory, nothing on the admitted path, nothing per key in
//! Prometheus. Once a [`report_every`](TopKeys::report_every) (one second) the summaries
//! that changed are written whole in one pipelined write into the minute's Redis hash
//! ([`report`]: the format every client language writes), which expires
//! [`retention`](TopKeys::retention) after the minute ends. Any reader merges every
//! replica's summaries of the minutes asked ([`merge`]): [`read`],
//! [`RateLimiter::top_denied`](crate::RateLimiter::top_denied), `rlctl top`, the service's
//! `GET /v1/top`. Every [`concentration_every`](TopKeys::concentration_every) the reporter
//! reads the last [`window_minutes`](TopKeys::window_minutes) and exports each limit's
//! concentration (`ratelimit_denied_top10_share`) and denials (`ratelimit_denied_window`).
//!
//! ```
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redis_ratelimit_client::store::MemoryStore;
//! use redis_ratelimit_client::top::{TopKeys, TopQuery};
//! use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};
//!
//! let policy = Policy::builder("api")
//!     .limit(Limit::new("per-key", Algorithm::fixed_window(1, Duration::from_secs(60))?, "k:{key}")?)
//!     .build()?;
//! let limiter = RateLimiter::builder(MemoryStore::new())
//!     .policy(policy)
//!     .top_keys(TopKeys::default())
//!     .build()?;
//! for _ in 0..3 {
//!     limiter.check("api", &Inputs::new().with("key", "alice")).await?;
//! }
//! limiter.report_top().await?; // the reporter does this every second
//! let top = limiter.top_denied(&TopQuery::new("api")).await?;
//! assert_eq!(top[0].limit, "per-key");
//! assert_eq!((top[0].keys[0].key.as_str(), top[0].keys[0].count), ("k:alice", 2));
//! # Ok(()) }
//! ```

pub mod merge;
pub(crate) mod recorder;
pub mod report;
pub mod summary;

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

pub use self::merge::{TopDenied, TopKey};
use self::recorder::Recorder;
use self::report::Report;
use crate::clock::LimiterClock;
use crate::metrics;
use crate::store::{Store, StoreError};

/// The most minutes a query reads.
pub const MAX_QUERY_MINUTES: u64 = 1_440;

/// The most keys a query lists per limit.
pub const MAX_QUERY_COUNT: usize = 1_000;

/// The most policies and limits whose concentration gauges a reporter exports.
const MAX_GAUGED: usize = 1_024;

/// How a limiter counts and reports its denials for the fleet's top keys
/// ([`RateLimiterBuilder::top_keys`](crate::RateLimiterBuilder::top_keys)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKeys {
    /// Keys per summary (per policy and limit and minute; default 128): a key denied more
    /// than `denials / capacity` times in a minute on a replica is always listed, and no
    /// count is over by more. Memory per summary is about `capacity` × (key + 80) bytes.
    pub capacity: usize,
    /// Summaries a replica keeps per minute (default 256): past it, denials of another
    /// policy and limit are not counted (at most 256 × 128 keys of 256 bytes in memory).
    pub max_summaries: usize,
    /// How often the summaries that changed are written (default 1 s: at most one write a
    /// second).
    pub report_every: Duration,
    /// How long a minute's hash is kept after the minute ends (default 15 minutes).
    pub retention: Duration,
    /// The window the concentration gauges are read over, in minutes (default 5).
    pub window_minutes: u64,
    /// How often the concentration gauges are read (default 10 s; zero: never).
    pub concentration_every: Duration,
}

impl Default for TopKeys {
    fn default() -> Self {
        Self {
            capacity: 128,
            max_summaries: 256,
            report_every: Duration::from_secs(1),
            retention: Duration::from_secs(15 * 60),
            window_minutes: 5,
            concentration_every: Duration::from_secs(10),
        }
    }
}

/// What to read of the fleet's top keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopQuery {
    /// The policy (the service's domain).
    pub policy: String,
    /// One limit, or every limit of the policy.
    pub limit: Option<String>,
    /// The minutes read: the current one and those before it (default 5).
    pub minutes: u64,
    /// Keys listed per limit (default 10).
    pub count: usize,
}

impl TopQuery {
    /// The top 10 keys of every limit of `policy` over the last 5 minutes.
    pub fn new(policy: &str) -> Self {
        Self {
            policy: policy.to_string(),
            limit: None,
            minutes: 5,
            count: 10,
        }
    }

    /// Only `limit`.
    #[must_use]
    pub fn limit(mut self, limit: &str) -> Self {
        self.limit = Some(limit.to_string());
        self
    }

    /// Over `minutes` minutes.
    #[must_use]
    pub fn minutes(mut self, minutes: u64) -> Self {
        self.minutes = minutes;
        self
    }

    /// `count` keys per limit.
    #[must_use]
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Refuses a query out of bounds, saying which bound.
    pub fn check(&self) -> Result<(), TopError> {
        if self.policy.is_empty() {
            return Err(TopError::Query("the policy is empty".into()));
        }
        if !(1..=MAX_QUERY_MINUTES).contains(&self.minutes) {
            return Err(TopError::Query(format!(
                "minutes must be 1 to {MAX_QUERY_MINUTES}, not {}",
                self.minutes
            )));
        }
        if !(1..=MAX_QUERY_COUNT).contains(&self.count) {
            return Err(TopError::Query(format!(
                "count must be 1 to {MAX_QUERY_COUNT}, not {}",
                self.count
            )));
        }
        Ok(())
    }
}

/// Why the top keys cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopError {
    /// A query out of bounds.
    #[error("bad top-keys query: {0}")]
    Query(String),
    /// The store did not answer.
    #[error("cannot read the top keys: {0}")]
    Store(#[from] StoreError),
}

/// The stored reports of `fields` (one hash's), those that cannot be read left out and
/// counted.
pub fn decode_all(hashes: &[Vec<(String, String)>]) -> (Vec<Report>, usize) {
    let mut unreadable = 0usize;
    let reports = hashes
        .iter()
        .flatten()
        .filter_map(|(_, value)| match Report::decode(value) {
            Ok(report) => Some(report),
            Err(_) => {
                unreadable = unreadable.saturating_add(1);
                None
            }
        })
        .collect();
    (reports, unreadable)
}

/// The fleet's top denied keys `query` asks, from `store`, at `now_unix_s`.
pub async fn read(
    store: &dyn Store,
    query: &TopQuery,
    now_unix_s: u64,
) -> Result<Vec<TopDenied>, TopError> {
    query.check()?;
    let keys = report::window_keys(now_unix_s, query.minutes);
    let hashes = store.read_hashes(&keys).await?;
    let (reports, _) = decode_all(&hashes);
    Ok(merge::merge(
        &reports,
        &query.policy,
        query.limit.as_deref(),
        query.count,
    ))
}

/// Now in Unix seconds on the limiter's clock.
pub(crate) fn unix_s(clock: &LimiterClock) -> u64 {
    u64::try_from(clock.now_us().checked_div(1_000_000).unwrap_or(0)).unwrap_or(0)
}

/// Writes one report: the summaries that changed, in one pipelined write, never retried.
pub(crate) async fn report_once(
    recorder: &Recorder,
    store: &dyn Store,
    now_unix_s: u64,
) -> Result<(), StoreError> {
    let writes = recorder.report(now_unix_s);
    if writes.is_empty() {
        return Ok(());
    }
    let bound = recorder
        .options()
        .report_every
        .max(Duration::from_millis(100));
    let result = match tokio::time::timeout(bound, store.write_hashes(&writes)).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Timeout),
    };
    let label = if result.is_ok() { "ok" } else { "error" };
    ::metrics::counter!(metrics::TOP_REPORTS, "result" => label).increment(1);
    if result.is_err() {
        recorder.unwritten();
    }
    result
}

/// Exports every policy and limit's concentration and denials over the window (those
/// gauged before and gone now set to 0); `gauged` is what was exported last time.
async fn gauge_concentration(
    recorder: &Recorder,
    store: &dyn Store,
    now_unix_s: u64,
    gauged: &mut BTreeSet<(String, String)>,
) {
    let keys = report::window_keys(now_unix_s, recorder.options().window_minutes);
    let bound = recorder.options().report_every.max(Duration::from_secs(1));
    let Ok(Ok(hashes)) = tokio::time::timeout(bound, store.read_hashes(&keys)).await else {
        return;
    };
    let (reports, _) = decode_all(&hashes);
    let mut now_gauged = BTreeSet::new();
    for (policy, limit) in merge::limits_of(&reports).into_iter().take(MAX_GAUGED) {
        for top in merge::merge(&reports, &policy, Some(&limit), 0) {
            ::metrics::gauge!(metrics::DENIED_TOP10_SHARE, "policy" => policy.clone(), "limit" => limit.clone())
                .set(top.top10_share);
            #[allow(clippy::cast_precision_loss)]
            let denials = top.denials as f64;
            ::metrics::gauge!(metrics::DENIED_WINDOW, "policy" => policy.clone(), "limit" => limit.clone())
                .set(denials);
        }
        now_gauged.insert((policy, limit));
    }
    for (policy, limit) in gauged.difference(&now_gauged) {
        ::metrics::gauge!(metrics::DENIED_TOP10_SHARE, "policy" => policy.clone(), "limit" => limit.clone())
            .set(0.0);
        ::metrics::gauge!(metrics::DENIED_WINDOW, "policy" => policy.clone(), "limit" => limit.clone())
            .set(0.0);
    }
    *gauged = now_gauged;
}

/// Reports every `report_every` and reads the concentration every `concentration_every`,
/// until the recorder (its limiter) is dropped.
pub(crate) async fn run(recorder: Weak<Recorder>, store: Arc<dyn Store>, clock: LimiterClock) {
    let Some(options) = recorder
        .upgrade()
        .map(|recorder| recorder.options().clone())
    else {
        return;
    };
    let mut ticker = tokio::time::interval(options.report_every.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut gauged = BTreeSet::new();
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        ticker.tick().await;
        let Some(recorder) = recorder.upgrade() else {
            return;
        };
        let now = unix_s(&clock);
        let _ = report_once(&recorder, &*store, now).await;
        // Every `concentration_every`; and at every report until some limit is found (a
        // few reads of empty hashes), so the gauges appear within a report of a denial.
        let every = options.concentration_every;
        let due = !every.is_zero()
            && (gauged.is_empty() || last_read.is_none_or(|at| at.elapsed() >= every));
        if due {
            last_read = Some(tokio::time::Instant::now());
            gauge_concentration(&recorder, &*store, now, &mut gauged).await;
        }
    }
}
