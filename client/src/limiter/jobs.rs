//! [`RateLimiter::check_job`]: limits given by the call, in order, decided all or nothing
//! on the path every check takes (deny cache, lease, store, fallback), under a profile's
//! settings and memory.

use std::fmt::Write as _;
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
        Ok(self
            .decide(&state, &checked.keys, &checked.id, checked.cost)
            .await)
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
    let charges: Vec<u64> = job
        .limits
        .iter()
        .filter_map(|limit| match limit.charge {
            Charge::Units(units) => Some(units),
            Charge::Probe => None,
        })
        .collect();
    // Equal charges are the cost (what leases and remembered denials compare); unequal
    // ones are weights of a cost of 1.
    let uniform = charges
        .first()
        .copied()
        .filter(|first| charges.iter().all(|units| units == first));
    let mut id = job
        .limits
        .iter()
        .map(|limit| limit.key.as_str())
        .collect::<Vec<_>>()
        .join("\u{0}");
    if uniform.is_none() && !charges.is_empty() {
        id.push('\u{1}');
        id.push_str(
            &charges
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    let mut limits = Vec::with_capacity(job.limits.len());
    for (index, limit) in job.limits.iter().enumerate() {
        // The limits too: a key whose limit changed (a plan's amount, on the same key) is
        // another key set for the denials and leases remembered.
        let _ = write!(id, "\u{3}{:?}", limit.algorithm.as_quota());
        let (weight, probe) = match (limit.charge, uniform) {
            (Charge::Probe, _) => {
                id.push('\u{2}');
                id.push_str(&index.to_string());
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
        });
    }
    // A regional limit is called last (see `LimitSet::of`).
    let specificity: Vec<usize> = job
        .limits
        .iter()
        .map(|limit| match limit.lease_suffix {
            Some(_) => 0,
            None => limit.specificity.saturating_add(1),
        })
        .collect();
    Ok(Checked {
        limits: LimitSet::new(limits, &specificity),
        keys: job.limits.iter().map(|limit| limit.key.clone()).collect(),
        id,
        cost: uniform.unwrap_or(1),
    })
}
