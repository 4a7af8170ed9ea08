//! Where a store-backed policy's limits come from ([`Policy::from_store`]): a source that
//! gives, for the tenant a check names, the limits in force now. The limiter asks it before
//! each check of such a policy and runs the check against a state for exactly that set of
//! limits; the `redis-ratelimit-plans` crate's `PlanSource` (plans, tenants and overrides
//! kept in Redis) is one.
//!
//! The limiter knows nothing of how a source stores or names its limits: it hands each
//! default to [`default_limit`](PolicySource::default_limit) once, when it is built, and
//! compares the sets [`limits`](PolicySource::limits) returns (tenants with the same set
//! share their states), building the policy's [`Limit`]s only for a set it has not seen.

use std::hash::Hash;

use crate::error::BuildError;
use crate::policy::Limit;
#[cfg(doc)]
use crate::policy::Policy;

/// The limits of store-backed policies, per tenant.
pub trait PolicySource: Send + Sync + 'static {
    /// A limit as the source holds it: compared and hashed for every check, built into a
    /// [`Limit`] once per distinct set.
    type Limit: Clone + Eq + Hash + Send + Sync + 'static;

    /// The source's form of limit `limit`, a default of store-backed policy `policy`, or why
    /// the source cannot stand for it (the limiter is then not built).
    fn default_limit(&self, policy: &str, limit: &Limit) -> Result<Self::Limit, BuildError>;

    /// The limits that apply to `tenant` now, given the policy's `defaults` (in
    /// [`default_limit`](Self::default_limit)'s form), in order.
    fn limits(&self, tenant: &str, defaults: &[Self::Limit]) -> Vec<Self::Limit>;

    /// Limit `limit` of policy `policy` whose tenant is the input `tenant_input`, with its
    /// key template; `None` if it cannot be enforced (the defaults apply then).
    fn to_limit(&self, tenant_input: &str, policy: &str, limit: &Self::Limit) -> Option<Limit>;
}
