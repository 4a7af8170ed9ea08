//! The demand of the other RLQS services sharing Redis, for the limits in contention.
//!
//! **Why.** Each service knows only its own streams' demand. With several services behind
//! Envoy's cluster, each would split a limit's quota among its own streams only, so the
//! services together ask several times the quota and the store's partial grants decide who
//! gets it: by renewal order, the same stream last every window (measured: three real
//! Envoys on two services, one of them admitted 57 requests while the others admitted 539
//! and 811). Exchanging demand through Redis makes every service size a lease from the
//! whole fleet's demand.
//!
//! **What it costs.** Only limits in contention are exchanged: a limit is marked when a
//! lease is granted less than asked or leaves less than it asked in the limit, and stays
//! marked for [`CONTENDED_PERIODS`] renewal periods. When a limit is newly in contention,
//! and then every two renewal periods (demand changes at Envoy's reports, every 5 s in
//! Envoy 1.40), each service writes its streams' demand on the marked limits into one hash
//! per limit (`HSET` and `PEXPIREAT`, one field per service) and reads the hashes back
//! (`HGETALL`), in two pipelines, never retried (the next exchange writes the same whole):
//! about 1.5 commands a second per limit in contention and service with the default TTL.
//! A cold limit costs nothing but a few exchanges when it first appears (its first leases
//! are sized blind).
//!
//! **Format.** Key `rl:rlqs:{rl-rlqs}:demand:<limit key>` (one hash slot, like the top-keys
//! reports); field: the service's id; value: `<written at, Unix ms>;<demand>,<demand>,...`
//! (requests per second with 3 decimals, `?` for a stream not yet reported). A service's
//! entry older than [`STALE_EXCHANGES`] exchanges is ignored (a service that stopped).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_ratelimit_client::store::{HashFields, HashWrite, Store};
use tokio::sync::Notify;

use super::share::Demand;

/// Renewal periods a limit stays exchanged after a short grant.
const CONTENDED_PERIODS: u32 = 4;
/// Exchanges after which another service's entry is ignored.
const STALE_EXCHANGES: u64 = 3;
/// Renewal periods between exchanges.
const PERIODS_PER_EXCHANGE: u32 = 2;
/// Limits exchanged at once; past it, a newly contended limit is sized locally.
const MAX_CONTENDED: usize = 1_024;
/// Services read per limit, and demands read per service.
const MAX_SERVICES: usize = 64;
const MAX_STREAMS_READ: usize = 1_024;

/// One contended limit: until when it is exchanged, and the other services' demand last read.
#[derive(Debug)]
struct Contended {
    until: Instant,
    others: Vec<Option<f64>>,
}

/// The limits in contention and the other services' demand on them.
#[derive(Debug)]
pub struct Fleet {
    service_id: String,
    contended: Mutex<HashMap<String, Contended>>,
    /// A limit newly in contention: exchange now rather than at the next tick, so that a
    /// service learns of the others' streams within one exchange.
    pub newly_contended: Notify,
}

impl Default for Fleet {
    fn default() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Self {
            service_id: format!("{:x}-{:x}", std::process::id(), nanos),
            contended: Mutex::new(HashMap::new()),
            newly_contended: Notify::new(),
        }
    }
}

impl Fleet {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Contended>> {
        self.contended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The other services' streams' demand on `key`, as last read (none if not contended).
    pub fn others(&self, key: &str) -> Vec<Option<f64>> {
        let contended = self.table();
        contended
            .get(key)
            .map(|entry| entry.others.clone())
            .unwrap_or_default()
    }

    /// `key` is in contention: exchange its demand for a while.
    pub fn contended(&self, key: &str, period: Duration) {
        let now = Instant::now();
        let until = now
            .checked_add(period.saturating_mul(CONTENDED_PERIODS))
            .unwrap_or(now);
        let mut contended = self.table();
        if let Some(entry) = contended.get_mut(key) {
            entry.until = until;
        } else if contended.len() < MAX_CONTENDED {
            contended.insert(
                key.to_string(),
                Contended {
                    until,
                    others: Vec::new(),
                },
            );
            // One stored permit: limits contended at once are exchanged together.
            self.newly_contended.notify_one();
        }
    }

    /// The contended limits now (those no longer contended forgotten).
    fn keys(&self) -> Vec<String> {
        let now = Instant::now();
        let mut contended = self.table();
        contended.retain(|_, entry| entry.until > now);
        contended.keys().cloned().collect()
    }

