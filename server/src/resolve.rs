//! A request's descriptors matched to what they ask: each descriptor's rule (or its `limit`
//! override), `unlimited` and `replaces` applied, and for every limit that applies the Redis
//! key it counts on, its algorithm and the hits it is charged (0: read, not charged).
//! Pure: no store, no clock.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use redis_ratelimit_client::Algorithm;

use crate::config::{AlgorithmKind, BuiltLimit, Domain, Found, Unit};
use crate::plans::Plans;
use crate::request::{CheckRequest, Descriptor};
use crate::verdict::{CheckFailure, ReportedLimit, Status};

/// One limit a request's descriptor asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The descriptor's position in the request.
    pub index: usize,
    /// What its status reports.
    pub reported: ReportedLimit,
    /// `None`: 0 requests per unit, every request denied and nothing counted.
    pub algorithm: Option<Algorithm>,
    /// The Redis key.
    pub key: String,
    /// Hits charged; 0 reads the limit without charging it.
    pub hits: u64,
    /// Entries of the descriptor (on a Cluster, the most specific keys are called first).
    pub depth: usize,
    /// Decided and reported, never denying.
    pub shadow: bool,
    /// The rule as metrics name it.
    pub rule: String,
    /// Counted in windows aligned to the epoch (the reference's counting): a status without
    /// a reset from the store resets at the window's end.
    pub aligned: bool,
    /// The rule's `metadata`.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// The class of its key in the library's metrics (`key_class`): for a `tenant_key`
    /// rule, the tenant's plan (`override`, `default`); none for the others (`default`).
    pub key_class: Option<String>,
}

impl Item {
    /// The limit's window (how long an in-flight slot never released is held).
    pub fn unit(&self) -> Duration {
        Duration::from_secs(self.reported.unit.seconds())
    }
}

/// A request's statuses before any limit is asked (descriptors without a limit are final),
/// and the limits to ask.
#[derive(Debug)]
pub struct Resolution {
    /// One per descriptor.
    pub statuses: Vec<Status>,
    /// The limits that apply, in request order.
    pub items: Vec<Item>,
}

/// What a request's descriptors ask of `domain`'s rules; keys start with `key_prefix`.
pub fn resolve(
    domain: &Domain,
    request: &CheckRequest,
    plans: &Plans,
    key_prefix: &str,
) -> Result<Resolution, CheckFailure> {
    let mut statuses = Vec::with_capacity(request.descriptors.len());
    let mut items = Vec::new();
    let mut replaced: HashSet<&str> = HashSet::new();
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        let found = match descriptor.override_spec() {
            Some(_) => None,
            None => match domain.find(&descriptor.entries) {
                Some(found) => Some(found),
                None => {
                    statuses.push(Status::open(None));
                    continue;
                }
            },
        };
        if let Some(found) = &found {
            replaced.extend(found.limit.replaces.iter().map(String::as_str));
        }
        let item = item(
            index,
            descriptor,
            found.as_ref(),
            request,
            plans,
            key_prefix,
        )?;
        statuses.push(match &item {
            Some(item) => Status::open(Some(item.reported.clone())),
            None => Status::unlimited(),
        });
        items.extend(item);
    }
    // A limit replaced by another that applies to the request is not applied.
    items.retain(|item| {
        let gone = !item.reported.name.is_empty() && replaced.contains(item.reported.name.as_str());
        if let Some(status) = statuses.get_mut(item.index).filter(|_| gone) {
            status.limit = None;
        }
        !gone
    });
    Ok(Resolution { statuses, items })
}

