//! [`RateLimiter::check_job`]: limits given by the call, in order, decided all or nothing
//! on the path every check takes (deny cache, lease, store, fallback), under a profile's
//! settings and memory.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::state::{CheckedLimit, LimitSet, PolicyState};
use super::{CheckError, RateLimiter};
use crate::decision::Decision;
use crate::job::{Charge, Job, JobError};
use crate::policy::MAX_LIMITS;

impl RateLimiter {
    /// Checks a job: admitted only if every limit it charges admits it, and then charged
    /// to every one of them (all or nothing, as a policy's limits); its probes are read and
    /// never deny. The decision's `limits` are one status per job limit, in the job's
    /// order, or none when no limit was consulted (a fallback admitting or denying
    /// everything).
    pub async fn check_job(&self, job: &Job) -> Result<Decision, CheckError> {
        let profile = self
            .inner
            .profiles
            .get(job.profile.as_str())
            .ok_or_else(|| CheckError::UnknownPolicy(job.profile.clone()))?;
        let checked = checked(job).map_err(CheckError::Job)?;
        let state = PolicyState {
            name: job
                .label
                .as_deref()
                .map_or_else(|| Arc::clone(&profile.name), Arc::from),
            limits: Arc::new(checked.limits),
            ..profile.clone()
        };
        self.decide(&state, &checked.keys, &checked.id, checked.cost)
            .await
    }
}

/// Room for one limit's quota in a key set's id (see [`checked`]): its fields' bytes, each
/// one char of at most 2 bytes.
const ID_BYTES_PER_LIMIT: usize = 128;

/// Writes the bytes a value's `Hash` gives a hasher into a key set's id, one char per byte
/// (U+0000 to U+00FF): an exact, fixed-width encoding of a quota's fields (every field of
/// its kind, in order, after its kind's tag), with no text of its numbers. It keeps no
/// digest: [`Hasher::finish`] is never called on it.
struct IdWriter<'a>(&'a mut String);

impl Hasher for IdWriter<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend(bytes.iter().copied().map(char::from));
    }

    fn finish(&self) -> u64 {
        0
    }
}

/// A job as the limiter checks it.
struct Checked {
    limits: LimitSet,
    keys: Vec<String>,
    /// The key set's id: its keys, and what tells its checks apart (the limits, the
    /// weights of unequal charges, which limits are probes).
    id: String,
    /// Units per unit of weight: the charge when every charged limit takes the same.
    cost: u64,
}

