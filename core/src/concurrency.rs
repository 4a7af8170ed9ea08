//! Concurrency (in-flight) limit: at most `limit` holders of a slot at once.
//!
//! # Semantics
//!
//! A caller acquires a slot under its own id (its *holder*, see [`HolderId`]) for `ttl`: the
//! holder expires `ttl` after its last acquire, by the server clock, unless released first.
//! A call by a holder that is not live is admitted iff fewer than `limit` holders are live;
//! acquiring again with a live holder renews it (never counting it twice) and is always
//! admitted. A holder expiring at `t` is live strictly before `t`, gone at `t`. Expired holders
//! are dropped by the next change (no background work), and the key expires when the last
//! holder does, which is exactly when the limiter is indistinguishable from a missing key.
//!
//! Reply fields (the shared [`Decision`]): `remaining` is the free slots after the call
//! (`limit − live`, never below 0); a denied call's `retry` is when enough holders will have
//! expired for it to be admitted (an upper bound: a release can come sooner);
//! `reset_after_ms` is when the last live holder expires (the key's expiry).
//!
//! - **Lowering the limit** never evicts live holders: new holders are denied until enough of
//!   them are gone, while live holders may still renew.
//! - **Renewing never shortens a holder's life**: its expiry becomes `max(old, now + ttl)`, so
//!   a shorter `ttl` or a clock that stepped back keeps the later expiry (the holder can always
//!   release). Stored instants therefore never move back.
//! - **Cost**: a call takes one slot whatever its cost. [`CallCost`](crate::CallCost) is implemented so the
//!   limiter plugs into partial grants and multi-limit calls, where its
//!   [`grantable`](ConcurrencyAlgorithm::grantable) is all of `up_to` or nothing: it never
//!   scales the units of a call, it only admits or denies it.
//! - **Release** ([`ConcurrencyAlgorithm::release`], and [`Algorithm::refund`] with a
//!   decision) frees a live holder's slot; an unknown or expired holder is not an error,
//!   nothing is written. A release that leaves no holder leaves an empty list: the glue
//!   deletes the key ([`Concurrency::is_empty`]).
//! - **Peeking** ([`ConcurrencyParams::peek`], or any parameters without a holder) reports the
//!   free slots (`limit − live`) and whether one is free, taking none and writing nothing.
//!
//! # Clock
//!
//! `now` is clamped to `[0, MAX_NOW_US]`. A clock that steps back sees holders that had
//! expired at the later clock as live again if they are still stored (never fewer live
//! holders than at the later clock), and renewals keep the later expiry, so an earlier clock
//! never sees more free slots and never moves an instant back.
//!
//! # Cost per call and memory
//!
//! Deciding is one binary search (the live holders are a suffix of the stored order) and one
//! search for the caller's holder: a scan of 4-byte tags (hashes of the ids) and an id
//! comparison where a tag matches, O(holders), bounded by the limit, itself bounded by the
//! server setting `ratelimit.max-holders` (at most [`MAX_STORED_HOLDERS`]; a default of
//! 1,000 keeps a worst-case list, 128-byte ids, at 141 KB and a call's search at a few
//! microseconds). Applying a change shifts the buffers,
//! O(holders). Memory: `13 + id length` bytes per holder plus a 72-byte header (see
//! [`Concurrency`]).
//!
//! # Replication
//!
//! What an admitted acquire or a release changes is a [`ConcurrencyChange`]: "at `at_us`,
//! drop the holders expired then, then acquire `holder` until `expires_at_us` (replacing its
//! previous expiry) or release it", at most ~150 bytes encoded, not the list. Applying the
//! same change to identical lists yields identical lists (the order is canonical); on a list
//! that does not match (a diverged replica) it still keeps every invariant.

mod bounds;
mod holders;

pub use bounds::{MAX_EXPIRY_US, MAX_STORED_HOLDERS, MAX_TTL_US, MIN_TTL_US};
pub use holders::{Concurrency, HolderId, HolderIdError, MAX_HOLDER_ID_BYTES};

use super::facts::{QuotaFacts, Recovery, part};
use std::time::Duration;

