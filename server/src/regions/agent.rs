//! The lease agent as a task of the service ([`run`]): every period it leases units of the
//! hot limits ([`super::hot_keys`]) from home's pools into this region's Redis, through the
//! client library's agent (`redis_ratelimit_client::regions::refresh`), reconnecting to
//! whichever side failed; its metrics.
//!
//! **Shutdown.** The task is stopped; its leases are not given back: `docs/regions.md`'s
//! exact mode lets unspent units lapse (give-backs cost exactness), so a stopped region's
//! leases expire in Redis within `T`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis_ratelimit_client::regions::{self, AgentConfig, HotLimit, ServerForm};

use super::hot_keys::{Demand, HotKeys, choose, still_hot};
use crate::config::{HomeBackend, RegionConfig};

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
