//! What every RLQS stream shares: the rules, the store, the demand per limit, the settings,
//! the count of streams and the stop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use redis_ratelimit_client::store::Store;
use tokio_util::sync::CancellationToken;

use super::{fleet, share};
use crate::engine::Engine;

/// Tokens charged and refunded (`what`).
pub const TOKENS: &str = "ratelimit_rlqs_tokens_total";
/// Stream messages received (reports) and sent (assignments), by `direction`.
pub const MESSAGES: &str = "ratelimit_rlqs_messages_total";

/// Describes the RLQS metrics (docs/operating.md).
pub fn describe() {
    metrics::describe_counter!(
        TOKENS,
        "RLQS tokens charged to the limits in Redis for assignments, and refunded from Envoy's reports, by what (charged, refunded)"
    );
    metrics::describe_counter!(
        MESSAGES,
        "RLQS stream messages, by direction (received: usage reports, sent: assignments)"
    );
}

/// How assignments are made.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// An assignment's life; renewed every half of it.
    pub ttl: Duration,
    /// The longest bucket id entry (key or value), as for RLS descriptors.
    pub max_value_bytes: usize,
}

/// What every stream shares.
pub struct Shared {
    pub(super) engine: Arc<Engine>,
    pub(super) store: Arc<dyn Store>,
    pub(super) demand: share::Demand,
    /// The other services' demand on the limits in contention.
    pub(super) fleet: fleet::Fleet,
    pub(super) settings: Settings,
    pub(super) streams: AtomicUsize,
    pub(super) next_stream: AtomicU64,
    pub(super) stopping: CancellationToken,
    /// Tokens charged and refunded so far (the metric's totals, readable in process: the
    /// bound test takes the outstanding tokens from the service's own accounting).
    pub(super) charged: AtomicU64,
    pub(super) refunded: AtomicU64,
}
