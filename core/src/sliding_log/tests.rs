//! Unit and property tests of the sliding log.

use super::*;
use crate::testing::{self, Driver, MS, SECOND, Step, T0_US, cost_of};
use crate::time::{MAX_WINDOW_US, MIN_WINDOW_US};
use proptest::prelude::*;

const DEFAULT_MAX_ENTRIES: u64 = 10_000;

fn params(limit: u64, window_us: i64, cost: u64) -> SlidingLogParams {
    SlidingLogParams::new(limit, window_us as u64, cost, MAX_STORED_ENTRIES).unwrap()
}

fn log_of(entries: &[i64]) -> SlidingLog {
    let as_of = entries.last().copied().unwrap_or(0);
    SlidingLog::from_entries(as_of, entries.len() as u64, entries.iter().copied()).unwrap()
}

fn is_sorted(log: &SlidingLog) -> bool {
    let entries: Vec<i64> = log.entries().collect();
    entries.windows(2).all(|pair| pair[0] <= pair[1])
}

fn within_memory_bound(log: &SlidingLog) -> bool {
    log.allocated_bytes() <= SlidingLog::HEADER_BYTES + 8 * (2 * log.len() + SLACK)
}

/// A log driven through a sequence of calls, as the glue would drive it.
type Key = Driver<SlidingLogAlgorithm>;

impl Driver<SlidingLogAlgorithm> {
    fn entries(&self) -> Vec<i64> {
        self.state
            .as_ref()
            .map_or(Vec::new(), |log| log.entries().collect())
    }
}

#[rustfmt::skip]
#[test]
fn admits_exactly_the_limit_per_sliding_window() {
    // limit 3 per second
    let p = params(3, SECOND, 1);
    let mut key = Key::default();
    let cases: &[testing::Reply] = &[
        // (now offset µs, allowed, remaining, retry_after_ms, reset_after_ms)
        (0,                 true,  2, 0,   1000),
        (200 * MS,          true,  1, 0,   1000),
        (400 * MS,          true,  0, 0,   1000),
        (400 * MS,          false, 0, 600, 1000),
        (999 * MS,          false, 0, 1,   401),
        (SECOND - 1,        false, 0, 1,   401),  // the first unit leaves at exactly +1 s
        (SECOND,            true,  0, 0,   1000),
        (SECOND + 100 * MS, false, 0, 100, 900),
        (SECOND + 400 * MS, true,  1, 0,   1000), // the units of +200 ms and +400 ms left
        (5 * SECOND,        true,  2, 0,   1000), // expired key: a fresh log
    ];
    testing::assert_replies(&mut key, &p, 3, cases);
}

#[rustfmt::skip]
#[test]
fn costly_calls_wait_for_enough_units_to_leave() {
    // limit 10 per 10 s
    let mut key = Key::default();
    let cases: &[(i64, u64, bool, u64, i64)] = &[
        // (now offset s, cost, allowed, remaining, retry_after_ms)
        (0, 4,  true,  6, 0),
        (1, 3,  true,  3, 0),
        (2, 3,  true,  0, 0),
        (3, 5,  false, 0, 8000),  // needs 5 to leave: the 4 of +0 s and the oldest of +1 s
        (3, 11, false, 0, -1),    // above the limit: never
        (10, 4, true,  0, 0),     // the 4 of +0 s left at +10 s: 6 in window, 4 fit
    ];
    for &(offset, cost, allowed, remaining, retry) in cases {
        let d = key.call(&params(10, 10 * SECOND, cost), T0_US + offset * SECOND);
        assert_eq!(
            (d.allowed, d.remaining, d.reply_fields()[2]),
            (allowed, remaining, retry),
            "at +{offset}s, cost {cost}"
        );
    }
    assert_eq!(key.state.as_ref().unwrap().len(), 10, "3 + 3 + 4 units, one entry each");
}

#[test]
fn cost_above_limit_is_never_admitted_and_writes_nothing() {
    for cost in [6, u64::MAX] {
        testing::assert_six_of_five_is_never_admitted::<SlidingLogAlgorithm>(&params(
            5, SECOND, cost,
        ));
    }
}

#[test]
fn a_missing_log_is_empty_and_expires_when_its_newest_unit_leaves() {
    let p = params(10, 2 * SECOND, 4);
    let evaluation = SlidingLogAlgorithm::evaluate(None, &p, T0_US);
    assert_eq!(evaluation.decision.reply_fields(), [1, 6, 0, 2000, 10]);
    let commit = evaluation.commit.unwrap();
    assert_eq!(commit.expires_at_ms, T0_US / MS + 2000);
    assert_eq!(
        (
            commit.change.at_us(),
            commit.change.expired(),
            commit.change.action()
        ),
        (T0_US, 0, SlidingLogAction::Admit { units: 4 })
    );
    let log = SlidingLogAlgorithm::create(commit.change);
    assert_eq!(log.entries().collect::<Vec<_>>(), vec![T0_US; 4]);
    assert_eq!(log.as_of_us(), T0_US);
}

