//! The region file (`--region-config FILE`, `docs/regions.md`): the service as one region of
//! a quota shared across regions. It names this region, the home region's Redis (which
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
//! Every limit of the service is then a regional one, split by `RegionConfig::split`
//! (`crate::regions::split`) and refused by `RegionConfig::check` (`crate::regions::check`)
//! when this region cannot share it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saphyr::YamlData;

use super::error::ConfigError;
use super::reader::{Reader, line};
use super::yaml::{self, FileBounds};

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
    /// The pool keeps its capacity: over-admission at most `min(R·2k, ⌈r_p·T⌉)` (`r_p` the pool's rate).
    Carryover,
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

/// A region file with every required field, the others left to their defaults (for tests).
#[cfg(test)]
pub const GOOD_REGION_FILE: &str = "region: eu\nhome_url: redis://127.0.0.1:1/\n\
    weights: {eu: 2, us: 1, ap: 1}\nfloor_percent: 50\nperiod_ms: 1000\nmargin_ms: 250\n\
    lease_units: 20\n";

/// Reads a region file's text (`region.yaml`, at most 16 collections deep), for tests.
#[cfg(test)]
pub fn parse_region(text: &str) -> Result<RegionConfig, ConfigError> {
    let file = Arc::new(std::path::PathBuf::from("region.yaml"));
    let fail = |line: usize, reason: String| ConfigError {
        file: file.to_path_buf(),
        line,
        reason,
    };
    let documents =
        yaml::documents(text, 16).map_err(|refused| fail(refused.line, refused.reason))?;
    let [document] = documents.as_slice() else {
        return Err(fail(0, "a region file holds one YAML document".into()));
    };
    read(&Reader { file: &file }, document)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn a_region_file_reads_with_defaults() {
        let region = parse_region(GOOD_REGION_FILE).unwrap();
        assert_eq!(region.weights.len(), 3);
        assert_eq!((region.wait_replicas, region.max_hot_keys), (1, 1_000));
        assert_eq!(region.home_backend, HomeBackend::Module);
        assert_eq!(region.pool_mode, PoolMode::PrePaid);
    }

    #[test]
    fn every_bad_field_is_named() {
        let cases = [
            (
                GOOD_REGION_FILE.replace("region: eu\n", ""),
                "'region' is missing",
            ),
            (
                GOOD_REGION_FILE.replace("redis://127.0.0.1:1/", "http://x"),
                "'home_url'",
            ),
            (
                GOOD_REGION_FILE.replace("{eu: 2, us: 1, ap: 1}", "{us: 1}"),
                "weigh this region 'eu'",
            ),
            (
                GOOD_REGION_FILE.replace("ap: 1", "ap: 0"),
                "'weights.ap' must be above 0",
            ),
            (
                GOOD_REGION_FILE.replace("floor_percent: 50", "floor_percent: 101"),
                "'floor_percent' is above 100",
            ),
            (
                GOOD_REGION_FILE.replace("period_ms: 1000", "period_ms: 0"),
                "'period_ms' must be above 0",
            ),
            (
                GOOD_REGION_FILE.replace("margin_ms: 250", "margin_ms: 50"),
                "'margin_ms' must be above",
            ),
            (
                GOOD_REGION_FILE.replace("lease_units: 20", "lease_units: 0"),
                "'lease_units' must be at least 1",
            ),
            (
                format!("{GOOD_REGION_FILE}colour: red\n"),
                "unknown field 'colour'",
            ),
            (
                format!("{GOOD_REGION_FILE}home_backend: lua\n"),
                "'home_backend' is module or functions",
            ),
            (
                format!("{GOOD_REGION_FILE}lease_suffix: \"{{x}}\"\n"),
                "'lease_suffix'",
            ),
            (
                format!("{GOOD_REGION_FILE}pool_mode: loose\n"),
                "'pool_mode' is prepaid or carryover",
            ),
        ];
        for (text, expected) in cases {
            let error = parse_region(&text).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
