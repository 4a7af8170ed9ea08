//! Reading the audit stream: which entries concern a tenant; and the texts `rlctl` and
//! the service's console both show (instants as UTC, where a limit comes from), so they
//! say the same thing the same way.

use super::plan_store::AuditEntry;
use super::snapshot::{Rule, Snapshot};
use super::spec::Pattern;

/// How many of the latest entries are scanned for those of one tenant.
pub const SCANNED_FOR_TENANT: u64 = 10_000;

/// `2026-12-01T10:06:12Z` for milliseconds since the Unix epoch (UTC, proleptic Gregorian).
pub fn utc(ms: u64) -> String {
    let seconds = ms.checked_div(1_000).unwrap_or(0);
    let days = i64::try_from(seconds.checked_div(86_400).unwrap_or(0)).unwrap_or(0);
    let of_day = seconds.checked_rem(86_400).unwrap_or(0);
    // Howard Hinnant's days-to-civil.
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = doe
        .saturating_sub(doe / 1_460)
        .saturating_add(doe / 36_524)
        .saturating_sub(doe / 146_096)
        / 365;
    let doy = doe.saturating_sub(
        yoe.saturating_mul(365)
            .saturating_add(yoe / 4)
            .saturating_sub(yoe / 100),
    );
    let mp = doy.saturating_mul(5).saturating_add(2) / 153;
    let day = doy
        .saturating_sub(mp.saturating_mul(153).saturating_add(2) / 5)
        .saturating_add(1);
    let month = if mp < 10 {
        mp.saturating_add(3)
    } else {
        mp.saturating_sub(9)
    };
    let year = yoe
        .saturating_add(era.saturating_mul(400))
        .saturating_add(i64::from(month <= 2));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day.checked_rem(3_600).unwrap_or(0) / 60,
        of_day.checked_rem(60).unwrap_or(0)
    )
}

/// Where a limit comes from, as `rlctl get` says it: `plan pro`, `override 'acme' until
/// 2026-12-01T10:06:12Z`.
pub fn rule_text(rule: &Rule) -> String {
    match rule {
        Rule::Override {
            pattern,
            expires_at_ms: Some(at),
        } => {
            let kind = match pattern {
                Pattern::Exact(_) => "override",
                Pattern::Prefix(_) => "wildcard override",
            };
            format!("{kind} '{pattern}' until {}", utc(*at))
        }
        other => other.to_string(),
    }
}

/// Whether an audit entry concerns `tenant`: its plan assignment, an override matching it,
/// or the plan it is on now.
pub fn concerns(snapshot: &Snapshot, entry: &AuditEntry, tenant: &str) -> bool {
    let name = entry.get("name");
    match entry.get("kind") {
        "tenant" => name == tenant,
        "override" => name
            .split(' ')
            .next()
            .and_then(|pattern| Pattern::parse(pattern).ok())
            .is_some_and(|pattern| pattern.matches(tenant)),
        "plan" => snapshot
            .tenants
            .get(tenant)
            .is_some_and(|plan| plan == name),
        _ => false,
    }
}

/// The first `count` of `entries` (newest first) that concern `tenant`, or all of them
/// without one.
pub fn shown<'a>(
    snapshot: &'a Snapshot,
    entries: &'a [AuditEntry],
    tenant: Option<&'a str>,
    count: u64,
) -> impl Iterator<Item = &'a AuditEntry> + 'a {
    entries
        .iter()
        .filter(move |entry| tenant.is_none_or(|tenant| concerns(snapshot, entry, tenant)))
        .take(usize::try_from(count).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_796_119_572_000), "2026-12-01T10:06:12Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
