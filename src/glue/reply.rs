//! The replies of limiter commands, built in one place.

use super::api::Call;
use crate::core::Decision;

/// How a decision is presented to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyShape {
    /// `[allowed, remaining, retry_after_ms, reset_after_ms, limit]`: every `RL.*` command.
    RateLimit,
}

/// Replies with `decision` in `shape`: an array of five integers, identical under RESP2 and
/// RESP3.
pub fn send(call: &Call<'_>, shape: ReplyShape, decision: &Decision) {
    let fields = match shape {
        ReplyShape::RateLimit => decision.reply_fields(),
    };
    call.reply_integers(&fields);
}
