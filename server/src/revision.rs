//! Which config this replica serves: how many times it was loaded, the fingerprint of the
//! files it was read from (the same files give the same fingerprint on every replica of a
//! build) and when. The console's health page shows it.

use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The config in force, as a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revision {
    /// 1 for the config read at start, one more for each reload.
    pub generation: u64,
    /// The fingerprint of its files (names and contents).
    pub fingerprint: u64,
    /// When it was loaded (ms since the Unix epoch).
    pub loaded_at_ms: u64,
}

/// The revision in force, updated by the watcher.
#[derive(Debug)]
pub struct Revisions(Mutex<Revision>);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0))
}

impl Revisions {
    /// The config read at start, of fingerprint `fingerprint`.
    pub fn new(fingerprint: u64) -> Self {
        Self(Mutex::new(Revision {
            generation: 1,
            fingerprint,
            loaded_at_ms: now_ms(),
        }))
    }

    /// A config of fingerprint `fingerprint` swapped in.
    pub fn reloaded(&self, fingerprint: u64) {
        let mut revision = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *revision = Revision {
            generation: revision.generation.saturating_add(1),
            fingerprint,
            loaded_at_ms: now_ms(),
        };
    }

    /// The revision in force.
    pub fn current(&self) -> Revision {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
