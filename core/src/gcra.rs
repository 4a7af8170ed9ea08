//! GCRA (generic cell rate algorithm), reply for reply compatible with redis-cell's
//! `CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]`.
//!
//! # Reference
//!
//! brandur/redis-cell 0.4.0 (time 0.3.36): `src/cell/mod.rs` (`Rate::per_period`,
//! `RateLimiter::new`, `RateLimiter::rate_limit`), `src/lib.rs` (argument parsing and the
//! rounding of the reply up to whole seconds), `src/cell/store.rs` (the key's TTL). The
//! arithmetic below is redis-cell's, transcribed to integer nanoseconds; where redis-cell uses
//! floating point, this module either does the same float operations or uses integer
//! operations proven to give the same result within the accepted parameters (see
//! `cell_remaining`). The tests drive a line-by-line port of redis-cell against this module.
//!
//! # Algorithm (as redis-cell computes it)
//!
//! ```text
//! interval  = trunc(f64(period × 1e9) / f64(count))    ns between two units ("emission interval")
//! tolerance = interval × (max_burst + 1)                "delay variation tolerance"
//! increment = interval × quantity
//! tat       = stored TAT if the key exists, else now   (theoretical arrival time)
//! new_tat   = max(tat, now) + increment
//! diff      = now − (new_tat − tolerance)
//! diff < 0  → limited:  ttl = tat − now; retry_after = −diff if increment ≤ tolerance, else −1 s
//! diff ≥ 0  → allowed:  ttl = new_tat − now; store new_tat with a TTL of ttl
//! next      = tolerance − ttl
//! remaining = trunc(f64(whole_µs(next)) / f64(whole_µs(interval))) if next > −interval, else 0
//! reply     = [limited, max_burst + 1, remaining, seconds(retry_after), seconds(ttl)]
//! seconds(d)= (d.as_seconds_f64() as i64) + (1 if d.subsec_milliseconds() > 0)
//! ```
//!
//! # Representation, precision, clock
//!
//! The state is the TAT in integer Unix nanoseconds (8 bytes). The clock is the server's
//! (`now_us`, microseconds; milliseconds on Redis 7.0), used as `now_ns = now_us × 1000`
//! wherever redis-cell reads the host's nanosecond clock. A stored TAT at or before `now` is
//! the same as a missing key (`max(tat, now)`), so the state expires at `ceil_ms(TAT)`.
//!
//! An earlier clock than one already seen only makes `max(tat, now) + increment − tolerance`
//! later relative to `now`, so it never admits more than the later clock would; an admitted
//! call with a positive quantity always moves the TAT forward.
//!
//! # Rounding of the reply
//!
//! redis-cell's whole seconds are *not* `ceil(ceil_ms(d) / 1000)`: it truncates the fraction
//! to milliseconds before rounding up (1.0005 s → 1, while `ceil_ms` gives 1001 ms → 2 s), and
//! adds `as_seconds_f64() as i64`, which for durations of 2^24 s (194 days) or more can round a
//! fraction just below one second up to the next second, making the reply one higher still.
//! Durations here carry arbitrary nanoseconds (the interval is not a whole number of
//! milliseconds, and the clock has microseconds), so the millisecond fields of [`Decision`]
//! cannot reproduce the reply. [`GcraAlgorithm::throttle`] therefore also returns a
//! [`CellOutcome`] with redis-cell's exact values, and [`cell_reply`] renders it.
//!
//! # Arguments, as redis-cell takes them (for the glue to mirror)
//!
//! `CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]`, quantity 1 by
//! default. Any other number of arguments: `Usage: cl.throttle <key> <max_burst> <count per
//! period> <period> [<quantity>]`. Each number is parsed with Rust's `str::parse::<i64>`
//! (an optional `+` or `-`, ASCII digits, within `i64`; no spaces, decimals or exponents),
//! in argument order, failing with `Couldn't parse as integer: <argument>`. Then a zero
//! interval fails with [`ZERO_RATE_MESSAGE`] ([`GcraParamError::ZeroRate`]). Every error is
//! sent with `RedisModule_ReplyWithError("Cell error: <message>")`, so the wire text is
//! `-Cell error: ...` (error code `Cell`, no `ERR`). All other values are accepted by
//! redis-cell; the ones refused here are listed below.
//!
//! # Intentional differences from redis-cell
//!
//! - **Clock.** The server's clock (the command's cached time), not the host's
//!   `OffsetDateTime::now_utc()`; one reading per command.
//! - **Replication.** The glue replicates the resulting state (effects), not the command:
//!   redis-cell's `RedisModule_ReplicateVerbatim` makes each replica re-run the command with
//!   its own clock, which can diverge.
//! - **Writes.** A denied call writes nothing (as in redis-cell). A quantity of 0 writes
//!   nothing either, where redis-cell rewrites `max(TAT, now)` with a fresh TTL: that value is
//!   equivalent to the old state for every later call, so no reply differs.
//! - **Expiry.** The key expires at `ceil_ms(TAT)` (absolute), the first millisecond at which
//!   the state equals a missing key. redis-cell sets a relative TTL of `trunc_ms(TAT − host
//!   now)` from the server's command time, so its key can disappear up to about a millisecond
//!   before the TAT (the call then sees a full burst) or linger about a millisecond after it
//!   (a limited call then computes `ttl = TAT − now < 0`). Those sub-millisecond races depend
//!   on two unsynchronised clocks; this module implements the intended behaviour, a key that
//!   exists exactly while its TAT is in the future.
//! - **Refused parameters** (redis-cell accepts them and misbehaves): `max_burst < 0` (limits
//!   of zero or below), a negative rate (`count` and `period` of opposite signs; both negative
//!   is a positive rate, accepted as redis-cell does), and a tolerance
//!   `interval × (max_burst + 1)` above [`MAX_TOLERANCE_NS`] (100 years), beyond which
//!   redis-cell's `i64` products can wrap.
//! - **Huge quantities.** redis-cell computes `interval × quantity` in an `i64` that wraps in
//!   its release build when the product exceeds `i64::MAX` ns (292 years), which can admit a
//!   huge request. Here the product is exact: such a call is denied with retry −1.
//! - **Negative quantities** move the TAT back (returning tokens, which redis-cell's users
//!   asked for) but never before `now`. redis-cell lets the TAT go into the past: its TTL
//!   is then negative, which Redis 7's `RedisModule_SetExpire` refuses below −1 ms, so it
//!   replies `Cell error: Error while setting key expire` after having written the TAT
//!   (without expiry); within 2 ms of `now`, or on older servers, it succeeds with
//!   `remaining` computed from the past TAT. Here the limiter is simply full, with the same
//!   reply as a missing key.
//! - **Remaining above the limit.** For an interval under 1 µs (more than a million units a
//!   second), redis-cell divides by zero whole microseconds and replies `remaining =
//!   i64::MAX`. Here `remaining` never exceeds the limit, `max_burst + 1`.
//! - **Remaining below zero.** When a stored TAT lies further ahead than the current
//!   tolerance (the parameters shrank, or the clock went back) and the interval is not a whole
//!   number of microseconds, redis-cell can reply `remaining = -1`. [`CellOutcome`] carries it;
//!   [`Decision::remaining`] is unsigned and says 0.

