//! Each algorithm's bound over the admission log, on home's clock: the largest excess over
//! any interval, and where it is.
//!
//! The formulas are the true bounds the chaos checker holds a single server to
//! (`chaos/src/checker/bounds.rs`): a region set must not admit more than one server would.

/// What the whole system may admit at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// `burst + ⌊units × Δ / per_ns⌋` over any span Δ (token bucket: its capacity, its rate
    /// per second; GCRA: `max_burst + 1`, one unit per emission interval).
    Refill { burst: u64, units: u64, per_ns: u64 },
    /// `limit` per window `[k × W, (k + 1) × W)` of Unix µs (fixed window).
    Aligned { limit: u64, window_us: u64 },
    /// `limit` in any span shorter than `window_us` (sliding log).
    Log { limit: u64, window_us: u64 },
    /// What core's sliding window counter of `limit` per `window_us` admits (its estimator,
    /// `core/src/sliding_window.rs`): `limit` per window `[k × W, (k + 1) × W)` of Unix µs,
    /// and [`span_limit`] in any span of `W` consecutive µs.
    Estimator { limit: u64, window_us: u64 },
    /// `limit` holders at any instant (in-flight: each admission holds `[at, until)`).
    Holders { limit: u64 },
}

/// The worst interval of a log: how far its admissions went beyond the bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Excess {
    /// Units admitted beyond the bound (0: the bound held everywhere).
    pub units: u64,
    /// The interval, `[from_us, to_us]` (Unix µs of home's clock).
    pub from_us: i64,
    pub to_us: i64,
}

/// The largest excess of `holds` (`(from_us, until_us)`, each one slot, released at
/// `until_us`) over `limit` holders at once.
pub fn holders_excess(limit: u64, holds: &[(i64, i64)]) -> Excess {
    // At one instant releases come before acquires: a slot freed at `t` may be taken at `t`.
    let mut events: Vec<(i64, bool)> = holds
        .iter()
        .flat_map(|(from, until)| [(*from, true), (*until, false)])
        .collect();
    events.sort_unstable();
    let mut worst = Excess::default();
    let mut held = 0u64;
    for (at_us, acquire) in events {
        if acquire {
            held += 1;
            if held > limit && held - limit > worst.units {
                worst = Excess {
                    units: held - limit,
                    from_us: at_us,
                    to_us: at_us,
                };
            }
        } else {
            held = held.saturating_sub(1);
        }
    }
    worst
}

/// The most a sliding window counter of `limit` per `window_us` admits in any span of `W`
/// consecutive µs: `2L − ⌈2L/W⌉` (and `L` for `W = 1`, where each µs is one aligned window;
/// core's windows are at least 1 ms, so the first form is the one that applies).
///
/// Derivation (core's arithmetic: a call at `e` µs into a window is admitted iff `p × (W −
/// e) + (c + cost) × W ≤ L × W`, exactly, no rounding): a span that is not one aligned window
/// starts `a` µs into window `k` (`1 ≤ a < W`) and holds at most the `n ≤ L` units of window
/// `k` there, plus window `k + 1`'s admissions up to its offset `a − 1 ≤ W − 2`. At the last
/// of those, `e ≤ W − 2`, so `c ≤ L − p × (W − e) / W ≤ L − 2n/W` with `p ≥ n`, and `c` is an
/// integer: at most `n + L − ⌈2n/W⌉`, non-decreasing in `n` for `W ≥ 2`, so `2L − ⌈2L/W⌉` at
/// `n = L`. Attained: `L` units at the last µs of a window, then `L − ⌈2L/W⌉` at the
/// next window's offset `W − 2` (the span `[k × W + W − 1, (k + 1) × W + W − 2]`).
pub fn span_limit(limit: u64, window_us: u64) -> u64 {
    let window = u128::from(window_us.max(1));
    let twice = 2 * u128::from(limit);
    let estimator = twice - twice.div_ceil(window);
    u64::try_from(estimator).unwrap_or(u64::MAX).max(limit)
}

/// The largest excess of `admissions` (`(at_us, units)`, sorted by instant) over `bound`
/// (for [`Bound::Holders`], see [`holders_excess`]).
pub fn excess(bound: Bound, admissions: &[(i64, u64)]) -> Excess {
    debug_assert!(admissions.windows(2).all(|pair| pair[0].0 <= pair[1].0));
    match bound {
        Bound::Refill {
            burst,
            units,
            per_ns,
        } => {
            let mut worst = Excess::default();
            for (i, (from_us, _)) in admissions.iter().enumerate() {
                let mut admitted = 0u64;
                for (to_us, admitted_units) in &admissions[i..] {
                    admitted += admitted_units;
                    let span_us = u128::try_from(to_us - from_us).unwrap_or(0);
                    let refill = u64::try_from(
                        u128::from(units) * span_us * 1000 / u128::from(per_ns.max(1)),
                    )
                    .unwrap_or(0);
                    offer(&mut worst, admitted, burst + refill, *from_us, *to_us);
                }
            }
            worst
        }
        Bound::Aligned { limit, window_us } => aligned_excess(limit, window_us, admissions),
        Bound::Holders { .. } => Excess::default(),
        Bound::Log { limit, window_us } => span_excess(limit, window_us, admissions),
        Bound::Estimator { limit, window_us } => {
            let aligned = aligned_excess(limit, window_us, admissions);
            let spans = span_excess(span_limit(limit, window_us), window_us, admissions);
            if spans.units > aligned.units {
                spans
            } else {
                aligned
            }
        }
    }
}

