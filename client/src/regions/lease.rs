//! A lease's end on the region's clock, and the leases installed in the region
//! (`RL.REGIONLEASE`, one pipeline).

use redis::aio::ConnectionLike;
use redis_ratelimit_core::kinds::Kind;
use redis_ratelimit_core::time::window_start_us;
use redis_ratelimit_wire::args::regional::LeaseArgs;
use redis_ratelimit_wire::encode::{self, Args};

use super::config::{AgentConfig, HotLimit, ServerForm};
use super::error::AgentError;

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
pub(super) fn lease_end_ms(
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
pub(super) async fn install<R: ConnectionLike + Send>(
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