use super::facts::{QuotaFacts, Recovery, part};
use std::time::Duration;

use super::decision::{
    Algorithm, CallCost, Commit, Decision, Evaluation, Retry, change_is_the_new_state,
};
use super::time::{
    MAX_NOW_US, NS_PER_SECOND, NS_PER_US, ceil_ms_from_ns, expiry_ms_from_ns, saturating_i64,
};

/// Largest accepted tolerance `interval × (max_burst + 1)`: 100 Julian years, in nanoseconds.
///
/// It keeps every TAT within an `i64` of nanoseconds until [`MAX_NOW_US`], and keeps
/// redis-cell's own `i64` products from wrapping for every accepted parameter.
pub const MAX_TOLERANCE_NS: i64 = 100 * 31_557_600 * 1_000_000_000;

/// Latest TAT any evaluation can produce: the latest clock plus the largest tolerance.
pub const MAX_TAT_NS: i64 = MAX_NOW_US * 1_000 + MAX_TOLERANCE_NS;

/// The message redis-cell replies with (after `Cell error: `) when the interval is zero.
pub const ZERO_RATE_MESSAGE: &str = "Zero rates are not supported";

/// Why GCRA parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcraParamError {
    /// `count` or `period` is 0, or `count > period × 1e9` so that the interval truncates to
    /// 0 ns. redis-cell refuses these too, with [`ZERO_RATE_MESSAGE`].
    ZeroRate,
    /// `count` and `period` have opposite signs (redis-cell accepts a negative interval).
    NegativeRate,
    /// `max_burst < 0` (redis-cell accepts it: a limit of zero or less).
    NegativeBurst,
    /// `interval × (max_burst + 1)` exceeds [`MAX_TOLERANCE_NS`].
    ToleranceTooLong,
}

