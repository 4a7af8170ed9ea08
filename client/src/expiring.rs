//! A map whose entries expire: found by key in O(1), and the expired ones dropped oldest
//! first through an index ordered by expiry, O(log n) each. Neither an insert nor a sweep
//! ever walks the live entries, so a map of 100,000 live entries costs an insert what a map
//! of ten does (a `retain` over every entry, once the map is past a size, costs each insert
//! the whole map). The deny cache keeps its denials in one; a service holding in-flight
//! slots for its callers (until they release them, or their ttl passes) keeps those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug)]
struct Entry<V> {
    value: V,
    expires: Instant,
    /// Tells apart entries expiring at the same instant in the index.
    sequence: u64,
}

/// Entries by key, each with the instant it expires.
#[derive(Debug)]
pub struct Expiring<V> {
    entries: HashMap<Arc<str>, Entry<V>>,
    by_expiry: BTreeMap<(Instant, u64), Arc<str>>,
    sequence: u64,
}

impl<V> Default for Expiring<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            sequence: 0,
        }
    }
}

impl<V> Expiring<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
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
    pub fn get(&self, key: &str) -> Option<(&V, Instant)> {
        self.entries
            .get(key)
            .map(|entry| (&entry.value, entry.expires))
    }

    /// Sets the entry of `key`, expiring at `expires`; returns the one it replaces.
    pub fn insert(&mut self, key: &str, value: V, expires: Instant) -> Option<V> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let shared: Arc<str> = match self.entries.get_key_value(key) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::from(key),
        };
        self.by_expiry
            .insert((expires, sequence), Arc::clone(&shared));
        let entry = Entry {
            value,
            expires,
            sequence,
        };
        let replaced = self.entries.insert(shared, entry)?;
        self.by_expiry
            .remove(&(replaced.expires, replaced.sequence));
        Some(replaced.value)
    }

    /// Takes the entry of `key` out.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let entry = self.entries.remove(key)?;
        self.by_expiry.remove(&(entry.expires, entry.sequence));
        Some(entry.value)
    }

    /// Drops the entries that expired by `now` (those whose instant is not after it);
    /// returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut dropped = 0usize;
        while let Some(first) = self.by_expiry.first_entry() {
            if first.key().0 > now {
                break;
            }
            let key = first.remove();
            self.entries.remove(&key);
            dropped = dropped.saturating_add(1);
        }
        dropped
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
        assert_eq!(map.insert("a", 1, at(30)), None);
        assert_eq!(map.insert("b", 2, at(10)), None);
        assert_eq!(map.insert("c", 3, at(10)), None);
        // Replaced: now expiring later; its old instant must not drop it.
        assert_eq!(map.insert("b", 20, at(50)), Some(2));
        assert_eq!(map.len(), 3);
        assert_eq!(map.expire(at(9)), 0);
        assert_eq!(map.expire(at(10)), 1, "c, at its instant");
        assert!(!map.contains_key("c"));
        assert_eq!(map.get("b"), Some((&20, at(50))));
        assert_eq!(map.remove("a"), Some(1));
        assert_eq!(map.expire(at(40)), 0, "a was removed, with its index entry");
        assert_eq!(map.expire(at(50)), 1);
        assert!(map.is_empty());
        assert!(map.by_expiry.is_empty());
    }

    proptest::proptest! {
        /// The index always holds exactly the entries, and expiry drops exactly those due.
        #[test]
        fn the_index_matches_the_entries(
            operations in proptest::collection::vec((0u8..3, 0u8..6, 0u64..20), 0..200),
        ) {
            let t0 = Instant::now();
            let mut map = Expiring::new();
            let mut model: std::collections::BTreeMap<String, u64> = Default::default();
            for (operation, key, ms) in operations {
                let key = key.to_string();
                match operation {
                    0 => {
                        map.insert(&key, ms, t0 + Duration::from_millis(ms));
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
            }
        }
    }
}
