//! A region's lease agent: one quota across regions (`docs/regions.md`).
//!
//! Each region's clients call `RL.REGIONAL floor_key lease_key ...` on their own Redis: the
//! floor first, then the leased balance. The agent keeps those balances topped up from the
//! home region's pool: every period `P` it asks home, in **one pipelined call**, for a
//! `PARTIAL` grant of up to `k` units of each hot limit's pool key, ends the batch with
//! `WAIT n` on the home primary (a grant counts only once a replica has it, so a failover
//! to a replica that acknowledged loses none: with more than one replica, chain them, or a
//! promotion of the one that did not acknowledge loses grants; see `docs/regions.md`), and
//! installs what was granted with `RL.REGIONLEASE` in the region,
//! each lease ending `T = P + a` after the request was **sent** (read on the region's own
//! clock before the grants exist, derated for drift), so no lease outlives `T` in home time.
//! A window pool's lease (fixed or sliding window) also ends no later than the home window
//! it was granted in: the batch opens with home's `TIME`, and the lease lives at most what
//! was left of that window then, counted from the sending (see `lease_end_ms`).
//!
//! An in-flight pool's slots are leased as holders of the pool: `k` acquires
//! (`RL.ACQUIRE pool_key limit <slot_holder>:<i> T_ms`, `i` in `0..k`) in the same batch, the
//! lease's units the slots acquired. The holder ids are the region's and the slot's index, so
//! the next refresh renews them rather than taking more; they lapse at home `T` after the
//! last grant (no give-back). The region gives a leased slot only to a call whose holder ends
//! by the lease's end (`RL.REGIONAL ... CONCURRENCY`), so every call on a leased slot ends
//! while its pool holder lives.
//!
//! A lease replaces the previous one; the unspent units of the previous one lapse (the exact
//! mode: give-backs cost exactness, see `docs/regions.md`). A batch whose `WAIT` did not
//! reach its replicas is installed not at all: its grants may not survive a failover, so the
//! agent counts them as not granted (safe: units are lost, never doubled).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::time::window_start_us;
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::args::regional::LeaseArgs;
use redis_ratelimit_wire::encode::{self, Args, EncodeError};
use tokio::time::Instant;

use redis_ratelimit_core::kinds::Kind;

use crate::Algorithm;
use crate::store::StoreBackend;
use crate::store::backend;

/// One global limit this region leases units of.
#[derive(Clone, Debug)]
pub struct HotLimit {
    /// The pool's key in the home Redis.
    pub pool_key: String,
    /// The pool's algorithm and parameters, as home holds it.
    pub pool: Algorithm,
    /// The lease's key in the region's Redis (in the floor key's slot on a Cluster: give
    /// both one hash tag).
    pub lease_key: String,
    /// `k`: the most units one lease holds (at least the region's demand over one `T`).
    pub lease_units: u64,
    /// The prefix of the pool holders an in-flight pool's leased slots are
    /// (`<slot_holder>:<i>`): the region's name, unique among the regions leasing the pool
    /// and the same at every refresh (which then renews them). Unused by other kinds.
    pub slot_holder: String,
}

/// How the agent leases.
#[derive(Clone, Copy, Debug)]
pub struct AgentConfig {
    /// `P`: how often the agent asks home.
    pub period: Duration,
    /// `a`: at least one round trip to home plus the `WAIT`; a lease lives `T = P + a`.
    pub margin: Duration,
    /// `ρ`, in parts per million: how far the region's clock may run fast of home's. A
    /// lease lives `⌊T·(1 − ρ)⌋` of the region's time.
    pub drift_ppm: u32,
    /// Replicas of the home primary that must have a batch (`WAIT n`) before its grants
    /// count; 0 skips the `WAIT` (a failover may then lose grants: see `docs/regions.md`).
    pub wait_replicas: u32,
    /// How long the `WAIT` may take. The home connection's own response timeout (the redis
    /// crate's 1.x default is 500 ms) must be longer, or a slow `WAIT` fails the refresh.
    pub wait_timeout: Duration,
    /// What home runs: the module's commands, or the Functions library (the grants are then
    /// sent as `FCALL rl_tokenbucket 1 pool_key ...`, the same grants call for call).
    pub home: ServerForm,
    /// What the region runs (the installs are `RL.REGIONLEASE` or `FCALL rl_regionlease`).
    pub region: ServerForm,
    /// How a sliding log pool's leases are counted at home.
    pub log_leases: LogLeases,
}