/// Validated parameters of one `CL.THROTTLE` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GcraParams {
    max_burst: i64,
    /// The rate as given: `count` units per `period` seconds (what the wire carries).
    count: i64,
    period: i64,
    interval_ns: i64,
    quantity: i64,
}

impl GcraParams {
    /// Validates redis-cell's arguments, as parsed integers: `max_burst`, `count` units per
    /// `period` seconds, and the call's `quantity` (redis-cell's default is 1).
    ///
    /// Any `quantity` is valid: 0 peeks, a quantity above `max_burst + 1` is always denied, a
    /// negative one gives units back.
    pub fn new(
        max_burst: i64,
        count: i64,
        period: i64,
        quantity: i64,
    ) -> Result<Self, GcraParamError> {
        let interval_ns = emission_interval_ns(count, period)?;
        Self::with_interval(max_burst, (count, period), interval_ns, quantity)
    }

    /// Validates parameters of the rate `count` per `period` whose emission interval is
    /// `interval_ns`.
    fn with_interval(
        max_burst: i64,
        (count, period): (i64, i64),
        interval_ns: i64,
        quantity: i64,
    ) -> Result<Self, GcraParamError> {
        match interval_ns.signum() {
            0 => return Err(GcraParamError::ZeroRate),
            -1 => return Err(GcraParamError::NegativeRate),
            _ => {}
        }
        if max_burst < 0 {
            return Err(GcraParamError::NegativeBurst);
        }
        let tolerance =
            i128::from(interval_ns).saturating_mul(i128::from(max_burst).saturating_add(1));
        if tolerance > i128::from(MAX_TOLERANCE_NS) {
            return Err(GcraParamError::ToleranceTooLong);
        }
        Ok(Self {
            max_burst,
            count,
            period,
            interval_ns,
            quantity,
        })
    }

    /// The same parameters for a call of another quantity.
    pub fn with_quantity(self, quantity: i64) -> Self {
        Self { quantity, ..self }
    }

    /// The burst beyond the first unit (`max_burst`, at least 0).
    pub fn max_burst(&self) -> i64 {
        self.max_burst
    }

    /// The limit redis-cell reports: `max_burst + 1`.
    pub fn limit(&self) -> u64 {
        u64::try_from(self.max_burst).unwrap_or(0).saturating_add(1)
    }

    /// `count` of the rate `count` units per `period` seconds, as given.
    pub fn count(&self) -> i64 {
        self.count
    }

    /// `period` (seconds) of the rate `count` units per `period` seconds, as given.
    pub fn period_s(&self) -> i64 {
        self.period
    }

    /// Nanoseconds between two units at the nominal rate (at least 1).
    pub fn interval_ns(&self) -> i64 {
        self.interval_ns
    }

    /// `interval × (max_burst + 1)`, at most [`MAX_TOLERANCE_NS`].
    pub fn tolerance_ns(&self) -> i64 {
        self.interval_ns
            .saturating_mul(self.max_burst.saturating_add(1))
    }

    /// Units this call asks for (negative: gives back).
    pub fn quantity(&self) -> i64 {
        self.quantity
    }

    fn limit_i64(&self) -> i64 {
        self.max_burst.saturating_add(1)
    }
}

impl QuotaFacts for GcraParams {
    /// redis-cell's limit: `max_burst + 1` units at once.
    fn advertised_quota(&self) -> u64 {
        self.limit()
    }

    /// The time an empty limiter takes to fill again: the tolerance.
    fn window(&self) -> Duration {
        Duration::from_nanos(self.tolerance_ns().unsigned_abs())
    }

    /// `(max_burst + 1) / replicas` units at once, emitted `replicas` times slower: the
    /// interval is exactly `replicas` times the original's, and the rate it states is
    /// `count` per `replicas × period` (a share is decided locally and never sent, so that
    /// rate is only what it reports; re-deriving the interval from it could make it shorter
    /// by a truncation).
    fn share(&self, replicas: u64) -> Option<Self> {
        let replicas = i64::try_from(replicas.max(1)).ok()?;
        let share = i64::try_from(part(self.limit(), replicas.unsigned_abs())?).ok()?;
        Self::with_interval(
            share.checked_sub(1)?,
            (self.count, self.period.checked_mul(replicas)?),
            self.interval_ns.checked_mul(replicas)?,
            self.quantity,
        )
        .ok()
    }
}

