//! The regions run's check: the merged admission log of every region held to each global
//! limit with the chaos checker's per-algorithm bound code ([`Bound`], its span sweep and
//! aligned windows, the server clock's margin), against what `docs/regions.md` allows in
//! each mode; the hot region's utilization, over the whole run and over the spans it could
//! reach home ([`Reachable`]); each region's longest time without a lease and its first
//! lease after the failover; the regional decision's p99; the agents' calls to home.

use std::time::Duration;

use super::limits::{GlobalLimit, Mode, supply, supply_pro_rata};
use super::{FaultKind, Outcome, SPLIT};
use crate::checker::bounds::{Bound, Check, SERVER_CLOCK_MARGIN_US};
use crate::checker::holders::{self, Hold};
use crate::checker::interval::{Call, Interval};
use crate::checker::{sweep, windows};

/// One limit's figures.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: &'static str,
    pub mode: Mode,
    pub bound: String,
    /// Units admitted in every region.
    pub admitted: u64,
    /// The most units over the global limit in any interval (0: none), and that interval.
    pub over: u64,
    pub worst: Option<Interval>,
    /// What the mode allows (`None`: no bound claimed, the figure reported).
    pub allowed: Option<u64>,
    /// The hot region's admissions, its floor's supply over the run, the pool's supply and
    /// what the cold regions were granted of it.
    pub hot_admitted: u64,
    pub hot_floor_supply: u64,
    pub pool_supply: u64,
    pub cold_granted: u64,
    /// The same over the spans the hot region could reach home ([`Reachable`]): its
    /// admissions in them, its floor's supply and the pool's over their total length (pro
    /// rata: [`supply_pro_rata`]; a refilling kind's burst counted once).
    pub hot_reachable_admitted: u64,
    pub hot_reachable_floor_supply: u64,
    pub reachable_pool_supply: u64,
}

/// A floor's supply plus the hot region's weight's share of the pool's.
fn floor_plus_share(floor_supply: u64, pool_supply: u64) -> u64 {
    floor_supply + pool_supply * SPLIT.weights[0] / SPLIT.weight_total()
}

/// `admitted` as a percentage of `target` (for the report).
fn percent(admitted: u64, target: u64) -> f64 {
    100.0 * admitted as f64 / target.max(1) as f64
}

impl Row {
    /// Whether it kept its bound.
    pub fn kept(&self) -> bool {
        self.allowed.is_none_or(|allowed| self.over <= allowed)
    }

    /// What the hot region could reach: its floor plus what the pool supplied and the cold
    /// regions did not take.
    pub fn hot_target(&self) -> u64 {
        self.hot_floor_supply + self.pool_supply.saturating_sub(self.cold_granted)
    }

    /// The hot region's floor plus its weight's share of the pool.
    pub fn hot_share(&self) -> u64 {
        floor_plus_share(self.hot_floor_supply, self.pool_supply)
    }

    /// The same over the spans it could reach home.
    pub fn hot_reachable_share(&self) -> u64 {
        floor_plus_share(self.hot_reachable_floor_supply, self.reachable_pool_supply)
    }

    /// A refilling kind (token bucket, GCRA), whose pool a lease replaced every `P` does not
    /// waste (a window pool's unspent leased units lapse: `docs/regions.md`).
    pub fn refilling(&self) -> bool {
        matches!(self.mode, Mode::PrePaid | Mode::Carryover)
    }
}

/// The spans a region could reach home: the run less its own cuts, the stalls, and the
/// failover until the region's first lease installed after Sentinel named the new primary,
/// each widened by `T` past its end (a region that reaches home again has its next lease
/// within one `P` plus a round trip and the `WAIT`, which `a` covers).
#[derive(Clone, Debug, Default)]
pub struct Reachable {
    /// The spans, `[from_us, to_us)` on the host's clock.
    pub spans_us: Vec<(u64, u64)>,
    /// What was left out: `[from, to)` in ms into the run, and why (merged where they
    /// overlap).
    pub excluded_ms: Vec<(u64, u64, String)>,
}

