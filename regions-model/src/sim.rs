//! One run: a home with its pool (primary and replica), `R` regions with their floors and
//! leases, an agent per region, client demand, in virtual time.
//!
//! Virtual time is home's clock, in µs from the start of the run ([`T0_US`] on the Unix
//! scale core works on). A region reads its own clock: `T0 + offset + t × (1 + drift)`. The
//! agent of a region asks home for `k` units every `P` of its clock; home grants what its
//! pool has (a `PARTIAL` grant of core's own algorithm); the region spends the lease until
//! `sent + ⌊T × (1 − ρ)⌋` of its clock, `T = P + a`; when the next lease arrives the previous
//! one ends, its unspent units lapsing or (with give-backs) sent back. Home accepts a
//! give-back only before the lease's home expiry (`grant + T`).

use std::collections::{BTreeMap, VecDeque};

use redis_ratelimit_core::concurrency::{ConcurrencyParams, HolderId, MAX_STORED_HOLDERS};
use redis_ratelimit_core::engine;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Change, Limiter, LimiterRef, Quota};
use redis_ratelimit_core::regional::{self, Lease, Why};
use redis_ratelimit_core::{Commit, Evaluation};

use crate::check::{Bound, Excess, excess, holders_excess};
use crate::limit::GlobalLimit;
use crate::net::{Link, Rng};
use crate::split::{Mode, Split, split};

/// The Unix µs virtual time 0 stands for (2023-11-14: core computes on the Unix scale).
pub const T0_US: i64 = 1_700_000_000_000_000;

/// One region of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSpec {
    /// Its weight in the floors' split.
    pub weight: u64,
    /// Its clock's rate error, ppm (within `±rho_ppm` of the scenario).
    pub drift_ppm: i64,
    /// Its clock's offset from home's, µs.
    pub offset_us: i64,
    /// Its link to home.
    pub link: Link,
    /// Its clients' calls: `(at_us, cost)` of virtual time, sorted.
    pub demand: Vec<(i64, u64)>,
}

/// A deliberately broken variant, which the checker must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bug {
    /// A lease lives this much longer than `T` (local µs).
    pub lease_outlives_us: i64,
    /// An in-flight call may take a leased slot even if it ends after the lease.
    pub calls_outlive_leases: bool,
    /// Regions measure durations on their clocks as if they did not drift (no derating).
    pub ignores_drift: bool,
    /// A window pool's lease lives its whole `T`, past the end of the home window it was
    /// granted in.
    pub leases_outlive_windows: bool,
}

/// Everything one run depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub limit: GlobalLimit,
    /// The floors' fraction `f`, in percent.
    pub floor_percent: u64,
    pub mode: Mode,
    /// The refresh period `P`, µs.
    pub refresh_us: i64,
    /// The margin `a` (at least one round trip): `T = P + a`.
    pub margin_us: i64,
    /// The largest clock drift, ppm.
    pub rho_ppm: u64,
    /// Units an agent asks for per refresh (`k`).
    pub lease_units: u64,
    pub regions: Vec<RegionSpec>,
    /// Whether home acknowledges a grant only once its replica has it (`WAIT 1`).
    pub wait: bool,
    /// How long a write takes to reach home's replica, µs.
    pub replication_us: i64,
    /// Instants at which home fails over to its replica, losing what it had not received.
    pub failovers: Vec<i64>,
    /// The run ends here, µs.
    pub duration_us: i64,
    /// Whether a superseded lease's unspent units go back to the pool (else they lapse).
    pub give_back: bool,
    /// Whether an agent asks home only for a hot key: one its floor denied since the last
    /// refresh (else it asks every refresh).
    pub hot_only: bool,
    pub seed: u64,
    pub bug: Bug,
}

impl Scenario {
    /// `T = P + a`, µs.
    pub fn lease_us(&self) -> i64 {
        self.refresh_us + self.margin_us
    }

    /// The drift regions derate their durations for (0 with [`Bug::ignores_drift`]).
    pub fn derated_ppm(&self) -> u64 {
        if self.bug.ignores_drift {
            0
        } else {
            self.rho_ppm
        }
    }

    /// The quotas of this scenario's split.
    pub fn split(&self) -> Split {
        let weights: Vec<u64> = self.regions.iter().map(|region| region.weight).collect();
        split(
            self.limit,
            self.floor_percent,
            &weights,
            self.derated_ppm(),
            self.mode,
            u64::try_from(self.lease_us()).unwrap_or(0),
        )
    }
}

