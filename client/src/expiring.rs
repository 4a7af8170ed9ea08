//! A map whose entries expire, with a bound on how many it holds: found by key in O(1); the
//! expired ones dropped oldest first through an index ordered by expiry, and past the bound
//! the least recently used (inserted or renewed) through an index ordered by use, O(log n)
//! each. Neither an insert nor a sweep ever walks the live entries, so a map of 100,000 live
//! entries costs an insert what a map of ten does (a `retain` over every entry, once the map
//! is past a size, costs each insert the whole map). The limiter's per-key tables (the deny
//! cache, the store's last answers, the fallback's states) keep their entries in one; a
//! service holding in-flight slots for its callers (until they release them, or their ttl
//! passes) keeps those.
//!
//! **Eviction order.** A new key inserted at the bound first drops every expired entry; if
//! none had expired, the entry used longest ago goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// The most entries each of a limiter's per-key tables holds unless told otherwise.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

#[derive(Debug)]
struct Entry<V, T> {
    value: V,
    expires: T,
    /// When it was last used (inserted or renewed), in the map's order of uses; also tells
    /// apart entries expiring at the same instant in the expiry index.
    sequence: u64,
}

/// Entries by key, each with the instant it expires (an [`Instant`], or any ordered time
/// such as a clock's microseconds), at most [`capacity`](Self::capacity) of them.
#[derive(Debug)]
pub struct Expiring<V, T = Instant> {
    entries: HashMap<Arc<str>, Entry<V, T>>,
    by_expiry: BTreeMap<(T, u64), Arc<str>>,
    by_use: BTreeMap<u64, Arc<str>>,
    sequence: u64,
    capacity: usize,
    evicted: u64,
}

impl<V, T: Ord + Copy> Default for Expiring<V, T> {
    fn default() -> Self {
        Self::bounded(usize::MAX)
    }
}

impl<V, T: Ord + Copy> Expiring<V, T> {
    /// An empty map without a bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map of at most `capacity` entries (at least 1).
    pub fn bounded(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            by_use: BTreeMap::new(),
            sequence: 0,
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    /// The most entries it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Live entries dropped so far to make room (expired ones not counted).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Entries held (expired ones included until [`expire`](Self::expire) drops them).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `key` has an entry (expired or not).
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The entry of `key` and when it expires (expired or not: the caller compares).
    pub fn get(&self, key: &str) -> Option<(&V, T)> {
        self.entries
            .get(key)
            .map(|entry| (&entry.value, entry.expires))
    }

    /// The entry of `key` to change in place (not a use: its place in either order stays;
    /// [`renew`](Self::renew) moves it).
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.entries.get_mut(key).map(|entry| &mut entry.value)
    }

    /// Sets the entry of `key`, expiring at `expires`, as its latest use; returns the one it
    /// replaces. A new key at the bound first drops the entries expired by `now`, then, if
    /// none had, the entry used longest ago.
    pub fn insert(&mut self, key: &str, value: V, expires: T, now: T) -> Option<V> {
        let shared: Arc<str> = match self.entries.get_key_value(key) {
            Some((shared, _)) => Arc::clone(shared),
            None => {
                self.make_room(now);
                Arc::from(key)
            }
        };
        let sequence = self.next_sequence();
        self.by_expiry
            .insert((expires, sequence), Arc::clone(&shared));
        self.by_use.insert(sequence, Arc::clone(&shared));
        let entry = Entry {
            value,
            expires,
            sequence,
        };
        let replaced = self.entries.insert(shared, entry)?;
        self.unindex(replaced.expires, replaced.sequence);
        Some(replaced.value)
    }

    /// Moves the entry of `key` to expire at `expires`, as its latest use; false if there
    /// is none.
    pub fn renew(&mut self, key: &str, expires: T) -> bool {
        let Some(shared) = self
            .entries
            .get_key_value(key)
            .map(|(shared, _)| Arc::clone(shared))
        else {
            return false;
        };
        let sequence = self.next_sequence();
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        let (old_expires, old_sequence) = (entry.expires, entry.sequence);
        entry.expires = expires;
        entry.sequence = sequence;
        self.unindex(old_expires, old_sequence);
        self.by_expiry
            .insert((expires, sequence), Arc::clone(&shared));
        self.by_use.insert(sequence, shared);
        true
    }

