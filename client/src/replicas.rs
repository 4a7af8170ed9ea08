//! How many replicas share a quota, for the local fallback's `quota / replicas`.

use std::fmt;
use std::sync::Arc;

/// The number of replicas of the service, as the application knows it.
///
/// A number for a fixed fleet, or a function the limiter calls at each fallback decision
/// (read an atomic your service discovery updates). The count lags during scaling: scaling
/// from 10 to 20 replicas while each still believes 10 lets the fleet admit up to twice the
/// quota during a fallback, until the count is refreshed.
#[derive(Clone)]
pub enum Replicas {
    /// A fixed count.
    Fixed(u64),
    /// Asked at each fallback decision.
    Dynamic(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl Replicas {
    /// A fixed count (at least 1).
    pub fn fixed(count: u64) -> Self {
        Self::Fixed(count.max(1))
    }

    /// A count read from `count` at each fallback decision.
    pub fn from_fn(count: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Self::Dynamic(Arc::new(count))
    }

    /// The current count (at least 1).
    pub fn get(&self) -> u64 {
        match self {
            Self::Fixed(count) => *count,
            Self::Dynamic(count) => count(),
        }
        .max(1)
    }
}

impl Default for Replicas {
    fn default() -> Self {
        Self::Fixed(1)
    }
}

impl fmt::Debug for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(count) => write!(f, "Replicas::Fixed({count})"),
            Self::Dynamic(_) => write!(f, "Replicas::Dynamic(now {})", self.get()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn a_dynamic_count_is_read_each_time() {
        let count = Arc::new(AtomicU64::new(3));
        let seen = Arc::clone(&count);
        let replicas = Replicas::from_fn(move || seen.load(Ordering::Relaxed));
        assert_eq!(replicas.get(), 3);
        count.store(0, Ordering::Relaxed);
        assert_eq!(replicas.get(), 1, "never below one");
        assert_eq!(Replicas::fixed(0).get(), 1);
    }
}
