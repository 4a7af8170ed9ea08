//! The service as one region (`--region-config`, `docs/regions.md`): its limits decided by
//! `RL.REGIONAL` (this region's floor, then a lease from home's pool), and the lease agent
//! as a task of the service, choosing the hot limits itself.
//!
//! **Hot keys.** Every regional decision is noted ([`HotKeys::note`]): a call the floor did
//! not admit (paid by a lease, or denied), or one that left the floor at most a tenth of its
//! quota, is demand on the pool. Every period the agent leases for the limits with demand in
//! that period, most demanded first, at most `max_hot_keys`; a limit leased last period stays
//! while it spent some of its lease (`Refresh::replaced` below what was granted), and is
//! dropped once its lease comes back whole (it went cold).
//!
//! **Shutdown.** The task is stopped; its leases are not given back: `docs/regions.md`'s
//! exact mode lets unspent units lapse (give-backs cost exactness), so a stopped region's
//! leases expire in Redis within `T`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis_ratelimit_client::regions::{self, AgentConfig, HotLimit, Refresh, ServerForm};
use redis_ratelimit_client::{Algorithm, LimitStatus, Why};

use crate::config::{HomeBackend, RegionConfig};

/// A limit with demand on the pool: its pool and how much it was asked for.
#[derive(Clone, Debug)]
struct Demand {
    pool: Algorithm,
    units: u64,
}

/// The regional limits noted since the agent last looked, and those it leases.
#[derive(Debug, Default)]
pub struct HotKeys {
    /// Demand this period, by the limit's key (its floor's).
    noted: Mutex<HashMap<String, Demand>>,
}

/// The most distinct keys noted in one period (beyond it, new keys are not noted until the
/// agent's next look: memory stays bounded whatever the callers send).
const MAX_NOTED: usize = 100_000;

impl HotKeys {
    /// Notes a regional decision of `key` (its pool `pool`, `hits` asked): demand when the
    /// floor did not admit it, or left at most a tenth of its quota.
    pub fn note(&self, key: &str, pool: &Algorithm, hits: u64, status: &LimitStatus) {
        let Some(regional) = status.regional else {
            return;
        };
        let pressed =
            regional.why != Why::Floor || status.remaining.saturating_mul(10) <= status.quota;
        if !pressed {
            return;
        }
        let mut noted = self.noted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(demand) = noted.get_mut(key) {
            demand.units = demand.units.saturating_add(hits.max(1));
        } else if noted.len() < MAX_NOTED {
            noted.insert(
                key.to_string(),
                Demand {
                    pool: pool.clone(),
                    units: hits.max(1),
                },
            );
        }
    }