/// The limit of one descriptor: its override's, or its rule's (`None`: unlimited).
fn item(
    index: usize,
    descriptor: &Descriptor,
    found: Option<&Found<'_>>,
    request: &CheckRequest,
    plans: &Plans,
    key_prefix: &str,
) -> Result<Option<Item>, CheckFailure> {
    // A caller's own limit is built here (from its numbers, no text); the config's were
    // built when it was read.
    let own;
    let (built, name, rule, shadow) = match (descriptor.override_spec(), found) {
        (Some(spec), _) => {
            own = BuiltLimit::build(spec)
                .map_err(|error| CheckFailure::Internal(error.to_string()))?;
            (&own, None, "limit_override".to_string(), false)
        }
        (None, Some(found)) => match &found.limit.spec {
            Some(built) => (
                built,
                found.limit.name.clone(),
                found.metric_name(&descriptor.entries),
                found.rule.shadow_mode,
            ),
            None => return Ok(None),
        },
        (None, None) => return Ok(None),
    };
    let (algorithm, requests_per_unit, unit, suffix, key_class) =
        limit_of(built, name.as_deref(), found, descriptor, plans)?;
    let label = name.clone().unwrap_or_else(|| match found {
        Some(found) => found.rule.path.clone(),
        None => rule.clone(),
    });
    Ok(Some(Item {
        index,
        reported: ReportedLimit {
            label,
            name: name.unwrap_or_default(),
            requests_per_unit,
            unit,
        },
        aligned: built.spec.algorithm == AlgorithmKind::FixedWindow || algorithm.is_none(),
        algorithm,
        key: key(
            key_prefix,
            &request.domain,
            &descriptor.entries,
            found,
            &suffix,
        ),
        hits: request.hits(descriptor),
        depth: descriptor.entries.len(),
        shadow,
        rule,
        metadata: found.and_then(|found| found.rule.metadata.clone()),
        key_class,
    }))
}

/// What a limit of a descriptor is made of: its algorithm, the limit reported (requests
/// per unit, unit), the key's suffix and the key's class.
type LimitOf<'a> = (Option<Algorithm>, u64, Unit, Cow<'a, str>, Option<String>);

/// The algorithm, the limit reported (requests per unit, unit), the key's suffix and its
/// class: the rule's, or for a limit naming a `tenant_key` the tenant's plan's.
fn limit_of<'a>(
    built: &'a BuiltLimit,
    name: Option<&str>,
    found: Option<&Found<'_>>,
    descriptor: &Descriptor,
    plans: &Plans,
) -> Result<LimitOf<'a>, CheckFailure> {
    let tenant_key = found.and_then(|found| found.limit.tenant_key.as_deref());
    let tenant = tenant_key.and_then(|tenant_key| {
        descriptor
            .entries
            .iter()
            .find(|(key, _)| key == tenant_key)
            .map(|(_, value)| value.as_str())
    });
    match (tenant, name) {
        (Some(tenant), Some(limit_name)) => {
            let limit = plans.limit(tenant, limit_name, built);
            Ok((
                limit.algorithm,
                limit.requests_per_unit,
                limit.unit,
                Cow::Owned(limit.key_suffix),
                Some(limit.class),
            ))
        }
        _ => Ok((
            built.algorithm.clone(),
            built.spec.requests_per_unit,
            built.spec.unit,
            Cow::Borrowed(built.key_suffix.as_str()),
            None,
        )),
    }
}

/// The Redis key of a descriptor under a limit: prefix, domain, the entries (a
/// `share_threshold` level by its pattern), and the limit's algorithm and unit (`suffix`).
/// Each part is escaped so that two descriptors never share a key, and a value cannot carry
/// a Cluster hash tag (`{`, `}`). The console reads a tenant's live usage on these keys.
pub fn key(
    prefix: &str,
    domain: &str,
    entries: &[(String, String)],
    found: Option<&Found<'_>>,
    suffix: &str,
) -> String {
    let mut key = String::with_capacity(64);
    key.push_str(prefix);
    escape_into(&mut key, domain);
    for (index, (name, value)) in entries.iter().enumerate() {
        key.push(':');
        escape_into(&mut key, name);
        key.push('=');
        let counted = found.map_or(value.as_str(), |found| found.counted_value(index, value));
        escape_into(&mut key, counted);
    }
    key.push('|');
    key.push_str(suffix);
    key
}

/// The text [`escape_into`] escaped, read back (`None` if it is not such a text).
pub fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let hex: String = chars.by_ref().take(2).collect();
        let code = u32::from_str_radix(&hex, 16).ok()?;
        out.push(char::from_u32(code)?);
    }
    Some(out)
}

fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' | ':' | '=' | '|' | '{' | '}' => out.push_str(&format!("%{:02X}", u32::from(c))),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_collide_or_carry_hash_tags() {
        let mut a = String::new();
        escape_into(&mut a, "b:c=d");
        assert_eq!(a, "b%3Ac%3Dd");
        let mut b = String::new();
        escape_into(&mut b, "{tag}%");
        assert_eq!(b, "%7Btag%7D%25");
        assert_eq!(unescape(&a).as_deref(), Some("b:c=d"));
        assert_eq!(unescape(&b).as_deref(), Some("{tag}%"));
        assert_eq!(unescape("%zz"), None);
    }
}
