//! The limits the service enforces: the envoyproxy/ratelimit YAML format, read as it is
//! ([`load`] parses and validates one directory of files), and the lookup of a request
//! descriptor's rule ([`Domain::find`]).
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: api_key                    # any value: one counter per value
//!     rate_limit: {unit: minute, requests_per_unit: 100, name: per-key}
//!     descriptors:
//!       - key: path
//!         value: "/search*"           # wildcards: trailing or inner '*'
//!         rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
//!   - key: remote_address
//!     shadow_mode: true               # decides and reports, never denies
//!     rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window}
//! ```
//!
//! The one extension to the reference's format is per limit: `algorithm` (`fixed_window`,
//! the reference's behaviour and the default; `sliding_window`; `token_bucket` and `gcra`,
//! both with an optional `burst`; `concurrency`, at most `requests_per_unit` requests at once,
//! a slot not released freed after one `unit`).
//!
//! A second per-limit extension takes the limit from the policy store (plans, see the
//! client's `plans` module): `tenant_key: <descriptor key>` on a named limit means the
//! tenant is the value of the request's entry with that key (the rule's own key or one of
//! its parents'), and the tenant's effective limit called `name` replaces the YAML one,
//! which stays the default (no plan for the tenant, the limit not in it, the store never
//! read). `concurrency` limits are not plan limits.
//!
//! ```yaml
//!   - key: tenant
//!     rate_limit: {unit: minute, requests_per_unit: 100, name: per-minute,
//!                  algorithm: sliding_window, tenant_key: tenant}
//! ```

#[cfg(test)]
mod cases;
mod descriptors;
mod error;
mod load;
mod pattern;
mod reader;
mod region;
mod yaml;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_client::algorithm::AlgorithmError;
use redis_ratelimit_client::{Algorithm, Rate};
use redis_ratelimit_core::kinds::Kind;

#[cfg(test)]
pub use self::load::assemble;
pub use self::load::{ConfigError, config_files, load};
pub use self::pattern::ValuePattern;
pub use self::region::{HomeBackend, Parts, RegionConfig, load_region};
pub use self::yaml::{FileBounds, read_head};

/// The time unit of a `rate_limit`, as in the reference's `rls_conf.proto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86,400 s.
    Day,
    /// Seven days.
    Week,
    /// 30 days, as the reference counts a month.
    Month,
    /// 365 days, as the reference counts a year.
    Year,
}

impl Unit {
    /// The unit's length in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => 86_400,
            Self::Week => 604_800,
            Self::Month => 2_592_000,
            Self::Year => 31_536_000,
        }
    }

    /// The unit as the protos name it (`SECOND` … `YEAR`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Second => "SECOND",
            Self::Minute => "MINUTE",
            Self::Hour => "HOUR",
            Self::Day => "DAY",
            Self::Week => "WEEK",
            Self::Month => "MONTH",
            Self::Year => "YEAR",
        }
    }

    /// The unit named as in the config (`second` … `year`, any case as the reference
    /// accepts `SECOND`).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Self::Second,
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            "week" => Self::Week,
            "month" => Self::Month,
            "year" => Self::Year,
            _ => return None,
        })
    }
}

/// Which algorithm decides a limit (the `algorithm:` extension).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    /// Windows aligned to the epoch, as the reference counts (the default).
    #[default]
    FixedWindow,
    /// The sliding-window counter: no burst at window boundaries.
    SlidingWindow,
    /// A token bucket refilled at `requests_per_unit` per `unit`, holding `burst`.
    TokenBucket,
    /// GCRA: `requests_per_unit` per `unit`, `burst` at once.
    Gcra,
    /// At most `requests_per_unit` requests at once (released through `POST /v1/release`).
    Concurrency,
}

impl AlgorithmKind {
    /// Every kind the service takes, in the order its errors list them.
    pub const ALL: [AlgorithmKind; 5] = [
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::TokenBucket,
        Self::Gcra,
        Self::Concurrency,
    ];

    /// The core's kind: its configuration name is this kind's (the `kinds!` table's column).
    fn kind(self) -> Kind {
        match self {
            Self::FixedWindow => Kind::FixedWindow,
            Self::SlidingWindow => Kind::SlidingWindow,
            Self::TokenBucket => Kind::TokenBucket,
            Self::Gcra => Kind::Gcra,
            Self::Concurrency => Kind::Concurrency,
        }
    }

    /// The kind named in the config, by the core's configuration name (the service has no
    /// sliding log).
    pub fn parse(text: &str) -> Option<Self> {
        let kind = Kind::from_config_name(text)?;
        Self::ALL.into_iter().find(|service| service.kind() == kind)
    }

