//! The text forms of the policy store: a named limit (`per-minute=sliding:1000/60s`), a
//! duration (`90s`, `7d`), a tenant id and an override pattern (`acme`, `acme-*`).
//!
//! Limits are checked by the [`Algorithm`] constructors, that is by the rules the server
//! applies, so a limit the store accepts is one every replica can enforce.

use std::fmt;
use std::time::Duration;

use redis_ratelimit_core::kinds::{Kind, Quota, or_list};
use redis_ratelimit_core::sliding_log::DEFAULT_MAX_LOG_ENTRIES;

use redis_ratelimit_client::Algorithm;

/// The kind of a plan's limit, by the name core's `kinds!` table gives it (its short name,
/// `token`, `sliding`..., or its configuration name, `token_bucket`...); in-flight limits
/// are not part of plans (a slot is held by one request and released by the replica that
/// took it).
fn plan_kind(name: &str) -> Option<Kind> {
    Kind::from_config_name(name).filter(|kind| is_plan_kind(*kind))
}

/// Whether a plan's limit can be of this kind.
fn is_plan_kind(kind: Kind) -> bool {
    kind != Kind::Concurrency
}

/// Why a text of the policy store is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

fn refuse<T>(message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(message.into()))
}

/// One named limit: `NAME=KIND:AMOUNT/PERIOD`, for example `per-day=fixed:100000/1d`,
/// with its algorithm built when the limit was read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitSpec {
    name: String,
    kind: Kind,
    amount: u64,
    period: Duration,
    algorithm: Built,
}

/// A limit's algorithm, built once from its kind, amount and period: those fields decide
/// it, so it takes no part in comparing, ordering or hashing limits (every two are equal).
#[derive(Clone, Debug)]
struct Built(Algorithm);

impl PartialEq for Built {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Built {}

impl PartialOrd for Built {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Built {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl std::hash::Hash for Built {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// The short names of the kinds a plan's limit can be, in the table's order:
/// `token, sliding, fixed, log or gcra`.
pub fn plan_kind_names() -> String {
    or_list(
        Kind::ALL
            .iter()
            .filter(|kind| is_plan_kind(**kind))
            .map(|kind| kind.short_name()),
    )
}

/// The grammar, for error messages (a `Display`, so the kinds it lists are the table's).
#[derive(Clone, Copy, Debug)]
pub struct LimitSyntax;

/// The grammar, for error messages: `{LIMIT_SYNTAX}` in a format string.
pub const LIMIT_SYNTAX: LimitSyntax = LimitSyntax;

impl std::fmt::Display for LimitSyntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NAME=KIND:AMOUNT/PERIOD with KIND {} and PERIOD a whole number of ms, s, m, h or d \
             (per-minute=sliding:1000/60s)",
            plan_kind_names()
        )
    }
}

impl LimitSpec {
    /// Parses and validates `NAME=KIND:AMOUNT/PERIOD`.
    pub fn parse(text: &str) -> Result<LimitSpec, SpecError> {
        let message = |why: &str| format!("bad limit '{text}': {why}; write {LIMIT_SYNTAX}");
        let bad = |why: &str| refuse(message(why));
        let Some((name, rest)) = text.split_once('=') else {
            return bad("no '='");
        };
        let Some((kind, rest)) = rest.split_once(':') else {
            return bad("no ':' after the algorithm");
        };
        let Some((amount, period)) = rest.split_once('/') else {
            return bad("no '/' before the period");
        };
        check_limit_name(name).map_err(|error| SpecError(message(&error.0)))?;
        let Some(kind) = plan_kind(kind) else {
            return bad(&format!("unknown algorithm '{kind}'"));
        };
        let Ok(amount) = amount.parse::<u64>() else {
            return bad(&format!("'{amount}' is not a whole number"));
        };
        let period = parse_duration(period).map_err(|error| SpecError(message(&error.0)))?;
        let algorithm = build(kind, amount, period)
            .map_err(|error| SpecError(format!("bad limit '{text}': {error}")))?;
        Ok(LimitSpec {
            name: name.to_string(),
            kind,
            amount,
            period,
            algorithm: Built(algorithm),
        })
    }

