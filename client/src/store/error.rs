//! Why a store call failed ([`StoreError`]): an outage (fall back) or a refusal (the
//! caller's error).

use std::fmt;

/// Why a store call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The store did not answer in time.
    Timeout,
    /// The store is unreachable or unavailable (connection refused or dropped, cluster down,
    /// loading, failing over): worth falling back and retrying later.
    Unavailable(String),
    /// The store answered with an error that retrying will not fix (a key holding another
    /// type, an unknown command, a reply of an unexpected shape).
    Server(String),
    /// The store refused the request's arguments (a cost or weight out of its range, a
    /// limit above a server setting): the caller's error, never an outage or a fallback.
    Invalid(String),
    /// The store cannot be set up as given (an unparsable URL, a cluster without nodes).
    Config(String),
}

impl StoreError {
    /// Whether the error says the store is unreachable (counts towards the circuit breaker
    /// and triggers the fallback) rather than that it refused the request.
    pub fn is_unavailability(&self) -> bool {
        matches!(self, Self::Timeout | Self::Unavailable(_))
    }

    /// The label used in the `ratelimit_store_errors_total` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Unavailable(_) => "unavailable",
            Self::Server(_) => "server",
            Self::Invalid(_) => "invalid",
            Self::Config(_) => "config",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => write!(f, "the store did not answer in time"),
            Self::Unavailable(detail) => write!(f, "the store is unavailable: {detail}"),
            Self::Server(detail) | Self::Invalid(detail) => {
                write!(f, "the store refused the request: {detail}")
            }
            Self::Config(detail) => write!(f, "bad store configuration: {detail}"),
        }
    }
}

impl std::error::Error for StoreError {}