    /// The config's name of the kind (also part of every key, so that changing a limit's
    /// algorithm starts a new counter instead of meeting a key of another type).
    pub fn as_str(self) -> &'static str {
        self.kind().config_name()
    }

    /// The names the config takes, for an error: "fixed_window, sliding_window, ...".
    pub fn names() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// Whether the kind takes a `burst`.
    pub fn has_burst(self) -> bool {
        matches!(self, Self::TokenBucket | Self::Gcra)
    }
}

/// A limit: what a `rate_limit` block says, or a request's `limit` override.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    /// Requests per unit (0: every request is denied, as in the reference).
    pub requests_per_unit: u64,
    /// The unit.
    pub unit: Unit,
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// Token bucket and GCRA: units at once (default `requests_per_unit`).
    pub burst: Option<u64>,
}

impl LimitSpec {
    /// The client library's algorithm for the limit (`None` when `requests_per_unit` is 0:
    /// nothing is ever admitted, no counter is kept).
    pub fn algorithm(&self) -> Result<Option<Algorithm>, AlgorithmError> {
        if self.requests_per_unit == 0 {
            return Ok(None);
        }
        let per = self.requests_per_unit;
        let window = Duration::from_secs(self.unit.seconds());
        let burst = self.burst.unwrap_or(per);
        let algorithm = match self.algorithm {
            AlgorithmKind::FixedWindow => Algorithm::fixed_window(per, window)?,
            AlgorithmKind::SlidingWindow => Algorithm::sliding_window(per, window)?,
            AlgorithmKind::TokenBucket => {
                Algorithm::token_bucket_with_rate(burst, Rate::per(per, window)?)?
            }
            AlgorithmKind::Gcra => Algorithm::gcra(burst.saturating_sub(1), per, window)?,
            AlgorithmKind::Concurrency => Algorithm::concurrency(per, window)?,
        };
        Ok(Some(algorithm))
    }

    /// A short text naming the limit's parameters, part of its Redis key: a changed limit
    /// gets a fresh counter rather than a key holding another algorithm's state.
    pub fn key_suffix(&self) -> String {
        let mut suffix = format!("{}:{}", self.algorithm.as_str(), self.unit.seconds());
        if let Some(burst) = self.burst.filter(|_| self.algorithm.has_burst()) {
            suffix.push_str(&format!(":b{burst}"));
        }
        suffix
    }
}

/// A limit as checks use it, built once (when the config is read): the request path only
/// reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltLimit {
    /// What the config says.
    pub spec: LimitSpec,
    /// Its algorithm (`None`: 0 requests per unit, every request denied).
    pub algorithm: Option<Algorithm>,
    /// The end of its Redis key ([`LimitSpec::key_suffix`]).
    pub key_suffix: String,
}

impl BuiltLimit {
    /// Builds `spec`'s algorithm and key suffix; refused if the client library cannot
    /// enforce it.
    pub fn build(spec: LimitSpec) -> Result<Self, AlgorithmError> {
        Ok(Self {
            algorithm: spec.algorithm()?,
            key_suffix: spec.key_suffix(),
            spec,
        })
    }
}

/// A `rate_limit` block of the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleLimit {
    /// The limit (`None`: `unlimited: true`).
    pub spec: Option<BuiltLimit>,
    /// The limit's `name` (reported in statuses, headers and metadata).
    pub name: Option<String>,
    /// Names of the limits this one replaces when both apply to a request.
    pub replaces: Vec<String>,
    /// Plans: the descriptor key whose value names the tenant whose limit `name` of the
    /// policy store replaces `spec` (the default).
    pub tenant_key: Option<String>,
}

/// Where something was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: Arc<PathBuf>,
    /// Its line, from 1.
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One `descriptors` entry of the config: a key, an optional value (or pattern), a limit and
/// nested descriptors. A rule with neither a limit nor nested rules matches and applies no
/// limit (the reference's "whitelisted" descriptor).
#[derive(Clone, Debug)]
pub struct Rule {
    /// The entry key it matches.
    pub key: String,
    /// The value it matches: `None` matches any value (one counter per value).
    pub value: Option<ValuePattern>,
    /// Its limit, if any.
    pub limit: Option<RuleLimit>,
    /// Decide and report, never deny.
    pub shadow_mode: bool,
    /// Metrics name the request's own values rather than the rule.
    pub detailed_metric: bool,
    /// Metrics name the request's value at this level (for a rule without a value, or a
    /// wildcard one).
    pub value_to_metric: bool,
    /// A wildcard rule whose matching values share one counter (the pattern is the key's
    /// value) instead of one counter each.
    pub share_threshold: bool,
    /// The reference's `metadata`: returned in the response's dynamic metadata for the
    /// descriptors that passed, when asked for (`--response-dynamic-metadata`).
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Nested rules (matched by the next entry of a descriptor).
    pub children: Vec<Rule>,
    /// The rule's path in the config (`key=value.key`), its identity in metrics.
    pub path: String,
    /// Where it was written.
    pub location: Location,
}

