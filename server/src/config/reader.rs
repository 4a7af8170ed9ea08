//! The typed reading of a YAML node's fields: each one checked against the names a mapping
//! may hold, refused with its file, line and the reason.

use std::path::PathBuf;
use std::sync::Arc;

use saphyr::{MarkedYaml, YamlData};
use saphyr_parser::ScalarStyle;

use super::error::ConfigError;
use super::rules::Location;

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

    pub(super) fn location(&self, line: usize) -> Location {
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

    pub(super) fn sequence<'n, 'i>(
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
}

/// A YAML node as JSON: mappings with their keys as written, plain scalars typed.
pub(super) fn json_of(node: &MarkedYaml<'_>) -> serde_json::Value {
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

pub(super) fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}
