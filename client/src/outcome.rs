//! What a group of limits answers: each limit's [`View`] and the group's [`GroupGrant`].
//!
//! Below both the stores (which read them from the module's replies) and the local engine
//! (which builds them from the core's decisions), so neither imports the other for them.

use std::fmt;
use std::time::Duration;

/// One limit's view after a call, as the module replies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// Whether this limit admitted the call (alone).
    pub allowed: bool,
    /// Whole units still available.
    pub remaining: u64,
    /// Denied: `Some(d)`, this same call would be admitted after `d`; `None`, never (the
    /// cost exceeds the limit). Admitted: zero, or with pacing the wait before proceeding.
    pub retry_after: Option<Duration>,
    /// Time until the limiter is back to unused.
    pub reset_after: Duration,
    /// The configured limit.
    pub limit: u64,
    /// A regional limit's (`RL.REGIONAL`): why it was decided so, and the live lease's units
    /// left; the fields above are then the floor's view. `None` for every other limit.
    pub regional: Option<Regional>,
}

impl View {
    /// Reads the five integers of an `RL.*` reply.
    pub fn from_fields(fields: [i64; 5]) -> Self {
        let [allowed, remaining, retry_ms, reset_ms, limit] = fields;
        Self {
            allowed: allowed != 0,
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after: u64::try_from(retry_ms).ok().map(Duration::from_millis),
            reset_after: Duration::from_millis(u64::try_from(reset_ms).unwrap_or(0)),
            limit: u64::try_from(limit).unwrap_or(0),
            regional: None,
        }
    }
}

pub use redis_ratelimit_core::regional::Why;

/// What a regional limit's call (`RL.REGIONAL floor_key lease_key ...`) says besides the
/// floor's view: why it was decided so (`docs/regions.md`), and the units the region's live
/// lease has left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regional {
    /// `floor`, `lease`, `lease_exhausted` or `home_unreachable`.
    pub why: Why,
    /// Units left in the region's live lease after the call (0 without one).
    pub lease_units: u64,
}

impl Regional {
    /// The reason's name, as the module replies it (the `why` metric label).
    pub fn why_str(&self) -> &'static str {
        why_str(self.why)
    }
}

/// A reason's name, as `RL.REGIONAL` replies it (the wire crate's word, one table).
pub fn why_str(why: Why) -> &'static str {
    redis_ratelimit_wire::args::regional::why_word(why)
        .to_str()
        .unwrap_or("unknown")
}

impl View {
    /// The view as the core's decision (to apply the core's rules to it).
    pub(crate) fn to_core(self) -> redis_ratelimit_core::Decision {
        use redis_ratelimit_core::Retry;
        redis_ratelimit_core::Decision {
            allowed: self.allowed,
            remaining: self.remaining,
            retry: match self.retry_after {
                None => Retry::Never,
                Some(wait) if wait.is_zero() => Retry::Now,
                Some(wait) => Retry::AfterMs(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
            },
            reset_after_ms: u64::try_from(self.reset_after.as_millis()).unwrap_or(u64::MAX),
            limit: self.limit,
        }
    }
}

/// Which implementation answered a store call: a [`Backend`](crate::Backend) once resolved
/// (never [`Backend::Auto`](crate::Backend::Auto)), or the in-process
/// [`MemoryStore`](crate::store::MemoryStore). Every [`GroupGrant`] says it, and a decision the
/// store made carries it in [`Source::Store`](crate::Source::Store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreBackend {
    /// The module's `RL.*` commands.
    Module,
    /// The Functions library, through `FCALL`.
    Functions,
    /// The library as a script, through `EVALSHA`.
    Scripts,
    /// The core's algorithms in this process ([`MemoryStore`](crate::store::MemoryStore)).
    Memory,
}

impl StoreBackend {
    /// Its name: `module`, `functions`, `scripts`, `memory` (the `backend` metric label, as
    /// [`Backend::as_str`](crate::Backend::as_str) names the first three).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Module => "module",
            Self::Functions => "functions",
            Self::Scripts => "scripts",
            Self::Memory => "memory",
        }
    }
}

impl fmt::Display for StoreBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a group answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupGrant {
    /// Units granted: the units asked for, or with a partial request anything from `min` to
    /// them; 0 when denied (nothing was taken from any limit).
    pub granted: u64,
    /// The index (in the request) of the limit that decided: the one that denied with the
    /// longest wait, or when admitted the one with the fewest calls left.
    pub binding: usize,
    /// Every limit's own view, in request order.
    pub views: Vec<View>,
    /// Which implementation answered.
    pub backend: StoreBackend,
}
