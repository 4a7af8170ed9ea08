//! What this replica decided since it started, by who decided: the store or the failure
//! mode (the fallback). The console's health page shows it, so an operator sees a replica
//! deciding without its store without reading Prometheus.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::verdict::{Decider, Verdict};

/// Counts of decisions by decider.
#[derive(Debug, Default)]
pub struct Tally {
    store: AtomicU64,
    fallback: AtomicU64,
    /// When the fallback last decided (ms since the Unix epoch; 0: never).
    last_fallback_ms: AtomicU64,
}

/// A reading of the tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Requests the store decided.
    pub store: u64,
    /// Requests the failure mode decided, the store out of reach.
    pub fallback: u64,
    /// When the fallback last decided (`None`: never).
    pub last_fallback_ms: Option<u64>,
}

impl Tally {
    /// Counts one decided request.
    pub fn record(&self, verdict: &Verdict) {
        match verdict.decider {
            Decider::Store(_) => {
                self.store.fetch_add(1, Ordering::Relaxed);
            }
            Decider::Fallback => {
                self.fallback.fetch_add(1, Ordering::Relaxed);
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
                self.last_fallback_ms.store(now_ms, Ordering::Relaxed);
            }
            Decider::Nothing => {}
        }
    }

    /// The counts now.
    pub fn counts(&self) -> Counts {
        let last = self.last_fallback_ms.load(Ordering::Relaxed);
        Counts {
            store: self.store.load(Ordering::Relaxed),
            fallback: self.fallback.load(Ordering::Relaxed),
            last_fallback_ms: (last > 0).then_some(last),
        }
    }
}
