//! Scenarios built by hand: the bound holds where it should, and each broken variant
//! produces a counterexample of exactly the predicted size.
#![allow(
    clippy::arithmetic_side_effects,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use redis_ratelimit_core::Algorithm;
use redis_ratelimit_core::regional::Why;
use redis_ratelimit_core::sliding_window::SlidingWindowAlgorithm;
use redis_ratelimit_core::window::WindowParams;
use redis_ratelimit_regions_model::check::{Bound, excess, span_limit};
use redis_ratelimit_regions_model::limit::GlobalLimit;
use redis_ratelimit_regions_model::net::Link;
use redis_ratelimit_regions_model::sim::{Bug, Outcome, RegionSpec, Scenario, T0_US, run};
use redis_ratelimit_regions_model::split::Mode;

const MS: i64 = 1000;

/// `calls` calls of one unit at `at_ms`.
fn burst(at_ms: i64, calls: usize) -> Vec<(i64, u64)> {
    vec![(at_ms * MS, 1); calls]
}

fn region(demand: Vec<(i64, u64)>, partitions: Vec<(i64, i64)>) -> RegionSpec {
    RegionSpec {
        weight: 1,
        drift_ppm: 0,
        offset_us: 0,
        link: Link {
            delay_us: 10 * MS,
            jitter_us: 0,
            loss_per_mille: 0,
            partitions,
        },
        demand,
    }
}

/// A token bucket of `capacity` at 10/s, all of it pooled (f = 0), P = 300 ms, a = 100 ms
/// (T = 400 ms), one-way delay 10 ms, agents asking for `k` units.
fn bucket(capacity: u64, mode: Mode, k: u64, regions: Vec<RegionSpec>) -> Scenario {
    Scenario {
        limit: GlobalLimit::TokenBucket {
            capacity,
            per_second: 10,
        },
        floor_percent: 0,
        mode,
        refresh_us: 300 * MS,
        margin_us: 100 * MS,
        rho_ppm: 0,
        lease_units: k,
        regions,
        wait: true,
        replication_us: MS,
        failovers: vec![],
        duration_us: 2000 * MS,
        give_back: false,
        hot_only: false,
        seed: 1,
        bug: Bug::default(),
    }
}

fn over(scenario: &Scenario) -> (u64, Outcome) {
    let outcome = run(scenario);
    (
        excess(scenario.limit.bound(), &outcome.log()).units,
        outcome,
    )
}

/// Carryover: a region spends its first lease (all of the full pool) just before the second
/// arrives, then the second (at 325 ms: what the pool refilled between the two grants, at 10 ms and
/// 310 ms: 300 ms × 10/s = 3 units) at once: 3 units over, within `min(2k, r × T) = 4`.
/// Pre-paid, the same schedule is held to the bound.
#[test]
fn without_the_pre_pay_the_refill_between_two_grants_is_over_admitted() {
    let demand = [burst(319, 20), burst(325, 20)].concat();
    let carryover = bucket(6, Mode::Carryover, 6, vec![region(demand.clone(), vec![])]);
    let (units, outcome) = over(&carryover);
    let predicted = 10 * 300 / 1000;
    assert_eq!(units, predicted, "{outcome:?}");
    let (two_k, refill_in_t) = (2 * 6, 10 * 400 / 1000);
    assert!(units <= u64::min(two_k, refill_in_t));

    let prepaid = bucket(6, Mode::PrePaid, 6, vec![region(demand, vec![])]);
    assert_eq!(prepaid.split().prepaid_units, 4);
    let (units, outcome) = over(&prepaid);
    assert_eq!(units, 0, "{outcome:?}");
    assert!(outcome.admissions.iter().all(|a| a.why == Why::Lease));
}