/// How a sliding log pool's grants are counted at home.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogLeases {
    /// As if stamped at the lease's end: the pool is asked with its window lengthened by
    /// `T`, so every unit spent from a lease is counted for a whole window after (exact).
    #[default]
    StampedAtEnd,
    /// As given: the pool is asked as [`HotLimit::pool`] says (a caller that widens the
    /// window itself, or measures the plain `T`-long grant, which no exact bound covers).
    AsGiven,
}

/// What a server answers the agent's calls with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerForm {
    /// The module's `RL.*` commands.
    #[default]
    Module,
    /// The Functions library (`functions/ratelimit.lua`) through `FCALL`; it must be loaded
    /// there (the agent does not load it).
    Functions,
}

impl ServerForm {
    /// The module command `words` as this server takes it.
    fn command(self, words: &Args) -> redis::Cmd {
        let backend = match self {
            ServerForm::Module => StoreBackend::Module,
            ServerForm::Functions => StoreBackend::Functions,
        };
        backend::command(backend, "", words)
    }
}

impl AgentConfig {
    /// `⌊(P + a)·(1 − ρ)⌋` in whole milliseconds: how long, on the region's clock, a lease
    /// lives after its request was sent.
    pub fn lease_lifetime_ms(&self) -> i64 {
        let lifetime_us = self.period.saturating_add(self.margin).as_micros();
        let kept_ppm = 1_000_000u128.saturating_sub(u128::from(self.drift_ppm));
        let derated_ms = lifetime_us.saturating_mul(kept_ppm) / 1_000_000 / 1_000;
        i64::try_from(derated_ms).unwrap_or(i64::MAX)
    }
}

/// What one refresh did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    /// Units home granted each hot limit, in order (0: the pool had none).
    pub granted: Vec<u64>,
    /// The units each replaced lease had left when the new one was installed (unspent
    /// units that lapse; a limit whose lease is replaced whole was not hot), in order;
    /// `None` for a lease not installed (a fixed window's lease that would have ended before
    /// home answered).
    pub replaced: Vec<Option<u64>>,
    /// The end of each lease (Unix ms, region clock), in order: `T` after the request was
    /// sent, or sooner for a fixed window pool, whose lease ends with the home window it was
    /// granted in.
    pub expires_at_ms: Vec<i64>,
}

