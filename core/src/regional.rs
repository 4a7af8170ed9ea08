//! Regional admission: one global limit split into a region's own floor and a balance leased
//! from the home region's pool (see `docs/regions.md`).
//!
//! A regional call is decided in one step: the floor first (the region's own limiter, an
//! ordinary call of its algorithm), then, if the floor denies, the leased balance. The
//! balance is a [`Lease`]: units and the absolute instant (of the region's clock) after which
//! they are gone. Because the instant is absolute and stored with the units, a lease can
//! never be spent after it lapses, whatever the caller does or fails to do: no agent has to
//! be alive to take units away.

pub mod split;

use crate::engine::{self, Refused};
use crate::grant::{Grant, Granted};
use crate::kinds::{Change, LimiterRef, Quota};

/// Units leased from the home pool, spendable until `expires_at_us` (exclusive) of the
/// region's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// Units left.
    pub units: u64,
    /// The first instant (Unix µs, region clock) at which the units are gone.
    pub expires_at_us: i64,
}

impl Lease {
    /// The units spendable at `now_us`: all of them while the lease lives, none after.
    pub fn live_units(&self, now_us: i64) -> u64 {
        if now_us < self.expires_at_us {
            self.units
        } else {
            0
        }
    }

    /// Whether the lease still lives at `now_us` (even with no units left).
    pub fn is_live(&self, now_us: i64) -> bool {
        now_us < self.expires_at_us
    }
}

/// Why a regional call was decided as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The floor admitted it.
    Floor,
    /// The floor denied it and the lease paid for it.
    Lease,
    /// The floor denied it and the lease, live, had too few units left.
    LeaseExhausted,
    /// The floor denied it and there is no live lease: the region decides from its floor
    /// alone (home is unreachable, or has not answered within the lease's lifetime).
    HomeUnreachable,
}

/// What a regional call decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Whether the call is admitted.
    pub allowed: bool,
    /// Which part decided it, and why.
    pub why: Why,
    /// The floor's own evaluation of the call, if the region has a floor (its commit is to
    /// be written when the floor admitted; its decision is what the headers show when
    /// nothing admitted).
    pub floor: Option<Granted<Change>>,
    /// The lease after the call, when the lease paid for it (to be written).
    pub lease: Option<Lease>,
}

/// A region's floor: its own limiter's state (`None`: missing) and the quota it is checked
/// against.
pub type Floor<'a> = (Option<LimiterRef<'a>>, &'a Quota);

/// Decides a call of `cost` units at `now_us`: the floor, if the region has one (checked for
/// `cost` units), then the lease. Nothing is written; the caller writes the floor's commit or
/// the new lease, whichever the admission carries.
pub fn admit(
    floor: Option<Floor<'_>>,
    cost: u64,
    lease: Option<Lease>,
    now_us: i64,
) -> Result<Admission, Refused> {
    let floor = match floor {
        Some((held, quota)) => {
            let granted = engine::acquire(held, &quota.with_cost(cost), Grant::Whole, now_us)?;
            if granted.evaluation.decision.allowed {
                return Ok(Admission {
                    allowed: true,
                    why: Why::Floor,
                    floor: Some(granted),
                    lease: None,
                });
            }
            Some(granted)
        }
        None => None,
    };
    let (allowed, why, lease) = match lease.filter(|lease| lease.is_live(now_us)) {
        None => (false, Why::HomeUnreachable, None),
        Some(live) => match live.units.checked_sub(cost) {
            Some(left) => (
                true,
                Why::Lease,
                Some(Lease {
                    units: left,
                    ..live
                }),
            ),
            None => (false, Why::LeaseExhausted, None),
        },
    };
    Ok(Admission {
        allowed,
        why,
        floor,
        lease,
    })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::kinds::Limiter;
    use crate::number::Decimal;
    use crate::token_bucket::TokenBucketParams;

    fn floor(capacity: u64) -> Quota {
        let rate = Decimal::parse_positive(b"1").unwrap();
        Quota::TokenBucket(TokenBucketParams::new(capacity, rate, 1).unwrap())
    }

    const NOW_US: i64 = 1_700_000_000_000_000;

    /// Runs `calls` calls at `NOW_US` against a floor of `capacity` and `lease`, writing what
    /// each admission says, and returns the reasons.
    fn run(capacity: u64, mut lease: Option<Lease>, calls: usize) -> Vec<Why> {
        let quota = floor(capacity);
        let mut state: Option<Limiter> = None;
        let mut whys = Vec::new();
        for _ in 0..calls {
            let held = state.as_ref().map(Limiter::as_ref);
            let admission = admit(Some((held, &quota)), 1, lease, NOW_US).unwrap();
            if admission.why == Why::Floor {
                let change = admission.floor.unwrap().evaluation.commit.unwrap().change;
                match state.as_mut() {
                    Some(held) => change.apply(held.as_mut()).unwrap(),
                    None => state = Some(change.create()),
                }
            }
            if let Some(next) = admission.lease {
                lease = Some(next);
            }
            whys.push(admission.why);
        }
        whys
    }

    #[test]
    fn the_floor_first_then_the_lease_then_nothing() {
        let lease = Lease {
            units: 2,
            expires_at_us: NOW_US + 1,
        };
        assert_eq!(
            run(2, Some(lease), 5),
            [
                Why::Floor,
                Why::Floor,
                Why::Lease,
                Why::Lease,
                Why::LeaseExhausted
            ]
        );
    }

    #[test]
    fn without_a_floor_the_lease_pays_the_whole_cost_or_nothing() {
        let lease = Lease {
            units: 3,
            expires_at_us: NOW_US + 1,
        };
        let paid = admit(None, 2, Some(lease), NOW_US).unwrap();
        assert_eq!((paid.allowed, paid.why), (true, Why::Lease));
        assert_eq!(paid.lease.map(|lease| lease.units), Some(1));
        assert!(paid.floor.is_none());
        let short = admit(None, 4, Some(lease), NOW_US).unwrap();
        assert_eq!(
            (short.allowed, short.why, short.lease),
            (false, Why::LeaseExhausted, None)
        );
        let lapsed = admit(None, 1, Some(lease), NOW_US + 1).unwrap();
        assert_eq!((lapsed.allowed, lapsed.why), (false, Why::HomeUnreachable));
    }

    #[test]
    fn a_floor_denial_keeps_the_floors_view_for_the_headers() {
        let quota = floor(1);
        let admission = admit(Some((None, &quota)), 2, None, NOW_US).unwrap();
        assert_eq!(admission.why, Why::HomeUnreachable);
        let floor = admission.floor.unwrap();
        assert!(!floor.evaluation.decision.allowed);
        assert!(floor.evaluation.commit.is_none());
    }

    #[test]
    fn a_lapsed_lease_is_never_spent_and_the_floor_says_home_is_unreachable() {
        let lapsed = Lease {
            units: 100,
            expires_at_us: NOW_US,
        };
        assert_eq!(run(1, Some(lapsed), 2), [Why::Floor, Why::HomeUnreachable]);
        assert_eq!(run(1, None, 2), [Why::Floor, Why::HomeUnreachable]);
    }
}
