//! Golden vectors of the pure core, for the Python client's local fallback to replay.
//!
//! ```text
//! cargo run -p redis-ratelimit-core --example golden -- OUT.jsonl [SEED] [CASES]
//! ```
//!
//! Writes one JSON object a line: exact decimal parsing (`dec`), GCRA parameters (`gp`), and
//! for each algorithm traces of calls on a map of keys kept exactly as the Rust client's
//! local limits keep them (`LocalLimits`: a key whose expiry has passed is missing, a
//! limiter of another kind counts as missing and is replaced, an emptied in-flight limit is
//! deleted), each call decided by the core's engine: whole and partial acquires over one or
//! several limits (weights, mixed kinds), refunds, `grantable`, and redis-cell's
//! `CL.THROTTLE` reply. Every line carries its inputs and the core's outputs and the states
//! after it, so a port of the core that replays the file with zero differences decides
//! exactly as the module and the Rust client do. Clocks step forward, back, by years and
//! beyond the core's range; parameters reach their bounds (capacities of 10^15, costs up to
//! `u64::MAX`, windows of 100 years).
//!
//! Deterministic for a seed (splitmix64, no dependency): `make python-test` regenerates the
//! file on every run and the Python tests compare.

// A generator of test data: plain arithmetic on bounded random values, and a panic on an
// I/O error is the right report.
#![allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;

use redis_ratelimit_core::concurrency::{ConcurrencyParams, HolderId};
use redis_ratelimit_core::decision::{Decision, Retry};
use redis_ratelimit_core::engine::{self, Buffers, Limits};
use redis_ratelimit_core::fixed_window::FixedWindow;
use redis_ratelimit_core::gcra::{GcraAlgorithm, GcraParams, cell_reply, emission_interval_ns};
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Change, Limiter, LimiterRef, Quota};
use redis_ratelimit_core::number::Decimal;
use redis_ratelimit_core::sliding_log::SlidingLogParams;
use redis_ratelimit_core::time::MAX_NOW_US;
use redis_ratelimit_core::token_bucket::TokenBucketParams;
use redis_ratelimit_core::window::WindowParams;
use redis_ratelimit_core::{Commit, engine::Refused};

/// splitmix64: small, fast, and the same stream on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[low, high]` (inclusive), for `high - low < 2^64 - 1`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        match (high - low).checked_add(1) {
            Some(span) => low + self.next() % span,
            None => self.next(),
        }
    }

    fn signed(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next() % ((high - low) as u64 + 1)) as i64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

const MS: i64 = 1_000;
const SECOND: i64 = 1_000_000;
const DAY: i64 = 86_400 * SECOND;
const YEAR: i64 = 31_557_600 * SECOND;

/// A limiter stored under a key, with its expiry (Unix ms), as the client's local limits
/// keep it.
struct Stored {
    limiter: Limiter,
    expires_at_ms: i64,
}

/// The local limits' map and rules (client/src/local.rs), run by the core's engine.
#[derive(Default)]
struct Map {
    states: HashMap<String, Stored>,
    buffers: Buffers,
}

impl Map {
    fn live(&self, key: &str, now_us: i64) -> Option<&Stored> {
        let now_ms = now_us.div_euclid(1_000);
        self.states
            .get(key)
            .filter(|stored| stored.expires_at_ms > now_ms)
    }

