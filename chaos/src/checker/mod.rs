//! The checker: from every client's decision log and the faults' log, whether each limiter
//! kept its algorithm's true bound ([`bounds`]) over every interval, beyond an allowance made
//! only of what the README and the client state:
//!
//! - for each fault that can lose writes on the limiter's primary and overlaps the interval,
//!   what one limiter admits in the exposure T (the partition bound of *Guarantees*);
//! - for each fallback episode of a client overlapping it (limiters on `Fallback::Local`),
//!   at most its share's quota: the client's `U`, the stale part of its last answer;
//! - the units its leases can hold (the client's `L`), when it leases.
//!
//! The server decided each call at an unknown instant between the client's send and
//! receive instants (less the server clock's millisecond), so an interval only counts calls
//! that certainly fall inside it: that never blames the server for the network's jitter.
//!
//! Besides, each client's local fallback must keep its share's bound within each episode;
//! a limiter on `Fallback::Open` has its fallback's admissions reported beside the bound,
//! not held to it; a limiter that fails closed admits nothing by its fallback; and every
//! check is answered within its timeout plus a margin.

pub mod bounds;
pub mod episodes;
pub mod holders;
pub mod interval;
pub mod report;
pub mod sweep;
pub mod table;
pub mod windows;

use std::collections::BTreeMap;

use redis_ratelimit_client::Fallback;

use crate::catalogue::{Shape, SoakLimiter};
use crate::record::{DecisionRecord, FaultRecord, Source};
use bounds::{Bound, Check, SERVER_CLOCK_MARGIN_US};
use episodes::{Episode, episodes};
use holders::Hold;
use interval::{Accrual, Call, Cause, Event, Interval, Measure, Scan};
pub use report::{Finding, KindFigures, Report, Row, Violation};

/// What the allowances depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The cluster's `cluster-node-timeout`.
    pub node_timeout_ms: u64,
    /// Client processes (each can hold a lease's units; each fallback takes `1 / clients`).
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

/// Checks every limiter; `decisions` from all clients in any order.
pub fn check(
    limiters: &[SoakLimiter],
    decisions: &[DecisionRecord],
    faults: &[FaultRecord],
    settings: Settings,
) -> Report {
    let mut report = Report {
        decisions: decisions.len(),
        start_us: decisions.iter().map(|d| d.send_us).min().unwrap_or(0),
        ..Report::default()
    };
    for fault in faults {
        report.kinds.entry(fault.kind).or_default().count += 1;
    }
    check_latency(decisions, faults, settings, &mut report);
    count_other_shards(decisions, faults, &mut report);
    let mut by_limiter: BTreeMap<&str, Vec<&DecisionRecord>> = BTreeMap::new();
    for decision in decisions {
        by_limiter
            .entry(decision.limiter.as_str())
            .or_default()
            .push(decision);
    }
    for limiter in limiters {
        let mine = by_limiter.remove(limiter.name.as_str()).unwrap_or_default();
        check_limiter(limiter, &mine, faults, settings, &mut report);
    }
    for (name, _) in by_limiter {
        report.violations.push(Violation {
            limiter: None,
            what: format!("decisions of a limiter the catalogue does not know: {name}"),
        });
    }
    report
}

/// A limiter's admissions in the checks' terms.
struct Admissions {
    calls: Vec<Call>,
    holds: Vec<Hold>,
}

impl Admissions {
    /// `ttl_us`: how long an in-flight slot lives on the server (0 for other limits).
    fn of<'a>(
        decisions: impl Iterator<Item = &'a DecisionRecord>,
        ttl_us: u64,
        margin_us: u64,
    ) -> Admissions {
        let mut admissions = Admissions {
            calls: Vec::new(),
            holds: Vec::new(),
        };
        for decision in decisions {
            admissions.calls.push(Call {
                from_us: decision.send_us,
                to_us: decision.recv_us,
                units: decision.cost,
            });
            if let Some(release_us) = decision.release_us {
                admissions.holds.push(Hold::of(
                    decision.send_us,
                    decision.recv_us,
                    release_us,
                    ttl_us,
                    margin_us,
                ));
            }
        }
        admissions
    }

    fn scan(
        &self,
        check: Check,
        events: &[Event],
        accrual: Option<&Accrual>,
        margin_us: u64,
    ) -> Scan {
        match check {
            Check::Span { .. } => sweep::span(&self.calls, events, accrual, check, margin_us),
            Check::Aligned { limit, window_us } => {
                windows::aligned(&self.calls, events, limit, window_us, margin_us)
            }
            Check::Holders { limit, .. } => holders::holders(&self.holds, events, limit),
        }
    }
}

