//! The aligned-window check: at most `limit` units in each window `[k × W, (k + 1) × W)` of
//! the Unix epoch, counting the calls certainly decided inside it (sent at least the
//! server clock's margin after it began, answered before it ended), beyond the allowance of
//! the events overlapping the window.

use std::collections::BTreeMap;

use super::interval::{Call, Event, Interval, Scan, allowance};

pub fn aligned(
    calls: &[Call],
    events: &[Event],
    limit: u64,
    window_us: u64,
    margin_us: u64,
) -> Scan {
    let window_us = window_us.max(1);
    let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
    for call in calls {
        let Some(earliest) = call.from_us.checked_sub(margin_us) else {
            continue;
        };
        let window = earliest / window_us;
        if call.to_us < (window + 1) * window_us {
            *per_window.entry(window).or_default() += call.units;
        }
    }
    let mut scan = Scan::default();
    for (window, units) in per_window {
        let from_us = window * window_us;
        let to_us = from_us + window_us - 1;
        scan.offer_both(Interval {
            from_us,
            to_us,
            units,
            bound: limit,
            allowance: allowance(events, from_us, to_us),
        });
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::super::interval::Cause;
    use super::*;

    const W: u64 = 2_000_000;
    const T0: u64 = 1_700_000_000 * 1_000_000;

    fn at(offset_us: u64, units: u64) -> Call {
        Call {
            from_us: T0 + offset_us,
            to_us: T0 + offset_us + 500,
            units,
        }
    }

    #[test]
    fn exactly_the_limit_per_window_passes_and_one_more_fails() {
        // 10 per 2 s: 10 in one window and 10 in the next (20 across the boundary) pass.
        let mut calls: Vec<Call> = (0..10).map(|n| at(1_000_000 + n * 90_000, 1)).collect();
        calls.extend((0..5).map(|n| at(W + 2_000 + n * 1000, 2)));
        let scan = aligned(&calls, &[], 10, W, 1000);
        assert_eq!((scan.worst, scan.violation), (None, None));
        // One more unit in the second window.
        calls.push(at(W + 1_500_000, 1));
        let scan = aligned(&calls, &[], 10, W, 1000);
        let worst = scan.violation.unwrap();
        assert_eq!((worst.units, worst.bound, worst.beyond()), (11, 10, 1));
        assert_eq!(worst.from_us, T0 + W);
        // A fault overlapping that window allows a limit more; one elsewhere does not.
        let fault = |from_us| Event {
            from_us,
            to_us: from_us + 100,
            units: 10,
            cause: Cause::Fault(0),
        };
        let scan = aligned(&calls, &[fault(T0 + W + 10)], 10, W, 1000);
        assert_eq!(scan.violation, None);
        assert_eq!(scan.worst.unwrap().allowance, 10);
        let scan = aligned(&calls, &[fault(T0 + 10)], 10, W, 1000);
        assert!(scan.violation.is_some());
    }

    #[test]
    fn a_call_that_may_lie_in_either_window_counts_in_neither() {
        // Sent 0.5 ms after the boundary: the server's millisecond may date it before.
        let mut calls: Vec<Call> = (0..10).map(|n| at(W + 10_000 + n, 1)).collect();
        calls.push(Call {
            from_us: T0 + W + 500,
            to_us: T0 + W + 900,
            units: 1,
        });
        // Answered after the boundary.
        calls.push(Call {
            from_us: T0 + W - 300,
            to_us: T0 + W + 100,
            units: 1,
        });
        assert_eq!(aligned(&calls, &[], 10, W, 1000).worst, None);
    }
}
