//! Why a refresh installed nothing.

use redis_ratelimit_wire::encode::EncodeError;

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
