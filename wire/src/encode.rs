//! Writing commands: what [`crate::args`] parses, the other way round.
//!
//! Every function writes one command (its name first, uppercase, then its arguments) into
//! an [`Args`] the caller keeps and reuses, and says which [`Command`] it wrote, so a reply is
//! read as that command's. What [`args`](crate::args) parses from the arguments written is
//! what was encoded (the property tests check it for every kind): numbers in the shortest
//! form the parser reads back exactly (a rate as the shortest decimal of its refill
//! interval, a window in seconds to the microsecond).
//!
//! [`group`] is how a client calls a set of limits: one limit with a command of its own goes
//! as that command, every other call (several limits, or a kind without a command of its
//! own) as `RL.MULTI`, so a new kind is reachable without a command.

use std::fmt;
use std::io::Write;

use redis_ratelimit_core::CallCost;
use redis_ratelimit_core::gcra::GcraParams;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::time::{NS_PER_MS, NS_PER_SECOND, US_PER_MS, US_PER_SECOND};

use crate::args::CallArgs;
use crate::args::multi::MultiArgs;
use crate::args::regional::LeaseArgs;
use crate::commands::Command;

/// A command's words, one after another in one buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    bytes: Vec<u8>,
    /// Where each word ends in `bytes`.
    ends: Vec<usize>,
}

impl Args {
    /// No words (keeping the memory, for the next command).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The words, the command's name first.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| self.bytes.get(start..end).unwrap_or_default())
    }

    /// How many words.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Word `index`, if any.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        self.iter().nth(index)
    }

    /// Appends a word.
    pub fn push(&mut self, word: &[u8]) {
        self.bytes.extend_from_slice(word);
        self.end_word();
    }

    /// Appends a command's name, uppercase as clients write it (`RL.TOKENBUCKET`).
    fn push_name(&mut self, command: Command) {
        self.bytes
            .extend(command.name().to_bytes().iter().map(u8::to_ascii_uppercase));
        self.end_word();
    }

    /// Appends a number (or anything displayed).
    fn push_display(&mut self, value: impl fmt::Display) {
        // Writing to a Vec cannot fail.
        let _ = write!(self.bytes, "{value}");
        self.end_word();
    }

    fn end_word(&mut self) {
        self.ends.push(self.bytes.len());
    }

    /// Starts `command`, clearing what was there.
    fn start(&mut self, command: Command) {
        self.clear();
        self.push_name(command);
    }
}

/// Why a call cannot be written as a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// No limits.
    NoLimits,
    /// An in-flight limit without the caller's holder id.
    NoHolder,
    /// A paced token bucket (`MAXWAIT`) among other limits: `RL.MULTI` cannot pace.
    PacedInGroup,
    /// Several limits on a server without `RL.MULTI`.
    NeedsMulti,
    /// A kind without a command of its own on a server without `RL.MULTI`.
    KindNeedsMulti,
    /// The keys and the limits do not pair up.
    KeysAndLimits,
    /// A regional floor that is an in-flight or a paced (`MAXWAIT`) limit.
    NotAFloor,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EncodeError::NoLimits => "a group has at least one limit",
            EncodeError::NoHolder => "an in-flight limit needs a holder id",
            EncodeError::PacedInGroup => "a paced limit (MAXWAIT) needs a call of its own",
            EncodeError::NeedsMulti => "several limits in one call need RL.MULTI",
            EncodeError::KindNeedsMulti => {
                "this algorithm has no command of its own: it needs RL.MULTI"
            }
            EncodeError::KeysAndLimits => "one key per limit",
            EncodeError::NotAFloor => {
                "a policy's regional floor is a limit of units, taken whole and unpaced (not in-flight: RL.REGIONAL's CONCURRENCY form is not encoded here; no MAXWAIT)"
            }
        })
    }
}

impl std::error::Error for EncodeError {}

