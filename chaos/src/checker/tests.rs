//! The checker over synthetic logs: each algorithm's bound at its edge (exactly the bound
//! passes, one unit more fails and names the limiter), the allowances, the fallback modes.

use super::*;
use crate::record::FaultKind;

const T0: u64 = 1_700_000_000 * 1_000_000;
const S: u64 = 1_000_000;

fn settings() -> Settings {
    Settings {
        node_timeout_ms: 2000,
        clients: 3,
        timeout_ms: 250,
        margin_ms: 1000,
    }
}

fn limiter(name: &str, shape: Shape, fallback: Fallback) -> SoakLimiter {
    SoakLimiter {
        name: name.into(),
        shape,
        lease: None,
        fallback,
    }
}

/// An admitted call of `cost` sent `offset_us` after T0, answered 200 µs later.
fn call(name: &str, offset_us: u64, cost: u64) -> DecisionRecord {
    DecisionRecord {
        client: 0,
        limiter: name.into(),
        cost,
        allowed: true,
        source: Source::Store,
        send_us: T0 + offset_us,
        recv_us: T0 + offset_us + 200,
        release_us: None,
    }
}

fn fallback(client: u32, name: &str, offset_us: u64, allowed: bool) -> DecisionRecord {
    DecisionRecord {
        client,
        allowed,
        source: Source::Fallback,
        ..call(name, offset_us, 1)
    }
}

fn partition(affected: &[&str], from_us: u64, to_us: u64) -> FaultRecord {
    FaultRecord {
        kind: FaultKind::Partition,
        target: "10.0.0.11".into(),
        role: "primary".into(),
        start_us: T0 + from_us,
        end_us: T0 + to_us,
        detail: String::new(),
        affected: affected.iter().map(|name| name.to_string()).collect(),
        shard: affected.iter().map(|name| name.to_string()).collect(),
    }
}

/// Checks `log` for one limiter: the limiters the violations name, and the report.
fn verdict(limiter: &SoakLimiter, log: &[DecisionRecord], faults: &[FaultRecord]) -> Report {
    check(std::slice::from_ref(limiter), log, faults, settings())
}

fn passes(limiter: &SoakLimiter, log: &[DecisionRecord]) {
    let report = verdict(limiter, log, &[]);
    assert!(
        report.violations.is_empty(),
        "{}: {:?}",
        limiter.name,
        report.violations
    );
}

fn fails(limiter: &SoakLimiter, log: &[DecisionRecord], excess: u64) {
    let report = verdict(limiter, log, &[]);
    assert_eq!(report.limiters_named(), std::slice::from_ref(&limiter.name));
    let worst = report
        .rows
        .iter()
        .filter_map(|row| row.worst.as_ref())
        .map(|finding| finding.interval.excess())
        .max();
    assert_eq!(
        worst,
        Some(excess),
        "{}: {:?}",
        limiter.name,
        report.violations
    );
}

/// "tb": a token bucket of 2 refilled at 1 a second, closed when the store is out of reach.
fn bucket_of_2() -> SoakLimiter {
    limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 2,
            per_s: 1,
        },
        Fallback::Closed,
    )
}

/// `count` admitted calls of `cost` to `name`, the first `first_us` after T0, then one every
/// `every_us`.
fn calls(name: &str, count: u64, first_us: u64, every_us: u64, cost: u64) -> Vec<DecisionRecord> {
    (0..count)
        .map(|n| call(name, first_us + n * every_us, cost))
        .collect()
}

/// An in-flight call of `gate` admitted `offset_us` after T0 and released `held_us` later.
fn held(offset_us: u64, held_us: u64) -> DecisionRecord {
    DecisionRecord {
        release_us: Some(T0 + offset_us + held_us),
        ..call("gate", offset_us, 1)
    }
}

