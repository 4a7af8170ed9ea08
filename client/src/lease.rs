//! Leased units, per key set: claimed from the store in batches, spent from memory, and
//! refunded once their lifetime is over.
//!
//! Each key set has its own async lock, held while its lease is spent or renewed: concurrent
//! requests for one key wait for a single claim instead of each claiming a batch (which would
//! multiply the units outstanding). A request that waited takes that claim's result: it
//! spends from the units claimed, or is denied by the claim's denial; the claim is sized for
//! the requests waiting on it (within the policy's cap), so one store call serves them all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::expiring::Expiring;
use crate::limit_set::LimitSet;
use crate::store::{StoreBackend, View};

/// One key set's lease.
#[derive(Debug)]
pub(crate) struct LeaseSlot {
    /// The rendered keys, in policy order (to refund them).
    pub(crate) keys: Vec<String>,
    /// The limits the units were claimed from (to refund them).
    pub(crate) limits: Arc<LimitSet>,
    /// Units claimed and not yet spent.
    pub(crate) units: u64,
    /// After this instant the units may no longer be spent, only refunded.
    pub(crate) expires: Instant,
    /// Each consulted limit's view when the units were claimed (policy index, view).
    pub(crate) views: Vec<(usize, View)>,
    /// The backend that granted them (`None` before the first claim).
    pub(crate) backend: Option<StoreBackend>,
    /// The last claim's result, for the requests that waited for it.
    pub(crate) last_claim: Option<LastClaim>,
    /// Units the last claim asked for (claims grow while a key stays hot).
    pub(crate) claim_units: u64,
}

/// What the last claim of a lease came to, and when.
#[derive(Debug)]
pub(crate) struct LastClaim {
    pub(crate) at: Instant,
    pub(crate) result: ClaimResult,
}

#[derive(Debug)]
pub(crate) enum ClaimResult {
    /// Units were granted (waiters spend them, or claim anew when they are gone).
    Granted,
    /// The store denied a claim of at least `min` units; waiters of that cost or more are
    /// denied by it. `views` and `binding` are the denial's (policy indices).
    Denied {
        min: u64,
        views: Vec<(usize, View)>,
        binding: usize,
        backend: StoreBackend,
    },
    /// The store was out of reach: waiters go to the fallback without a timeout of their
    /// own.
    Failed,
}

/// One key set's lease behind its lock, and how many requests are waiting for the lock.
#[derive(Debug)]
pub(crate) struct Slot {
    waiting: AtomicU64,
    lease: tokio::sync::Mutex<LeaseSlot>,
}

/// Counts a request as waiting while it is alive (dropped with a cancelled wait, too).
struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slot {
    /// Waits for the lease (counted among the waiting while it waits).
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, LeaseSlot> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        self.lease.lock().await
    }

    /// Requests waiting for the lease now (besides its holder).
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A shared handle to one key set's lease.
pub(crate) type SharedSlot = Arc<Slot>;

/// Unspent units taken out of an expired lease, to refund.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Expired {
    pub(crate) keys: Vec<String>,
    pub(crate) limits: Arc<LimitSet>,
    pub(crate) units: u64,
}

/// A lease's place in the table never expires by itself (the sweeper takes expired leases).
const UNTIL_SWEPT: u64 = u64::MAX;

/// A policy's leases, at most `max_keys` key sets: a new key set at the bound forgets the
/// lease used longest ago (its unspent units are never refunded: under-admission, never
/// over; a request still spending from it finishes on it).
#[derive(Debug)]
pub(crate) struct Leases {
    slots: Mutex<Expiring<SharedSlot, u64>>,
}