/// Appends the parameters of `quota` as its kind's command and an `RL.MULTI` limit take them
/// (what [`crate::args::quota::quota`] parses).
pub fn params(quota: &Quota, out: &mut Args) {
    match quota {
        Quota::TokenBucket(params) => {
            out.push_display(params.capacity());
            push_rate(params.interval_ns(), out);
        }
        Quota::SlidingWindow(params) | Quota::FixedWindow(params) => {
            out.push_display(params.limit());
            push_seconds(params.window_us(), out);
        }
        Quota::SlidingLog(params) => {
            out.push_display(params.limit());
            push_seconds(params.window_us(), out);
        }
        Quota::Gcra(params) => push_gcra(params, out),
        Quota::Concurrency(params) => {
            out.push_display(params.limit());
            out.push_display(params.ttl_us() / US_PER_MS);
        }
    }
}

fn push_gcra(params: &GcraParams, out: &mut Args) {
    out.push_display(params.max_burst());
    out.push_display(params.count());
    out.push_display(params.period_s());
}

/// Microseconds as the seconds the parser reads, exact to the microsecond (`60.000000`).
fn push_seconds(us: u64, out: &mut Args) {
    out.push_display(format_args!(
        "{}.{:06}",
        us / US_PER_SECOND,
        us % US_PER_SECOND
    ));
}

/// Appends the shortest decimal rate (tokens per second) whose refill interval, `ceil(1e9 / rate)`
/// as the parser derives it, is exactly `interval_ns`: the rate `1e9 / interval_ns` rounded
/// up to as many digits as that takes (one token per 1440 s is `0.0006944444444445`).
fn push_rate(interval_ns: u64, out: &mut Args) {
    let wanted = u128::from(interval_ns.max(1));
    let mut closest = (1_000_000_000u128, 0u32);
    for decimals in 0..=29u32 {
        let Some(scaled) = 10u128
            .checked_pow(decimals)
            .and_then(|scale| scale.checked_mul(u128::from(NS_PER_SECOND)))
        else {
            break;
        };
        // rate = digits / 10^decimals ≥ 1e9 / interval, so its interval is at most the
        // wanted one; enough digits make it exact (28 do for any refill of 100 years).
        let digits = scaled.div_ceil(wanted);
        closest = (digits, decimals);
        if scaled.div_ceil(digits) == wanted {
            break;
        }
    }
    push_decimal(closest.0, closest.1, out);
}

/// The shortest decimal rate whose refill interval is exactly `interval_ns` (as commands
/// carry it: `"1.666666667"` for 600 ms).
pub fn rate(interval_ns: u64) -> String {
    let mut out = Args::default();
    push_rate(interval_ns, &mut out);
    String::from_utf8_lossy(out.get(0).unwrap_or_default()).into_owned()
}

/// `digits × 10^-decimals` as a plain decimal, without trailing zeros (`25`, 1 → `2.5`).
fn push_decimal(digits: u128, decimals: u32, out: &mut Args) {
    let start = out.bytes.len();
    let decimals = usize::try_from(decimals).unwrap_or(0);
    let width = decimals.saturating_add(1);
    let _ = write!(out.bytes, "{digits:0>width$}");
    let point = out.bytes.len().saturating_sub(decimals);
    // Trailing zeros of the fraction go, and the point with them if nothing is left.
    while out.bytes.len() > point && out.bytes.last() == Some(&b'0') {
        out.bytes.pop();
    }
    if out.bytes.len() > point {
        out.bytes.insert(point, b'.');
    }
    debug_assert!(out.bytes.len() > start);
    out.end_word();
}

/// `PARTIAL MIN m` of a partial grant; nothing for a whole one.
fn push_grant(grant: Grant, out: &mut Args) {
    if let Grant::Partial { min } = grant {
        out.push(b"PARTIAL");
        out.push(b"MIN");
        out.push_display(min.max(1));
    }
}

/// `MAXWAIT ms` of a paced token bucket; nothing otherwise.
fn push_max_wait(quota: &Quota, out: &mut Args) {
    if let Some(wait_ns) = max_wait_ns(quota) {
        out.push(b"MAXWAIT");
        out.push_display(wait_ns / NS_PER_MS);
    }
}

