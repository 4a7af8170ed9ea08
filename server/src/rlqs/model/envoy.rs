//! One Envoy 1.40 instance's bucket, as its filter holds an assignment (docs/rlqs.md, *How
//! Envoy 1.40 applies a token bucket*): applied after the response's `deny_all`, so it
//! starts full; refills `tokens_per_fill ÷ fill_interval` a second continuously up to
//! `max_tokens`; expires the TTL's whole seconds after it was applied; each request takes
//! one token; allowed requests are counted until the next report.

use crate::rlqs::lease::Shape;

/// Milliseconds per second.
const MS_PER_S: u64 = 1_000;

/// A live token bucket. Tokens are counted in units of `1 ÷ (fill seconds × 1000)` of a
/// token, so that a millisecond refills exactly `tokens_per_fill` units.
#[derive(Debug)]
struct Live {
    units: u64,
    max_units: u64,
    units_per_token: u64,
    refill_units_per_ms: u64,
    updated_ms: u64,
    expires_ms: u64,
}

/// One instance's bucket (none: denied, `no_assignment` and `expired_assignment` deny).
#[derive(Debug, Default)]
pub struct Envoy {
    live: Option<Live>,
    /// Allowed since the last report was built.
    pub allowed_unreported: u64,
}

impl Envoy {
    /// Applies an assignment at `now_ms` living `life_seconds` (`None`: `DENY_ALL`).
    pub fn apply(&mut self, shape: Option<Shape>, now_ms: u64, life_seconds: u64) {
        self.live = shape.map(|shape| {
            let fill_seconds = u64::try_from(shape.fill_interval_seconds.max(1)).unwrap_or(1);
            let units_per_token = fill_seconds * MS_PER_S;
            let max_units = u64::from(shape.max_tokens) * units_per_token;
            Live {
                units: max_units,
                max_units,
                units_per_token,
                refill_units_per_ms: u64::from(shape.tokens_per_fill),
                updated_ms: now_ms,
                expires_ms: now_ms + life_seconds * MS_PER_S,
            }
        });
    }

    /// `demand` requests at `now_ms`: how many are allowed.
    pub fn requests(&mut self, demand: u64, now_ms: u64) -> u64 {
        let Some(live) = self.live.as_mut() else {
            return 0;
        };
        if now_ms >= live.expires_ms {
            self.live = None;
            return 0;
        }
        let elapsed_ms = now_ms.saturating_sub(live.updated_ms);
        live.units = (live.units + elapsed_ms * live.refill_units_per_ms).min(live.max_units);
        live.updated_ms = now_ms;
        let allowed = demand.min(live.units / live.units_per_token);
        live.units -= allowed * live.units_per_token;
        self.allowed_unreported += allowed;
        allowed
    }

    /// Builds a report: the requests allowed since the last one.
    pub fn report(&mut self) -> u64 {
        std::mem::take(&mut self.allowed_unreported)
    }
}
