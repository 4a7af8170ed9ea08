//! The changes an administrator makes, as edits of the store's hashes computed from the
//! snapshot they were read at (so the write can refuse them if the store moved meanwhile).
//! Every function here checks its input completely and returns the edits or an error: a
//! refused change never reaches the store.

use std::collections::BTreeSet;

use super::snapshot::{Override, Snapshot, encode_limits, field};
use super::spec::{LimitSpec, Pattern, SpecError, check_limit_name, check_tenant};
pub use super::table::Table;
use redis_ratelimit_client::policy::MAX_LIMITS;

/// Sets (`Some`) or deletes (`None`) one field of one hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// The hash.
    pub table: Table,
    /// The field.
    pub field: String,
    /// The new value; `None` deletes the field.
    pub value: Option<String>,
}

fn refuse<T>(message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(message.into()))
}

fn set(table: Table, field: String, value: String, current: Option<String>) -> Vec<Edit> {
    if current.as_deref() == Some(value.as_str()) {
        return Vec::new();
    }
    vec![Edit {
        table,
        field,
        value: Some(value),
    }]
}

fn check_limits(what: &str, limits: &[LimitSpec]) -> Result<(), SpecError> {
    if limits.is_empty() {
        return refuse(format!("{what}: give at least one limit"));
    }
    if limits.len() > MAX_LIMITS {
        return refuse(format!("{what}: at most {MAX_LIMITS} limits"));
    }
    let mut names = BTreeSet::new();
    for limit in limits {
        if !names.insert(limit.name()) {
            return refuse(format!("{what}: two limits are named '{}'", limit.name()));
        }
    }
    Ok(())
}

/// Creates or replaces plan `name`.
pub fn plan_set(
    snapshot: &Snapshot,
    name: &str,
    limits: &[LimitSpec],
) -> Result<Vec<Edit>, SpecError> {
    check_limit_name(name).map_err(|error| SpecError(format!("plan: {error}")))?;
    check_limits(&format!("plan '{name}'"), limits)?;
    let current = snapshot.plans.get(name).map(|limits| encode_limits(limits));
    Ok(set(
        Table::Plans,
        name.into(),
        encode_limits(limits),
        current,
    ))
}

/// The limits of plan `name` that setting it to `limits` drops (none for a new plan):
/// `rlctl plan set` refuses to drop them without `--replace`.
pub fn plan_dropped(snapshot: &Snapshot, name: &str, limits: &[LimitSpec]) -> Vec<LimitSpec> {
    snapshot
        .plans
        .get(name)
        .into_iter()
        .flatten()
        .filter(|old| !limits.iter().any(|new| new.name() == old.name()))
        .cloned()
        .collect()
}

