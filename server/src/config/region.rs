//! The service as one region of a quota shared across regions (`docs/regions.md`): the
//! region file (`--region-config FILE`) names this region, the home region's Redis (which
//! holds the pools), every region's weight, the floor fraction and the lease agent's
//! settings; every field is checked, an unknown or bad one refused with its line.
//!
//! ```yaml
//! region: eu                    # this region, one of `weights`
//! home_url: redis://home:6379/  # the home primary (the pools)
//! home_backend: module          # or functions (the Functions library, loaded there)
//! weights: {eu: 2, us: 1, ap: 1}
//! floor_percent: 50             # f: the share of each limit split into the floors
//! period_ms: 1000               # P: the agent asks home this often
//! margin_ms: 250                # a: at least a round trip to home and the WAIT; T = P + a
//! drift_ppm: 1000               # ρ: how far this region's clock may run fast of home's
//! wait_replicas: 1              # WAIT n on home: a grant counts once n replicas have it
//! wait_timeout_ms: 100
//! lease_units: 20               # k: the most units one lease holds
//! max_hot_keys: 1000            # the most limits leased at once, most demanded first
//! pool_mode: prepaid            # or carryover (token bucket and GCRA pools)
//! ```
//!
//! Every limit of the service is then a regional one, split by
//! [`RegionConfig::split`] (`core::regional::split`): a fixed window of `L` per unit is this
//! region's floor of `⌊L·f·w/W⌋` per unit (its own Redis, `RL.REGIONAL`) and home's pool
//! (key `pool_prefix` + the limit's key) `L − Σ floors`; a token bucket or GCRA is a floor
//! of capacity `⌊C·f·w/W⌋` refilling at most `f·r·w/W` (its interval rounded up, derated
//! for drift) and a pool of what the floors leave, less `⌈r_p·T⌉` when pre-paid (0
//! over-admission; carryover keeps the capacity, within `min(R·2k, ⌈(1 − f)·r·T⌉)`); a
//! sliding window splits as a fixed window (its pool's leases end with the home window, so
//! the regions admit no more than one sliding window's own bound, clocks aligned). An
//! in-flight limit, a plan's limit, or a split that rounds to 0 is refused, naming the
//! field.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saphyr::YamlData;

use super::load::ConfigError;
use super::reader::{Reader, line};
use super::yaml::{self, FileBounds};
use redis_ratelimit_client::algorithm::AlgorithmError;
use redis_ratelimit_client::{Algorithm, Rate};
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::regional::split::{
    Regions, SplitError, gcra_rate, split_bucket, split_window,
};

use super::{BuiltLimit, Config, Rule};

/// The most regions a file may weigh.
pub const MAX_REGIONS: usize = 64;
/// The largest weight of one region.
pub const MAX_WEIGHT: u64 = 1_000_000;
/// The most hot limits leased at once.
pub const MAX_HOT_KEYS: u64 = 100_000;
/// The largest lease (the module's bound on a lease's units).
pub const MAX_LEASE_UNITS: u64 = 1_000_000_000_000_000;
/// The longest period or margin (an hour).
pub const MAX_PERIOD_MS: u64 = 3_600_000;

/// What the home Redis runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeBackend {
    /// The module's commands.
    Module,
    /// The Functions library (`FCALL`), loaded on home.
    Functions,
}

/// A region's settings, as read and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// This region's name.
    pub region: String,
    /// The home primary's URL.
    pub home_url: String,
    /// What home runs.
    pub home_backend: HomeBackend,
    /// Every region's weight, by name (this one's among them).
    pub weights: BTreeMap<String, u64>,
    /// `f`, in percent.
    pub floor_percent: u64,
    /// `P`.
    pub period: Duration,
    /// `a`.
    pub margin: Duration,
    /// `ρ`, parts per million.
    pub drift_ppm: u32,
    /// `WAIT n` on home (0: no `WAIT`, a failover may lose grants).
    pub wait_replicas: u32,
    /// How long the `WAIT` may take.
    pub wait_timeout: Duration,
    /// `k`.
    pub lease_units: u64,
    /// The most limits leased at once.
    pub max_hot_keys: usize,
    /// The start of a pool's key on home (then the limit's own key).
    pub pool_prefix: String,
    /// What follows a limit's key to make its lease's key in this region.
    pub lease_suffix: String,
    /// How a token bucket or GCRA pool is sized (`pool_mode`: `prepaid` or `carryover`).
    pub pool_mode: PoolMode,
}

