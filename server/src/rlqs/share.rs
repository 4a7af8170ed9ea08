//! How many tokens one Envoy instance is leased for a bucket: its share of the bucket's
//! recent demand across every stream asking the same limit, times what the limit allows
//! over one assignment's life; no more than its own demand needs (the rest stays in
//! Redis for the others), and at least a floor (a new instance gets its floor before its
//! first report says what it needs).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Each stream's recent demand (requests per second) per limit key, shared by the streams.
#[derive(Debug, Default)]
pub struct Demand {
    by_key: Mutex<HashMap<String, HashMap<u64, f64>>>,
}

impl Demand {
    /// Notes `stream`'s demand on `key` and answers the demand of every stream on it (this
    /// one included) and how many streams ask it.
    pub fn note(&self, key: &str, stream: u64, per_second: f64) -> (f64, usize) {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let streams = by_key.entry(key.to_string()).or_default();
        streams.insert(stream, per_second);
        (streams.values().sum(), streams.len())
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
pub struct Sizing {
    /// The limit's average rate, requests per second.
    pub rate_per_second: f64,
    /// The assignment's life, seconds.
    pub ttl_seconds: f64,
    /// This stream's recent demand on the bucket (None: no report yet).
    pub mine_per_second: Option<f64>,
    /// Every stream's recent demand on the limit.
    pub total_per_second: f64,
    /// Streams asking the limit.
    pub streams: usize,
}

/// Headroom over an instance's own recent demand (demand grows between renewals).
const HEADROOM: f64 = 1.5;

/// Tokens to ask Redis for (the partial grant may give fewer): at least 1.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
pub fn tokens(sizing: Sizing) -> u64 {
    let budget = (sizing.rate_per_second * sizing.ttl_seconds).max(1.0);
    let streams = sizing.streams.max(1) as f64;
    let wanted = match sizing.mine_per_second {
        // A new instance: an equal split of one assignment's budget.
        None => budget / streams,
        Some(mine) => {
            let share = if sizing.total_per_second > 0.0 {
                mine / sizing.total_per_second
            } else {
                1.0 / streams
            };
            let own_need = mine * sizing.ttl_seconds * HEADROOM + 1.0;
            (budget * share).min(own_need)
        }
    };
    let floor = (budget / streams / 4.0).max(1.0);
    let tokens = wanted.max(floor).min(budget).ceil();
    if tokens.is_finite() && tokens >= 1.0 {
        (tokens as u64).min(u64::from(u32::MAX))
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::{Sizing, tokens};

    fn sizing(mine: Option<f64>, total: f64, streams: usize) -> Sizing {
        Sizing {
            rate_per_second: 100.0,
            ttl_seconds: 1.0,
            mine_per_second: mine,
            total_per_second: total,
            streams,
        }
    }

    #[test]
    fn a_new_instance_gets_an_equal_split() {
        assert_eq!(tokens(sizing(None, 0.0, 4)), 25);
    }

    #[test]
    fn shares_follow_demand_and_never_pass_the_budget() {
        assert_eq!(tokens(sizing(Some(300.0), 400.0, 2)), 75);
        assert_eq!(tokens(sizing(Some(100.0), 400.0, 2)), 25);
        assert_eq!(tokens(sizing(Some(10_000.0), 10_000.0, 1)), 100);
    }

    #[test]
    fn an_idle_instance_keeps_its_floor_and_no_more_than_it_needs() {
        // 2 requests/s over 1 s with headroom: 4 tokens; the floor is 100/2/4 = 12.5.
        assert_eq!(tokens(sizing(Some(2.0), 200.0, 2)), 13);
        assert_eq!(tokens(sizing(Some(0.0), 0.0, 1)), 25);
    }
}
