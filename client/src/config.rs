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

use crate::algorithm::{Algorithm, Rate};
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

/// The algorithm a limit names, from exactly the parameters it takes.
fn algorithm(limit: &LimitConfig) -> Result<Algorithm, String> {
    let present: Vec<&str> = [
        ("capacity", limit.capacity.is_some()),
        ("rate", limit.rate.is_some()),
        ("refill_s", limit.refill_s.is_some()),
        ("refill_ms", limit.refill_ms.is_some()),
        ("limit", limit.limit.is_some()),
        ("window_s", limit.window_s.is_some()),
        ("window_ms", limit.window_ms.is_some()),
        ("max_burst", limit.max_burst.is_some()),
        ("count", limit.count.is_some()),
        ("period_s", limit.period_s.is_some()),
        ("max_wait_ms", limit.max_wait_ms.is_some()),
        ("ttl_ms", limit.ttl_ms.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    let allowed: &[&str] = match limit.algorithm.as_str() {
        "token_bucket" => &["capacity", "rate", "refill_s", "refill_ms", "max_wait_ms"],
        "sliding_window" | "fixed_window" | "sliding_log" => &["limit", "window_s", "window_ms"],
        "gcra" => &["max_burst", "count", "period_s"],
        "concurrency" => &["limit", "ttl_ms"],
        other => {
            return Err(format!(
                "algorithm is token_bucket, sliding_window, fixed_window, sliding_log, gcra or concurrency (got '{other}')"
            ));
        }
    };
    if let Some(stray) = present.iter().find(|name| !allowed.contains(name)) {
        return Err(format!(
            "'{stray}' is not a parameter of {}",
            limit.algorithm
        ));
    }
    let need = |value: Option<u64>, name: &str| value.ok_or(format!("'{name}' is missing"));
    let one_duration =
        |seconds: Option<u64>, millis: Option<u64>, what: &str| match (seconds, millis) {
            (Some(s), None) => Ok(Duration::from_secs(s)),
            (None, Some(ms)) => Ok(Duration::from_millis(ms)),
            _ => Err(format!("give exactly one of '{what}_s' and '{what}_ms'")),
        };
    let built = match limit.algorithm.as_str() {
        "token_bucket" => {
            let capacity = need(limit.capacity, "capacity")?;
            match (&limit.rate, limit.refill_s, limit.refill_ms) {
                (Some(rate), None, None) => {
                    let rate = Rate::per_second(rate).map_err(|error| error.to_string())?;
                    Algorithm::token_bucket_with_rate(capacity, rate)
                }
                (None, _, _) => Algorithm::token_bucket(
                    capacity,
                    one_duration(limit.refill_s, limit.refill_ms, "refill")?,
                ),
                _ => return Err("give either 'rate' or a refill time, not both".into()),
            }
        }
        "sliding_window" | "fixed_window" | "sliding_log" => {
            let units = need(limit.limit, "limit")?;
            let window = one_duration(limit.window_s, limit.window_ms, "window")?;
            match limit.algorithm.as_str() {
                "sliding_window" => Algorithm::sliding_window(units, window),
                "fixed_window" => Algorithm::fixed_window(units, window),
                _ => Algorithm::sliding_log(units, window),
            }
        }
        "concurrency" => Algorithm::concurrency(
            need(limit.limit, "limit")?,
            Duration::from_millis(need(limit.ttl_ms, "ttl_ms")?),
        ),
        _ => Algorithm::gcra(
            need(limit.max_burst, "max_burst")?,
            need(limit.count, "count")?,
            Duration::from_secs(need(limit.period_s, "period_s")?),
        ),
    };
    built.map_err(|error| error.to_string())
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
            .contains("policy 'p', limit 'l': limit must be at least 1")
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
            .contains("capacity must be at least 1")
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
