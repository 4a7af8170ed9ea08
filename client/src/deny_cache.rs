//! Denials remembered until their `retry_after`: a key that was just told "not before 800
//! ms" is answered from memory for those 800 ms instead of asking the store again.
//!
//! Sound because waiting `retry_after` is exactly what the store said is needed (its waits
//! are rounded up), so a cached denial never denies a request the store would admit on
//! its own; a refund elsewhere in the meantime can make it stricter, never looser.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::decision::{Decision, Outcome, Source};
use crate::expiring::Expiring;
use crate::store::StoreBackend;

#[derive(Debug)]
struct Denial {
    at: Instant,
    cost: u64,
    decision: Decision,
    /// The backend that denied.
    backend: StoreBackend,
}

/// A policy's remembered denials, by key set, each expiring when its wait is over: at most
/// the limiter's `max_keys` of them. A new denial at the bound drops the expired ones (oldest
/// first, in O(log n) each, never by walking the live ones), or else the denial remembered
/// longest ago (the store decides that key set again: only the saving is lost).
#[derive(Debug)]
pub(crate) struct DenyCache {
    entries: Mutex<Expiring<Denial>>,
}

impl DenyCache {
    /// An empty cache of at most `max_keys` denials.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            entries: Mutex::new(Expiring::bounded(max_keys)),
        }
    }

    /// The cached denial of `id` if a request of `cost` is still sure to be denied: the
    /// denial has not expired and was for a cost no larger.
    pub(crate) fn get(&self, id: &str, cost: u64, now: Instant) -> Option<Decision> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (denial, until) = entries.get(id)?;
        if until <= now || cost < denial.cost {
            return None;
        }
        let elapsed = now.saturating_duration_since(denial.at);
        let mut decision = denial.decision.clone();
        decision.source = Source::Cache(denial.backend);
        decision.outcome = Outcome::Denied;
        decision.retry_after = Some(until.saturating_duration_since(now));
        for limit in &mut decision.limits {
            limit.retry_after = limit.retry_after.map(|d| d.saturating_sub(elapsed));
            limit.reset_after = limit.reset_after.saturating_sub(elapsed);
            limit.more_in = limit.more_in.saturating_sub(elapsed);
        }
        Some(decision)
    }

    /// Remembers a store denial of a request of `cost` (only when it says how long to wait).
    pub(crate) fn insert(&self, id: &str, cost: u64, decision: &Decision, now: Instant) {
        let Some(wait) = decision.retry_after.filter(|wait| *wait > Duration::ZERO) else {
            return;
        };
        let Some(backend) = decision.source.backend() else {
            return;
        };
        let Some(until) = now.checked_add(wait) else {
            return;
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.expire(now);
        let denial = Denial {
            at: now,
            cost,
            decision: decision.clone(),
            backend,
        };
        entries.insert(id, denial, until, now);
    }

    /// Forgets the denial of `id`: units were given back to its limits, so the store may
    /// admit before the wait is over what it denied.
    pub(crate) fn forget(&self, id: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.remove(id);
    }

    /// Forgets expired denials.
    pub(crate) fn purge(&self, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.expire(now);
    }

    /// Denials remembered (expired ones included until purged).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(wait: Option<Duration>) -> Decision {
        Decision {
            allowed: false,
            wait: Duration::ZERO,
            source: Source::Store(StoreBackend::Module),
            outcome: Outcome::Denied,
            policy: "p".into(),
            retry_after: wait,
            limits: Vec::new(),
            binding: 0,
            in_flight: None,
        }
    }

    #[test]
    fn answers_until_the_wait_is_over() {
        let cache = DenyCache::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        cache.insert("k", 1, &denial(Some(Duration::from_millis(800))), now);
        let later = now + Duration::from_millis(300);
        let cached = cache.get("k", 1, later).unwrap();
        assert_eq!(cached.source, Source::Cache(StoreBackend::Module));
        assert_eq!(cached.retry_after, Some(Duration::from_millis(500)));
        assert!(
            cache
                .get("k", 1, now + Duration::from_millis(800))
                .is_none()
        );
        assert!(cache.get("other", 1, later).is_none());
    }

    #[test]
    fn a_denial_says_nothing_about_cheaper_requests() {
        let cache = DenyCache::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        cache.insert("k", 5, &denial(Some(Duration::from_secs(1))), now);
        assert!(cache.get("k", 4, now).is_none());
        assert!(cache.get("k", 5, now).is_some());
        assert!(cache.get("k", 9, now).is_some());
    }

    #[test]
    fn never_and_zero_waits_are_not_cached() {
        let cache = DenyCache::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        cache.insert("never", 1, &denial(None), now);
        cache.insert("zero", 1, &denial(Some(Duration::ZERO)), now);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn purge_drops_expired_denials() {
        let cache = DenyCache::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        cache.insert("a", 1, &denial(Some(Duration::from_millis(10))), now);
        cache.insert("b", 1, &denial(Some(Duration::from_secs(10))), now);
        cache.purge(now + Duration::from_millis(20));
        assert_eq!(cache.len(), 1);
    }
}
