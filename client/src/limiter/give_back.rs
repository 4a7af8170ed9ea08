//! All or nothing across the policies one request is checked against (a default policy and
//! a route's own): when a later policy refuses the request, what an earlier one charged is
//! given back, once, through the same refunds a check's own groups use.

use std::sync::atomic::Ordering;

use super::RateLimiter;
use super::state::Target;
use crate::decision::{Decision, Source};
use crate::key::Inputs;
use crate::limiter::CheckError;

impl RateLimiter {
    /// Gives back, once, what `decision` spent: an admitted check of `cost` units against
    /// `policy` with `inputs` (the same three it was checked with), for a request another
    /// policy then refused. The store's (or a lease's) units are refunded and the in-flight
    /// slots released; the key set's remembered denial, if any, is forgotten (the store may
    /// admit again what it denied). The HTTP layer does it for a request an inner layer
    /// refused.
    ///
    /// A refund is sent once, never again: if its reply is lost, the units stay spent (the
    /// limit under-admits by them until it refills; it never over-admits). A decision of the
    /// fallback charged no store: only its slots are released (what it took from this
    /// replica's local share stays taken). A regional limit is not refunded: its floor
    /// cannot tell the units its lease paid. Calling it for a denied decision does nothing.
    pub async fn give_back(
        &self,
        policy: &str,
        inputs: &Inputs,
        cost: u64,
        decision: &Decision,
    ) -> Result<(), CheckError> {
        let refunded = self.refund_spent(policy, inputs, cost, decision).await;
        if let Some(in_flight) = decision.in_flight.as_ref().filter(|_| decision.allowed) {
            self.release(in_flight).await;
        }
        refunded
    }

    /// Refunds the units an admitted store or lease decision charged (not its in-flight
    /// slots, which [`release`](Self::release) gives back).
    pub(crate) async fn refund_spent(
        &self,
        policy: &str,
        inputs: &Inputs,
        cost: u64,
        decision: &Decision,
    ) -> Result<(), CheckError> {
        let charged = matches!(decision.source, Source::Store(_) | Source::Lease(_));
        if !decision.allowed || !charged || cost == 0 {
            return Ok(());
        }
        let rendered = self.render(policy, inputs)?;
        let state = rendered.state();
        let keys = &rendered.keys;
        let id = keys.join("\u{0}");
        let target = Target {
            state,
            keys,
            id: &id,
            holder: None,
        };
        self.inner
            .groups
            .refund_plan(target, cost, |index| {
                !state.in_flight(index) && !state.regional(index)
            })
            .await;
        // The key set's limits have more left now: a denial remembered before would refuse
        // what the store admits. A check answered meanwhile sees the count move and forgets
        // its own denial (see `decide`), so none older than the refund survives it.
        self.inner.given_back.fetch_add(1, Ordering::SeqCst);
        state.memory.deny.forget(&id);
        Ok(())
    }
}
