//! Reading a config directory: every `*.yaml` / `*.yml` file in it (not hidden ones, so the
//! `..data` links of a Kubernetes ConfigMap are followed once), one domain per file, each
//! field checked, an unknown one refused with its file, line and the reason.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saphyr::{MarkedYaml, YamlData};
use saphyr_parser::ScalarStyle;

use super::yaml::{self, FileBounds};
use super::{
    AlgorithmKind, Config, Domain, LimitSpec, Location, Rule, RuleLimit, Unit, ValuePattern,
};

/// Why a config file is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The line (0 when the whole file or directory is concerned).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// The config files of a directory, sorted.
/// More than `max_files` of them is an error, told without holding them all.
pub fn config_files(dir: &Path, max_files: usize) -> Result<Vec<PathBuf>, ConfigError> {
    let fail = |reason: String| ConfigError {
        file: dir.to_path_buf(),
        line: 0,
        reason,
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|error| fail(format!("cannot read the config directory: {error}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && path.is_file()
        })
        .take(max_files.saturating_add(1))
        .collect();
    if files.len() > max_files {
        return Err(fail(format!(
            "more than {max_files} config files (--config-max-files)"
        )));
    }
    files.sort();
    Ok(files)
}

/// Reads and checks every config file of `dir`, within `bounds`. All errors are returned
/// (one per file at most, plus duplicate domains), so one reload reports everything wrong.
pub fn load(dir: &Path, bounds: &FileBounds) -> Result<Config, Vec<ConfigError>> {
    let files = config_files(dir, bounds.max_files).map_err(|error| vec![error])?;
    let mut texts = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for file in files {
        match yaml::read_bounded(&file, bounds.max_file_bytes) {
            Ok(text) => texts.push((file, text)),
            Err(refused) => errors.push(ConfigError {
                file,
                line: refused.line,
                reason: refused.reason,
            }),
        }
    }
    let assembled = assemble(texts, bounds.max_depth);
    match (assembled, errors.is_empty()) {
        (Ok(config), true) => Ok(config),
        (Ok(_), false) => Err(errors),
        (Err(more), _) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// The config of files' texts (path, YAML), one domain each, names unique, each nested at
/// most `max_depth` collections deep.
pub fn assemble(
    texts: Vec<(PathBuf, String)>,
    max_depth: usize,
) -> Result<Config, Vec<ConfigError>> {
    let mut domains: HashMap<String, Domain> = HashMap::new();
    let mut errors = Vec::new();
    let mut files = Vec::with_capacity(texts.len());
    for (file, text) in texts {
        match parse_file(&file, &text, max_depth) {
            Ok(domain) => {
                if let Some(first) = domains.get(&domain.name) {
                    errors.push(ConfigError {
                        file: file.clone(),
                        line: domain.location.line,
                        reason: format!(
                            "domain '{}' is already defined at {}",
                            domain.name, first.location
                        ),
                    });
                } else {
                    domains.insert(domain.name.clone(), domain);
                }
            }
            Err(error) => errors.push(error),
        }
        files.push(file);
    }
    if errors.is_empty() {
        Ok(Config { domains, files })
    } else {
        Err(errors)
    }
}

/// Parses one file's text (one domain), nested at most `max_depth` collections deep.
pub fn parse_file(file: &Path, text: &str, max_depth: usize) -> Result<Domain, ConfigError> {
    let file = Arc::new(file.to_path_buf());
    let fail = |line: usize, reason: String| ConfigError {
        file: file.to_path_buf(),
        line,
        reason,
    };
    let documents =
        yaml::documents(text, max_depth).map_err(|refused| fail(refused.line, refused.reason))?;
    let mut documents = documents.iter();
    let Some(document) = documents.next() else {
        return Err(fail(
            0,
            "the file is empty: a config file holds one domain".into(),
        ));
    };
    if let Some(extra) = documents.next() {
        return Err(fail(
            line(extra),
            "a second YAML document: a config file holds one domain".into(),
        ));
    }
    let reader = Reader { file: &file };
    reader.domain(document)
}

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

pub(super) struct Reader<'a> {
    pub(super) file: &'a Arc<PathBuf>,
}

pub(super) type Fields<'n, 'i> = Vec<(&'n str, &'n MarkedYaml<'i>, usize)>;

pub(super) fn line(node: &MarkedYaml<'_>) -> usize {
    node.span.start.line()
}

impl Reader<'_> {
    pub(super) fn error(&self, line: usize, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line,
            reason: reason.into(),
        }
    }

    fn location(&self, line: usize) -> Location {
        Location {
            file: Arc::clone(self.file),
            line,
        }
    }

    /// A mapping's fields (keys as written, values, key lines), refusing any not in
    /// `known`.
    pub(super) fn fields<'n, 'i>(
        &self,
        node: &'n MarkedYaml<'i>,
        what: &str,
        known: &[&str],
    ) -> Result<Fields<'n, 'i>, ConfigError> {
        let YamlData::Mapping(mapping) = &node.data else {
            return Err(self.error(line(node), format!("{what} must be a mapping")));
        };
        let mut fields = Vec::with_capacity(mapping.len());
        for (key, value) in mapping {
            let name = match &key.data {
                YamlData::Representation(text, _, _) => text.as_ref(),
                _ => {
                    return Err(
                        self.error(line(key), format!("{what} has a key that is not a string"))
                    );
                }
            };
            if !known.contains(&name) {
                let hint = match name {
                    "quota_mode" => {
                        " (a field of the reference this service does not implement)".to_string()
                    }
                    _ => format!(" (known: {})", known.join(", ")),
                };
                return Err(
                    self.error(line(key), format!("unknown field '{name}' in {what}{hint}"))
                );
            }
            fields.push((name, value, line(key)));
        }
        Ok(fields)
    }

    pub(super) fn string(&self, node: &MarkedYaml<'_>, field: &str) -> Result<String, ConfigError> {
        match &node.data {
            YamlData::Representation(text, style, _) => {
                if *style == ScalarStyle::Plain && is_null(text) {
                    Err(self.error(line(node), format!("'{field}' is empty")))
                } else {
                    Ok(text.to_string())
                }
            }
            _ => Err(self.error(line(node), format!("'{field}' must be a string"))),
        }
    }

    pub(super) fn boolean(&self, node: &MarkedYaml<'_>, field: &str) -> Result<bool, ConfigError> {
        match &node.data {
            YamlData::Representation(text, ScalarStyle::Plain, _) => match text.as_ref() {
                "true" | "True" | "TRUE" => Ok(true),
                "false" | "False" | "FALSE" => Ok(false),
                other => Err(self.error(
                    line(node),
                    format!("'{field}' must be true or false, not '{other}'"),
                )),
            },
            _ => Err(self.error(line(node), format!("'{field}' must be true or false"))),
        }
    }

    pub(super) fn integer(
        &self,
        node: &MarkedYaml<'_>,
        field: &str,
        max: u64,
    ) -> Result<u64, ConfigError> {
        let text = match &node.data {
            YamlData::Representation(text, ScalarStyle::Plain, _) => text.as_ref(),
            _ => return Err(self.error(line(node), format!("'{field}' must be an integer"))),
        };
        match text.parse::<u64>() {
            Ok(value) if value <= max => Ok(value),
            Ok(_) => Err(self.error(line(node), format!("'{field}' is above {max}"))),
            Err(_) => Err(self.error(
                line(node),
                format!("'{field}' must be a non-negative integer, not '{text}'"),
            )),
        }
    }

    fn sequence<'n, 'i>(
        &self,
        node: &'n MarkedYaml<'i>,
        field: &str,
    ) -> Result<&'n [MarkedYaml<'i>], ConfigError> {
        match &node.data {
            YamlData::Sequence(items) => Ok(items),
            YamlData::Representation(text, ScalarStyle::Plain, _) if is_null(text) => Ok(&[]),
            _ => Err(self.error(line(node), format!("'{field}' must be a list"))),
        }
    }

    fn domain(&self, node: &MarkedYaml<'_>) -> Result<Domain, ConfigError> {
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
        if let Err(error) = spec.algorithm() {
            let at = fields.algorithm.map_or(line(node), |(_, at)| at);
            return Err(self.error(at, format!("this limit cannot be enforced: {error}")));
        }
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

/// A YAML node as JSON: mappings with their keys as written, plain scalars typed.
fn json_of(node: &MarkedYaml<'_>) -> serde_json::Value {
    use serde_json::Value;
    match &node.data {
        YamlData::Mapping(mapping) => Value::Object(
            mapping
                .iter()
                .map(|(key, value)| {
                    let key = match &key.data {
                        YamlData::Representation(text, _, _) => text.to_string(),
                        _ => json_of(key).to_string(),
                    };
                    (key, json_of(value))
                })
                .collect(),
        ),
        YamlData::Sequence(items) => Value::Array(items.iter().map(json_of).collect()),
        YamlData::Representation(text, ScalarStyle::Plain, _) => {
            let text: &str = text;
            if is_null(text) {
                Value::Null
            } else if let Ok(boolean) = text.parse::<bool>() {
                Value::Bool(boolean)
            } else if let Ok(integer) = text.parse::<i64>() {
                Value::from(integer)
            } else if let Some(number) = text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
            {
                Value::Number(number)
            } else {
                Value::String(text.to_string())
            }
        }
        YamlData::Representation(text, _, _) => Value::String(text.to_string()),
        _ => Value::Null,
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn parse(text: &str) -> Result<Domain, ConfigError> {
        parse_file(Path::new("test.yaml"), text, yaml::DEFAULT_MAX_DEPTH)
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
        let spec = per_key.limit.as_ref().unwrap().spec.as_ref().unwrap();
        assert_eq!(spec.unit, Unit::Minute);
        assert_eq!(spec.requests_per_unit, 100);
        let path = &per_key.children[0];
        assert!(path.shadow_mode);
        assert_eq!(path.path, "api_key.path=/search*");
        let spec = path.limit.as_ref().unwrap().spec.as_ref().unwrap();
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