#[test]
fn expiry_and_reset_round_up_to_the_millisecond() {
    let p = params(1, 1_500, 1); // a 1.5 ms window
    let now = T0_US + 250;
    let evaluation = SlidingLogAlgorithm::evaluate(None, &p, now);
    // The unit leaves at T0 + 1750 µs: the key may expire at T0 + 2 ms.
    assert_eq!(evaluation.commit.unwrap().expires_at_ms, T0_US / MS + 2);
    assert_eq!(evaluation.decision.reset_after_ms, 2);
}

#[test]
fn the_window_is_half_open() {
    let p = params(1, SECOND, 1);
    let log = log_of(&[T0_US]);
    let at = |now| {
        SlidingLogAlgorithm::evaluate(Some(&log), &p, now)
            .decision
            .allowed
    };
    assert!(!at(T0_US + SECOND - 1), "still in (now − W, now]");
    assert!(at(T0_US + SECOND), "gone at exactly t + W");
}

#[test]
fn lowering_the_limit_denies_until_enough_units_leave() {
    let mut key = Key::default();
    for i in 0..8 {
        assert!(
            key.call(&params(10, 10 * SECOND, 1), T0_US + i * SECOND)
                .allowed
        );
    }
    // 8 units at +0..+7 s; the limit drops to 5: 4 must leave for one more unit.
    let d = key.call(&params(5, 10 * SECOND, 1), T0_US + 8 * SECOND);
    assert_eq!(d.reply_fields(), [0, 0, 5000, 9000, 5]);
    let d = key.call(&params(5, 10 * SECOND, 1), T0_US + 13 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 0));
    // Raising it again counts the same stored units against the new limit.
    let d = key.call(&params(20, 10 * SECOND, 1), T0_US + 13 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 14));
}

#[test]
fn changing_the_window_reevaluates_the_stored_timestamps() {
    let mut key = Key::default();
    for i in 0..5 {
        assert!(
            key.call(&params(5, 10 * SECOND, 1), T0_US + i * SECOND)
                .allowed
        );
    }
    // With a 2 s window at +5 s, only the unit of +4 s is in the window (3 s, 5 s].
    let peek = SlidingLogAlgorithm::evaluate(
        key.state.as_ref(),
        &params(5, 2 * SECOND, 1),
        T0_US + 5 * SECOND,
    );
    assert_eq!(peek.decision.remaining, 3);
    assert_eq!(
        peek.commit.unwrap().change.expired(),
        4,
        "admitting would drop +0..+3 s"
    );
    // A peek writes nothing: the wide window still sees all five.
    let wide = SlidingLogAlgorithm::evaluate(
        key.state.as_ref(),
        &params(5, 10 * SECOND, 1),
        T0_US + 5 * SECOND,
    );
    assert!(!wide.decision.allowed);
    // Admitting under the narrow window forgets the old units for good.
    assert!(
        key.call(&params(5, 2 * SECOND, 1), T0_US + 5 * SECOND)
            .allowed
    );
    assert_eq!(key.entries(), vec![T0_US + 4 * SECOND, T0_US + 5 * SECOND]);
    let d = key.call(&params(5, 10 * SECOND, 1), T0_US + 5 * SECOND);
    assert_eq!((d.allowed, d.remaining), (true, 2));
    assert_eq!(
        key.expires_at_ms,
        Some((T0_US + 15 * SECOND) / MS),
        "follows the last window"
    );
}