/// One `domain` and its rules.
#[derive(Clone, Debug)]
pub struct Domain {
    /// The domain.
    pub name: String,
    /// Its top-level rules.
    pub rules: Vec<Rule>,
    /// The file it came from.
    pub location: Location,
}

/// What a descriptor's entries matched: the rule reached by its last entry, if it has a
/// limit, and the rule each entry matched on the way.
#[derive(Clone, Debug)]
pub struct Found<'a> {
    /// The rule.
    pub rule: &'a Rule,
    /// Its limit.
    pub limit: &'a RuleLimit,
    /// The rule each entry matched, in order (the last is `rule`).
    pub path: Vec<&'a Rule>,
}

impl Found<'_> {
    /// The value entry `index` counts under: the request's, or for a `share_threshold`
    /// rule its pattern (every matching value shares the counter).
    pub fn counted_value<'v>(&'v self, index: usize, value: &'v str) -> &'v str {
        match self.path.get(index) {
            Some(Rule {
                share_threshold: true,
                value: Some(pattern),
                ..
            }) => pattern.as_str(),
            _ => value,
        }
    }

    /// The rule as metrics name it: its path in the config (`key=value.key`), with the
    /// request's values where the rule asks for them (`detailed_metric` on the rule reached,
    /// `value_to_metric` per level), a `share_threshold` level always by its pattern.
    pub fn metric_name(&self, entries: &[(String, String)]) -> String {
        let detailed = self.rule.detailed_metric;
        let mut name = String::new();
        for (rule, (key, value)) in self.path.iter().zip(entries) {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(key);
            let shown = match &rule.value {
                Some(pattern) if rule.share_threshold => Some(pattern.as_str()),
                Some(ValuePattern::Exact(exact)) => Some(exact.as_str()),
                _ if detailed || rule.value_to_metric => Some(value.as_str()),
                Some(pattern) => Some(pattern.as_str()),
                None => None,
            };
            if let Some(shown) = shown {
                name.push('=');
                name.push_str(shown);
            }
        }
        name
    }
}

impl Domain {
    /// The rule of a descriptor, matched as the reference does: entry by entry, each level
    /// trying an exact value, then the wildcard values in config order, then the rule with
    /// no value; the limit applies only if the descriptor's last entry lands on a rule that
    /// has one.
    pub fn find<'a>(&'a self, entries: &[(String, String)]) -> Option<Found<'a>> {
        let mut level: &[Rule] = &self.rules;
        let count = entries.len();
        let mut path = Vec::with_capacity(count);
        for (index, (key, value)) in entries.iter().enumerate() {
            let rule = match_level(level, key, value)?;
            path.push(rule);
            let last = index.saturating_add(1) == count;
            if last {
                return rule.limit.as_ref().map(|limit| Found { rule, limit, path });
            }
            if rule.children.is_empty() {
                return None;
            }
            level = &rule.children;
        }
        None
    }
}

fn match_level<'a>(rules: &'a [Rule], key: &str, value: &str) -> Option<&'a Rule> {
    let same_key = || rules.iter().filter(move |rule| rule.key == key);
    same_key()
        .find(|rule| matches!(&rule.value, Some(ValuePattern::Exact(exact)) if exact == value))
        .or_else(|| {
            same_key().find(|rule| {
                matches!(&rule.value, Some(pattern @ ValuePattern::Glob(..)) if pattern.matches(value))
            })
        })
        .or_else(|| same_key().find(|rule| rule.value.is_none()))
}

/// Every domain of a config directory.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The domains by name.
    pub domains: HashMap<String, Domain>,
    /// The files read, sorted.
    pub files: Vec<PathBuf>,
}

impl Config {
    /// Whether some limit takes its value from the policy store (`tenant_key`).
    pub fn uses_plans(&self) -> bool {
        fn any(rules: &[Rule]) -> bool {
            rules.iter().any(|rule| {
                rule.limit
                    .as_ref()
                    .is_some_and(|limit| limit.tenant_key.is_some())
                    || any(&rule.children)
            })
        }
        self.domains.values().any(|domain| any(&domain.rules))
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }
}