    fn held(&self, keys: &[String], quotas: &[Quota], now_us: i64) -> Vec<Option<LimiterRef<'_>>> {
        keys.iter()
            .zip(quotas)
            .map(|(key, quota)| {
                self.live(key, now_us)
                    .map(|stored| stored.limiter.as_ref())
                    .filter(|held| held.kind() == quota.kind())
            })
            .collect()
    }

    fn commit(&mut self, key: &str, commit: Commit<Change>, now_us: i64) {
        let live = self
            .live(key, now_us)
            .is_some_and(|stored| stored.limiter.as_ref().kind() == commit.change.kind());
        if !live {
            let limiter = commit.change.create();
            self.states.insert(
                key.to_string(),
                Stored {
                    limiter,
                    expires_at_ms: commit.expires_at_ms,
                },
            );
            return;
        }
        let stored = self.states.get_mut(key).unwrap();
        commit.change.apply(stored.limiter.as_mut()).unwrap();
        stored.expires_at_ms = commit.expires_at_ms;
        if stored.limiter.as_ref().is_vacant() {
            self.states.remove(key);
        }
    }

    /// A state's digest as JSON: what the Python replay compares.
    fn digest(&self, key: &str) -> String {
        let Some(stored) = self.states.get(key) else {
            return "null".into();
        };
        let body = match stored.limiter.as_ref() {
            LimiterRef::TokenBucket(b) => {
                format!("[\"token\",{},{}]", b.empty_at_ns(), b.interval_ns())
            }
            LimiterRef::FixedWindow(w) => fixed(w),
            LimiterRef::SlidingWindow(w) => format!(
                "[\"sliding\",{},{},{}]",
                w.window_start_us(),
                w.previous(),
                w.current()
            ),
            LimiterRef::SlidingLog(log) => {
                let entries: Vec<i64> = log.entries().collect();
                let sum: i128 = entries.iter().map(|&t| i128::from(t)).sum();
                format!(
                    "[\"log\",{},{},{},{},{}]",
                    log.as_of_us(),
                    entries.len(),
                    entries.first().copied().unwrap_or(-1),
                    entries.last().copied().unwrap_or(-1),
                    sum
                )
            }
            LimiterRef::Gcra(g) => format!("[\"gcra\",{}]", g.tat_ns()),
            LimiterRef::Concurrency(c) => {
                let holders: Vec<String> = c
                    .holders()
                    .map(|(expiry, id)| format!("[{expiry},\"{}\"]", String::from_utf8_lossy(id)))
                    .collect();
                format!("[\"concurrency\",[{}]]", holders.join(","))
            }
        };
        format!("[{body},{}]", stored.expires_at_ms)
    }
}

fn fixed(w: &FixedWindow) -> String {
    format!("[\"fixed\",{},{}]", w.window_start_us(), w.count())
}

fn retry_field(retry: Retry) -> i64 {
    Decision {
        allowed: false,
        remaining: 0,
        retry,
        reset_after_ms: 0,
        limit: 0,
    }
    .reply_fields()[2]
}

/// A decision as JSON: `[allowed, remaining, retry (-1 never), reset, limit]`, with
/// remaining and limit as unsigned (the reply saturates them; the replay compares exactly).
fn decision(d: &Decision) -> String {
    format!(
        "[{},{},{},{},{}]",
        u8::from(d.allowed),
        d.remaining,
        retry_field(d.retry),
        d.reset_after_ms,
        d.limit
    )
}

/// A quota as JSON, enough for the replay to rebuild it from the same integers.
fn quota_json(quota: &Quota) -> String {
    use redis_ratelimit_core::decision::CallCost;
    match quota {
        Quota::TokenBucket(p) => format!(
            "[\"token\",{},{},{},{}]",
            p.capacity(),
            p.interval_ns(),
            p.cost(),
            p.max_wait_ns()
        ),
        Quota::FixedWindow(p) => {
            format!("[\"fixed\",{},{},{}]", p.limit(), p.window_us(), p.cost())
        }
        Quota::SlidingWindow(p) => {
            format!("[\"sliding\",{},{},{}]", p.limit(), p.window_us(), p.cost())
        }
        Quota::SlidingLog(p) => format!("[\"log\",{},{},{}]", p.limit(), p.window_us(), p.cost()),
        Quota::Gcra(p) => format!(
            "[\"gcra\",{},{},{}]",
            p.max_burst(),
            p.interval_ns(),
            p.quantity()
        ),
        Quota::Concurrency(p) => format!(
            "[\"concurrency\",{},{},{},{}]",
            p.limit(),
            p.ttl_us(),
            p.holder().map_or("null".to_string(), |h| format!(
                "\"{}\"",
                String::from_utf8_lossy(h.as_bytes())
            )),
            p.cost()
        ),
    }
}

/// The algorithms, by their short names in `kinds!` (checked in `main`).
const KINDS: [&str; 6] = ["token", "fixed", "sliding", "log", "gcra", "concurrency"];