/// redis-cell's emission interval for `count` units per `period` seconds:
/// `trunc(f64(period × 1e9) / f64(count))` nanoseconds, exactly as `Rate::per_period` computes
/// it (the float division is part of the observable behaviour: for periods above 2^53 ns it
/// differs from integer division).
pub fn emission_interval_ns(count: i64, period: i64) -> Result<i64, GcraParamError> {
    if count == 0 || period == 0 {
        return Err(GcraParamError::ZeroRate);
    }
    let period_ns = i128::from(period).saturating_mul(i128::from(NS_PER_SECOND));
    // `as` conversions round to nearest (to f64) and truncate with saturation (to i64), as in
    // redis-cell.
    let interval = ((period_ns as f64) / (count as f64)) as i64;
    match interval.signum() {
        0 => Err(GcraParamError::ZeroRate),
        -1 => Err(GcraParamError::NegativeRate),
        _ => Ok(interval),
    }
}

/// What a GCRA key stores between calls: its theoretical arrival time. 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    tat_ns: i64,
}

impl Gcra {
    /// Rebuilds a stored state, refusing TATs no evaluation can produce (corrupt or forged
    /// payloads): the TAT must lie in `[0, MAX_TAT_NS]`.
    pub fn from_parts(tat_ns: i64) -> Option<Self> {
        (0..=MAX_TAT_NS)
            .contains(&tat_ns)
            .then_some(Self { tat_ns })
    }

    /// The theoretical arrival time, in Unix nanoseconds.
    pub fn tat_ns(&self) -> i64 {
        self.tat_ns
    }
}

/// redis-cell's result for one call, before `CL.THROTTLE` rounds durations to seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellOutcome {
    /// Whether the call was limited (denied).
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: i64,
    /// redis-cell's remaining count (can exceed `max_burst` but never `limit`, or be −1;
    /// see the module documentation).
    pub remaining: i64,
    /// Nanoseconds until the same call is admitted; `None` where redis-cell leaves its −1 s
    /// default (the call was admitted, or its quantity exceeds `max_burst + 1`).
    pub retry_after_ns: Option<i64>,
    /// Nanoseconds until the TAT (redis-cell's `ttl`).
    pub reset_after_ns: i64,
}

/// The `CL.THROTTLE` reply, exactly as redis-cell sends it:
/// `[limited, limit, remaining, retry_after_s, reset_after_s]`.
pub fn cell_reply(outcome: &CellOutcome) -> [i64; 5] {
    [
        i64::from(outcome.limited),
        outcome.limit,
        outcome.remaining,
        outcome.retry_after_ns.map_or(-1, cell_seconds),
        cell_seconds(outcome.reset_after_ns),
    ]
}