/// Why a refresh installed nothing.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The home Redis failed or refused the batch.
    #[error("home: {0}")]
    Home(redis::RedisError),
    /// The region's Redis failed or refused the installs.
    #[error("region: {0}")]
    Region(redis::RedisError),
    /// A pool cannot be asked for a grant.
    #[error("pool {key}: {error}")]
    Encode {
        /// The pool key.
        key: String,
        /// Why.
        error: EncodeError,
    },
    /// A pool that cannot be leased as asked (a sliding log whose window and `T` make no
    /// log).
    #[error("pool {key}: {reason}")]
    Pool {
        /// The pool key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Home's reply was not a grant.
    #[error("home answered {reply:?} for pool {key}")]
    Reply {
        /// The pool key.
        key: String,
        /// What home sent.
        reply: String,
    },
    /// The batch reached fewer replicas than asked: its grants are not installed.
    #[error("the batch reached {acknowledged} of {wanted} home replicas: not installed")]
    NotAcknowledged {
        /// Replicas that acknowledged.
        acknowledged: i64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The grants came back after their leases would have ended: not installed.
    #[error("home answered after {elapsed_ms} ms, past the lease lifetime")]
    TooLate {
        /// How long home took.
        elapsed_ms: u128,
    },
}

/// One refresh of `limits`: the grants from `home` (one pipeline, then `WAIT`), installed in
/// `region` (one pipeline). Nothing is installed unless every grant was acknowledged.
pub async fn refresh<H, R>(
    home: &mut H,
    region: &mut R,
    limits: &[HotLimit],
    config: &AgentConfig,
) -> Result<Refresh, AgentError>
where
    H: ConnectionLike + Send,
    R: ConnectionLike + Send,
{
    let lifetime_ms = config.lease_lifetime_ms();
    // Every wait of a refresh is bounded by the lease's lifetime: grants later than that are
    // never installed anyway, and a stalled side fails the refresh, not the agent.
    let lifetime = Duration::from_millis(u64::try_from(lifetime_ms).unwrap_or(0));
    // The lease counts from now, before any grant exists, on the clock that will spend it.
    let time_cmd = redis::cmd("TIME");
    let time = time_cmd.query_async::<(i64, i64)>(region);
    let (seconds, micros) = match tokio::time::timeout(lifetime, time).await {
        Ok(time) => time.map_err(AgentError::Region)?,
        Err(_) => return Err(region_stalled()),
    };
    let sent_at = Instant::now();
    let sent_at_ms = seconds.saturating_mul(1_000).saturating_add(micros / 1_000);
    // Grants that come back after the lease would have ended are never installed, so home
    // is not waited for longer than that.
    let replies = match tokio::time::timeout(lifetime, ask_home(home, limits, config)).await {
        Ok(replies) => replies?,
        Err(_) => {
            return Err(AgentError::TooLate {
                elapsed_ms: sent_at.elapsed().as_millis(),
            });
        }
    };
    let Some((home_time, mut rest)) = replies.split_first() else {
        return Err(AgentError::Reply {
            key: "TIME".into(),
            reply: "no reply".into(),
        });
    };
    let home_before_us = read_time(home_time)?;
    let mut grants = Vec::with_capacity(limits.len());
    for limit in limits {
        let Some((own, after)) = rest.split_at_checked(commands_for(limit)) else {
            return Err(AgentError::Reply {
                key: limit.pool_key.clone(),
                reply: "no reply".into(),
            });
        };
        grants.push(read_grants(limit, own)?);
        rest = after;
    }
    let granted: Vec<u64> = grants.iter().map(|grant| grant.units).collect();
    let expires_at_ms: Vec<i64> = limits
        .iter()
        .map(|limit| lease_end_ms(limit, sent_at_ms, home_before_us, lifetime_ms, config))
        .collect();
    if config.wait_replicas > 0 {
        let acknowledged = match rest.first() {
            Some(redis::Value::Int(count)) => *count,
            _ => 0,
        };
        if acknowledged < i64::from(config.wait_replicas) {
            return Err(AgentError::NotAcknowledged {
                acknowledged,
                wanted: config.wait_replicas,
            });
        }
    }
    let elapsed = sent_at.elapsed();
    if elapsed.as_millis() >= u128::try_from(lifetime_ms).unwrap_or(0) {
        return Err(AgentError::TooLate {
            elapsed_ms: elapsed.as_millis(),
        });
    }
    // A lease ending before now (region time, at least `sent + elapsed`) is not installed.
    let elapsed_ms = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
    let now_at_least_ms = sent_at_ms.saturating_add(elapsed_ms);
    // The installs are bounded like the grants (an install answered late may still land:
    // harmless, its end is absolute).
    let installs = install(
        region,
        limits,
        &granted,
        &expires_at_ms,
        now_at_least_ms,
        config.region,
    );
    let replaced = match tokio::time::timeout(lifetime, installs).await {
        Ok(replaced) => replaced?,
        Err(_) => return Err(region_stalled()),
    };
    Ok(Refresh {
        granted,
        replaced,
        expires_at_ms,
    })
}

/// The region did not answer within a lease's lifetime.
fn region_stalled() -> AgentError {
    let stalled = std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the region did not answer within the lease's lifetime",
    );
    AgentError::Region(redis::RedisError::from(stalled))
}