/// Random base parameters of one kind (for one unit), reaching the bounds now and then.
fn random_quota(rng: &mut Rng, kind: &str) -> Quota {
    loop {
        let quota = match kind {
            "token" => {
                let (capacity, interval_ns) = if rng.chance(10) {
                    // Large capacities: 10^15 tokens need a fast refill to stay within 100 years.
                    let capacity = rng.range(1, 1_000_000_000_000_000);
                    (capacity, rng.range(1, 3_155_760_000_000_000_000 / capacity))
                } else if rng.chance(20) {
                    let text = format!("{}.{}", rng.range(0, 2000), rng.range(0, 999_999));
                    let Ok(rate) = Decimal::parse_positive(text.as_bytes()) else {
                        continue;
                    };
                    let Ok(params) = TokenBucketParams::new(rng.range(1, 50), rate, 1) else {
                        continue;
                    };
                    (params.capacity(), params.interval_ns())
                } else {
                    (rng.range(1, 30), rng.range(1, 3_000) * 1_000_000)
                };
                let Ok(params) = TokenBucketParams::from_interval(capacity, interval_ns, 1) else {
                    continue;
                };
                let params = if rng.chance(25) {
                    let wait = if rng.chance(10) {
                        86_400_000_000_000
                    } else {
                        rng.range(0, 5_000) * 1_000_000
                    };
                    params.with_max_wait_ns(wait).unwrap()
                } else {
                    params
                };
                Quota::TokenBucket(params)
            }
            "fixed" | "sliding" => {
                let limit = if rng.chance(10) {
                    rng.range(1, u64::from(u32::MAX))
                } else {
                    rng.range(1, 40)
                };
                let window_us = if rng.chance(10) {
                    rng.range(1_000, 3_155_760_000_000_000)
                } else {
                    rng.range(1, 120) * 100_000 + rng.range(0, 1) * rng.range(0, 999)
                };
                let Ok(params) = WindowParams::new(limit, window_us.max(1_000), 1) else {
                    continue;
                };
                if kind == "fixed" {
                    Quota::FixedWindow(params)
                } else {
                    Quota::SlidingWindow(params)
                }
            }
            "log" => {
                let limit = if rng.chance(5) {
                    rng.range(1, 10_000_000)
                } else {
                    rng.range(1, 40)
                };
                let window_us = if rng.chance(10) {
                    rng.range(1_000, 3_155_760_000_000_000)
                } else {
                    rng.range(1, 100) * 100_000
                };
                let Ok(params) = SlidingLogParams::new(limit, window_us, 1, 10_000_000) else {
                    continue;
                };
                Quota::SlidingLog(params)
            }
            "gcra" => {
                let max_burst = if rng.chance(10) {
                    rng.signed(0, 1_000_000_000)
                } else {
                    rng.signed(0, 30)
                };
                let count = if rng.chance(20) {
                    rng.signed(1, 1_000_000_000_000)
                } else {
                    rng.signed(1, 100)
                };
                let period = if rng.chance(10) {
                    rng.signed(1, 3_155_760_000)
                } else {
                    rng.signed(1, 120)
                };
                let Ok(params) = GcraParams::new(max_burst, count, period, 1) else {
                    continue;
                };
                Quota::Gcra(Box::new(params))
            }
            _ => {
                let limit = rng.range(1, 8);
                let ttl_us = if rng.chance(10) {
                    rng.range(1, 3_155_760_000_000) * 1_000
                } else {
                    rng.range(1, 5_000) * 1_000
                };
                let Ok(params) = ConcurrencyParams::new(limit, ttl_us, 100_000) else {
                    continue;
                };
                Quota::Concurrency(Box::new(params))
            }
        };
        return quota;
    }
}

/// The quota for a call of `cost` units (in-flight limits: by `holder`).
fn for_call(quota: &Quota, cost: u64, holder: Option<&str>) -> Quota {
    let quota = quota.with_cost(cost);
    match (quota, holder) {
        (Quota::Concurrency(p), Some(holder)) => Quota::Concurrency(Box::new(
            p.with_holder(HolderId::new(holder.as_bytes()).unwrap()),
        )),
        (quota, _) => quota,
    }
}

