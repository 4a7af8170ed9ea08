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
        self.decide(&state, &checked.keys, &checked.id, checked.cost)
            .await
    }
}

/// Room for one limit's quota in a key set's id (see [`checked`]).
const ID_BYTES_PER_LIMIT: usize = 128;

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
    // Written once in a buffer sized for the keys and each limit's quota (its `Debug` form
    // is some 60-100 bytes), instead of joined from lists.
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
        for (index, units) in charges().enumerate() {
            if index > 0 {
                id.push(',');
            }
            let _ = write!(id, "{units}");
        }
    }
    let mut limits = Vec::with_capacity(job.limits.len());
    for (index, limit) in job.limits.iter().enumerate() {
        // The limits too: a key whose limit changed (a plan's amount, on the same key) is
        // another key set for the denials and leases remembered.
        let _ = write!(id, "\u{3}{:?}", limit.algorithm.as_quota());
        let (weight, probe) = match (limit.charge, uniform) {
            (Charge::Probe, _) => {
                let _ = write!(id, "\u{2}{index}");
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