/// redis-cell's whole seconds for a duration of `ns` nanoseconds (`src/lib.rs`):
/// `d.as_seconds_f64() as i64`, plus one if `d.subsec_milliseconds() > 0`.
///
/// For positive durations below 2^24 s this is `ceil(floor_ms(ns) / 1000)`; zero and negative
/// durations truncate towards zero (−1 s stays −1).
pub fn cell_seconds(ns: i64) -> i64 {
    const NS_PER_SECOND_I64: i64 = 1_000_000_000;
    const NS_PER_MS_I64: i64 = 1_000_000;
    // time::Duration keeps whole seconds and a sub-second part of the same sign.
    let seconds = ns.checked_div(NS_PER_SECOND_I64).unwrap_or(0);
    let nanos = ns.checked_rem(NS_PER_SECOND_I64).unwrap_or(0);
    // Duration::as_seconds_f64, then a saturating truncation: the same float operations.
    let whole = (seconds as f64 + nanos as f64 / 1_000_000_000_f64) as i64;
    if nanos.checked_div(NS_PER_MS_I64).unwrap_or(0) > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// redis-cell's `remaining` for a key whose TAT is `ttl` after now:
/// `trunc(f64(whole_µs(tolerance − ttl)) / f64(whole_µs(interval)))` when
/// `tolerance − ttl > −interval`, else 0.
///
/// Integer division gives the same result as the float division here: both operands are
/// integers below 2^53 in magnitude (`|next| ≤ MAX_TOLERANCE_NS`, since `ttl ≥ 0` and
/// `next > −interval`), so they convert exactly, and a correctly rounded quotient `a / b` with
/// `|a| < 2^53` is within `|a / b| × 2^−53 < 1 / b` of the exact one, closer than any integer
/// the exact quotient is not equal to: truncation cannot cross an integer. A zero divisor
/// (an interval under 1 µs) gives ±infinity or NaN in redis-cell, which `as i64` turns into
/// `i64::MAX`, `i64::MIN` or 0.
fn cell_remaining(tolerance: i128, interval: i128, ttl: i128) -> i64 {
    let next = tolerance.saturating_sub(ttl);
    if next <= interval.saturating_neg() {
        return 0;
    }
    let ns_per_us = i128::from(NS_PER_US);
    // Duration::whole_microseconds truncates towards zero, as checked_div does.
    let next_us = next.checked_div(ns_per_us).unwrap_or(0);
    let interval_us = interval.checked_div(ns_per_us).unwrap_or(0);
    match next_us.checked_div(interval_us) {
        Some(quotient) => i64::try_from(quotient).unwrap_or(0),
        None => match next_us.signum() {
            1 => i64::MAX,
            -1 => i64::MIN,
            _ => 0,
        },
    }
}

/// One call judged at one instant, in i128 nanoseconds.
struct Judgement {
    limited: bool,
    /// The TAT after the call: unchanged when limited.
    new_tat: i128,
    /// `Some(−diff)` when limited and `increment ≤ tolerance`.
    retry_ns: Option<i128>,
    /// redis-cell's `ttl`: the TAT (new when admitted) minus now; never negative here.
    ttl: i128,
}

/// A key seen at one instant, in i128 nanoseconds.
///
/// Bounds: `0 ≤ now ≤ 2^62`, `tat ≤ MAX_TAT_NS < 2^63`, `|increment| < 2^62 × 2^63`, so
/// nothing computed here overflows an i128; the saturating operations only say so.
struct View {
    now: i128,
    interval: i128,
    tolerance: i128,
    increment: i128,
    /// The stored TAT, or `now` when the key is missing or its TAT is not in the future.
    tat: i128,
}

impl View {
    fn new(state: Option<&Gcra>, params: &GcraParams, now_us: i64) -> View {
        let now = i128::from(now_us.clamp(0, MAX_NOW_US)).saturating_mul(i128::from(NS_PER_US));
        let interval = i128::from(params.interval_ns);
        View {
            now,
            interval,
            tolerance: i128::from(params.tolerance_ns()),
            increment: interval.saturating_mul(i128::from(params.quantity)),
            tat: state.map_or(now, |s| i128::from(s.tat_ns)).max(now),
        }
    }

    /// redis-cell's decision for this call against a TAT `tat ≥ now`.
    fn judge(&self, tat: i128) -> Judgement {
        // tat ≥ now, so redis-cell's `if now > tat { now } else { tat }` is `tat`.
        let new_tat = tat.saturating_add(self.increment);
        let allow_at = new_tat.saturating_sub(self.tolerance);
        let diff = self.now.saturating_sub(allow_at);
        if diff < 0 {
            Judgement {
                limited: true,
                new_tat: tat,
                retry_ns: (self.increment <= self.tolerance).then(|| diff.saturating_neg()),
                ttl: tat.saturating_sub(self.now),
            }
        } else {
            // A negative quantity never moves the TAT before now (intentional difference).
            let new_tat = new_tat.max(self.now);
            Judgement {
                limited: false,
                new_tat,
                retry_ns: None,
                ttl: new_tat.saturating_sub(self.now),
            }
        }
    }

    /// redis-cell's remaining count for a key whose TAT is `ttl` after now, never above the
    /// limit (intentional difference: redis-cell divides by zero whole microseconds for
    /// intervals under 1 µs and says `i64::MAX`).
    fn remaining(&self, params: &GcraParams, ttl: i128) -> i64 {
        cell_remaining(self.tolerance, self.interval, ttl).min(params.limit_i64())
    }

    fn cell(&self, params: &GcraParams, judgement: &Judgement) -> CellOutcome {
        CellOutcome {
            limited: judgement.limited,
            limit: params.limit_i64(),
            remaining: self.remaining(params, judgement.ttl),
            retry_after_ns: judgement.retry_ns.map(saturating_i64),
            reset_after_ns: saturating_i64(judgement.ttl),
        }
    }

    /// The decision for a call judged `judgement`, reporting `remaining` and the reset for
    /// a key whose TAT is `ttl` after now.
    fn decision(
        &self,
        params: &GcraParams,
        allowed: bool,
        judgement: &Judgement,
        ttl: i128,
    ) -> Decision {
        let retry = if !judgement.limited {
            Retry::Now
        } else {
            match judgement.retry_ns {
                Some(ns) => Retry::AfterMs(ceil_ms_from_ns(ns).max(1)),
                None => Retry::Never,
            }
        };
        Decision {
            allowed,
            remaining: u64::try_from(self.remaining(params, ttl)).unwrap_or(0),
            retry,
            reset_after_ms: ceil_ms_from_ns(ttl),
            limit: params.limit(),
        }
    }

    /// The state to store for a TAT of `tat` (in `[now, MAX_TAT_NS]`), expiring when it is
    /// no longer in the future.
    fn commit(tat: i128) -> Commit<Gcra> {
        Commit {
            change: Gcra {
                tat_ns: saturating_i64(tat),
            },
            expires_at_ms: expiry_ms_from_ns(tat),
        }
    }
}

/// The GCRA algorithm.
pub struct GcraAlgorithm;

impl GcraAlgorithm {
    /// Decides a `CL.THROTTLE` call: the evaluation (decision and write) and redis-cell's
    /// exact outcome, to be rendered with [`cell_reply`].
    pub fn throttle(
        state: Option<&Gcra>,
        params: &GcraParams,
        now_us: i64,
    ) -> (Evaluation<Gcra>, CellOutcome) {
        let view = View::new(state, params, now_us);
        let judgement = view.judge(view.tat);
        let cell = view.cell(params, &judgement);
        let decision = view.decision(params, !judgement.limited, &judgement, judgement.ttl);
        let commit = (!judgement.limited && judgement.new_tat != view.tat)
            .then(|| View::commit(judgement.new_tat));
        (Evaluation { decision, commit }, cell)
    }
}

/// The cost of an `RL.MULTI` GCRA limit is its quantity; `CL.THROTTLE`'s quantities of 0 or
/// below (peeks and give-backs) cost nothing.
impl CallCost for GcraParams {
    fn cost(&self) -> u64 {
        u64::try_from(self.quantity).unwrap_or(0)
    }

    fn with_cost(&self, cost: u64) -> Self {
        self.with_quantity(i64::try_from(cost).unwrap_or(i64::MAX).max(1))
    }
}

impl Algorithm for GcraAlgorithm {
    type Params = GcraParams;
    type State = Gcra;
    type Change = Gcra;

    fn evaluate(state: Option<&Gcra>, params: &GcraParams, now_us: i64) -> Evaluation<Gcra> {
        Self::throttle(state, params, now_us).0
    }

    /// Moves the TAT back by `quantity × interval` (nothing for a quantity of 0 or less), never
    /// before now: at most back to a full burst.
    fn refund(state: Option<&Gcra>, params: &GcraParams, now_us: i64) -> Evaluation<Gcra> {
        let view = View::new(state, params, now_us);
        let back = view.increment.max(0);
        let tat = view.tat.saturating_sub(back).max(view.now);
        let refunded = tat < view.tat;
        let judgement = view.judge(tat);
        let ttl = tat.saturating_sub(view.now);
        Evaluation {
            decision: view.decision(params, refunded, &judgement, ttl),
            commit: refunded.then(|| View::commit(tat)),
        }
    }

    /// The units whose increment still fits in the tolerance: a call of `k` is admitted iff
    /// `tat + k × interval − tolerance ≤ now`, so `⌊(tolerance − (tat − now)) / interval⌋`,
    /// up to `up_to`: O(1).
    fn grantable(state: Option<&Gcra>, params: &GcraParams, up_to: u64, now_us: i64) -> u64 {
        let view = View::new(state, params, now_us);
        let slack = view
            .tolerance
            .saturating_sub(view.tat.saturating_sub(view.now));
        // Truncating a negative slack gives 0 or less: nothing fits.
        let fits = slack.checked_div(view.interval).unwrap_or(0).max(0);
        u64::try_from(fits).unwrap_or(u64::MAX).min(up_to)
    }

    /// One unit per emission interval.
    fn recovery(params: &GcraParams) -> Recovery {
        Recovery::Steady {
            interval_ns: params.interval_ns().unsigned_abs(),
        }
    }

    change_is_the_new_state!(Gcra);
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