use super::decision::{Algorithm, Commit, Decision, Evaluation, Retry, cost_is_a_field};
use super::time::{MAX_NOW_US, MIN_WINDOW_US, ceil_ms_from_us, expiry_ms_from_us};

/// Why concurrency parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConcurrencyParamError {
    /// A limit above the server's `ratelimit.max-holders`.
    LimitAboveMaxHolders {
        /// The largest limit accepted (the setting, capped at [`MAX_STORED_HOLDERS`]).
        max_holders: u64,
    },
    /// A ttl shorter than [`MIN_TTL_US`].
    TtlTooShort,
    /// A ttl longer than [`MAX_TTL_US`].
    TtlTooLong,
}

/// Validated parameters of one concurrency call: the limit, and for an acquire the holder and
/// its ttl.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConcurrencyParams {
    limit: u64,
    ttl_us: i64,
    holder: Option<HolderId>,
    cost: u64,
}

impl ConcurrencyParams {
    /// Validates at most `limit` (≥ 1; 0 is read as 1, the parser refuses it) holders, each
    /// holding its slot for `ttl_us` after its last acquire, on a server whose
    /// `ratelimit.max-holders` is `max_holders` (capped at [`MAX_STORED_HOLDERS`]).
    ///
    /// Without a holder ([`with_holder`](Self::with_holder)) a call only checks for a free
    /// slot, taking none.
    pub fn new(limit: u64, ttl_us: u64, max_holders: u64) -> Result<Self, ConcurrencyParamError> {
        let ttl_us = i64::try_from(ttl_us).unwrap_or(i64::MAX);
        if ttl_us < MIN_TTL_US {
            return Err(ConcurrencyParamError::TtlTooShort);
        }
        if ttl_us > MAX_TTL_US {
            return Err(ConcurrencyParamError::TtlTooLong);
        }
        let max_holders = max_holders.clamp(1, MAX_STORED_HOLDERS);
        if limit > max_holders {
            return Err(ConcurrencyParamError::LimitAboveMaxHolders { max_holders });
        }
        Ok(Self {
            limit: limit.max(1),
            ttl_us,
            holder: None,
            cost: 1,
        })
    }

    /// Parameters of `RL.PEEK key CONCURRENCY limit`: no holder and no ttl; evaluating them
    /// reports the free slots and writes nothing.
    pub fn peek(limit: u64, max_holders: u64) -> Result<Self, ConcurrencyParamError> {
        Self::new(limit, MIN_WINDOW_US, max_holders)
    }

    /// The same parameters for a call by `holder`: an acquire (or its release).
    #[must_use]
    pub fn with_holder(self, holder: HolderId) -> Self {
        Self {
            holder: Some(holder),
            ..self
        }
    }

    /// The most holders at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How long a holder keeps its slot after its last acquire, in µs.
    pub fn ttl_us(&self) -> u64 {
        self.ttl_us.unsigned_abs()
    }

    /// The caller's holder, if any.
    pub fn holder(&self) -> Option<&HolderId> {
        self.holder.as_ref()
    }

    /// The same parameters without a holder: evaluating them reports the free slots and
    /// writes nothing (a peek).
    #[must_use]
    pub fn without_holder(self) -> Self {
        Self {
            holder: None,
            ..self
        }
    }

    /// The same parameters with room for `limit` holders, whatever the server's setting: a
    /// regional call's floor widened by its lease's slots, whose holders the floor's key
    /// keeps (`crate::regional`). 0 is kept (a floor with no slot of its own: a region whose
    /// share rounds to nothing, as the regions' model checker runs it; no parser gives it).
    #[must_use]
    pub fn with_limit(self, limit: u64) -> Self {
        Self { limit, ..self }
    }
}

