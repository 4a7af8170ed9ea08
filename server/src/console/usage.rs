//! A tenant's live usage: for every limit of the config that takes its value from the
//! policy store (`tenant_key`), the key the service counts the tenant's requests on and what
//! is left there now, read with `RL.PEEK` (through the store the limiter uses, so with the
//! backend it speaks; nothing is charged or written).
//!
//! The key is the one a request would count on: the descriptor that reaches the limit's
//! rule with the tenant's id at the `tenant_key` entry. A rule below a level that counts
//! per value (a key without a value, or a wildcard without `share_threshold`) has one
//! counter per such value: it is listed, not read.

use std::time::Duration;

use redis_ratelimit_client::store::{Acquire, LimitCall};
use redis_ratelimit_plans::history::rule_text;
use redis_ratelimit_plans::snapshot::Rule as PlanRule;
use serde_json::{Map, Value, json};

use super::state::Console;
use crate::config::{Config, Domain, Rule, ValuePattern};
use crate::resolve;

/// The most limits one tenant's usage reads.
pub const MAX_SITES: usize = 64;

/// A rule whose limit names a `tenant_key`, and the rules that lead to it.
struct Site<'a> {
    domain: &'a Domain,
    path: Vec<&'a Rule>,
}

/// Every such rule of the config, domain by domain (by name), in config order.
fn sites(config: &Config) -> Vec<Site<'_>> {
    fn walk<'a>(domain: &'a Domain, rules: &'a [Rule], path: &[&'a Rule], out: &mut Vec<Site<'a>>) {
        for rule in rules {
            let mut here = path.to_vec();
            here.push(rule);
            if rule
                .limit
                .as_ref()
                .is_some_and(|limit| limit.tenant_key.is_some())
            {
                out.push(Site {
                    domain,
                    path: here.clone(),
                });
            }
            walk(domain, &rule.children, &here, out);
        }
    }
    let mut domains: Vec<&Domain> = config.domains.values().collect();
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for domain in domains {
        walk(domain, &domain.rules, &[], &mut out);
    }
    out
}

/// How a site's descriptor is made for a tenant.
enum Entries {
    /// The entries of the descriptor.
    Known(Vec<(String, String)>),
    /// The rule counts per value of this entry key: no one counter to read.
    PerValue(String),
    /// The tenant does not reach this rule (another value or rule takes it).
    NotReached,
}

fn entries(path: &[&Rule], tenant_key: &str, tenant: &str) -> Entries {
    let mut entries = Vec::with_capacity(path.len());
    for rule in path {
        let value = if rule.key == tenant_key {
            if rule
                .value
                .as_ref()
                .is_some_and(|pattern| !pattern.matches(tenant))
            {
                return Entries::NotReached;
            }
            tenant.to_string()
        } else {
            match &rule.value {
                Some(ValuePattern::Exact(value)) => value.clone(),
                Some(pattern @ ValuePattern::Glob(..)) if rule.share_threshold => {
                    pattern.as_str().to_string()
                }
                _ => return Entries::PerValue(rule.key.clone()),
            }
        };
        entries.push((rule.key.clone(), value));
    }
    Entries::Known(entries)
}

