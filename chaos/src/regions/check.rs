//! The regions run's check: the merged admission log of every region held to each global
//! limit with the chaos checker's per-algorithm bound code ([`Bound`], its span sweep and
//! aligned windows, the server clock's margin), against what `docs/regions.md` allows in
//! each mode; the hot region's utilization; the regional decision's p99; the agents' calls
//! to home.

use std::time::Duration;

use super::limits::{GlobalLimit, Mode};
use super::{Outcome, SPLIT};
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
        self.hot_floor_supply + self.pool_supply * SPLIT.weights[0] / SPLIT.weight_total()
    }
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
            "{} s of load; T = {} ms (P = {} ms, a = {} ms), f = {} %, weights {:?}; load \
             average at the end {}\n\n",
            self.run.as_secs(),
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
        text.push_str("| limit | mode | global bound | admitted | over-admitted | allowed | hot region admitted | its floor + its weight's share of the pool (admitted, %) | its floor + the pool the cold regions left (admitted, %) |\n|---|---|---|---|---|---|---|---|---|\n");
        for row in &self.rows {
            let allowed = row
                .allowed
                .map_or("no bound claimed".to_string(), |a| a.to_string());
            let target = row.hot_target();
            text.push_str(&format!(
                "| {} | {} | {} | {} | {}{} | {} | {} | {} ({:.0} %) | {} ({:.0} %) |\n",
                row.name,
                row.mode.as_str(),
                row.bound,
                row.admitted,
                row.over,
                if row.kept() { "" } else { " **BROKEN**" },
                allowed,
                row.hot_admitted,
                row.hot_share(),
                100.0 * row.hot_admitted as f64 / row.hot_share().max(1) as f64,
                target,
                100.0 * row.hot_admitted as f64 / target.max(1) as f64
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
    let rows = outcome
        .limits
        .iter()
        .enumerate()
        .map(|(index, limit)| row(outcome, index, limit, run))
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
    Report {
        agent_errors,
        longest_gap_ms,
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

fn row(outcome: &Outcome, index: usize, limit: &GlobalLimit, run: Duration) -> Row {
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
    let hot_admitted = outcome
        .admissions
        .iter()
        .filter(|admission| admission.limit == index && admission.region == 0)
        .count() as u64;
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
        hot_admitted,
        hot_floor_supply: limit.supply(limit.floor(&SPLIT, 0), run),
        pool_supply: limit.supply(limit.pool(&SPLIT), run),
        cold_granted: outcome
            .agents
            .iter()
            .skip(1)
            .map(|agent| agent.granted[index])
            .sum(),
    }
}