/// How long a paced quota accepts to wait, if it is paced.
fn max_wait_ns(quota: &Quota) -> Option<u64> {
    match quota {
        Quota::TokenBucket(params) if params.max_wait_ns() > 0 => Some(params.max_wait_ns()),
        _ => None,
    }
}

/// `<NAME> key <parameters> cost [PARTIAL MIN m] [MAXWAIT ms]`: a call of a kind with a
/// command of its own (`None` for another kind: see [`group`]).
pub fn call(key: &[u8], call: &CallArgs, out: &mut Args) -> Option<Command> {
    let command = Command::calling(call.quota.kind())?;
    out.start(command);
    out.push(key);
    params(&call.quota, out);
    out.push_display(call.quota.cost());
    push_grant(call.grant, out);
    push_max_wait(&call.quota, out);
    Some(command)
}

/// `RL.MULTI numkeys key... <NAME parameters>... COST c [WEIGHTS w...] [HOLDER id]
/// [PARTIAL MIN m]` (weights only when one is not 1).
pub fn multi(keys: &[&[u8]], limits: &MultiArgs, out: &mut Args) -> Result<Command, EncodeError> {
    if keys.is_empty() {
        return Err(EncodeError::NoLimits);
    }
    if keys.len() != limits.quotas.len() || keys.len() != limits.weights.len() {
        return Err(EncodeError::KeysAndLimits);
    }
    if limits
        .quotas
        .iter()
        .any(|quota| max_wait_ns(quota).is_some())
    {
        return Err(EncodeError::PacedInGroup);
    }
    let holder = limits.quotas.iter().find_map(|quota| match quota {
        Quota::Concurrency(params) => Some(params.holder().ok_or(EncodeError::NoHolder)),
        _ => None,
    });
    let holder = holder.transpose()?;
    out.start(Command::Multi);
    out.push_display(keys.len());
    for key in keys {
        out.push(key);
    }
    for quota in &limits.quotas {
        out.push(quota.kind().command_name().unwrap_or_default().as_bytes());
        params(quota, out);
    }
    out.push(b"COST");
    out.push_display(limits.cost);
    if limits.weights.iter().any(|weight| *weight != 1) {
        out.push(b"WEIGHTS");
        for weight in &limits.weights {
            out.push_display(weight);
        }
    }
    if let Some(holder) = holder {
        out.push(b"HOLDER");
        out.push(holder.as_bytes());
    }
    push_grant(limits.grant, out);
    Ok(Command::Multi)
}

/// `RL.ACQUIRE key limit holder ttl_ms`: an in-flight slot for the quota's holder.
pub fn acquire(key: &[u8], quota: &Quota, out: &mut Args) -> Result<Command, EncodeError> {
    let Quota::Concurrency(params) = quota else {
        return Err(EncodeError::NoHolder);
    };
    let holder = params.holder().ok_or(EncodeError::NoHolder)?;
    out.start(Command::Acquire);
    out.push(key);
    out.push_display(params.limit());
    out.push(holder.as_bytes());
    out.push_display(params.ttl_us() / US_PER_MS);
    Ok(Command::Acquire)
}

/// `CL.THROTTLE key max_burst count period quantity`.
pub fn throttle(key: &[u8], params: &GcraParams, out: &mut Args) -> Command {
    out.start(Command::Throttle);
    out.push(key);
    push_gcra(params, out);
    out.push_display(params.quantity());
    Command::Throttle
}

/// `RL.PEEK key NAME <parameters> cost`: what a call of the quota's cost would get now,
/// changing nothing (a paced bucket's wait is not asked); for an in-flight limit `RL.PEEK
/// key CONCURRENCY limit`: whether a slot is free (a peek holds none).
pub fn peek(key: &[u8], quota: &Quota, out: &mut Args) -> Command {
    out.start(Command::Peek);
    out.push(key);
    out.push(quota.kind().command_name().unwrap_or_default().as_bytes());
    match quota {
        Quota::Concurrency(params) => out.push_display(params.limit()),
        quota => {
            params(quota, out);
            out.push_display(quota.cost());
        }
    }
    Command::Peek
}