/// Refuses one-limit overrides of `pattern` that name a limit it does not have (a misspelt
/// name would add a limit rather than change one): for a tenant on a plan, the limits it
/// has now (its plan's, and those overrides give it); for a wildcard or a tenant on no plan,
/// any limit a plan or an override of the store names (the policy's own defaults are in the
/// services' configuration, which the store does not see). `rlctl override set --add` skips
/// this check.
pub fn check_override_names(
    snapshot: &Snapshot,
    pattern: &Pattern,
    limits: &[LimitSpec],
    now_ms: u64,
) -> Result<(), SpecError> {
    let on_plan = match pattern {
        Pattern::Exact(tenant) => snapshot
            .tenants
            .get(tenant)
            .filter(|plan| snapshot.plans.contains_key(*plan))
            .map(|plan| (tenant, plan)),
        Pattern::Prefix(_) => None,
    };
    let known: BTreeSet<String> = match on_plan {
        Some((tenant, _)) => snapshot
            .resolve(tenant, &[], now_ms)
            .into_iter()
            .map(|effective| effective.spec.name().to_string())
            .collect(),
        None => snapshot
            .plans
            .values()
            .flatten()
            .chain(snapshot.overrides.values().flat_map(|entry| &entry.limits))
            .map(|spec| spec.name().to_string())
            .collect(),
    };
    let Some(unknown) = limits.iter().find(|spec| !known.contains(spec.name())) else {
        return Ok(());
    };
    let name = unknown.name();
    let whose = match (on_plan, pattern) {
        (Some((tenant, plan)), _) => format!("tenant '{tenant}' (plan '{plan}') has no limit"),
        (None, Pattern::Exact(tenant)) => format!(
            "tenant '{tenant}' is on no plan, and no plan or override of the store has a limit"
        ),
        (None, Pattern::Prefix(_)) => "no plan or override of the store has a limit".into(),
    };
    let listed = if known.is_empty() {
        "none".to_string()
    } else {
        known
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let listed = match on_plan {
        Some(_) => format!("its limits: {listed}"),
        None => format!("the limits the store names: {listed}"),
    };
    let hint =
        closest(name, &known).map_or(String::new(), |near| format!(" (did you mean '{near}'?)"));
    refuse(format!(
        "override '{pattern}': {whose} named '{name}'{hint}; {listed}. An \
         override of a limit it does not have adds one: add --add if that is meant (a limit \
         of the policy's own defaults, say)"
    ))
}

/// The known name nearest to `name` within 2 edits (a typo), if any.
fn closest<'a>(name: &str, known: &'a BTreeSet<String>) -> Option<&'a str> {
    known
        .iter()
        .map(|candidate| (edit_distance(name, candidate), candidate.as_str()))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes (names are ASCII, at most 64 bytes).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = i;
        let mut left = i.saturating_add(1);
        let mut next = Vec::with_capacity(row.len());
        next.push(left);
        for (j, cb) in b.iter().enumerate() {
            let up = row.get(j.saturating_add(1)).copied().unwrap_or(usize::MAX);
            let substitution = diagonal.saturating_add(usize::from(ca != *cb));
            let cost = substitution
                .min(up.saturating_add(1))
                .min(left.saturating_add(1));
            diagonal = up;
            left = cost;
            next.push(cost);
        }
        row = next;
    }
    row.last().copied().unwrap_or(0)
}

/// Deletes plan `name`, which no tenant may be on.
pub fn plan_delete(snapshot: &Snapshot, name: &str) -> Result<Vec<Edit>, SpecError> {
    let unreadable = snapshot.unreadable_field(Table::Plans, name).is_some();
    if !snapshot.plans.contains_key(name) && !unreadable {
        return refuse(format!("there is no plan '{name}'"));
    }
    let users: Vec<&str> = snapshot
        .tenants
        .iter()
        .filter(|(_, plan)| *plan == name)
        .map(|(tenant, _)| tenant.as_str())
        .collect();
    if !users.is_empty() {
        return refuse(format!(
            "plan '{name}' is in use by {}: move them first",
            users.join(", ")
        ));
    }
    Ok(vec![Edit {
        table: Table::Plans,
        field: name.into(),
        value: None,
    }])
}

/// Puts `tenant` on `plan`, which must exist.
pub fn tenant_set(snapshot: &Snapshot, tenant: &str, plan: &str) -> Result<Vec<Edit>, SpecError> {
    check_tenant(tenant)?;
    if let Some(bad) = snapshot.unreadable_field(Table::Plans, plan) {
        return refuse(format!(
            "plan '{plan}' cannot be read ({}): repair it with plan set",
            bad.reason
        ));
    }
    if !snapshot.plans.contains_key(plan) {
        return refuse(format!(
            "there is no plan '{plan}' (create it with plan set)"
        ));
    }
    let current = snapshot.tenants.get(tenant).cloned();
    Ok(set(Table::Tenants, tenant.into(), plan.into(), current))
}

/// Takes `tenant` off its plan (the policy's defaults apply again).
pub fn tenant_delete(snapshot: &Snapshot, tenant: &str) -> Result<Vec<Edit>, SpecError> {
    if !snapshot.tenants.contains_key(tenant) {
        return refuse(format!("tenant '{tenant}' is on no plan"));
    }
    Ok(vec![Edit {
        table: Table::Tenants,
        field: tenant.into(),
        value: None,
    }])
}

/// The overrides that `override set` writes for `pattern`: each of `limits` on its own,
/// or with `all` the whole set, until `expires_at_ms` if given. The one check of an
/// override's limits, for `override set` and an imported file alike.
pub fn overrides(
    pattern: &Pattern,
    limits: &[LimitSpec],
    all: bool,
    expires_at_ms: Option<u64>,
) -> Result<Vec<Override>, SpecError> {
    check_limits(&format!("override '{pattern}'"), limits)?;
    Ok(if all {
        vec![Override {
            pattern: pattern.clone(),
            limit: None,
            limits: limits.to_vec(),
            expires_at_ms,
        }]
    } else {
        limits
            .iter()
            .map(|limit| Override {
                pattern: pattern.clone(),
                limit: Some(limit.name().to_string()),
                limits: vec![limit.clone()],
                expires_at_ms,
            })
            .collect()
    })
}

