//! What an admitted request holds in in-flight limits, to give back when it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::limit_set::LimitSet;

/// The in-flight slots an admitted request holds, to give back with
/// [`RateLimiter::release`](crate::RateLimiter::release) when it ends (the HTTP layer does it after the response).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The policy whose limits hold the slots.
    pub(crate) policy: Arc<str>,
    /// The id the slots are held under.
    pub(crate) holder: Arc<str>,
    /// The policy's keys for the request.
    pub(crate) keys: Vec<String>,
    /// Taken from the local fallback's limits, not the store's.
    pub(crate) local: bool,
    /// A job's limits (the policy's otherwise): `policy` is then the job's profile.
    pub(crate) limits: Option<Arc<LimitSet>>,
}

impl InFlight {
    /// The id the request's slots are held under.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// A holder id no other request of the fleet uses, and that nobody can guess: 128 bits
    /// from the operating system's random source, in hex. An id is a capability (whoever
    /// has it can give the slots back early, for example through the service's
    /// `POST /v1/release`), so it must not be derivable from another. Only if the
    /// operating system cannot give random bytes is it this process's id and start instant
    /// then a counter: unique still, but guessable.
    pub(crate) fn new_holder() -> Arc<str> {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_ok() {
            let random = u128::from_be_bytes(bytes);
            return format!("{random:032x}").into();
        }
        static PREFIX: OnceLock<String> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let prefix = PREFIX.get_or_init(|| {
            let started = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos());
            format!("{:x}.{started:x}", std::process::id())
        });
        let number = COUNTER.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}.{number:x}").into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_ids_are_random_and_distinct() {
        let ids: std::collections::BTreeSet<Arc<str>> =
            (0..1_000).map(|_| InFlight::new_holder()).collect();
        assert_eq!(ids.len(), 1_000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()))
        );
    }
}
