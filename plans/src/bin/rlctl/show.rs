//! What rlctl prints.

use std::fmt::Write;

use redis_ratelimit_client::top::merge::CONCENTRATION_KEYS;
use redis_ratelimit_client::top::{TopDenied, TopQuery};
use redis_ratelimit_plans::edit::{Edit, Table};
use redis_ratelimit_plans::history::{self, utc};
use redis_ratelimit_plans::plan_store::{AuditEntry, printable};
use redis_ratelimit_plans::preview::{self, Moved};
use redis_ratelimit_plans::snapshot::{Snapshot, Unreadable};

/// A text from the store as one line (control characters escaped: a name or a `--who`
/// holding a newline cannot forge a line), and at most this long.
const SHOWN_CHARS: usize = 512;

fn line(text: &str) -> String {
    printable(text, SHOWN_CHARS)
}

/// The warning for a field rlctl cannot read, with how to repair or delete it.
pub fn unreadable(bad: &Unreadable) -> String {
    let field = line(&bad.field);
    let (repair, delete) = match bad.table {
        Table::Plans => (
            format!("rlctl plan set {field} --limit LIMIT"),
            format!("rlctl plan delete {field}"),
        ),
        _ => {
            let pattern = field.split(' ').next().unwrap_or_default();
            (
                format!("rlctl override set {pattern} LIMIT..."),
                format!("rlctl override delete {field}"),
            )
        }
    };
    format!(
        "skipped {} '{field}' = '{}', which cannot be read ({}): repair it with '{repair}' or \
         delete it with '{delete}'",
        bad.table.kind(),
        line(&bad.value),
        line(&bad.reason.0),
    )
}

/// `rlctl get`: the limits the store gives `tenant`, and the rule each comes from.
pub fn effective(snapshot: &Snapshot, tenant: &str, now_ms: u64) -> String {
    let mut out = String::new();
    let plan = snapshot
        .tenants
        .get(tenant)
        .map_or("no plan".to_string(), |plan| format!("plan {plan}"));
    let _ = writeln!(
        out,
        "tenant {tenant} ({plan}), store version {}",
        snapshot.version
    );
    let limits = snapshot.resolve(tenant, &[], now_ms);
    if limits.is_empty() {
        let _ = writeln!(
            out,
            "  no limits from the store: each policy's defaults apply"
        );
    }
    for limit in limits {
        let _ = writeln!(
            out,
            "  {:<40} {}",
            limit.spec.to_string(),
            history::rule_text(&limit.rule)
        );
    }
    out
}

/// `rlctl list`.
pub fn list(snapshot: &Snapshot, now_ms: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "version {}", snapshot.version);
    let _ = writeln!(out, "plans:");
    for (name, limits) in &snapshot.plans {
        let texts: Vec<String> = limits.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "  {}: {}", line(name), texts.join(" "));
    }
    let _ = writeln!(out, "tenants:");
    for (tenant, plan) in &snapshot.tenants {
        let _ = writeln!(out, "  {}: {}", line(tenant), line(plan));
    }
    let _ = writeln!(out, "overrides:");
    for entry in snapshot.overrides.values() {
        let texts: Vec<String> = entry.limits.iter().map(ToString::to_string).collect();
        let scope = if entry.limit.is_none() {
            " (all limits)"
        } else {
            ""
        };
        let expiry = match entry.expires_at_ms {
            Some(at) if at <= now_ms => format!(" (expired {})", utc(at)),
            Some(at) => format!(" (until {})", utc(at)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {}{scope}: {}{expiry}",
            entry.pattern,
            texts.join(" ")
        );
    }
    out
}

/// `rlctl history`.
pub fn history(
    snapshot: &Snapshot,
    entries: &[AuditEntry],
    tenant: Option<&str>,
    count: u64,
) -> String {
    let mut out = String::new();
    for entry in history::shown(snapshot, entries, tenant, count) {
        let at = entry
            .get("at_ms")
            .parse()
            .map_or_else(|_| "?".to_string(), utc);
        let value = |text: &str| {
            if text.is_empty() {
                "(none)".to_string()
            } else {
                line(text)
            }
        };
        let _ = writeln!(
            out,
            "v{} {at} {} [{}] {} {}: {} -> {}",
            line(entry.get("version")),
            line(entry.get("who")),
            line(entry.get("op")),
            line(entry.get("kind")),
            line(entry.get("name")),
            value(entry.get("old")),
            value(entry.get("new")),
        );
    }
    out
}

