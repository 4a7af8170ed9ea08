//! Policies read from a TOML file, so operators change limits without a rebuild.
//!
//! ```
//! # fn main() -> Result<(), redis_ratelimit_client::config::ConfigError> {
//! let policies = redis_ratelimit_client::config::from_toml(r#"
//! [[policy]]
//! name = "api"
//! fallback = "local"        # open | closed | local (default local)
//! timeout_ms = 50           # store timeout (default 50)
//! deny_cache = true         # default true
//! lease = { units = 10, max_units = 40, lifetime_ms = 1000 }   # optional
//! # from_store = "tenant"  # limits from the policy store for input `tenant` (plans);
//! #                        # the limits below are then its defaults
//!
//! [[policy.limit]]
//! name = "per-key"
//! key = "rl:{{{api_key}}}"  # {input} placeholders; {{ and }} are literal braces
//! algorithm = "token_bucket"
//! capacity = 100
//! refill_s = 60             # or refill_ms, or rate = "1.5" (tokens per second)
//! ## max_wait_ms = 500      # pace instead of refusing (MAXWAIT; not with leases)
//!
//! [[policy.limit]]
//! name = "daily"
//! key = "rl:{{{api_key}}}:day"
//! algorithm = "fixed_window"   # sliding_window | fixed_window | sliding_log
//! limit = 10000
//! window_s = 86400             # or window_ms
//! weight = 1                   # optional
//!
//! [[policy.limit]]
//! name = "burst"
//! key = "rl:{{{api_key}}}:gcra"
//! algorithm = "gcra"
//! max_burst = 9
//! count = 10
//! period_s = 1
//!
//! ## An in-flight limit holds a slot per request: its policy cannot be leased.
//! [[policy]]
//! name = "uploads"
//!
//! [[policy.limit]]
//! name = "in-flight"
//! key = "rl:{{{api_key}}}:inflight"
//! algorithm = "concurrency"    # at most `limit` requests at once
//! limit = 5
//! ttl_ms = 30000               # a slot never released frees itself after this
//! "#)?;
//! assert_eq!(policies.len(), 2);
//! assert_eq!(policies[0].inputs(), ["api_key"]);
//! # Ok(()) }
//! ```
//!
//! Every field is checked: unknown fields, missing parameters and parameters that belong to
//! another algorithm are refused with the policy and limit named, and so is a file without
//! any policy (every check would then be refused).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use redis_ratelimit_core::kinds::Kind;
use redis_ratelimit_wire::args::{self, quota::Param};
use redis_ratelimit_wire::error::CommandError;

use crate::algorithm::{Algorithm, AlgorithmError, Rate};
use crate::policy::{Fallback, Lease, Limit, Policy, PolicyError};

