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
    assert!(report.violations.is_empty(), "{:?}", report.violations);
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
    assert_eq!(worst, Some(excess), "{:?}", report.violations);
}

#[test]
fn a_token_bucket_keeps_capacity_plus_refill() {
    let tb = limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 2,
            per_s: 1,
        },
        Fallback::Closed,
    );
    // Two at once, then one a second: exactly the bucket.
    let mut log = vec![call("tb", 0, 1), call("tb", 1, 1)];
    log.extend((1..20).map(|s| call("tb", s * S, 1)));
    passes(&tb, &log);
    // One more half a second in.
    log.push(call("tb", S / 2, 1));
    fails(&tb, &log, 1);
}

#[test]
fn gcra_keeps_its_burst_plus_emission() {
    // A burst of 3, 2 a second.
    let gcra = limiter(
        "gcra",
        Shape::Gcra {
            max_burst: 2,
            count: 2,
            period_ms: 1000,
        },
        Fallback::Closed,
    );
    let mut log = vec![call("gcra", 0, 3)];
    log.extend((1..10).map(|n| call("gcra", n * S / 2, 1)));
    passes(&gcra, &log);
    log.push(call("gcra", S / 4, 1));
    fails(&gcra, &log, 1);
}

#[test]
fn a_fixed_window_keeps_its_limit_per_aligned_window() {
    let fixed = limiter(
        "fixed",
        Shape::FixedWindow {
            limit: 10,
            window_ms: 2000,
        },
        Fallback::Closed,
    );
    // 10 at the end of one window, 10 at the start of the next: 20 in 10 ms is allowed.
    let mut log: Vec<_> = (0..10)
        .map(|n| call("fixed", 2 * S - 8000 + n, 1))
        .collect();
    log.extend((0..5).map(|n| call("fixed", 2 * S + 1500 + n, 2)));
    passes(&fixed, &log);
    log.push(call("fixed", 3 * S, 1));
    fails(&fixed, &log, 1);
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
    let mut log: Vec<_> = (0..10)
        .map(|n| call("sliding", 2 * S - 5000 + n, 1))
        .collect();
    log.extend((0..9).map(|n| call("sliding", 2 * S + 2000 + n, 1)));
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
fn a_sliding_log_keeps_its_limit_in_any_span_under_its_window() {
    let log_limiter = limiter(
        "log",
        Shape::SlidingLog {
            limit: 3,
            window_ms: 1000,
        },
        Fallback::Closed,
    );
    // 3 within a few ms, then 3 more a window (plus the clock's margin) later: passes.
    let mut log: Vec<_> = (0..3).map(|n| call("log", n * 1000, 1)).collect();
    log.extend((0..3).map(|n| call("log", S + 4000 + n * 1000, 1)));
    passes(&log_limiter, &log);
    // A 4th within 0.9 s of the first three.
    log.push(call("log", 900_000, 1));
    fails(&log_limiter, &log, 1);
}

#[test]
fn in_flight_keeps_its_limit_of_holders() {
    let gate = limiter(
        "gate",
        Shape::Concurrency {
            limit: 2,
            ttl_ms: 5000,
        },
        Fallback::Closed,
    );
    let held = |offset_us: u64, release_after_us: u64| DecisionRecord {
        release_us: Some(T0 + offset_us + release_after_us),
        ..call("gate", offset_us, 1)
    };
    let mut log = vec![
        held(0, 100_000),
        held(10_000, 100_000),
        held(100_300, 50_000),
    ];
    passes(&gate, &log);
    log.push(held(50_000, 10_000));
    fails(&gate, &log, 1);
    // An admitted slot never released is reported.
    let report = verdict(&gate, &[call("gate", 0, 1)], &[]);
    assert_eq!(report.limiters_named(), ["gate"]);
}

#[test]
fn a_write_losing_fault_allows_its_partition_bound_only_where_it_overlaps() {
    let tb = limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 2,
            per_s: 1,
        },
        Fallback::Closed,
    );
    // Four within a millisecond: two too many.
    let log: Vec<_> = (0..4).map(|n| call("tb", 1000 + n, 1)).collect();
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
    let tb = limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 2,
            per_s: 1,
        },
        Fallback::Closed,
    );
    let mut slow = call("tb", 0, 1);
    slow.recv_us = slow.send_us + 2 * S;
    let report = verdict(&tb, &[slow], &[]);
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    assert_eq!(report.violations[0].limiter, None);
}

#[test]
fn the_table_shows_bound_allowance_and_excess() {
    let tb = limiter(
        "tb",
        Shape::TokenBucket {
            capacity: 2,
            per_s: 1,
        },
        Fallback::Closed,
    );
    let log: Vec<_> = (0..4).map(|n| call("tb", 1000 + n, 1)).collect();
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