    fn learned(&self, key: &str, others: Vec<Option<f64>>) {
        let mut contended = self.table();
        if let Some(entry) = contended.get_mut(key) {
            entry.others = others;
        }
    }

    /// The interval between exchanges, for renewals every `period`.
    pub fn exchange_every(period: Duration) -> Duration {
        period.saturating_mul(PERIODS_PER_EXCHANGE)
    }

    /// One exchange, every `every`: this service's streams' `demand` on the contended limits
    /// written to `store`, the other services' read back.
    pub async fn exchange(&self, demand: &Demand, store: &dyn Store, every: Duration) {
        let keys = self.keys();
        if keys.is_empty() {
            return;
        }
        let now_ms = unix_ms();
        let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let writes: Vec<HashWrite> = keys
            .iter()
            .map(|key| HashWrite {
                key: demand_key(key),
                fields: vec![(self.service_id.clone(), encode(now_ms, &demand.of(key)))],
                expire_at_ms: now_ms.saturating_add(every_ms.saturating_mul(STALE_EXCHANGES)),
            })
            .collect();
        let hash_keys: Vec<String> = writes.iter().map(|write| write.key.clone()).collect();
        let exchanged = tokio::time::timeout(every, async {
            store.write_hashes(&writes).await?;
            store.read_hashes(&hash_keys).await
        })
        .await;
        match exchanged {
            Ok(Ok(hashes)) => {
                let oldest_ms = now_ms.saturating_sub(every_ms.saturating_mul(STALE_EXCHANGES));
                for (key, hash) in keys.iter().zip(hashes) {
                    self.learned(key, decode_others(&hash, &self.service_id, oldest_ms));
                }
            }
            Ok(Err(error)) => {
                tracing::debug!("RLQS: the fleet's demand was not exchanged: {error}");
            }
            Err(_) => tracing::debug!("RLQS: the fleet's demand exchange timed out"),
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The hash holding `key`'s demand per service.
fn demand_key(key: &str) -> String {
    format!("rl:rlqs:{{rl-rlqs}}:demand:{key}")
}

/// `<now_ms>;<demand>,...`.
fn encode(now_ms: u64, demands: &[Option<f64>]) -> String {
    let mut text = format!("{now_ms};");
    for (index, demand) in demands.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        match demand {
            Some(per_second) => {
                let _ = write!(text, "{per_second:.3}");
            }
            None => text.push('?'),
        }
    }
    text
}

/// The demands of every service but `me` written since `oldest_ms` (bounded; an entry that
/// does not parse is ignored whole).
fn decode_others(hash: &HashFields, me: &str, oldest_ms: u64) -> Vec<Option<f64>> {
    let mut others = Vec::new();
    for (service, value) in hash.iter().take(MAX_SERVICES) {
        if service == me {
            continue;
        }
        let Some((written, demands)) = value.split_once(';') else {
            continue;
        };
        if written.parse::<u64>().map_or(true, |ms| ms < oldest_ms) {
            continue;
        }
        let parsed: Option<Vec<Option<f64>>> = demands
            .split(',')
            .filter(|part| !part.is_empty())
            .take(MAX_STREAMS_READ)
            .map(|part| match part {
                "?" => Some(None),
                number => number
                    .parse::<f64>()
                    .ok()
                    .filter(|value| value.is_finite() && *value >= 0.0)
                    .map(Some),
            })
            .collect();
        others.extend(parsed.unwrap_or_default());
    }
    others
}

#[cfg(test)]
mod tests {
    use super::{decode_others, encode};

    #[test]
    fn demand_round_trips_and_stale_or_own_or_bad_entries_are_ignored() {
        let mine = encode(5_000, &[Some(1.5), None]);
        assert_eq!(mine, "5000;1.500,?");
        let hash = vec![
            ("me".to_string(), mine.clone()),
            ("other".to_string(), encode(5_000, &[Some(100.0), None])),
            ("stale".to_string(), encode(1_000, &[Some(7.0)])),
            ("bad".to_string(), "5000;1,x".to_string()),
            ("negative".to_string(), "5000;-1".to_string()),
            ("idle".to_string(), "5000;".to_string()),
        ];
        assert_eq!(decode_others(&hash, "me", 2_000), vec![Some(100.0), None]);
    }
}
