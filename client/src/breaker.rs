//! A circuit breaker: after a few consecutive outages, stop calling the store for a while
//! (every check goes straight to the fallback, without waiting for a timeout), then let one
//! call through as a probe; its success closes the circuit again.
//!
//! A stall is not an outage. One scheduling stall (this process descheduled, a slow page
//! fault, a loaded machine) longer than the timeout times out every call in flight at once;
//! counted one by one, a healthy store would trip the breaker. So:
//!
//! - calls in flight together fail as one: a failure counts only if its call was sent after
//!   the last failure that counted (a burst of timeouts from one stall is one failure);
//! - a call that timed out is not an outage if the store answered another call since it was
//!   sent (the connection is alive; this call was caught in a stall).
//!
//! A dead store still opens the circuit after `failures` timeouts in a row: each call sent
//! after the previous one failed counts.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// When the breaker opens and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive outages (timeouts, connection errors) that open the circuit. Calls in
    /// flight together count as one, and a call is not an outage if the store answered
    /// another call since it was sent (see the module docs).
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

const CLOSED: State = State::Closed {
    failures: 0,
    last_counted: None,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
        /// When the last counted failure was recorded: calls sent before it were in flight
        /// with it (one stall), and do not count again.
        last_counted: Option<Instant>,
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
struct Shared {
    state: State,
    /// When the store last answered a call.
    answered_at: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    shared: Mutex<Shared>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config: BreakerConfig {
                failures: config.failures.max(1),
                open_for: config.open_for,
            },
            shared: Mutex::new(Shared {
                state: CLOSED,
                answered_at: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn permit(&self, now: Instant) -> Permit {
        let mut shared = self.lock();
        let state = &mut shared.state;
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

    /// Records a call that reached the store, answered at `now`. Returns whether the
    /// circuit was not closed before (a recovery).
    pub(crate) fn success(&self, now: Instant) -> bool {
        let mut shared = self.lock();
        let recovered = !matches!(shared.state, State::Closed { .. });
        shared.state = CLOSED;
        shared.answered_at = Some(shared.answered_at.map_or(now, |at| at.max(now)));
        recovered
    }

    /// Whether the store answered some call after `sent` (so a call sent then that has not
    /// answered yet was caught in a stall, not in an outage).
    pub(crate) fn answered_since(&self, sent: Instant) -> bool {
        self.lock().answered_at.is_some_and(|at| at >= sent)
    }

    /// Records a call sent at `sent` that found the store unreachable at `now`. Returns
    /// whether this opened the circuit.
    pub(crate) fn failure(&self, sent: Instant, now: Instant) -> bool {
        let mut shared = self.lock();
        if shared.answered_at.is_some_and(|at| at >= sent) {
            // The store answered another call since this one was sent: not an outage.
            return false;
        }
        let until = now.checked_add(self.config.open_for).unwrap_or(now);
        let state = &mut shared.state;
        match *state {
            State::Closed {
                last_counted: Some(counted),
                ..
            } if sent <= counted => {
                // In flight with a failure already counted: the same stall.
                false
            }
            State::Closed { failures, .. } => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.failures {
                    *state = State::Open { until };
                    true
                } else {
                    *state = State::Closed {
                        failures,
                        last_counted: Some(now),
                    };
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
        !matches!(self.lock().state, State::Closed { .. })
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
        assert!(!breaker.failure(t0, t0));
        let t0 = t0 + Duration::from_millis(1);
        assert!(breaker.failure(t0, t0), "the second failure opens it");
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
        assert!(!breaker.failure(t1, t1));
        assert!(matches!(
            breaker.permit(t1 + Duration::from_millis(50)),
            Permit::Skip(_)
        ));
        assert_eq!(
            breaker.permit(t1 + Duration::from_millis(100)),
            Permit::Probe
        );
        assert!(breaker.success(t1 + Duration::from_millis(100)));
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
        breaker.failure(t0, t0);
        let t1 = t0 + Duration::from_millis(1);
        assert!(!breaker.success(t1));
        let t2 = t1 + Duration::from_millis(1);
        assert!(!breaker.failure(t2, t2));
        assert!(!breaker.is_open());
    }

    #[test]
    fn one_stall_is_one_failure() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 3,
            open_for: Duration::from_millis(100),
        });
        let sent = Instant::now();
        let stalled = sent + Duration::from_millis(200);
        // Seventeen calls in flight together all time out when the stall ends.
        for _ in 0..17 {
            assert!(!breaker.failure(sent, stalled));
        }
        assert!(!breaker.is_open(), "one stall counted once");
        // A dead store: each call sent after the previous failure counts.
        let t1 = stalled + Duration::from_millis(1);
        assert!(!breaker.failure(t1, t1 + Duration::from_millis(5)));
        let t2 = t1 + Duration::from_millis(6);
        assert!(breaker.failure(t2, t2 + Duration::from_millis(5)));
    }

    #[test]
    fn a_timeout_after_an_answer_is_not_an_outage() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 1,
            open_for: Duration::from_millis(100),
        });
        let sent = Instant::now();
        let answered = sent + Duration::from_millis(3);
        breaker.success(answered);
        assert!(breaker.answered_since(sent));
        assert!(!breaker.failure(sent, sent + Duration::from_millis(10)));
        assert!(!breaker.is_open());
        let later = answered + Duration::from_millis(1);
        assert!(!breaker.answered_since(later));
        assert!(breaker.failure(later, later + Duration::from_millis(10)));
    }

    #[test]
    fn a_lost_probe_does_not_block_forever() {
        let breaker = Breaker::new(BreakerConfig {
            failures: 1,
            open_for: Duration::from_millis(100),
        });
        let t0 = Instant::now();
        breaker.failure(t0, t0);
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(breaker.permit(t1), Permit::Probe);
        // The probe never reports; after another open_for a new probe goes.
        assert_eq!(
            breaker.permit(t1 + Duration::from_millis(100)),
            Permit::Probe
        );
    }
}
