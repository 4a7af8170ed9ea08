//! What a check answers: one status per descriptor, who decided, and what the transports
//! render (codes, remaining units, resets, header fields, metadata).

use std::time::Duration;

use redis_ratelimit_client::store::StoreBackend;

use crate::config::Unit;
use crate::request::BadRequest;

/// The limit a status reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedLimit {
    /// The config's `name` (empty when it has none, as in the reference).
    pub name: String,
    /// The name used in header fields and metadata: `name`, or the rule's path.
    pub label: String,
    /// Requests per unit.
    pub requests_per_unit: u64,
    /// The unit.
    pub unit: Unit,
}

/// What the reference answers as `limit_remaining` for an unlimited descriptor: a caller
/// tells "unlimited" from "no rule matched" (0) by it.
pub const UNLIMITED_REMAINING: u64 = u32::MAX as u64;

/// One descriptor's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Whether this descriptor let the request through (shadow-mode limits always do).
    pub ok: bool,
    /// Its limit; `None` when no rule applies, the rule is unlimited or was replaced.
    pub limit: Option<ReportedLimit>,
    /// Whether the limit was asked (charged or read).
    pub consulted: bool,
    /// Shadow mode: reported, never denying.
    pub shadow: bool,
    /// Whether the limit alone would deny (for a shadow limit: would have denied).
    pub over: bool,
    /// Units left ([`UNLIMITED_REMAINING`] for an unlimited descriptor).
    pub remaining: u64,
    /// The limit's quota as enforced (a replica's share during a local fallback).
    pub quota: u64,
    /// The limit's window (a bucket's time to refill completely).
    pub window: Duration,
    /// When the limit is back to unused (for a fixed window, the window's end).
    pub reset_after: Duration,
    /// When more than `remaining` is available.
    pub more_in: Duration,
    /// The matched rule's `metadata`, if any.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// A region's limit (`--region-config`): why it was decided so (`floor`, `lease`,
    /// `lease_exhausted`, `home_unreachable`); the quota and units above are the floor's.
    pub regional: Option<&'static str>,
}

impl Status {
    /// A descriptor not (yet) decided: OK, nothing left to report.
    pub fn open(limit: Option<ReportedLimit>) -> Self {
        Self {
            ok: true,
            limit,
            consulted: false,
            shadow: false,
            over: false,
            remaining: 0,
            quota: 0,
            window: Duration::ZERO,
            reset_after: Duration::ZERO,
            more_in: Duration::ZERO,
            metadata: None,
            regional: None,
        }
    }

    /// An unlimited descriptor: OK, no limit, the most a `uint32` can say left.
    pub fn unlimited() -> Self {
        Self {
            remaining: UNLIMITED_REMAINING,
            ..Self::open(None)
        }
    }
}

/// Who decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// The store (or leased units, or the deny cache), and the backend whose answer decided
    /// (`None` for a limit of 0, which denies without asking the store).
    Store(Option<StoreBackend>),
    /// The failure mode, the store being out of reach.
    Fallback,
    /// No limit applied.
    Nothing,
}

impl Decider {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store(_) => "store",
            Self::Fallback => "fallback",
            Self::Nothing => "none",
        }
    }

    /// The store backend that decided (`module`, `functions`, `scripts`), if one did.
    pub fn backend(self) -> Option<&'static str> {
        match self {
            Self::Store(backend) => backend.map(StoreBackend::as_str),
            Self::Fallback | Self::Nothing => None,
        }
    }
}

/// A request's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed (and was charged).
    pub allowed: bool,
    /// Who decided.
    pub decider: Decider,
    /// Denied without any limit being consulted: the store was out of reach and the
    /// failure mode denies.
    pub unavailable: bool,
    /// Admitted by the global shadow mode although some limit denied (nothing was charged:
    /// the statuses say what enforcement would have answered).
    pub shadowed: bool,
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// Denied: when the same request would pass (`None`: never, a cost above a limit).
    pub retry_after: Option<Duration>,
    /// An admitted request holding in-flight slots: the id to release them with.
    pub in_flight: Option<String>,
    /// The reference's dynamic metadata, when asked for (`RESPONSE_DYNAMIC_METADATA`).
    pub reference_metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Verdict {
    /// Nothing decided yet over these statuses.
    pub fn new(statuses: Vec<Status>) -> Self {
        Self {
            allowed: true,
            decider: Decider::Nothing,
            unavailable: false,
            shadowed: false,
            statuses,
            retry_after: None,
            in_flight: None,
            reference_metadata: None,
        }
    }

    /// The labels of the limits that denied.
    pub fn denied_by(&self) -> Vec<&str> {
        self.labels(|status| !self.shadowed && !status.shadow && status.over)
    }

    /// The labels of shadow-mode limits that would have denied (every denying limit under
    /// the global shadow mode).
    pub fn shadow_denied_by(&self) -> Vec<&str> {
        self.labels(|status| (self.shadowed || status.shadow) && status.over)
    }

    fn labels(&self, filter: impl Fn(&Status) -> bool) -> Vec<&str> {
        self.statuses
            .iter()
            .filter(|status| filter(status))
            .filter_map(|status| status.limit.as_ref().map(|limit| limit.label.as_str()))
            .collect()
    }
}

/// Why a check failed (not a decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckFailure {
    /// The request is malformed or over a bound: nothing was charged.
    BadRequest(BadRequest),
    /// A bug or an impossible limit: nothing was charged.
    Internal(String),
}
