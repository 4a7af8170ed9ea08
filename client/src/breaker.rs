//! A circuit breaker: after a few consecutive failures, stop calling the store for a while
//! (every check goes straight to the fallback, without waiting for a timeout), then let one
//! call through as a probe; its success closes the circuit again.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// When the breaker opens and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures (timeouts, connection errors) that open the circuit.
    pub failures: u32,
    /// How long the circuit stays open before a probe is let through.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 3,
            open_for: Duration::from_millis(500),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// A probe is in flight since `since`.
    HalfOpen {
        since: Instant,
    },
}

/// What the breaker says about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Call the store.
    Call,
    /// Call the store: this call is the probe.
    Probe,
    /// Do not call; the circuit is open for this much longer.
    Skip(Duration),
}

#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config: BreakerConfig {
                failures: config.failures.max(1),
                open_for: config.open_for,
            },
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    pub(crate) fn permit(&self, now: Instant) -> Permit {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match *state {
            State::Closed { .. } => Permit::Call,
            State::Open { until } if until > now => {
                Permit::Skip(until.saturating_duration_since(now))
            }
            // A probe that never reported (its task was dropped) does not block forever.
            State::HalfOpen { since }
                if now.saturating_duration_since(since) < self.config.open_for =>
            {
                Permit::Skip(
                    self.config
                        .open_for
                        .saturating_sub(now.saturating_duration_since(since)),
                )
            }
            State::Open { .. } | State::HalfOpen { .. } => {
                *state = State::HalfOpen { since: now };
                Permit::Probe
            }
        }
    }

    /// Records a call that reached the store. Returns whether the circuit was not closed
    /// before (a recovery).
    pub(crate) fn success(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let recovered = !matches!(*state, State::Closed { .. });
        *state = State::Closed { failures: 0 };
        recovered
    }

    /// Records a call that found the store unreachable. Returns whether this opened the
    /// circuit.
    pub(crate) fn failure(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let until = now.checked_add(self.config.open_for).unwrap_or(now);
        match *state {
            State::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.failures {
                    *state = State::Open { until };
                    true
                } else {
                    *state = State::Closed { failures };
                    false
                }
            }
            State::HalfOpen { .. } | State::Open { .. } => {
                *state = State::Open { until };
                false
            }
        }
    }

    /// Whether calls are currently held back.
    pub(crate) fn is_open(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        !matches!(*state, State::Closed { .. })
    }

    /// How long a client should wait when the store is out of reach.
    pub(crate) fn open_for(&self) -> Duration {
        self.config.open_for
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_then_probes() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 2,
            open_for: Duration::from_millis(100),
        });
        let t0 = Instant::now();
        assert_eq!(breaker.permit(t0), Permit::Call);
        assert!(!breaker.failure(t0));
        assert!(breaker.failure(t0), "the second failure opens it");
        assert_eq!(
            breaker.permit(t0 + Duration::from_millis(40)),
            Permit::Skip(Duration::from_millis(60))
        );
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(breaker.permit(t1), Permit::Probe);
        assert!(
            matches!(breaker.permit(t1), Permit::Skip(_)),
            "one probe at a time"
        );
        assert!(!breaker.failure(t1));
        assert!(matches!(
            breaker.permit(t1 + Duration::from_millis(50)),
            Permit::Skip(_)
        ));
        assert_eq!(
            breaker.permit(t1 + Duration::from_millis(100)),
            Permit::Probe
        );
        assert!(breaker.success());
        assert_eq!(
            breaker.permit(t1 + Duration::from_millis(100)),
            Permit::Call
        );
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 2,
            open_for: Duration::from_millis(100),
        });
        let t0 = Instant::now();
        breaker.failure(t0);
        assert!(!breaker.success());
        assert!(!breaker.failure(t0));
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_lost_probe_does_not_block_forever() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 1,
            open_for: Duration::from_millis(100),
        });
        let t0 = Instant::now();
        breaker.failure(t0);
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(breaker.permit(t1), Permit::Probe);
        // The probe never reports; after another open_for a new probe goes.
        assert_eq!(
            breaker.permit(t1 + Duration::from_millis(100)),
            Permit::Probe
        );
    }
}
