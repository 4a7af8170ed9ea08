//! The span checks, over every interval at once: at most `burst + ⌊units × Δ / per_us⌋` in
//! any span Δ (or at most `burst` in any span shorter than `max_span_us`), beyond the
//! allowance of the events the interval overlaps.
//!
//! An interval is `(a − margin, b]` with `a` a call's send instant and `b` a call's receive
//! instant; it certainly holds the calls sent at or after `a` and answered by `b`, and their
//! decisions lie less than `b − a + margin` apart. The events it overlaps are those that
//! began by `b`, less those that ended before `a − margin` (every one of which began by
//! `b`), so its allowance is `S(b) − T(a)`, plus what an [`Accrual`] gained between them,
//! `r × (G(b) − G(a))`: the score of an interval splits into a part of `a` and a part of
//! `b`. Sweeping `b` upward, a segment tree over the candidate `a`s holds
//! each one's part (the calls it holds so far, its `T(a)`, its share of the refill) with
//! range additions as calls are answered, and gives the best `a` for each `b` in O(log n):
//! every interval is checked in O(n log n), exactly.

use super::bounds::Check;
use super::interval::{Accrual, Call, Event, Interval, Scan};

/// Checks `calls` against a [`Check::Span`] (other checks find nothing here), beyond the
/// events' allowances and what `accrual` gained over each interval.
pub fn span(
    calls: &[Call],
    events: &[Event],
    accrual: Option<&Accrual>,
    check: Check,
    margin_us: u64,
) -> Scan {
    let Check::Span {
        units,
        per_us,
        max_span_us,
        ..
    } = check
    else {
        return Scan::default();
    };
    let mut scan = Scan::default();
    let mut starts: Vec<u64> = calls.iter().map(|call| call.from_us).collect();
    starts.sort_unstable();
    starts.dedup();
    if starts.is_empty() {
        return scan;
    }
    // T(a) at each candidate: the allowance of events ended before a − margin.
    let mut by_end: Vec<(u64, u64)> = events
        .iter()
        .map(|event| (event.to_us.saturating_add(margin_us), event.units))
        .collect();
    by_end.sort_unstable();
    let mut ended = 0u64;
    let mut next_end = 0usize;
    let ended_before: Vec<u64> = starts
        .iter()
        .map(|&start| {
            while let Some(&(end, units)) = by_end.get(next_end) {
                if end >= start {
                    break;
                }
                ended += units;
                next_end += 1;
            }
            ended
        })
        .collect();
    // Scores in units × per × accrual's per, so that both rates are exact integers: the
    // check's refill `units / per_us` and the accrual's `extra / extra_per`.
    let (extra, extra_per) = accrual.map_or((0, 1), |a| (a.units, a.per_us.max(1)));
    let scale = i128::from(per_us.max(1)) * i128::from(extra_per);
    let rate = i128::from(units) * i128::from(extra_per);
    let gain = i128::from(extra) * i128::from(per_us.max(1));
    let measure = |at: u64| -> i128 {
        accrual.map_or(0, |a| i128::try_from(a.measure.at(at)).unwrap_or(i128::MAX))
    };
    // A candidate's part of the score: what it holds, plus the refill it does not need
    // (rate × a), plus T(a) and the accrual up to a for the violations' tree.
    let plain: Vec<i128> = starts.iter().map(|&a| rate * i128::from(a)).collect();
    let allowed: Vec<i128> = plain
        .iter()
        .zip(&starts)
        .zip(&ended_before)
        .map(|((part, &a), ended)| part + i128::from(*ended) * scale + gain * measure(a))
        .collect();
    let mut without = MaxTree::new(&plain);
    let mut with = MaxTree::new(&allowed);

    let mut by_answer: Vec<&Call> = calls.iter().collect();
    by_answer.sort_unstable_by_key(|call| (call.to_us, call.from_us));
    let mut by_start: Vec<(u64, u64)> = events.iter().map(|e| (e.from_us, e.units)).collect();
    by_start.sort_unstable();
    let mut began = 0u64;
    let mut next_start = 0usize;
    for call in by_answer {
        let held = starts.partition_point(|&a| a <= call.from_us);
        let added = i128::from(call.units) * scale;
        without.add(0, held - 1, added);
        with.add(0, held - 1, added);
        let b = call.to_us;
        while let Some(&(start, units)) = by_start.get(next_start) {
            if start > b {
                break;
            }
            began += units;
            next_start += 1;
        }
        let high = starts.partition_point(|&a| a <= b) - 1;
        // A span under `max_span_us`: b − a + margin ≤ max_span.
        let low = max_span_us.map_or(0, |max_span| {
            starts.partition_point(|&a| a.saturating_add(max_span) < b.saturating_add(margin_us))
        });
        if low > high {
            continue;
        }
        let interval = |score: i128, index: usize, with_allowance: bool| {
            let a = starts[index];
            let ended = ended_before[index];
            let mut held = score - rate * i128::from(a);
            if with_allowance {
                held -= i128::from(ended) * scale + gain * measure(a);
            }
            Interval {
                from_us: a,
                to_us: b,
                units: u64::try_from(held / scale).unwrap_or(0),
                bound: check.bound(b - a + margin_us),
                // Every event ended before a began by b (events end after they begin).
                allowance: began.saturating_sub(ended)
                    + accrual.map_or(0, |accrual| accrual.over(a, b)),
            }
        };
        if let Some((score, index)) = without.max(low, high) {
            scan.offer(interval(score, index, false));
        }
        if let Some((score, index)) = with.max(low, high) {
            // Over the bound and the allowances, both rates counted exactly (the whole units
            // of each, printed, may add up to one less).
            let burst = i128::from(check.burst());
            let over = score
                - (burst + i128::from(began)) * scale
                - rate * i128::from(b + margin_us)
                - gain * measure(b);
            if over > 0 {
                scan.offer_violation(interval(score, index, true));
            }
        }
    }
    scan
}

