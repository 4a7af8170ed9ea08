//! What the checker found: one row per limiter and check ([`Row`]), the figures per kind
//! of fault and the broken promises, in a [`Report`].

use std::collections::BTreeMap;

use redis_ratelimit_client::Fallback;

use super::bounds::Check;
use super::interval::{Cause, Interval};
use crate::record::FaultKind;

/// An interval found over a bound, and what overlapped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub interval: Interval,
    /// The events whose allowance it had.
    pub causes: Vec<Cause>,
}

/// One check of one limiter: its bound, allowances and what was measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub limiter: String,
    pub check: Check,
    pub fallback: Fallback,
    /// Allowed for each overlapping fault that can lose its writes.
    pub per_fault: u64,
    /// Allowed at most for each overlapping fallback episode (`Local`: the share's quota).
    pub per_episode: u64,
    /// For a refill at a local share: the share's rate (units per µs), allowed over each
    /// episode while some client still decided by the store.
    pub episode_rate: Option<(u64, u64)>,
    /// Allowed over every interval for its leases.
    pub leases: u64,
    /// Faults that could lose its writes, and its clients' fallback episodes.
    pub write_losing_faults: usize,
    pub episodes: usize,
    /// Units admitted in all, and by the fallback.
    pub admitted_units: u64,
    pub fallback_units: u64,
    /// The interval furthest over the bound, with its allowance (for `Open`, the fallback's
    /// admissions left out).
    pub worst: Option<Finding>,
    /// For `Open`: the interval furthest over the bound counting the fallback's admissions.
    pub open_worst: Option<Finding>,
    /// For `Local`: the most units one client's fallback admitted in one episode, and the
    /// most units any went beyond its share's bound (0 unless broken).
    pub largest_episode_units: u64,
    pub share_excess: u64,
}

/// Faults of one kind, and what happened while they lasted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindFigures {
    pub count: usize,
    /// The interval furthest over a limiter's bound among those overlapping a fault of this
    /// kind (allowance aside), and that limiter.
    pub worst: Option<(String, Interval)>,
    /// The slowest check whose call overlapped a fault of this kind.
    pub worst_latency_us: u64,
    /// Checks sent during these faults on limiters outside the faulted node's shard, and
    /// how many of them the fallback decided (one breaker and one cluster connection per
    /// client process: a node's fault reaches every limiter).
    pub other_shard_checks: usize,
    pub other_shard_fallbacks: usize,
}

/// A broken promise: the limiter it names (if one), in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub limiter: Option<String>,
    pub what: String,
}

/// The checker's findings.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub decisions: usize,
    /// The first decision's send instant, which the printed instants count from.
    pub start_us: u64,
    pub by_source: BTreeMap<&'static str, (usize, usize)>,
    pub rows: Vec<Row>,
    pub kinds: BTreeMap<FaultKind, KindFigures>,
    /// The slowest check of the run (µs).
    pub worst_latency_us: u64,
    /// Checks answered more than a second after their store timeout.
    pub late_by_a_second: usize,
    /// The interval furthest over a bound among those overlapping no fault.
    pub worst_without_fault: Option<(String, Interval)>,
    pub violations: Vec<Violation>,
}

impl Report {
    /// The limiters the violations name, once each.
    pub fn limiters_named(&self) -> Vec<String> {
        let mut named: Vec<String> = self
            .violations
            .iter()
            .filter_map(|violation| violation.limiter.clone())
            .collect();
        named.sort();
        named.dedup();
        named
    }

    pub(super) fn violate(&mut self, limiter: &str, what: String) {
        self.violations.push(Violation {
            limiter: Some(limiter.to_string()),
            what: format!("{limiter}: {what}"),
        });
    }
}
