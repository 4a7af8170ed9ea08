//! Bugs planted on purpose (`SOAK_PLANT=<name>`), to show the checker catches what it claims
//! to: each makes the load generator misbehave for some limiters while the checker holds
//! them to the catalogue's true parameters. Nothing here touches the client library's
//! behaviour: a planted limiter is configured with other parameters than the catalogue
//! states, or its decisions are rewritten after the client made them.

use crate::catalogue::{Shape, SoakLimiter};
use redis_ratelimit_client::Fallback;

/// One planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plant {
    /// A sliding log admitting 15 % over its limit in every window: `log1`'s policy has a
    /// limit of 23 where the catalogue says 20.
    SlidingLogOver,
    /// The local fallback admitting 3× its share: every client believes it is alone
    /// (`Replicas::fixed(1)`), so each takes the whole quota instead of a third.
    FallbackShare,
    /// One fixed window re-granted once: client 0 turns `fixed0`'s denials into admissions,
    /// up to one more limit, in one window.
    FixedRegrant,
    /// A token bucket whose refill runs 20 % fast: `tb1` refills 12 a second where the
    /// catalogue says 10.
    BucketFast,
}

/// The limiter of each single-limiter plant.
const SLIDING_LOG: &str = "log1";
const FIXED: &str = "fixed0";
const BUCKET: &str = "tb1";

impl Plant {
    pub const ALL: [Plant; 4] = [
        Self::SlidingLogOver,
        Self::FallbackShare,
        Self::FixedRegrant,
        Self::BucketFast,
    ];

    /// Its name, as `SOAK_PLANT` and `--plant` take it.
    pub fn name(self) -> &'static str {
        match self {
            Self::SlidingLogOver => "sliding-log-over",
            Self::FallbackShare => "fallback-3x",
            Self::FixedRegrant => "fixed-regrant",
            Self::BucketFast => "bucket-fast",
        }
    }

    /// The plant of that name.
    pub fn parse(text: &str) -> Result<Plant, String> {
        Self::ALL
            .into_iter()
            .find(|plant| plant.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|plant| plant.name()).collect();
                format!("unknown planted bug '{text}' (known: {})", names.join(", "))
            })
    }

    /// What it does, in words.
    pub fn what(self) -> &'static str {
        match self {
            Self::SlidingLogOver => "log1, a sliding log of 20 per 3 s, admits 23 (15 % over)",
            Self::FallbackShare => {
                "every client's local fallback takes the whole quota, 3× its share of 3 clients"
            }
            Self::FixedRegrant => "fixed0, 10 per 2 s, gets one window granted twice",
            Self::BucketFast => "tb1, 3 tokens at 10/s, refills at 12/s (20 % fast)",
        }
    }

    /// The limiters it makes misbehave.
    pub fn limiters(self, all: &[SoakLimiter]) -> Vec<String> {
        all.iter()
            .filter(|limiter| self.plants(limiter))
            .map(|limiter| limiter.name.clone())
            .collect()
    }

    fn plants(self, limiter: &SoakLimiter) -> bool {
        match self {
            Self::SlidingLogOver => limiter.name == SLIDING_LOG,
            Self::FallbackShare => limiter.fallback == Fallback::Local,
            Self::FixedRegrant => limiter.name == FIXED,
            Self::BucketFast => limiter.name == BUCKET,
        }
    }

    /// The parameters the load generator gives `limiter`'s policy.
    pub fn shape(self, limiter: &SoakLimiter) -> Shape {
        match (self, limiter.shape) {
            (Self::SlidingLogOver, Shape::SlidingLog { limit, window_ms })
                if self.plants(limiter) =>
            {
                Shape::SlidingLog {
                    limit: limit + (limit * 15).div_ceil(100),
                    window_ms,
                }
            }
            (Self::BucketFast, Shape::TokenBucket { capacity, per_s }) if self.plants(limiter) => {
                Shape::TokenBucket {
                    capacity,
                    per_s: (per_s * 6).div_ceil(5),
                }
            }
            (_, shape) => shape,
        }
    }

    /// The replica count the clients' local fallback is given, for `clients` processes.
    pub fn replicas(self, clients: u64) -> u64 {
        if self == Self::FallbackShare {
            1
        } else {
            clients
        }
    }

    /// Whether `client` re-grants a window of `limiter`.
    pub fn regrants(self, limiter: &SoakLimiter, client: u32) -> bool {
        self == Self::FixedRegrant && client == 0 && self.plants(limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;

    #[test]
    fn every_plant_has_a_name_and_a_victim() {
        let all = catalogue::limiters();
        for plant in Plant::ALL {
            assert_eq!(Plant::parse(plant.name()), Ok(plant));
            assert!(!plant.limiters(&all).is_empty(), "{}", plant.name());
        }
        assert!(Plant::parse("nothing").is_err());
        let log = all.iter().find(|l| l.name == SLIDING_LOG).unwrap();
        assert_eq!(
            Plant::SlidingLogOver.shape(log),
            Shape::SlidingLog {
                limit: 23,
                window_ms: 3000
            }
        );
        let bucket = all.iter().find(|l| l.name == BUCKET).unwrap();
        assert_eq!(
            Plant::BucketFast.shape(bucket),
            Shape::TokenBucket {
                capacity: 3,
                per_s: 12
            }
        );
        assert_eq!(Plant::BucketFast.shape(log), log.shape);
    }
}
