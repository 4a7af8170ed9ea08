//! A Space-Saving summary (Metwally, Agrawal, El Abbadi, 2005): the most frequent keys of a
//! stream in at most `capacity` counters. A key not held takes the place of the least
//! counted one, inheriting its count as its error, so for every key held
//! `count − error ≤ true count ≤ count`, a key not held was seen at most `floor` times (the
//! least count, once full), and `error ≤ floor ≤ total / capacity`. Summaries of several
//! replicas merge by adding ([`merge`](super::merge)).
//!
//! The counters are a binary min-heap on count with an index from key to place: counting a
//! key held or replacing the least one is O(log capacity).

use std::collections::HashMap;
use std::sync::Arc;

/// Longest key kept, in bytes: a longer one is cut at a character boundary (two keys that
/// differ only past it are counted as one).
pub const MAX_KEY_BYTES: usize = 256;

/// One counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The key.
    pub key: Arc<str>,
    /// Its count: at least its true count.
    pub count: u64,
    /// At most this much of `count` may be other keys' (inherited when it took a place).
    pub error: u64,
}

/// A Space-Saving summary of at most `capacity` keys.
#[derive(Clone, Debug)]
pub struct SpaceSaving {
    capacity: usize,
    /// A min-heap on `count`.
    heap: Vec<Counted>,
    /// Key -> its place in `heap`.
    places: HashMap<Arc<str>, usize>,
    /// Everything counted.
    total: u64,
}

/// `key` cut to [`MAX_KEY_BYTES`] at a character boundary.
fn bounded(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    key.get(..end).unwrap_or_default()
}

impl SpaceSaving {
    /// An empty summary of at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            heap: Vec::new(),
            places: HashMap::new(),
            total: 0,
        }
    }

    /// Counts `key` `by` times.
    pub fn add(&mut self, key: &str, by: u64) {
        self.total = self.total.saturating_add(by);
        let key = bounded(key);
        if let Some(&place) = self.places.get(key) {
            if let Some(counted) = self.heap.get_mut(place) {
                counted.count = counted.count.saturating_add(by);
            }
            self.sift_down(place);
            return;
        }
        let key: Arc<str> = Arc::from(key);
        if self.heap.len() < self.capacity {
            let place = self.heap.len();
            self.places.insert(Arc::clone(&key), place);
            self.heap.push(Counted {
                key,
                count: by,
                error: 0,
            });
            self.sift_up(place);
            return;
        }
        // Full: the least counted key gives its place, and its count as the error.
        let Some(least) = self.heap.first_mut() else {
            return;
        };
        let inherited = least.count;
        let gone = std::mem::replace(&mut least.key, Arc::clone(&key));
        least.error = inherited;
        least.count = inherited.saturating_add(by);
        self.places.remove(&gone);
        self.places.insert(key, 0);
        self.sift_down(0);
    }

    /// Everything counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The most keys it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The most a key not held was counted: 0 until full (every key counted is held, exactly),
    /// then the least count.
    pub fn floor(&self) -> u64 {
        match (self.heap.len() < self.capacity, self.heap.first()) {
            (false, Some(least)) => least.count,
            _ => 0,
        }
    }

    /// The counters, most counted first (ties by key).
    pub fn counted(&self) -> Vec<Counted> {
        let mut counted = self.heap.clone();
        counted.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        counted
    }

    /// Bytes it holds: the counters, their keys and the index (an estimate of the
    /// allocations, for the figures).
    pub fn bytes(&self) -> usize {
        let keys: usize = self.heap.iter().map(|counted| counted.key.len()).sum();
        let counter = std::mem::size_of::<Counted>();
        let index = std::mem::size_of::<(Arc<str>, usize)>().saturating_add(8);
        self.heap
            .capacity()
            .saturating_mul(counter)
            .saturating_add(self.places.capacity().saturating_mul(index))
            .saturating_add(keys)
    }

    fn count_at(&self, place: usize) -> Option<u64> {
        self.heap.get(place).map(|counted| counted.count)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        for place in [a, b] {
            if let Some(counted) = self.heap.get(place)
                && let Some(kept) = self.places.get_mut(&counted.key)
            {
                *kept = place;
            }
        }
    }

    fn sift_up(&mut self, mut place: usize) {
        while place > 0 {
            let parent = place.saturating_sub(1) / 2;
            match (self.count_at(place), self.count_at(parent)) {
                (Some(here), Some(above)) if here < above => {
                    self.swap(place, parent);
                    place = parent;
                }
                _ => return,
            }
        }
    }

    fn sift_down(&mut self, mut place: usize) {
        loop {
            let left = place.saturating_mul(2).saturating_add(1);
            let right = left.saturating_add(1);
            let mut least = place;
            for child in [left, right] {
                if let (Some(candidate), Some(current)) =
                    (self.count_at(child), self.count_at(least))
                    && candidate < current
                {
                    least = child;
                }
            }
            if least == place {
                return;
            }
            self.swap(place, least);
            place = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn below_capacity_every_key_is_exact() {
        let mut summary = SpaceSaving::new(4);
        for key in ["a", "b", "a", "c", "a", "b"] {
            summary.add(key, 1);
        }
        assert_eq!(summary.floor(), 0);
        assert_eq!(summary.total(), 6);
        let counted: Vec<(String, u64, u64)> = summary
            .counted()
            .into_iter()
            .map(|c| (c.key.to_string(), c.count, c.error))
            .collect();
        assert_eq!(
            counted,
            vec![("a".into(), 3, 0), ("b".into(), 2, 0), ("c".into(), 1, 0)]
        );
    }

    #[test]
    fn full_it_keeps_its_guarantees() {
        // A deterministic skewed stream over 200 keys into 16 counters.
        let mut summary = SpaceSaving::new(16);
        let mut truth: BTreeMap<String, u64> = BTreeMap::new();
        let mut state = 12_345u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let draw = (state >> 33) % 1_000;
            // Key i drawn with weight about 1/(i+1).
            let key = (0..200u64)
                .find(|i| draw < 1_000 - 1_000 / (i + 2))
                .unwrap_or(199);
            let key = format!("k{key}");
            summary.add(&key, 1);
            *truth.entry(key).or_default() += 1;
        }
        let floor = summary.floor();
        assert!(floor > 0 && floor <= summary.total() / 16);
        let counted = summary.counted();
        assert_eq!(counted.len(), 16);
        for c in &counted {
            let true_count = truth.get(&*c.key).copied().unwrap_or(0);
            assert!(
                c.count - c.error <= true_count && true_count <= c.count,
                "{c:?}"
            );
            assert!(c.error <= floor);
        }
        for (key, true_count) in &truth {
            if !counted.iter().any(|c| &*c.key == key) {
                assert!(*true_count <= floor, "{key} {true_count} > {floor}");
            }
        }
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let long = "é".repeat(200);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_KEY_BYTES && cut.len() >= MAX_KEY_BYTES - 1);
        assert!(long.starts_with(cut));
    }
}