#[test]
fn clock_going_backwards_neither_rewinds_nor_admits_more() {
    let p = params(2, 10 * SECOND, 1);
    let mut key = Key::default();
    assert!(key.call(&p, T0_US).allowed);
    assert!(key.call(&p, T0_US + 5 * SECOND).allowed);
    let stored = key.entries();
    // An hour back: every stored unit counts; retry is measured from the real clock.
    let d = key.call(&p, T0_US - 3600 * SECOND);
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    assert_eq!(d.retry, Retry::AfterMs(3_610_000));
    assert_eq!(d.reset_after_ms, 3_615_000);
    assert_eq!(key.entries(), stored, "a denied call writes nothing");
    // Behind the newest unit, an admitted call is recorded at it, not before it.
    let evaluation =
        SlidingLogAlgorithm::evaluate(key.state.as_ref(), &params(3, 10 * SECOND, 1), T0_US);
    assert_eq!(
        evaluation.commit.unwrap().change.at_us(),
        T0_US + 5 * SECOND
    );
    // Forward again: the unit of T0 leaves at exactly T0 + 10 s.
    let d = key.call(&p, T0_US + 10 * SECOND - 1);
    assert!(!d.allowed, "the unit of T0 is still in the window");
    let d = key.call(&p, T0_US + 20 * SECOND);
    assert!(d.allowed, "both units left");
    assert_eq!(key.entries(), vec![T0_US + 20 * SECOND]);
    // A refund removes that unit, but the log remembers it was at +20 s, where the units
    // it dropped had left the window: a clock stepping back to +12 s (where the dropped
    // unit of +5 s would still count) is decided, and recorded, at +20 s.
    let d = key.refund(&p, T0_US + 20 * SECOND);
    assert_eq!(d.reply_fields(), [1, 2, 0, 0, 2]);
    assert_eq!(key.state.as_ref().unwrap().as_of_us(), T0_US + 20 * SECOND);
    let d = key.call(&params(1, 10 * SECOND, 1), T0_US + 12 * SECOND);
    assert_eq!(
        d.reply_fields(),
        [1, 0, 0, 18_000, 1],
        "decided and recorded at +20 s"
    );
    assert_eq!(key.entries(), vec![T0_US + 20 * SECOND]);
}

#[test]
fn refund_gives_back_the_newest_units_in_the_window() {
    let p = params(10, 10 * SECOND, 3);
    let nothing = SlidingLogAlgorithm::refund(None, &p, T0_US);
    assert!(
        nothing.commit.is_none(),
        "a missing log is empty: nothing to give back"
    );
    assert_eq!(nothing.decision.reply_fields(), [0, 10, 0, 0, 10]);
    let mut key = Key::default();
    key.call(&p, T0_US); // 7 left
    key.call(&p, T0_US + SECOND); // 4 left
    key.call(&params(10, 10 * SECOND, 4), T0_US + 2 * SECOND); // 0 left
    let d = key.refund(&p, T0_US + 3 * SECOND);
    assert_eq!(d.reply_fields(), [1, 3, 0, 9000, 10]);
    assert_eq!(
        key.entries(),
        [
            vec![T0_US; 3],
            vec![T0_US + SECOND; 3],
            vec![T0_US + 2 * SECOND]
        ]
        .concat()
    );
    assert_eq!(key.expires_at_ms, Some((T0_US + 12 * SECOND) / MS));
    // After the first three units left, a refund of 5 only gives back the 4 in window.
    let d = key.refund(&params(10, 10 * SECOND, 5), T0_US + 10 * SECOND);
    assert_eq!(d.reply_fields(), [1, 10, 0, 0, 10]);
    assert!(key.entries().is_empty());
    assert_eq!(
        key.expires_at_ms,
        Some((T0_US + 10 * SECOND) / MS),
        "empty: may go now"
    );
    let again = SlidingLogAlgorithm::refund(key.state.as_ref(), &p, T0_US + 10 * SECOND);
    assert!(again.commit.is_none(), "already empty");
    assert!(!again.decision.allowed);
}

#[test]
fn refund_reports_when_a_call_of_that_cost_fits() {
    let mut key = Key::default();
    key.call(&params(5, 10 * SECOND, 5), T0_US);
    // Giving back 1 of the 5 units leaves room for one.
    let d = key.refund(&params(5, 10 * SECOND, 1), T0_US + SECOND);
    assert_eq!(d.reply_fields(), [1, 1, 0, 9000, 5]);
    let d = key.refund(&params(5, 10 * SECOND, 0), T0_US + SECOND);
    assert_eq!(d.remaining, 2, "a zero cost is read as 1");
    let cost_3 = SlidingLogAlgorithm::refund(
        key.state.as_ref(),
        &params(5, 10 * SECOND, 3),
        T0_US + SECOND,
    );
    assert_eq!(cost_3.decision.reply_fields(), [1, 5, 0, 0, 5]);
    let none_left = key.state.as_ref().map(|log| {
        SlidingLogAlgorithm::refund(Some(log), &params(1, 10 * SECOND, 2), T0_US + SECOND)
    });
    // Limit 1, 3 units in window, refund of 2: 1 unit stays, a cost-2 call never fits.
    assert_eq!(
        none_left.unwrap().decision.reply_fields(),
        [1, 0, -1, 9000, 1]
    );
}