/// The command that gives the quota's cost back to `key`: `RL.REFUND key NAME <parameters>
/// cost`; for a GCRA, `CL.THROTTLE` with a negative quantity; for an in-flight limit,
/// `RL.RELEASE key holder` (its slot is given back by releasing its holder).
pub fn refund(key: &[u8], quota: &Quota, out: &mut Args) -> Result<Command, EncodeError> {
    match quota {
        Quota::Concurrency(params) => {
            let holder = params.holder().ok_or(EncodeError::NoHolder)?;
            out.start(Command::Release);
            out.push(key);
            out.push(holder.as_bytes());
            Ok(Command::Release)
        }
        Quota::Gcra(params) => {
            let units = i64::try_from(params.cost()).unwrap_or(i64::MAX);
            let back = params.with_quantity(units.saturating_neg());
            Ok(throttle(key, &back, out))
        }
        quota => {
            out.start(Command::Refund);
            out.push(key);
            out.push(quota.kind().command_name().unwrap_or_default().as_bytes());
            params(quota, out);
            out.push_display(quota.cost());
            Ok(Command::Refund)
        }
    }
}

/// `RL.REGIONAL floor_key lease_key NAME <parameters> cost`: a region's admission of the
/// floor's cost, from its floor then its lease.
pub fn regional(
    floor_key: &[u8],
    lease_key: &[u8],
    floor: &Quota,
    out: &mut Args,
) -> Result<Command, EncodeError> {
    if matches!(floor, Quota::Concurrency(_)) || max_wait_ns(floor).is_some() {
        return Err(EncodeError::NotAFloor);
    }
    out.start(Command::Regional);
    out.push(floor_key);
    out.push(lease_key);
    out.push(floor.kind().command_name().unwrap_or_default().as_bytes());
    params(floor, out);
    out.push_display(floor.cost());
    Ok(Command::Regional)
}

/// `RL.REGIONLEASE key units expires_at_ms`: installs a region's lease.
pub fn region_lease(key: &[u8], lease: &LeaseArgs, out: &mut Args) -> Command {
    out.start(Command::RegionLease);
    out.push(key);
    out.push_display(lease.units);
    out.push_display(lease.expires_at_ms);
    Command::RegionLease
}

/// The command that takes `limits` from `keys` (one key per limit) on a server that has
/// `RL.MULTI` or not (`has_multi`):
///
/// - one limit of a kind with a command of its own: that command, of `cost × weight` units;
/// - one in-flight limit taken whole: `RL.ACQUIRE`;
/// - one GCRA limit on a server without `RL.MULTI`, taken whole: `CL.THROTTLE`;
/// - anything else: `RL.MULTI`.
pub fn group(
    keys: &[&[u8]],
    limits: &MultiArgs,
    has_multi: bool,
    out: &mut Args,
) -> Result<Command, EncodeError> {
    let ([key], [quota], [weight]) = (keys, &limits.quotas[..], &limits.weights[..]) else {
        return if has_multi {
            multi(keys, limits, out)
        } else if keys.is_empty() {
            Err(EncodeError::NoLimits)
        } else {
            Err(EncodeError::NeedsMulti)
        };
    };
    let weighted = || quota.with_cost(limits.cost.saturating_mul((*weight).max(1)));
    let single = CallArgs {
        quota: weighted(),
        grant: limits.grant,
    };
    if let Some(command) = call(key, &single, out) {
        return Ok(command);
    }
    match quota {
        Quota::Concurrency(_) if limits.grant == Grant::Whole => acquire(key, quota, out),
        Quota::Gcra(params) if !has_multi && limits.grant == Grant::Whole => {
            let units = i64::try_from(limits.cost.saturating_mul((*weight).max(1)));
            Ok(throttle(
                key,
                &params.with_quantity(units.unwrap_or(i64::MAX)),
                out,
            ))
        }
        _ if has_multi => multi(keys, limits, out),
        _ => Err(EncodeError::KindNeedsMulti),
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