fn check_limiter(
    limiter: &SoakLimiter,
    mine: &[&DecisionRecord],
    faults: &[FaultRecord],
    settings: Settings,
    report: &mut Report,
) {
    let name = limiter.name.as_str();
    let bound = Bound::of(limiter.shape);
    let share = bound.share(settings.clients);
    let local = limiter.fallback == Fallback::Local;
    let open = limiter.fallback == Fallback::Open;
    let admitted: Vec<&DecisionRecord> = mine.iter().copied().filter(|d| d.allowed).collect();
    let fallback_units: u64 = admitted
        .iter()
        .filter(|d| d.source == Source::Fallback)
        .map(|d| d.cost)
        .sum();
    if limiter.fallback == Fallback::Closed && fallback_units > 0 {
        report.violate(
            name,
            format!("fails closed, yet its fallback admitted {fallback_units} units"),
        );
    }
    if limiter.in_flight()
        && let Some(missing) = admitted.iter().find(|d| d.release_us.is_none())
    {
        report.violate(
            name,
            format!(
                "an admitted in-flight check without its release: {}",
                missing.line()
            ),
        );
    }
    let margin = SERVER_CLOCK_MARGIN_US;
    let ttl_us = match limiter.shape {
        Shape::Concurrency { ttl_ms, .. } => ttl_ms * 1000,
        _ => 0,
    };
    let bounded = Admissions::of(
        admitted
            .iter()
            .copied()
            .filter(|d| !(open && d.source == Source::Fallback)),
        ttl_us,
        margin,
    );
    let everything = open.then(|| Admissions::of(admitted.iter().copied(), ttl_us, margin));
    let episodes = if local { episodes(mine) } else { Vec::new() };
    let losing: Vec<(usize, &FaultRecord)> = faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind.can_lose_writes() && f.affected.iter().any(|a| a == name))
        .collect();
    let leases = settings.clients * limiter.lease_max_units();
    let shares = share.map(Bound::checks).unwrap_or_default();
    for (index, check) in bound.checks().into_iter().enumerate() {
        let shared = shares.get(index).copied();
        let per_episode = shared.map_or(0, Check::burst);
        let per_fault = check.write_loss(settings.exposure_us());
        let mut events: Vec<Event> = losing
            .iter()
            .map(|(at, fault)| Event {
                from_us: fault.start_us,
                to_us: fault.end_us,
                units: per_fault,
                cause: Cause::Fault(*at),
            })
            .collect();
        if leases > 0 {
            events.push(Event {
                from_us: 0,
                to_us: u64::MAX,
                units: leases,
                cause: Cause::Leases,
            });
        }
        let open_scan = everything
            .as_ref()
            .map(|all| all.scan(check, &events, None, margin));
        events.extend(episodes.iter().map(|episode| Event {
            from_us: episode.from_us,
            to_us: episode.to_us,
            units: per_episode.min(episode.admitted_units()),
            cause: Cause::Episode(episode.client),
        }));
        let accrual =
            shared.and_then(|shared| refill_while_others_spend(shared, &episodes, settings));
        let scan = bounded.scan(check, &events, accrual.as_ref(), margin);
        let share_excess = if local {
            check_shares(name, shared, &episodes, ttl_us, report)
        } else {
            0
        };
        if let Some(violation) = scan.violation {
            let causes = causes_of(&violation, &events);
            report.violate(
                name,
                format!(
                    "{} units admitted in {}: bound {} ({}) + allowance {} ({} overlapping: {})",
                    violation.units,
                    table::span_in_words(&violation, report.start_us),
                    violation.bound,
                    check.describe(),
                    violation.allowance,
                    causes.len(),
                    table::causes_in_words(&causes, faults, report.start_us),
                ),
            );
        }
        attribute(name, &scan, faults, report);
        let finding = |interval: Interval| Finding {
            causes: causes_of(&interval, &events),
            interval,
        };
        report.rows.push(Row {
            limiter: name.to_string(),
            check,
            fallback: limiter.fallback,
            per_fault,
            per_episode: if local { per_episode } else { 0 },
            episode_rate: accrual.as_ref().map(|a| (a.units, a.per_us)),
            leases,
            write_losing_faults: losing.len(),
            episodes: episodes.len(),
            admitted_units: admitted.iter().map(|d| d.cost).sum(),
            fallback_units,
            worst: scan.worst.map(finding),
            open_worst: open_scan.and_then(|s| s.worst).map(finding),
            largest_episode_units: episodes
                .iter()
                .map(Episode::admitted_units)
                .max()
                .unwrap_or(0),
            share_excess,
        });
    }
}

