//! Which rate-limit header fields the service answers with, and under what names (the
//! command line's and the reference's settings); `headers.rs` writes them.

/// Which form of the IETF fields to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldsDraft {
    /// None.
    Off,
    /// Draft 11 (`r`, `t`).
    #[default]
    Draft11,
    /// Draft 12 (`a`, `w`, `c`).
    Draft12,
}

/// The names of the limit / remaining / reset triple of the binding limit: the
/// `X-RateLimit-*` of `--legacy-headers`, or the reference's `RateLimit-Limit`,
/// `RateLimit-Remaining`, `RateLimit-Reset` (`LIMIT_RESPONSE_HEADERS_ENABLED`, the names from
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TripleNames {
    /// The limit's requests per window.
    pub limit: String,
    /// Units left.
    pub remaining: String,
    /// Seconds until the limit resets.
    pub reset: String,
}

impl TripleNames {
    /// `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`.
    pub fn legacy() -> Self {
        Self {
            limit: "x-ratelimit-limit".into(),
            remaining: "x-ratelimit-remaining".into(),
            reset: "x-ratelimit-reset".into(),
        }
    }
}

/// What to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderSettings {
    /// The IETF fields' form.
    pub draft: FieldsDraft,
    /// Also on admitted requests (always on denied ones).
    pub on_admitted: bool,
    /// The limit / remaining / reset triple of the binding limit, under these names.
    pub legacy: Option<TripleNames>,
}
