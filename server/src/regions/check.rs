//! Refusing a limits config this region cannot share ([`RegionConfig::check`]): every limit
//! must be one [`RegionConfig::split`] takes, and not a plan's; each refusal names the rule
//! and the field to change.

use crate::config::{BuiltLimit, Config, ConfigError, RegionConfig, Rule};
use crate::regions::split::Refusal;
use redis_ratelimit_core::regional::split::SplitError;

impl RegionConfig {
    /// Refuses a limits config this region cannot share: every limit must be a fixed
    /// window, a token bucket or GCRA (not a plan's) that [`Self::split`] takes.
    pub fn check(&self, config: &Config) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        for domain in config.domains.values() {
            self.check_rules(&domain.rules, &mut errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn check_rules(&self, rules: &[Rule], errors: &mut Vec<ConfigError>) {
        for rule in rules {
            let refuse = |reason: String| ConfigError {
                file: rule.location.file.to_path_buf(),
                line: rule.location.line,
                reason: format!("rule '{}' in region '{}': {reason}", rule.path, self.region),
            };
            if let Some(limit) = &rule.limit {
                if limit.tenant_key.is_some() {
                    errors.push(refuse(
                        "'tenant_key': a plan's limit cannot be shared across regions".into(),
                    ));
                }
                if let Some(reason) = limit.spec.as_ref().and_then(|built| self.refusal(built)) {
                    errors.push(refuse(reason));
                }
            }
            self.check_rules(&rule.children, errors);
        }
    }

    /// Why `spec` cannot be shared, naming the field to change (`None`: it can, or it is a
    /// limit of 0, decided without a store).
    fn refusal(&self, built: &BuiltLimit) -> Option<String> {
        let spec = &built.spec;
        let refusal = self.split(built.algorithm.as_ref()?).err()?;
        let f = self.floor_percent;
        let per = spec.requests_per_unit;
        let capacity = match spec.burst.filter(|_| spec.algorithm.has_burst()) {
            Some(burst) => format!("'burst' {burst}"),
            None => format!("'requests_per_unit' {per}"),
        };
        Some(match refusal {
            Refusal::Kind(kind) => format!(
                "'algorithm' is {}: a region's limits are fixed_window, sliding_window, \
                 token_bucket or gcra (an in-flight call of the service is released by a \
                 separate request, which no leased slot's end can bound)",
                kind.config_name()
            ),
            Refusal::Split(SplitError::FloorCapacityZero) => format!(
                "{capacity} leaves this region a floor of 0 ({f}% split by weight): raise it \
                 or floor_percent"
            ),
            Refusal::Split(SplitError::FloorRateZero) => format!(
                "'requests_per_unit' {per} leaves this region a floor rate too slow to state \
                 (its refill interval past the bounds, {f}% split by weight): raise it or \
                 floor_percent"
            ),
            Refusal::Split(SplitError::PoolRateZero) => format!(
                "'floor_percent' {f} leaves home's pool no rate of 'requests_per_unit' {per}: \
                 lower floor_percent"
            ),
            Refusal::Split(SplitError::PrePayEatsPool { prepay, pool }) => format!(
                "{capacity}: the pre-pay of {prepay} units (the pool's refill over T = \
                 period_ms + margin_ms) eats home's whole pool of {pool}: raise it, shorten \
                 period_ms or margin_ms, or set pool_mode: carryover"
            ),
            Refusal::Split(SplitError::Invalid) => "the split's parameters are out of range".into(),
            Refusal::Part(part, error) => {
                format!("this region's {part} of {capacity} cannot be built: {error}")
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use crate::config::{GOOD_REGION_FILE, parse_region};

    #[test]
    fn a_config_the_region_cannot_share_is_refused_naming_the_rule_and_field() {
        let region = parse_region(GOOD_REGION_FILE).unwrap();
        let config = |limit: &str| {
            let text = format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {limit}\n");
            crate::config::assemble(vec![("api.yaml".into(), text)], 16).unwrap()
        };
        for good in [
            "{unit: hour, requests_per_unit: 8}",
            "{unit: hour, requests_per_unit: 8, algorithm: token_bucket}",
            "{unit: hour, requests_per_unit: 8, algorithm: gcra}",
            // A limit of 0 denies without a store: nothing to share.
            "{unit: hour, requests_per_unit: 0}",
        ] {
            assert!(region.check(&config(good)).is_ok(), "{good}");
        }
        let errors = |limit: &str| {
            let errors = region.check(&config(limit)).unwrap_err();
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let cases = [
            (
                "{unit: hour, requests_per_unit: 1}",
                "'requests_per_unit' 1 leaves this region a floor of 0",
            ),
            (
                "{unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 1}",
                "'burst' 1 leaves this region a floor of 0",
            ),
            // 8 a second, bursts of 8: the pool 4 at 4/s; T = 1.25 s pre-pays 5.
            (
                "{unit: second, requests_per_unit: 8, algorithm: token_bucket}",
                "the pre-pay of 5 units",
            ),
            (
                "{unit: second, requests_per_unit: 8, algorithm: concurrency}",
                "'algorithm' is concurrency",
            ),
        ];
        for (limit, expected) in cases {
            let error = errors(limit);
            assert!(
                error.contains("rule 'k'") && error.contains(expected),
                "{limit}: {error}"
            );
        }
        let all_floors =
            parse_region(&GOOD_REGION_FILE.replace("floor_percent: 50", "floor_percent: 100"))
                .unwrap();
        let error = all_floors
            .check(&config(
                "{unit: hour, requests_per_unit: 8, algorithm: token_bucket}",
            ))
            .unwrap_err()[0]
            .to_string();
        assert!(
            error.contains("'floor_percent' 100 leaves home's pool no rate"),
            "{error}"
        );
        let carryover = parse_region(&format!("{GOOD_REGION_FILE}pool_mode: carryover\n")).unwrap();
        assert!(
            carryover
                .check(&config(
                    "{unit: second, requests_per_unit: 8, algorithm: token_bucket}"
                ))
                .is_ok(),
            "carryover keeps the pool whole"
        );
    }
}