#[test]
fn parameters_are_validated() {
    use SlidingLogParamError::*;
    let new = |limit, window, cost, max| SlidingLogParams::new(limit, window, cost, max);
    assert_eq!(new(1, 999, 1, 10), Err(WindowTooShort));
    assert!(new(1, MIN_WINDOW_US, 1, 10).is_ok());
    assert!(new(1, MAX_WINDOW_US, 1, 10).is_ok());
    assert_eq!(new(1, MAX_WINDOW_US + 1, 1, 10), Err(WindowTooLong));
    assert_eq!(new(1, u64::MAX, 1, 10), Err(WindowTooLong));
    assert_eq!(MAX_WINDOW_US, 3_155_760_000_000_000);
    assert!(new(10_000, SECOND as u64, 1, DEFAULT_MAX_ENTRIES).is_ok());
    assert_eq!(
        new(10_001, SECOND as u64, 1, DEFAULT_MAX_ENTRIES),
        Err(LimitAboveMaxEntries {
            max_entries: 10_000
        })
    );
    assert_eq!(
        new(MAX_STORED_ENTRIES + 1, SECOND as u64, 1, u64::MAX),
        Err(LimitAboveMaxEntries {
            max_entries: MAX_STORED_ENTRIES
        })
    );
    assert!(
        new(
            MAX_STORED_ENTRIES,
            SECOND as u64,
            u64::MAX,
            MAX_STORED_ENTRIES
        )
        .is_ok()
    );
    let p = new(0, SECOND as u64, 0, 0).unwrap();
    assert_eq!((p.limit(), p.window_us(), p.cost()), (1, 1_000_000, 1));
}

#[test]
fn changes_are_validated_when_decoded() {
    let admit = |expired, at_us, units| {
        SlidingLogChange::new(at_us, expired, SlidingLogAction::Admit { units })
    };
    let refund =
        |expired, units| SlidingLogChange::new(T0_US, expired, SlidingLogAction::Refund { units });
    let change = admit(3, T0_US, 2).unwrap();
    assert_eq!(
        (change.at_us(), change.expired(), change.action()),
        (T0_US, 3, SlidingLogAction::Admit { units: 2 })
    );
    assert!(admit(0, 0, 1).is_some());
    assert!(admit(10_000_000, MAX_NOW_US, 10_000_000).is_some());
    assert!(admit(0, -1, 1).is_none());
    assert!(admit(0, MAX_NOW_US + 1, 1).is_none());
    assert!(admit(0, T0_US, 0).is_none());
    assert!(admit(0, T0_US, 10_000_001).is_none());
    assert!(admit(10_000_001, T0_US, 1).is_none());
    assert!(refund(0, 1).is_some());
    assert!(refund(0, 0).is_none());
    assert!(refund(u32::MAX, 1).is_none());
    assert!(refund(0, u32::MAX).is_none());
    assert!(SlidingLogChange::new(-1, 0, SlidingLogAction::Refund { units: 1 }).is_none());
}

#[test]
fn decoding_refuses_logs_no_evaluation_produces() {
    let from = |len: u64, entries: &[i64]| {
        SlidingLog::from_entries(MAX_NOW_US, len, entries.iter().copied())
    };
    let log_as_of = |as_of: i64, entries: &[i64]| {
        SlidingLog::from_entries(as_of, entries.len() as u64, entries.iter().copied())
    };
    assert_eq!(log_as_of(0, &[]), Some(SlidingLog::default()));
    assert!(log_as_of(T0_US, &[T0_US - 1, T0_US]).is_some());
    assert!(
        log_as_of(T0_US, &[T0_US, T0_US + 1]).is_none(),
        "after as_of"
    );
    assert!(log_as_of(-1, &[]).is_none());
    assert!(log_as_of(MAX_NOW_US + 1, &[]).is_none());
    assert!(from(3, &[0, T0_US, T0_US]).is_some());
    assert!(from(3, &[0, MAX_NOW_US, MAX_NOW_US]).is_some());
    assert!(from(2, &[T0_US, T0_US - 1]).is_none(), "out of order");
    assert!(from(1, &[-1]).is_none(), "before 1970");
    assert!(from(1, &[MAX_NOW_US + 1]).is_none(), "beyond MAX_NOW_US");
    assert!(from(1, &[i64::MIN]).is_none());
    assert!(from(3, &[1, 2]).is_none(), "fewer than announced");
    assert!(from(1, &[1, 2]).is_none(), "more than announced");
    assert!(
        from(MAX_STORED_ENTRIES + 1, &[]).is_none(),
        "too many, before allocating"
    );
    assert!(from(u64::MAX, &[]).is_none());
    let log = from(2, &[5, 7]).unwrap();
    assert_eq!(
        log.allocated_bytes(),
        SlidingLog::HEADER_BYTES + 16,
        "reserved exactly"
    );
}