/// Each algorithm at its bound's edge: a log of exactly the bound passes; one call more
/// fails by one unit, naming the limiter (its name says which case failed).
#[rustfmt::skip]
#[test]
fn each_algorithm_passes_its_bound_exactly_and_fails_one_unit_more() {
    let cases: [(SoakLimiter, Vec<DecisionRecord>, DecisionRecord); 5] = [
        // A bucket of 2 at 1/s: two at once, then one a second; one more half a second in.
        (
            bucket_of_2(),
            [calls("tb", 2, 0, 1, 1), calls("tb", 19, S, S, 1)].concat(),
            call("tb", S / 2, 1),
        ),
        // GCRA, a burst of 3 and 2 a second: the burst, then one every half second; one
        // more a quarter second in.
        (
            limiter("gcra", Shape::Gcra { max_burst: 2, count: 2, period_ms: 1000 }, Fallback::Closed),
            [vec![call("gcra", 0, 3)], calls("gcra", 9, S / 2, S / 2, 1)].concat(),
            call("gcra", S / 4, 1),
        ),
        // A fixed window of 10 per 2 s keeps its limit per aligned window: 10 at the end of
        // one, 10 at the start of the next (20 in 10 ms) pass; one more in the second fails.
        (
            limiter("fixed", Shape::FixedWindow { limit: 10, window_ms: 2000 }, Fallback::Closed),
            [calls("fixed", 10, 2 * S - 8000, 1, 1), calls("fixed", 5, 2 * S + 1500, 1, 2)].concat(),
            call("fixed", 3 * S, 1),
        ),
        // A sliding log of 3 per second, in any span under its window: 3 within a few ms,
        // 3 more a window (plus the clock's margin) later; a 4th within 0.9 s of the first.
        (
            limiter("log", Shape::SlidingLog { limit: 3, window_ms: 1000 }, Fallback::Closed),
            [calls("log", 3, 0, 1000, 1), calls("log", 3, S + 4000, 1000, 1)].concat(),
            call("log", 900_000, 1),
        ),
        // In flight, a limit of 2 holders: two overlapping, a third once one left; a third
        // holder while two are in.
        (
            limiter("gate", Shape::Concurrency { limit: 2, ttl_ms: 5000 }, Fallback::Closed),
            vec![held(0, 100_000), held(10_000, 100_000), held(100_300, 50_000)],
            held(50_000, 10_000),
        ),
    ];
    for (limiter, mut log, one_more) in cases {
        passes(&limiter, &log);
        log.push(one_more);
        fails(&limiter, &log, 1);
    }
}

#[test]
fn a_sliding_window_keeps_its_limit_per_window_and_its_span_bound() {
    let sliding = limiter(
        "sliding",
        Shape::SlidingWindow {
            limit: 10,
            window_ms: 2000,
        },
        Fallback::Closed,
    );
    // 10 at the end of a window and 9 early in the next: 19 = 2 × 10 − 1 within 2 s.
    let mut log = [
        calls("sliding", 10, 2 * S - 5000, 1, 1),
        calls("sliding", 9, 2 * S + 2000, 1, 1),
    ]
    .concat();
    passes(&sliding, &log);
    // A 10th in the second window is within its aligned limit, but 20 within 2 s.
    log.push(call("sliding", 2 * S + 3000, 1));
    let report = verdict(&sliding, &log, &[]);
    assert_eq!(report.limiters_named(), ["sliding"]);
    let [aligned, span] = &report.rows[..] else {
        panic!("{:?}", report.rows)
    };
    assert!(aligned.worst.is_none());
    assert_eq!(span.worst.as_ref().unwrap().interval.excess(), 1);
    assert_eq!(span.check.describe(), "19 in any span under 2 s");
}

#[test]
fn an_in_flight_slot_never_released_is_reported() {
    let gate = limiter(
        "gate",
        Shape::Concurrency {
            limit: 2,
            ttl_ms: 5000,
        },
        Fallback::Closed,
    );
    let report = verdict(&gate, &[call("gate", 0, 1)], &[]);
    assert_eq!(report.limiters_named(), ["gate"]);
}

#[test]
fn a_write_losing_fault_allows_its_partition_bound_only_where_it_overlaps() {
    let tb = bucket_of_2();
    // Four within a millisecond: two too many.
    let log = calls("tb", 4, 1000, 1, 1);
    let fault = partition(&["tb"], 0, 5000);
    let report = verdict(&tb, &log, std::slice::from_ref(&fault));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let row = &report.rows[0];
    // 2 + 1/s × 3.5 s, rounded down.
    assert_eq!((row.per_fault, row.write_losing_faults), (5, 1));
    let worst = row.worst.as_ref().unwrap();
    assert_eq!((worst.interval.excess(), worst.interval.allowance), (2, 5));
    assert_eq!(worst.causes, [Cause::Fault(0)]);
    let figures = &report.kinds[&FaultKind::Partition];
    assert_eq!(figures.worst.as_ref().unwrap().1.excess(), 2);
    // Far from the calls, or on another limiter's primary, or losing no write: no allowance.
    let later = partition(&["tb"], 10 * S, 11 * S);
    let elsewhere = partition(&["other"], 0, 5000);
    let stall = FaultRecord {
        kind: FaultKind::Stall,
        ..fault
    };
    for fault in [later, elsewhere, stall] {
        let report = verdict(&tb, &log, &[fault]);
        assert_eq!(report.limiters_named(), ["tb"]);
    }
}