fn checked(job: &Job) -> Result<Checked, JobError> {
    if job.limits.is_empty() {
        return Err(JobError::NoLimits);
    }
    if job.limits.len() > MAX_LIMITS {
        return Err(JobError::TooManyLimits(job.limits.len()));
    }
    for (index, limit) in job.limits.iter().enumerate() {
        if job
            .limits
            .iter()
            .take(index)
            .any(|other| other.key == limit.key)
        {
            return Err(JobError::DuplicateKey(limit.key.clone()));
        }
        if limit.charge == Charge::Units(0) {
            return Err(JobError::ZeroUnits(limit.name.to_string()));
        }
    }
    let charges = || {
        job.limits.iter().filter_map(|limit| match limit.charge {
            Charge::Units(units) => Some(units),
            Charge::Probe => None,
        })
    };
    // Equal charges are the cost (what leases and remembered denials compare); unequal
    // ones are weights of a cost of 1.
    let mut charged = charges();
    let uniform = charged
        .next()
        .filter(|first| charged.all(|units| units == *first));
    // Written once in a buffer sized for the keys and each limit's quota (its fields, some
    // 40-80 bytes), instead of joined from lists.
    let keys_bytes = job
        .limits
        .iter()
        .map(|limit| limit.key.len().saturating_add(1))
        .fold(0usize, usize::saturating_add);
    let mut id = String::with_capacity(
        keys_bytes.saturating_add(job.limits.len().saturating_mul(ID_BYTES_PER_LIMIT)),
    );
    for (index, limit) in job.limits.iter().enumerate() {
        if index > 0 {
            id.push('\u{0}');
        }
        id.push_str(&limit.key);
    }
    if uniform.is_none() && charges().next().is_some() {
        id.push('\u{1}');
        for units in charges() {
            IdWriter(&mut id).write_u64(units);
        }
    }
    let mut limits = Vec::with_capacity(job.limits.len());
    for (index, limit) in job.limits.iter().enumerate() {
        // The limits too: a key whose limit changed (a plan's amount, on the same key) is
        // another key set for the denials and leases remembered.
        id.push('\u{3}');
        limit.algorithm.as_quota().hash(&mut IdWriter(&mut id));
        let (weight, probe) = match (limit.charge, uniform) {
            (Charge::Probe, _) => {
                id.push('\u{2}');
                IdWriter(&mut id).write_usize(index);
                (1, true)
            }
            (Charge::Units(_), Some(_)) => (1, false),
            (Charge::Units(units), None) => (units, false),
        };
        limits.push(CheckedLimit {
            name: Arc::clone(&limit.name),
            algorithm: limit.algorithm.clone(),
            weight,
            paced: None,
            probe,
            lease_suffix: limit.lease_suffix.clone(),
            key_class: limit
                .key_class
                .clone()
                .unwrap_or_else(crate::policy::default_class),
        });
    }
    // A regional limit is called last (see `LimitSet::of`).
    let specificity = |index: usize| {
        job.limits
            .get(index)
            .map_or(0, |limit| match limit.lease_suffix {
                Some(_) => 0,
                None => limit.specificity.saturating_add(1),
            })
    };
    Ok(Checked {
        limits: LimitSet::new(limits, specificity),
        keys: job.limits.iter().map(|limit| limit.key.clone()).collect(),
        id,
        cost: uniform.unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Algorithm;
    use crate::job::JobLimit;

    fn id(limits: &[(&str, Algorithm, Option<u64>)]) -> String {
        let job = limits
            .iter()
            .fold(Job::new("p"), |job, (key, algorithm, units)| {
                let limit = JobLimit::new("l", *key, algorithm.clone());
                job.limit(match units {
                    Some(units) => limit.units(*units),
                    None => limit.probe(),
                })
            });
        checked(&job).map(|checked| checked.id).unwrap_or_default()
    }

    #[test]
    fn a_key_sets_id_is_its_keys_and_its_limits_values() {
        let minute = Duration::from_secs(60);
        let ten = Algorithm::fixed_window(10, minute).unwrap();
        let eleven = Algorithm::fixed_window(11, minute).unwrap();
        let sliding = Algorithm::sliding_window(10, minute).unwrap();
        let bucket = Algorithm::token_bucket(10, minute).unwrap();
        let same = id(&[("a", ten.clone(), Some(1)), ("b", bucket.clone(), Some(1))]);
        assert!(!same.is_empty());
        assert_eq!(
            same,
            id(&[("a", ten.clone(), Some(1)), ("b", bucket.clone(), Some(1))])
        );
        let others = [
            id(&[("a", eleven, Some(1)), ("b", bucket.clone(), Some(1))]),
            id(&[("a", sliding, Some(1)), ("b", bucket.clone(), Some(1))]),
            id(&[("a", ten.clone(), Some(1)), ("b", bucket.clone(), None)]),
            id(&[("a", ten.clone(), Some(1)), ("b", bucket.clone(), Some(2))]),
            id(&[("b", bucket.clone(), Some(1)), ("a", ten.clone(), Some(1))]),
            id(&[("a", ten.clone(), Some(2)), ("b", bucket.clone(), Some(3))]),
        ];
        for (index, other) in others.iter().enumerate() {
            assert_ne!(&same, other, "case {index}");
        }
        assert_ne!(others[3], others[5], "the weights are in the id");
        // The quota's fields, not their text: no digit of 10 or 60 is written.
        let alone = id(&[("k", ten, Some(1))]);
        assert!(!alone.contains("10") && !alone.contains("60"), "{alone:?}");
    }
}
