//! The reference's format, field by field: a file's domain, its descriptors (rules, nested),
//! each rule's `rate_limit` block and this service's extensions to it (`algorithm`, `burst`,
//! `tenant_key`), an unknown field refused with its file, line and the reason.

use saphyr::MarkedYaml;

use super::error::ConfigError;
use super::limit::{AlgorithmKind, BuiltLimit, LimitSpec, RuleLimit, Unit};
use super::pattern::ValuePattern;
use super::reader::{Reader, json_of, line};
use super::rules::{Domain, Rule};

/// The fields of a `rate_limit` block as read, with the line of those a later check
/// points at.
#[derive(Default)]
struct LimitFields {
    unit: Option<Unit>,
    requests_per_unit: Option<u64>,
    name: Option<String>,
    unlimited: bool,
    replaces: Vec<String>,
    algorithm: Option<(AlgorithmKind, usize)>,
    burst: Option<(u64, usize)>,
    tenant_key: Option<(String, usize)>,
}

impl Reader<'_> {
    pub(super) fn domain(&self, node: &MarkedYaml<'_>) -> Result<Domain, ConfigError> {
        let fields = self.fields(node, "the file", &["domain", "descriptors"])?;
        let mut name = None;
        let mut rules = Vec::new();
        for (field, value, _) in &fields {
            match *field {
                "domain" => name = Some(self.string(value, "domain")?),
                _ => rules = self.rules(value, "", &[])?,
            }
        }
        let name = name.ok_or_else(|| self.error(line(node), "the file has no 'domain'"))?;
        check_unique(self, &rules)?;
        Ok(Domain {
            name,
            rules,
            location: self.location(line(node)),
        })
    }

    /// The rules of a `descriptors` list under the rule at `parent` (its path), whose keys
    /// from the top are `ancestors`.
    fn rules(
        &self,
        node: &MarkedYaml<'_>,
        parent: &str,
        ancestors: &[&str],
    ) -> Result<Vec<Rule>, ConfigError> {
        self.sequence(node, "descriptors")?
            .iter()
            .map(|item| self.rule(item, parent, ancestors))
            .collect()
    }

    fn rule(
        &self,
        node: &MarkedYaml<'_>,
        parent: &str,
        ancestors: &[&str],
    ) -> Result<Rule, ConfigError> {
        let fields = self.fields(
            node,
            "a descriptor",
            &[
                "key",
                "value",
                "rate_limit",
                "shadow_mode",
                "detailed_metric",
                "value_to_metric",
                "share_threshold",
                "metadata",
                "descriptors",
            ],
        )?;
        let mut key = None;
        let mut value = None;
        let mut limit = None;
        let mut shadow_mode = false;
        let mut detailed_metric = false;
        let mut value_to_metric = false;
        let mut share_threshold = None;
        let mut metadata = None;
        let mut children_node = None;
        for (field, item, at) in &fields {
            match *field {
                "key" => key = Some((self.string(item, "key")?, *at)),
                "value" => value = Some(self.string(item, "value")?),
                "rate_limit" => limit = Some((self.limit(item)?, line(item))),
                "shadow_mode" => shadow_mode = self.boolean(item, "shadow_mode")?,
                "detailed_metric" => detailed_metric = self.boolean(item, "detailed_metric")?,
                "value_to_metric" => value_to_metric = self.boolean(item, "value_to_metric")?,
                "share_threshold" => {
                    share_threshold = Some((self.boolean(item, "share_threshold")?, *at));
                }
                "metadata" => metadata = Some(self.metadata(item)?),
                _ => children_node = Some(*item),
            }
        }
        let (key, key_line) =
            key.ok_or_else(|| self.error(line(node), "a descriptor has no 'key'"))?;
        if key.is_empty() {
            // It could never match: an entry's key is never empty.
            return Err(self.error(key_line, "a descriptor's 'key' is empty"));
        }
        let mut path = if parent.is_empty() {
            key.clone()
        } else {
            format!("{parent}.{key}")
        };
        if let Some(value) = &value {
            path.push('=');
            path.push_str(value);
        }
        let mut keys = ancestors.to_vec();
        keys.push(&key);
        let unknown_tenant_key = limit.as_ref().and_then(|(limit, at)| {
            let tenant_key = limit.tenant_key.as_deref()?;
            (!keys.contains(&tenant_key)).then_some((tenant_key, *at))
        });
        if let Some((tenant_key, at)) = unknown_tenant_key {
            return Err(self.error(
                at,
                format!(
                    "'tenant_key: {tenant_key}' is not a key of descriptor '{path}' (one of: {})",
                    keys.join(", ")
                ),
            ));
        }
        let limit = limit.map(|(limit, _)| limit);
        let value = value.as_deref().map(ValuePattern::parse);
        let share_threshold = match share_threshold {
            Some((true, _)) if value.as_ref().is_some_and(ValuePattern::is_wildcard) => true,
            Some((true, at)) => {
                return Err(self.error(
                    at,
                    format!(
                        "'share_threshold' is for wildcard values (with a '*'), and descriptor \
                         '{path}' has none"
                    ),
                ));
            }
            _ => false,
        };
        let children = match children_node {
            Some(children) => self.rules(children, &path, &keys)?,
            None => Vec::new(),
        };
        check_unique(self, &children)?;
        Ok(Rule {
            key,
            value,
            limit,
            shadow_mode,
            detailed_metric,
            value_to_metric,
            share_threshold,
            metadata,
            children,
            path,
            location: self.location(line(node)),
        })
    }

    /// A `rate_limit` block: its fields read, their combination checked, an enforceable
    /// limit made (or an unlimited one).
    fn limit(&self, node: &MarkedYaml<'_>) -> Result<RuleLimit, ConfigError> {
        let fields = self.limit_fields(node)?;
        self.check_names(node, &fields)?;
        if fields.unlimited {
            self.unlimited(node, fields)
        } else {
            self.rate_limit(node, fields)
        }
    }

    /// The fields of a `rate_limit` block, each read and typed (none refused yet for
    /// what the others say).
    fn limit_fields(&self, node: &MarkedYaml<'_>) -> Result<LimitFields, ConfigError> {
        let fields = self.fields(
            node,
            "rate_limit",
            &[
                "unit",
                "requests_per_unit",
                "name",
                "unlimited",
                "replaces",
                "algorithm",
                "burst",
                "tenant_key",
            ],
        )?;
        let mut read = LimitFields::default();
        for (field, item, _) in &fields {
            match *field {
                "unit" => read.unit = Some(self.unit(item)?),
                "requests_per_unit" => {
                    read.requests_per_unit =
                        Some(self.integer(item, "requests_per_unit", u64::from(u32::MAX))?);
                }
                "name" => read.name = Some(self.string(item, "name")?),
                "unlimited" => read.unlimited = self.boolean(item, "unlimited")?,
                "replaces" => read.replaces = self.replaces(item)?,
                "algorithm" => read.algorithm = Some((self.algorithm(item)?, line(item))),
                "tenant_key" => {
                    read.tenant_key = Some((self.string(item, "tenant_key")?, line(item)));
                }
                _ => {
                    read.burst = Some((
                        self.integer(item, "burst", u64::from(u32::MAX))?,
                        line(item),
                    ))
                }
            }
        }
        Ok(read)
    }

    /// `unit`: one of the reference's units.
    fn unit(&self, item: &MarkedYaml<'_>) -> Result<Unit, ConfigError> {
        let text = self.string(item, "unit")?;
        Unit::parse(&text).ok_or_else(|| {
            self.error(
                line(item),
                format!("unknown unit '{text}' (second, minute, hour, day, week, month, year)"),
            )
        })
    }

    /// `algorithm`: a kind the service takes, by its configuration name.
    fn algorithm(&self, item: &MarkedYaml<'_>) -> Result<AlgorithmKind, ConfigError> {
        let text = self.string(item, "algorithm")?;
        AlgorithmKind::parse(&text).ok_or_else(|| {
            self.error(
                line(item),
                format!("unknown algorithm '{text}' ({})", AlgorithmKind::names()),
            )
        })
    }

    /// `replaces` does not name the limit itself; `tenant_key` comes with a `name`, on a
    /// rate limit.
    fn check_names(&self, node: &MarkedYaml<'_>, fields: &LimitFields) -> Result<(), ConfigError> {
        if let Some(own) = fields
            .name
            .as_deref()
            .filter(|own| fields.replaces.iter().any(|r| r == own))
        {
            return Err(self.error(
                line(node),
                format!("'replaces' names this limit itself ('{own}'): it would never apply"),
            ));
        }
        let Some((_, at)) = &fields.tenant_key else {
            return Ok(());
        };
        if fields.name.is_none() {
            return Err(self.error(
                *at,
                "a limit with 'tenant_key' needs a 'name': the plan limit it takes",
            ));
        }
        if fields.unlimited {
            return Err(self.error(*at, "an unlimited limit has no 'tenant_key'"));
        }
        if matches!(fields.algorithm, Some((AlgorithmKind::Concurrency, _))) {
            return Err(self.error(
                *at,
                "'tenant_key' is for rate limits; plans have no concurrency limits",
            ));
        }
        Ok(())
    }

    /// `unlimited: true`: as the reference, a unit is refused, a requests_per_unit ignored.
    fn unlimited(
        &self,
        node: &MarkedYaml<'_>,
        fields: LimitFields,
    ) -> Result<RuleLimit, ConfigError> {
        if fields.unit.is_some() {
            return Err(self.error(line(node), "an unlimited limit has no 'unit'"));
        }
        if fields.algorithm.is_some() || fields.burst.is_some() {
            return Err(self.error(
                line(node),
                "an unlimited limit has no 'algorithm' or 'burst'",
            ));
        }
        Ok(RuleLimit {
            spec: None,
            name: fields.name,
            replaces: fields.replaces,
            tenant_key: None,
        })
    }

    /// A limit with a unit and a rate: `burst` only where the algorithm takes one, and
    /// what the client library can enforce.
    fn rate_limit(
        &self,
        node: &MarkedYaml<'_>,
        fields: LimitFields,
    ) -> Result<RuleLimit, ConfigError> {
        let unit = fields
            .unit
            .ok_or_else(|| self.error(line(node), "rate_limit has no 'unit'"))?;
        let requests_per_unit = fields
            .requests_per_unit
            .ok_or_else(|| self.error(line(node), "rate_limit has no 'requests_per_unit'"))?;
        let kind = fields
            .algorithm
            .map_or(AlgorithmKind::FixedWindow, |(kind, _)| kind);
        if let Some((value, at)) = fields.burst {
            if !kind.has_burst() {
                return Err(self.error(
                    at,
                    format!(
                        "'burst' is for token_bucket and gcra, not {}",
                        kind.as_str()
                    ),
                ));
            }
            if value == 0 {
                return Err(self.error(at, "'burst' must be at least 1"));
            }
        }
        let spec = LimitSpec {
            requests_per_unit,
            unit,
            algorithm: kind,
            burst: fields.burst.map(|(value, _)| value),
        };
        let spec = BuiltLimit::build(spec).map_err(|error| {
            let at = fields.algorithm.map_or(line(node), |(_, at)| at);
            self.error(at, format!("this limit cannot be enforced: {error}"))
        })?;
        Ok(RuleLimit {
            spec: Some(spec),
            name: fields.name,
            replaces: fields.replaces,
            tenant_key: fields.tenant_key.map(|(key, _)| key),
        })
    }

    /// `metadata`: any mapping, kept as JSON (plain scalars typed as YAML reads them:
    /// booleans, integers, floats, null; quoted ones strings).
    fn metadata(
        &self,
        node: &MarkedYaml<'_>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, ConfigError> {
        match json_of(node) {
            serde_json::Value::Object(map) => Ok(map),
            _ => Err(self.error(line(node), "'metadata' must be a mapping")),
        }
    }

    fn replaces(&self, node: &MarkedYaml<'_>) -> Result<Vec<String>, ConfigError> {
        self.sequence(node, "replaces")?
            .iter()
            .map(|item| {
                let fields = self.fields(item, "a replaces entry", &["name"])?;
                let (_, value, _) = fields
                    .first()
                    .ok_or_else(|| self.error(line(item), "a replaces entry has no 'name'"))?;
                self.string(value, "name")
                    .ok()
                    .filter(|name| !name.is_empty())
                    .ok_or_else(|| self.error(line(value), "a replaces entry has an empty 'name'"))
            })
            .collect()
    }
}