/// The tenant's usage of every limit that takes its value from the store.
pub async fn usage(console: &Console, tenant: &str) -> Value {
    let config = console.engine.config();
    let plans = console.engine.plans();
    let effective = plans.source().map(|source| source.resolve(tenant, &[]));
    let all = sites(&config);
    let more = all.len().saturating_sub(MAX_SITES);
    let mut rows = Vec::new();
    for site in all.iter().take(MAX_SITES) {
        let Some(rule) = site.path.last() else {
            continue;
        };
        let Some(limit) = rule.limit.as_ref() else {
            continue;
        };
        let (Some(name), Some(tenant_key), Some(built)) = (
            limit.name.as_deref(),
            limit.tenant_key.as_deref(),
            limit.spec.as_ref(),
        ) else {
            continue;
        };
        let source = effective
            .as_ref()
            .and_then(|limits| {
                limits
                    .iter()
                    .find(|limit| limit.spec.name() == name && limit.rule != PlanRule::Default)
            })
            .map_or_else(
                || "the config's default (the store has none for this tenant)".to_string(),
                |limit| format!("{} <- {}", limit.spec, rule_text(&limit.rule)),
            );
        let mut row = Map::new();
        row.insert("domain".into(), json!(site.domain.name));
        row.insert("rule".into(), json!(rule.path));
        row.insert("limit".into(), json!(name));
        row.insert("source".into(), json!(source));
        let entries = match entries(&site.path, tenant_key, tenant) {
            Entries::Known(entries) => entries,
            Entries::PerValue(key) => {
                row.insert("per_value".into(), json!(key));
                rows.push(Value::Object(row));
                continue;
            }
            Entries::NotReached => continue,
        };
        let Some(found) = site.domain.find(&entries) else {
            continue;
        };
        if !std::ptr::eq(found.rule, *rule) {
            continue;
        }
        let plan_limit = plans.limit(tenant, name, built);
        let key = resolve::key(
            console.engine.key_prefix(),
            &site.domain.name,
            &entries,
            Some(&found),
            &plan_limit.key_suffix,
        );
        row.insert("key".into(), json!(key));
        row.insert(
            "per_unit".into(),
            json!({
                "requests": plan_limit.requests_per_unit,
                "unit": plan_limit.unit.name(),
            }),
        );
        match &plan_limit.algorithm {
            None => {
                row.insert("blocked".into(), json!(true));
            }
            Some(algorithm) => {
                row.insert("algorithm".into(), json!(algorithm.kind().short_name()));
                let call = LimitCall {
                    key: &key,
                    algorithm,
                    weight: 1,
                    max_wait: None,
                    lease_suffix: None,
                };
                let asked = Acquire {
                    limits: vec![call],
                    units: 1,
                    partial_min: None,
                    holder: None,
                };
                let read = tokio::time::timeout(
                    console.store_timeout.max(Duration::from_millis(100)),
                    console.store.peek(&asked),
                )
                .await;
                match read {
                    Ok(Ok(grant)) => match grant.views.first() {
                        Some(view) => {
                            // A peek of one unit answers what would be left after taking
                            // it; what is left now is one more (as the client's probes
                            // read it).
                            let left = if view.allowed {
                                view.remaining.saturating_add(1).min(view.limit)
                            } else {
                                view.remaining
                            };
                            row.insert("remaining".into(), json!(left));
                            row.insert("quota".into(), json!(view.limit));
                            row.insert(
                                "reset_ms".into(),
                                json!(
                                    u64::try_from(view.reset_after.as_millis()).unwrap_or(u64::MAX)
                                ),
                            );
                            row.insert("allowed".into(), json!(view.allowed));
                            row.insert("backend".into(), json!(grant.backend.as_str()));
                        }
                        None => {
                            row.insert("error".into(), json!("the store answered no view"));
                        }
                    },
                    Ok(Err(error)) => {
                        row.insert("error".into(), json!(error.to_string()));
                    }
                    Err(_) => {
                        row.insert("error".into(), json!("the store did not answer in time"));
                    }
                }
            }
        }
        rows.push(Value::Object(row));
    }
    json!({
        "tenant": tenant,
        "limits": rows,
        "more": more,
        "replica_version": plans.source().map(|source| source.version()),
    })
}

/// The tenant a rendered key counts for, to link a throttled key to its tenant: for the
/// service's keys (`PREFIX` `domain:name=value...|suffix`), the value of an entry some
/// `tenant_key` limit of the domain names; for a store-backed policy of the client library
/// (`rl:plan:{tenant}:...`), the hash tag.
pub fn tenant_of_key(config: &Config, prefix: &str, key: &str) -> Option<String> {
    if let Some(rest) = key.strip_prefix("rl:plan:{") {
        let (tenant, _) = rest.split_once("}:")?;
        return Some(tenant.to_string());
    }
    let (head, _) = key.strip_prefix(prefix)?.split_once('|')?;
    let mut parts = head.split(':');
    let domain = resolve::unescape(parts.next()?)?;
    let tenant_keys: Vec<String> = sites(config)
        .iter()
        .filter(|site| site.domain.name == domain)
        .filter_map(|site| site.path.last()?.limit.as_ref()?.tenant_key.clone())
        .collect();
    parts.find_map(|entry| {
        let (name, value) = entry.split_once('=')?;
        let name = resolve::unescape(name)?;
        tenant_keys
            .contains(&name)
            .then(|| resolve::unescape(value))
            .flatten()
    })
}