#[test]
fn the_state_is_small_and_eight_byte_aligned() {
    assert_eq!(std::mem::align_of::<SlidingLog>(), 8);
    const { assert!(SlidingLog::HEADER_BYTES <= 40) };
    assert_eq!(
        SlidingLog::default().allocated_bytes(),
        SlidingLog::HEADER_BYTES
    );
}

#[test]
fn huge_limits_cost_nothing_until_used() {
    let p = SlidingLogParams::new(
        MAX_STORED_ENTRIES,
        MAX_WINDOW_US,
        MAX_STORED_ENTRIES,
        MAX_STORED_ENTRIES,
    )
    .unwrap();
    let evaluation = SlidingLogAlgorithm::evaluate(None, &p, i64::MAX);
    assert!(evaluation.decision.allowed);
    let commit = evaluation.commit.unwrap();
    assert_eq!(
        (commit.change.at_us(), commit.change.action()),
        (MAX_NOW_US, SlidingLogAction::Admit { units: 10_000_000 })
    );
    assert_eq!(
        commit.expires_at_ms,
        ceil_div(MAX_NOW_US + MAX_WINDOW_US as i64, MS)
    );
    let small = log_of(&[MAX_NOW_US; 3]);
    let refund = SlidingLogAlgorithm::refund(Some(&small), &p, i64::MIN);
    assert_eq!(refund.decision.reply_fields()[..2], [1, 10_000_000]);
}

#[test]
fn apply_saturates_on_a_mismatched_log() {
    let mut log = log_of(&[T0_US, T0_US + 1]);
    let drop_all =
        SlidingLogChange::new(T0_US, 10, SlidingLogAction::Refund { units: 10 }).unwrap();
    SlidingLogAlgorithm::apply(&mut log, drop_all);
    assert!(log.is_empty());
    let mut log = log_of(&[T0_US, T0_US + SECOND]);
    let stale = SlidingLogChange::new(T0_US, 0, SlidingLogAction::Admit { units: 2 }).unwrap();
    SlidingLogAlgorithm::apply(&mut log, stale);
    assert_eq!(
        log.entries().collect::<Vec<_>>(),
        vec![T0_US, T0_US + SECOND, T0_US + SECOND, T0_US + SECOND],
        "an earlier instant is raised to the log's as_of"
    );
    assert_eq!(log.as_of_us(), T0_US + SECOND);
    let created = SlidingLogAlgorithm::create(
        SlidingLogChange::new(T0_US, 5, SlidingLogAction::Refund { units: 1 }).unwrap(),
    );
    assert!(created.is_empty());
    assert_eq!(created.as_of_us(), T0_US);
}

#[test]
fn capacity_shrinks_after_a_burst_expires() {
    let mut key = Key::default();
    let burst = params(1000, SECOND, 1000);
    assert!(key.call(&burst, T0_US).allowed);
    let big = key.state.as_ref().unwrap().allocated_bytes();
    assert!(big >= SlidingLog::HEADER_BYTES + 8 * 1000);
    assert!(key.call(&params(1000, SECOND, 1), T0_US + SECOND).allowed);
    let log = key.state.as_ref().unwrap();
    assert_eq!(log.len(), 1);
    assert!(log.allocated_bytes() <= SlidingLog::HEADER_BYTES + 8 * (2 + SLACK));
}

// ----- property tests -----

/// `a / b` rounded up, for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

/// An independent model: every admitted unit's timestamp in a `Vec`, scanned linearly.
#[derive(Default)]
struct Naive {
    log: Vec<i64>,
}

impl Naive {
    /// The instant a call at `now` is made at: with a backwards clock, the newest unit.
    fn at(&self, now: i64) -> i64 {
        self.log.iter().copied().fold(now, i64::max)
    }

    /// Units in the window `(at − window, at]`.
    fn used(&self, window: i64, now: i64) -> u64 {
        let at = self.at(now);
        self.log
            .iter()
            .filter(|&&t| at - window < t && t <= at)
            .count() as u64
    }

    fn admits(&self, limit: u64, window: i64, cost: u64, now: i64) -> bool {
        cost <= limit && self.used(window, now) + cost <= limit
    }