/// Two rules of one level with the same key and value would make the second unreachable.
fn check_unique(reader: &Reader<'_>, rules: &[Rule]) -> Result<(), ConfigError> {
    for (index, rule) in rules.iter().enumerate() {
        if let Some(first) = rules
            .iter()
            .take(index)
            .find(|other| other.key == rule.key && other.value == rule.value)
        {
            return Err(reader.error(
                rule.location.line,
                format!(
                    "descriptor '{}' is already defined at line {}",
                    rule.path, first.location.line
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use std::path::Path;

    use super::super::load::parse_file;
    use super::super::rules::Config;
    use super::*;

    fn parse(text: &str) -> Result<Domain, ConfigError> {
        parse_file(Path::new("test.yaml"), text, crate::cli::DEFAULT_MAX_DEPTH)
    }

    #[test]
    fn reads_the_reference_format() {
        let domain = parse(
            "domain: api\n\
             descriptors:\n\
             \x20 - key: api_key\n\
             \x20   rate_limit:\n\
             \x20     unit: MINUTE\n\
             \x20     requests_per_unit: 100\n\
             \x20     name: per-key\n\
             \x20   descriptors:\n\
             \x20     - key: path\n\
             \x20       value: \"/search*\"\n\
             \x20       shadow_mode: true\n\
             \x20       rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}\n\
             \x20 - key: tier\n\
             \x20   value: \"007\"\n\
             \x20   rate_limit: {unlimited: true}\n",
        )
        .unwrap();
        assert_eq!(domain.name, "api");
        assert_eq!(domain.rules.len(), 2);
        let per_key = &domain.rules[0];
        assert_eq!(per_key.location.line, 3);
        let spec = &per_key.limit.as_ref().unwrap().spec.as_ref().unwrap().spec;
        assert_eq!(spec.unit, Unit::Minute);
        assert_eq!(spec.requests_per_unit, 100);
        let path = &per_key.children[0];
        assert!(path.shadow_mode);
        assert_eq!(path.path, "api_key.path=/search*");
        let spec = &path.limit.as_ref().unwrap().spec.as_ref().unwrap().spec;
        assert_eq!(spec.algorithm, AlgorithmKind::TokenBucket);
        assert_eq!(spec.burst, Some(10));
        assert_eq!(
            domain.rules[1].value,
            Some(ValuePattern::Exact("007".into()))
        );
        assert!(domain.rules[1].limit.as_ref().unwrap().spec.is_none());

        let entries = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let found = domain.find(&entries(&[("api_key", "k1")])).unwrap();
        assert_eq!(found.rule.path, "api_key");
        let found = domain
            .find(&entries(&[("api_key", "k1"), ("path", "/search/x")]))
            .unwrap();
        assert_eq!(found.rule.path, "api_key.path=/search*");
        assert!(
            domain
                .find(&entries(&[("api_key", "k1"), ("path", "/other")]))
                .is_none()
        );
        assert!(domain.find(&entries(&[("path", "/search")])).is_none());
        assert!(domain.find(&entries(&[("tier", "007")])).is_some());
        assert!(domain.find(&entries(&[("tier", "7")])).is_none());
    }

    #[test]
    fn a_plan_limit_names_a_key_of_its_descriptor() {
        let domain = parse(
            "domain: a\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: path\n        rate_limit: {unit: second, requests_per_unit: 1, name: n, tenant_key: tenant}\n",
        )
        .unwrap();
        let limit = domain.rules[0].children[0].limit.as_ref().unwrap();
        assert_eq!(limit.tenant_key.as_deref(), Some("tenant"));
        assert!(
            Config {
                domains: [("a".to_string(), domain)].into(),
                files: Vec::new(),
            }
            .uses_plans()
        );
    }

    #[test]
    fn refuses_with_the_line_and_the_reason() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limt: {}\n",
                4,
                "unknown field 'rate_limt'",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                4,
                "unknown unit 'fortnight'",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
                6,
                "non-negative integer",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: leaky\n",
                7,
                "unknown algorithm 'leaky'",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 3\n",
                7,
                "'burst' is for token_bucket and gcra",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                4,
                "does not implement",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
                5,
                "already defined at line 3",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                4,
                "true or false",
            ),
            ("descriptors: []\n", 1, "no 'domain'"),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}\n",
                4,
                "an unlimited limit has no 'unit'",
            ),
            ("domain: a\n  descriptors: [\n", 2, "not YAML"),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n",
                4,
                "'replaces' names this limit itself ('x')",
            ),
            (
                "domain: a\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                3,
                "a descriptor's 'key' is empty",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                4,
                "'share_threshold' is for wildcard values",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: a\n      replaces:\n        - name:\n",
                9,
                "a replaces entry has an empty 'name'",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      name: n\n      tenant_key: k\n",
                7,
                "an unlimited limit has no 'tenant_key'",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, algorithm: concurrency, tenant_key: k}\n",
                4,
                "plans have no concurrency limits",
            ),
            (
                "domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: p\n        rate_limit: {unit: second, requests_per_unit: 1, name: n, tenant_key: q}\n",
                6,
                "not a key of descriptor 'k.p' (one of: k, p)",
            ),
        ];
        for (text, line, reason) in cases {
            let error = parse(text).unwrap_err();
            assert_eq!(error.line, *line, "{text}: {error}");
            assert!(error.reason.contains(reason), "{text}: {error}");
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("test.yaml:{line}: ")),
                "{error}"
            );
        }
    }
}
