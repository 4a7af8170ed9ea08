//! A config's rules: every domain's descriptors, nested ([`Rule`]), and the lookup of a
//! request descriptor's rule ([`Domain::find`]) as the reference matches it.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::limit::RuleLimit;
use super::pattern::ValuePattern;

/// Where something was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: Arc<PathBuf>,
    /// Its line, from 1.
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One `descriptors` entry of the config: a key, an optional value (or pattern), a limit and
/// nested descriptors. A rule with neither a limit nor nested rules matches and applies no
/// limit (the reference's "whitelisted" descriptor).
#[derive(Clone, Debug)]
pub struct Rule {
    /// The entry key it matches.
    pub key: String,
    /// The value it matches: `None` matches any value (one counter per value).
    pub value: Option<ValuePattern>,
    /// Its limit, if any.
    pub limit: Option<RuleLimit>,
    /// Decide and report, never deny.
    pub shadow_mode: bool,
    /// Metrics name the request's own values rather than the rule.
    pub detailed_metric: bool,
    /// Metrics name the request's value at this level (for a rule without a value, or a
    /// wildcard one).
    pub value_to_metric: bool,
    /// A wildcard rule whose matching values share one counter (the pattern is the key's
    /// value) instead of one counter each.
    pub share_threshold: bool,
    /// The reference's `metadata`: returned in the response's dynamic metadata for the
    /// descriptors that passed, when asked for (`--response-dynamic-metadata`).
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Nested rules (matched by the next entry of a descriptor).
    pub children: Vec<Rule>,
    /// The rule's path in the config (`key=value.key`), its identity in metrics.
    pub path: String,
    /// Where it was written.
    pub location: Location,
}

/// One `domain` and its rules.
#[derive(Clone, Debug)]
pub struct Domain {
    /// The domain.
    pub name: String,
    /// Its top-level rules.
    pub rules: Vec<Rule>,
    /// The file it came from.
    pub location: Location,
}

/// What a descriptor's entries matched: the rule reached by its last entry, if it has a
/// limit, and the rule each entry matched on the way.
#[derive(Clone, Debug)]
pub struct Found<'a> {
    /// The rule.
    pub rule: &'a Rule,
    /// Its limit.
    pub limit: &'a RuleLimit,
    /// The rule each entry matched, in order (the last is `rule`).
    pub path: Vec<&'a Rule>,
}

impl Found<'_> {
    /// The value entry `index` counts under: the request's, or for a `share_threshold`
    /// rule its pattern (every matching value shares the counter).
    pub fn counted_value<'v>(&'v self, index: usize, value: &'v str) -> &'v str {
        match self.path.get(index) {
            Some(Rule {
                share_threshold: true,
                value: Some(pattern),
                ..
            }) => pattern.as_str(),
            _ => value,
        }
    }

    /// The rule as metrics name it: its path in the config (`key=value.key`), with the
    /// request's values where the rule asks for them (`detailed_metric` on the rule reached,
    /// `value_to_metric` per level), a `share_threshold` level always by its pattern.
    pub fn metric_name(&self, entries: &[(String, String)]) -> String {
        let detailed = self.rule.detailed_metric;
        let mut name = String::new();
        for (rule, (key, value)) in self.path.iter().zip(entries) {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(key);
            let shown = match &rule.value {
                Some(pattern) if rule.share_threshold => Some(pattern.as_str()),
                Some(ValuePattern::Exact(exact)) => Some(exact.as_str()),
                _ if detailed || rule.value_to_metric => Some(value.as_str()),
                Some(pattern) => Some(pattern.as_str()),
                None => None,
            };
            if let Some(shown) = shown {
                name.push('=');
                name.push_str(shown);
            }
        }
        name
    }
}

impl Domain {
    /// The rule of a descriptor, matched as the reference does: entry by entry, each level
    /// trying an exact value, then the wildcard values in config order, then the rule with
    /// no value; the limit applies only if the descriptor's last entry lands on a rule that
    /// has one.
    pub fn find<'a>(&'a self, entries: &[(String, String)]) -> Option<Found<'a>> {
        let mut level: &[Rule] = &self.rules;
        let count = entries.len();
        let mut path = Vec::with_capacity(count);
        for (index, (key, value)) in entries.iter().enumerate() {
            let rule = match_level(level, key, value)?;
            path.push(rule);
            let last = index.saturating_add(1) == count;
            if last {
                return rule.limit.as_ref().map(|limit| Found { rule, limit, path });
            }
            if rule.children.is_empty() {
                return None;
            }
            level = &rule.children;
        }
        None
    }
}

fn match_level<'a>(rules: &'a [Rule], key: &str, value: &str) -> Option<&'a Rule> {
    let same_key = || rules.iter().filter(move |rule| rule.key == key);
    same_key()
        .find(|rule| matches!(&rule.value, Some(ValuePattern::Exact(exact)) if exact == value))
        .or_else(|| {
            same_key().find(|rule| {
                matches!(&rule.value, Some(pattern @ ValuePattern::Glob(..)) if pattern.matches(value))
            })
        })
        .or_else(|| same_key().find(|rule| rule.value.is_none()))
}

/// Every domain of a config directory.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The domains by name.
    pub domains: HashMap<String, Domain>,
    /// The files read, sorted.
    pub files: Vec<PathBuf>,
}

impl Config {
    /// Whether some limit takes its value from the policy store (`tenant_key`).
    pub fn uses_plans(&self) -> bool {
        fn any(rules: &[Rule]) -> bool {
            rules.iter().any(|rule| {
                rule.limit
                    .as_ref()
                    .is_some_and(|limit| limit.tenant_key.is_some())
                    || any(&rule.children)
            })
        }
        self.domains.values().any(|domain| any(&domain.rules))
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }
}