fn random_cost(rng: &mut Rng, quota: &Quota) -> u64 {
    let limit = match quota {
        Quota::TokenBucket(p) => p.capacity(),
        Quota::FixedWindow(p) | Quota::SlidingWindow(p) => p.limit(),
        Quota::SlidingLog(p) => p.limit(),
        Quota::Gcra(p) => p.limit(),
        Quota::Concurrency(p) => p.limit(),
    };
    // Sliding logs record one entry per unit: their costs stay small enough to replay.
    let cap = if matches!(quota, Quota::SlidingLog(_)) {
        1_000
    } else {
        1 << 40
    };
    match rng.range(0, 99) {
        0..=59 => 1,
        60..=84 => rng.range(1, limit.clamp(1, 12)),
        85..=92 => rng.range(1, limit.saturating_add(2).min(cap)),
        93..=96 if !matches!(quota, Quota::SlidingLog(_)) => u64::MAX - rng.range(0, 3),
        _ => limit.saturating_add(rng.range(1, 5)),
    }
}

/// The next clock reading: mostly forward within the window, sometimes back, sometimes far.
fn step_clock(rng: &mut Rng, now_us: i64, window_us: i64) -> i64 {
    let window_us = window_us.clamp(MS, 400 * DAY);
    let next = match rng.range(0, 99) {
        0..=54 => now_us + rng.signed(0, window_us / 4 + 1),
        55..=69 => now_us + rng.signed(0, 2 * window_us),
        70..=79 => now_us,
        80..=89 => now_us - rng.signed(0, window_us),
        90..=93 => now_us + rng.signed(-50 * YEAR, 50 * YEAR),
        94..=95 => MAX_NOW_US + rng.signed(-DAY, DAY),
        96 => rng.signed(-DAY, DAY),
        _ => now_us + rng.signed(0, 10) * MS,
    };
    next.clamp(-i64::MAX / 4, i64::MAX / 4)
}

fn window_of(quota: &Quota) -> i64 {
    match quota {
        Quota::TokenBucket(p) => {
            i64::try_from(p.capacity().saturating_mul(p.interval_ns()) / 1_000).unwrap_or(YEAR)
        }
        Quota::FixedWindow(p) | Quota::SlidingWindow(p) => p.window_us() as i64,
        Quota::SlidingLog(p) => p.window_us() as i64,
        Quota::Gcra(p) => p.tolerance_ns() / 1_000,
        Quota::Concurrency(p) => p.ttl_us() as i64,
    }
}

/// One line for an acquire over `keys` (policy order) and the map after it.
#[allow(clippy::too_many_arguments)]
fn acquire_line(
    out: &mut String,
    map: &mut Map,
    trace: u64,
    keys: &[String],
    quotas: &[Quota],
    weights: &[u64],
    cost: u64,
    partial_min: Option<u64>,
    now_us: i64,
) {
    let limits = Limits {
        quotas,
        weights,
        cost,
        grant: partial_min.map_or(Grant::Whole, |min| Grant::Partial { min }),
    };
    let mut buffers = std::mem::take(&mut map.buffers);
    let held = map.held(keys, quotas, now_us);
    let result = engine::acquire_many(&held, limits, now_us, &mut buffers);
    drop(held);
    let quotas_json: Vec<String> = quotas.iter().map(quota_json).collect();
    let keys_json: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    write!(
        out,
        "{{\"t\":\"acq\",\"tr\":{trace},\"now\":{now_us},\"keys\":[{}],\"q\":[{}],\"w\":{:?},\"c\":{cost},\"min\":{}",
        keys_json.join(","),
        quotas_json.join(","),
        weights,
        partial_min.map_or("null".to_string(), |m| m.to_string()),
    )
    .unwrap();
    match result {
        Err(Refused::KindMismatch { index, .. }) => {
            write!(out, ",\"err\":{index}").unwrap();
        }
        Err(Refused::NoLimits) => out.push_str(",\"err\":-1"),
        Ok(verdict) => {
            let per: Vec<String> = buffers.per_limit().iter().map(decision).collect();
            // A denial writes nothing: the engine then hands back no commits at all.
            let mut commits: Vec<Option<Commit<Change>>> = buffers.take_commits().collect();
            commits.resize_with(keys.len(), || None);
            let expiries: Vec<String> = commits
                .iter()
                .map(|c| {
                    c.as_ref()
                        .map_or("null".into(), |c| c.expires_at_ms.to_string())
                })
                .collect();
            write!(
                out,
                ",\"units\":{},\"binding\":{},\"d\":{},\"per\":[{}],\"exp\":[{}]",
                verdict.units,
                verdict.bound.binding,
                decision(&verdict.bound.decision),
                per.join(","),
                expiries.join(",")
            )
            .unwrap();
            for (key, commit) in keys.iter().zip(commits) {
                if let Some(commit) = commit {
                    map.commit(key, commit, now_us);
                }
            }
        }
    }
    map.buffers = buffers;
    let states: Vec<String> = keys.iter().map(|k| map.digest(k)).collect();
    writeln!(out, ",\"s\":[{}]}}", states.join(",")).unwrap();
}

