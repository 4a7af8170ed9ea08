//! Regional admission: one global limit split into a region's own floor and a balance leased
//! from the home region's pool (see `docs/regions.md`).
//!
//! A regional call is decided in one step: the floor first (the region's own limiter, an
//! ordinary call of its algorithm), then, if the floor denies, the leased balance. The
//! balance is a [`Lease`]: units and the absolute instant (of the region's clock) after which
//! they are gone. Because the instant is absolute and stored with the units, a lease can
//! never be spent after it lapses, whatever the caller does or fails to do: no agent has to
//! be alive to take units away.
//!
//! An in-flight floor is decided apart ([`admit`] on a [`Quota::Concurrency`]): its leased
//! slots are holders of home's pool, so the region keeps every call's holder in its floor's
//! key, the leased ones included, and a lease's units are slots, read and never spent.

pub mod parts;
pub mod split;

use crate::concurrency::{self, ConcurrencyAlgorithm, ConcurrencyParams};
use crate::decision::Algorithm;
use crate::engine::{self, Refused};
use crate::grant::{Grant, Granted};
use crate::kinds::{Change, Kind, LimiterRef, Quota};

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
    /// The units left in the live lease after the call (0 when none lives); of an in-flight
    /// lease, its slots still free.
    pub lease_units: u64,
}

/// A region's floor: its own limiter's state (`None`: missing) and the quota it is checked
/// against.
pub type Floor<'a> = (Option<LimiterRef<'a>>, &'a Quota);

/// Decides a call of `cost` units at `now_us`: the floor, if the region has one (checked for
/// `cost` units), then the lease. Nothing is written; the caller writes the floor's commit
/// and the new lease, whichever the admission carries (a floor that did not admit carries
/// none). An in-flight floor is decided by
/// [`admit_in_flight`] (its call takes one slot, whatever `cost`).
pub fn admit(
    floor: Option<Floor<'_>>,
    cost: u64,
    lease: Option<Lease>,
    now_us: i64,
) -> Result<Admission, Refused> {
    if let Some((held, Quota::Concurrency(params))) = floor {
        return admit_in_flight(held, params, lease, now_us);
    }
    let live_units = |lease: Option<Lease>| lease.map_or(0, |lease| lease.live_units(now_us));
    let floor = match floor {
        Some((held, quota)) => {
            let mut granted = engine::acquire(held, &quota.with_cost(cost), Grant::Whole, now_us)?;
            if granted.evaluation.decision.allowed {
                return Ok(Admission {
                    allowed: true,
                    why: Why::Floor,
                    floor: Some(granted),
                    lease: None,
                    lease_units: live_units(lease),
                });
            }
            // The floor denied: it is shown, never written (a denial writes nothing).
            granted.evaluation.commit = None;
            Some(granted)
        }
        None => None,
    };
    let (allowed, why, spent) = match lease.filter(|lease| lease.is_live(now_us)) {
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
        lease: spent,
        lease_units: live_units(spent.or(lease)),
    })
}