impl Reachable {
    pub fn of(outcome: &Outcome, region: usize) -> Reachable {
        let margin_us = u64::try_from(SPLIT.lifetime().as_micros()).unwrap_or(u64::MAX);
        let (started, ended) = (outcome.started_us, outcome.ended_us);
        let installed = &outcome.agents[region].installed_at_us;
        let mut excluded: Vec<(u64, u64, String)> = outcome
            .faults
            .iter()
            .filter_map(|fault| {
                let (end_us, why) = match fault.kind {
                    FaultKind::Cut(cut) if cut == region => (fault.to_us, "its cut".to_string()),
                    FaultKind::Cut(_) => return None,
                    FaultKind::Stall => (fault.to_us, "a stall".to_string()),
                    FaultKind::Failover => (
                        installed
                            .iter()
                            .copied()
                            .filter(|at| *at >= fault.to_us)
                            .min()
                            .unwrap_or(ended),
                        "the failover to its first lease".to_string(),
                    ),
                };
                let to_us = end_us.saturating_add(margin_us).min(ended);
                Some((fault.from_us.max(started), to_us, why))
            })
            .collect();
        excluded.sort_by_key(|(from_us, _, _)| *from_us);
        let mut merged: Vec<(u64, u64, String)> = Vec::new();
        for (from_us, to_us, why) in excluded {
            match merged.last_mut() {
                Some(last) if from_us <= last.1 => {
                    last.1 = last.1.max(to_us);
                    last.2 = format!("{} + {why}", last.2);
                }
                _ => merged.push((from_us, to_us, why)),
            }
        }
        let mut spans_us = Vec::new();
        let mut from_us = started;
        for (excluded_from, excluded_to, _) in &merged {
            if *excluded_from > from_us {
                spans_us.push((from_us, *excluded_from));
            }
            from_us = from_us.max(*excluded_to);
        }
        if ended > from_us {
            spans_us.push((from_us, ended));
        }
        Reachable {
            spans_us,
            excluded_ms: merged
                .into_iter()
                .map(|(from_us, to_us, why)| {
                    ((from_us - started) / 1000, (to_us - started) / 1000, why)
                })
                .collect(),
        }
    }

    /// Their total length.
    pub fn length(&self) -> Duration {
        Duration::from_micros(self.spans_us.iter().map(|(from, to)| to - from).sum())
    }

    pub fn contains(&self, at_us: u64) -> bool {
        self.spans_us
            .iter()
            .any(|(from_us, to_us)| (*from_us..*to_us).contains(&at_us))
    }
}

/// The failover: how long Sentinel took to name the new primary, and each region's first
/// lease installed after that (both ms from `SENTINEL FAILOVER`; `None`: none installed).
#[derive(Clone, Debug)]
pub struct FailoverTimes {
    pub named_ms: u64,
    pub first_lease_ms: Vec<Option<u64>>,
}

/// A region's decisions: the server's `RL.REGIONAL` p50 / p99 / p99.9 (µs), the client's
/// p99 round trip of a pipeline of every limit's call (µs), calls, errors.
#[derive(Clone, Copy, Debug)]
pub struct Decisions {
    pub server_us: Option<(f64, f64, f64)>,
    pub client_p99_us: u64,
    pub calls: u64,
    pub errors: u64,
}

/// The run's figures.
#[derive(Clone, Debug)]
pub struct Report {
    pub rows: Vec<Row>,
    pub run: Duration,
    /// Per region: its decisions' latency.
    pub regional_us: Vec<Decisions>,
    /// Per region: refreshes (one home call per hot key set) a second, failed ones.
    pub home_calls_per_s: Vec<(f64, u64)>,
    /// Per region: decisions by reason.
    pub whys: Vec<Vec<(String, u64)>>,
    /// Per region: the agent's failed refreshes by error, and the primaries it followed.
    pub agent_errors: Vec<(Vec<(String, u64)>, u64)>,
    /// Per region: the longest time without an installed lease during the load (ms), and
    /// when it began (ms into the run).
    pub longest_gap_ms: Vec<(u64, u64)>,
    /// The spans the hot region could reach home.
    pub hot_reachable: Reachable,
    pub failover: Option<FailoverTimes>,
    /// Home's replicas, as wired.
    pub home: &'static str,
    pub faults: Vec<String>,
}

impl Report {
    /// Limits that broke their bound.
    pub fn failures(&self) -> Vec<&Row> {
        self.rows.iter().filter(|row| !row.kept()).collect()
    }

    /// The worst server-side p99 of a regional decision (µs).
    pub fn worst_server_p99_us(&self) -> Option<f64> {
        self.regional_us
            .iter()
            .filter_map(|decisions| decisions.server_us.map(|(_, p99, _)| p99))
            .reduce(f64::max)
    }

