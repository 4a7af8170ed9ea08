//! A bucket id (Envoy's `map<string, string>`) matched to a limit of the domain's YAML
//! rules: its entries, in some order, form a descriptor of the domain's rules, resolved as
//! an RLS request of that one descriptor would be (the same keys in Redis, `unlimited`,
//! limits of 0, plans). A map has no order, so the orders are tried in turn, the keys' own
//! order first; entries are bounded ([`MAX_BUCKET_ENTRIES`]), so the orders tried are too.

use std::collections::BTreeMap;

use redis_ratelimit_client::Algorithm;

use crate::engine::Engine;
use crate::request::{BadRequest, CheckRequest, Descriptor};
use crate::verdict::CheckFailure;

/// Entries a bucket id may carry: at most 5! = 120 orders are tried, once per new bucket.
pub const MAX_BUCKET_ENTRIES: usize = 5;

/// What a bucket is assigned.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// No rule matches, the rule is `unlimited`, or it is in shadow mode: `allow_all`.
    AllowAll,
    /// A limit of 0: `deny_all`.
    DenyAll,
    /// In-flight (concurrency) limits cannot be leased as tokens (Envoy reports no request's
    /// end): the bucket is not assigned, so Envoy's `no_assignment_behavior` decides.
    Unsupported,
    /// Tokens leased from this limit's quota in Redis.
    Leased(Leased),
}

/// A leased bucket's limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Leased {
    /// The Redis key (the one RLS would charge for the same descriptor).
    pub key: String,
    /// The limit's algorithm.
    pub algorithm: Algorithm,
    /// Requests per second the limit allows on average (its requests per unit / unit).
    pub rate_per_second: f64,
}

/// A bucket id's entries, sorted by key, each checked against the request bounds.
pub fn entries(
    bucket: &BTreeMap<String, String>,
    max_value_bytes: usize,
) -> Result<Vec<(String, String)>, BadRequest> {
    if bucket.is_empty() {
        return Err(BadRequest("a bucket_id has no entries".into()));
    }
    if bucket.len() > MAX_BUCKET_ENTRIES {
        return Err(BadRequest(format!(
            "a bucket_id has {} entries, more than {MAX_BUCKET_ENTRIES}",
            bucket.len()
        )));
    }
    for (key, value) in bucket {
        if key.is_empty() {
            return Err(BadRequest(
                "a bucket_id has an entry with an empty key".into(),
            ));
        }
        if key.len() > max_value_bytes || value.len() > max_value_bytes {
            return Err(BadRequest(format!(
                "bucket_id entry '{}' is longer than {max_value_bytes} bytes",
                key.chars().take(32).collect::<String>()
            )));
        }
    }
    Ok(bucket
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect())
}

/// The bucket's target under the domain's rules in force.
pub fn target(
    engine: &Engine,
    domain: &str,
    entries: &[(String, String)],
) -> Result<Target, CheckFailure> {
    let config = engine.config();
    let rules = config.domain(domain).ok_or_else(|| {
        CheckFailure::BadRequest(BadRequest(format!("unknown domain '{domain}'")))
    })?;
    let mut order: Vec<usize> = (0..entries.len()).collect();
    let found = loop {
        let ordered: Vec<(String, String)> = order
            .iter()
            .filter_map(|&index| entries.get(index).cloned())
            .collect();
        if rules.find(&ordered).is_some() {
            break Some(ordered);
        }
        if !next_permutation(&mut order) {
            break None;
        }
    };
    let Some(ordered) = found else {
        return Ok(Target::AllowAll);
    };
    let request = CheckRequest {
        domain: domain.to_string(),
        descriptors: vec![Descriptor {
            entries: ordered,
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
    };
    let resolved = crate::resolve::resolve(rules, &request, engine.plans(), engine.key_prefix())?;
    let Some(item) = resolved.items.into_iter().next() else {
        return Ok(Target::AllowAll);
    };
    if item.shadow {
        return Ok(Target::AllowAll);
    }
    let Some(algorithm) = item.algorithm else {
        return Ok(Target::DenyAll);
    };
    if algorithm.is_in_flight() {
        return Ok(Target::Unsupported);
    }
    #[allow(clippy::cast_precision_loss)]
    let rate_per_second =
        item.reported.requests_per_unit as f64 / item.reported.unit.seconds().max(1) as f64;
    Ok(Target::Leased(Leased {
        key: item.key,
        algorithm,
        rate_per_second,
    }))
}

/// The next permutation in lexicographic order; false after the last.
fn next_permutation(order: &mut [usize]) -> bool {
    let Some(pivot) = order
        .windows(2)
        .rposition(|pair| matches!(pair, [left, right] if left < right))
    else {
        return false;
    };
    let Some(pivot_value) = order.get(pivot).copied() else {
        return false;
    };
    // The rightmost value above the pivot's lies after it (the tail is descending).
    let Some(swap) = order.iter().rposition(|&value| value > pivot_value) else {
        return false;
    };
    order.swap(pivot, swap);
    if let Some(tail) = order.get_mut(pivot.saturating_add(1)..) {
        tail.reverse();
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::next_permutation;

    #[test]
    fn every_order_of_three_entries_is_tried_once() {
        let mut order = vec![0, 1, 2];
        let mut seen = vec![order.clone()];
        while next_permutation(&mut order) {
            seen.push(order.clone());
        }
        assert_eq!(seen.len(), 6);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 6);
    }
}