/// What a call by `params`' holder would find at `now_us`: the live holders other than it,
/// and the expiry it would get if admitted (`now + ttl`, or its later expiry when it is live
/// and renews). The facts a regional in-flight call is decided on (`crate::regional`).
pub(crate) fn call_facts(
    state: Option<&Concurrency>,
    params: &ConcurrencyParams,
    now_us: i64,
) -> CallFacts {
    let view = View::new(state, params, now_us);
    let renewed = view.own.and_then(|index| view.holders.expiry(index));
    CallFacts {
        others: view.live(view.own),
        holds: view.own.is_some(),
        expires_at_us: view
            .now
            .saturating_add(params.ttl_us)
            .max(renewed.unwrap_or(i64::MIN)),
    }
}

/// See [`call_facts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallFacts {
    /// Live holders other than the caller's.
    pub others: u64,
    /// Whether the caller's holder is live (the call would renew it).
    pub holds: bool,
    /// The caller's expiry if admitted.
    pub expires_at_us: i64,
}

// A call takes one slot whatever its cost: the cost is only carried, so that partial grants
// and multi-limit calls can treat every limit alike.
cost_is_a_field!(ConcurrencyParams);

impl QuotaFacts for ConcurrencyParams {
    /// The most holders at once.
    fn advertised_quota(&self) -> u64 {
        self.limit
    }

    /// None: slots come back when requests end, not with time.
    fn window(&self) -> Duration {
        Duration::ZERO
    }

    /// `limit / replicas` slots, each held as long.
    fn share(&self, replicas: u64) -> Option<Self> {
        Some(Self {
            limit: part(self.limit, replicas)?,
            ..*self
        })
    }
}

/// What a change does after dropping the holders expired at its instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConcurrencyAction {
    /// Store `holder` until `expires_at_us` (Unix µs), replacing its previous expiry if it is
    /// stored: an admitted acquire.
    Acquire {
        /// The holder.
        holder: HolderId,
        /// Its new expiry.
        expires_at_us: i64,
    },
    /// Remove `holder`: a release.
    Release {
        /// The holder.
        holder: HolderId,
    },
}

/// How an admitted acquire or a release changes a holder list: what is stored and replicated,
/// one holder rather than the list.
///
/// Applying it drops the holders expired at `at_us`, then performs the action. Every value of
/// this type has passed [`ConcurrencyChange::new`]'s validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConcurrencyChange {
    at_us: i64,
    action: ConcurrencyAction,
}

impl ConcurrencyChange {
    /// Validates a change (as decoded from a replicated payload): `at_us` within
    /// `[0, MAX_NOW_US]`, an acquire's expiry within `[at_us + MIN_TTL_US, MAX_EXPIRY_US]`.
    /// (Holder ids are valid by construction.)
    pub fn new(at_us: i64, action: ConcurrencyAction) -> Option<Self> {
        let valid = (0..=MAX_NOW_US).contains(&at_us)
            && match action {
                ConcurrencyAction::Acquire { expires_at_us, .. } => {
                    (at_us.saturating_add(MIN_TTL_US)..=MAX_EXPIRY_US).contains(&expires_at_us)
                }
                ConcurrencyAction::Release { .. } => true,
            };
        valid.then_some(Self { at_us, action })
    }

    /// Unix µs the change was computed at: holders expired then are dropped first.
    pub fn at_us(&self) -> i64 {
        self.at_us
    }

    /// What to do once the expired holders are dropped.
    pub fn action(&self) -> ConcurrencyAction {
        self.action
    }
}

/// The list a missing key stands for.
static EMPTY: Concurrency = Concurrency::EMPTY;

/// A holder list seen by one call at one instant.
///
/// Bounds: `now` within `[0, MAX_NOW_US]`, ttl at most [`MAX_TTL_US`] and stored expiries at
/// most [`MAX_EXPIRY_US`], all far inside an `i64`; the saturating operations only say so.
struct View<'a> {
    holders: &'a Concurrency,
    /// The clamped clock.
    now: i64,
    /// Index of the first live holder: the ones before it have expired at `now`.
    start: usize,
    /// The caller's holder, if it is live: its index.
    own: Option<usize>,
}

impl<'a> View<'a> {
    fn new(state: Option<&'a Concurrency>, params: &ConcurrencyParams, now_us: i64) -> Self {
        let holders = state.unwrap_or(&EMPTY);
        let now = now_us.clamp(0, MAX_NOW_US);
        let start = holders.expired_at(now);
        let own = params
            .holder
            .and_then(|holder| holders.position(holder.as_bytes(), start));
        View {
            holders,
            now,
            start,
            own,
        }
    }

