//! A fast non-cryptographic hasher (the Fx hash of rustc and Firefox) for the maps a check
//! looks its metric handles up in: keys are a few short label strings chosen by the
//! application's configuration, not by its callers, so there is nothing to flood, and
//! SipHash's cost on every check would be most of the lookup's.

use std::hash::{BuildHasherDefault, Hasher};

/// The Fx hash.
#[derive(Clone, Copy, Default)]
pub(crate) struct FxHasher(u64);

/// Builds [`FxHasher`]s, for `HashMap::with_hasher` and `HashMap::default`.
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

/// The Fx constant: odd, with bits spread.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            for (to, from) in word.iter_mut().zip(chunk) {
                *to = *from;
            }
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hash};

    use super::*;

    fn hash(value: impl Hash) -> u64 {
        FxBuild::default().hash_one(value)
    }

    #[test]
    fn equal_keys_hash_alike_and_others_apart() {
        assert_eq!(hash(("api", "per-key")), hash(("api", "per-key")));
        assert_ne!(hash(("api", "per-key")), hash(("api", "per-kez")));
        assert_ne!(hash(("ap", "iper-key")), hash(("api", "per-key")));
    }
}