/// Keeps the interval `[from_us, to_us]` as `worst` if its `admitted` beyond `allowed` is
/// more than `worst`'s.
fn offer(worst: &mut Excess, admitted: u64, allowed: u64, from_us: i64, to_us: i64) {
    if admitted > allowed && admitted - allowed > worst.units {
        *worst = Excess {
            units: admitted - allowed,
            from_us,
            to_us,
        };
    }
}

/// The worst excess over `limit` per window `[k × W, (k + 1) × W)` of Unix µs.
fn aligned_excess(limit: u64, window_us: u64, admissions: &[(i64, u64)]) -> Excess {
    let mut worst = Excess::default();
    let window = i64::try_from(window_us).unwrap_or(i64::MAX);
    let mut start = 0;
    while start < admissions.len() {
        let index = admissions[start].0.div_euclid(window);
        let mut end = start;
        let mut admitted = 0;
        while end < admissions.len() && admissions[end].0.div_euclid(window) == index {
            admitted += admissions[end].1;
            end += 1;
        }
        offer(
            &mut worst,
            admitted,
            limit,
            index * window,
            (index + 1) * window - 1,
        );
        start = end;
    }
    worst
}

/// The worst excess over `limit` in any span of `window_us` consecutive µs (`[from, from +
/// W − 1]`: every span's worst starts at an admission).
fn span_excess(limit: u64, window_us: u64, admissions: &[(i64, u64)]) -> Excess {
    let mut worst = Excess::default();
    let window = i64::try_from(window_us).unwrap_or(i64::MAX);
    let mut end = 0;
    let mut admitted = 0;
    for (start, (from_us, _)) in admissions.iter().enumerate() {
        while end < admissions.len() && admissions[end].0 < from_us + window {
            admitted += admissions[end].1;
            end += 1;
        }
        offer(&mut worst, admitted, limit, *from_us, from_us + window - 1);
        admitted -= admissions[start].1;
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    #[test]
    fn a_bucket_is_held_over_every_span() {
        let bound = Bound::Refill {
            burst: 2,
            units: 1,
            per_ns: 1_000_000_000,
        };
        assert_eq!(excess(bound, &[(0, 2), (S, 1)]).units, 0);
        let over = excess(bound, &[(0, 2), (S - 1, 1)]);
        assert_eq!((over.units, over.from_us, over.to_us), (1, 0, S - 1));
        assert_eq!(excess(bound, &[(0, 1), (10 * S, 3), (10 * S, 1)]).units, 2);
    }

    #[test]
    fn a_fixed_window_is_held_per_aligned_window() {
        let bound = Bound::Aligned {
            limit: 2,
            window_us: 10,
        };
        assert_eq!(excess(bound, &[(8, 1), (9, 1), (10, 2)]).units, 0);
        assert_eq!(excess(bound, &[(10, 1), (15, 1), (19, 1)]).units, 1);
    }

    #[test]
    fn holders_are_counted_at_every_instant() {
        assert_eq!(holders_excess(1, &[(0, 5), (5, 9)]).units, 0);
        assert_eq!(holders_excess(1, &[(0, 5), (4, 9), (4, 6)]).units, 2);
    }

    #[test]
    fn a_log_is_held_in_every_span_shorter_than_its_window() {
        let bound = Bound::Log {
            limit: 2,
            window_us: 10,
        };
        assert_eq!(excess(bound, &[(0, 1), (9, 1), (10, 1), (19, 1)]).units, 0);
        assert_eq!(excess(bound, &[(0, 1), (9, 1), (10, 1), (18, 1)]).units, 1);
    }

    #[test]
    fn the_estimators_span_figure_is_two_limits_less_its_rounding() {
        assert_eq!(span_limit(6, 500_000), 11);
        assert_eq!(span_limit(6, 2), 6);
        assert_eq!(span_limit(6, 3), 8);
        assert_eq!(span_limit(6, 1), 6);
        assert_eq!(span_limit(0, 1000), 0);
        assert_eq!(span_limit(1000, 1000), 1998);
    }

    #[test]
    fn an_estimator_is_held_per_aligned_window_and_in_every_span() {
        let bound = Bound::Estimator {
            limit: 3,
            window_us: 10,
        };
        // 2 × 3 − ⌈6/10⌉ = 5 in any span of 10 µs, 3 per aligned window.
        let attained = [(9, 3), (18, 2)];
        assert_eq!(excess(bound, &attained).units, 0);
        let span_over = [(9, 3), (18, 3)];
        let found = excess(bound, &span_over);
        assert_eq!((found.units, found.from_us, found.to_us), (1, 9, 18));
        // The same units one µs later are in two spans: 3 at 9, 3 at 19 held.
        assert_eq!(excess(bound, &[(9, 3), (19, 3)]).units, 0);
        let window_over = [(10, 2), (19, 2)];
        let found = excess(bound, &window_over);
        assert_eq!((found.units, found.from_us, found.to_us), (1, 10, 19));
    }
}