/// One line for a refund of `units` to every limit (each alone, as the local limits do).
fn refund_line(
    out: &mut String,
    map: &mut Map,
    trace: u64,
    keys: &[String],
    quotas: &[Quota],
    now_us: i64,
) {
    let held = map.held(keys, quotas, now_us);
    let mut results = Vec::new();
    for (held, quota) in held.iter().zip(quotas) {
        results.push(engine::refund(*held, quota, now_us));
    }
    drop(held);
    let quotas_json: Vec<String> = quotas.iter().map(quota_json).collect();
    let keys_json: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    let mut per = Vec::new();
    let mut commits = Vec::new();
    for result in results {
        let evaluation = result.unwrap();
        per.push(format!(
            "[{},{}]",
            decision(&evaluation.decision),
            evaluation
                .commit
                .as_ref()
                .map_or("null".into(), |c| c.expires_at_ms.to_string())
        ));
        commits.push(evaluation.commit);
    }
    for (key, commit) in keys.iter().zip(commits) {
        if let Some(commit) = commit {
            map.commit(key, commit, now_us);
        }
    }
    let states: Vec<String> = keys.iter().map(|k| map.digest(k)).collect();
    writeln!(
        out,
        "{{\"t\":\"ref\",\"tr\":{trace},\"now\":{now_us},\"keys\":[{}],\"q\":[{}],\"per\":[{}],\"s\":[{}]}}",
        keys_json.join(","),
        quotas_json.join(","),
        per.join(","),
        states.join(",")
    )
    .unwrap();
}

/// A trace of calls on one key of one kind: acquires (whole, partial), refunds, peeks at
/// `grantable`, `CL.THROTTLE`, with parameter changes and clock steps.
fn single_trace(rng: &mut Rng, out: &mut String, trace: u64, kind: &str, steps: usize) -> usize {
    let mut map = Map::default();
    let mut base = random_quota(rng, kind);
    let mut now_us = if rng.chance(10) {
        rng.signed(0, MAX_NOW_US)
    } else {
        1_700_000_000_000_000 + rng.signed(0, YEAR)
    };
    let keys = vec!["k".to_string()];
    let holders = ["h1", "h2", "h3", "holder-4", "h5", "h6", "h7", "h8", "h9"];
    let mut lines = 0;
    for _ in 0..steps {
        if rng.chance(4) {
            base = random_quota(rng, kind);
        }
        now_us = step_clock(rng, now_us, window_of(&base));
        let cost = random_cost(rng, &base);
        let holder = (kind == "concurrency").then(|| *rng.pick(&holders));
        let quota = for_call(&base, cost, holder);
        let unit = for_call(&base, 1, holder);
        match rng.range(0, 99) {
            0..=54 => acquire_line(
                out,
                &mut map,
                trace,
                &keys,
                &[unit],
                &[1],
                cost,
                None,
                now_us,
            ),
            55..=69 => {
                let min = rng.range(1, cost.clamp(1, 1 << 20));
                let min = if rng.chance(20) { u64::MAX } else { min };
                acquire_line(
                    out,
                    &mut map,
                    trace,
                    &keys,
                    &[unit],
                    &[1],
                    cost,
                    Some(min),
                    now_us,
                );
            }
            70..=84 => refund_line(out, &mut map, trace, &keys, &[quota], now_us),
            85..=92 => {
                let held = map.held(&keys, std::slice::from_ref(&quota), now_us);
                let up_to = if rng.chance(20) {
                    u64::MAX
                } else {
                    rng.range(0, 50)
                };
                let granted = quota.grantable(held[0], up_to, now_us).unwrap();
                writeln!(
                    out,
                    "{{\"t\":\"gra\",\"tr\":{trace},\"now\":{now_us},\"keys\":[\"k\"],\"q\":[{}],\"up\":{up_to},\"r\":{granted}}}",
                    quota_json(&quota)
                )
                .unwrap();
            }
            _ => {
                if let Quota::Gcra(params) = &base {
                    // CL.THROTTLE with any quantity (0 peeks, negative gives back).
                    let quantity = rng.signed(-3, 8);
                    let params = params.with_quantity(quantity);
                    let held = map.held(&keys, &[Quota::Gcra(Box::new(params))], now_us);
                    let state = match held[0] {
                        Some(LimiterRef::Gcra(g)) => Some(*g),
                        _ => None,
                    };
                    let (evaluation, cell) =
                        GcraAlgorithm::throttle(state.as_ref(), &params, now_us);
                    let reply = cell_reply(&cell);
                    let expiry = evaluation
                        .commit
                        .as_ref()
                        .map_or("null".into(), |c| c.expires_at_ms.to_string());
                    if let Some(commit) = evaluation.commit {
                        map.commit("k", commit.map_gcra(), now_us);
                    }
                    writeln!(
                        out,
                        "{{\"t\":\"thr\",\"tr\":{trace},\"now\":{now_us},\"keys\":[\"k\"],\"q\":[{}],\"cell\":{reply:?},\"d\":{},\"exp\":{expiry},\"s\":[{}]}}",
                        quota_json(&Quota::Gcra(Box::new(params))),
                        decision(&evaluation.decision),
                        map.digest("k")
                    )
                    .unwrap();
                } else {
                    acquire_line(
                        out,
                        &mut map,
                        trace,
                        &keys,
                        &[unit],
                        &[1],
                        cost,
                        None,
                        now_us,
                    );
                }
            }
        }
        lines += 1;
    }
    lines
}