    /// Live holders, not counting the one at `skip`.
    fn live(&self, skip: Option<usize>) -> u64 {
        let live = self.holders.len().saturating_sub(self.start);
        let live = live.saturating_sub(usize::from(skip.is_some()));
        u64::try_from(live).unwrap_or(u64::MAX)
    }

    /// Whether the call is admitted: its holder is live, or a slot is free.
    fn admits(&self, params: &ConcurrencyParams) -> bool {
        (params.holder.is_some() && self.own.is_some()) || self.live(None) < params.limit
    }

    /// The expiry of the `k`-th (1-based) live holder in expiry order, not counting the one
    /// at `skip`.
    fn nth_live_expiry(&self, k: u64, skip: Option<usize>) -> Option<i64> {
        let index = usize::try_from(k)
            .ok()?
            .checked_sub(1)?
            .checked_add(self.start)?;
        let index = match skip {
            Some(skipped) if skipped <= index => index.checked_add(1)?,
            _ => index,
        };
        self.holders.expiry(index)
    }

    /// The latest live expiry, not counting the holder at `skip`.
    fn last_live_expiry(&self, skip: Option<usize>) -> Option<i64> {
        self.nth_live_expiry(self.live(skip), skip)
    }

    /// When a holder that is not live (the one at `skip` released) would be admitted: once
    /// enough live holders have expired to free a slot.
    fn retry(&self, params: &ConcurrencyParams, skip: Option<usize>) -> Retry {
        let live = self.live(skip);
        if live < params.limit {
            return Retry::Now;
        }
        // live − limit + 1 holders must go, the earliest first.
        let needed = live.saturating_sub(params.limit).saturating_add(1);
        match self.nth_live_expiry(needed, skip) {
            Some(expiry) => Retry::AfterMs(self.ms_until(expiry).max(1)),
            None => Retry::Never,
        }
    }

    /// Milliseconds (rounded up) from now until `instant`.
    fn ms_until(&self, instant_us: i64) -> u64 {
        ceil_ms_from_us(instant_us.saturating_sub(self.now))
    }

    /// A decision with `live` holders whose latest expiry is `last`.
    fn decision(
        &self,
        params: &ConcurrencyParams,
        allowed: bool,
        live: u64,
        last: Option<i64>,
        retry: Retry,
    ) -> Decision {
        Decision {
            allowed,
            remaining: params.limit.saturating_sub(live),
            retry,
            reset_after_ms: last.map_or(0, |expiry| self.ms_until(expiry)),
            limit: params.limit,
        }
    }

    /// The decision of a call that changes nothing, released nothing or peeked.
    fn unchanged(&self, params: &ConcurrencyParams, allowed: bool) -> Decision {
        let retry = if params.holder.is_some() && self.own.is_some() {
            Retry::Now
        } else {
            self.retry(params, None)
        };
        self.decision(
            params,
            allowed,
            self.live(None),
            self.last_live_expiry(None),
            retry,
        )
    }

    /// The commit of `action`, after which the last live holder expires at `last` (none: the
    /// list is empty, and indistinguishable from a missing key from now on).
    fn commit(&self, action: ConcurrencyAction, last: Option<i64>) -> Commit<ConcurrencyChange> {
        Commit {
            change: ConcurrencyChange {
                at_us: self.now,
                action,
            },
            expires_at_ms: expiry_ms_from_us(last.unwrap_or(self.now)),
        }
    }
}

/// The concurrency limit algorithm (`RL.ACQUIRE`, `RL.RELEASE`).
pub struct ConcurrencyAlgorithm;