    /// The demand noted since the last call, emptied.
    fn take(&self) -> HashMap<String, Demand> {
        std::mem::take(&mut *self.noted.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The limits to lease this period: those with demand now, and those that spent some of
/// their last lease, most demanded first, at most `cap`.
fn choose(
    noted: HashMap<String, Demand>,
    kept: &HashMap<String, Demand>,
    cap: usize,
) -> Vec<(String, Demand)> {
    let mut wanted: HashMap<String, Demand> = kept.clone();
    for (key, demand) in noted {
        match wanted.get_mut(&key) {
            Some(known) => known.units = known.units.saturating_add(demand.units),
            None => {
                wanted.insert(key, demand);
            }
        }
    }
    let mut chosen: Vec<(String, Demand)> = wanted.into_iter().collect();
    chosen.sort_by(|a, b| b.1.units.cmp(&a.1.units).then_with(|| a.0.cmp(&b.0)));
    chosen.truncate(cap);
    chosen
}

/// What stays hot after a refresh: the limits that spent some of the lease replaced (their
/// spending is their demand); a lease replaced whole went cold.
fn still_hot(
    chosen: &[(String, Demand)],
    previous: &HashMap<String, u64>,
    refresh: &Refresh,
) -> HashMap<String, Demand> {
    chosen
        .iter()
        .zip(&refresh.replaced)
        .filter_map(|((key, demand), replaced)| {
            let granted_before = previous.get(key).copied()?;
            let spent = granted_before.saturating_sub(replaced.unwrap_or(granted_before));
            (spent > 0).then(|| {
                (
                    key.clone(),
                    Demand {
                        pool: demand.pool.clone(),
                        units: spent,
                    },
                )
            })
        })
        .collect()
}

/// The agent's settings from the region file.
pub fn agent_config(region: &RegionConfig) -> AgentConfig {
    AgentConfig {
        period: region.period,
        margin: region.margin,
        drift_ppm: region.drift_ppm,
        wait_replicas: region.wait_replicas,
        wait_timeout: region.wait_timeout,
        home: match region.home_backend {
            HomeBackend::Module => ServerForm::Module,
            HomeBackend::Functions => ServerForm::Functions,
        },
        // Found when the agent connects to the region (`region_form`).
        region: ServerForm::Module,
        log_leases: regions::LogLeases::StampedAtEnd,
    }
}

/// A connection without the redis crate's response timeout (a `WAIT` may take its whole
/// `wait_timeout`), within `connect_timeout`.
async fn connect(url: &str, connect_timeout: Duration) -> Option<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(connect_timeout));
    let client = redis::Client::open(url).ok()?;
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()
}

/// What the region's Redis runs: the module if it has `RL.REGIONLEASE`, else the Functions
/// library (which the service's store loads when it resolves its backend).
async fn region_form(connection: &mut MultiplexedConnection) -> ServerForm {
    let info: Result<Vec<redis::Value>, _> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("rl.regionlease")
        .query_async(connection)
        .await;
    match info.as_deref() {
        Ok([redis::Value::Nil]) | Ok([]) => ServerForm::Functions,
        _ => ServerForm::Module,
    }
}

/// The agent: every `P`, one refresh of the hot limits from home into `region_url`,
/// reconnecting to whichever side failed. Runs until aborted (at shutdown; no give-backs).
pub async fn run(region: Arc<RegionConfig>, region_url: String, hot: Arc<HotKeys>) {
    let mut config = agent_config(&region);
    let connect_timeout = region.margin;
    let mut home: Option<MultiplexedConnection> = None;
    let mut local: Option<MultiplexedConnection> = None;
    let mut kept: HashMap<String, Demand> = HashMap::new();
    let mut granted: HashMap<String, u64> = HashMap::new();
    let mut ticks = tokio::time::interval(region.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let chosen = choose(hot.take(), &kept, region.max_hot_keys);
        metrics::gauge!(HOT_KEYS).set(chosen.len() as f64);
        if chosen.is_empty() {
            kept.clear();
            granted.clear();
            continue;
        }
        if home.is_none() {
            home = connect(&region.home_url, connect_timeout).await;
        }
        if local.is_none() {
            local = connect(&region_url, connect_timeout).await;
            if let Some(connection) = local.as_mut() {
                config.region = region_form(connection).await;
            }
        }
        let (Some(home_con), Some(local_con)) = (home.as_mut(), local.as_mut()) else {
            metrics::counter!(REFRESHES, "result" => "unreachable").increment(1);
            tracing::warn!(
                home = home.is_some(),
                region = local.is_some(),
                "region agent: cannot connect"
            );
            // Demand is kept for the next try.
            kept = chosen.into_iter().collect();
            continue;
        };
        let limits: Vec<HotLimit> = chosen
            .iter()
            .map(|(key, demand)| HotLimit {
                pool_key: format!("{}{key}", region.pool_prefix),
                pool: demand.pool.clone(),
                lease_key: format!("{key}{}", region.lease_suffix),
                lease_units: region.lease_units,
                slot_holder: region.region.clone(),
            })
            .collect();
        match regions::refresh(home_con, local_con, &limits, &config).await {
            Ok(refresh) => {
                metrics::counter!(REFRESHES, "result" => "ok").increment(1);
                metrics::counter!(UNITS_LEASED).increment(refresh.granted.iter().sum());
                kept = still_hot(&chosen, &granted, &refresh);
                granted = chosen
                    .iter()
                    .zip(&refresh.granted)
                    .map(|((key, _), units)| (key.clone(), *units))
                    .collect();
            }
            Err(error) => {
                metrics::counter!(REFRESHES, "result" => "error").increment(1);
                tracing::warn!(%error, "region agent: refresh failed");
                match error {
                    regions::AgentError::Home(_) => home = None,
                    regions::AgentError::Region(_) => local = None,
                    _ => {}
                }
                kept = chosen.into_iter().collect();
            }
        }
    }
}

/// Refreshes by result (`ok`, `error`, `unreachable`).
pub const REFRESHES: &str = "ratelimit_region_refreshes_total";
/// Units home granted the region's leases.
pub const UNITS_LEASED: &str = "ratelimit_region_units_leased_total";
/// Limits leased in the last refresh.
pub const HOT_KEYS: &str = "ratelimit_region_hot_keys";

/// Describes the agent's metrics.
pub fn describe() {
    metrics::describe_counter!(REFRESHES, "Region lease agent refreshes by result");
    metrics::describe_counter!(UNITS_LEASED, "Units home granted this region's leases");
    metrics::describe_gauge!(HOT_KEYS, "Limits the region lease agent leased last period");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn demand(units: u64) -> Demand {
        Demand {
            pool: Algorithm::fixed_window(10, Duration::from_secs(60)).unwrap(),
            units,
        }
    }

    #[test]
    fn the_most_demanded_first_capped_and_cold_leases_dropped() {
        let noted: HashMap<String, Demand> = [("a", 1), ("b", 5), ("c", 3)]
            .map(|(k, u)| (k.to_string(), demand(u)))
            .into();
        let kept: HashMap<String, Demand> = [("a".to_string(), demand(5))].into();
        let chosen = choose(noted, &kept, 2);
        let keys: Vec<&str> = chosen.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(
            keys,
            ["a", "b"],
            "a: 1 noted + 5 spent; c dropped by the cap"
        );
        let previous: HashMap<String, u64> = [("a".to_string(), 4), ("b".to_string(), 4)].into();
        let refresh = Refresh {
            granted: vec![4, 4],
            replaced: vec![Some(1), Some(4)],
            expires_at_ms: vec![0, 0],
        };
        let hot = still_hot(&chosen, &previous, &refresh);
        assert_eq!(hot.len(), 1, "b's lease came back whole: cold");
        assert_eq!(hot["a"].units, 3);
    }
}