/// How home's pool of a token bucket or GCRA limit is sized (`docs/regions.md`, *Pre-paid
/// vs carryover*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoolMode {
    /// The pool's capacity less `⌈r_p·T⌉`, its refill over one lease lifetime: 0
    /// over-admission over any interval (the default).
    #[default]
    PrePaid,
    /// The pool keeps its capacity: over-admission at most `min(R·2k, ⌈(1 − f)·r·T⌉)`.
    Carryover,
}

/// How one limit is shared: this region's floor and home's pool (`None`: home's share is
/// empty, nothing to lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// This region's own limiter (its Redis, `RL.REGIONAL`'s floor).
    pub floor: Algorithm,
    /// Home's pool, as the agent asks it.
    pub pool: Option<Algorithm>,
}

/// Why a limit cannot be shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The algorithm has no regional form in the service.
    Kind(Kind),
    /// The split (`core::regional::split`) refuses it.
    Split(SplitError),
    /// A part cannot be built as an algorithm (its parameters out of the server's bounds).
    Part(&'static str, String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kind(kind) => write!(
                f,
                "a region's limits are fixed_window, sliding_window, token_bucket or gcra, not {}",
                kind.config_name()
            ),
            Self::Split(error) => write!(f, "{error}"),
            Self::Part(part, error) => write!(f, "this region's {part} cannot be built: {error}"),
        }
    }
}

