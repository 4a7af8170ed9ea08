//! The replies of limiter commands, built in one place.
//!
//! Every limiter command replies with an array of five integers, identical under RESP2 and
//! RESP3. The outcome type decides which five: `RL.*` commands send a [`Decision`],
//! `CL.THROTTLE` sends redis-cell's fields.

use super::api::Call;
use crate::core::Decision;
use crate::core::gcra::{CellOutcome, cell_reply};

/// An outcome a limiter command replies with.
pub trait Reply {
    /// Whether the call was admitted (for the `INFO` counters).
    fn allowed(&self) -> bool;
    /// The five integers sent to the client.
    fn fields(&self) -> [i64; 5];
}

/// `[allowed, remaining, retry_after_ms, reset_after_ms, limit]`.
impl Reply for Decision {
    fn allowed(&self) -> bool {
        self.allowed
    }
    fn fields(&self) -> [i64; 5] {
        self.reply_fields()
    }
}

/// `[limited, limit, remaining, retry_after_s, reset_after_s]`, as redis-cell sends it.
impl Reply for CellOutcome {
    fn allowed(&self) -> bool {
        !self.limited
    }
    fn fields(&self) -> [i64; 5] {
        cell_reply(self)
    }
}

/// Sends `reply` to the client.
pub fn send(call: &Call<'_>, reply: &impl Reply) {
    call.reply_integers(&reply.fields());
}
