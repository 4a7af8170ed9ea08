//! Whether the store is answering: what the limiter's timeout is measured against.
//!
//! A timer that fires measures how long a caller waited, which on a loaded machine includes
//! its own scheduler's lag and the queue of calls ahead of it (1,000 concurrent checks wait
//! for each other's replies). Neither says the store stopped answering. So the store counts
//! its calls waiting for a reply and notes when it last heard one, per slot on a Redis
//! Cluster (a stopped primary silences its own slots only), and a call is given up only when
//! its slot has had calls waiting and no reply for a whole timeout. See
//! [`Store::silent_for`](super::Store::silent_for).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::error::StoreError;

/// Calls waiting and replies heard, per slot (`None`: a single server).
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    /// One entry per slot with calls waiting; removed when none are (at most one per slot
    /// of a cluster, 16,384).
    slots: Mutex<HashMap<Option<u16>, Quiet>>,
}

/// A slot's calls waiting, and since when it has heard nothing: its last reply, or when a
/// call started waiting on a slot with none waiting.
#[derive(Clone, Copy, Debug)]
struct Quiet {
    waiting: usize,
    since: Instant,
}

impl Liveness {
    fn lock(&self) -> MutexGuard<'_, HashMap<Option<u16>, Quiet>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call on `slot` starts waiting for its reply; it stops when the guard is dropped.
    pub(crate) fn waiting(self: &Arc<Self>, slot: Option<u16>) -> Waiting {
        let now = Instant::now();
        self.lock()
            .entry(slot)
            .and_modify(|quiet| quiet.waiting = quiet.waiting.saturating_add(1))
            .or_insert(Quiet {
                waiting: 1,
                since: now,
            });
        Waiting {
            liveness: Arc::clone(self),
            slot,
        }
    }

    /// The store answered a call on `slot` (any reply, an error reply too).
    pub(crate) fn heard(&self, slot: Option<u16>) {
        let now = Instant::now();
        if let Some(quiet) = self.lock().get_mut(&slot) {
            quiet.since = quiet.since.max(now);
        }
    }

    /// Runs a call on `slot` counted as waiting for a reply (its connection attempt
    /// included), and notes the reply when one comes: an answer or a refusal, not an
    /// outage.
    pub(crate) async fn track<T>(
        self: &Arc<Self>,
        slot: Option<u16>,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let waiting = self.waiting(slot);
        let result = call.await;
        if !matches!(&result, Err(error) if error.is_unavailability()) {
            self.heard(slot);
        }
        drop(waiting);
        result
    }

    /// How long `slot` has had calls waiting and heard no reply (zero when none wait).
    pub(crate) fn silent_for(&self, slot: Option<u16>) -> Duration {
        self.lock()
            .get(&slot)
            .map_or(Duration::ZERO, |quiet| quiet.since.elapsed())
    }
}

/// A call waiting for its reply (see [`Liveness::waiting`]).
pub(crate) struct Waiting {
    liveness: Arc<Liveness>,
    slot: Option<u16>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut slots = self.liveness.lock();
        if let Some(quiet) = slots.get_mut(&self.slot) {
            quiet.waiting = quiet.waiting.saturating_sub(1);
            if quiet.waiting == 0 {
                slots.remove(&self.slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_counts_from_the_last_reply_while_calls_wait() {
        let liveness = Arc::new(Liveness::default());
        assert_eq!(liveness.silent_for(None), Duration::ZERO);
        let first = liveness.waiting(None);
        std::thread::sleep(Duration::from_millis(20));
        assert!(liveness.silent_for(None) >= Duration::from_millis(20));
        liveness.heard(None);
        assert!(liveness.silent_for(None) < Duration::from_millis(20));
        let second = liveness.waiting(None);
        drop(first);
        assert!(liveness.silent_for(None) < Duration::from_millis(20));
        drop(second);
        assert_eq!(liveness.lock().len(), 0, "no entry once nothing waits");
        // A cluster's slots are apart: a reply on one says nothing of another.
        let _on_7 = liveness.waiting(Some(7));
        std::thread::sleep(Duration::from_millis(5));
        liveness.heard(Some(8));
        assert!(liveness.silent_for(Some(7)) >= Duration::from_millis(5));
    }
}
