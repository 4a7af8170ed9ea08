//! The limiter's hook for store-backed policies ([`Policy::from_store`]): before a check,
//! the tenant's effective limits are resolved from one snapshot of the policy store, and
//! the check runs against a policy state for exactly that set of limits. States are shared
//! by every tenant with the same set (the tenant is in the keys, not in the state), so there
//! are about as many as plans and overrides.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::state::Registered;
use super::{BuildError, CheckError, RateLimiter, RateLimiterBuilder};
use crate::algorithm::Algorithm;
use crate::key::{Inputs, MissingInput};
use crate::plans::spec::LimitSpec;
use crate::plans::{PlanSource, key_template};
use crate::policy::{Limit, Policy};

/// Most distinct limit sets kept per policy; beyond it the least useful are forgotten (an
/// outstanding lease of a forgotten state is never refunded: under-admission, never over).
const MAX_STATES: usize = 1_024;

/// What a store-backed policy needs: its defaults as plan limits.
struct StorePolicy {
    tenant_input: String,
    defaults: Vec<LimitSpec>,
}

/// A policy and one set of limits: the states are shared by the tenants with that set.
type StateId = (Arc<str>, Vec<LimitSpec>);

pub(super) struct StorePolicies {
    source: Option<PlanSource>,
    policies: HashMap<Arc<str>, StorePolicy>,
    states: RwLock<HashMap<StateId, Arc<Registered>>>,
}

impl StorePolicies {
    pub(super) fn new(
        source: Option<PlanSource>,
        policies: &HashMap<Arc<str>, Registered>,
    ) -> Result<Self, BuildError> {
        let mut store_policies = HashMap::new();
        for (name, registered) in policies {
            let Some(tenant_input) = registered.policy.store_tenant() else {
                continue;
            };
            if source.is_none() {
                return Err(BuildError::StorePolicy(format!(
                    "policy '{name}' takes its limits from the policy store: give the limiter \
                     a PlanSource (RateLimiterBuilder::plans)"
                )));
            }
            let defaults = registered
                .policy
                .limits()
                .iter()
                .map(|limit| {
                    LimitSpec::from_algorithm(limit.name(), limit.algorithm())
                        .filter(|_| limit.weight_units() == 1 && limit.paced().is_none())
                        .ok_or_else(|| {
                            BuildError::StorePolicy(format!(
                                "policy '{name}', limit '{}': a store-backed policy's defaults are \
                                 plan limits (amount per period of token, sliding, fixed, log or \
                                 gcra; weight 1, not paced, not in-flight)",
                                limit.name()
                            ))
                        })
                })
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
        })
    }

    /// The state a check of `state`'s policy runs against: for a store-backed policy, the
    /// tenant's effective limits from one snapshot; `None` for any other policy.
    pub(super) fn resolve(
        &self,
        registered: &Registered,
        inputs: &Inputs,
    ) -> Result<Option<Arc<Registered>>, CheckError> {
        let state = &registered.state;
        let (Some(store_policy), Some(source)) =
            (self.policies.get(&state.name), self.source.as_ref())
        else {
            return Ok(None);
        };
        let tenant = inputs.get(&store_policy.tenant_input).ok_or_else(|| {
            CheckError::MissingInput(MissingInput(store_policy.tenant_input.clone()))
        })?;
        let view = source.view();
        let limits: Vec<LimitSpec> = view
            .snapshot
            .resolve(tenant, &store_policy.defaults, view.now_ms())
            .into_iter()
            .map(|effective| effective.spec)
            .collect();
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
        let built = build(&registered.policy, &store_policy.tenant_input, &id.1).or_else(|| {
            build(
                &registered.policy,
                &store_policy.tenant_input,
                &store_policy.defaults,
            )
        });
        let Some(policy) = built else {
            return Ok(None);
        };
        if states.len() >= MAX_STATES {
            states.retain(|_, kept| Arc::strong_count(kept) > 1);
        }
        let resolved = Arc::new(Registered::new(policy));
        states.insert(id, Arc::clone(&resolved));
        Ok(Some(resolved))
    }

    /// Every resolved state (the sweeper refunds their expired leases).
    pub(super) fn states(&self) -> Vec<Arc<Registered>> {
        self.states
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

/// `base` with `limits`, keyed by tenant, policy, limit name and kind.
fn build(base: &Policy, tenant_input: &str, limits: &[LimitSpec]) -> Option<Policy> {
    let mut builder = Policy::builder(base.name())
        .fallback(base.fallback())
        .timeout(base.timeout())
        .deny_cache(base.deny_cache());
    if let Some(lease) = base.lease() {
        builder = builder.lease(lease);
    }
    for spec in limits {
        let algorithm: Algorithm = spec.algorithm().ok()?;
        let key = key_template(tenant_input, base.name(), spec.name(), spec.kind());
        builder = builder.limit(Limit::new(spec.name(), algorithm, &key).ok()?);
    }
    builder.build().ok()
}

impl RateLimiterBuilder {
    /// The policy store view the store-backed policies ([`Policy::from_store`]) read.
    #[must_use]
    pub fn plans(mut self, source: PlanSource) -> Self {
        self.plans = Some(source);
        self
    }
}

impl RateLimiter {
    /// The policy store view, if the limiter has one.
    pub fn plans(&self) -> Option<&PlanSource> {
        self.inner.plans.source.as_ref()
    }
}
