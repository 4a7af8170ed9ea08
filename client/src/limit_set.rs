//! The limits of one check: each limit as the limiter calls it, in report order and in call
//! order. A leaf the limiter, the leases and the in-flight counts all read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::policy::Policy;

/// One limit as the limiter calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckedLimit {
    pub(crate) name: Arc<str>,
    pub(crate) algorithm: Algorithm,
    /// Units charged per unit of cost.
    pub(crate) weight: u64,
    /// Pacing (token buckets): the longest wait a request may be given.
    pub(crate) paced: Option<Duration>,
    /// Read, never charged, never denying (a job's probe).
    pub(crate) probe: bool,
    /// A regional limit's lease key suffix (decided by `RL.REGIONAL`, alone in its group).
    pub(crate) lease_suffix: Option<Arc<str>>,
    /// The class of its keys: the `key_class` label of its metrics.
    pub(crate) key_class: Arc<str>,
}

/// The limits of a check, in the order statuses are reported (a policy's declaration order,
/// or a job's), and the order the store is called in (most specific key first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LimitSet {
    pub(crate) limits: Vec<CheckedLimit>,
    /// Limit indices, most specific key first (the order groups are called in).
    pub(crate) order: Vec<usize>,
    /// The longest window or refill period: how long the store's last answer is worth
    /// continuing from in a fallback.
    pub(crate) longest: Duration,
    /// The recorder its limits' quota gauges were last set in.
    pub(crate) gauged_for: Gauged,
}

impl LimitSet {
    /// The limits in report order; `specificity(i)` orders the calls (most specific first,
    /// stable among equals).
    pub(crate) fn new(limits: Vec<CheckedLimit>, specificity: impl Fn(usize) -> usize) -> Self {
        let longest = limits
            .iter()
            .map(|limit| limit.algorithm.window())
            .max()
            .unwrap_or(Duration::ZERO);
        let mut order: Vec<usize> = (0..limits.len()).collect();
        order.sort_by_key(|index| std::cmp::Reverse(specificity(*index)));
        Self {
            limits,
            order,
            longest,
            gauged_for: Gauged::default(),
        }
    }

    pub(crate) fn of(policy: &Policy) -> Self {
        let limits = policy
            .limits()
            .iter()
            .map(|limit| CheckedLimit {
                name: limit.shared_name(),
                algorithm: limit.algorithm().clone(),
                weight: limit.weight_units(),
                paced: limit.paced(),
                probe: false,
                lease_suffix: limit.lease_suffix().map(Arc::from),
                key_class: limit.shared_class(),
            })
            .collect();
        // A regional limit is called last (least specific), so it is never refunded
        // because a later group denied: what its lease paid cannot go back to the floor.
        let specificity: Vec<usize> = policy
            .limits()
            .iter()
            .map(|limit| match limit.lease_suffix() {
                Some(_) => 0,
                None => limit.key().specificity().saturating_add(1),
            })
            .collect();
        Self::new(limits, |index| specificity.get(index).copied().unwrap_or(0))
    }

    pub(crate) fn get(&self, index: usize) -> Option<&CheckedLimit> {
        self.limits.get(index)
    }

    pub(crate) fn len(&self) -> usize {
        self.limits.len()
    }
}

/// A limit set's marker of the recorder its gauges were last set in (0: none yet): a
/// policy's are set at its first decision, a job's (a limit set per call) at each.
#[derive(Debug, Default)]
pub(crate) struct Gauged(AtomicUsize);

impl Gauged {
    /// Marks the limits' gauges set in `recorder`; the recorder they were set in before.
    pub(crate) fn swap(&self, recorder: usize) -> usize {
        self.0.swap(recorder, Ordering::Relaxed)
    }
}

impl Clone for Gauged {
    /// A copy's gauges are set again (they may be another set's).
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Gauged {
    /// Not part of what a limit set is.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Gauged {}