    fn call(&mut self, limit: u64, window: i64, cost: u64, now: i64) -> Decision {
        let used = self.used(window, now);
        let allowed = self.admits(limit, window, cost, now);
        let retry = if allowed {
            Retry::Now
        } else if cost > limit {
            Retry::Never
        } else {
            // The first whole millisecond at which the call would be admitted: only an
            // instant a unit leaves can change the answer, so try those.
            let first_ms = self
                .log
                .iter()
                .map(|&t| ceil_div((t + window - now).max(1), MS))
                .filter(|&ms| self.admits(limit, window, cost, now + ms * MS))
                .min()
                .unwrap();
            Retry::AfterMs(first_ms as u64)
        };
        let at = self.at(now);
        if allowed {
            self.log.extend(std::iter::repeat_n(at, cost as usize));
        }
        let reset = self
            .log
            .iter()
            .filter(|&&t| at - window < t)
            .map(|&t| ceil_div(t + window - now, MS))
            .max()
            .unwrap_or(0);
        Decision {
            allowed,
            remaining: if allowed {
                limit - used - cost
            } else {
                limit.saturating_sub(used)
            },
            retry,
            reset_after_ms: reset as u64,
            limit,
        }
    }
}

fn arb_params() -> impl Strategy<Value = (u64, i64)> {
    // (limit, window µs): tiny to large limits, 1 ms to minutes windows.
    prop_oneof![
        (1u64..5, 1_000i64..50_000),
        (1u64..20, 1_000i64..5_000_000),
        (1u64..200, 100_000i64..100_000_000),
    ]
}

/// Steps from T0 of calls given as (µs since the previous call, cost in ‰ of the limit).
fn steps((limit, window): (u64, i64), calls: &[(i64, u64)]) -> Vec<Step<SlidingLogParams>> {
    testing::steps(
        T0_US,
        calls.iter().map(|&(elapsed, per_mille)| {
            (elapsed, params(limit, window, cost_of(limit, per_mille)))
        }),
    )
}

/// Any decodable log: sorted timestamps, and an as_of at or after the newest.
fn arb_log() -> impl Strategy<Value = SlidingLog> {
    (
        prop::collection::vec(
            prop_oneof![0i64..=MAX_NOW_US, T0_US - 10 * SECOND..T0_US + 10 * SECOND],
            0..40,
        ),
        prop_oneof![Just(0i64), 0i64..20 * SECOND, 0i64..=MAX_NOW_US],
    )
        .prop_map(|(mut entries, later)| {
            entries.sort_unstable();
            let newest = entries.last().copied().unwrap_or(0);
            let as_of = newest.saturating_add(later).min(MAX_NOW_US);
            SlidingLog::from_entries(as_of, entries.len() as u64, entries).unwrap()
        })
}