/// Decides an in-flight call (`floor`: the region's own limit, the call's holder and ttl) at
/// `now_us`, every holder of the region in the floor's key `held`:
/// - on the floor while the holders other than the caller's are fewer than the floor's
///   limit (a live holder renews: never counted twice);
/// - else on the live lease while they are fewer than the floor's limit plus the lease's
///   units (its slots, each a holder of home's pool living as long as the lease) and the
///   caller's holder, renewed or new, expires no later than the lease ends (region clock):
///   so a call on a leased slot ends while its pool holder lives;
/// - else denied: `lease_exhausted` (a live lease without a free slot, or ending too soon),
///   `home_unreachable` (none lives). A denied renewal leaves the holder as it was.
///
/// An admitted call's holder is written to the floor's key either way (the admission's
/// floor commit; the lease is never written); its slot comes back when it is released or
/// expires. The floor's view (what the reply's fields 2–5 show) is the floor's own call
/// when it admitted, else the floor as it stands. Without a holder the call is a peek:
/// nothing is written.
pub fn admit_in_flight(
    held: Option<LimiterRef<'_>>,
    floor: &ConcurrencyParams,
    lease: Option<Lease>,
    now_us: i64,
) -> Result<Admission, Refused> {
    let state = match held {
        None => None,
        Some(LimiterRef::Concurrency(state)) => Some(state),
        Some(other) => {
            return Err(Refused::KindMismatch {
                index: 0,
                held: other.kind(),
                wanted: Kind::Concurrency,
            });
        }
    };
    let facts = concurrency::call_facts(state, floor, now_us);
    let live = lease.filter(|lease| lease.is_live(now_us));
    let (why, admitted_by) = if facts.others < floor.limit() {
        (Why::Floor, Some(*floor))
    } else {
        match live {
            None => (Why::HomeUnreachable, None),
            Some(live) => {
                let widened = floor.limit().saturating_add(live.units);
                if facts.others < widened && facts.expires_at_us <= live.expires_at_us {
                    (Why::Lease, Some(floor.with_limit(widened)))
                } else {
                    (Why::LeaseExhausted, None)
                }
            }
        }
    };
    let as_it_stands = || ConcurrencyAlgorithm::evaluate(state, &floor.without_holder(), now_us);
    let evaluation = match (why, admitted_by) {
        (Why::Floor, Some(params)) => ConcurrencyAlgorithm::evaluate(state, &params, now_us),
        (_, Some(params)) => {
            let taken = ConcurrencyAlgorithm::evaluate(state, &params, now_us);
            crate::Evaluation {
                decision: as_it_stands().decision,
                commit: taken.commit,
            }
        }
        (_, None) => as_it_stands(),
    };
    let allowed = admitted_by.is_some();
    let holders_after = facts
        .others
        .saturating_add(u64::from(allowed || facts.holds));
    let lease_units = live.map_or(0, |live| {
        floor
            .limit()
            .saturating_add(live.units)
            .saturating_sub(holders_after)
            .min(live.units)
    });
    let erased = evaluation.map_change(|change| Change::Concurrency(change.into()));
    Ok(Admission {
        allowed,
        why,
        floor: Some(Granted {
            units: u64::from(allowed),
            evaluation: erased,
        }),
        lease: None,
        lease_units,
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

    /// A region's in-flight floor of `limit` slots, holders kept in `state`.
    struct InFlight {
        limit: u64,
        state: Option<Limiter>,
    }

    impl InFlight {
        /// A call by `holder` for `ttl_ms` at `now_us` under `lease`, written as the glue
        /// writes it: the floor's commit, whatever admitted it.
        fn call(
            &mut self,
            holder: &str,
            ttl_ms: u64,
            lease: Option<Lease>,
            now_us: i64,
        ) -> (Why, u64) {
            let params = crate::concurrency::ConcurrencyParams::new(self.limit, ttl_ms * 1000, 100)
                .unwrap()
                .with_holder(crate::concurrency::HolderId::new(holder.as_bytes()).unwrap());
            let quota = Quota::Concurrency(Box::new(params));
            let held = self.state.as_ref().map(Limiter::as_ref);
            let admission = admit(Some((held, &quota)), 1, lease, now_us).unwrap();
            assert!(
                admission.lease.is_none(),
                "an in-flight lease is never written"
            );
            let floor = admission.floor.unwrap();
            assert_eq!(floor.evaluation.commit.is_some(), admission.allowed);
            assert_eq!(floor.evaluation.decision.limit, self.limit);
            if let Some(commit) = floor.evaluation.commit {
                match self.state.as_mut() {
                    Some(held) => commit.change.apply(held.as_mut()).unwrap(),
                    None => self.state = Some(commit.change.create()),
                }
            }
            (admission.why, admission.lease_units)
        }

        fn release(&mut self, holder: &str, now_us: i64) {
            let holder = crate::concurrency::HolderId::new(holder.as_bytes()).unwrap();
            let held = self.state.as_ref().map(Limiter::as_ref);
            let commit = engine::release(held, &holder, now_us).unwrap().unwrap();
            commit
                .change
                .apply(self.state.as_mut().unwrap().as_mut())
                .unwrap();
        }
    }

    /// A region with an in-flight floor of 1 and a lease of 2 slots ending 10 ms after now.
    fn floor_of_one_and_a_lease_of_two() -> (InFlight, Option<Lease>) {
        let region = InFlight {
            limit: 1,
            state: None,
        };
        let lease = Lease {
            units: 2,
            expires_at_us: NOW_US + 10_000,
        };
        (region, Some(lease))
    }

    #[test]
    fn in_flight_calls_take_the_floor_then_the_leased_slots_all_in_the_floor() {
        let (mut region, lease) = floor_of_one_and_a_lease_of_two();
        assert_eq!(region.call("a", 5, lease, NOW_US), (Why::Floor, 2));
        // A renewal is never counted twice, and takes the floor it holds.
        assert_eq!(region.call("a", 5, lease, NOW_US), (Why::Floor, 2));
        assert_eq!(region.call("b", 5, lease, NOW_US), (Why::Lease, 1));
        assert_eq!(region.call("c", 10, lease, NOW_US), (Why::Lease, 0));
        assert_eq!(region.call("d", 1, lease, NOW_US), (Why::LeaseExhausted, 0));
        // A release gives the slot back: to the next call, leased or not.
        region.release("a", NOW_US);
        assert_eq!(region.call("d", 1, lease, NOW_US), (Why::Lease, 0));
    }

    #[test]
    fn a_leased_slot_goes_only_to_a_call_ending_by_the_leases_end() {
        let (mut region, lease) = floor_of_one_and_a_lease_of_two();
        assert_eq!(region.call("a", 60_000, lease, NOW_US), (Why::Floor, 2));
        assert_eq!(
            region.call("b", 11, lease, NOW_US),
            (Why::LeaseExhausted, 2)
        );
        assert_eq!(region.call("b", 10, lease, NOW_US), (Why::Lease, 1));
        // Renewing past the lease's end is refused too: the holder keeps its old expiry.
        assert_eq!(
            region.call("b", 8, lease, NOW_US + 3_000),
            (Why::LeaseExhausted, 1)
        );
        assert_eq!(region.call("b", 7, lease, NOW_US + 3_000), (Why::Lease, 1));
        // Once the lease ends, only the floor decides, and says so.
        assert_eq!(
            region.call("c", 1, lease, NOW_US + 10_000),
            (Why::HomeUnreachable, 0)
        );
        region.release("a", NOW_US + 10_000);
        assert_eq!(region.call("c", 1, lease, NOW_US + 10_000), (Why::Floor, 0));
    }

    #[test]
    fn an_in_flight_floor_refuses_a_key_of_another_kind() {
        let params = crate::concurrency::ConcurrencyParams::new(1, 1000, 100).unwrap();
        let bucket = floor(1);
        let first = admit(Some((None, &bucket)), 1, None, NOW_US).unwrap();
        let change = first.floor.unwrap().evaluation.commit.unwrap().change;
        let state = change.create();
        assert_eq!(
            admit_in_flight(Some(state.as_ref()), &params, None, NOW_US),
            Err(Refused::KindMismatch {
                index: 0,
                held: Kind::TokenBucket,
                wanted: Kind::Concurrency
            })
        );
    }
}
