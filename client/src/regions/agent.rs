//! One refresh ([`refresh`]): the grants asked of home, then installed in the region as
//! leases; and the agent's task repeating it every `P` ([`run`]).

use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::time::Instant;

use super::config::{AgentConfig, HotLimit};
use super::error::AgentError;
use super::grants::{ask_home, commands_for, read_grants, read_time};
use super::lease::{install, lease_end_ms};

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
