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
//! ```
//!
//! Every limit of the service is then a regional one: a fixed window of `L` per unit is
//! this region's floor of `⌊L·f·w/W⌋` per unit (its own Redis, `RL.REGIONAL`), and home's
//! pool (key `pool_prefix` + the limit's key) holds `L − Σ floors` per unit, leased to the
//! regions whose floor runs out. Only fixed windows are regional (their leases end with the
//! home window they were granted in: the exact case); a config with another algorithm, a
//! plan limit, or a floor of 0 is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saphyr::YamlData;

use super::load::{ConfigError, Reader, line};
use super::yaml::{self, FileBounds};
use super::{AlgorithmKind, Config, Rule};

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
}

/// How one limit is shared: this region's floor and home's pool, per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// This region's floor.
    pub floor: u64,
    /// Home's pool: the limit less every region's floor.
    pub pool: u64,
}

impl RegionConfig {
    /// The share of a limit of `limit` units per window: this region's floor
    /// `⌊limit·f·w/W⌋` and the pool `limit − Σ floors` (each floor rounded down, so the
    /// floors and the pool never add up to more than `limit`).
    pub fn share(&self, limit: u64) -> Share {
        let total: u128 = self.weights.values().map(|w| u128::from(*w)).sum();
        let floor_of = |weight: u64| -> u64 {
            let numerator = u128::from(limit)
                .saturating_mul(u128::from(self.floor_percent))
                .saturating_mul(u128::from(weight));
            let denominator = total.saturating_mul(100).max(1);
            u64::try_from(numerator.checked_div(denominator).unwrap_or(0)).unwrap_or(0)
        };
        let floors: u64 = self
            .weights
            .values()
            .map(|weight| floor_of(*weight))
            .fold(0, u64::saturating_add);
        let own = self.weights.get(&self.region).copied().unwrap_or(0);
        Share {
            floor: floor_of(own),
            pool: limit.saturating_sub(floors),
        }
    }

    /// Refuses a limits config this region cannot share: every limit must be a fixed
    /// window (not a plan's) whose floor here is at least 1.
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
                if let Some(spec) = limit
                    .spec
                    .as_ref()
                    .filter(|spec| spec.requests_per_unit > 0)
                {
                    if spec.algorithm != AlgorithmKind::FixedWindow {
                        errors.push(refuse(format!(
                            "'algorithm' is {}: a region's limits are fixed windows (the \
                             exact case of docs/regions.md)",
                            spec.algorithm.as_str()
                        )));
                    } else if self.share(spec.requests_per_unit).floor == 0 {
                        errors.push(refuse(format!(
                            "'requests_per_unit' {} leaves this region a floor of 0 \
                             ({}% split by weight): raise it or floor_percent",
                            spec.requests_per_unit, self.floor_percent
                        )));
                    }
                }
            }
            self.check_rules(&rule.children, errors);
        }
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
        // 100 at 50 %: floors 25 (eu), 12 (us), 12 (ap); the pool 100 − 49.
        assert_eq!(
            region.share(100),
            Share {
                floor: 25,
                pool: 51
            }
        );
        assert_eq!(region.share(1), Share { floor: 0, pool: 1 });
    }

    #[test]
    fn a_config_the_region_cannot_share_is_refused_naming_the_rule_and_field() {
        let region = parse(GOOD).unwrap();
        let config = |limit: &str| {
            let text = format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {limit}\n");
            super::super::assemble(vec![("api.yaml".into(), text)], 16).unwrap()
        };
        assert!(
            region
                .check(&config("{unit: hour, requests_per_unit: 8}"))
                .is_ok()
        );
        let errors = |limit: &str| {
            let errors = region.check(&config(limit)).unwrap_err();
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let bucket = errors("{unit: hour, requests_per_unit: 8, algorithm: token_bucket}");
        assert!(
            bucket.contains("rule 'k'") && bucket.contains("'algorithm' is token_bucket"),
            "{bucket}"
        );
        let small = errors("{unit: hour, requests_per_unit: 1}");
        assert!(small.contains("leaves this region a floor of 0"), "{small}");
        // A limit of 0 denies without a store: nothing to share.
        assert!(
            region
                .check(&config("{unit: hour, requests_per_unit: 0}"))
                .is_ok()
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
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
