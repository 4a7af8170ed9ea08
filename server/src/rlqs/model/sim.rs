//! One seeded schedule in virtual time: `instances` Envoys leased from one fixed-window
//! quota in a Redis-like store (core's own algorithm, written as the module writes it),
//! through the service's real [`lease::shape`] and [`Ledger`]; then the bound of
//! docs/rlqs.md checked over every span of whole windows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Limiter, LimiterRef, Quota};
use redis_ratelimit_core::window::WindowParams;
use redis_ratelimit_core::{Commit, Evaluation};

use super::envoy::Envoy;
use crate::rlqs::lease::{self, Shape};
use crate::rlqs::ledger::{DELIVERY_MARGIN, Ledger};
use redis_ratelimit_regions_model::net::Rng;

/// The store's clock at the model's 0 (whole seconds: windows align to it).
const T0_US: i64 = 1_800_000_000_000_000;
/// The limit's window.
const WINDOW_MS: u64 = 1_000;
/// Envoy 1.40's report cadence (hardcoded in `filter_persistence.cc`).
const REPORT_EVERY_MS: u64 = 5_000;
/// Demand arrives in ticks of this.
const TICK_MS: u64 = 10;
/// A schedule's length.
pub const RUN_MS: u64 = 40_000;

/// What the service does, or a planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The service as built.
    Honest,
    /// `max_tokens = G` (the refill `p × L` not subtracted).
    FullMaxTokens,
    /// Settlement refunds charged − reported allowed − refunded, ignoring what live leases
    /// may still admit.
    RefundIgnoringLiveLeases,
    /// Reports reach the service 1 to 4 s after they were built (beyond `DELIVERY_MARGIN`).
    ReportsLate,
    /// Envoy applies assignments 1 to 4 s after they were sent (beyond `DELIVERY_MARGIN`):
    /// a replaced lease lives on past when the service counts it over.
    AssignmentsLate,
}

/// The bound broken over a span: `windows` windows from `first_window`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excess {
    pub first_window: usize,
    pub windows: usize,
    pub admitted: i64,
    pub bound: i64,
}

/// What one schedule did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub admitted: u64,
    pub offered: u64,
    pub charged: u64,
    pub refunded: u64,
    pub quota_total: u64,
    pub spans_checked: u64,
    /// The worst span (most over its bound), if any is over.
    pub excess: Option<Excess>,
    /// The least any span's bound exceeds what it admitted by (negative: over).
    pub tightest_slack: i64,
    /// The service restarted during the schedule.
    pub restarted: bool,
}

/// What happens; renewals and reports carry the service's life (`epoch`) they belong to:
/// a restart ends every stream, and what was in flight on them is lost.
#[derive(Debug)]
enum Event {
    Renew(usize, u32),
    Apply(usize, Option<Shape>),
    BuildReport(usize),
    ReportArrives(usize, u64, u32),
    Restart,
}

/// The service's account of one instance's bucket.
#[derive(Debug)]
enum Account {
    Real(Ledger),
    Naive {
        charged: u64,
        reported: u64,
        refunded: u64,
    },
}

#[derive(Debug)]
struct Instance {
    envoy: Envoy,
    account: Account,
    /// The service's life its stream belongs to, and when that stream opened.
    epoch: u32,
    connected_ms: u64,
    join_ms: u64,
    leave_ms: u64,
    demand_per_tick: u64,
    demand_until_ms: u64,
}

type Stored = Option<(Limiter, i64)>;