proptest! {
    #[test]
    fn matches_the_naive_log((limit, window) in arb_params(), calls in testing::arb_calls_us()) {
        let mut key = Key::default();
        let mut model = Naive::default();
        for step in steps((limit, window), &calls) {
            let (cost, now) = (step.params.cost(), step.now_us);
            let decision = key.call(&step.params, now);
            prop_assert_eq!(decision, model.call(limit, window, cost, now));
        }
    }

    #[test]
    fn never_admits_more_than_the_limit_in_any_window(
        (limit, window) in arb_params(),
        calls in testing::arb_calls_us(),
    ) {
        let steps = steps((limit, window), &calls);
        let admitted = testing::admitted::<SlidingLogAlgorithm>(&steps, |p| p.cost());
        let densest = testing::densest(&admitted, window);
        prop_assert!(densest <= limit, "{} units within {} µs", densest, window);
    }

    #[test]
    fn waiting_retry_after_is_enough_and_necessary((limit, window) in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_retry_after_is_honest::<SlidingLogAlgorithm>(&steps((limit, window), &calls))?;
    }

    #[test]
    fn reset_after_and_expiry_are_when_the_log_is_empty(
        (limit, window) in arb_params(),
        calls in testing::arb_calls_us(),
        refunds in prop::collection::vec(prop::bool::weighted(0.25), 60),
    ) {
        // A call costing the whole limit is admitted exactly when the window is empty.
        let mut steps = steps((limit, window), &calls);
        for (step, refund) in steps.iter_mut().zip(refunds) {
            step.refund = refund;
        }
        testing::check_reset_and_expiry_are_when_unused::<SlidingLogAlgorithm>(&steps, &params(limit, window, limit))?;
    }

    #[test]
    fn grantable_is_exact((limit, window) in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_grantable_is_exact::<SlidingLogAlgorithm>(&steps((limit, window), &calls), |p| p.limit())?;
    }

    #[test]
    fn peeking_between_calls_changes_nothing((limit, window) in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_peeking_changes_nothing::<SlidingLogAlgorithm>(&steps((limit, window), &calls))?;
    }

    #[test]
    fn refunding_an_admitted_call_undoes_it((limit, window) in arb_params(), calls in testing::arb_calls_us()) {
        testing::check_refund_undoes_an_admission::<SlidingLogAlgorithm>(&steps((limit, window), &calls), |p| p.cost())?;
    }

    #[test]
    fn a_backwards_clock_never_admits_more(
        (limit, window) in arb_params(),
        calls in prop::collection::vec((testing::arb_clock_jump_us(), testing::arb_cost_per_mille(), any::<bool>()), 1..60),
    ) {
        // A call whose cost exceeds the limit is denied and reports limit − units in window.
        let probe = params(limit, window, limit + 1);
        let used = |state: Option<&SlidingLog>, at: i64| {
            limit - SlidingLogAlgorithm::evaluate(state, &probe, at).decision.remaining
        };
        let mut steps = steps((limit, window), &calls.iter().map(|&(step, per_mille, _)| (step, per_mille)).collect::<Vec<_>>());
        for (step, &(_, _, refund)) in steps.iter_mut().zip(&calls) {
            step.refund = refund;
        }
        // The log itself, not key expiry, is under test.
        let transitions = testing::check_earlier_clocks_never_see_more_room::<SlidingLogAlgorithm>(&steps)?;
        let mut recorded: Vec<(i64, u64)> = Vec::new();
        for transition in &transitions {
            let (p, now) = (&transition.step.params, transition.step.now_us);
            let state = transition.before.as_ref();
            let as_of = state.map(SlidingLog::as_of_us);
            // A later clock never sees less room than this one.
            let here = SlidingLogAlgorithm::evaluate(state, p, now).decision;
            for later in [now + 1, now + window / 2, as_of.unwrap_or(now).max(now) + 1] {
                let there = SlidingLogAlgorithm::evaluate(state, p, later).decision;
                prop_assert!(!here.allowed || there.allowed);
                prop_assert!(used(state, now) >= used(state, later));
            }
            // Behind the log's as_of, a call is decided as if made at as_of.
            if let Some(as_of) = as_of.filter(|&a| a > now) {
                prop_assert!(state.and_then(SlidingLog::newest_us).is_none_or(|n| n <= as_of));
                let at_as_of = SlidingLogAlgorithm::evaluate(state, p, as_of);
                let here = SlidingLogAlgorithm::evaluate(state, p, now);
                prop_assert_eq!(here.commit, at_as_of.commit);
                prop_assert_eq!((here.decision.allowed, here.decision.remaining), (at_as_of.decision.allowed, at_as_of.decision.remaining));
            }
            let evaluation = if transition.step.refund {
                SlidingLogAlgorithm::refund(state, p, now)
            } else {
                SlidingLogAlgorithm::evaluate(state, p, now)
            };
            if let Some(commit) = &evaluation.commit {
                let at_us = commit.change.at_us();
                prop_assert!(at_us >= now, "recorded no earlier than the clock");
                prop_assert!(as_of.is_none_or(|a| at_us >= a), "never before the log's as_of");
                match commit.change.action() {
                    SlidingLogAction::Admit { units } => {
                        recorded.push((at_us, u64::from(units)));
                    }
                    SlidingLogAction::Refund { units } => {
                        // The refunded units are the newest recorded ones.
                        let mut units = u64::from(units);
                        while units > 0 {
                            let last = recorded.last_mut().unwrap();
                            let taken = last.1.min(units);
                            last.1 -= taken;
                            units -= taken;
                            if last.1 == 0 {
                                recorded.pop();
                            }
                        }
                    }
                }
            }
            if let Some(log) = &transition.after {
                prop_assert!(is_sorted(log));
                let tail: Vec<i64> = recorded.iter().flat_map(|&(t, c)| std::iter::repeat_n(t, c as usize)).collect();
                prop_assert!(tail.ends_with(&log.entries().collect::<Vec<_>>()), "the log is the recorded units not yet dropped");
            }
            // Exact over the recorded instants: no (t − W, t] holds more than the limit.
            prop_assert!(testing::densest(&recorded, window) <= limit);
        }
    }

    #[test]
    fn decoding_round_trips_what_the_iterator_yields(log in arb_log()) {
        let entries: Vec<i64> = log.entries().collect();
        let decoded = SlidingLog::from_entries(log.as_of_us(), entries.len() as u64, entries.iter().copied());
        prop_assert_eq!(decoded.as_ref(), Some(&log));
        prop_assert_eq!(log.entries().rev().count(), log.len());
    }

    #[test]
    fn decoding_refuses_bad_input(entries in prop::collection::vec(any::<i64>(), 0..20), extra in 0u64..3) {
        let valid = entries.windows(2).all(|pair| pair[0] <= pair[1])
            && entries.iter().all(|t| (0..=MAX_NOW_US).contains(t));
        let len = entries.len() as u64;
        let decoded = SlidingLog::from_entries(MAX_NOW_US, len, entries.iter().copied());
        prop_assert_eq!(decoded.is_some(), valid);
        if extra > 0 {
            prop_assert!(SlidingLog::from_entries(MAX_NOW_US, len + extra, entries.iter().copied()).is_none());
            prop_assert!(len < extra || SlidingLog::from_entries(MAX_NOW_US, len - extra, entries.iter().copied()).is_none());
        }
        // And every timestamp must be at most as_of.
        if let Some(&newest) = entries.last().filter(|_| valid && !entries.is_empty()) {
            prop_assert!(SlidingLog::from_entries(newest, len, entries.iter().copied()).is_some());
            prop_assert!(newest == 0 || SlidingLog::from_entries(newest - 1, len, entries.iter().copied()).is_none());
        }
    }

    #[test]
    fn memory_stays_within_twice_the_entries(
        calls in prop::collection::vec(
            (0i64..3_000_000, 1u64..300, 1_000i64..2_000_000, 0u64..1200, 0u8..4),
            1..300,
        ),
    ) {
        // Random traffic with changing limits and windows, and refunds.
        let mut key = Key::default();
        let mut now = T0_US;
        for (elapsed, limit, window, per_mille, op) in calls {
            now += elapsed;
            let p = params(limit, window, cost_of(limit, per_mille));
            if op == 0 { key.refund(&p, now); } else { key.call(&p, now); }
            if let Some(log) = &key.state {
                prop_assert!(within_memory_bound(log), "{} bytes for {} entries", log.allocated_bytes(), log.len());
                prop_assert!(is_sorted(log));
                prop_assert!(log.len() <= 300);
            }
        }
    }

    #[test]
    fn identical_changes_on_identical_logs_give_identical_logs(
        log in arb_log(),
        expired in 0u32..50,
        at_us in 0i64..=MAX_NOW_US,
        units in 1u32..50,
        refund in any::<bool>(),
    ) {
        // Any valid change, even one that does not match the log, applies without
        // panicking, deterministically, keeping the invariants.
        let action = if refund {
            SlidingLogAction::Refund { units }
        } else {
            SlidingLogAction::Admit { units }
        };
        let change = SlidingLogChange::new(at_us, expired, action).unwrap();
        let (mut a, mut b) = (log.clone(), log.clone());
        SlidingLogAlgorithm::apply(&mut a, change);
        SlidingLogAlgorithm::apply(&mut b, change);
        prop_assert_eq!(&a, &b);
        prop_assert!(is_sorted(&a));
        prop_assert!(within_memory_bound(&a));
        prop_assert!(SlidingLog::from_entries(a.as_of_us(), a.len() as u64, a.entries()).is_some());
        prop_assert!(a.as_of_us() >= log.as_of_us().max(at_us));
    }

    #[test]
    fn extremes_never_panic(
        limit in 1u64..=MAX_STORED_ENTRIES,
        window in MIN_WINDOW_US..=MAX_WINDOW_US,
        cost in prop_oneof![Just(u64::MAX), Just(MAX_STORED_ENTRIES), 1u64..=u64::MAX, 1u64..100],
        now in testing::arb_extreme_now_us(),
        log in arb_log(),
    ) {
        let p = SlidingLogParams::new(limit, window, cost, MAX_STORED_ENTRIES).unwrap();
        let decodes = |change: &SlidingLogChange| {
            SlidingLogChange::new(change.at_us(), change.expired(), change.action()) == Some(*change)
        };
        let with_log = testing::check_extremes::<SlidingLogAlgorithm>(Some(&log), &p, now, limit, decodes)?;
        let without = testing::check_extremes::<SlidingLogAlgorithm>(None, &p, now, limit, decodes)?;
        for commit in with_log.into_iter().chain(without).filter_map(|evaluation| evaluation.commit) {
            let small = match commit.change.action() {
                SlidingLogAction::Admit { units } | SlidingLogAction::Refund { units } => units <= 1000,
            };
            if small {
                let mut after = log.clone();
                SlidingLogAlgorithm::apply(&mut after, commit.change);
                prop_assert!(is_sorted(&after));
                prop_assert!(SlidingLog::from_entries(after.as_of_us(), after.len() as u64, after.entries()).is_some());
            }
        }
    }
}
