//! Limits from the policy store (plans, tenants and overrides) for the rules that name a `tenant_key`:
//! the tenant's effective limit called the rule's `name` replaces the YAML limit, which stays
//! the default. One [`PlanSource`] follows the store, connected only when the config uses
//! plans.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use redis_ratelimit_client::Algorithm;
use redis_ratelimit_core::kinds::Kind;
use redis_ratelimit_plans::snapshot::Rule as PlanRule;
use redis_ratelimit_plans::{ClassedLimit, DEFAULT_CLASS, PlanOptions, PlanSource};

use crate::config::{BuiltLimit, Unit};

/// The policy store could not be read at start.
#[derive(Debug, thiserror::Error)]
#[error("policy store: {0}")]
pub struct ConnectError(#[source] redis_ratelimit_plans::plan_store::PlanStoreError);

/// The limit a plan rule applies to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanLimit {
    /// The algorithm (`None`: the YAML default of 0 requests, every request denied).
    pub algorithm: Option<Algorithm>,
    /// Requests per unit, as reported to Envoy.
    pub requests_per_unit: u64,
    /// The unit reported.
    pub unit: Unit,
    /// The end of the Redis key: the limit's name and algorithm kind, never its amount or
    /// plan, so a changed limit applies to the tenant's existing state.
    pub key_suffix: String,
    /// The class of the tenant's key in metrics (`key_class`): its plan, `override`, or
    /// `default` when the YAML limit applies; never the tenant.
    pub class: String,
}

/// The policy store as this process follows it.
pub struct Plans {
    /// The `--redis` URLs; with `cluster`, nodes of a Redis Cluster.
    urls: Vec<String>,
    cluster: bool,
    options: PlanOptions,
    source: RwLock<Option<PlanSource>>,
}

impl Plans {
    /// Not connected yet: the store at `urls` (one server, or with `cluster` some nodes of a
    /// Redis Cluster), followed with `options`.
    pub fn new(urls: Vec<String>, cluster: bool, options: PlanOptions) -> Self {
        Self {
            urls,
            cluster,
            options,
            source: RwLock::new(None),
        }
    }

    /// Connects the source if it is not yet (a first read bounded by the options' timeout),
    /// logging its status.
    pub async fn connect(&self) -> Result<(), ConnectError> {
        if self.source().is_some() {
            return Ok(());
        }
        let source = if self.cluster {
            let nodes: Vec<&str> = self.urls.iter().map(String::as_str).collect();
            PlanSource::connect_cluster(&nodes, self.options.clone()).await
        } else {
            let url = self.urls.first().map_or("", String::as_str);
            PlanSource::connect(url, self.options.clone()).await
        }
        .map_err(ConnectError)?;
        tracing::info!(
            "plans: {} (version checked every {:?} besides notifications)",
            source.status(),
            self.options.check_every
        );
        *self.source.write().unwrap_or_else(PoisonError::into_inner) = Some(source);
        Ok(())
    }

    /// The source, once connected.
    pub fn source(&self) -> Option<PlanSource> {
        self.source
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The limit `name` of `tenant`: the store's, or `default` (the rule's YAML limit). Both
    /// were built when read (the store's snapshot, the config).
    pub fn limit(&self, tenant: &str, name: &str, default: &BuiltLimit) -> PlanLimit {
        let effective = self.source().and_then(|source| {
            source.resolve(tenant, &[]).into_iter().find(|effective| {
                effective.spec.name() == name && effective.rule != PlanRule::Default
            })
        });
        match effective {
            Some(effective) => {
                let ClassedLimit { spec, class } = ClassedLimit::of(effective);
                let algorithm = spec.algorithm();
                let (requests_per_unit, unit) = reported(algorithm.quota(), algorithm.window());
                PlanLimit {
                    key_suffix: suffix(name, spec.kind()),
                    algorithm: Some(algorithm.clone()),
                    requests_per_unit,
                    unit,
                    class,
                }
            }
            None => {
                let kind = default
                    .algorithm
                    .as_ref()
                    .map(Algorithm::kind)
                    .filter(|kind| *kind != Kind::Concurrency);
                PlanLimit {
                    key_suffix: kind
                        .map_or_else(|| format!("plan:{name}:blocked"), |kind| suffix(name, kind)),
                    algorithm: default.algorithm.clone(),
                    requests_per_unit: default.spec.requests_per_unit,
                    unit: default.spec.unit,
                    class: DEFAULT_CLASS.to_string(),
                }
            }
        }
    }
}

fn suffix(name: &str, kind: Kind) -> String {
    format!("plan:{name}:{}", kind.short_name())
}

/// A plan limit as Envoy's `requests_per_unit` and `unit`: the largest unit the window is a
/// whole number of, the quota shared over it (rounded down; at least 1).
fn reported(quota: u64, window: Duration) -> (u64, Unit) {
    const UNITS: [Unit; 7] = [
        Unit::Year,
        Unit::Month,
        Unit::Week,
        Unit::Day,
        Unit::Hour,
        Unit::Minute,
        Unit::Second,
    ];
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
    for unit in UNITS {
        let unit_ms = unit.seconds().saturating_mul(1_000);
        if window_ms.checked_rem(unit_ms) == Some(0) {
            let units = window_ms.checked_div(unit_ms).unwrap_or(1).max(1);
            return (quota.checked_div(units).unwrap_or(quota).max(1), unit);
        }
    }
    // Under a second, or not whole seconds: per second.
    let per_second = u128::from(quota)
        .saturating_mul(1_000)
        .checked_div(u128::from(window_ms))
        .unwrap_or(0);
    (
        u64::try_from(per_second).unwrap_or(u64::MAX).max(1),
        Unit::Second,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_in_the_largest_whole_unit() {
        assert_eq!(
            reported(1000, Duration::from_secs(60)),
            (1000, Unit::Minute)
        );
        assert_eq!(
            reported(1000, Duration::from_secs(120)),
            (500, Unit::Minute)
        );
        assert_eq!(reported(90, Duration::from_secs(90)), (1, Unit::Second));
        assert_eq!(reported(5, Duration::from_millis(500)), (10, Unit::Second));
        assert_eq!(
            reported(100_000, Duration::from_secs(86_400)),
            (100_000, Unit::Day)
        );
    }

    #[test]
    fn without_a_store_the_default_applies_under_a_stable_key() {
        let plans = Plans::new(
            vec!["redis://127.0.0.1:1/".into()],
            false,
            PlanOptions::default(),
        );
        let default = BuiltLimit::build(crate::config::LimitSpec {
            requests_per_unit: 3,
            unit: Unit::Minute,
            algorithm: crate::config::AlgorithmKind::SlidingWindow,
            burst: None,
        })
        .unwrap();
        let limit = plans.limit("acme", "per-minute", &default);
        assert_eq!(limit.key_suffix, "plan:per-minute:sliding");
        assert_eq!((limit.requests_per_unit, limit.unit), (3, Unit::Minute));
        assert_eq!(
            limit.algorithm,
            Some(Algorithm::sliding_window(3, Duration::from_secs(60)).unwrap())
        );
    }
}
