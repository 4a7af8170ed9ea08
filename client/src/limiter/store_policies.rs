//! The limiter's hook for store-backed policies ([`Policy::from_store`]): before a check,
//! the tenant's limits are resolved by the [`PolicySource`], and the check runs against a
//! policy state for exactly that set of limits. States are shared by every tenant with the
//! same set (the tenant is in the keys, not in the state), so there are about as many as
//! plans and overrides.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::state::Registered;
use crate::error::{BuildError, CheckError};
use crate::key::{Inputs, MissingInput};
use crate::policy::Policy;
use crate::policy_source::PolicySource;

/// Most distinct limit sets kept per policy; beyond it the least useful are forgotten (an
/// outstanding lease of a forgotten state is never refunded: under-admission, never over).
const MAX_STATES: usize = 1_024;

/// The registered policies, by name.
pub(super) type Policies = HashMap<Arc<str>, Registered>;

/// The store-backed policies as the limiter uses them, whatever the source's limit type.
pub(super) trait StoreBacked: Send + Sync {
    /// The state a check of `registered`'s policy runs against: for a store-backed policy,
    /// the tenant's limits now; `None` for any other policy.
    fn resolve(
        &self,
        registered: &Registered,
        inputs: &Inputs,
    ) -> Result<Option<Arc<Registered>>, CheckError>;
    /// Every resolved state (the sweeper refunds their expired leases).
    fn states(&self) -> Vec<Arc<Registered>>;
    /// The source, for [`RateLimiter::policy_source`](super::RateLimiter::policy_source).
    fn source(&self) -> &dyn Any;
}

/// A source given to the builder, attached to the policies when the limiter is built (with
/// the limiter's bound on each state's per-key tables).
pub(super) type Pending =
    Box<dyn FnOnce(&Policies, usize) -> Result<Box<dyn StoreBacked>, BuildError> + Send>;

/// `source`, to attach when the policies are known.
pub(super) fn pending<S: PolicySource>(source: S) -> Pending {
    Box::new(move |policies, max_keys| {
        StorePolicies::new(source, policies, max_keys).map(|attached| Box::new(attached) as _)
    })
}

/// The store-backed policies of `policies`, through `source`; refused if one has no source.
/// Each resolved state remembers at most `max_keys` key sets in each table.
pub(super) fn attach(
    source: Option<Pending>,
    policies: &Policies,
    max_keys: usize,
) -> Result<Option<Box<dyn StoreBacked>>, BuildError> {
    if let Some(source) = source {
        return source(policies, max_keys).map(Some);
    }
    match policies
        .iter()
        .find(|(_, registered)| registered.policy.store_tenant().is_some())
    {
        Some((name, _)) => Err(BuildError::StorePolicy(format!(
            "policy '{name}' takes its limits from the policy store: give the limiter a \
             PlanSource (RateLimiterBuilder::policy_source), or another PolicySource"
        ))),
        None => Ok(None),
    }
}

/// What a store-backed policy needs: its defaults in the source's form.
struct StorePolicy<L> {
    tenant_input: String,
    defaults: Vec<L>,
}

/// A policy and one set of limits: the states are shared by the tenants with that set.
type StateId<L> = (Arc<str>, Vec<L>);

struct StorePolicies<S: PolicySource> {
    source: S,
    policies: HashMap<Arc<str>, StorePolicy<S::Limit>>,
    states: RwLock<HashMap<StateId<S::Limit>, Arc<Registered>>>,
    /// Each state's bound on its per-key tables.
    max_keys: usize,
}

impl<S: PolicySource> StorePolicies<S> {
    fn new(source: S, policies: &Policies, max_keys: usize) -> Result<Self, BuildError> {
        let mut store_policies = HashMap::new();
        for (name, registered) in policies {
            let Some(tenant_input) = registered.policy.store_tenant() else {
                continue;
            };
            let defaults = registered
                .policy
                .limits()
                .iter()
                .map(|limit| source.default_limit(name, limit))
                .collect::<Result<Vec<_>, _>>()?;
            store_policies.insert(
                Arc::clone(name),
                StorePolicy {
                    tenant_input: tenant_input.to_string(),
                    defaults,
                },
            );
        }
        Ok(Self {
            source,
            policies: store_policies,
            states: RwLock::new(HashMap::new()),
            max_keys,
        })
    }

    /// `base` with `limits`, as the source keys them.
    fn build(&self, base: &Policy, tenant_input: &str, limits: &[S::Limit]) -> Option<Policy> {
        let mut builder = Policy::builder(base.name())
            .fallback(base.fallback())
            .timeout(base.timeout())
            .deny_cache(base.deny_cache());
        if let Some(lease) = base.lease() {
            builder = builder.lease(lease);
        }
        for limit in limits {
            builder = builder.limit(self.source.to_limit(tenant_input, base.name(), limit)?);
        }
        builder.build().ok()
    }
}

impl<S: PolicySource> StoreBacked for StorePolicies<S> {
    fn resolve(
        &self,
        registered: &Registered,
        inputs: &Inputs,
    ) -> Result<Option<Arc<Registered>>, CheckError> {
        let state = &registered.state;
        let Some(store_policy) = self.policies.get(&state.name) else {
            return Ok(None);
        };
        let tenant = inputs.get(&store_policy.tenant_input).ok_or_else(|| {
            CheckError::MissingInput(MissingInput(store_policy.tenant_input.clone()))
        })?;
        let limits = self.source.limits(tenant, &store_policy.defaults);
        let id = (Arc::clone(&state.name), limits);
        let found = self
            .states
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if found.is_some() {
            return Ok(found);
        }
        let mut states = self.states.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = states.get(&id) {
            return Ok(Some(Arc::clone(found)));
        }
        let tenant_input = &store_policy.tenant_input;
        let built = self
            .build(&registered.policy, tenant_input, &id.1)
            .or_else(|| self.build(&registered.policy, tenant_input, &store_policy.defaults));
        let Some(policy) = built else {
            return Ok(None);
        };
        if states.len() >= MAX_STATES {
            states.retain(|_, kept| Arc::strong_count(kept) > 1);
        }
        let resolved = Arc::new(Registered::new(policy, self.max_keys));
        states.insert(id, Arc::clone(&resolved));
        Ok(Some(resolved))
    }

    fn states(&self) -> Vec<Arc<Registered>> {
        self.states
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    fn source(&self) -> &dyn Any {
        &self.source
    }
}