    /// Takes the entry of `key` out.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let entry = self.entries.remove(key)?;
        self.unindex(entry.expires, entry.sequence);
        Some(entry.value)
    }

    /// Drops the entries that expired by `now` (those whose instant is not after it);
    /// returns how many.
    pub fn expire(&mut self, now: T) -> usize {
        let mut dropped = 0usize;
        while let Some(first) = self.by_expiry.first_entry() {
            if first.key().0 > now {
                break;
            }
            let sequence = first.key().1;
            let key = first.remove();
            self.by_use.remove(&sequence);
            self.entries.remove(&key);
            dropped = dropped.saturating_add(1);
        }
        dropped
    }

    /// Keeps only the entries `keep` says to (it may change them in place); O(n).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        let mut gone = Vec::new();
        for (key, entry) in &mut self.entries {
            if !keep(key, &mut entry.value) {
                gone.push(Arc::clone(key));
            }
        }
        for key in gone {
            self.remove(&key);
        }
    }

    /// Room for one more entry: the expired ones dropped, or else the one used longest ago.
    fn make_room(&mut self, now: T) {
        if self.entries.len() < self.capacity || self.expire(now) > 0 {
            return;
        }
        while self.entries.len() >= self.capacity {
            let Some((_, key)) = self.by_use.pop_first() else {
                return;
            };
            if let Some(entry) = self.entries.remove(&key) {
                self.by_expiry.remove(&(entry.expires, entry.sequence));
                self.evicted = self.evicted.saturating_add(1);
            }
        }
    }

    fn unindex(&mut self, expires: T, sequence: u64) {
        self.by_expiry.remove(&(expires, sequence));
        self.by_use.remove(&sequence);
    }

    fn next_sequence(&mut self) -> u64 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::arithmetic_side_effects)]
    use std::time::Duration;

    use super::*;

    #[test]
    fn entries_expire_in_order_and_replaced_ones_are_reindexed() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut map = Expiring::new();
        assert_eq!(map.insert("a", 1, at(30), t0), None);
        assert_eq!(map.insert("b", 2, at(10), t0), None);
        assert_eq!(map.insert("c", 3, at(10), t0), None);
        // Replaced: now expiring later; its old instant must not drop it.
        assert_eq!(map.insert("b", 20, at(50), t0), Some(2));
        assert_eq!(map.len(), 3);
        assert_eq!(map.expire(at(9)), 0);
        assert_eq!(map.expire(at(10)), 1, "c, at its instant");
        assert!(!map.contains_key("c"));
        assert_eq!(map.get("b"), Some((&20, at(50))));
        assert_eq!(map.remove("a"), Some(1));
        assert_eq!(map.expire(at(40)), 0, "a was removed, with its index entry");
        assert_eq!(map.expire(at(50)), 1);
        assert!(map.is_empty());
        assert!(map.by_expiry.is_empty() && map.by_use.is_empty());
    }

    #[test]
    fn past_the_bound_the_expired_go_first_then_the_least_recently_used() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut map = Expiring::bounded(3);
        map.insert("a", 1, at(100), t0);
        map.insert("b", 2, at(10), t0);
        map.insert("c", 3, at(100), t0);
        // Full, nothing expired: the least recently used goes ("a": "b" and "c" came later).
        map.insert("d", 4, at(100), t0);
        assert!(!map.contains_key("a") && map.len() == 3);
        assert_eq!(map.evicted(), 1);
        // Renewing "b" makes "c" the least recently used.
        assert!(map.renew("b", at(20)));
        map.insert("e", 5, at(100), at(5));
        assert!(!map.contains_key("c"), "c was used longest ago");
        assert!(map.contains_key("b") && map.contains_key("d") && map.contains_key("e"));
        // Full again, "b" has expired by now: it goes, though "d" was used longer ago.
        map.insert("f", 6, at(100), at(20));
        assert!(!map.contains_key("b") && map.contains_key("d"));
        assert_eq!(
            map.evicted(),
            2,
            "an expired entry is not counted as evicted"
        );
        // Replacing a key at the bound evicts nothing.
        map.insert("d", 7, at(100), at(20));
        assert_eq!((map.len(), map.evicted()), (3, 2));
        assert_eq!(map.by_use.len(), 3);
        assert_eq!(map.by_expiry.len(), 3);
    }

    proptest::proptest! {
        /// The index always holds exactly the entries, and expiry drops exactly those due.
        #[test]
        fn the_index_matches_the_entries(
            operations in proptest::collection::vec((0u8..3, 0u8..6, 0u64..20), 0..200),
        ) {
            let t0 = Instant::now();
            let mut map = Expiring::new();
            let now = t0;
            let mut model: std::collections::BTreeMap<String, u64> = Default::default();
            for (operation, key, ms) in operations {
                let key = key.to_string();
                match operation {
                    0 => {
                        map.insert(&key, ms, t0 + Duration::from_millis(ms), now);
                        model.insert(key, ms);
                    }
                    1 => {
                        proptest::prop_assert_eq!(map.remove(&key), model.remove(&key));
                    }
                    _ => {
                        let dropped = map.expire(t0 + Duration::from_millis(ms));
                        let before = model.len();
                        model.retain(|_, at| *at > ms);
                        proptest::prop_assert_eq!(dropped, before - model.len());
                    }
                }
                proptest::prop_assert_eq!(map.len(), model.len());
                proptest::prop_assert_eq!(map.by_expiry.len(), model.len());
                proptest::prop_assert_eq!(map.by_use.len(), model.len());
            }
        }
    }
}
