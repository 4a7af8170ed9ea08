//! What the checks work on and find: admitted calls with the instants that bracket their
//! decision, the events that allow over-admission over the intervals they overlap, and the
//! intervals found over a bound.

/// An admitted call: decided at an instant in `(from_us − margin, to_us]`, `units` charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub from_us: u64,
    pub to_us: u64,
    pub units: u64,
}

/// Why an interval may admit more than the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The fault at this index of the fault log lost writes on the limiter's primary.
    Fault(usize),
    /// This client's local fallback decided from its share.
    Episode(u32),
    /// Units claimed in leases and spent later (the whole run).
    Leases,
}

/// `units` more allowed over every interval that overlaps `[from_us, to_us]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub from_us: u64,
    pub to_us: u64,
    pub units: u64,
    pub cause: Cause,
}

/// Units admitted over `[from_us, to_us]`, the bound for that span and the allowance of the
/// events overlapping it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    pub from_us: u64,
    pub to_us: u64,
    pub units: u64,
    pub bound: u64,
    pub allowance: u64,
}

impl Interval {
    /// Units beyond the bound.
    pub fn excess(&self) -> u64 {
        self.units.saturating_sub(self.bound)
    }

    /// Units beyond the bound and the allowance (a broken promise when not 0).
    pub fn beyond(&self) -> u64 {
        self.excess().saturating_sub(self.allowance)
    }

    /// Whether `[from_us, to_us]` overlaps this interval.
    pub fn overlaps(&self, from_us: u64, to_us: u64) -> bool {
        from_us <= self.to_us && to_us >= self.from_us
    }
}

/// What one check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The interval furthest over the bound (allowance aside), if any is over it.
    pub worst: Option<Interval>,
    /// The interval furthest over the bound plus its allowance, if any is.
    pub violation: Option<Interval>,
    /// Intervals over the bound (for a span check, the worst ending at each call), to
    /// attribute excess to the faults they overlap.
    pub excesses: Vec<Interval>,
}

impl Scan {
    /// Takes an interval that may be over its bound (`worst`, `excesses`).
    pub fn offer(&mut self, interval: Interval) {
        if interval.excess() == 0 {
            return;
        }
        if self
            .worst
            .is_none_or(|worst| interval.excess() > worst.excess())
        {
            self.worst = Some(interval);
        }
        self.excesses.push(interval);
    }

    /// Takes an interval that may be over its bound plus allowance (`violation`).
    pub fn offer_violation(&mut self, interval: Interval) {
        if interval.beyond() > 0
            && self
                .violation
                .is_none_or(|worst| interval.beyond() > worst.beyond())
        {
            self.violation = Some(interval);
        }
    }

    /// Takes an interval for both.
    pub fn offer_both(&mut self, interval: Interval) {
        self.offer(interval);
        self.offer_violation(interval);
    }
}

/// The allowance of the events overlapping `[from_us, to_us]`.
pub fn allowance(events: &[Event], from_us: u64, to_us: u64) -> u64 {
    events
        .iter()
        .filter(|event| event.from_us <= to_us && event.to_us >= from_us)
        .map(|event| event.units)
        .sum()
}

/// An allowance that accrues with time: `units` per `per_us` of a [`Measure`] (for the
/// fallback, its episodes' time while some client was still deciding by the store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accrual {
    pub units: u64,
    pub per_us: u64,
    pub measure: Measure,
}

impl Accrual {
    /// What accrued over `[from_us, to_us]`, in whole units.
    pub fn over(&self, from_us: u64, to_us: u64) -> u64 {
        let time = self.measure.at(to_us) - self.measure.at(from_us).min(self.measure.at(to_us));
        let units = u128::from(self.units) * time / u128::from(self.per_us.max(1));
        u64::try_from(units).unwrap_or(u64::MAX)
    }
}

/// A non-decreasing, piecewise linear function of time: from each breakpoint on, it grows by
/// its slope per µs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Measure {
    /// `(instant, value there, slope after it)`, by instant.
    points: Vec<(u64, u128, u64)>,
}

impl Measure {
    /// The measure whose slope is `slope(n)` while `n` of `spans` overlap.
    pub fn of_overlaps(spans: &[(u64, u64)], slope: impl Fn(u64) -> u64) -> Measure {
        let mut changes: Vec<(u64, i64)> = spans
            .iter()
            .filter(|(from, to)| to > from)
            .flat_map(|&(from, to)| [(from, 1), (to, -1)])
            .collect();
        changes.sort_unstable();
        let mut points: Vec<(u64, u128, u64)> = Vec::new();
        let mut active = 0i64;
        let mut value = 0u128;
        for (at, change) in changes {
            if let Some(&(last_at, last_value, last_slope)) = points.last() {
                value = last_value + u128::from(last_slope) * u128::from(at - last_at);
            }
            active += change;
            let now_slope = slope(u64::try_from(active).unwrap_or(0));
            match points.last_mut() {
                Some(last) if last.0 == at => last.2 = now_slope,
                _ => points.push((at, value, now_slope)),
            }
        }
        Measure { points }
    }

    /// Its value at `at_us`.
    pub fn at(&self, at_us: u64) -> u128 {
        let index = self.points.partition_point(|point| point.0 <= at_us);
        match index.checked_sub(1).and_then(|i| self.points.get(i)) {
            None => 0,
            Some(&(from, value, slope)) => value + u128::from(slope) * u128::from(at_us - from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measure_counts_overlap_time_by_its_slope() {
        // Two spans overlapping over [5, 10]; slope 0 while both are active.
        let measure = Measure::of_overlaps(&[(0, 10), (5, 20)], |n| if n >= 2 { 0 } else { n });
        let values: Vec<u128> = [0, 5, 7, 10, 15, 20, 30]
            .iter()
            .map(|t| measure.at(*t))
            .collect();
        assert_eq!(values, [0, 5, 5, 5, 10, 15, 15]);
        let accrual = Accrual {
            units: 2,
            per_us: 5,
            measure,
        };
        assert_eq!(accrual.over(10, 20), 4);
        assert_eq!(accrual.over(0, 3), 1);
    }
}
