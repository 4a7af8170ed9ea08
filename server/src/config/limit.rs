//! A limit as the config writes it ([`LimitSpec`]: a number per unit, an algorithm, a
//! burst) and as checks use it ([`BuiltLimit`], built once), and a rule's `rate_limit` block
//! ([`RuleLimit`]).

use std::time::Duration;

use redis_ratelimit_client::algorithm::AlgorithmError;
use redis_ratelimit_client::{Algorithm, Rate};
use redis_ratelimit_core::kinds::Kind;

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