impl Leases {
    /// An empty table of at most `max_keys` leases.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            slots: Mutex::new(Expiring::bounded(max_keys)),
        }
    }

    /// The lease of key set `id` (created empty on first use) of `limits`.
    pub(crate) fn slot(
        &self,
        id: &str,
        keys: &[String],
        limits: &Arc<LimitSet>,
        now: Instant,
    ) -> SharedSlot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((slot, _)) = slots.get(id) {
            let slot = Arc::clone(slot);
            slots.renew(id, UNTIL_SWEPT);
            return slot;
        }
        let slot = Arc::new(Slot {
            waiting: AtomicU64::new(0),
            lease: tokio::sync::Mutex::new(LeaseSlot {
                keys: keys.to_vec(),
                limits: Arc::clone(limits),
                units: 0,
                expires: now,
                views: Vec::new(),
                backend: None,
                last_claim: None,
                claim_units: 0,
            }),
        });
        slots.insert(id, Arc::clone(&slot), UNTIL_SWEPT, 0);
        slot
    }

    /// Takes the unspent units out of every lease that has expired by `now` (or of every
    /// lease, with `all`), with their keys and limits, and forgets empty expired leases.
    /// Leases in use right now are skipped; the next sweep gets them.
    pub(crate) fn take_expired(&self, now: Instant, all: bool) -> Vec<Expired> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken = Vec::new();
        slots.retain(|_, slot| {
            let Ok(mut lease) = slot.lease.try_lock() else {
                return true;
            };
            if lease.expires > now && !all {
                return true;
            }
            if lease.units > 0 {
                taken.push(Expired {
                    keys: lease.keys.clone(),
                    limits: Arc::clone(&lease.limits),
                    units: std::mem::take(&mut lease.units),
                });
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

    fn limits() -> Arc<LimitSet> {
        Arc::new(LimitSet::new(Vec::new(), |_| 0))
    }

    fn expired(keys: &[String], units: u64) -> Vec<Expired> {
        vec![Expired {
            keys: keys.to_vec(),
            limits: limits(),
            units,
        }]
    }

    #[tokio::test]
    async fn expired_units_are_taken_once_and_empty_slots_forgotten() {
        let leases = Leases::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        {
            let slot = leases.slot("a", &keys, &limits(), now);
            let mut lease = slot.lock().await;
            lease.units = 7;
            lease.expires = now + Duration::from_secs(1);
        }
        assert!(
            leases.take_expired(now, false).is_empty(),
            "not expired yet"
        );
        let later = now + Duration::from_secs(1);
        assert_eq!(leases.take_expired(later, false), expired(&keys, 7));
        assert!(leases.take_expired(later, false).is_empty());
        assert_eq!(leases.len(), 0);
    }

    #[tokio::test]
    async fn all_takes_live_leases_too() {
        let leases = Leases::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        {
            let slot = leases.slot("a", &keys, &limits(), now);
            let mut lease = slot.lock().await;
            lease.units = 3;
            lease.expires = now + Duration::from_secs(60);
        }
        assert_eq!(leases.take_expired(now, true), expired(&keys, 3));
    }

    #[test]
    fn past_the_bound_the_lease_used_longest_ago_is_forgotten() {
        let leases = Leases::new(2);
        let now = Instant::now();
        let keys = vec!["k".to_string()];
        let a = leases.slot("a", &keys, &limits(), now);
        leases.slot("b", &keys, &limits(), now);
        assert!(Arc::ptr_eq(&a, &leases.slot("a", &keys, &limits(), now)));
        leases.slot("c", &keys, &limits(), now);
        assert_eq!(leases.len(), 2);
        assert!(
            Arc::ptr_eq(&a, &leases.slot("a", &keys, &limits(), now)),
            "a was used after b: b went"
        );
        let slots = leases.slots.lock().unwrap();
        assert!(slots.contains_key("c") && !slots.contains_key("b"));
    }

    #[tokio::test]
    async fn a_lease_in_use_is_left_alone() {
        let leases = Leases::new(crate::expiring::DEFAULT_MAX_KEYS);
        let now = Instant::now();
        let keys = vec!["a".to_string()];
        let slot = leases.slot("a", &keys, &limits(), now);
        let mut lease = slot.lock().await;
        lease.units = 2;
        assert!(leases.take_expired(now, true).is_empty());
        assert_eq!(lease.units, 2);
    }
}
