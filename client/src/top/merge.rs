//! Merging the stored summaries of every replica (and minute) of a policy and limit into the
//! fleet's top denied keys, with the bound on each count. Pure: no I/O.
//!
//! For a key listed by some summary: `count` adds its count where listed and the summary's
//! floor where not (a key not listed was denied at most `floor` times there), `lower` adds
//! `count − error` where listed. The key's true denials are in `lower ..= count`. The
//! stated bound is the sum of the summaries' floors (each at most its denials / capacity):
//! no count is over the truth by more, and a key denied more often than it is listed.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::report::Report;

/// How many keys the concentration counts.
pub const CONCENTRATION_KEYS: usize = 10;

/// One of the most denied keys of a limit across the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopKey {
    /// The rendered key (the binding limit's).
    pub key: String,
    /// Its denials, at most this (an over-estimate by at most the limit's `bound`).
    pub count: u64,
    /// Its denials, at least this.
    pub lower: u64,
}

/// The most denied keys of one policy and limit over a window, across the fleet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopDenied {
    /// The policy (the service's domain).
    pub policy: String,
    /// The limit.
    pub limit: String,
    /// Every denial counted, by every replica, over the window.
    pub denials: u64,
    /// No key's `count` is over its true denials by more than this, and a key denied more
    /// often is listed (the sum of the summaries' floors).
    pub bound: u64,
    /// The a-priori bound the summaries' sizes give: the sum of each summary's denials over
    /// its capacity (`bound` never exceeds it).
    pub bound_limit: u64,
    /// How many summaries (replicas × minutes) were merged.
    pub summaries: usize,
    /// The share of `denials` taken by the top [`CONCENTRATION_KEYS`] keys, counted by their
    /// `lower` (so at most the true share): near 1, a few keys are throttled; low while
    /// denials are many, they are spread over many keys.
    pub top10_share: f64,
    /// The most denied keys, most first (by `count`, ties by key).
    pub keys: Vec<TopKey>,
}

/// A key's sums across the summaries.
#[derive(Default)]
struct Sums {
    listed_count: u64,
    lower: u64,
    /// The floors of the summaries that list it (subtracted from the floors' total).
    listed_floors: u64,
}

/// The fleet's top `count` denied keys of each policy and limit in `reports` (those of
/// `policy`, and of `limit` when given), limits in name order.
pub fn merge(
    reports: &[Report],
    policy: &str,
    limit: Option<&str>,
    count: usize,
) -> Vec<TopDenied> {
    let mut by_limit: BTreeMap<&str, Vec<&Report>> = BTreeMap::new();
    for report in reports {
        if report.policy == policy && limit.is_none_or(|limit| report.limit == limit) {
            by_limit.entry(&report.limit).or_default().push(report);
        }
    }
    by_limit
        .into_iter()
        .map(|(limit, reports)| merge_limit(policy, limit, &reports, count))
        .collect()
}

/// The policies and limits `reports` hold (each once, in order).
pub fn limits_of(reports: &[Report]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = reports
        .iter()
        .map(|report| (report.policy.clone(), report.limit.clone()))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

fn merge_limit(policy: &str, limit: &str, reports: &[&Report], count: usize) -> TopDenied {
    let floors = reports
        .iter()
        .fold(0u64, |sum, report| sum.saturating_add(report.floor));
    let denials = reports
        .iter()
        .fold(0u64, |sum, report| sum.saturating_add(report.denials));
    let bound_limit = reports.iter().fold(0u64, |sum, report| {
        sum.saturating_add(report.denials.checked_div(report.capacity).unwrap_or(0))
    });
    let mut sums: HashMap<&str, Sums> = HashMap::new();
    for report in reports {
        for (key, listed, error) in &report.keys {
            let sum = sums.entry(key).or_default();
            sum.listed_count = sum.listed_count.saturating_add(*listed);
            sum.lower = sum.lower.saturating_add(listed.saturating_sub(*error));
            sum.listed_floors = sum.listed_floors.saturating_add(report.floor);
        }
    }
    let mut keys: Vec<TopKey> = sums
        .into_iter()
        .map(|(key, sum)| TopKey {
            key: key.to_string(),
            // Where not listed, the summary's floor.
            count: sum
                .listed_count
                .saturating_add(floors.saturating_sub(sum.listed_floors)),
            lower: sum.lower,
        })
        .collect();
    keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    let top: u64 = keys
        .iter()
        .take(CONCENTRATION_KEYS)
        .fold(0, |sum, key| sum.saturating_add(key.lower));
    #[allow(clippy::cast_precision_loss)]
    let top10_share = if denials == 0 {
        0.0
    } else {
        (top as f64 / denials as f64).min(1.0)
    };
    keys.truncate(count);
    TopDenied {
        policy: policy.to_string(),
        limit: limit.to_string(),
        denials,
        bound: floors,
        bound_limit,
        summaries: reports.len(),
        top10_share,
        keys,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::report::VERSION;

    fn report(replica: &str, floor: u64, denials: u64, keys: &[(&str, u64, u64)]) -> Report {
        Report {
            v: VERSION,
            policy: "api".into(),
            limit: "per-minute".into(),
            replica: replica.into(),
            client: "rust".into(),
            capacity: 3,
            denials,
            floor,
            keys: keys
                .iter()
                .map(|(key, count, error)| ((*key).to_string(), *count, *error))
                .collect(),
        }
    }

    #[test]
    fn counts_add_and_missing_keys_count_the_floor() {
        let reports = [
            report("a", 2, 20, &[("x", 10, 0), ("y", 5, 1), ("z", 2, 2)]),
            report("b", 0, 7, &[("x", 4, 0), ("w", 3, 0)]),
        ];
        let merged = merge(&reports, "api", None, 10);
        assert_eq!(merged.len(), 1);
        let top = &merged[0];
        assert_eq!(
            (top.denials, top.bound, top.bound_limit, top.summaries),
            (27, 2, 8, 2)
        );
        let keys: Vec<(&str, u64, u64)> = top
            .keys
            .iter()
            .map(|key| (key.key.as_str(), key.count, key.lower))
            .collect();
        // w is not listed by a (floor 2): at most 3 + 2.
        assert_eq!(
            keys,
            vec![("x", 14, 14), ("w", 5, 3), ("y", 5, 4), ("z", 2, 0)]
        );
        for key in &top.keys {
            assert!(key.count - key.lower <= top.bound);
        }
        assert!((top.top10_share - 21.0 / 27.0).abs() < 1e-9);
        assert!(merge(&reports, "other", None, 10).is_empty());
        assert_eq!(
            merge(&reports, "api", Some("per-minute"), 1)[0].keys.len(),
            1
        );
    }
}
