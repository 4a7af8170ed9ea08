//! What a change would do to the tenants before it is applied: the store after its edits,
//! and each tenant whose effective limits differ, with its limits before and after.
//!
//! The tenants looked at are those the store names (on a plan, or under an exact override);
//! a wildcard override moves tenants the store never names too, so the wildcard patterns
//! whose overrides change are listed besides.

use std::collections::{BTreeMap, BTreeSet};

use super::edit::{Edit, Table};
use super::history::rule_text;
use super::snapshot::{Effective, Snapshot, encode_limits};
use super::spec::Pattern;

/// The most tenants a preview lists (the count of the others is given).
pub const MAX_LISTED: usize = 1_000;

/// One tenant a change moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedTenant {
    /// The tenant.
    pub tenant: String,
    /// Its limits before, each with the rule it comes from (`per-day=fixed:5/1d <- plan pro`).
    pub before: Vec<String>,
    /// After.
    pub after: Vec<String>,
}

/// The tenants a change moves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Those whose effective limits change, by name (at most [`MAX_LISTED`]).
    pub tenants: Vec<MovedTenant>,
    /// How many more were left out of `tenants`.
    pub more: usize,
    /// The wildcard patterns whose overrides change: they move every tenant matching them,
    /// named in the store or not.
    pub wildcards: Vec<String>,
}

/// The store as it would be once `edits` are applied (its version unchanged).
pub fn after(snapshot: &Snapshot, edits: &[Edit]) -> Snapshot {
    let unreadable = |table: Table| {
        snapshot
            .unreadable
            .iter()
            .filter(move |entry| entry.table == table)
            .map(|entry| (entry.field.clone(), entry.value.clone()))
    };
    let mut plans: BTreeMap<String, String> = snapshot
        .plans
        .iter()
        .map(|(name, limits)| (name.clone(), encode_limits(limits)))
        .chain(unreadable(Table::Plans))
        .collect();
    let mut tenants = snapshot.tenants.clone();
    let mut overrides: BTreeMap<String, String> = snapshot
        .overrides
        .iter()
        .map(|(field, entry)| (field.clone(), entry.encode_value()))
        .chain(unreadable(Table::Overrides))
        .collect();
    for edit in edits {
        let hash = match edit.table {
            Table::Plans => &mut plans,
            Table::Tenants => &mut tenants,
            Table::Overrides => &mut overrides,
        };
        match &edit.value {
            Some(value) => hash.insert(edit.field.clone(), value.clone()),
            None => hash.remove(&edit.field),
        };
    }
    Snapshot {
        stamp: snapshot.stamp.clone(),
        ..Snapshot::decode(
            snapshot.version,
            plans.into_iter().collect(),
            tenants.into_iter().collect(),
            overrides.into_iter().collect(),
        )
    }
}

/// The value `edit` replaces in `snapshot`, as stored (`None`: the field is new).
pub fn old_value(snapshot: &Snapshot, edit: &Edit) -> Option<String> {
    match edit.table {
        Table::Plans => snapshot
            .plans
            .get(&edit.field)
            .map(|limits| encode_limits(limits)),
        Table::Tenants => snapshot.tenants.get(&edit.field).cloned(),
        Table::Overrides => snapshot
            .overrides
            .get(&edit.field)
            .map(|entry| entry.encode_value()),
    }
    .or_else(|| {
        snapshot
            .unreadable_field(edit.table, &edit.field)
            .map(|bad| bad.value.clone())
    })
}

fn texts(limits: &[Effective]) -> Vec<String> {
    limits
        .iter()
        .map(|limit| format!("{} <- {}", limit.spec, rule_text(&limit.rule)))
        .collect()
}

/// The tenants whose limits differ between `before` and `after` at `now_ms`.
pub fn moved(before: &Snapshot, after: &Snapshot, now_ms: u64) -> Moved {
    let mut tenants = before.named_tenants();
    tenants.extend(after.named_tenants());
    let mut moved = Moved::default();
    for tenant in tenants {
        let was = texts(&before.resolve(tenant, &[], now_ms));
        let will = texts(&after.resolve(tenant, &[], now_ms));
        if was == will {
            continue;
        }
        if moved.tenants.len() < MAX_LISTED {
            moved.tenants.push(MovedTenant {
                tenant: tenant.to_owned(),
                before: was,
                after: will,
            });
        } else {
            moved.more = moved.more.saturating_add(1);
        }
    }
    let wildcards = |snapshot: &Snapshot| -> BTreeMap<String, String> {
        snapshot
            .overrides
            .iter()
            .filter(|(_, entry)| matches!(entry.pattern, Pattern::Prefix(_)))
            .map(|(field, entry)| (field.clone(), entry.encode_value()))
            .collect()
    };
    let (was, will) = (wildcards(before), wildcards(after));
    let changed: BTreeSet<String> = was
        .iter()
        .filter(|(field, value)| will.get(*field) != Some(*value))
        .chain(
            will.iter()
                .filter(|(field, value)| was.get(*field) != Some(*value)),
        )
        .filter_map(|(field, _)| field.split(' ').next().map(String::from))
        .collect();
    moved.wildcards = changed.into_iter().collect();
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit;
    use crate::spec::limits;

    #[test]
    fn a_plan_change_moves_its_tenants_and_no_other() {
        let mut snapshot = Snapshot::default();
        snapshot
            .plans
            .insert("pro".into(), limits(&["a=fixed:5/1d"]));
        snapshot
            .plans
            .insert("free".into(), limits(&["a=fixed:1/1d"]));
        snapshot.tenants.insert("acme".into(), "pro".into());
        snapshot.tenants.insert("zeta".into(), "free".into());
        let edits = edit::plan_set(&snapshot, "pro", &limits(&["a=fixed:6/1d"])).unwrap();
        let moved = moved(&snapshot, &after(&snapshot, &edits), 0);
        assert_eq!(
            moved.tenants,
            [MovedTenant {
                tenant: "acme".into(),
                before: vec!["a=fixed:5/1d <- plan pro".into()],
                after: vec!["a=fixed:6/1d <- plan pro".into()],
            }]
        );
        assert!(moved.wildcards.is_empty());
    }

    #[test]
    fn a_wildcard_override_is_named_besides_the_tenants_it_moves() {
        let mut snapshot = Snapshot::default();
        snapshot
            .plans
            .insert("pro".into(), limits(&["a=fixed:5/1d"]));
        snapshot.tenants.insert("acme-eu".into(), "pro".into());
        snapshot.tenants.insert("zeta".into(), "pro".into());
        let pattern = Pattern::parse("acme-*").unwrap();
        let edits =
            edit::override_set(&snapshot, &pattern, &limits(&["a=fixed:9/1d"]), false, None)
                .unwrap();
        let moved = moved(&snapshot, &after(&snapshot, &edits), 0);
        let names: Vec<&str> = moved.tenants.iter().map(|t| t.tenant.as_str()).collect();
        assert_eq!(names, ["acme-eu"]);
        assert_eq!(moved.wildcards, ["acme-*"]);
        // Deleting it moves them back.
        let back = after(&snapshot, &edits);
        let edits = edit::override_delete(&back, &pattern, None).unwrap();
        let moved = super::moved(&back, &after(&back, &edits), 0);
        assert_eq!(moved.tenants.len(), 1);
        assert_eq!(moved.wildcards, ["acme-*"]);
    }
}