/// Why a configuration is refused.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Not valid TOML, or fields of the wrong type or unknown.
    Syntax(String),
    /// A policy or limit that does not make sense.
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(
                f,
                "cannot read the configuration file {}: {error}",
                path.display()
            ),
            Self::Syntax(error) => write!(f, "bad configuration: {error}"),
            Self::Invalid(error) => write!(f, "bad configuration: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default, rename = "policy")]
    policies: Vec<PolicyConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyConfig {
    name: String,
    fallback: Option<String>,
    timeout_ms: Option<u64>,
    deny_cache: Option<bool>,
    lease: Option<LeaseConfig>,
    /// Plans: the input naming the tenant whose limits come from the policy store.
    from_store: Option<String>,
    #[serde(default, rename = "limit")]
    limits: Vec<LimitConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseConfig {
    units: u64,
    max_units: Option<u64>,
    lifetime_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitConfig {
    name: String,
    key: String,
    algorithm: String,
    weight: Option<u64>,
    capacity: Option<u64>,
    rate: Option<String>,
    refill_s: Option<u64>,
    refill_ms: Option<u64>,
    limit: Option<u64>,
    window_s: Option<u64>,
    window_ms: Option<u64>,
    max_burst: Option<u64>,
    count: Option<u64>,
    period_s: Option<u64>,
    max_wait_ms: Option<u64>,
    ttl_ms: Option<u64>,
}

/// Reads policies from a TOML file.
pub fn from_file(path: impl AsRef<Path>) -> Result<Vec<Policy>, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    from_toml(&text)
}

/// Reads policies from TOML text.
pub fn from_toml(text: &str) -> Result<Vec<Policy>, ConfigError> {
    let file: File =
        toml::from_str(text).map_err(|error| ConfigError::Syntax(error.to_string()))?;
    if file.policies.is_empty() {
        return Err(ConfigError::Invalid(
            "no policy: add at least one [[policy]] with a [[policy.limit]] \
             (without one, every check is refused as naming an unknown policy)"
                .into(),
        ));
    }
    file.policies.into_iter().map(policy).collect()
}

fn policy(config: PolicyConfig) -> Result<Policy, ConfigError> {
    let name = config.name;
    let invalid = |error: PolicyError| ConfigError::Invalid(format!("policy '{name}': {error}"));
    let mut builder = match &config.from_store {
        Some(tenant_input) => Policy::from_store(&name, tenant_input),
        None => Policy::builder(&name),
    };
    if let Some(fallback) = config.fallback {
        builder = builder.fallback(match fallback.as_str() {
            "open" => Fallback::Open,
            "closed" => Fallback::Closed,
            "local" => Fallback::Local,
            other => {
                return Err(ConfigError::Invalid(format!(
                    "policy '{name}': fallback is open, closed or local (got '{other}')"
                )));
            }
        });
    }
    if let Some(ms) = config.timeout_ms {
        builder = builder.timeout(Duration::from_millis(ms));
    }
    if let Some(enabled) = config.deny_cache {
        builder = builder.deny_cache(enabled);
    }
    if let Some(lease) = config.lease {
        let mut built = Lease::new(lease.units);
        if let Some(max_units) = lease.max_units {
            built = built.max_units(max_units);
        }
        if let Some(ms) = lease.lifetime_ms {
            built = built.lifetime(Duration::from_millis(ms));
        }
        builder = builder.lease(built);
    }
    for limit in config.limits {
        let limit_name = limit.name.clone();
        let algorithm = algorithm(&limit).map_err(|error| {
            ConfigError::Invalid(format!("policy '{name}', limit '{limit_name}': {error}"))
        })?;
        let mut built = Limit::new(&limit.name, algorithm, &limit.key).map_err(invalid)?;
        if let Some(weight) = limit.weight {
            built = built.weight(weight);
        }
        if let Some(ms) = limit.max_wait_ms {
            built = built.max_wait(Duration::from_millis(ms)).map_err(invalid)?;
        }
        builder = builder.limit(built);
    }
    builder.build().map_err(invalid)
}

impl LimitConfig {
    /// A whole-number field by name (the fields of every algorithm's parameters).
    fn number(&self, name: &str) -> Option<u64> {
        match name {
            "capacity" => self.capacity,
            "refill_s" => self.refill_s,
            "refill_ms" => self.refill_ms,
            "limit" => self.limit,
            "window_s" => self.window_s,
            "window_ms" => self.window_ms,
            "max_burst" => self.max_burst,
            "count" => self.count,
            "period_s" => self.period_s,
            "max_wait_ms" => self.max_wait_ms,
            "ttl_ms" => self.ttl_ms,
            _ => None,
        }
    }

    /// The parameter fields given, in [`PARAMETER_FIELDS`] order.
    fn present(&self) -> Vec<&'static str> {
        PARAMETER_FIELDS
            .iter()
            .copied()
            .filter(|name| match *name {
                "rate" => self.rate.is_some(),
                number => self.number(number).is_some(),
            })
            .collect()
    }
}

/// Every field that is a parameter of some algorithm.
const PARAMETER_FIELDS: &[&str] = &[
    "capacity",
    "rate",
    "refill_s",
    "refill_ms",
    "limit",
    "window_s",
    "window_ms",
    "max_burst",
    "count",
    "period_s",
    "max_wait_ms",
    "ttl_ms",
];

/// The fields a parameter may be given as: its name, or for a duration its name in seconds
/// or in milliseconds, and a rate as the time its tokens take to refill instead.
fn fields(param: Param) -> Vec<String> {
    match param {
        Param::Count(name) | Param::Integer(name) | Param::Millis(name) => vec![name.into()],
        Param::Rate(name) => vec![name.into(), "refill_s".into(), "refill_ms".into()],
        Param::Seconds(name) => vec![format!("{name}_s"), format!("{name}_ms")],
        Param::WholeSeconds(name) => vec![format!("{name}_s")],
    }
}

/// Why a limit's algorithm and parameters are refused.
#[derive(Debug, thiserror::Error)]
enum LimitError {
    /// An algorithm of no known name.
    #[error("algorithm is {names} (got '{got}')")]
    UnknownAlgorithm {
        /// The names there are (`a, b or c`).
        names: String,
        /// The name given.
        got: String,
    },
    /// A field the algorithm takes no parameter for.
    #[error("'{stray}' is not a parameter of {algorithm}")]
    Stray {
        /// The field.
        stray: String,
        /// The algorithm's name.
        algorithm: &'static str,
    },
    /// A parameter not given.
    #[error("'{0}' is missing")]
    Missing(String),
    /// A duration given twice or not at all.
    #[error("give exactly one of '{seconds}' and '{millis}'")]
    OneDuration {
        /// In seconds.
        seconds: String,
        /// In milliseconds.
        millis: String,
    },
    /// A rate and a refill time both given.
    #[error("give either 'rate' or a refill time, not both")]
    RateAndRefill,
    /// What the server's rules refuse.
    #[error("{0}")]
    Algorithm(#[from] AlgorithmError),
}

/// The algorithm a limit names, from exactly the parameters it takes, as the arguments of
/// its command: checked by the server's parser.
fn algorithm(limit: &LimitConfig) -> Result<Algorithm, LimitError> {
    let Some(kind) = Kind::from_config_name(&limit.algorithm) else {
        let names: Vec<&str> = Kind::ALL.iter().map(|kind| kind.config_name()).collect();
        let (last, rest) = names.split_last().unwrap_or((&"", &[]));
        return Err(LimitError::UnknownAlgorithm {
            names: format!("{} or {last}", rest.join(", ")),
            got: limit.algorithm.clone(),
        });
    };
    let params = args::quota::params(kind);
    let mut allowed: Vec<String> = params.iter().copied().flat_map(fields).collect();
    if kind == Kind::TokenBucket {
        // Pacing (MAXWAIT) is for token buckets only.
        allowed.push("max_wait_ms".into());
    }
    if let Some(stray) = limit
        .present()
        .into_iter()
        .find(|name| !allowed.iter().any(|field| field == name))
    {
        return Err(LimitError::Stray {
            stray: stray.to_string(),
            algorithm: kind.config_name(),
        });
    }
    let need = |name: &str| {
        limit
            .number(name)
            .ok_or_else(|| LimitError::Missing(name.to_string()))
    };
    let one_duration = |what: &str| {
        let (seconds, millis) = (format!("{what}_s"), format!("{what}_ms"));
        match (limit.number(&seconds), limit.number(&millis)) {
            (Some(s), None) => Ok(Duration::from_secs(s)),
            (None, Some(ms)) => Ok(Duration::from_millis(ms)),
            _ => Err(LimitError::OneDuration { seconds, millis }),
        }
    };
    let mut arguments: Vec<String> = Vec::with_capacity(params.len());
    for param in params {
        let argument = match *param {
            Param::Count(name) | Param::Integer(name) | Param::Millis(name) => {
                need(name)?.to_string()
            }
            Param::WholeSeconds(name) => need(&format!("{name}_s"))?.to_string(),
            Param::Seconds(name) => {
                let window = one_duration(name)?;
                format!("{}.{:06}", window.as_secs(), window.subsec_micros())
            }
            Param::Rate(_) => match (&limit.rate, limit.refill_s, limit.refill_ms) {
                (Some(rate), None, None) => rate.clone(),
                (None, _, _) => {
                    // Tokens refilled over a time: the rate of the count before it.
                    let tokens = arguments.last().map_or("", String::as_str);
                    let tokens = args::positive_integer("capacity", tokens.as_bytes())
                        .map_err(|error| AlgorithmError::from(CommandError::from(error)))?;
                    let rate = Rate::per(tokens, one_duration("refill")?)?;
                    rate.as_str().to_string()
                }
                _ => return Err(LimitError::RateAndRefill),
            },
        };
        arguments.push(argument);
    }
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    Ok(Algorithm::from_arguments(kind, &arguments)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [[policy]]
        name = "api"
        fallback = "closed"
        timeout_ms = 20
        lease = { units = 10, lifetime_ms = 500 }

        [[policy.limit]]
        name = "per-key"
        key = "rl:{{{api_key}}}"
        algorithm = "token_bucket"
        capacity = 100
        refill_s = 60

        [[policy.limit]]
        name = "daily"
        key = "rl:{{{api_key}}}:day"
        algorithm = "fixed_window"
        limit = 10000
        window_s = 86400
        weight = 2

        [[policy]]
        name = "partner"

        [[policy.limit]]
        name = "queue"
        key = "queue"
        algorithm = "token_bucket"
        capacity = 1
        rate = "10"
        max_wait_ms = 1000

        [[policy.limit]]
        name = "slots"
        key = "slots"
        algorithm = "concurrency"
        limit = 3
        ttl_ms = 30000

        [[policy.limit]]
        name = "gcra"
        key = "partner"
        algorithm = "gcra"
        max_burst = 9
        count = 10
        period_s = 1
    "#;

    #[test]
    fn reads_every_option() {
        let policies = from_toml(EXAMPLE).unwrap();
        let [api, partner] = policies.as_slice() else {
            panic!("two policies expected");
        };
        assert_eq!(api.fallback(), Fallback::Closed);
        assert_eq!(api.timeout(), Duration::from_millis(20));
        assert_eq!(
            api.lease(),
            Some(Lease::new(10).lifetime(Duration::from_millis(500)))
        );
        assert_eq!(
            api.limits()[0].algorithm().wire_args(),
            ["100", "1.666666667"]
        );
        assert_eq!(api.limits()[1].weight_units(), 2);
        assert_eq!(api.limits()[1].key().as_str(), "rl:{{{api_key}}}:day");
        assert_eq!(partner.fallback(), Fallback::Local);
        assert_eq!(partner.limits()[0].paced(), Some(Duration::from_secs(1)));
        assert_eq!(
            partner.limits()[1].algorithm(),
            &Algorithm::concurrency(3, Duration::from_secs(30)).unwrap()
        );
        assert_eq!(partner.limits()[2].algorithm().quota(), 10);
    }

    fn error_of(text: &str) -> String {
        from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn names_what_is_wrong() {
        let base = "[[policy]]\nname = \"p\"\n[[policy.limit]]\nname = \"l\"\nkey = \"k\"\n";
        assert!(
            error_of(&format!(
                "{base}algorithm = \"token_bucket\"\ncapacity = 5\nwindow_s = 3"
            ))
            .contains("'window_s' is not a parameter of token_bucket")
        );
        assert!(
            error_of(&format!("{base}algorithm = \"fixed_window\"\nlimit = 5"))
                .contains("give exactly one of 'window_s' and 'window_ms'")
        );
        assert!(
            error_of(&format!("{base}algorithm = \"leaky\"")).contains("algorithm is token_bucket")
        );
        assert!(
            error_of(&format!(
                "{base}algorithm = \"fixed_window\"\nlimit = 0\nwindow_s = 1"
            ))
            .contains("policy 'p', limit 'l': limit must be greater than 0 (got '0')")
        );
        assert!(
            error_of(&format!("{base}algorithm = \"gcra\"\ncolor = 1")).contains("unknown field")
        );
        assert!(error_of("[[policy]]\nname = \"p\"").contains("policy 'p' has no limits"));
        assert!(
            error_of(&format!(
                "{base}algorithm = \"token_bucket\"\ncapacity = 5\nrate = \"x\""
            ))
            .contains("rate must be a positive decimal")
        );
        assert!(error_of("").contains("no policy"));
        assert!(error_of("# nothing yet\n").contains("no policy"));
        assert!(
            error_of(&format!(
                "lease = {{ units = 0 }}\n{base}algorithm = \"token_bucket\"\ncapacity = 5\nrefill_s = 1"
            ))
            .contains("unknown field")
        );
        let leased = "[[policy]]\nname = \"p\"\nlease = { units = 0 }\n[[policy.limit]]\n\
                      name = \"l\"\nkey = \"k\"\nalgorithm = \"token_bucket\"\ncapacity = 5\nrefill_s = 1";
        assert!(error_of(leased).contains("policy 'p': a lease of 0 units claims nothing"));
        assert!(
            error_of(&format!(
                "{base}algorithm = \"token_bucket\"\ncapacity = 0\nrefill_s = 60"
            ))
            .contains("capacity must be greater than 0 (got '0')")
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let error = from_file("/nonexistent/limits.toml")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("/nonexistent/limits.toml") && error.contains("cannot read"),
            "{error}"
        );
    }
}