    /// The limit a policy's default algorithm stands for (`None` for an in-flight limit, or
    /// a token bucket whose rate is not "capacity per period").
    pub fn from_algorithm(name: &str, algorithm: &Algorithm) -> Option<LimitSpec> {
        let (amount, period) = match algorithm.as_quota() {
            Quota::Gcra(params) => (
                u64::try_from(params.count()).ok()?,
                Duration::from_secs(u64::try_from(params.period_s()).ok()?),
            ),
            _ => (algorithm.quota(), algorithm.window()),
        };
        let kind = Some(algorithm.kind()).filter(|kind| is_plan_kind(*kind))?;
        let built = build(kind, amount, period).ok()?;
        (built == *algorithm).then(|| LimitSpec {
            name: name.to_string(),
            kind,
            amount,
            period,
            algorithm: Built(built),
        })
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its algorithm kind (part of its key).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The algorithm with its parameters, by the server's rules (built when the limit was
    /// read).
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm.0
    }
}

/// The algorithm of `amount` per `period` of `kind`, by the server's rules.
fn build(
    kind: Kind,
    amount: u64,
    period: Duration,
) -> Result<Algorithm, redis_ratelimit_client::algorithm::AlgorithmError> {
    match kind {
        Kind::TokenBucket => Algorithm::token_bucket(amount, period),
        Kind::SlidingWindow => Algorithm::sliding_window(amount, period),
        Kind::FixedWindow => Algorithm::fixed_window(amount, period),
        Kind::SlidingLog => Algorithm::sliding_log(amount, period),
        Kind::Gcra => Algorithm::gcra(amount.saturating_sub(1), amount, period),
        // Never parsed into a plan's limit (plan_kind): the algorithm it would be.
        Kind::Concurrency => Algorithm::concurrency(amount, period),
    }
}

/// The server settings that bound a limit beyond its own rules: a limit above them is
/// refused by the server on every check, so each would be decided by the client's
/// fallback. Read from the server when a limit is written
/// ([`plan_store::server_limits`](crate::plan_store::server_limits)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// `ratelimit.max-log-entries`: the largest sliding log limit.
    pub max_log_entries: u64,
    /// `None` when read from the server; else why its defaults are assumed (the setting
    /// could not be read: the Functions library has none, an ACL may refuse `CONFIG`).
    pub assumed: Option<String>,
}

impl ServerLimits {
    /// The module's defaults (also the Functions library's fixed bounds), assumed because
    /// of `why`.
    pub fn defaults(why: impl Into<String>) -> ServerLimits {
        ServerLimits {
            max_log_entries: DEFAULT_MAX_LOG_ENTRIES,
            assumed: Some(why.into()),
        }
    }

    /// Refuses a limit the server would refuse on every check.
    pub fn check(&self, spec: &LimitSpec) -> Result<(), SpecError> {
        if spec.kind != Kind::SlidingLog || spec.amount <= self.max_log_entries {
            return Ok(());
        }
        let source = match &self.assumed {
            None => "this server's ratelimit.max-log-entries".to_string(),
            Some(why) => format!(
                "the default of ratelimit.max-log-entries, assumed because the server's setting \
                 could not be read: {why}"
            ),
        };
        refuse(format!(
            "limit '{spec}': a sliding log holds at most {} entries ({source}), so the server \
             would refuse every check of it and the client's fallback would decide each one; \
             lower the amount, use sliding (constant memory), or raise \
             ratelimit.max-log-entries on every server first",
            self.max_log_entries
        ))
    }
}

impl fmt::Display for LimitSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}:{}/{}",
            self.name,
            self.kind.short_name(),
            self.amount,
            DurationText(self.period)
        )
    }
}

/// A duration written in its largest exact unit: `60s` is `1m`, `86400s` is `1d`.
pub struct DurationText(pub Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms >= size && ms.checked_rem(size) == Some(0) {
                return write!(f, "{}{unit}", ms.checked_div(size).unwrap_or(0));
            }
        }
        write!(f, "{ms}ms")
    }
}

/// Parses `250ms`, `60s`, `5m`, `2h`, `7d` (a whole number and a unit, above zero).
pub fn parse_duration(text: &str) -> Result<Duration, SpecError> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return refuse(format!(
                "bad duration '{text}': a whole number then ms, s, m, h or d (60s, 7d)"
            ));
        }
    };
    match number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(ms_per_unit))
    {
        Some(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => refuse(format!(
            "bad duration '{text}': a whole number above zero then ms, s, m, h or d"
        )),
    }
}

/// A plan's or limit's name: ASCII letters, digits, `_`, `-`, `.` (names go into header
/// fields, metric labels and keys).
pub fn check_limit_name(name: &str) -> Result<(), SpecError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        refuse(format!(
            "bad name '{name}': 1 to 64 ASCII letters, digits, '_', '-' or '.'"
        ))
    }
}

/// A tenant id: 1 to 256 printable ASCII characters other than space, `*`, `{` and `}` (it
/// goes into keys, inside a hash tag).
pub fn check_tenant(tenant: &str) -> Result<(), SpecError> {
    let valid = !tenant.is_empty()
        && tenant.len() <= 256
        && tenant
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '*' | '{' | '}'));
    if valid {
        Ok(())
    } else {
        refuse(format!(
            "bad tenant '{tenant}': 1 to 256 printable ASCII characters, no space, '*', '{{' or '}}'"
        ))
    }
}

