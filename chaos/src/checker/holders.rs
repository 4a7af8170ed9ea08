//! The in-flight check: at most `limit` holders at any instant. A slot is certainly held
//! from the client's receive instant until the instant it began releasing it, or until it
//! expired on the server (at most `ttl` after the call was sent, less the clock's margin).

use super::interval::{Event, Interval, Scan, allowance};

/// A slot certainly held over `[from_us, to_us)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub from_us: u64,
    pub to_us: u64,
}

impl Hold {
    /// The slot of a call sent at `send_us`, answered at `recv_us`, released from
    /// `release_us`, on a limit whose slots expire after `ttl_us`.
    pub fn of(send_us: u64, recv_us: u64, release_us: u64, ttl_us: u64, margin_us: u64) -> Hold {
        let expires_us = (send_us + ttl_us).saturating_sub(margin_us);
        Hold {
            from_us: recv_us,
            to_us: release_us.min(expires_us),
        }
    }
}

pub fn holders(holds: &[Hold], events: &[Event], limit: u64) -> Scan {
    // Releases sort before acquisitions at the same instant.
    let mut changes: Vec<(u64, i64)> = holds
        .iter()
        .filter(|hold| hold.to_us > hold.from_us)
        .flat_map(|hold| [(hold.from_us, 1), (hold.to_us, -1)])
        .collect();
    changes.sort_unstable();
    let mut scan = Scan::default();
    let mut held = 0i64;
    for (at_us, change) in changes {
        held += change;
        let units = u64::try_from(held).unwrap_or(0);
        if change > 0 && units > limit {
            scan.offer_both(Interval {
                from_us: at_us,
                to_us: at_us,
                units,
                bound: limit,
                allowance: allowance(events, at_us, at_us),
            });
        }
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::super::interval::Cause;
    use super::*;

    fn hold(from_us: u64, to_us: u64) -> Hold {
        Hold { from_us, to_us }
    }

    #[test]
    fn exactly_the_limit_at_once_passes_and_one_more_fails() {
        // 3 slots: three overlapping holders, and a fourth taken as one is released.
        let mut holds = vec![hold(0, 100), hold(10, 200), hold(20, 300), hold(100, 400)];
        let scan = holders(&holds, &[], 3);
        assert_eq!((scan.worst, scan.violation), (None, None));
        holds.push(hold(150, 160));
        let scan = holders(&holds, &[], 3);
        let worst = scan.violation.unwrap();
        assert_eq!((worst.from_us, worst.units, worst.beyond()), (150, 4, 1));
        let fault = Event {
            from_us: 140,
            to_us: 150,
            units: 3,
            cause: Cause::Fault(0),
        };
        assert_eq!(holders(&holds, &[fault], 3).violation, None);
    }

    #[test]
    fn a_slot_held_past_its_ttl_counts_until_it_expired() {
        // Sent at 0, ttl 1 s, released at 5 s: held for certain until 1 s − 1 ms.
        let stale = Hold::of(0, 10, 5_000_000, 1_000_000, 1000);
        assert_eq!(stale, hold(10, 999_000));
        let scan = holders(&[stale, hold(999_000, 2_000_000)], &[], 1);
        assert_eq!(scan.worst, None);
    }
}
