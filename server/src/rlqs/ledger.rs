//! One bucket's leases on one stream, and how many of their tokens can be refunded: the
//! tokens charged that Envoy can certainly never admit.
//!
//! Envoy reports a bucket's allowed requests as counts since its last report (Envoy 1.40:
//! every 5 s, whatever `reporting_interval` says), so the counts cannot be split between
//! the leases they were admitted under. Instead each report bounds what is still to come:
//! every admission before the report was built is in the counts received, and a lease
//! admits after that at most `max_tokens + rate × (what is left of its life)` (its token
//! bucket holds at most `max_tokens`; Envoy expires it after the whole seconds of its TTL,
//! counted from when it applied it). Everything charged beyond the counts and that bound
//! is never admitted: it is refunded.
//!
//! The timing assumption (the one the service makes of Envoy): a report is received within
//! [`DELIVERY_MARGIN`] of being built, and an assignment applied within it of being sent.

use std::time::{Duration, Instant};

use super::lease::Shape;

/// The most a report or an assignment takes from one end of the stream to the other.
pub const DELIVERY_MARGIN: Duration = Duration::from_secs(1);

/// A lease sent and not yet certainly over.
#[derive(Debug)]
struct Lease {
    sent: Instant,
    shape: Shape,
    /// When the next assignment of the bucket was sent: Envoy drops this lease's token
    /// bucket when it applies that one, within [`DELIVERY_MARGIN`].
    replaced: Option<Instant>,
}

/// One bucket's account on one stream.
#[derive(Debug, Default)]
pub struct Ledger {
    leases: Vec<Lease>,
    charged: u64,
    reported_allowed: u64,
    refunded: u64,
}

impl Ledger {
    /// A lease of `charged` tokens (0: none) sent now as `shape` (`None`: not a token
    /// bucket, `deny_all`): either replaces the leases sent before it.
    pub fn leased(&mut self, charged: u64, shape: Option<Shape>, now: Instant) {
        self.charged = self.charged.saturating_add(charged);
        for lease in &mut self.leases {
            lease.replaced.get_or_insert(now);
        }
        if let Some(shape) = shape {
            self.leases.push(Lease {
                sent: now,
                shape,
                replaced: None,
            });
        }
    }

    /// A report of `allowed` requests received at `now`, with leases living at most
    /// `life_seconds` in Envoy: the tokens to refund now (counted as refunded: a refund is
    /// never sent twice; a lost one leaves its tokens spent, under-admission).
    pub fn reported(&mut self, allowed: u64, now: Instant, life_seconds: u64) -> u64 {
        self.reported_allowed = self.reported_allowed.saturating_add(allowed);
        let life = Duration::from_secs(life_seconds);
        // The report was built after `built`; a lease ends by `sent + margin + life`.
        let built = now.checked_sub(DELIVERY_MARGIN).unwrap_or(now);
        self.leases
            .retain(|lease| life_left(lease, life, built) > Duration::ZERO);
        let to_come: u64 = self
            .leases
            .iter()
            .map(|lease| {
                let left = life_left(lease, life, built);
                let seconds = left
                    .as_secs()
                    .saturating_add(u64::from(left.subsec_nanos() > 0));
                lease.shape.most_admitted(seconds)
            })
            .fold(0, u64::saturating_add);
        let refundable = self
            .charged
            .saturating_sub(self.reported_allowed)
            .saturating_sub(to_come)
            .saturating_sub(self.refunded);
        self.refunded = self.refunded.saturating_add(refundable);
        refundable
    }
}

/// What is left after `built` of a lease's life in Envoy: it ends `life` after Envoy
/// applied it (at most [`DELIVERY_MARGIN`] after it was sent), or when Envoy applied the
/// next assignment of the bucket (at most the margin after that was sent), whichever is
/// first.
fn life_left(lease: &Lease, life: Duration, built: Instant) -> Duration {
    let expires = lease.sent.checked_add(DELIVERY_MARGIN.saturating_add(life));
    let dropped = lease
        .replaced
        .and_then(|replaced| replaced.checked_add(DELIVERY_MARGIN));
    expires
        .into_iter()
        .chain(dropped)
        .min()
        .map_or(Duration::MAX, |end| end.saturating_duration_since(built))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, Instant};

    use super::Ledger;
    use crate::rlqs::lease::shape;

    #[test]
    fn a_live_lease_keeps_what_it_may_still_admit_and_an_ended_one_is_refunded() {
        let start = Instant::now();
        let mut ledger = Ledger::default();
        let first = shape(20, 2).unwrap(); // 18 at once, 1 a second
        ledger.leased(20, Some(first), start);
        // Just after: the whole lease may still be admitted.
        assert_eq!(ledger.reported(0, start + Duration::from_millis(100), 2), 0);
        // 5 s later the lease is over (1 + 2 + 1 s): all not reported allowed is refunded.
        assert_eq!(ledger.reported(12, start + Duration::from_secs(5), 2), 8);
        assert_eq!(ledger.reported(0, start + Duration::from_secs(10), 2), 0);
        // A second lease, 2 s in: at most 18 + 1 × 2 = 20 still to come, nothing refunded.
        ledger.leased(20, Some(first), start + Duration::from_secs(10));
        assert_eq!(ledger.reported(3, start + Duration::from_secs(12), 2), 0);
        // 3.5 s in: 0.5 s of life left after the report was built: 18 + 1 may still come.
        assert_eq!(
            ledger.reported(0, start + Duration::from_millis(13_500), 2),
            0
        );
        // Over: the 17 not reported allowed are refunded, once.
        assert_eq!(
            ledger.reported(0, start + Duration::from_millis(14_500), 2),
            17
        );
        assert_eq!(ledger.reported(0, start + Duration::from_secs(20), 2), 0);
    }

    #[test]
    fn a_replaced_lease_is_over_a_margin_after_its_successor_was_sent() {
        let start = Instant::now();
        let lease = shape(20, 2).unwrap();
        let mut ledger = Ledger::default();
        ledger.leased(20, Some(lease), start);
        // Replaced at 1 s: Envoy dropped A by 2 s, though its TTL runs to 3 s.
        ledger.leased(20, Some(lease), start + Duration::from_secs(1));
        // Built after 2.5 s: A is over, B may still admit 18 + 1 × 2: 40 − 15 − 20 = 5.
        assert_eq!(
            ledger.reported(15, start + Duration::from_millis(3_500), 2),
            5
        );
        // A `deny_all` (nothing granted) replaces B as well: by 4.5 s B is over.
        ledger.leased(0, None, start + Duration::from_millis(3_500));
        assert_eq!(
            ledger.reported(3, start + Duration::from_millis(5_500), 2),
            17
        );
    }
}
