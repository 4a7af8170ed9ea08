//! Leased units, per key set: claimed from the store in batches, spent from memory, and
//! refunded once their lifetime is over.
//!
//! Each key set has its own async lock, held while its lease is spent or renewed: concurrent
//! requests for one key wait for a single claim instead of each claiming a batch (which would
//! multiply the units outstanding).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::store::View;

/// One key set's lease.
#[derive(Debug)]
pub(crate) struct LeaseSlot {
    /// The rendered keys, in policy order (to refund them).
    pub(crate) keys: Vec<String>,
    /// Units claimed and not yet spent.
    pub(crate) units: u64,
    /// After this instant the units may no longer be spent, only refunded.
    pub(crate) expires: Instant,
    /// Each consulted limit's view when the units were claimed (policy index, view).
    pub(crate) views: Vec<(usize, View)>,
    /// When a claim last failed (store unreachable): requests that were waiting for that
    /// claim go straight to the fallback instead of each waiting for a timeout of its own.
    pub(crate) failed_at: Option<Instant>,
}

/// A shared handle to one key set's lease.
pub(crate) type SharedSlot = Arc<tokio::sync::Mutex<LeaseSlot>>;

/// A policy's leases.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    slots: Mutex<HashMap<String, SharedSlot>>,
}

impl Leases {
    /// The lease of key set `id` (created empty on first use).
    pub(crate) fn slot(&self, id: &str, keys: &[String], now: Instant) -> SharedSlot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(slots.entry(id.to_string()).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(LeaseSlot {
                keys: keys.to_vec(),
                units: 0,
                expires: now,
                views: Vec::new(),
                failed_at: None,
            }))
        }))
    }

    /// Takes the unspent units out of every lease that has expired by `now` (or of every
    /// lease, with `all`), and forgets empty expired leases. Leases in use right now are
    /// skipped; the next sweep gets them.
    pub(crate) fn take_expired(&self, now: Instant, all: bool) -> Vec<(Vec<String>, u64)> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken = Vec::new();
        slots.retain(|_, slot| {
            let Ok(mut lease) = slot.try_lock() else {
                return true;
            };
            if lease.expires > now && !all {
                return true;
            }
            if lease.units > 0 {
                taken.push((lease.keys.clone(), std::mem::take(&mut lease.units)));
            }
            // Keep entries someone else holds a handle to (a request about to use it).
            Arc::strong_count(slot) > 1
        });
        taken
    }

    /// Leases held (expired ones included until swept).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn expired_units_are_taken_once_and_empty_slots_forgotten() {
        let leases = Leases::default();
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        {
            let slot = leases.slot("a", &keys, now);
            let mut lease = slot.lock().await;
            lease.units = 7;
            lease.expires = now + Duration::from_secs(1);
        }
        assert!(
            leases.take_expired(now, false).is_empty(),
            "not expired yet"
        );
        let later = now + Duration::from_secs(1);
        assert_eq!(leases.take_expired(later, false), vec![(keys.clone(), 7)]);
        assert!(leases.take_expired(later, false).is_empty());
        assert_eq!(leases.len(), 0);
    }

    #[tokio::test]
    async fn all_takes_live_leases_too() {
        let leases = Leases::default();
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        {
            let slot = leases.slot("a", &keys, now);
            let mut lease = slot.lock().await;
            lease.units = 3;
            lease.expires = now + Duration::from_secs(60);
        }
        assert_eq!(leases.take_expired(now, true), vec![(keys, 3)]);
    }

    #[tokio::test]
    async fn a_lease_in_use_is_left_alone() {
        let leases = Leases::default();
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        let slot = leases.slot("a", &keys, now);
        let mut lease = slot.lock().await;
        lease.units = 2;
        assert!(leases.take_expired(now, true).is_empty());
        assert_eq!(lease.units, 2);
    }
}
