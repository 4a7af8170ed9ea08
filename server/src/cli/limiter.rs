//! The limiter's own settings: leases, what a check does when the store is out of reach,
//! this replica's share, and how many key sets its tables keep.

use redis_ratelimit_client::Fallback;

use super::values::{FailureMode, at_least_one, at_least_one_u64, count_or_none};

/// The flags of the client library's limiter.
#[derive(Clone, Debug, clap::Args)]
pub struct Limiter {
    /// Claim N units per store call and spend them from memory (default: off)
    #[arg(
        long,
        value_name = "N",
        default_value = "0",
        hide_default_value = true,
        value_parser = count_or_none
    )]
    pub lease: ::std::option::Option<u64>,

    /// What a check does when the store is out of reach
    #[arg(long, value_name = "MODE", value_enum, default_value = "local")]
    pub failure_mode: FailureMode,

    /// Replicas of this service: the local fallback enforces quota/N
    #[arg(long, value_name = "N", default_value = "1", value_parser = at_least_one_u64)]
    pub replicas: u64,

    /// The most distinct key sets each of the limiter's per-key tables keeps (the store's
    /// last answers the failure mode continues from, denials remembered, leases, the local
    /// failure mode's states; and admitted requests holding in-flight slots): past it, the
    /// expired entries go, or else the one answered longest ago
    #[arg(
        long,
        value_name = "N",
        default_value_t = redis_ratelimit_client::expiring::DEFAULT_MAX_KEYS,
        value_parser = at_least_one
    )]
    pub max_tracked_keys: usize,
}

impl Limiter {
    /// The failure mode.
    pub fn failure(&self) -> Fallback {
        self.failure_mode.into()
    }
}