/// One admitted call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Home's clock, Unix µs.
    pub at_us: i64,
    pub units: u64,
    pub region: usize,
    /// `Why::Floor` or `Why::Lease`.
    pub why: Why,
    /// When an in-flight call releases its slot (home's clock, Unix µs; `at_us` for the
    /// other algorithms).
    pub until_us: i64,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every admission, in virtual time order.
    pub admissions: Vec<Admitted>,
    /// Denied calls, and of those how many said `home_unreachable`.
    pub denied: u64,
    pub home_unreachable: u64,
    /// Grants home made, units granted, leases that reached their region.
    pub grants: u64,
    pub granted_units: u64,
    pub leases_received: u64,
    /// Give-back units home refunded, and give-back units it dropped (late).
    pub given_back: u64,
    pub dropped_give_backs: u64,
    /// Grants a failover lost.
    pub lost_grants: u64,
}

impl Outcome {
    /// The run's worst excess over `limit`'s bound.
    pub fn excess(&self, limit: GlobalLimit) -> Excess {
        match limit.bound() {
            Bound::Holders { limit } => {
                let holds: Vec<(i64, i64)> = self
                    .admissions
                    .iter()
                    .map(|admitted| (admitted.at_us, admitted.until_us))
                    .collect();
                holders_excess(limit, &holds)
            }
            bound => excess(bound, &self.log()),
        }
    }

    /// The admission log as `(at_us, units)`, for [`crate::check::excess`].
    pub fn log(&self) -> Vec<(i64, u64)> {
        self.admissions
            .iter()
            .map(|admitted| (admitted.at_us, admitted.units))
            .collect()
    }
}

/// A key as the store keeps it: the limiter and its absolute expiry (Unix ms).
type Stored = Option<(Limiter, i64)>;

/// What a lease reply carries back to its region.
#[derive(Clone, Copy, Debug)]
struct Reply {
    region: usize,
    units: u64,
    /// When the region sent the request (its clock).
    sent_local_us: i64,
    /// How long the lease may live, home's µs (`T`, or less to the window's end).
    lifetime_us: i64,
    /// The lease's expiry on home's clock (Unix µs): give-backs are accepted before it.
    home_expiry_us: i64,
}

#[derive(Clone, Debug)]
enum Event {
    Demand {
        region: usize,
        cost: u64,
    },
    /// An in-flight call ends: its holder in the region's floor key is released.
    CallEnds {
        region: usize,
        holder: HolderId,
    },
    Tick {
        region: usize,
        n: i64,
    },
    RequestAtHome {
        region: usize,
        sent_local_us: i64,
    },
    ReplyAtRegion(Reply),
    GiveBackAtHome {
        units: u64,
        home_expiry_us: i64,
    },
    Replicated,
    Failover,
}

/// A write on its way to home's replica, and (with `WAIT`) the reply waiting for it.
struct Pending {
    at_us: i64,
    state: Stored,
    reply: Option<Reply>,
}

struct Region {
    floor: Stored,
    /// The live lease, its home expiry, and its number.
    lease: Option<(Lease, i64, u64)>,
    /// Whether the floor denied a call since the last refresh.
    hot: bool,
}

struct Run<'a> {
    scenario: &'a Scenario,
    split: Split,
    rng: Rng,
    queue: BTreeMap<(i64, u64), Event>,
    seq: u64,
    primary: Stored,
    replica: Stored,
    pending: VecDeque<Pending>,
    regions: Vec<Region>,
    /// Numbers leases, floor holders and pool holders.
    serial: u64,
    outcome: Outcome,
}

/// Runs `scenario` to its end.
pub fn run(scenario: &Scenario) -> Outcome {
    let mut run = Run {
        scenario,
        split: scenario.split(),
        rng: Rng::new(scenario.seed),
        queue: BTreeMap::new(),
        seq: 0,
        primary: None,
        replica: None,
        pending: VecDeque::new(),
        regions: scenario
            .regions
            .iter()
            .map(|_| Region {
                floor: None,
                lease: None,
                hot: false,
            })
            .collect(),
        serial: 0,
        outcome: Outcome::default(),
    };
    for (region, spec) in scenario.regions.iter().enumerate() {
        for (at_us, cost) in &spec.demand {
            run.at(
                *at_us,
                Event::Demand {
                    region,
                    cost: *cost,
                },
            );
        }
        run.at(0, Event::Tick { region, n: 0 });
    }
    for at_us in &scenario.failovers {
        run.at(*at_us, Event::Failover);
    }
    while let Some(((now_us, _), event)) = run.queue.pop_first() {
        if now_us > scenario.duration_us {
            break;
        }
        run.handle(now_us, event);
    }
    run.outcome
}

