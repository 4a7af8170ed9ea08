//! The links between a region and home, and the seeded randomness the runs draw from.

/// SplitMix64: a small, fast, seeded generator (every run is reproducible from its seed).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 for a bound of 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }
}

/// One region's link to home (both directions alike).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// One-way delay, µs.
    pub delay_us: i64,
    /// Extra delay drawn in `0..=jitter_us` per message.
    pub jitter_us: i64,
    /// Messages lost, per thousand.
    pub loss_per_mille: u64,
    /// Cuts from home, `[from_us, to_us)` of virtual time: a message sent during one is lost.
    pub partitions: Vec<(i64, i64)>,
}

impl Link {
    /// When a message sent at `sent_us` arrives, or `None` when it is lost.
    pub fn deliver(&self, sent_us: i64, rng: &mut Rng) -> Option<i64> {
        let cut = self
            .partitions
            .iter()
            .any(|(from, to)| (*from..*to).contains(&sent_us));
        let lost = rng.below(1000) < self.loss_per_mille;
        let jitter =
            i64::try_from(rng.below(u64::try_from(self.jitter_us).unwrap_or(0) + 1)).unwrap_or(0);
        (!cut && !lost).then_some(sent_us + self.delay_us + jitter)
    }
}