/// Runs schedule `seed` under `variant`.
pub fn run(seed: u64, variant: Variant) -> Outcome {
    let mut rng = Rng::new(seed);
    let quota_per_window = 5 + rng.below(56);
    let life_seconds = 1 + rng.below(3);
    let ttl_ms = life_seconds * 1_000;
    let instance_count = 1 + rng.below(5) as usize;
    let quota = Quota::FixedWindow(
        WindowParams::new(quota_per_window, WINDOW_MS * 1_000, 1).unwrap_or_else(|error| {
            panic!("a valid fixed window: {error:?}");
        }),
    );
    let mut store: Stored = None;
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let margin_ms = u64::try_from(DELIVERY_MARGIN.as_millis()).unwrap_or(1_000);

    let mut events: BTreeMap<(u64, u64), Event> = BTreeMap::new();
    let mut sequence = 0_u64;
    let mut schedule = |events: &mut BTreeMap<(u64, u64), Event>, ms: u64, event: Event| {
        sequence += 1;
        events.insert((ms, sequence), event);
    };
    let mut instances = Vec::new();
    for index in 0..instance_count {
        let join_ms = if index == 0 { 0 } else { rng.below(RUN_MS / 2) };
        let leave_ms = if rng.below(3) == 0 {
            join_ms + 5_000 + rng.below(RUN_MS)
        } else {
            u64::MAX
        };
        let account = match variant {
            Variant::RefundIgnoringLiveLeases => Account::Naive {
                charged: 0,
                reported: 0,
                refunded: 0,
            },
            _ => Account::Real(Ledger::default()),
        };
        instances.push(Instance {
            envoy: Envoy::default(),
            account,
            epoch: 0,
            connected_ms: join_ms,
            join_ms,
            leave_ms,
            demand_per_tick: 0,
            demand_until_ms: join_ms,
        });
        schedule(&mut events, join_ms, Event::Renew(index, 0));
        schedule(
            &mut events,
            join_ms + rng.below(REPORT_EVERY_MS),
            Event::BuildReport(index),
        );
    }

    // A third of the schedules restart the service once: every stream ends, its ledgers
    // are lost (their leases lapse), each Envoy opens a new stream at its next report
    // while its last assignment lives on until its TTL.
    if rng.below(3) == 0 {
        schedule(
            &mut events,
            5_000 + rng.below(RUN_MS - 10_000),
            Event::Restart,
        );
    }

    let windows = usize::try_from(RUN_MS / WINDOW_MS).unwrap_or(0);
    let mut admitted = vec![0_i64; windows];
    let mut charged = vec![0_i64; windows];
    let mut refunded = vec![0_i64; windows];
    let mut outcome = Outcome {
        tightest_slack: i64::MAX,
        ..Outcome::default()
    };

    let mut now_ms = 0;
    while now_ms < RUN_MS {
        let window = usize::try_from(now_ms / WINDOW_MS).unwrap_or(0);
        let now_us = T0_US + i64::try_from(now_ms * 1_000).unwrap_or(0);
        while let Some(entry) = events.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            match entry.remove() {
                Event::Renew(index, epoch) => {
                    let instance = &mut instances[index];
                    if now_ms >= instance.leave_ms || epoch != instance.epoch {
                        continue;
                    }
                    let asked = 1 + rng.below(quota_per_window * life_seconds);
                    let granted = charge(&mut store, &quota, asked, now_us);
                    charged[window] += i64::try_from(granted).unwrap_or(0);
                    outcome.charged += granted;
                    let mut shape = lease::shape(granted, life_seconds);
                    if variant == Variant::FullMaxTokens {
                        shape = shape.map(|shape| Shape {
                            max_tokens: u32::try_from(granted).unwrap_or(u32::MAX),
                            ..shape
                        });
                    }
                    match &mut instance.account {
                        Account::Real(ledger) => ledger.leased(granted, shape, at(now_ms)),
                        Account::Naive { charged, .. } => *charged += granted,
                    }
                    let apply_ms = match variant {
                        Variant::AssignmentsLate => now_ms + margin_ms + rng.below(3 * margin_ms),
                        _ => now_ms + rng.below(margin_ms),
                    };
                    schedule(&mut events, apply_ms, Event::Apply(index, shape));
                    schedule(&mut events, now_ms + ttl_ms / 2, Event::Renew(index, epoch));
                }
                Event::Apply(index, shape) => {
                    instances[index].envoy.apply(shape, now_ms, life_seconds);
                }
                Event::Restart => {
                    outcome.restarted = true;
                    for (index, instance) in instances.iter_mut().enumerate() {
                        instance.epoch += 1;
                        instance.account = match instance.account {
                            Account::Real(_) => Account::Real(Ledger::default()),
                            Account::Naive { .. } => Account::Naive {
                                charged: 0,
                                reported: 0,
                                refunded: 0,
                            },
                        };
                        instance.connected_ms =
                            now_ms.max(instance.join_ms) + rng.below(REPORT_EVERY_MS);
                        schedule(
                            &mut events,
                            instance.connected_ms,
                            Event::Renew(index, instance.epoch),
                        );
                    }
                }
                Event::BuildReport(index) => {
                    let instance = &mut instances[index];
                    let allowed = instance.envoy.report();
                    let (epoch, connected) = (instance.epoch, now_ms >= instance.connected_ms);
                    let delay_ms = match variant {
                        Variant::ReportsLate => margin_ms + rng.below(3 * margin_ms),
                        _ => rng.below(margin_ms),
                    };
                    // No stream yet after a restart: the report is lost (its requests
                    // are never reported: the riskier case for refunds).
                    if connected {
                        schedule(
                            &mut events,
                            now_ms + delay_ms,
                            Event::ReportArrives(index, allowed, epoch),
                        );
                    }
                    schedule(
                        &mut events,
                        now_ms + REPORT_EVERY_MS,
                        Event::BuildReport(index),
                    );
                }
                Event::ReportArrives(index, allowed, epoch) => {
                    let instance = &mut instances[index];
                    // A stream that ended settles nothing: its tokens lapse.
                    if now_ms >= instance.leave_ms || epoch != instance.epoch {
                        continue;
                    }
                    let refund = match &mut instance.account {
                        Account::Real(ledger) => ledger.reported(allowed, at(now_ms), life_seconds),
                        Account::Naive {
                            charged,
                            reported,
                            refunded,
                        } => {
                            *reported += allowed;
                            let refund = charged.saturating_sub(*reported + *refunded);
                            *refunded += refund;
                            refund
                        }
                    };
                    if refund > 0 {
                        give_back(&mut store, &quota, refund, now_us);
                        refunded[window] += i64::try_from(refund).unwrap_or(0);
                        outcome.refunded += refund;
                    }
                }
            }
        }
        for instance in &mut instances {
            if now_ms < instance.join_ms {
                continue;
            }
            if now_ms >= instance.demand_until_ms {
                // Idle, a trickle, about the quota, or a burst many times it.
                instance.demand_per_tick = match rng.below(4) {
                    0 => 0,
                    1 => rng.below(2),
                    2 => rng.below(quota_per_window / 50 + 2),
                    _ => rng.below(quota_per_window / 5 + 5),
                };
                instance.demand_until_ms = now_ms + 500 + rng.below(6_000);
            }
            let allowed = instance.envoy.requests(instance.demand_per_tick, now_ms);
            outcome.offered += instance.demand_per_tick;
            outcome.admitted += allowed;
            admitted[window] += i64::try_from(allowed).unwrap_or(0);
        }
        now_ms += TICK_MS;
    }

    outcome.quota_total = quota_per_window * RUN_MS / WINDOW_MS;
    let quota_i64 = i64::try_from(quota_per_window).unwrap_or(i64::MAX);
    // Tokens charged and not yet settled (charged − refunded − admitted) at each window's start.
    let mut outstanding = vec![0_i64; windows + 1];
    for window in 0..windows {
        outstanding[window + 1] =
            outstanding[window] + charged[window] - refunded[window] - admitted[window];
    }
    for (first, outstanding_at_start) in outstanding.iter().take(windows).enumerate() {
        let mut admitted_in_span = 0;
        for (offset, admitted_in_window) in admitted[first..].iter().enumerate() {
            admitted_in_span += admitted_in_window;
            let spanned = i64::try_from(offset + 1).unwrap_or(i64::MAX);
            let bound = spanned * quota_i64 + outstanding_at_start;
            outcome.spans_checked += 1;
            let over = admitted_in_span - bound;
            outcome.tightest_slack = outcome.tightest_slack.min(-over);
            let worst = outcome
                .excess
                .as_ref()
                .map_or(0, |excess| excess.admitted - excess.bound);
            if over > worst {
                outcome.excess = Some(Excess {
                    first_window: first,
                    windows: offset + 1,
                    admitted: admitted_in_span,
                    bound,
                });
            }
        }
    }
    outcome
}