/// Turns a GCRA commit into the type-erased one the map stores.
trait MapGcra {
    fn map_gcra(self) -> Commit<Change>;
}

impl MapGcra for Commit<redis_ratelimit_core::gcra::Gcra> {
    fn map_gcra(self) -> Commit<Change> {
        Commit {
            change: Change::Gcra(self.change),
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// A trace of multi-limit calls over a small pool of keys (kinds may collide on a key: the
/// local limits then replace the other kind).
fn multi_trace(rng: &mut Rng, out: &mut String, trace: u64, steps: usize) -> usize {
    let mut map = Map::default();
    let pool: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    let mut now_us = 1_700_000_000_000_000 + rng.signed(0, YEAR);
    let holders = ["a", "b", "c", "d"];
    let mut lines = 0;
    for _ in 0..steps {
        let count = rng.range(1, 4) as usize;
        let mut keys: Vec<String> = Vec::new();
        while keys.len() < count {
            let key = rng.pick(&pool).clone();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let holder = *rng.pick(&holders);
        let quotas: Vec<Quota> = keys
            .iter()
            .map(|key| {
                // Mostly one kind per key, so states carry over between calls.
                let kind = if rng.chance(85) {
                    KINDS[(key.as_bytes()[1] - b'0') as usize % KINDS.len()]
                } else {
                    *rng.pick(&KINDS)
                };
                for_call(&random_quota(rng, kind), 1, Some(holder))
            })
            .collect();
        let weights: Vec<u64> = keys
            .iter()
            .map(|_| if rng.chance(70) { 1 } else { rng.range(1, 5) })
            .collect();
        now_us = step_clock(rng, now_us, 10 * SECOND);
        let cost = if rng.chance(70) { 1 } else { rng.range(1, 20) };
        if rng.chance(15) {
            let refunds: Vec<Quota> = quotas
                .iter()
                .zip(&weights)
                .map(|(q, w)| for_call(q, cost * w, Some(holder)))
                .collect();
            refund_line(out, &mut map, trace, &keys, &refunds, now_us);
        } else {
            let min = rng.chance(30).then(|| rng.range(1, cost));
            acquire_line(
                out, &mut map, trace, &keys, &quotas, &weights, cost, min, now_us,
            );
        }
        lines += 1;
    }
    lines
}

/// Random texts for the exact decimal parser: valid decimals of every shape, and junk.
fn decimal_text(rng: &mut Rng) -> String {
    let alphabet = ["0", "1", "5", "9", ".", "e", "E", "-", "+", " ", "x", "00"];
    match rng.range(0, 9) {
        0..=3 => {
            let sign = if rng.chance(5) { "-" } else { "" };
            let shift = rng.range(0, 63);
            let whole = rng.range(0, u64::MAX >> shift);
            format!("{sign}{whole}.{}", rng.range(0, 1_000_000_000))
        }
        4..=5 => format!("{}e{}", rng.range(1, 99_999), rng.signed(-45, 45)),
        6 => format!("{}", rng.range(1, u64::MAX)),
        7 => (*rng.pick(&[
            "nan",
            "inf",
            "-inf",
            "Infinity",
            "",
            ".",
            "1e1234567",
            "0.000",
            "1e-400",
        ]))
        .to_string(),
        _ => (0..rng.range(1, 8)).map(|_| *rng.pick(&alphabet)).collect(),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: golden OUT.jsonl [SEED] [CASES]");
    let seed: u64 = args.next().map_or(20_261_201, |s| s.parse().expect("seed"));
    let cases: usize = args.next().map_or(10_000, |s| s.parse().expect("cases"));
    let mut named: Vec<&str> = redis_ratelimit_core::kinds::Kind::ALL
        .iter()
        .map(|kind| kind.short_name())
        .collect();
    let mut ours = KINDS.to_vec();
    named.sort_unstable();
    ours.sort_unstable();
    assert_eq!(
        ours, named,
        "the golden vectors' kinds are the short names of kinds!"
    );
    let mut rng = Rng(seed);
    let mut out = String::new();
    let mut counts: Vec<(String, usize)> = Vec::new();

    for _ in 0..cases {
        let text = decimal_text(&mut rng);
        let result = match Decimal::parse_positive(text.as_bytes()) {
            Err(error) => format!("\"{error:?}\""),
            Ok(decimal) => format!(
                "[{},{},{}]",
                decimal
                    .ceil_reciprocal(1_000_000_000)
                    .map_or("null".into(), |v| v.to_string()),
                decimal
                    .ceil_times(1_000_000)
                    .map_or("null".into(), |v| v.to_string()),
                decimal.exceeds_power_of_ten(9)
            ),
        };
        writeln!(out, "{{\"t\":\"dec\",\"s\":{text:?},\"r\":{result}}}").unwrap();
    }
    counts.push(("decimal".into(), cases));

    for _ in 0..cases {
        let bound = |rng: &mut Rng, small: i64| {
            if rng.chance(20) { i64::MAX / 2 } else { small }
        };
        let high = bound(&mut rng, 100);
        let max_burst = rng.signed(-2, high);
        let high = bound(&mut rng, 1_000);
        let count = rng.signed(-5, high);
        let high = bound(&mut rng, 1_000);
        let period = rng.signed(-5, high);
        let interval = emission_interval_ns(count, period);
        let result = match GcraParams::new(max_burst, count, period, 1) {
            Ok(params) => format!("[{},{}]", params.interval_ns(), params.tolerance_ns()),
            Err(error) => format!("\"{error:?}\""),
        };
        let interval = match interval {
            Ok(ns) => ns.to_string(),
            Err(error) => format!("\"{error:?}\""),
        };
        writeln!(
            out,
            "{{\"t\":\"gp\",\"b\":{max_burst},\"c\":{count},\"p\":{period},\"i\":{interval},\"r\":{result}}}"
        )
        .unwrap();
    }
    counts.push(("gcra-parameters".into(), cases));

    let mut trace = 0;
    for kind in KINDS {
        let mut lines = 0;
        while lines < cases {
            trace += 1;
            lines += single_trace(&mut rng, &mut out, trace, kind, 60);
        }
        counts.push((kind.to_string(), lines));
    }
    let mut lines = 0;
    while lines < cases {
        trace += 1;
        lines += multi_trace(&mut rng, &mut out, trace, 60);
    }
    counts.push(("multi".into(), lines));

    let mut file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    file.write_all(out.as_bytes()).expect("write the vectors");
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    eprintln!("golden: seed {seed}: {} -> {path}", summary.join(", "));
}