/// Who an override applies to: one tenant, or every tenant whose id starts with a prefix
/// (`acme-*`; `*` alone is every tenant).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    /// Exactly this tenant.
    Exact(String),
    /// Tenants starting with this prefix.
    Prefix(String),
}

impl Pattern {
    /// Parses `acme` or `acme-*`.
    pub fn parse(text: &str) -> Result<Pattern, SpecError> {
        match text.strip_suffix('*') {
            Some("") => Ok(Pattern::Prefix(String::new())),
            Some(prefix) => {
                check_tenant(prefix).map_err(|_| {
                    SpecError(format!(
                        "bad pattern '{text}': a tenant id, or a prefix then one '*' at the end (acme-*)"
                    ))
                })?;
                Ok(Pattern::Prefix(prefix.to_string()))
            }
            None => {
                check_tenant(text)?;
                Ok(Pattern::Exact(text.to_string()))
            }
        }
    }

    /// Whether the pattern covers `tenant`.
    pub fn matches(&self, tenant: &str) -> bool {
        match self {
            Pattern::Exact(id) => id == tenant,
            Pattern::Prefix(prefix) => tenant.starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(id) => f.write_str(id),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// The limits written `texts`, each known to parse: the other modules' tests' plans.
#[cfg(test)]
pub(crate) fn limits(texts: &[&str]) -> Vec<LimitSpec> {
    texts
        .iter()
        .map(|text| LimitSpec::parse(text).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_lists_the_plan_kinds_of_the_table() {
        assert_eq!(
            LIMIT_SYNTAX.to_string(),
            "NAME=KIND:AMOUNT/PERIOD with KIND token, sliding, fixed, log or gcra and PERIOD a \
             whole number of ms, s, m, h or d (per-minute=sliding:1000/60s)"
        );
    }

    #[test]
    fn limits_round_trip_in_canonical_form() {
        let spec = LimitSpec::parse("per-day=fixed:100000/86400s").unwrap();
        assert_eq!(spec.to_string(), "per-day=fixed:100000/1d");
        assert_eq!(LimitSpec::parse(&spec.to_string()).unwrap(), spec);
        // Core's configuration names are aliases, written back in the short form.
        let alias = LimitSpec::parse("m=sliding_window:1000/60s").unwrap();
        assert_eq!(alias.to_string(), "m=sliding:1000/1m");
        let bucket = LimitSpec::parse("burst=token:10/1500ms").unwrap();
        assert_eq!(bucket.to_string(), "burst=token:10/1500ms");
        assert_eq!(
            *bucket.algorithm(),
            Algorithm::token_bucket(10, Duration::from_millis(1500)).unwrap()
        );
        let gcra = LimitSpec::parse("g=gcra:10/1s").unwrap();
        assert_eq!(gcra.algorithm().quota(), 10);
        assert_eq!(LimitSpec::from_algorithm("g", gcra.algorithm()), Some(gcra));
        let window = Algorithm::sliding_window(1000, Duration::from_secs(60)).unwrap();
        assert_eq!(
            LimitSpec::from_algorithm("m", &window).unwrap().to_string(),
            "m=sliding:1000/1m"
        );
    }

    #[test]
    fn bad_limits_say_what_is_wrong() {
        let error = |text: &str| LimitSpec::parse(text).unwrap_err().0;
        assert!(error("per-minute").contains("no '='"));
        assert!(error("a=leaky:1/1s").contains("unknown algorithm 'leaky'"));
        assert!(error("a=concurrency:1/1s").contains("unknown algorithm 'concurrency'"));
        assert!(error("a=fixed:x/1s").contains("'x' is not a whole number"));
        assert!(error("a=fixed:1/1y").contains("bad duration '1y'"));
        assert!(error("a=fixed:0/1s").contains("limit must be greater than 0 (got '0')"));
        assert!(error("a b=fixed:1/1s").contains("bad name 'a b'"));
        assert!(error("g=gcra:1/1500ms").contains("GCRA period"));
        assert!(error("a=fixed:1/0s").contains("above zero"));
    }

    #[test]
    fn patterns_are_exact_or_prefixes() {
        assert_eq!(
            Pattern::parse("acme").unwrap(),
            Pattern::Exact("acme".into())
        );
        let prefix = Pattern::parse("acme-*").unwrap();
        assert!(prefix.matches("acme-eu") && !prefix.matches("acm"));
        assert!(Pattern::parse("*").unwrap().matches("anyone"));
        assert!(Pattern::parse("a*b").is_err());
        assert!(Pattern::parse("a**").is_err());
        assert!(Pattern::parse("").is_err());
        assert!(check_tenant("a{b}").is_err());
    }
}