/// Sends home's `TIME`, every grant of the batch, then `WAIT`, in one pipeline (`TIME`
/// first: see [`lease_end_ms`] for why before the grants).
async fn ask_home<H: ConnectionLike + Send>(
    home: &mut H,
    limits: &[HotLimit],
    config: &AgentConfig,
) -> Result<Vec<redis::Value>, AgentError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    let mut words = Args::default();
    for limit in limits {
        let pool = pool_asked(limit, config)?;
        if let Quota::Concurrency(params) = pool.as_quota() {
            for index in 0..commands_for(limit) {
                let holder = slot_holder(limit, index)?;
                let slot = Quota::Concurrency(Box::new(params.with_holder(holder)));
                encode::acquire(limit.pool_key.as_bytes(), &slot, &mut words).map_err(|error| {
                    AgentError::Encode {
                        key: limit.pool_key.clone(),
                        error,
                    }
                })?;
                pipe.add_command(config.home.command(&words));
            }
            continue;
        }
        let grant = MultiArgs {
            quotas: vec![pool.as_quota().clone()],
            weights: vec![1],
            cost: limit.lease_units.max(1),
            grant: Grant::Partial { min: 1 },
        };
        encode::group(&[limit.pool_key.as_bytes()], &grant, true, &mut words).map_err(|error| {
            AgentError::Encode {
                key: limit.pool_key.clone(),
                error,
            }
        })?;
        pipe.add_command(config.home.command(&words));
    }
    if config.wait_replicas > 0 {
        pipe.cmd("WAIT")
            .arg(config.wait_replicas)
            .arg(u64::try_from(config.wait_timeout.as_millis()).unwrap_or(u64::MAX));
    }
    pipe.query_async(home).await.map_err(AgentError::Home)
}

/// How many commands of the batch ask `limit`'s pool: `k` acquires for an in-flight pool
/// (one per slot), one grant for any other.
fn commands_for(limit: &HotLimit) -> usize {
    match limit.pool.kind() {
        Kind::Concurrency => usize::try_from(limit.lease_units.max(1)).unwrap_or(usize::MAX),
        _ => 1,
    }
}

/// The pool holder of leased slot `index`: `<slot_holder>:<index>`.
fn slot_holder(limit: &HotLimit, index: usize) -> Result<HolderId, AgentError> {
    let id = format!("{}:{index}", limit.slot_holder);
    HolderId::new(id.as_bytes()).map_err(|_| AgentError::Pool {
        key: limit.pool_key.clone(),
        reason: format!("the slot holder '{id}' is not 1 to 128 bytes"),
    })
}

