//! The checker: from every client's decision log and the faults' log, whether each limiter
//! kept its bound over every interval, allowing for each fault that overlapped the interval
//! no more than the README states, and whether every check was answered in time.
//!
//! The server decided each call at an unknown instant between the client's send and receive
//! instants, so the checker only counts, for an interval, calls that certainly fall inside
//! it: for calls sorted by send instant, the calls `i..=j` all lie within
//! `[send_i, max recv of i..=j]`, and their units must not exceed the algorithm's bound for
//! that span plus the allowances. That never blames the server for the network's jitter,
//! and every interval between two calls is checked.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalogue::{Shape, SoakLimiter};
use crate::record::{DecisionRecord, FaultKind, FaultRecord, Source};

/// What the allowances depend on.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The cluster's `cluster-node-timeout`.
    pub node_timeout_ms: u64,
    /// Client processes (each can hold a lease's units).
    pub clients: u64,
    /// The policies' store timeout, and the margin a check may take beyond it.
    pub timeout_ms: u64,
    pub margin_ms: u64,
}

impl Settings {
    /// T of the README: 1.5 × `cluster-node-timeout`, plus the cluster cron's 100 ms and
    /// 400 ms for the replication lag at the cut and the load of a shared 2-core machine.
    pub fn exposure_us(&self) -> u64 {
        self.node_timeout_ms * 1500 + 500_000
    }
}

/// The worst excess seen for intervals overlapping faults of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindFigures {
    pub count: usize,
    /// The largest `admitted − algorithm bound` over an interval that overlapped a fault of
    /// this kind, and the allowance that interval had.
    pub worst_excess: u64,
    pub allowance_at_worst: u64,
    pub limiter_at_worst: String,
    /// The slowest check whose call overlapped a fault of this kind.
    pub worst_latency_us: u64,
}

/// The checker's findings.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub decisions: usize,
    pub by_source: BTreeMap<&'static str, (usize, usize)>,
    pub kinds: BTreeMap<FaultKind, KindFigures>,
    /// The slowest check of the run (µs).
    pub worst_latency_us: u64,
    /// Checks answered more than a second after their store timeout.
    pub late_by_a_second: usize,
    /// The largest excess over the bound with no fault overlapping (it must be 0).
    pub worst_excess_without_fault: u64,
    /// Everything that broke a promise, in words.
    pub violations: Vec<String>,
}

/// Checks every limiter; `decisions` from all clients in any order.
pub fn check(
    limiters: &[SoakLimiter],
    decisions: &[DecisionRecord],
    faults: &[FaultRecord],
    settings: Settings,
) -> Report {
    let mut report = Report {
        decisions: decisions.len(),
        ..Report::default()
    };
    for fault in faults {
        report.kinds.entry(fault.kind).or_default().count += 1;
    }
    check_latency(decisions, faults, settings, &mut report);
    for limiter in limiters {
        let mut admitted: Vec<&DecisionRecord> = decisions
            .iter()
            .filter(|d| d.limiter == limiter.name && d.allowed)
            .collect();
        admitted.sort_by_key(|d| (d.send_us, d.recv_us));
        let affecting: Vec<&FaultRecord> = faults
            .iter()
            .filter(|f| f.kind.can_lose_writes() && f.affected.contains(&limiter.name))
            .collect();
        if let Shape::Concurrency { limit, .. } = limiter.shape {
            check_holders(limiter, limit, &admitted, &affecting, &mut report);
        } else {
            check_intervals(limiter, &admitted, &affecting, settings, &mut report);
        }
    }
    report
}