/// The edits of a change, with the values they replace.
pub fn edits(snapshot: &Snapshot, edits: &[Edit]) -> String {
    let mut out = String::new();
    for edit in edits {
        let old = preview::old_value(snapshot, edit);
        let _ = writeln!(
            out,
            "  {} {}: {} -> {}",
            edit.table.kind(),
            line(&edit.field),
            line(old.as_deref().unwrap_or("(none)")),
            line(edit.value.as_deref().unwrap_or("(deleted)"))
        );
    }
    out
}

/// The fleet's most denied keys of a policy, limit by limit, each count with its bound.
pub fn top(query: &TopQuery, limits: &[TopDenied]) -> String {
    let mut text = String::new();
    let policy = line(&query.policy);
    if limits.is_empty() {
        let _ = writeln!(
            text,
            "no denials of policy '{policy}' reported in the last {} minute(s)",
            query.minutes
        );
        return text;
    }
    for top in limits {
        let _ = writeln!(
            text,
            "policy '{policy}', limit '{}': {} denials in the last {} minute(s) ({} summaries), \
             the top {} keys took at least {:.1} %",
            line(&top.limit),
            top.denials,
            query.minutes,
            top.summaries,
            CONCENTRATION_KEYS,
            top.top10_share * 100.0
        );
        let _ = writeln!(
            text,
            "  each count is at most {} over the truth (bound: the summaries' floors; at most \
             denials/capacity = {}), and a key denied more often is listed",
            top.bound, top.bound_limit
        );
        let _ = writeln!(text, "  {:>12} {:>12}  key", "denials", "at least");
        for key in &top.keys {
            let _ = writeln!(
                text,
                "  {:>12} {:>12}  {}",
                key.count,
                key.lower,
                line(&key.key)
            );
        }
    }
    text
}

/// What a dry run would move: each tenant whose limits change, before and after, and the
/// wildcard patterns changed (they move tenants the store does not name).
pub fn moved(moved: &Moved) -> String {
    let mut out = String::new();
    if moved.tenants.is_empty() && moved.wildcards.is_empty() {
        let _ = writeln!(out, "no tenant the store names changes limits");
        return out;
    }
    for tenant in &moved.tenants {
        let _ = writeln!(out, "tenant {} would change:", line(&tenant.tenant));
        let list = |limits: &[String]| {
            if limits.is_empty() {
                "each policy's defaults".to_string()
            } else {
                limits
                    .iter()
                    .map(|text| line(text))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let _ = writeln!(out, "  before: {}", list(&tenant.before));
        let _ = writeln!(out, "  after:  {}", list(&tenant.after));
    }
    if moved.more > 0 {
        let _ = writeln!(out, "and {} more tenants", moved.more);
    }
    for pattern in &moved.wildcards {
        let _ = writeln!(
            out,
            "every tenant matching '{}' would change, named in the store or not",
            line(pattern)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lines_are_one_line_each() {
        let entry = AuditEntry {
            id: "1-0".into(),
            fields: [
                ("version", "3"),
                ("at_ms", "0"),
                (
                    "who",
                    "mallory\nv99 1970-01-01T00:00:00Z admin [plan set x]",
                ),
                ("op", "import a\rb.toml"),
                ("kind", "plan"),
                ("name", "p"),
                ("old", ""),
                ("new", "a=fixed:1/1d"),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        };
        let shown = history(&Snapshot::default(), &[entry], None, 10);
        assert_eq!(shown.lines().count(), 1, "{shown}");
        assert!(
            shown.contains("mallory\\nv99") && shown.contains("a\\rb.toml"),
            "{shown}"
        );
    }
}