/// Charges up to `asked` tokens (`PARTIAL MIN 1`): the tokens granted.
fn charge(store: &mut Stored, quota: &Quota, asked: u64, now_us: i64) -> u64 {
    let Ok(granted) =
        quota
            .with_cost(asked)
            .evaluate(live(store, now_us), Grant::Partial { min: 1 }, now_us)
    else {
        panic!("the key holds a fixed window");
    };
    if let Some(commit) = granted.evaluation.commit {
        write(store, now_us, commit);
    }
    granted.units
}

/// Refunds `units` (`RL.REFUND`).
fn give_back(store: &mut Stored, quota: &Quota, units: u64, now_us: i64) {
    let Ok(refund) = quota.with_cost(units).refund(live(store, now_us), now_us) else {
        panic!("the key holds a fixed window");
    };
    if let Evaluation {
        commit: Some(commit),
        ..
    } = refund
    {
        write(store, now_us, commit);
    }
}

/// The limiter of the key, unless it expired by `now_us`.
fn live(stored: &Stored, now_us: i64) -> Option<LimiterRef<'_>> {
    stored
        .as_ref()
        .filter(|(_, expires_at_ms)| *expires_at_ms * 1000 > now_us)
        .map(|(limiter, _)| limiter.as_ref())
}

/// Writes a commit as the module's store does: onto the live state, or a new one.
fn write(stored: &mut Stored, now_us: i64, commit: Commit<redis_ratelimit_core::kinds::Change>) {
    let expires_at_ms = commit.expires_at_ms;
    match stored {
        Some((limiter, expiry)) if *expiry * 1000 > now_us => {
            if commit.change.apply(limiter.as_mut()).is_err() {
                panic!("the key holds a fixed window");
            }
            *expiry = expires_at_ms;
        }
        _ => *stored = Some((commit.change.create(), expires_at_ms)),
    }
}