/// Pre-paid, with leases living 400 ms longer than T: the region is cut from home for the
/// second refresh, so its first lease (16 units at 10 ms) is still spent at 619 ms, and the
/// third lease (granted at 610 ms: the 6 units refilled in 600 ms) at 625 ms: 22 units where
/// a bucket of 20 allows 20. Predicted: the refill during the lease's life beyond T,
/// `⌊r × (610 − 10) ms⌋ − ⌈r × T⌉ = 6 − 4 = 2`. With leases of T, the same schedule holds.
#[test]
fn a_lease_outliving_t_over_admits_the_refill_of_its_extra_life() {
    let demand = [burst(619, 30), burst(625, 30)].concat();
    let cut = vec![(250 * MS, 350 * MS)];
    let mut outliving = bucket(20, Mode::PrePaid, 16, vec![region(demand, cut)]);
    outliving.bug.lease_outlives_us = 400 * MS;
    let (units, outcome) = over(&outliving);
    let predicted = 10 * 600 / 1000 - 10 * 400 / 1000;
    assert_eq!(units, predicted, "{outcome:?}");

    let mut correct = outliving.clone();
    correct.bug = Bug::default();
    let (units, outcome) = over(&correct);
    assert_eq!(units, 0, "{outcome:?}");
    assert!(outcome.home_unreachable > 0, "{outcome:?}");
}

/// A failover within the replication lag of a grant: with `WAIT` the grant is lost with its
/// reply (the region never spends it); without, region 0 spends its 9 units (the whole
/// pre-paid pool: 10 less ⌈10/s × 40 ms⌉) and home, having forgotten them, grants region 1
/// the same 9 again: 18 units in 20 ms where the bucket allows 10, 8 over (the lost grant less
/// the pre-pay).
#[test]
fn without_wait_a_failover_grants_the_same_units_twice() {
    let regions = |wait: bool| {
        let mut scenario = bucket(
            10,
            Mode::PrePaid,
            9,
            vec![region(burst(25, 10), vec![]), region(burst(45, 10), vec![])],
        );
        // Region 1's first request is lost, its second (at 20 ms) reaches home at 30 ms;
        // region 0 is cut from home after its first.
        scenario.regions[1].link.partitions = vec![(0, MS)];
        scenario.regions[0].link.partitions = vec![(15 * MS, 100 * MS)];
        scenario.refresh_us = 20 * MS;
        scenario.margin_us = 20 * MS;
        scenario.replication_us = 5 * MS;
        scenario.failovers = vec![12 * MS];
        scenario.wait = wait;
        scenario.duration_us = 50 * MS;
        scenario
    };
    let (units, outcome) = over(&regions(true));
    assert_eq!(units, 0, "{outcome:?}");
    assert_eq!(outcome.lost_grants, 1, "{outcome:?}");
    let (units, outcome) = over(&regions(false));
    assert_eq!(regions(false).split().prepaid_units, 1);
    assert_eq!(units, 9 - 1, "{outcome:?}");
}

/// A sliding log of 6 per 500 ms, all of it pooled, leased 6 at a time (T = 400 ms). The
/// region spends its first lease (6 units granted at 10 ms) at 315 ms, before the second
/// (empty) lease replaces it at 320 ms. Stamped at the grant in a pool window of `W`
/// (carryover), those entries leave the pool at 510 ms, so the third grant (610 ms) gives 6
/// more, spent at 625 ms: 12 units within 310 ms where the log allows 6, 6 over (the whole
/// pool twice in one window). Stamped at the lease's end (a pool window of `W + T`, the
/// pre-paid mode and the agent's), they count until 910 ms: the third grant is empty, 0 over.
#[test]
fn a_log_pool_stamped_at_the_grant_over_admits_and_one_stamped_at_the_lease_end_does_not() {
    let log = |mode: Mode| Scenario {
        limit: GlobalLimit::SlidingLog {
            limit: 6,
            window_us: 500_000,
        },
        duration_us: 1000 * MS,
        ..bucket(
            6,
            mode,
            6,
            vec![region([burst(315, 6), burst(625, 6)].concat(), vec![])],
        )
    };
    let (units, outcome) = over(&log(Mode::Carryover));
    assert_eq!(units, 6, "{outcome:?}");
    let (units, outcome) = over(&log(Mode::PrePaid));
    assert_eq!(units, 0, "{outcome:?}");
    assert_eq!(
        outcome.admissions.len(),
        6,
        "the first lease only: {outcome:?}"
    );
}

