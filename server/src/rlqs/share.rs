//! How many tokens one Envoy instance is leased for a bucket at a renewal: its max-min fair
//! share of what the limit allows until the next renewal, split across every stream asking
//! the same limit by their recent demand.
//!
//! **Why per renewal period, not per assignment life.** A lease is replaced at the next
//! renewal (every half TTL), so what a renewal charges is what the instance may spend until
//! the next one: the limit's rate times the renewal period. Charging a whole life's worth
//! (twice as much) lets the stream that renews first in a window take the window's quota
//! every time, and the others get nothing (measured before this: one of two real Envoys
//! admitted 20 requests, the other 238, in one run).
//!
//! **Why max-min fair (water-filling).** Each stream needs its own demand over the period
//! (with headroom, demand grows between reports); a stream needing less than an equal split
//! gets what it needs and the rest is split among the others, so a light instance is not
//! starved by a heavy one's share of the demand, and a heavy one is not capped at an equal
//! split while others leave theirs unspent. A stream whose demand is not yet known (no report
//! yet) claims an equal split. What nobody needs stays in Redis.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Each stream's recent demand (requests per second; `None`: not reported yet) per limit
/// key, shared by the streams.
#[derive(Debug, Default)]
pub struct Demand {
    by_key: Mutex<HashMap<String, HashMap<u64, Option<f64>>>>,
}

impl Demand {
    /// Notes `stream`'s demand on `key` and answers the demand of every other stream on it.
    pub fn note(&self, key: &str, stream: u64, per_second: Option<f64>) -> Vec<Option<f64>> {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let streams = by_key.entry(key.to_string()).or_default();
        streams.insert(stream, per_second);
        streams
            .iter()
            .filter(|(other, _)| **other != stream)
            .map(|(_, demand)| *demand)
            .collect()
    }

    /// Every stream's demand on `key` (what this service tells the others).
    pub fn of(&self, key: &str) -> Vec<Option<f64>> {
        let by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        by_key
            .get(key)
            .map(|streams| streams.values().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets `stream`'s demand on `key` (the bucket abandoned, the stream ended).
    pub fn forget(&self, key: &str, stream: u64) {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(streams) = by_key.get_mut(key) {
            streams.remove(&stream);
            if streams.is_empty() {
                by_key.remove(key);
            }
        }
    }
}

/// What one lease is sized from.
#[derive(Clone, Copy, Debug)]
pub struct Sizing<'a> {
    /// The limit's average rate, requests per second.
    pub rate_per_second: f64,
    /// Time until the next renewal, seconds.
    pub period_seconds: f64,
    /// This stream's recent demand on the bucket (None: no report yet).
    pub mine_per_second: Option<f64>,
    /// The other streams' recent demand on the limit.
    pub others_per_second: &'a [Option<f64>],
}

/// Headroom over an instance's own recent demand (demand grows between reports).
const HEADROOM: f64 = 1.5;

/// Tokens to ask Redis for (the partial grant may give fewer): at least 1.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
pub fn tokens(sizing: Sizing<'_>) -> u64 {
    let budget = (sizing.rate_per_second * sizing.period_seconds).max(1.0);
    let need = |demand: Option<f64>| match demand {
        // Unknown: an equal split (an infinite need gets the fair share of what is left).
        None => f64::INFINITY,
        Some(per_second) => per_second.max(0.0) * sizing.period_seconds * HEADROOM + 1.0,
    };
    let mine = need(sizing.mine_per_second);
    let mut needs: Vec<f64> = sizing
        .others_per_second
        .iter()
        .map(|demand| need(*demand))
        .collect();
    needs.push(mine);
    let streams = needs.len() as f64;
    let share = fair_share(budget, &mut needs, mine);
    let floor = (budget / streams / 4.0).max(1.0);
    let tokens = share.max(floor).min(budget).ceil();
    if tokens.is_finite() && tokens >= 1.0 {
        (tokens as u64).min(u64::from(u32::MAX))
    } else {
        1
    }
}

/// The max-min fair allocation of `budget` to a stream needing `mine`, among `needs` (its
/// own included): the neediest last, each given its need or an equal split of what is left,
/// whichever is less.
#[allow(clippy::cast_precision_loss)]
fn fair_share(budget: f64, needs: &mut [f64], mine: f64) -> f64 {
    needs.sort_by(f64::total_cmp);
    let mut left = budget;
    let count = needs.len();
    for (index, need) in needs.iter().enumerate() {
        let equal_split = left / count.saturating_sub(index).max(1) as f64;
        let given = need.min(equal_split);
        if *need >= mine {
            // Every stream from here needs at least as much as this one: it gets the same.
            return mine.min(equal_split);
        }
        left -= given;
    }
    mine.min(left)
}

#[cfg(test)]
mod tests {
    use super::{Sizing, tokens};

    fn sizing(mine: Option<f64>, others: &[Option<f64>]) -> u64 {
        tokens(Sizing {
            rate_per_second: 100.0,
            period_seconds: 1.0,
            mine_per_second: mine,
            others_per_second: others,
        })
    }

    #[test]
    fn new_instances_get_an_equal_split_of_one_period() {
        assert_eq!(sizing(None, &[None, None, None]), 25);
        assert_eq!(sizing(None, &[]), 100);
    }

    #[test]
    fn equal_demand_splits_the_period_equally_whoever_renews_first() {
        // Three instances at 60/s each against 100/s: 34 each (rounded up), 102 asked of
        // the 100 a period allows, whatever order they renew in.
        let each = sizing(Some(60.0), &[Some(60.0), Some(60.0)]);
        assert_eq!(each, 34);
    }

    #[test]
    fn a_light_instance_gets_its_need_and_the_heavy_ones_split_the_rest() {
        // 5/s needs 5 × 1.5 + 1 = 8.5: it gets 9; the two at 300/s split the other 91.5.
        assert_eq!(sizing(Some(5.0), &[Some(300.0), Some(300.0)]), 9);
        assert_eq!(sizing(Some(300.0), &[Some(5.0), Some(300.0)]), 46);
        // Alone and over the limit: the whole period; never more.
        assert_eq!(sizing(Some(10_000.0), &[]), 100);
    }

    #[test]
    fn an_idle_instance_keeps_its_floor_and_what_nobody_needs_stays_in_redis() {
        // Idle: needs 1; the floor is 100 / 2 / 4 = 12.5.
        assert_eq!(sizing(Some(0.0), &[Some(300.0)]), 13);
        // Two light instances need 16 each: 16, not an equal split of 100.
        assert_eq!(sizing(Some(10.0), &[Some(10.0)]), 16);
        // An unknown one beside a light one: the light one's need, the rest to it.
        assert_eq!(sizing(None, &[Some(10.0)]), 84);
    }
}