/// Holds each client's fallback episodes to the share's bound (`shared`: the check at one
/// client's share); returns the most units any went beyond it.
fn check_shares(
    name: &str,
    shared: Option<Check>,
    episodes: &[Episode],
    ttl_us: u64,
    report: &mut Report,
) -> u64 {
    let Some(shared) = shared else {
        let admitted: u64 = episodes.iter().map(Episode::admitted_units).sum();
        if admitted > 0 {
            report.violate(
                name,
                format!("its share is below one unit, yet its fallback admitted {admitted} units"),
            );
        }
        return admitted;
    };
    let mut runs: Vec<(u32, Vec<&DecisionRecord>)> = Vec::new();
    if matches!(shared, Check::Holders { .. }) {
        // Local slots are not seeded from the store: the share holds across episodes.
        let mut by_client: BTreeMap<u32, Vec<&DecisionRecord>> = BTreeMap::new();
        for episode in episodes {
            by_client
                .entry(episode.client)
                .or_default()
                .extend(episode.admitted.iter().copied());
        }
        runs.extend(by_client);
    } else {
        runs.extend(episodes.iter().map(|e| (e.client, e.admitted.clone())));
    }
    let mut worst = 0;
    let start_us = report.start_us;
    for (client, admitted) in runs {
        let scan = Admissions::of(admitted.into_iter(), ttl_us, 0).scan(shared, &[], None, 0);
        if let Some(over) = scan.violation {
            worst = worst.max(over.beyond());
            report.violate(
                name,
                format!(
                    "client {client}'s local fallback admitted {} units in {}: its share's \
                     bound is {} ({})",
                    over.units,
                    table::span_in_words(&over, start_us),
                    over.bound,
                    shared.describe()
                ),
            );
        }
    }
    worst
}

/// For a refill checked at a replica's share (`shared`): the share's rate over each episode,
/// counted while some client was not in an episode of its own. A fallback's share of the
/// rate is paid back by the refill the store accrues meanwhile only when nobody else spends
/// that refill: when every client is cut off (the client's *Fallback bound*); a client cut
/// off alone admits it on top of what the others take from the store.
fn refill_while_others_spend(
    shared: Check,
    episodes: &[Episode],
    settings: Settings,
) -> Option<Accrual> {
    let Check::Span {
        units,
        per_us,
        max_span_us: None,
        ..
    } = shared
    else {
        return None;
    };
    let spans: Vec<(u64, u64)> = episodes.iter().map(|e| (e.from_us, e.to_us)).collect();
    let clients = settings.clients;
    Some(Accrual {
        units,
        per_us,
        measure: Measure::of_overlaps(&spans, |active| if active >= clients { 0 } else { active }),
    })
}

fn causes_of(interval: &Interval, events: &[Event]) -> Vec<Cause> {
    events
        .iter()
        .filter(|event| {
            event.units > 0
                && event.from_us <= interval.to_us
                && event.to_us.saturating_add(SERVER_CLOCK_MARGIN_US) >= interval.from_us
        })
        .map(|event| event.cause)
        .collect()
}

/// Credits each interval over the bound (an open fallback's admissions left out) to the
/// kinds of the faults it overlaps (any fault, whether it can lose writes or not), or to the
/// intervals without a fault.
fn attribute(name: &str, scan: &Scan, faults: &[FaultRecord], report: &mut Report) {
    for interval in &scan.excesses {
        let mut any = false;
        for fault in faults {
            if !interval.overlaps(fault.start_us, fault.end_us) {
                continue;
            }
            any = true;
            let figures = report.kinds.entry(fault.kind).or_default();
            if figures
                .worst
                .as_ref()
                .is_none_or(|(_, worst)| interval.excess() > worst.excess())
            {
                figures.worst = Some((name.to_string(), *interval));
            }
        }
        if !any
            && report
                .worst_without_fault
                .as_ref()
                .is_none_or(|(_, worst)| interval.excess() > worst.excess())
        {
            report.worst_without_fault = Some((name.to_string(), *interval));
        }
    }
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
            report.violations.push(Violation {
                limiter: Some(decision.limiter.clone()),
                what: format!("check returned an error: {}", decision.line()),
            });
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
        report.violations.push(Violation {
            limiter: None,
            what: format!(
                "{late} checks took longer than the timeout plus margin ({} ms), the first: \
                 {first}",
                limit_us / 1000
            ),
        });
    }
}

/// For each fault, the checks sent while it lasted on limiters outside its node's shard,
/// and how many of them the fallback decided.
fn count_other_shards(decisions: &[DecisionRecord], faults: &[FaultRecord], report: &mut Report) {
    let mut by_send: Vec<&DecisionRecord> = decisions.iter().collect();
    by_send.sort_by_key(|d| d.send_us);
    for fault in faults.iter().filter(|f| !f.shard.is_empty()) {
        let from = by_send.partition_point(|d| d.send_us < fault.start_us);
        let to = by_send.partition_point(|d| d.send_us <= fault.end_us);
        let others: Vec<&&DecisionRecord> = by_send
            .get(from..to)
            .unwrap_or_default()
            .iter()
            .filter(|d| !fault.shard.contains(&d.limiter))
            .collect();
        let figures = report.kinds.entry(fault.kind).or_default();
        figures.other_shard_checks += others.len();
        figures.other_shard_fallbacks += others
            .iter()
            .filter(|d| d.source == Source::Fallback)
            .count();
    }
}

#[cfg(test)]
mod tests;