/// Overrides limits for `pattern`: each of `limits` on its own, or with `all` the whole
/// set, until `expires_at_ms` if given.
pub fn override_set(
    snapshot: &Snapshot,
    pattern: &Pattern,
    limits: &[LimitSpec],
    all: bool,
    expires_at_ms: Option<u64>,
) -> Result<Vec<Edit>, SpecError> {
    Ok(overrides(pattern, limits, all, expires_at_ms)?
        .into_iter()
        .flat_map(|entry| {
            let field = entry.field();
            let current = snapshot.overrides.get(&field).map(Override::encode_value);
            set(Table::Overrides, field, entry.encode_value(), current)
        })
        .collect())
}

/// Deletes the override of one limit of `pattern`, or with `limit` `None` every override
/// of `pattern`.
pub fn override_delete(
    snapshot: &Snapshot,
    pattern: &Pattern,
    limit: Option<&str>,
) -> Result<Vec<Edit>, SpecError> {
    let text = pattern.to_string();
    let unreadable = snapshot
        .unreadable
        .iter()
        .filter(|entry| entry.table == Table::Overrides)
        .map(|entry| entry.field.clone());
    let fields: Vec<String> = match limit {
        Some(limit) => {
            let one = field(pattern, Some(limit));
            let present = snapshot.overrides.contains_key(&one)
                || snapshot.unreadable_field(Table::Overrides, &one).is_some();
            present.then_some(one).into_iter().collect()
        }
        None => snapshot
            .overrides
            .values()
            .filter(|entry| &entry.pattern == pattern)
            .map(Override::field)
            .chain(unreadable.filter(|field| {
                field
                    .strip_prefix(text.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
            }))
            .collect(),
    };
    if fields.is_empty() {
        let what = limit.map_or(String::new(), |limit| format!(" of limit '{limit}'"));
        return refuse(format!("there is no override{what} for '{pattern}'"));
    }
    Ok(fields
        .into_iter()
        .map(|field| Edit {
            table: Table::Overrides,
            field,
            value: None,
        })
        .collect())
}

/// Deletes field `field` of `table` that cannot be read, whatever it holds (its name may
/// be one no command accepts: a pattern written by hand).
pub fn unreadable_delete(snapshot: &Snapshot, table: Table, field: &str) -> Option<Vec<Edit>> {
    snapshot.unreadable_field(table, field).map(|entry| {
        vec![Edit {
            table,
            field: entry.field.clone(),
            value: None,
        }]
    })
}

/// Deletes the overrides that expired by `now_ms` (they already apply to nobody).
pub fn override_prune(snapshot: &Snapshot, now_ms: u64) -> Vec<Edit> {
    snapshot
        .overrides
        .values()
        .filter(|entry| !entry.live(now_ms))
        .map(|entry| Edit {
            table: Table::Overrides,
            field: entry.field(),
            value: None,
        })
        .collect()
}

/// The edits that make the store hold exactly `wanted` (its version is ignored). `wanted`
/// is checked as a whole: every tenant's plan exists, every plan and override is valid.
pub fn replace_all(snapshot: &Snapshot, wanted: &Snapshot) -> Result<Vec<Edit>, SpecError> {
    for (name, limits) in &wanted.plans {
        check_limit_name(name).map_err(|error| SpecError(format!("plan: {error}")))?;
        check_limits(&format!("plan '{name}'"), limits)?;
    }
    for (tenant, plan) in &wanted.tenants {
        check_tenant(tenant)?;
        if !wanted.plans.contains_key(plan) {
            return refuse(format!(
                "tenant '{tenant}' is on plan '{plan}', which is not defined"
            ));
        }
    }
    for (field, entry) in &wanted.overrides {
        let written = overrides(
            &entry.pattern,
            &entry.limits,
            entry.limit.is_none(),
            entry.expires_at_ms,
        )?;
        if written.len() != 1 || written.first() != Some(entry) || entry.field() != *field {
            return refuse(format!(
                "override '{field}' is not one that override set writes"
            ));
        }
    }
    let mut edits = Vec::new();
    let mut sync = |table: Table, current: Vec<(String, String)>, wanted: Vec<(String, String)>| {
        for (field, value) in &wanted {
            let now = current
                .iter()
                .find(|(other, _)| other == field)
                .map(|(_, v)| v.clone());
            edits.extend(set(table, field.clone(), value.clone(), now));
        }
        for (field, _) in current {
            if !wanted.iter().any(|(other, _)| *other == field) {
                edits.push(Edit {
                    table,
                    field,
                    value: None,
                });
            }
        }
    };
    // The fields the store holds but cannot read are in it too: replaced or deleted.
    fn unreadable(store: &Snapshot, table: Table) -> impl Iterator<Item = (String, String)> {
        store
            .unreadable
            .iter()
            .filter(move |entry| entry.table == table)
            .map(|entry| (entry.field.clone(), entry.value.clone()))
    }
    let plans = |store: &Snapshot| {
        store
            .plans
            .iter()
            .map(|(name, limits)| (name.clone(), encode_limits(limits)))
            .chain(unreadable(store, Table::Plans))
            .collect()
    };
    let tenants = |store: &Snapshot| {
        store
            .tenants
            .iter()
            .map(|(tenant, plan)| (tenant.clone(), plan.clone()))
            .collect()
    };
    let overrides = |store: &Snapshot| {
        store
            .overrides
            .values()
            .map(|entry| (entry.field(), entry.encode_value()))
            .chain(unreadable(store, Table::Overrides))
            .collect()
    };
    sync(Table::Plans, plans(snapshot), plans(wanted));
    sync(Table::Tenants, tenants(snapshot), tenants(wanted));
    sync(Table::Overrides, overrides(snapshot), overrides(wanted));
    Ok(edits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::limits;

    #[test]
    fn refuses_what_would_leave_the_store_inconsistent() {
        let mut snapshot = Snapshot::default();
        assert!(
            tenant_set(&snapshot, "acme", "pro")
                .unwrap_err()
                .0
                .contains("there is no plan 'pro'")
        );
        snapshot
            .plans
            .insert("pro".into(), limits(&["a=fixed:1/1s"]));
        snapshot.tenants.insert("acme".into(), "pro".into());
        assert!(
            plan_delete(&snapshot, "pro")
                .unwrap_err()
                .0
                .contains("in use by acme")
        );
        assert!(
            plan_set(&snapshot, "p", &limits(&["a=fixed:1/1s", "a=fixed:2/1s"]))
                .unwrap_err()
                .0
                .contains("two limits are named 'a'")
        );
        assert!(plan_set(&snapshot, "p", &[]).is_err());
        assert_eq!(
            plan_set(&snapshot, "pro", &limits(&["a=fixed:1/1s"])).unwrap(),
            []
        );
        let pattern = Pattern::parse("acme").unwrap();
        assert!(override_delete(&snapshot, &pattern, None).is_err());
    }

    #[test]
    fn a_typo_is_told_its_nearest_name() {
        assert_eq!(edit_distance("per-mnute", "per-minute"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("per-dya", "per-day"), 2);
        let known: BTreeSet<String> = ["per-day", "per-minute"].map(String::from).into();
        assert_eq!(closest("per-dya", &known), Some("per-day"));
        assert_eq!(closest("burst", &known), None);
    }

    #[test]
    fn replace_all_computes_the_difference() {
        let mut current = Snapshot::default();
        current
            .plans
            .insert("old".into(), limits(&["a=fixed:1/1s"]));
        current
            .plans
            .insert("same".into(), limits(&["a=fixed:1/1s"]));
        let mut wanted = Snapshot::default();
        wanted
            .plans
            .insert("same".into(), limits(&["a=fixed:1/1s"]));
        wanted.plans.insert("new".into(), limits(&["b=token:5/1s"]));
        wanted.tenants.insert("t".into(), "new".into());
        let edits = replace_all(&current, &wanted).unwrap();
        let summary: Vec<(&str, Option<&str>)> = edits
            .iter()
            .map(|edit| (edit.field.as_str(), edit.value.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                ("new", Some("b=token:5/1s")),
                ("old", None),
                ("t", Some("new"))
            ]
        );
        wanted.tenants.insert("u".into(), "gone".into());
        assert!(replace_all(&current, &wanted).is_err());
    }
}
