//! The load the soak offers: each limiter driven at 0.5×, 1× or 3× its rate, the level
//! changing every 3 to 10 s on a schedule drawn from the seed. Every client draws the same
//! schedule, so the fleet's offered load follows it: below the limit a cut hits buckets
//! with tokens left and windows with room (where lost writes show), above it the limiter
//! denies.

use crate::catalogue::SoakLimiter;
use crate::setup::Random;

/// The load levels, in per mille of a limiter's rate.
pub const LEVELS_PER_MILLE: [u64; 3] = [500, 1000, 3000];

/// How the levels are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// A seeded schedule of the three levels, per limiter.
    Seeded,
    /// One level throughout (per mille).
    Fixed(u64),
}

impl Mix {
    /// `mix`, or a level: `0.5`, `1` or `3`.
    pub fn parse(text: &str) -> Result<Mix, String> {
        match text {
            "mix" => Ok(Self::Seeded),
            "0.5" => Ok(Self::Fixed(500)),
            "1" => Ok(Self::Fixed(1000)),
            "3" => Ok(Self::Fixed(3000)),
            other => Err(format!(
                "unknown load '{other}' (mix, 0.5, 1 or 3 times the rate)"
            )),
        }
    }

    pub fn name(self) -> String {
        match self {
            Self::Seeded => "mix".into(),
            Self::Fixed(500) => "0.5".into(),
            Self::Fixed(per_mille) => format!("{}", per_mille / 1000),
        }
    }
}

/// From `from_ms` after the start, the load is `per_mille` of the rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    pub from_ms: u64,
    pub per_mille: u64,
}

/// The schedule of the limiter at `index` in the catalogue, over `duration_ms`.
pub fn phases(seed: u64, index: usize, duration_ms: u64, mix: Mix) -> Vec<Phase> {
    if let Mix::Fixed(per_mille) = mix {
        return vec![Phase {
            from_ms: 0,
            per_mille,
        }];
    }
    let mut random = Random::new(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut all = Vec::new();
    let mut from_ms = 0;
    while from_ms < duration_ms {
        let level = LEVELS_PER_MILLE[random.below(LEVELS_PER_MILLE.len() as u64) as usize];
        all.push(Phase {
            from_ms,
            per_mille: level,
        });
        from_ms += 3000 + random.below(7001);
    }
    all
}

/// The level at `elapsed_ms` (the last phase's level after the end).
pub fn level_at(phases: &[Phase], elapsed_ms: u64) -> u64 {
    phases
        .iter()
        .take_while(|phase| phase.from_ms <= elapsed_ms)
        .last()
        .map_or(1000, |phase| phase.per_mille)
}

/// How many tasks of one client check `limiter` at once: one, or for an in-flight limit
/// enough to keep 3× its slots busy across the fleet.
pub fn tasks(limiter: &SoakLimiter, clients: u64) -> u64 {
    if limiter.in_flight() {
        let (limit, _) = limiter.rate();
        (3 * limit).div_ceil(clients.max(1)) + 1
    } else {
        1
    }
}

/// The mean time between two checks of one task at `per_mille` of the rate, with `clients`
/// processes of [`tasks`] tasks each: the fleet offers `per_mille` ‰ of the rate in units
/// (costs are 1 to `max_cost`, uniformly).
pub fn interval_us(limiter: &SoakLimiter, clients: u64, per_mille: u64) -> u64 {
    let (units, per_ms) = limiter.rate();
    let senders = u128::from(clients.max(1)) * u128::from(tasks(limiter, clients));
    let numerator = u128::from(1 + limiter.max_cost()) * senders * u128::from(per_ms) * 1_000_000;
    let denominator = 2 * u128::from(per_mille.max(1)) * u128::from(units.max(1));
    u64::try_from(numerator / denominator).unwrap_or(u64::MAX)
}

/// The share of the run each level takes, summed over `limiters` (per mille of the time),
/// for the report.
pub fn time_shares(seed: u64, count: usize, duration_ms: u64, mix: Mix) -> [u64; 3] {
    let mut shares = [0u64; 3];
    for index in 0..count {
        let schedule = phases(seed, index, duration_ms, mix);
        for (n, phase) in schedule.iter().enumerate() {
            let to_ms = schedule
                .get(n + 1)
                .map_or(duration_ms, |next| next.from_ms.min(duration_ms));
            if let Some(level) = LEVELS_PER_MILLE.iter().position(|l| *l == phase.per_mille) {
                shares[level] += to_ms.saturating_sub(phase.from_ms);
            }
        }
    }
    let total: u64 = shares.iter().sum::<u64>().max(1);
    shares.map(|share| share * 1000 / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;

    #[test]
    fn the_schedule_replays_and_mixes_every_level() {
        let first = phases(42, 3, 600_000, Mix::Seeded);
        assert_eq!(first, phases(42, 3, 600_000, Mix::Seeded));
        assert_ne!(first, phases(43, 3, 600_000, Mix::Seeded));
        for level in LEVELS_PER_MILLE {
            assert!(first.iter().any(|phase| phase.per_mille == level));
        }
        assert_eq!(level_at(&first, 0), first[0].per_mille);
        assert_eq!(level_at(&first, first[1].from_ms), first[1].per_mille);
        let shares = time_shares(42, 21, 600_000, Mix::Seeded);
        assert!(shares.iter().all(|share| *share > 200), "{shares:?}");
    }

    #[test]
    fn the_interval_offers_the_rate() {
        let all = catalogue::limiters();
        // tb0: 5 tokens a second, costs 1 or 2 (1.5 on average), 3 clients: 0.9 s apart.
        let bucket = all.iter().find(|l| l.name == "tb0").unwrap();
        assert_eq!(interval_us(bucket, 3, 1000), 900_000);
        assert_eq!(interval_us(bucket, 3, 3000), 300_000);
        // inflight0: 3 slots held 200 ms, 4 tasks in each of 3 clients: 15 arrivals a
        // second at 1×, each task every 800 ms.
        let gate = all.iter().find(|l| l.name == "inflight0").unwrap();
        assert_eq!(tasks(gate, 3), 4);
        assert_eq!(interval_us(gate, 3, 1000), 800_000);
    }
}