/// Range addition and range maximum (with its position) over a fixed array. A node's
/// `pending` is added to its whole subtree; its `max` already includes it.
struct MaxTree {
    len: usize,
    max: Vec<i128>,
    at: Vec<usize>,
    pending: Vec<i128>,
}

impl MaxTree {
    fn new(values: &[i128]) -> MaxTree {
        let size = 4 * values.len().max(1);
        let mut tree = MaxTree {
            len: values.len(),
            max: vec![i128::MIN; size],
            at: vec![0; size],
            pending: vec![0; size],
        };
        if !values.is_empty() {
            tree.build(1, 0, values.len() - 1, values);
        }
        tree
    }

    fn build(&mut self, node: usize, low: usize, high: usize, values: &[i128]) {
        if low == high {
            self.max[node] = values[low];
            self.at[node] = low;
            return;
        }
        let middle = (low + high) / 2;
        self.build(2 * node, low, middle, values);
        self.build(2 * node + 1, middle + 1, high, values);
        self.pull(node);
    }

    fn pull(&mut self, node: usize) {
        let (left, right) = (2 * node, 2 * node + 1);
        let best = if self.max[left] >= self.max[right] {
            left
        } else {
            right
        };
        self.max[node] = self.max[best] + self.pending[node];
        self.at[node] = self.at[best];
    }

    /// Adds `delta` to positions `from..=to`.
    fn add(&mut self, from: usize, to: usize, delta: i128) {
        if self.len > 0 && from <= to {
            self.add_in(1, 0, self.len - 1, from, to, delta);
        }
    }

    fn add_in(
        &mut self,
        node: usize,
        low: usize,
        high: usize,
        from: usize,
        to: usize,
        delta: i128,
    ) {
        if to < low || high < from {
            return;
        }
        if from <= low && high <= to {
            self.max[node] += delta;
            self.pending[node] += delta;
            return;
        }
        let middle = (low + high) / 2;
        self.add_in(2 * node, low, middle, from, to, delta);
        self.add_in(2 * node + 1, middle + 1, high, from, to, delta);
        self.pull(node);
    }

    /// The largest value at positions `from..=to`, and its position.
    fn max(&self, from: usize, to: usize) -> Option<(i128, usize)> {
        if self.len == 0 || from > to {
            return None;
        }
        self.max_in(1, 0, self.len - 1, from, to)
    }

