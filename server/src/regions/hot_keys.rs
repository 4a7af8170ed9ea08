//! The hot limits of this region: every regional decision is noted ([`HotKeys::note`]): a
//! call the floor did not admit (paid by a lease, or denied), or one that left the floor at
//! most a tenth of its quota, is demand on the pool. Every period the agent leases for the
//! limits with demand in that period, most demanded first, at most `max_hot_keys`
//! ([`choose`]); a limit leased last period stays while it spent some of its lease
//! (`Refresh::replaced` below what was granted), and is dropped once its lease comes back
//! whole (it went cold: [`still_hot`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use redis_ratelimit_client::regions::Refresh;
use redis_ratelimit_client::{Algorithm, LimitStatus, Why};

/// A limit with demand on the pool: its pool and how much it was asked for.
#[derive(Clone, Debug)]
pub struct Demand {
    /// The limit's pool, as the agent asks it.
    pub pool: Algorithm,
    /// Units asked of the limit this period.
    pub units: u64,
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
    pub fn take(&self) -> HashMap<String, Demand> {
        std::mem::take(&mut *self.noted.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The limits to lease this period: those with demand now, and those that spent some of
/// their last lease, most demanded first, at most `cap`.
pub fn choose(
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
pub fn still_hot(
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn demand(units: u64) -> Demand {
        Demand {
            pool: Algorithm::fixed_window(10, std::time::Duration::from_secs(60)).unwrap(),
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