#[test]
fn a_local_fallback_keeps_its_share_and_the_fleet_its_allowance() {
    // 9 per 3 s windows, 3 clients: a share of 3 per window each.
    let fixed = limiter(
        "fixed",
        Shape::FixedWindow {
            limit: 9,
            window_ms: 3000,
        },
        Fallback::Local,
    );
    // The store admitted 9 early in the window; then each client's fallback its share of 3.
    let mut log: Vec<_> = (0..9)
        .map(|n| call("fixed", 100_000 + n * 1000, 1))
        .collect();
    for client in 0..3 {
        log.push(DecisionRecord {
            client,
            allowed: false,
            ..call("fixed", 150_000, 1)
        });
        log.extend((0..3).map(|n| fallback(client, "fixed", 200_000 + n * 1000, true)));
    }
    let report = verdict(&fixed, &log, &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let row = &report.rows[0];
    assert_eq!((row.per_episode, row.episodes), (3, 3));
    assert_eq!((row.fallback_units, row.largest_episode_units), (9, 3));
    let worst = row.worst.as_ref().unwrap();
    assert_eq!((worst.interval.excess(), worst.interval.allowance), (9, 9));
    // A fourth admission by client 2's fallback: beyond its share.
    log.push(fallback(2, "fixed", 210_000, true));
    let report = verdict(&fixed, &log, &[]);
    assert_eq!(report.limiters_named(), ["fixed"]);
    assert!(
        report.violations.iter().any(|v| v
            .what
            .contains("client 2's local fallback admitted 4 units")),
        "{:?}",
        report.violations
    );
    assert_eq!(report.rows[0].share_excess, 1);
}

#[test]
fn an_open_fallback_is_reported_and_a_closed_one_admits_nothing() {
    let shape = Shape::TokenBucket {
        capacity: 2,
        per_s: 1,
    };
    let mut log = vec![call("tb", 0, 2)];
    log.extend((0..5).map(|n| fallback(0, "tb", 1000 + n, true)));
    let report = verdict(&limiter("tb", shape, Fallback::Open), &log, &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let row = &report.rows[0];
    assert!(row.worst.is_none());
    assert_eq!(row.open_worst.as_ref().unwrap().interval.excess(), 5);
    let report = verdict(&limiter("tb", shape, Fallback::Closed), &log, &[]);
    assert_eq!(report.limiters_named(), ["tb"]);
}

#[test]
fn a_slow_answer_is_reported() {
    let tb = bucket_of_2();
    let mut slow = call("tb", 0, 1);
    slow.recv_us = slow.send_us + 2 * S;
    let report = verdict(&tb, &[slow], &[]);
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    assert_eq!(report.violations[0].limiter, None);
}

#[test]
fn the_table_shows_bound_allowance_and_excess() {
    let tb = bucket_of_2();
    let log = calls("tb", 4, 1000, 1, 1);
    let faults = [partition(&["tb"], 0, 5000)];
    let report = verdict(&tb, &log, &faults);
    let text = table::markdown(&report, &faults);
    assert!(
        text.contains("| tb | 2 + 1/s × span | 5 per fault (× 1) | 2 (4 in 0 ms from 0.0 s; allowance 5: partition of 10.0.0.11 (primary) at 0.0 s) | 4 (0) | closed |"),
        "{text}"
    );
    assert!(text.contains("| partition | 1 | 2 (tb; 5) |"), "{text}");
}

#[test]
fn a_client_cut_off_alone_may_add_its_share_of_the_rate_and_a_whole_fleet_may_not() {
    // 3 tokens, 3/s; a share of 1 token and 1/s per client.
    let tb = limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 3,
            per_s: 3,
        },
        Fallback::Local,
    );
    // Clients 0 and 1 take exactly the bucket from the store for 3 s (3 at once, then one
    // every third of a second); client 2, cut off alone, admits its share: 1, then 1/s.
    let store = |client: u64, offset_us: u64| DecisionRecord {
        client: client as u32,
        ..call("tb", offset_us, 1)
    };
    let mut log: Vec<DecisionRecord> = (0..3).map(|n| store(n % 2, 10 + n)).collect();
    log.extend((1..=9).map(|n| store(n % 2, n * S / 3)));
    log.extend((0..4).map(|n| fallback(2, "tb", 20 + n * S, true)));
    let report = verdict(&tb, &log, &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let worst = report.rows[0].worst.as_ref().unwrap().interval;
    // 4 beyond the bound: a share's token and 3 s of its rate, which the store's refill
    // (spent by the others) never paid back.
    assert_eq!((worst.excess(), worst.allowance), (4, 4));
    // One more unit by the store is beyond it.
    log.push(store(0, 2 * S + S / 6));
    assert_eq!(verdict(&tb, &log, &[]).limiters_named(), ["tb"]);

    // Every client cut off together: the store's refill meanwhile pays for their rate, and
    // only their shares' tokens are allowed (3 by the store and 3 by the fallbacks within
    // 0.1 s, or 15 in 3.1 s: 3 beyond the bound, either way).
    let mut log: Vec<DecisionRecord> = (0..3).map(|n| store(n, 10 + n)).collect();
    for client in 0..3 {
        log.extend((0..4).map(|n| fallback(client, "tb", S / 10 + n * S, true)));
    }
    let report = verdict(&tb, &log, &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let worst = report.rows[0].worst.as_ref().unwrap().interval;
    assert_eq!((worst.excess(), worst.allowance), (3, 3));
}