impl Run<'_> {
    fn at(&mut self, at_us: i64, event: Event) {
        self.seq += 1;
        self.queue.insert((at_us, self.seq), event);
    }

    /// Region `region`'s clock at virtual instant `now_us` (Unix µs).
    fn local_us(&self, region: usize, now_us: i64) -> i64 {
        let spec = &self.scenario.regions[region];
        T0_US + spec.offset_us + now_us + now_us * spec.drift_ppm / 1_000_000
    }

    fn handle(&mut self, now_us: i64, event: Event) {
        match event {
            Event::Demand { region, cost } => self.demand(now_us, region, cost),
            Event::CallEnds { region, holder } => self.end_call(now_us, region, holder),
            Event::Tick { region, n } => {
                let sent_local_us = self.local_us(region, now_us);
                let link = &self.scenario.regions[region].link;
                let asks = !self.scenario.hot_only || self.regions[region].hot;
                self.regions[region].hot = false;
                if asks && let Some(arrives) = link.deliver(now_us, &mut self.rng) {
                    self.at(
                        arrives,
                        Event::RequestAtHome {
                            region,
                            sent_local_us,
                        },
                    );
                }
                // The next tick at local elapsed (n + 1) × P: virtual (n + 1) × P / (1 + drift).
                let drift = self.scenario.regions[region].drift_ppm;
                let next_local = (n + 1) * self.scenario.refresh_us;
                let next = (next_local * 1_000_000 + 999_999 + drift) / (1_000_000 + drift);
                self.at(next.max(now_us + 1), Event::Tick { region, n: n + 1 });
            }
            Event::RequestAtHome {
                region,
                sent_local_us,
            } => self.grant(now_us, region, sent_local_us),
            Event::ReplyAtRegion(reply) => self.receive(now_us, reply),
            Event::GiveBackAtHome {
                units,
                home_expiry_us,
            } => self.give_back(now_us, units, home_expiry_us),
            Event::Replicated => {
                while self
                    .pending
                    .front()
                    .is_some_and(|write| write.at_us <= now_us)
                {
                    if let Some(write) = self.pending.pop_front() {
                        self.replica = write.state;
                        if let Some(reply) = write.reply {
                            self.send_reply(now_us, reply);
                        }
                    }
                }
            }
            Event::Failover => {
                let lost = self.pending.drain(..).filter(|write| write.reply.is_some());
                self.outcome.lost_grants += u64::try_from(lost.count()).unwrap_or(0);
                self.primary = self.replica.clone();
            }
        }
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// An in-flight call's hold, virtual µs: a cost of `c` holds `c` thirds of the longest.
    fn hold_us(&self, cost: u64) -> Option<i64> {
        let GlobalLimit::InFlight { hold_us, .. } = self.scenario.limit else {
            return None;
        };
        i64::try_from(hold_us * cost.clamp(1, 3) / 3).ok()
    }

    fn demand(&mut self, now_us: i64, region: usize, cost: u64) {
        let local_us = self.local_us(region, now_us);
        let hold_us = self.hold_us(cost);
        let rho = i64::try_from(self.scenario.derated_ppm()).unwrap_or(0);
        // An in-flight call takes one slot, its holder in the region's floor key living its
        // hold derated; the command (core's `admit_in_flight`) gives it a leased slot only if
        // that holder ends before the lease does.
        let (units, local_hold) = match hold_us {
            Some(hold) => (1, (hold * (1_000_000 + rho) + 999_999) / 1_000_000),
            None => (cost, 0),
        };
        let holder = hold_us.map(|_| {
            let serial = self.next_serial();
            HolderId::new(format!("r{region}c{serial}").as_bytes()).expect("a short holder id")
        });
        // An in-flight call's floor is the command's: the region's slots (none when its
        // share rounds to nothing), the call's holder and its derated hold as the ttl.
        let floor_quota = match &holder {
            Some(holder) => {
                let limit = match &self.split.floors[region] {
                    Some(Quota::Concurrency(params)) => params.limit(),
                    _ => 0,
                };
                let ttl_us = u64::try_from(local_hold).unwrap_or(0);
                let call = ConcurrencyParams::new(1, ttl_us, MAX_STORED_HOLDERS)
                    .expect("a hold within the ttls accepted")
                    .with_limit(limit)
                    .with_holder(*holder);
                Some(Quota::Concurrency(Box::new(call)))
            }
            None => self.split.floors[region].clone(),
        };
        let state = &self.regions[region];
        let floor_held = live(&state.floor, local_us);
        let floor = floor_quota.as_ref().map(|quota| (floor_held, quota));
        // The broken variant: the lease seems to last as long as the call, so a call taking a
        // leased slot while the lease lives may outlive it.
        let outlived = if self.scenario.bug.calls_outlive_leases {
            local_hold
        } else {
            0
        };
        let lease = state.lease.map(|(lease, _, _)| Lease {
            expires_at_us: lease.expires_at_us + outlived,
            ..lease
        });
        let Ok(admission) = regional::admit(floor, units, lease, local_us) else {
            panic!("a floor holds its own algorithm");
        };
        if admission.why != Why::Floor {
            self.regions[region].hot = true;
        }
        if !admission.allowed {
            self.outcome.denied += 1;
            if admission.why == Why::HomeUnreachable {
                self.outcome.home_unreachable += 1;
            }
            return;
        }
        let state = &mut self.regions[region];
        // The floor's commit, whichever admitted the call (an in-flight call's holder).
        if let Some(commit) = admission
            .floor
            .and_then(|granted| granted.evaluation.commit)
        {
            write(&mut state.floor, local_us, commit);
        }
        if let (Some(next), Some((held, _, _))) = (admission.lease, state.lease.as_mut()) {
            held.units = next.units;
        }
        let until_us = now_us + hold_us.unwrap_or(0);
        if let Some(holder) = holder {
            self.at(until_us, Event::CallEnds { region, holder });
        }
        self.outcome.admissions.push(Admitted {
            at_us: T0_US + now_us,
            units: cost,
            region,
            why: admission.why,
            until_us: T0_US + until_us,
        });
    }

    /// An in-flight call ends: its holder is released from the region's floor key (the
    /// slot, floor or leased, is free again).
    fn end_call(&mut self, now_us: i64, region: usize, holder: HolderId) {
        let local_us = self.local_us(region, now_us);
        let state = &mut self.regions[region];
        let held = live(&state.floor, local_us);
        let Ok(commit) = engine::release(held, &holder, local_us) else {
            panic!("a floor holds its own algorithm");
        };
        if let Some(commit) = commit {
            write(&mut state.floor, local_us, commit);
        }
    }

    /// Home grants what its pool has, up to `k`, and replies (after `WAIT` if set).
    fn grant(&mut self, now_us: i64, region: usize, sent_local_us: i64) {
        let Some(pool) = self.split.pool.clone() else {
            return;
        };
        let home_us = T0_US + now_us;
        let lease_us = self.scenario.lease_us();
        let window_us = self
            .split
            .window_us
            .filter(|_| !self.scenario.bug.leases_outlive_windows);
        let lifetime_us = match window_us {
            Some(window_us) => {
                let window = i64::try_from(window_us).unwrap_or(i64::MAX);
                lease_us.min((home_us.div_euclid(window) + 1) * window - home_us)
            }
            None => lease_us,
        };
        let units = match &pool {
            // Slots are leased as holders of the pool, one acquire each, living T, their ids
            // the region's and the slot's index (the agent's): a refresh renews them.
            Quota::Concurrency(params) => {
                let mut granted = 0;
                for index in 0..self.scenario.lease_units {
                    let holder = HolderId::new(format!("r{region}:{index}").as_bytes())
                        .expect("a short holder id");
                    let quota = Quota::Concurrency(Box::new(params.with_holder(holder)));
                    let held = live(&self.primary, home_us);
                    let Ok(acquired) = quota.evaluate(held, Grant::Whole, home_us) else {
                        panic!("the pool holds its own algorithm");
                    };
                    if let Some(commit) = acquired.evaluation.commit {
                        write(&mut self.primary, home_us, commit);
                        granted += 1;
                    }
                }
                granted
            }
            _ => {
                let quota = pool.with_cost(self.scenario.lease_units);
                let held = live(&self.primary, home_us);
                let Ok(granted) = quota.evaluate(held, Grant::Partial { min: 1 }, home_us) else {
                    panic!("the pool holds its own algorithm");
                };
                let Some(commit) = granted.evaluation.commit else {
                    return;
                };
                write(&mut self.primary, home_us, commit);
                granted.units
            }
        };
        if units == 0 {
            return;
        }
        self.outcome.grants += 1;
        self.outcome.granted_units += units;
        let reply = Reply {
            region,
            units,
            sent_local_us,
            lifetime_us,
            home_expiry_us: home_us + lifetime_us,
        };
        if self.scenario.wait {
            self.replicate(now_us, Some(reply));
        } else {
            self.replicate(now_us, None);
            self.send_reply(now_us, reply);
        }
    }

    fn replicate(&mut self, now_us: i64, reply: Option<Reply>) {
        let at_us = now_us + self.scenario.replication_us;
        self.pending.push_back(Pending {
            at_us,
            state: self.primary.clone(),
            reply,
        });
        self.at(at_us, Event::Replicated);
    }

    fn send_reply(&mut self, now_us: i64, reply: Reply) {
        let link = &self.scenario.regions[reply.region].link;
        if let Some(arrives) = link.deliver(now_us, &mut self.rng) {
            self.at(arrives, Event::ReplyAtRegion(reply));
        }
    }

    /// A lease reaches its region: it replaces the region's lease, whose unspent units go
    /// back home.
    fn receive(&mut self, now_us: i64, reply: Reply) {
        let rho = i64::try_from(self.scenario.derated_ppm()).unwrap_or(0);
        let local_us = self.local_us(reply.region, now_us);
        let lifetime_local = reply.lifetime_us * (1_000_000 - rho) / 1_000_000;
        let lease = Lease {
            units: reply.units,
            expires_at_us: reply.sent_local_us
                + lifetime_local
                + self.scenario.bug.lease_outlives_us,
        };
        if !lease.is_live(local_us) {
            return;
        }
        self.outcome.leases_received += 1;
        let serial = self.next_serial();
        let previous =
            self.regions[reply.region]
                .lease
                .replace((lease, reply.home_expiry_us, serial));
        if let Some((previous, home_expiry_us, _)) = previous {
            let units = previous.live_units(local_us);
            let link = &self.scenario.regions[reply.region].link;
            // Leased slots are holders at home: they lapse there with their ttl. A sliding
            // log's refund removes its newest entries, which may be a newer lease's (units
            // that region spent and that must count for `W`), not this lease's: its unspent
            // units lapse too.
            let refundable = !matches!(
                self.scenario.limit,
                GlobalLimit::InFlight { .. } | GlobalLimit::SlidingLog { .. }
            );
            if self.scenario.give_back
                && refundable
                && units > 0
                && let Some(arrives) = link.deliver(now_us, &mut self.rng)
            {
                self.at(
                    arrives,
                    Event::GiveBackAtHome {
                        units,
                        home_expiry_us,
                    },
                );
            }
        }
    }

    /// Home refunds a give-back to the pool, if it arrives while its lease could still live.
    fn give_back(&mut self, now_us: i64, units: u64, home_expiry_us: i64) {
        let home_us = T0_US + now_us;
        let Some(pool) = self.split.pool.clone() else {
            return;
        };
        if home_us >= home_expiry_us {
            self.outcome.dropped_give_backs += units;
            return;
        }
        let held = live(&self.primary, home_us);
        let Ok(refund) = pool.with_cost(units).refund(held, home_us) else {
            panic!("the pool holds its own algorithm");
        };
        let Evaluation {
            commit: Some(commit),
            ..
        } = refund
        else {
            return;
        };
        write(&mut self.primary, home_us, commit);
        self.outcome.given_back += units;
        self.replicate(now_us, None);
    }
}

/// The limiter of a stored key, unless it expired by `now_us`.
fn live(stored: &Stored, now_us: i64) -> Option<LimiterRef<'_>> {
    stored
        .as_ref()
        .filter(|(_, expires_at_ms)| *expires_at_ms * 1000 > now_us)
        .map(|(limiter, _)| limiter.as_ref())
}

/// Writes a commit as the module's store does: onto the live state, or a new one.
fn write(stored: &mut Stored, now_us: i64, commit: Commit<Change>) {
    let expires_at_ms = commit.expires_at_ms;
    match stored {
        Some((limiter, expiry)) if *expiry * 1000 > now_us => {
            if commit.change.apply(limiter.as_mut()).is_err() {
                panic!("a key holds its own algorithm");
            }
            *expiry = expires_at_ms;
        }
        _ => *stored = Some((commit.change.create(), expires_at_ms)),
    }
}
