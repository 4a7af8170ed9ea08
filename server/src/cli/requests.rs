//! What one request may hold.

use super::values::{at_least_one, limit_overrides, max_descriptors};

/// The most a request may carry, checked before anything is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct Bounds {
    /// Descriptors per request, at most 16 (one RL.MULTI takes 16 keys)
    #[arg(long, value_name = "N", default_value = "16", value_parser = max_descriptors)]
    pub max_descriptors: usize,

    /// Entries per descriptor
    #[arg(long, value_name = "N", default_value = "8", value_parser = at_least_one)]
    pub max_entries: usize,

    /// Bytes of a key, value or domain
    #[arg(long, value_name = "N", default_value = "256", value_parser = at_least_one)]
    pub max_value_bytes: usize,

    /// A descriptor's 'limit' override (the caller's own limit, as in the reference):
    /// honoured, or refused as a bad request
    #[arg(
        long,
        value_name = "POLICY",
        action = clap::ArgAction::Set,
        default_value = "allow",
        value_parser = limit_overrides()
    )]
    pub limit_overrides: bool,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_descriptors: 16,
            max_entries: 8,
            max_value_bytes: 256,
            limit_overrides: true,
        }
    }
}