impl ConcurrencyAlgorithm {
    /// `RL.RELEASE key holder`: the commit that releases `holder` if it is live (reply 1),
    /// `None` if it is unknown or already expired, or the key is missing (reply 0; nothing is
    /// written). After applying the commit, an empty list means the key goes.
    pub fn release(
        state: Option<&Concurrency>,
        holder: &HolderId,
        now_us: i64,
    ) -> Option<Commit<ConcurrencyChange>> {
        let params = ConcurrencyParams {
            limit: 1,
            ttl_us: MIN_TTL_US,
            holder: Some(*holder),
            cost: 1,
        };
        Self::refund(state, &params, now_us).commit
    }
}

impl Algorithm for ConcurrencyAlgorithm {
    type Params = ConcurrencyParams;
    type State = Concurrency;
    type Change = ConcurrencyChange;

    /// An acquire by the params' holder (renewing it if live), or without a holder a peek at
    /// the free slots.
    fn evaluate(
        state: Option<&Concurrency>,
        params: &ConcurrencyParams,
        now_us: i64,
    ) -> Evaluation<ConcurrencyChange> {
        let view = View::new(state, params, now_us);
        let admitted = view.admits(params);
        let Some(holder) = params.holder.filter(|_| admitted) else {
            return Evaluation {
                decision: view.unchanged(params, admitted),
                commit: None,
            };
        };
        let renewed = view.own.and_then(|index| view.holders.expiry(index));
        let expires_at_us = view
            .now
            .saturating_add(params.ttl_us)
            .max(renewed.unwrap_or(i64::MIN));
        let live = view.live(view.own).saturating_add(1);
        let last = view
            .last_live_expiry(view.own)
            .map_or(expires_at_us, |last| last.max(expires_at_us));
        let action = ConcurrencyAction::Acquire {
            holder,
            expires_at_us,
        };
        Evaluation {
            decision: view.decision(params, true, live, Some(last), Retry::Now),
            commit: Some(view.commit(action, Some(last))),
        }
    }

    /// Releases the params' holder if it is live: `allowed` says whether it was, the other
    /// fields describe the list after the release as an acquire by that holder would see it.
    fn refund(
        state: Option<&Concurrency>,
        params: &ConcurrencyParams,
        now_us: i64,
    ) -> Evaluation<ConcurrencyChange> {
        let view = View::new(state, params, now_us);
        let (Some(holder), Some(index)) = (params.holder, view.own) else {
            return Evaluation {
                decision: view.unchanged(params, false),
                commit: None,
            };
        };
        let skip = Some(index);
        let last = view.last_live_expiry(skip);
        let retry = view.retry(params, skip);
        Evaluation {
            decision: view.decision(params, true, view.live(skip), last, retry),
            commit: Some(view.commit(ConcurrencyAction::Release { holder }, last)),
        }
    }

    /// All of `up_to` when the call is admitted (its holder is live, or a slot is free), else
    /// nothing: a concurrency limit admits or denies a call, it never scales it.
    fn grantable(
        state: Option<&Concurrency>,
        params: &ConcurrencyParams,
        up_to: u64,
        now_us: i64,
    ) -> u64 {
        if View::new(state, params, now_us).admits(params) {
            up_to
        } else {
            0
        }
    }

    /// Drops the holders expired at the change's instant, then stores or removes its holder;
    /// finally trims excess capacity. Deterministic, and on a list that does not match the
    /// one the change was computed from it still keeps every invariant (a release of an
    /// unknown holder does nothing, an acquire beyond [`MAX_STORED_HOLDERS`] is dropped).
    /// A slot comes back when its holder is released or expires.
    fn recovery(_params: &ConcurrencyParams) -> Recovery {
        Recovery::OnRelease
    }

    fn apply(state: &mut Concurrency, change: ConcurrencyChange) {
        state.drop_expired(change.at_us);
        match change.action {
            ConcurrencyAction::Acquire {
                holder,
                expires_at_us,
            } => {
                state.remove(holder.as_bytes());
                state.insert(expires_at_us, holder.as_bytes());
            }
            ConcurrencyAction::Release { holder } => state.remove(holder.as_bytes()),
        }
        state.trim_slack();
    }

    /// An empty list with the change applied (a release leaves it empty).
    fn create(change: ConcurrencyChange) -> Concurrency {
        let mut holders = Concurrency::default();
        Self::apply(&mut holders, change);
        holders
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