    pub fn markdown(&self) -> String {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut text = format!(
            "{} s of load; home {}, {} Sentinels of quorum {}; T = {} ms (P = {} ms, a = {} \
             ms), f = {} %, weights {:?}; load average at the end {}\n\n",
            self.run.as_secs(),
            self.home,
            super::SENTINELS.0,
            super::SENTINELS.1,
            SPLIT.lifetime().as_millis(),
            SPLIT.period.as_millis(),
            SPLIT.margin.as_millis(),
            SPLIT.floor_percent,
            SPLIT.weights,
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        text.push_str("| limit | mode | global bound | admitted | over-admitted | allowed | hot region admitted | its floor + its weight's share of the pool (admitted, %) | its floor + the pool the cold regions left (admitted, %) | where it could reach home: admitted, floor + share (%) |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for row in &self.rows {
            let allowed = row
                .allowed
                .map_or("no bound claimed".to_string(), |a| a.to_string());
            let target = row.hot_target();
            text.push_str(&format!(
                "| {} | {} | {} | {} | {}{} | {} | {} | {} ({:.0} %) | {} ({:.0} %) | {}, {} ({:.0} %) |\n",
                row.name,
                row.mode.as_str(),
                row.bound,
                row.admitted,
                row.over,
                if row.kept() { "" } else { " **BROKEN**" },
                allowed,
                row.hot_admitted,
                row.hot_share(),
                percent(row.hot_admitted, row.hot_share()),
                target,
                percent(row.hot_admitted, target),
                row.hot_reachable_admitted,
                row.hot_reachable_share(),
                percent(row.hot_reachable_admitted, row.hot_reachable_share())
            ));
        }
        let excluded: Vec<String> = self
            .hot_reachable
            .excluded_ms
            .iter()
            .map(|(from_ms, to_ms, why)| {
                format!(
                    "{:.1}–{:.1} s ({why})",
                    *from_ms as f64 / 1000.0,
                    *to_ms as f64 / 1000.0
                )
            })
            .collect();
        text.push_str(&format!(
            "\nthe hot region could reach home for {:.1} of {:.1} s: left out (each to T = {} ms \
             past its end): {}\n",
            self.hot_reachable.length().as_secs_f64(),
            self.run.as_secs_f64(),
            SPLIT.lifetime().as_millis(),
            if excluded.is_empty() {
                "nothing".to_string()
            } else {
                excluded.join(", ")
            }
        ));
        if let Some(failover) = &self.failover {
            let firsts: Vec<String> = failover
                .first_lease_ms
                .iter()
                .enumerate()
                .map(|(region, at)| {
                    at.map_or(format!("region {region} none"), |ms| {
                        format!("region {region} {ms} ms")
                    })
                })
                .collect();
            text.push_str(&format!(
                "failover: Sentinel named the new primary {} ms after `SENTINEL FAILOVER`; first \
                 lease installed after it: {}\n",
                failover.named_ms,
                firsts.join(", ")
            ));
        }
        text.push_str(&format!(
            "\n| region | RL.REGIONAL p50 / p99 / p99.9 (server, µs) | pipeline of {} p99 (client, µs) | calls | errors | home calls/s (failed) | decisions |\n|---|---|---|---|---|---|---|\n",
            self.rows.len()
        ));
        for (region, (decisions, (per_s, failed))) in self
            .regional_us
            .iter()
            .zip(&self.home_calls_per_s)
            .enumerate()
        {
            let Decisions {
                server_us,
                client_p99_us,
                calls,
                errors,
            } = *decisions;
            let server = server_us.map_or("n/a".to_string(), |(p50, p99, p999)| {
                format!("{p50:.1} / {p99:.1} / {p999:.1}")
            });
            let whys: Vec<String> = self.whys[region]
                .iter()
                .map(|(why, n)| format!("{why} {n}"))
                .collect();
            text.push_str(&format!(
                "| {region} ({} ms) | {server} | {client_p99_us} | {calls} | {errors} | {per_s:.2} ({failed}) | {} |\n",
                super::ONE_WAY_MS[region],
                whys.join(", ")
            ));
        }
        text.push_str("\nagents' failed refreshes:\n");
        for (region, (errors, followed)) in self.agent_errors.iter().enumerate() {
            let errors: Vec<String> = errors
                .iter()
                .map(|(error, n)| format!("{error} × {n}"))
                .collect();
            let (gap_ms, from_ms) = self.longest_gap_ms.get(region).copied().unwrap_or_default();
            text.push_str(&format!(
                "- region {region}: {} (connected to a primary {followed} times; longest time \
                 without a lease installed: {gap_ms} ms, from {:.1} s)\n",
                errors.join(", "),
                from_ms as f64 / 1000.0
            ));
        }
        text.push_str("\nfaults:\n");
        for fault in &self.faults {
            text.push_str(&format!("- {fault}\n"));
        }
        text
    }
}

/// The most units over `check` in any interval of `calls`.
pub fn worst(calls: &[Call], check: Check) -> Option<Interval> {
    let scan = match check {
        Check::Span { .. } => sweep::span(calls, &[], None, check, SERVER_CLOCK_MARGIN_US),
        Check::Aligned { limit, window_us } => {
            windows::aligned(calls, &[], limit, window_us, SERVER_CLOCK_MARGIN_US)
        }
        Check::Holders { .. } => return None,
    };
    scan.worst
}

/// Checks a run.
pub fn check(outcome: &Outcome) -> Report {
    let run = Duration::from_micros(outcome.ended_us.saturating_sub(outcome.started_us));
    let hot_reachable = Reachable::of(outcome, 0);
    let rows = outcome
        .limits
        .iter()
        .enumerate()
        .map(|(index, limit)| row(outcome, index, limit, run, &hot_reachable))
        .collect();
    let run_s = run.as_secs_f64().max(1e-3);
    let regional_us = outcome
        .loads
        .iter()
        .map(|load| {
            let mut trips = load.round_trips_us.clone();
            trips.sort_unstable();
            let p99 = trips
                .get(trips.len().saturating_mul(99) / 100)
                .copied()
                .unwrap_or(0);
            Decisions {
                server_us: load.server_percentiles_us,
                client_p99_us: p99,
                calls: load.calls,
                errors: load.errors,
            }
        })
        .collect();
    let home_calls_per_s = outcome
        .agents
        .iter()
        .map(|agent| {
            let failed: u64 = agent.errors.values().sum();
            ((agent.refreshes_ok + failed) as f64 / run_s, failed)
        })
        .collect();
    let whys = outcome
        .loads
        .iter()
        .map(|load| load.whys.iter().map(|(why, n)| (why.clone(), *n)).collect())
        .collect();
    let agent_errors = outcome
        .agents
        .iter()
        .map(|agent| {
            let errors = agent
                .errors
                .iter()
                .map(|(error, n)| (error.clone(), *n))
                .collect();
            (errors, agent.primaries_followed)
        })
        .collect();
    let longest_gap_ms = outcome
        .agents
        .iter()
        .map(|agent| {
            let mut instants: Vec<u64> = agent
                .installed_at_us
                .iter()
                .copied()
                .filter(|at| (outcome.started_us..=outcome.ended_us).contains(at))
                .collect();
            instants.insert(0, outcome.started_us);
            instants.push(outcome.ended_us);
            instants
                .windows(2)
                .map(|pair| {
                    (
                        (pair[1] - pair[0]) / 1000,
                        (pair[0] - outcome.started_us) / 1000,
                    )
                })
                .max()
                .unwrap_or_default()
        })
        .collect();
    let failover = outcome
        .faults
        .iter()
        .find(|fault| fault.kind == FaultKind::Failover)
        .map(|fault| FailoverTimes {
            named_ms: (fault.to_us - fault.from_us) / 1000,
            first_lease_ms: outcome
                .agents
                .iter()
                .map(|agent| {
                    agent
                        .installed_at_us
                        .iter()
                        .copied()
                        .filter(|at| *at >= fault.to_us)
                        .min()
                        .map(|at| (at - fault.from_us) / 1000)
                })
                .collect(),
        });
    Report {
        agent_errors,
        longest_gap_ms,
        hot_reachable,
        failover,
        home: outcome.home.as_str(),
        rows,
        run,
        regional_us,
        home_calls_per_s,
        whys,
        faults: outcome
            .faults
            .iter()
            .map(|fault| fault.what.clone())
            .collect(),
    }
}

fn row(
    outcome: &Outcome,
    index: usize,
    limit: &GlobalLimit,
    run: Duration,
    hot_reachable: &Reachable,
) -> Row {
    let calls: Vec<Call> = outcome
        .admissions
        .iter()
        .filter(|admission| admission.limit == index)
        .map(|admission| Call {
            from_us: admission.send_us,
            to_us: admission.recv_us,
            units: 1,
        })
        .collect();
    let bound = Bound::of(limit.shape);
    let checks = bound.checks();
    // An in-flight call's slot is certainly held from its receive until its holder expired
    // (never released: `ttl` after the call was sent, less the server clock's margin).
    let holds: Vec<Hold> = outcome
        .admissions
        .iter()
        .filter(|admission| admission.limit == index)
        .map(|admission| {
            let ttl_us = match bound {
                Bound::Holders { ttl_us, .. } => ttl_us,
                _ => 0,
            };
            Hold::of(
                admission.send_us,
                admission.recv_us,
                u64::MAX,
                ttl_us,
                SERVER_CLOCK_MARGIN_US,
            )
        })
        .collect();
    let worst = checks
        .iter()
        .filter_map(|check| match check {
            Check::Holders { limit, .. } => holders::holders(&holds, &[], *limit).worst,
            _ => worst(&calls, *check),
        })
        .max_by_key(Interval::excess);
    let hot: Vec<_> = outcome
        .admissions
        .iter()
        .filter(|admission| admission.limit == index && admission.region == 0)
        .collect();
    let hot_reachable_admitted = hot
        .iter()
        .filter(|admission| hot_reachable.contains(admission.recv_us))
        .count() as u64;
    let (floor, pool) = (limit.floor(&SPLIT, 0), limit.pool(&SPLIT));
    Row {
        name: limit.name,
        mode: limit.mode,
        bound: checks
            .iter()
            .map(|check| match check {
                // The most held at once, so that 0 over is seen against the limit.
                Check::Holders { .. } => {
                    let most = holders::holders(&holds, &[], 0)
                        .worst
                        .map_or(0, |interval| interval.units);
                    format!("{} (most at once: {most})", check.describe())
                }
                _ => check.describe(),
            })
            .collect::<Vec<_>>()
            .join("; "),
        admitted: calls.len() as u64,
        over: worst.map_or(0, |interval| interval.excess()),
        worst,
        allowed: limit.allowed_excess(&SPLIT, &outcome.lease_units[index]),
        hot_admitted: hot.len() as u64,
        hot_reachable_admitted,
        hot_reachable_floor_supply: supply_pro_rata(&floor, hot_reachable.length()),
        reachable_pool_supply: supply_pro_rata(&pool, hot_reachable.length()),
        hot_floor_supply: supply(&floor, run),
        pool_supply: supply(&pool, run),
        cold_granted: outcome
            .agents
            .iter()
            .skip(1)
            .map(|agent| agent.granted[index])
            .sum(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::{AgentStats, Fault, HomeReplicas};
    use super::*;

    const S: u64 = 1_000_000;
    const START: u64 = 100 * S;

    fn fault(kind: FaultKind, from_ms: u64, to_ms: u64) -> Fault {
        Fault {
            from_us: START + from_ms * 1000,
            to_us: START + to_ms * 1000,
            kind,
            what: String::new(),
        }
    }

    fn outcome(faults: Vec<Fault>, installed_ms: &[u64]) -> Outcome {
        Outcome {
            limits: Vec::new(),
            lease_units: Vec::new(),
            started_us: START,
            ended_us: START + 20 * S,
            admissions: Vec::new(),
            faults,
            agents: vec![AgentStats {
                installed_at_us: installed_ms.iter().map(|ms| START + ms * 1000).collect(),
                ..AgentStats::default()
            }],
            loads: Vec::new(),
            dir: PathBuf::new(),
            home: HomeReplicas::Chained,
        }
    }

    #[test]
    fn the_reachable_spans_leave_out_its_cuts_the_stalls_and_the_failover_to_its_first_lease() {
        // T = 900 ms past each end; another region's cut is not left out; a stall inside
        // the cut's margin merges with it; the failover ends at the first lease after
        // Sentinel named the primary (14 s), not at the one before (12.5 s).
        let outcome = outcome(
            vec![
                fault(FaultKind::Cut(0), 2_000, 5_000),
                fault(FaultKind::Stall, 5_500, 5_600),
                fault(FaultKind::Cut(1), 7_000, 8_000),
                fault(FaultKind::Stall, 9_000, 10_000),
                fault(FaultKind::Failover, 12_000, 13_000),
            ],
            &[1_000, 12_500, 14_000, 15_000],
        );
        let reachable = Reachable::of(&outcome, 0);
        let spans_ms: Vec<(u64, u64)> = reachable
            .spans_us
            .iter()
            .map(|(from, to)| ((from - START) / 1000, (to - START) / 1000))
            .collect();
        assert_eq!(
            spans_ms,
            [
                (0, 2_000),
                (6_500, 9_000),
                (10_900, 12_000),
                (14_900, 20_000)
            ]
        );
        assert_eq!(reachable.length(), Duration::from_millis(10_700));
        assert_eq!(reachable.excluded_ms.len(), 3);
        assert!(reachable.contains(START + 7_500 * 1000));
        assert!(!reachable.contains(START + 14_500 * 1000));
    }

    #[test]
    fn without_a_lease_after_the_failover_the_rest_of_the_run_is_left_out() {
        let outcome = outcome(vec![fault(FaultKind::Failover, 12_000, 13_000)], &[1_000]);
        let reachable = Reachable::of(&outcome, 0);
        assert_eq!(reachable.length(), Duration::from_millis(12_000));
    }
}