/// The pool as the grant asks it. An in-flight pool is asked for holders living `T = P + a`
/// (rounded up to whole milliseconds: in home time they outlive every lease of the batch,
/// which ends by `grant + T`), whatever ttl it was given. A sliding log pool is asked with its window lengthened by
/// `T = P + a`: a lease's units count at home from the grant until `grant + T + W`, as if
/// stamped at the lease's end (`grant + T` at the latest, home time), so every unit spent
/// from the lease is counted for a whole `W` after it was spent (`docs/regions.md`: the
/// exact sliding log bound). Every region leasing one pool must use the same `T` (or the
/// largest): the pool counts each grant for the window its caller asks.
fn pool_asked(limit: &HotLimit, config: &AgentConfig) -> Result<Algorithm, AgentError> {
    let invalid = |error: crate::algorithm::AlgorithmError| AgentError::Pool {
        key: limit.pool_key.clone(),
        reason: error.to_string(),
    };
    if limit.pool.kind() == Kind::Concurrency {
        let lifetime = config.period.saturating_add(config.margin);
        let whole_ms = u64::try_from(lifetime.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        return Algorithm::concurrency(limit.pool.quota(), Duration::from_millis(whole_ms))
            .map_err(invalid);
    }
    if limit.pool.kind() != Kind::SlidingLog || config.log_leases == LogLeases::AsGiven {
        return Ok(limit.pool.clone());
    }
    let lifetime = config.period.saturating_add(config.margin);
    let window = limit.pool.window().saturating_add(lifetime);
    Algorithm::sliding_log(limit.pool.quota(), window).map_err(invalid)
}

/// What home's reply to one grant says.
struct HomeGrant {
    /// The units granted: field 1 of a partial grant's reply.
    units: u64,
}

/// Home's `TIME` reply (`[seconds, microseconds]`) as Unix microseconds.
fn read_time(reply: &redis::Value) -> Result<i64, AgentError> {
    let number = |field: Option<&redis::Value>| match field {
        Some(redis::Value::BulkString(digits)) => std::str::from_utf8(digits)
            .ok()
            .and_then(|digits| digits.parse::<i64>().ok()),
        Some(redis::Value::Int(value)) => Some(*value),
        _ => None,
    };
    let fields = match reply {
        redis::Value::Array(fields) => fields.as_slice(),
        _ => &[],
    };
    match (number(fields.first()), number(fields.get(1))) {
        (Some(seconds), Some(micros)) if seconds >= 0 && (0..1_000_000).contains(&micros) => {
            Ok(seconds.saturating_mul(1_000_000).saturating_add(micros))
        }
        _ => Err(AgentError::Reply {
            key: "TIME".into(),
            reply: format!("{reply:?}"),
        }),
    }
}

/// What home's replies to `limit`'s commands grant: an in-flight pool's slots acquired (field
/// 1 of each `RL.ACQUIRE`, 1 or 0), or the one grant's units.
fn read_grants(limit: &HotLimit, replies: &[redis::Value]) -> Result<HomeGrant, AgentError> {
    if limit.pool.kind() != Kind::Concurrency {
        return match replies {
            [reply] => read_grant(limit, reply),
            _ => Err(AgentError::Reply {
                key: limit.pool_key.clone(),
                reply: format!("{replies:?}"),
            }),
        };
    }
    let mut units = 0;
    for reply in replies {
        units = read_grant(limit, reply)?.units.min(1).saturating_add(units);
    }
    Ok(HomeGrant { units })
}

fn read_grant(limit: &HotLimit, reply: &redis::Value) -> Result<HomeGrant, AgentError> {
    let fields = match reply {
        redis::Value::Array(fields) => fields.as_slice(),
        _ => &[],
    };
    match fields.first() {
        Some(redis::Value::Int(units)) if *units >= 0 => Ok(HomeGrant {
            units: u64::try_from(*units).unwrap_or(0),
        }),
        _ => Err(AgentError::Reply {
            key: limit.pool_key.clone(),
            reply: format!("{reply:?}"),
        }),
    }
}

/// A lease's end on the region's clock: `T` (derated) after the request was sent; for a
/// window pool (fixed or sliding window), no later than the end of the home window the
/// units were granted in.
///
/// Both kinds align windows to Unix multiples of `W` ([`window_start_us`], in the module
/// and the Functions library's `window_start` alike), and count a grant in
/// the window holding home's clock at the grant (or a later one: a sliding window whose
/// stored start is ahead of the clock counts in the stored window). `home_before_us` is
/// home's `TIME`, sent in the same pipeline **before** the grants, so on home's clock it is
/// at or before every grant (one connection's commands run in order; only home's clock
/// stepping back in the µs between them would break this): the window holding it is the grants' window or an earlier one,
/// and its end is no later than theirs. (An instant after the grants would not do: it may
/// lie in the next window, whose end is `W` too late.) The span from `home_before_us` to
/// that end, in home time, is counted from the sending on the region's clock, which came
/// before `TIME` was read, and derated for drift: the lease ends before the window does.
/// A batch straddling a window's end then ends its leases early, at the earlier window's
/// end (units lost, never spent in a window they were not counted in). A sliding window's
/// `reset_after_ms` is when its estimate reaches 0, not the window's end, so it is not used.
fn lease_end_ms(
    limit: &HotLimit,
    sent_at_ms: i64,
    home_before_us: i64,
    lifetime_ms: i64,
    config: &AgentConfig,
) -> i64 {
    let mut lives_ms = lifetime_ms;
    if matches!(limit.pool.kind(), Kind::FixedWindow | Kind::SlidingWindow) {
        let window_us = u64::try_from(limit.pool.window().as_micros()).unwrap_or(u64::MAX);
        let window_end_us = window_start_us(home_before_us, window_us)
            .saturating_add(i64::try_from(window_us).unwrap_or(i64::MAX));
        let window_left_ms = window_end_us.saturating_sub(home_before_us).max(0) / 1_000;
        let kept_ppm = 1_000_000i64.saturating_sub(i64::from(config.drift_ppm));
        let derated_ms = window_left_ms.saturating_mul(kept_ppm) / 1_000_000;
        lives_ms = lives_ms.min(derated_ms);
    }
    sent_at_ms.saturating_add(lives_ms)
}

/// Installs every granted lease still to end after `now_at_least_ms` in one pipeline; the
/// units each replaced lease had left (`None`: not installed).
async fn install<R: ConnectionLike + Send>(
    region: &mut R,
    limits: &[HotLimit],
    granted: &[u64],
    expires_at_ms: &[i64],
    now_at_least_ms: i64,
    form: ServerForm,
) -> Result<Vec<Option<u64>>, AgentError> {
    let mut pipe = redis::pipe();
    let mut words = Args::default();
    let live: Vec<bool> = expires_at_ms
        .iter()
        .map(|end_ms| *end_ms > now_at_least_ms)
        .collect();
    for (((limit, units), end_ms), _) in limits
        .iter()
        .zip(granted)
        .zip(expires_at_ms)
        .zip(&live)
        .filter(|(_, live)| **live)
    {
        let lease = LeaseArgs {
            units: *units,
            expires_at_ms: *end_ms,
        };
        encode::region_lease(limit.lease_key.as_bytes(), &lease, &mut words);
        pipe.add_command(form.command(&words));
    }
    let mut replaced: Vec<u64> = if live.contains(&true) {
        pipe.query_async(region).await.map_err(AgentError::Region)?
    } else {
        Vec::new()
    };
    replaced.reverse();
    Ok(live
        .iter()
        .map(|installed| installed.then(|| replaced.pop().unwrap_or(0)))
        .collect())
}

/// Refreshes `limits` every `config.period` until the task is dropped, handing each
/// refresh's result to `report` (a refresh that fails installs nothing; the region then
/// spends its current lease until it ends, then its floor alone says `home_unreachable`).
pub async fn run<H, R>(
    mut home: H,
    mut region: R,
    limits: Vec<HotLimit>,
    config: AgentConfig,
    mut report: impl FnMut(Result<Refresh, AgentError>) + Send,
) where
    H: ConnectionLike + Send,
    R: ConnectionLike + Send,
{
    let mut ticks = tokio::time::interval(config.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        report(refresh(&mut home, &mut region, &limits, &config).await);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lives_p_plus_a_derated_for_drift() {
        let config = AgentConfig {
            period: Duration::from_millis(1_000),
            margin: Duration::from_millis(250),
            drift_ppm: 0,
            wait_replicas: 1,
            wait_timeout: Duration::from_millis(100),
            home: ServerForm::Module,
            region: ServerForm::Module,
            log_leases: LogLeases::StampedAtEnd,
        };
        assert_eq!(config.lease_lifetime_ms(), 1_250);
        let drifting = AgentConfig {
            drift_ppm: 50_000,
            ..config
        };
        // ⌊1250 × 0.95⌋ = 1187.
        assert_eq!(drifting.lease_lifetime_ms(), 1_187);
    }
}