    fn max_in(
        &self,
        node: usize,
        low: usize,
        high: usize,
        from: usize,
        to: usize,
    ) -> Option<(i128, usize)> {
        if to < low || high < from {
            return None;
        }
        if from <= low && high <= to {
            return Some((self.max[node], self.at[node]));
        }
        let middle = (low + high) / 2;
        let left = self.max_in(2 * node, low, middle, from, to);
        let right = self.max_in(2 * node + 1, middle + 1, high, from, to);
        let best = match (left, right) {
            (Some(l), Some(r)) => Some(if l.0 >= r.0 { l } else { r }),
            (one, None) | (None, one) => one,
        };
        best.map(|(value, at)| (value + self.pending[node], at))
    }
}

#[cfg(test)]
mod tests {
    use super::super::interval::Cause;
    use super::*;

    fn calls(instants: &[(u64, u64, u64)]) -> Vec<Call> {
        instants
            .iter()
            .map(|&(from_us, to_us, units)| Call {
                from_us,
                to_us,
                units,
            })
            .collect()
    }

    /// The same check by brute force over every pair of instants.
    fn brute(calls: &[Call], events: &[Event], check: Check, margin: u64) -> (u64, u64) {
        let Check::Span { max_span_us, .. } = check else {
            panic!()
        };
        let (mut worst, mut beyond) = (0, 0);
        for a in calls.iter().map(|c| c.from_us) {
            for b in calls.iter().map(|c| c.to_us) {
                if b < a || max_span_us.is_some_and(|max| b - a + margin > max) {
                    continue;
                }
                let units: u64 = calls
                    .iter()
                    .filter(|c| c.from_us >= a && c.to_us <= b)
                    .map(|c| c.units)
                    .sum();
                let bound = check.bound(b - a + margin);
                let allowance =
                    super::super::interval::allowance(events, a.saturating_sub(margin), b);
                worst = worst.max(units.saturating_sub(bound));
                beyond = beyond.max(units.saturating_sub(bound + allowance));
            }
        }
        (worst, beyond)
    }

    #[test]
    fn an_accrual_allows_its_rate_over_its_measure() {
        // A burst of 1 and 1/s; one unit every half second for 2 s is twice the rate, which
        // an accrual of 1/s over those 2 s allows, exactly; a unit more is beyond it.
        let bucket = Check::Span {
            burst: 1,
            units: 1,
            per_us: 1_000_000,
            max_span_us: None,
        };
        let mut list = calls(&[
            (0, 10, 1),
            (500_000, 500_010, 1),
            (1_000_000, 1_000_010, 1),
            (1_500_000, 1_500_010, 1),
            (2_000_000, 2_000_010, 1),
        ]);
        assert!(span(&list, &[], None, bucket, 0).violation.is_some());
        let accrual = Accrual {
            units: 1,
            per_us: 1_000_000,
            measure: super::super::interval::Measure::of_overlaps(&[(0, 2_100_000)], |n| n),
        };
        let scan = span(&list, &[], Some(&accrual), bucket, 0);
        assert_eq!(scan.violation, None);
        assert_eq!(scan.worst.unwrap().excess(), 2);
        list.push(Call {
            from_us: 250_000,
            to_us: 250_010,
            units: 1,
        });
        let over = span(&list, &[], Some(&accrual), bucket, 0)
            .violation
            .unwrap();
        assert_eq!((over.units, over.bound, over.allowance), (3, 1, 0));
    }

    #[test]
    fn the_sweep_agrees_with_brute_force() {
        let bucket = Check::Span {
            burst: 3,
            units: 2,
            per_us: 1000,
            max_span_us: None,
        };
        let log = Check::Span {
            burst: 3,
            units: 0,
            per_us: 1,
            max_span_us: Some(1500),
        };
        let mut seed = 7u64;
        let mut next = |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for _round in 0..200 {
            let count = 1 + next(12);
            let mut list = Vec::new();
            for _ in 0..count {
                let from = next(3000);
                list.push((from, from + next(400), 1 + next(2)));
            }
            let from_us = next(3000);
            let events = vec![Event {
                from_us,
                to_us: from_us + next(800),
                units: next(3),
                cause: Cause::Leases,
            }];
            let list = calls(&list);
            for check in [bucket, log] {
                let scan = span(&list, &events, None, check, 100);
                let expected = brute(&list, &events, check, 100);
                let found = (
                    scan.worst.map_or(0, |w| w.excess()),
                    scan.violation.map_or(0, |v| v.beyond()),
                );
                assert_eq!(found, expected, "{check:?} {list:?} {events:?}");
            }
        }
    }
}
