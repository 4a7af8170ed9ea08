//! The replies of limiter commands, built in one place, identical under RESP2 and RESP3.
//!
//! - `RL.*` single-key commands: `[allowed, remaining, retry_after_ms, reset_after_ms,
//!   limit]` (under a partial grant, field 1 is the units granted);
//! - `RL.MULTI`: those five from the binding limit, then `binding` (its index) and an array
//!   of every limit's own five;
//! - `RL.REGIONAL`: the five fields (field 1 whether the floor or the lease admitted the
//!   call, fields 2–5 the floor's own view: the region's quota, what its headers show), then
//!   why (`floor`, `lease`, `lease_exhausted`, `home_unreachable`) and the units left in
//!   the live lease;
//! - `CL.THROTTLE`: redis-cell's five fields.

use super::api::Call;
use super::driver::RegionalOutcome;
use redis_ratelimit_core::Decision;
use redis_ratelimit_core::engine::Verdict;
use redis_ratelimit_core::gcra::{CellOutcome, cell_reply};
use redis_ratelimit_wire::args::regional::why_word;

/// `[allowed, remaining, retry_after_ms, reset_after_ms, limit]`.
pub fn decision(call: &Call<'_>, decision: &Decision) {
    call.reply_integers(&decision.reply_fields());
}

/// A decision whose field 1 is `first` (the units of a partial grant).
pub fn decision_with_first(call: &Call<'_>, decision: &Decision, first: i64) {
    call.reply_integers(&with_first(decision, first));
}

/// `[allowed, remaining, retry_after_ms, reset_after_ms, limit, binding, per_limit]`.
pub fn multi(call: &Call<'_>, verdict: &Verdict, per_limit: &[Decision], first: i64) {
    let binding = i64::try_from(verdict.bound.binding).unwrap_or(i64::MAX);
    call.reply_array(7);
    for field in with_first(&verdict.bound.decision, first) {
        call.reply_integer(field);
    }
    call.reply_integer(binding);
    call.reply_array(per_limit.len());
    for limit in per_limit {
        call.reply_integers(&limit.reply_fields());
    }
}

/// `[allowed, remaining, retry_after_ms, reset_after_ms, limit, why, lease_units]`.
pub fn regional(call: &Call<'_>, outcome: &RegionalOutcome) {
    call.reply_array(7);
    for field in with_first(&outcome.floor, i64::from(outcome.allowed)) {
        call.reply_integer(field);
    }
    call.reply_bulk(why_word(outcome.why));
    call.reply_integer(i64::try_from(outcome.lease_units).unwrap_or(i64::MAX));
}

/// `[limited, limit, remaining, retry_after_s, reset_after_s]`, as redis-cell sends it.
pub fn cell(call: &Call<'_>, outcome: &CellOutcome) {
    call.reply_integers(&cell_reply(outcome));
}

fn with_first(decision: &Decision, first: i64) -> [i64; 5] {
    let [_, rest @ ..] = decision.reply_fields();
    let [remaining, retry_after_ms, reset_after_ms, limit] = rest;
    [first, remaining, retry_after_ms, reset_after_ms, limit]
}