/// Core's own sliding window counter reaches its span bound exactly, and no further: `L`
/// units at the last µs of a window, then one-unit calls at the next window's offset `W − 2`
/// until denied, admit `L − ⌈2L/W⌉` more, `2L − ⌈2L/W⌉` in `W` consecutive µs. Limits above
/// `W/2` per µs make the rounding more than one unit (core's windows are at least 1 ms).
#[test]
fn cores_estimator_attains_its_span_bound_and_no_more() {
    for (limit, window_us) in [
        (6, 500_000),
        (1, 1000),
        (600, 1000),
        (1000, 1000),
        (2999, 1500),
    ] {
        let params = |cost| WindowParams::new(limit, window_us, cost).unwrap();
        let window = i64::try_from(window_us).unwrap();
        // Windows are aligned to the Unix epoch: start at one.
        let start_us = T0_US.div_euclid(window) * window;
        let first_us = start_us + window - 1;
        let full = SlidingWindowAlgorithm::evaluate(None, &params(limit), first_us);
        assert!(full.decision.allowed);
        let mut state = full.commit.unwrap().change;
        let second_us = start_us + 2 * window - 2;
        let mut log = vec![(first_us, limit)];
        for _ in 0..=limit {
            let call = SlidingWindowAlgorithm::evaluate(Some(&state), &params(1), second_us);
            let Some(commit) = call.commit else { break };
            state = commit.change;
            log.push((second_us, 1));
        }
        let admitted: u64 = log.iter().map(|(_, units)| units).sum();
        assert_eq!(
            admitted,
            span_limit(limit, window_us),
            "{limit} per {window_us} µs"
        );
        assert_eq!(admitted, 2 * limit - (2 * limit).div_ceil(window_us));
        let bound = Bound::Estimator { limit, window_us };
        assert_eq!(excess(bound, &log).units, 0);
        log.push((second_us, 1));
        assert_eq!(excess(bound, &log).units, 1, "one unit more is caught");
    }
}

/// A sliding window of 6 per 500 ms, all of it pooled, leased 6 at a time (T = 400 ms); the
/// region's first request is lost (a cut for 100 ms), so its first lease is granted at 310
/// ms, 190 ms before home's window ends. Leases that outlive that window (living their whole
/// T, to 700 ms) let the region spend those 6 units at 510 ms, in the next window, where the
/// pool, counting them as the previous window's at the weight of its elapsed time, grants 1
/// more at 610 ms (`⌊(6 × 500 − 6 × 390)/500⌋`) and 3 at 910 ms (`⌊(6 × 500 − 6 × 90 − 1 ×
/// 500)/500⌋`): 10 units in one aligned window where the estimator admits 6, 4 over (the
/// outliving lease's units plus the next window's grants, less L). Leases ending with their
/// window (at 490 ms) leave those 6 units unspent: 0 over.
#[test]
fn a_sliding_window_lease_outliving_its_home_window_over_admits() {
    let sliding = |bug: Bug| Scenario {
        limit: GlobalLimit::SlidingWindow {
            limit: 6,
            window_us: 500_000,
        },
        duration_us: 1000 * MS,
        bug,
        ..bucket(
            6,
            Mode::PrePaid,
            6,
            vec![region(
                [burst(510, 6), burst(625, 6), burst(925, 6)].concat(),
                vec![(0, 100 * MS)],
            )],
        )
    };
    let outliving = sliding(Bug {
        leases_outlive_windows: true,
        ..Bug::default()
    });
    let (units, outcome) = over(&outliving);
    let (limit, outliving_units, next_window_grants) = (6, 6, 1 + 3);
    assert_eq!(
        units,
        outliving_units + next_window_grants - limit,
        "{outcome:?}"
    );
    let found = outcome.excess(outliving.limit);
    assert_eq!(
        (found.from_us, found.to_us),
        (T0_US + 500 * MS, T0_US + 1000 * MS - 1)
    );

    let (units, outcome) = over(&sliding(Bug::default()));
    assert_eq!(units, 0, "{outcome:?}");
    let admitted: u64 = outcome.admissions.iter().map(|a| a.units).sum();
    assert_eq!(admitted, next_window_grants, "{outcome:?}");
}
