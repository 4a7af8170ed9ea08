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
