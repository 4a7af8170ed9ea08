//! The checker's report in Markdown: one row per limiter and check (bound, allowances,
//! measured excess, fallback admissions), one per fault kind, and the violations.

use std::collections::BTreeMap;
use std::fmt::Write;

use redis_ratelimit_client::Fallback;

use super::interval::{Cause, Interval};
use super::report::{Finding, Report, Row};
use crate::record::FaultRecord;

/// Seconds since `start_us`, to a tenth.
fn at(us: u64, start_us: u64) -> String {
    format!("{:.1} s", us.saturating_sub(start_us) as f64 / 1e6)
}

/// `1253 ms from 12.4 s` (since `start_us`).
pub fn span_in_words(interval: &Interval, start_us: u64) -> String {
    format!(
        "{} ms from {}",
        interval.to_us.saturating_sub(interval.from_us) / 1000,
        at(interval.from_us, start_us)
    )
}

/// The causes of an interval's allowance, in words: each fault, episodes by client, leases.
pub fn causes_in_words(causes: &[Cause], faults: &[FaultRecord], start_us: u64) -> String {
    let mut words = Vec::new();
    let mut episodes: BTreeMap<u32, usize> = BTreeMap::new();
    for cause in causes {
        match cause {
            Cause::Fault(index) => {
                if let Some(fault) = faults.get(*index) {
                    words.push(format!(
                        "{} of {} ({}) at {}",
                        fault.kind.as_str(),
                        fault.target,
                        fault.role,
                        at(fault.start_us, start_us)
                    ));
                }
            }
            Cause::Episode(client) => *episodes.entry(*client).or_default() += 1,
            Cause::Leases => words.push("leases".into()),
        }
    }
    for (client, count) in episodes {
        words.push(if count == 1 {
            format!("client {client}'s fallback")
        } else {
            format!("client {client}'s fallback ×{count}")
        });
    }
    if words.is_empty() {
        "none".into()
    } else {
        words.join(", ")
    }
}

fn excess(finding: Option<&Finding>, faults: &[FaultRecord], start_us: u64) -> String {
    match finding {
        None => "0".into(),
        Some(Finding { interval, causes }) => format!(
            "{} ({} in {}; allowance {}: {})",
            interval.excess(),
            interval.units,
            span_in_words(interval, start_us),
            interval.allowance,
            causes_in_words(causes, faults, start_us)
        ),
    }
}

fn allowances(row: &Row) -> String {
    let mut parts = vec![format!(
        "{} per fault (× {})",
        row.per_fault, row.write_losing_faults
    )];
    if row.fallback == Fallback::Local {
        let rate = row.episode_rate.map_or(String::new(), |(units, per_us)| {
            format!(
                ", + {} of it while others reach the store",
                super::bounds::rate(units, per_us)
            )
        });
        parts.push(format!(
            "≤ {} per episode (× {}){rate}",
            row.per_episode, row.episodes
        ));
    }
    if row.leases > 0 {
        parts.push(format!("{} leased", row.leases));
    }
    parts.join("; ")
}

fn fallback(row: &Row, faults: &[FaultRecord], start_us: u64) -> String {
    match row.fallback {
        Fallback::Closed => "closed".into(),
        Fallback::Local => format!(
            "local: largest episode {}, {} over its share",
            row.largest_episode_units, row.share_excess
        ),
        Fallback::Open => format!(
            "open: with its admissions, excess {}",
            excess(row.open_worst.as_ref(), faults, start_us)
        ),
    }
}

/// The whole report.
pub fn markdown(report: &Report, faults: &[FaultRecord]) -> String {
    let start = report.start_us;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} decisions from {} µs (instants below count from there); (admitted, denied) by \
         source: {:?}\n",
        report.decisions, report.start_us, report.by_source
    );
    let _ = writeln!(
        out,
        "| limiter | bound (server clock ± 1 ms) | allowance (write-losing faults; fallback \
         episodes; leases) | measured excess over the bound (its interval's allowance) | \
         admitted units (by the fallback) | fallback |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for row in &report.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} ({}) | {} |",
            row.limiter,
            row.check.describe(),
            allowances(row),
            excess(row.worst.as_ref(), faults, start),
            row.admitted_units,
            row.fallback_units,
            fallback(row, faults, start)
        );
    }
    let _ = writeln!(
        out,
        "\n| fault | count | worst excess over a bound while one lasted (limiter; allowance \
         there) | slowest check overlapping it | checks on other shards' limiters decided by \
         the fallback |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    let worst = |found: Option<&(String, Interval)>| match found {
        None => "0".to_string(),
        Some((limiter, interval)) => {
            format!("{} ({limiter}; {})", interval.excess(), interval.allowance)
        }
    };
    for (kind, figures) in &report.kinds {
        let share = if figures.other_shard_checks == 0 {
            "-".to_string()
        } else {
            format!(
                "{} of {} ({:.0} %)",
                figures.other_shard_fallbacks,
                figures.other_shard_checks,
                figures.other_shard_fallbacks as f64 * 100.0 / figures.other_shard_checks as f64
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ms | {share} |",
            kind.as_str(),
            figures.count,
            worst(figures.worst.as_ref()),
            figures.worst_latency_us / 1000
        );
    }
    let _ = writeln!(
        out,
        "| (no fault) | | {} | {} ms (whole run; {} checks answered over a second past their \
         timeout) | |",
        worst(report.worst_without_fault.as_ref()),
        report.worst_latency_us / 1000,
        report.late_by_a_second
    );
    for violation in &report.violations {
        let _ = writeln!(out, "\nVIOLATION: {}", violation.what);
    }
    out
}