fn check_latency(
    decisions: &[DecisionRecord],
    faults: &[FaultRecord],
    settings: Settings,
    report: &mut Report,
) {
    let limit_us = (settings.timeout_ms + settings.margin_ms) * 1000;
    let mut late = 0usize;
    let mut first_late = None;
    for decision in decisions {
        let counts = report
            .by_source
            .entry(decision.source.as_str())
            .or_default();
        if decision.allowed {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        if decision.source == Source::Error {
            report
                .violations
                .push(format!("check returned an error: {}", decision.line()));
        }
        let took = decision.recv_us.saturating_sub(decision.send_us);
        report.worst_latency_us = report.worst_latency_us.max(took);
        if took > (settings.timeout_ms + 1000) * 1000 {
            report.late_by_a_second += 1;
        }
        for fault in faults {
            if decision.send_us <= fault.end_us && decision.recv_us >= fault.start_us {
                let figures = report.kinds.entry(fault.kind).or_default();
                figures.worst_latency_us = figures.worst_latency_us.max(took);
            }
        }
        if took > limit_us {
            late += 1;
            first_late.get_or_insert_with(|| decision.line());
        }
    }
    if let Some(first) = first_late {
        report.violations.push(format!(
            "{late} checks took longer than the timeout plus margin ({} ms), the first: {first}",
            limit_us / 1000
        ));
    }
}

/// What the algorithm admits at most over a span of `span_us`, in units.
fn bound(shape: Shape, span_us: u64) -> u64 {
    let span = u128::from(span_us);
    let windows = |limit: u64, window_ms: u64| {
        let window_us = u128::from(window_ms) * 1000;
        u128::from(limit) * (span.div_ceil(window_us) + 1)
    };
    let units = match shape {
        Shape::TokenBucket { capacity, per_s } => {
            u128::from(capacity) + (u128::from(per_s) * span).div_ceil(1_000_000)
        }
        Shape::Gcra {
            max_burst,
            count,
            period_ms,
        } => {
            u128::from(max_burst + 1)
                + (u128::from(count) * span).div_ceil(u128::from(period_ms) * 1000)
        }
        Shape::FixedWindow { limit, window_ms }
        | Shape::SlidingWindow { limit, window_ms }
        | Shape::SlidingLog { limit, window_ms } => windows(limit, window_ms),
        Shape::Concurrency { limit, .. } => u128::from(limit),
    };
    u64::try_from(units).unwrap_or(u64::MAX)
}

/// The README's over-admission for one fault that can lose writes on the limiter's
/// primary: what one limiter admits in T (a full burst plus the refill; a limit per window
/// T overlaps; every holder).
pub fn fault_allowance(shape: Shape, settings: Settings) -> u64 {
    let exposure = settings.exposure_us();
    match shape {
        Shape::Concurrency { limit, .. } => limit,
        Shape::FixedWindow { limit, window_ms }
        | Shape::SlidingWindow { limit, window_ms }
        | Shape::SlidingLog { limit, window_ms } => {
            limit * (exposure.div_ceil(window_ms * 1000) + 1)
        }
        other => bound(other, exposure),
    }
}

fn check_intervals(
    limiter: &SoakLimiter,
    admitted: &[&DecisionRecord],
    affecting: &[&FaultRecord],
    settings: Settings,
    report: &mut Report,
) {
    // Units a fleet of leases can hold at an interval's start (the README: at most
    // replicas × N beyond the bound).
    let leased = limiter.lease.map_or(0, |units| units * settings.clients);
    let per_fault = fault_allowance(limiter.shape, settings);
    let mut worst_violation: Option<String> = None;
    for (i, first) in admitted.iter().enumerate() {
        let mut units = 0u64;
        let mut end_us = first.recv_us;
        for call in admitted.iter().skip(i) {
            units += call.cost;
            end_us = end_us.max(call.recv_us);
            let allowed = bound(limiter.shape, end_us - first.send_us) + leased;
            if units <= allowed {
                continue;
            }
            let excess = units - allowed;
            let overlapping: Vec<&&FaultRecord> = affecting
                .iter()
                .filter(|f| f.start_us <= end_us && f.end_us >= first.send_us)
                .collect();
            let allowance = per_fault * overlapping.len() as u64;
            let kinds: BTreeSet<FaultKind> = overlapping.iter().map(|f| f.kind).collect();
            if kinds.is_empty() {
                report.worst_excess_without_fault = report.worst_excess_without_fault.max(excess);
            }
            for kind in kinds {
                let figures = report.kinds.entry(kind).or_default();
                if excess > figures.worst_excess {
                    figures.worst_excess = excess;
                    figures.allowance_at_worst = allowance;
                    figures.limiter_at_worst.clone_from(&limiter.name);
                }
            }
            if excess > allowance && worst_violation.is_none() {
                worst_violation = Some(format!(
                    "{}: {units} units admitted in [{}, {end_us}] µs ({} ms), bound {allowed} + \
                     {allowance} for {} overlapping faults",
                    limiter.name,
                    first.send_us,
                    (end_us - first.send_us) / 1000,
                    overlapping.len()
                ));
            }
        }
    }
    report.violations.extend(worst_violation);
}

fn check_holders(
    limiter: &SoakLimiter,
    limit: u64,
    admitted: &[&DecisionRecord],
    affecting: &[&FaultRecord],
    report: &mut Report,
) {
    // A slot is certainly held from the client's receive instant to the instant it began
    // releasing it. Releases sort before acquisitions at the same instant.
    let mut events: Vec<(u64, i64)> = Vec::new();
    for call in admitted {
        let Some(release_us) = call.release_us else {
            report.violations.push(format!(
                "{}: an admitted in-flight check without its release: {}",
                limiter.name,
                call.line()
            ));
            continue;
        };
        if release_us > call.recv_us {
            events.push((call.recv_us, 1));
            events.push((release_us, -1));
        }
    }
    events.sort();
    let mut held = 0i64;
    for (at_us, change) in events {
        held += change;
        let held_units = u64::try_from(held).unwrap_or(0);
        if held_units <= limit {
            continue;
        }
        let excess = held_units - limit;
        let overlapping: Vec<&&FaultRecord> = affecting
            .iter()
            .filter(|f| f.start_us <= at_us && f.end_us >= at_us)
            .collect();
        let allowance = limit * overlapping.len() as u64;
        if overlapping.is_empty() {
            report.worst_excess_without_fault = report.worst_excess_without_fault.max(excess);
        }
        for fault in &overlapping {
            let figures = report.kinds.entry(fault.kind).or_default();
            if excess > figures.worst_excess {
                figures.worst_excess = excess;
                figures.allowance_at_worst = allowance;
                figures.limiter_at_worst.clone_from(&limiter.name);
            }
        }
        if excess > allowance {
            report.violations.push(format!(
                "{}: {held_units} holders at {at_us} µs, limit {limit} + {allowance}",
                limiter.name
            ));
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(limiter: &str, send_us: u64, recv_us: u64) -> DecisionRecord {
        DecisionRecord {
            client: 0,
            limiter: limiter.into(),
            cost: 1,
            allowed: true,
            source: Source::Store,
            send_us,
            recv_us,
            release_us: None,
        }
    }

    fn settings() -> Settings {
        Settings {
            node_timeout_ms: 2000,
            clients: 3,
            timeout_ms: 250,
            margin_ms: 1000,
        }
    }

    fn bucket() -> SoakLimiter {
        SoakLimiter {
            name: "tb".into(),
            shape: Shape::TokenBucket {
                capacity: 2,
                per_s: 1,
            },
            lease: None,
        }
    }

    #[test]
    fn a_burst_beyond_the_bucket_is_a_violation_unless_a_fault_covers_it() {
        // Capacity 2, 1/s: four calls within 10 ms are one too many.
        let calls: Vec<_> = (0..4).map(|n| call("tb", 1_000 + n, 2_000 + n)).collect();
        let report = check(&[bucket()], &calls, &[], settings());
        assert_eq!(report.worst_excess_without_fault, 1);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);

        let fault = FaultRecord {
            kind: FaultKind::Partition,
            target: "10.0.0.1".into(),
            start_us: 0,
            end_us: 5_000,
            detail: String::new(),
            affected: vec!["tb".into()],
        };
        let report = check(&[bucket()], &calls, &[fault], settings());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let figures = &report.kinds[&FaultKind::Partition];
        assert_eq!((figures.worst_excess, figures.count), (1, 1));
        assert_eq!(figures.allowance_at_worst, 2 + 4); // 2 + 1/s × 3.5 s, rounded up
    }

    #[test]
    fn calls_spread_at_the_rate_keep_the_bound() {
        // 2 at once, then one a second: exactly the bucket.
        let mut calls = vec![call("tb", 0, 10), call("tb", 1, 11)];
        calls.extend((1..20).map(|s| call("tb", s * 1_000_000, s * 1_000_000 + 10)));
        let report = check(&[bucket()], &calls, &[], settings());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn a_slow_answer_and_too_many_holders_are_reported() {
        let slow = call("tb", 0, 2_000_000);
        let report = check(&[bucket()], &[slow], &[], settings());
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);

        let gate = SoakLimiter {
            name: "gate".into(),
            shape: Shape::Concurrency {
                limit: 1,
                ttl_ms: 1000,
            },
            lease: None,
        };
        let mut first = call("gate", 0, 10);
        first.release_us = Some(100);
        let mut second = call("gate", 20, 30);
        second.release_us = Some(200);
        let report = check(&[gate], &[first, second], &[], settings());
        assert_eq!(report.worst_excess_without_fault, 1);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    }
}