impl RegionConfig {
    /// The split's view of the weights: every region's, this one's index.
    fn regions<'a>(&self, weights: &'a [u64]) -> Regions<'a> {
        Regions {
            weights,
            own: self
                .weights
                .keys()
                .position(|name| *name == self.region)
                .unwrap_or(usize::MAX),
            floor_percent: self.floor_percent,
            drift_ppm: u64::from(self.drift_ppm),
        }
    }

    /// `T = P + a` in ns, the pre-pay's span (`None`: carryover).
    fn prepay_lifetime_ns(&self) -> Option<u64> {
        let lifetime = self.period.saturating_add(self.margin).as_nanos();
        (self.pool_mode == PoolMode::PrePaid).then(|| u64::try_from(lifetime).unwrap_or(u64::MAX))
    }

    /// Splits the limit `global` into this region's floor and home's pool, by
    /// `core::regional::split` (the floors by weight, capacities rounded down, intervals
    /// rounded up and the floor's derated by `ρ`, the pool given what the floors do not,
    /// less the pre-pay when pre-paid): fixed windows, token buckets and GCRA.
    pub fn split(&self, global: &Algorithm) -> Result<Parts, Refusal> {
        let weights: Vec<u64> = self.weights.values().copied().collect();
        let regions = self.regions(&weights);
        let built = |part: &'static str, algorithm: Result<Algorithm, AlgorithmError>| {
            algorithm.map_err(|error| Refusal::Part(part, error.to_string()))
        };
        match global.as_quota() {
            // A sliding window is split as a fixed window: the same window, the floors by
            // weight and the pool what they leave (the regions model's split, clocks aligned);
            // the agent ends its pool's leases with the home window they were granted in.
            Quota::FixedWindow(_) | Quota::SlidingWindow(_) => {
                let window = global.window();
                let part = |limit: u64| match global.as_quota() {
                    Quota::SlidingWindow(_) => Algorithm::sliding_window(limit, window),
                    _ => Algorithm::fixed_window(limit, window),
                };
                let share = split_window(global.quota(), &regions).map_err(Refusal::Split)?;
                let floor = built("floor", part(share.floor))?;
                let pool = (share.pool > 0)
                    .then(|| built("pool", part(share.pool)))
                    .transpose()?;
                Ok(Parts { floor, pool })
            }
            Quota::TokenBucket(params) => {
                let share = split_bucket(
                    params.capacity(),
                    params.interval_ns(),
                    self.prepay_lifetime_ns(),
                    &regions,
                )
                .map_err(Refusal::Split)?;
                let bucket = |capacity: u64, interval_ns: u64| {
                    Algorithm::token_bucket_with_rate(capacity, Rate::every(interval_ns)?)
                };
                Ok(Parts {
                    floor: built(
                        "floor",
                        bucket(share.floor_capacity, share.floor_interval_ns),
                    )?,
                    pool: Some(built(
                        "pool",
                        bucket(share.pool_capacity, share.pool_interval_ns),
                    )?),
                })
            }
            Quota::Gcra(params) => {
                let interval_ns = u64::try_from(params.interval_ns()).unwrap_or(0);
                let period_s = u64::try_from(params.period_s()).unwrap_or(0);
                let share = split_bucket(
                    params.limit(),
                    interval_ns,
                    self.prepay_lifetime_ns(),
                    &regions,
                )
                .map_err(Refusal::Split)?;
                // A rate of `count` per a whole number of seconds whose emission interval is
                // at least the part's.
                let gcra = |capacity: u64, interval_ns: u64, zero: SplitError| {
                    let (count, period_s) =
                        gcra_rate(interval_ns, period_s).ok_or(Refusal::Split(zero))?;
                    let period = Duration::from_secs(period_s);
                    built(
                        "pool",
                        Algorithm::gcra(capacity.saturating_sub(1), count, period),
                    )
                };
                Ok(Parts {
                    floor: gcra(
                        share.floor_capacity,
                        share.floor_interval_ns,
                        SplitError::FloorRateZero,
                    )
                    .map_err(|refusal| match refusal {
                        Refusal::Part(_, error) => Refusal::Part("floor", error),
                        other => other,
                    })?,
                    pool: Some(gcra(
                        share.pool_capacity,
                        share.pool_interval_ns,
                        SplitError::PoolRateZero,
                    )?),
                })
            }
            _ => Err(Refusal::Kind(global.kind())),
        }
    }

    /// Refuses a limits config this region cannot share: every limit must be a fixed
    /// window, a token bucket or GCRA (not a plan's) that [`Self::split`] takes.
    pub fn check(&self, config: &Config) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        for domain in config.domains.values() {
            self.check_rules(&domain.rules, &mut errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn check_rules(&self, rules: &[Rule], errors: &mut Vec<ConfigError>) {
        for rule in rules {
            let refuse = |reason: String| ConfigError {
                file: rule.location.file.to_path_buf(),
                line: rule.location.line,
                reason: format!("rule '{}' in region '{}': {reason}", rule.path, self.region),
            };
            if let Some(limit) = &rule.limit {
                if limit.tenant_key.is_some() {
                    errors.push(refuse(
                        "'tenant_key': a plan's limit cannot be shared across regions".into(),
                    ));
                }
                if let Some(reason) = limit.spec.as_ref().and_then(|built| self.refusal(built)) {
                    errors.push(refuse(reason));
                }
            }
            self.check_rules(&rule.children, errors);
        }
    }

    /// Why `spec` cannot be shared, naming the field to change (`None`: it can, or it is a
    /// limit of 0, decided without a store).
    fn refusal(&self, built: &BuiltLimit) -> Option<String> {
        let spec = &built.spec;
        let refusal = self.split(built.algorithm.as_ref()?).err()?;
        let f = self.floor_percent;
        let per = spec.requests_per_unit;
        let capacity = match spec.burst.filter(|_| spec.algorithm.has_burst()) {
            Some(burst) => format!("'burst' {burst}"),
            None => format!("'requests_per_unit' {per}"),
        };
        Some(match refusal {
            Refusal::Kind(kind) => format!(
                "'algorithm' is {}: a region's limits are fixed_window, sliding_window, \
                 token_bucket or gcra (an in-flight call of the service is released by a \
                 separate request, which no leased slot's end can bound)",
                kind.config_name()
            ),
            Refusal::Split(SplitError::FloorCapacityZero) => format!(
                "{capacity} leaves this region a floor of 0 ({f}% split by weight): raise it \
                 or floor_percent"
            ),
            Refusal::Split(SplitError::FloorRateZero) => format!(
                "'requests_per_unit' {per} leaves this region a floor rate too slow to state \
                 (its refill interval past the bounds, {f}% split by weight): raise it or \
                 floor_percent"
            ),
            Refusal::Split(SplitError::PoolRateZero) => format!(
                "'floor_percent' {f} leaves home's pool no rate of 'requests_per_unit' {per}: \
                 lower floor_percent"
            ),
            Refusal::Split(SplitError::PrePayEatsPool { prepay, pool }) => format!(
                "{capacity}: the pre-pay of {prepay} units (the pool's refill over T = \
                 period_ms + margin_ms) eats home's whole pool of {pool}: raise it, shorten \
                 period_ms or margin_ms, or set pool_mode: carryover"
            ),
            Refusal::Split(SplitError::Invalid) => "the split's parameters are out of range".into(),
            Refusal::Part(part, error) => {
                format!("this region's {part} of {capacity} cannot be built: {error}")
            }
        })
    }
}

/// Reads and checks a region file.
pub fn load_region(path: &Path, bounds: &FileBounds) -> Result<RegionConfig, ConfigError> {
    let file = Arc::new(path.to_path_buf());
    let fail = |line: usize, reason: String| ConfigError {
        file: path.to_path_buf(),
        line,
        reason,
    };
    let text = yaml::read_bounded(path, bounds.max_file_bytes)
        .map_err(|refused| fail(refused.line, refused.reason))?;
    let documents = yaml::documents(&text, bounds.max_depth)
        .map_err(|refused| fail(refused.line, refused.reason))?;
    let [document] = documents.as_slice() else {
        return Err(fail(0, "a region file holds one YAML document".into()));
    };
    let reader = Reader { file: &file };
    read(&reader, document)
}

const FIELDS: &[&str] = &[
    "region",
    "home_url",
    "home_backend",
    "weights",
    "floor_percent",
    "period_ms",
    "margin_ms",
    "drift_ppm",
    "wait_replicas",
    "wait_timeout_ms",
    "lease_units",
    "max_hot_keys",
    "pool_prefix",
    "lease_suffix",
    "pool_mode",
];

fn read(reader: &Reader<'_>, node: &saphyr::MarkedYaml<'_>) -> Result<RegionConfig, ConfigError> {
    let fields = reader.fields(node, "the region file", FIELDS)?;
    let mut region = None;
    let mut home_url = None;
    let mut home_backend = HomeBackend::Module;
    let mut weights = BTreeMap::new();
    let mut floor_percent = None;
    let mut period_ms = None;
    let mut margin_ms = None;
    let mut drift_ppm = 0;
    let mut wait_replicas = 1;
    let mut wait_timeout_ms = 100;
    let mut lease_units = None;
    let mut max_hot_keys = 1_000;
    let mut pool_prefix = "pool:".to_string();
    let mut lease_suffix = ":lease".to_string();
    let mut pool_mode = PoolMode::PrePaid;
    let mut weights_line = line(node);
    let ms = |value, field| reader.integer(value, field, MAX_PERIOD_MS);
    for (field, value, at) in &fields {
        match *field {
            "region" => region = Some(reader.string(value, field)?),
            "home_url" => home_url = Some((reader.string(value, field)?, *at)),
            "home_backend" => {
                home_backend = match reader.string(value, field)?.as_str() {
                    "module" => HomeBackend::Module,
                    "functions" => HomeBackend::Functions,
                    other => {
                        return Err(reader.error(
                            *at,
                            format!("'home_backend' is module or functions, not '{other}'"),
                        ));
                    }
                }
            }
            "weights" => {
                weights_line = *at;
                weights = weights_of(reader, value)?.into_iter().collect();
            }
            "floor_percent" => floor_percent = Some(reader.integer(value, field, 100)?),
            "period_ms" => period_ms = Some(ms(value, field)?),
            "margin_ms" => margin_ms = Some(ms(value, field)?),
            "drift_ppm" => drift_ppm = reader.integer(value, field, 100_000)?,
            "wait_replicas" => wait_replicas = reader.integer(value, field, 100)?,
            "wait_timeout_ms" => wait_timeout_ms = ms(value, field)?,
            "lease_units" => lease_units = Some(reader.integer(value, field, MAX_LEASE_UNITS)?),
            "max_hot_keys" => max_hot_keys = reader.integer(value, field, MAX_HOT_KEYS)?,
            "pool_prefix" => pool_prefix = reader.string(value, field)?,
            "lease_suffix" => lease_suffix = reader.string(value, field)?,
            "pool_mode" => {
                pool_mode = match reader.string(value, field)?.as_str() {
                    "prepaid" => PoolMode::PrePaid,
                    "carryover" => PoolMode::Carryover,
                    other => {
                        return Err(reader.error(
                            *at,
                            format!("'pool_mode' is prepaid or carryover, not '{other}'"),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    let missing = |field: &str| reader.error(line(node), format!("'{field}' is missing"));
    let region = region.ok_or_else(|| missing("region"))?;
    let (home_url, home_line) = home_url.ok_or_else(|| missing("home_url"))?;
    if !home_url.starts_with("redis://") && !home_url.starts_with("rediss://") {
        return Err(reader.error(
            home_line,
            format!("'home_url' must be a redis:// or rediss:// URL, not '{home_url}'"),
        ));
    }
    if !weights.contains_key(&region) {
        return Err(reader.error(
            weights_line,
            format!("'weights' must weigh this region '{region}' (it has none)"),
        ));
    }
    let floor_percent = floor_percent.ok_or_else(|| missing("floor_percent"))?;
    let period_ms = period_ms.ok_or_else(|| missing("period_ms"))?;
    let margin_ms = margin_ms.ok_or_else(|| missing("margin_ms"))?;
    let lease_units = lease_units.ok_or_else(|| missing("lease_units"))?;
    let refuse = |reason: &str| reader.error(line(node), reason.to_string());
    if period_ms == 0 {
        return Err(refuse("'period_ms' must be above 0"));
    }
    if margin_ms <= wait_timeout_ms {
        return Err(refuse(
            "'margin_ms' must be above 'wait_timeout_ms': a is at least a round trip to home and the WAIT",
        ));
    }
    if lease_units == 0 {
        return Err(refuse("'lease_units' must be at least 1"));
    }
    if max_hot_keys == 0 {
        return Err(refuse("'max_hot_keys' must be at least 1"));
    }
    let suffix_ok = !lease_suffix.is_empty()
        && lease_suffix.len() <= 64
        && lease_suffix
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && byte != b'{' && byte != b'}');
    if !suffix_ok {
        return Err(refuse(
            "'lease_suffix' must be 1 to 64 printable ASCII characters without braces",
        ));
    }
    Ok(RegionConfig {
        region,
        home_url,
        home_backend,
        weights,
        floor_percent,
        period: Duration::from_millis(period_ms),
        margin: Duration::from_millis(margin_ms),
        drift_ppm: u32::try_from(drift_ppm).unwrap_or(u32::MAX),
        wait_replicas: u32::try_from(wait_replicas).unwrap_or(u32::MAX),
        wait_timeout: Duration::from_millis(wait_timeout_ms),
        lease_units,
        max_hot_keys: usize::try_from(max_hot_keys).unwrap_or(usize::MAX),
        pool_prefix,
        lease_suffix,
        pool_mode,
    })
}

/// The regions' weights: a mapping of names to positive integers.
fn weights_of(
    reader: &Reader<'_>,
    node: &saphyr::MarkedYaml<'_>,
) -> Result<Vec<(String, u64)>, ConfigError> {
    let YamlData::Mapping(mapping) = &node.data else {
        return Err(reader.error(line(node), "'weights' must be a mapping of region: weight"));
    };
    if mapping.is_empty() || mapping.len() > MAX_REGIONS {
        return Err(reader.error(
            line(node),
            format!("'weights' must weigh 1 to {MAX_REGIONS} regions"),
        ));
    }
    let mut weights = Vec::with_capacity(mapping.len());
    for (key, value) in mapping {
        let name = reader.string(key, "weights")?;
        let weight = reader.integer(value, &format!("weights.{name}"), MAX_WEIGHT)?;
        if weight == 0 {
            return Err(reader.error(line(value), format!("'weights.{name}' must be above 0")));
        }
        weights.push((name, weight));
    }
    Ok(weights)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RegionConfig, ConfigError> {
        let file = Arc::new(std::path::PathBuf::from("region.yaml"));
        let documents = yaml::documents(text, 16).unwrap();
        read(&Reader { file: &file }, &documents[0])
    }

    const GOOD: &str = "region: eu\nhome_url: redis://127.0.0.1:1/\nweights: {eu: 2, us: 1, ap: 1}\n\
        floor_percent: 50\nperiod_ms: 1000\nmargin_ms: 250\nlease_units: 20\n";

    #[test]
    fn a_region_file_reads_with_defaults_and_splits_a_limit() {
        let region = parse(GOOD).unwrap();
        assert_eq!(region.weights.len(), 3);
        assert_eq!((region.wait_replicas, region.max_hot_keys), (1, 1_000));
        assert_eq!(region.home_backend, HomeBackend::Module);
        assert_eq!(region.pool_mode, PoolMode::PrePaid);
        let hour = Duration::from_secs(3_600);
        // 100 at 50 %: floors 25 (eu), 12 (us), 12 (ap); the pool 100 − 49.
        let window = region
            .split(&Algorithm::fixed_window(100, hour).unwrap())
            .unwrap();
        assert_eq!(window.floor, Algorithm::fixed_window(25, hour).unwrap());
        assert_eq!(
            window.pool,
            Some(Algorithm::fixed_window(51, hour).unwrap())
        );
        assert_eq!(
            region.split(&Algorithm::fixed_window(1, hour).unwrap()),
            Err(Refusal::Split(SplitError::FloorCapacityZero))
        );
        // A sliding window splits alike, its parts sliding windows.
        let sliding = region
            .split(&Algorithm::sliding_window(100, hour).unwrap())
            .unwrap();
        assert_eq!(sliding.floor, Algorithm::sliding_window(25, hour).unwrap());
        assert_eq!(
            sliding.pool,
            Some(Algorithm::sliding_window(51, hour).unwrap())
        );
        // A bucket of 100 at 10/s: the floor 25 at 2.5/s; the pool 51 at 5/s less the
        // pre-pay ⌈5 × 1.25⌉ = 7 (T = 1250 ms).
        let bucket = Algorithm::token_bucket_with_rate(100, Rate::per_second("10").unwrap());
        let parts = region.split(&bucket.unwrap()).unwrap();
        let expected = |capacity, rate| {
            Algorithm::token_bucket_with_rate(capacity, Rate::per_second(rate).unwrap()).unwrap()
        };
        assert_eq!(parts.floor, expected(25, "2.5"));
        assert_eq!(parts.pool, Some(expected(44, "5")));
        let carryover = RegionConfig {
            pool_mode: PoolMode::Carryover,
            ..region.clone()
        };
        let bucket = Algorithm::token_bucket_with_rate(100, Rate::per_second("10").unwrap());
        assert_eq!(
            carryover.split(&bucket.unwrap()).unwrap().pool,
            Some(expected(51, "5"))
        );
        // GCRA: 100 at once, 10 per second: the floor 25 at 2.5 per s (1000 per 400 s, a
        // count per whole seconds), the pool 44 at 5 per s (1000 per 200 s).
        let gcra = region
            .split(&Algorithm::gcra(99, 10, Duration::from_secs(1)).unwrap())
            .unwrap();
        let seconds = Duration::from_secs;
        assert_eq!(
            gcra.floor,
            Algorithm::gcra(24, 1_000, seconds(400)).unwrap()
        );
        assert_eq!(
            gcra.pool,
            Some(Algorithm::gcra(43, 1_000, seconds(200)).unwrap())
        );
    }

    #[test]
    fn a_config_the_region_cannot_share_is_refused_naming_the_rule_and_field() {
        let region = parse(GOOD).unwrap();
        let config = |limit: &str| {
            let text = format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {limit}\n");
            super::super::assemble(vec![("api.yaml".into(), text)], 16).unwrap()
        };
        for good in [
            "{unit: hour, requests_per_unit: 8}",
            "{unit: hour, requests_per_unit: 8, algorithm: token_bucket}",
            "{unit: hour, requests_per_unit: 8, algorithm: gcra}",
            // A limit of 0 denies without a store: nothing to share.
            "{unit: hour, requests_per_unit: 0}",
        ] {
            assert!(region.check(&config(good)).is_ok(), "{good}");
        }
        let errors = |limit: &str| {
            let errors = region.check(&config(limit)).unwrap_err();
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let cases = [
            (
                "{unit: hour, requests_per_unit: 1}",
                "'requests_per_unit' 1 leaves this region a floor of 0",
            ),
            (
                "{unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 1}",
                "'burst' 1 leaves this region a floor of 0",
            ),
            // 8 a second, bursts of 8: the pool 4 at 4/s; T = 1.25 s pre-pays 5.
            (
                "{unit: second, requests_per_unit: 8, algorithm: token_bucket}",
                "the pre-pay of 5 units",
            ),
            (
                "{unit: second, requests_per_unit: 8, algorithm: concurrency}",
                "'algorithm' is concurrency",
            ),
        ];
        for (limit, expected) in cases {
            let error = errors(limit);
            assert!(
                error.contains("rule 'k'") && error.contains(expected),
                "{limit}: {error}"
            );
        }
        let all_floors = parse(&GOOD.replace("floor_percent: 50", "floor_percent: 100")).unwrap();
        let error = all_floors
            .check(&config(
                "{unit: hour, requests_per_unit: 8, algorithm: token_bucket}",
            ))
            .unwrap_err()[0]
            .to_string();
        assert!(
            error.contains("'floor_percent' 100 leaves home's pool no rate"),
            "{error}"
        );
        let carryover = parse(&format!("{GOOD}pool_mode: carryover\n")).unwrap();
        assert!(
            carryover
                .check(&config(
                    "{unit: second, requests_per_unit: 8, algorithm: token_bucket}"
                ))
                .is_ok(),
            "carryover keeps the pool whole"
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let cases = [
            (GOOD.replace("region: eu\n", ""), "'region' is missing"),
            (
                GOOD.replace("redis://127.0.0.1:1/", "http://x"),
                "'home_url'",
            ),
            (
                GOOD.replace("{eu: 2, us: 1, ap: 1}", "{us: 1}"),
                "weigh this region 'eu'",
            ),
            (
                GOOD.replace("ap: 1", "ap: 0"),
                "'weights.ap' must be above 0",
            ),
            (
                GOOD.replace("floor_percent: 50", "floor_percent: 101"),
                "'floor_percent' is above 100",
            ),
            (
                GOOD.replace("period_ms: 1000", "period_ms: 0"),
                "'period_ms' must be above 0",
            ),
            (
                GOOD.replace("margin_ms: 250", "margin_ms: 50"),
                "'margin_ms' must be above",
            ),
            (
                GOOD.replace("lease_units: 20", "lease_units: 0"),
                "'lease_units' must be at least 1",
            ),
            (format!("{GOOD}colour: red\n"), "unknown field 'colour'"),
            (
                format!("{GOOD}home_backend: lua\n"),
                "'home_backend' is module or functions",
            ),
            (format!("{GOOD}lease_suffix: \"{{x}}\"\n"), "'lease_suffix'"),
            (
                format!("{GOOD}pool_mode: loose\n"),
                "'pool_mode' is prepaid or carryover",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
