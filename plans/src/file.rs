//! The policy store as a TOML file (`rlctl export` writes it, `rlctl import` makes the store
//! hold exactly it):
//!
//! ```toml
//! [plans]
//! free = ["per-minute=sliding:60/1m"]
//! pro = ["per-minute=sliding:1000/1m", "per-day=fixed:100000/1d"]
//!
//! [tenants]
//! acme = "pro"
//!
//! [[override]]
//! pattern = "acme"              # or a wildcard: "acme-*"
//! limits = ["per-minute=sliding:5000/1m"]
//! all = false                   # true: replaces the whole set (default false: each limit)
//! expires_at_ms = 1767225600000 # optional, Redis's clock
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::edit;
use super::snapshot::Snapshot;
use super::spec::{LimitSpec, Pattern, SpecError};

#[derive(Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    plans: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    tenants: BTreeMap<String, String>,
    #[serde(default, rename = "override", skip_serializing_if = "Vec::is_empty")]
    overrides: Vec<OverrideEntry>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct OverrideEntry {
    pattern: String,
    limits: Vec<String>,
    #[serde(default)]
    all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
}

/// The snapshot as TOML.
pub fn export(snapshot: &Snapshot) -> Result<String, SpecError> {
    let texts = |limits: &[LimitSpec]| limits.iter().map(ToString::to_string).collect();
    let file = File {
        plans: snapshot
            .plans
            .iter()
            .map(|(name, limits)| (name.clone(), texts(limits)))
            .collect(),
        tenants: snapshot.tenants.clone(),
        overrides: snapshot
            .overrides
            .values()
            .map(|entry| OverrideEntry {
                pattern: entry.pattern.to_string(),
                limits: texts(&entry.limits),
                all: entry.limit.is_none(),
                expires_at_ms: entry.expires_at_ms,
            })
            .collect(),
    };
    toml::to_string(&file).map_err(|error| SpecError(format!("cannot write TOML: {error}")))
}

/// Reads TOML into a snapshot (version 0), checking every limit and pattern, and each
/// override as `override set` does; a one-limit override entry with several limits stands
/// for one override per limit.
pub fn import(text: &str) -> Result<Snapshot, SpecError> {
    let file: File =
        toml::from_str(text).map_err(|error| SpecError(format!("bad policy file: {error}")))?;
    let parse_all = |texts: &[String]| {
        texts
            .iter()
            .map(|text| LimitSpec::parse(text))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut snapshot = Snapshot {
        tenants: file.tenants,
        ..Snapshot::default()
    };
    for (name, limits) in &file.plans {
        let limits =
            parse_all(limits).map_err(|error| SpecError(format!("plan '{name}': {error}")))?;
        snapshot.plans.insert(name.clone(), limits);
    }
    for entry in file.overrides {
        let pattern = Pattern::parse(&entry.pattern)?;
        let limits = parse_all(&entry.limits)
            .map_err(|error| SpecError(format!("override '{pattern}': {error}")))?;
        for entry in edit::overrides(&pattern, &limits, entry.all, entry.expires_at_ms)? {
            let field = entry.field();
            if snapshot.overrides.insert(field.clone(), entry).is_some() {
                return Err(SpecError(format!("override '{field}' is given twice")));
            }
        }
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_then_import_is_the_same_store() {
        let text = r#"
            [plans]
            pro = ["per-minute=sliding:1000/60s", "per-day=fixed:100000/1d"]
            [tenants]
            acme = "pro"
            [[override]]
            pattern = "acme-*"
            limits = ["per-minute=sliding:5000/60s"]
            expires_at_ms = 99
            [[override]]
            pattern = "big"
            limits = ["only=token:10/1s"]
            all = true
        "#;
        let snapshot = import(text).unwrap();
        assert_eq!(snapshot.overrides.len(), 2);
        assert_eq!(import(&export(&snapshot).unwrap()).unwrap(), snapshot);
        assert!(
            import("[plans]\np = [\"x\"]")
                .unwrap_err()
                .0
                .contains("plan 'p': bad limit 'x'")
        );
        assert!(import("color = 1").unwrap_err().0.contains("unknown field"));
    }
}
