//! The parameters every windowed limiter shares: a limit of units per window of a given
//! length, for a call of some cost. Fixed and sliding windows take them as they are; the
//! sliding log bounds its limit by a server setting instead (see
//! [`SlidingLogParams`](super::sliding_log::SlidingLogParams)).

use std::time::Duration;

use super::decision::cost_is_a_field;
use super::facts::{QuotaFacts, part};
use super::time::{MAX_WINDOW_US, MIN_WINDOW_US};

/// Largest limit of a windowed limiter: counts are stored as `u32`, which keeps each state
/// at 16 bytes.
pub const MAX_WINDOW_LIMIT: u64 = u32::MAX as u64;

/// Why the parameters of a windowed limiter (fixed or sliding) are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowParamError {
    /// The limit is above [`MAX_WINDOW_LIMIT`].
    LimitTooLarge,
    /// The window is shorter than [`MIN_WINDOW_US`].
    WindowTooShort,
    /// The window is longer than [`MAX_WINDOW_US`].
    WindowTooLong,
}

/// Validated parameters of one windowed call (`RL.FIXED` and `RL.SLIDING` share them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowParams {
    limit: u64,
    window_us: u64,
    cost: u64,
}

impl WindowParams {
    /// Validates at most `limit` units per window of `window_us` microseconds, for a call
    /// costing `cost` units. A cost above the limit is valid: it is always denied.
    ///
    /// Precondition (checked in debug builds only, like the token bucket's): `limit ≥ 1`
    /// and `cost ≥ 1`; the argument parser already refuses zero. Release builds treat a zero
    /// as 1 rather than fail.
    pub fn new(limit: u64, window_us: u64, cost: u64) -> Result<Self, WindowParamError> {
        debug_assert!(limit >= 1 && cost >= 1);
        if limit > MAX_WINDOW_LIMIT {
            return Err(WindowParamError::LimitTooLarge);
        }
        Self::with_window_checked(
            limit,
            window_us,
            cost,
            WindowParamError::WindowTooShort,
            WindowParamError::WindowTooLong,
        )
    }

    /// The window length check every windowed limiter shares: `window_us` must lie in
    /// `[MIN_WINDOW_US, MAX_WINDOW_US]`, else the caller's own `too_short` or `too_long`
    /// error. The limit is the caller's to bound (a fixed or sliding window by
    /// [`MAX_WINDOW_LIMIT`], a sliding log by its server setting); zero limits and costs are
    /// read as 1.
    pub(crate) fn with_window_checked<E>(
        limit: u64,
        window_us: u64,
        cost: u64,
        too_short: E,
        too_long: E,
    ) -> Result<Self, E> {
        if window_us < MIN_WINDOW_US {
            return Err(too_short);
        }
        if window_us > MAX_WINDOW_US {
            return Err(too_long);
        }
        Ok(Self {
            limit: limit.max(1),
            window_us,
            cost: cost.max(1),
        })
    }

    /// Units admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Length of a window, in microseconds.
    pub fn window_us(&self) -> u64 {
        self.window_us
    }
}

cost_is_a_field!(WindowParams);

impl QuotaFacts for WindowParams {
    /// The limit of one window.
    fn advertised_quota(&self) -> u64 {
        self.limit
    }

    /// The window's length.
    fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }

    /// `limit / replicas` units in the same window.
    fn share(&self, replicas: u64) -> Option<Self> {
        Some(Self {
            limit: part(self.limit, replicas)?,
            ..*self
        })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::decision::CallCost;
    use crate::testing::{SECOND, window_params as params};

    #[test]
    fn parameters_are_validated() {
        assert!(WindowParams::new(MAX_WINDOW_LIMIT, MIN_WINDOW_US, u64::MAX).is_ok());
        assert!(WindowParams::new(1, MAX_WINDOW_US, 1).is_ok());
        assert_eq!(
            WindowParams::new(MAX_WINDOW_LIMIT + 1, SECOND as u64, 1),
            Err(WindowParamError::LimitTooLarge)
        );
        assert_eq!(
            WindowParams::new(1, MIN_WINDOW_US - 1, 1),
            Err(WindowParamError::WindowTooShort)
        );
        assert_eq!(
            WindowParams::new(1, MAX_WINDOW_US + 1, 1),
            Err(WindowParamError::WindowTooLong)
        );
        let p = params(7, 1_500, 3);
        assert_eq!((p.limit(), p.window_us(), p.cost()), (7, 1_500, 3));
    }
}
