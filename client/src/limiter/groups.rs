//! Store calls: a policy's limits grouped by slot, called in turn, with refunds keeping the
//! whole check all-or-nothing across groups.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::decide::binding_of;
use super::state::{Acquired, PolicyState, Target};
use crate::breaker::Breaker;
use crate::clock::LimiterClock;
use crate::metrics::{self, Handles};
use crate::store::{Acquire, GroupGrant, LimitCall, Refund, Store, StoreBackend, StoreError, View};

/// The store and what watches it: every call a check makes goes through here, timed, and
/// recorded in the circuit breaker.
pub(super) struct Groups {
    pub(super) store: Arc<dyn Store>,
    pub(super) breaker: Breaker,
    clock: LimiterClock,
    /// The per-call metrics, as handles kept for this limiter.
    pub(super) metrics: Handles,
}

impl Groups {
    pub(super) fn new(
        store: Arc<dyn Store>,
        breaker: Breaker,
        clock: LimiterClock,
        near_limit_share: f64,
    ) -> Self {
        Self {
            store,
            breaker,
            clock,
            metrics: Handles::new(near_limit_share),
        }
    }

    /// The store calls a check makes: the charged limits grouped by slot (one group when
    /// the store is not a cluster), most specific group first; without `RL.MULTI`, one
    /// group per limit.
    pub(super) fn plan(&self, state: &PolicyState, keys: &[String]) -> Vec<Vec<usize>> {
        let multi = self.store.capabilities().multi;
        self.grouped(state, keys, multi, |index| !state.probe(index))
    }

    /// The groups of [`plan`](Self::plan), each kept to the limits `keep` selects (a group
    /// left with none is dropped): the calls that give back, or settle, what a check took.
    pub(super) fn plan_only(
        &self,
        state: &PolicyState,
        keys: &[String],
        keep: impl Fn(usize) -> bool,
    ) -> Vec<Vec<usize>> {
        self.plan(state, keys)
            .into_iter()
            .map(|mut group| {
                group.retain(|index| keep(*index));
                group
            })
            .filter(|group| !group.is_empty())
            .collect()
    }

    /// Gives `units` back to every limit of `target` that `keep` selects, grouped as a
    /// check charges them (see [`refund_groups`](Self::refund_groups)). Returns whether
    /// every refund reached the store.
    pub(super) async fn refund_plan(
        &self,
        target: Target<'_>,
        units: u64,
        keep: impl Fn(usize) -> bool,
    ) -> bool {
        let refunds: Vec<(Vec<usize>, u64)> = self
            .plan_only(target.state, target.keys, keep)
            .into_iter()
            .map(|group| (group, units))
            .collect();
        self.refund_groups(target, &refunds).await
    }

    /// The reads of a check's probes, grouped by slot (one pipeline of `RL.PEEK`s each).
    fn plan_probes(&self, state: &PolicyState, keys: &[String]) -> Vec<Vec<usize>> {
        self.grouped(state, keys, true, |index| state.probe(index))
    }

    fn grouped(
        &self,
        state: &PolicyState,
        keys: &[String],
        multi: bool,
        selected: impl Fn(usize) -> bool,
    ) -> Vec<Vec<usize>> {
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for &index in state.limits.order.iter().filter(|index| selected(**index)) {
            let key = keys.get(index);
            let slot = key.and_then(|key| self.store.slot(key));
            // A group shares one call, so: not a paced limit (RL.MULTI does not pace), not a
            // regional one (RL.REGIONAL decides one limit), and not two limits on one key
            // (two templates can render the same key).
            let alone = |index: usize| state.paced(index) || state.regional(index);
            let fits = |group: &Vec<usize>| {
                !alone(index)
                    && group
                        .iter()
                        .all(|other| !alone(*other) && keys.get(*other) != key)
            };
            match groups
                .iter_mut()
                .find(|(s, group)| multi && *s == slot && fits(group))
            {
                Some((_, group)) => group.push(index),
                None => groups.push((slot, vec![index])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// Takes `units` from every group in turn (with `partial_min`, as many as every group
    /// has, at least that). A group that grants fewer units than earlier ones lowers the
    /// grant, and the earlier groups are refunded the difference; a denial or a failure
    /// refunds them entirely.
    pub(super) async fn acquire(
        &self,
        target: Target<'_>,
        groups: &[Vec<usize>],
        units: u64,
        partial_min: Option<u64>,
        op: &'static str,
    ) -> Result<Acquired, StoreError> {
        let state = target.state;
        let mut units = units.max(1);
        // The groups charged so far, for refunds (the last group is never refunded here).
        let mut charged: Vec<(&[usize], u64)> = Vec::new();
        let mut views: Vec<(usize, View)> = Vec::new();
        let mut backend = None;
        for (called, group) in groups.iter().enumerate() {
            let request = Acquire {
                limits: target.calls(group),
                units,
                partial_min: partial_min.map(|min| min.min(units)),
                holder: target.holder,
            };
            let grant = match self.timed_call(state, &request, op).await {
                Ok(grant) => grant,
                Err(error) => {
                    self.refund_groups(target, &charged).await;
                    return Err(error);
                }
            };
            let GroupGrant {
                granted,
                binding,
                views: group_views,
                backend: answered,
            } = grant;
            backend = Some(answered);
            views.extend(group.iter().copied().zip(group_views));
            if granted == 0 {
                // Each limit's view is of the call as if charged; nothing was, so the limits
                // that alone would have admitted still hold the units they showed taken.
                let evaluated = partial_min.map_or(units, |min| min.clamp(1, units));
                for (index, view) in views.iter_mut().filter(|(i, _)| group.contains(i)) {
                    if view.allowed {
                        give_back(view, charge(state, *index, evaluated));
                    }
                }
                let binding = group.get(binding).copied().unwrap_or(0);
                self.refund_all(target, &charged, &mut views).await;
                return Ok(Acquired {
                    granted: 0,
                    views,
                    binding,
                    backend: answered,
                });
            }
            if granted < units {
                // A later group granted less: give the earlier ones the difference back.
                let excess: Vec<(&[usize], u64)> = charged
                    .iter()
                    .map(|(group, charged_units)| (*group, charged_units.saturating_sub(granted)))
                    .collect();
                self.refund_groups(target, &excess).await;
                for (_, charged_units) in &mut charged {
                    *charged_units = granted;
                }
                units = granted;
            }
            if called.saturating_add(1) < groups.len() {
                charged.push((group, granted));
            }
        }
        views.sort_by_key(|(index, _)| *index);
        let binding = binding_of(state, &views, units);
        // A policy has at least one limit, so at least one group answered.
        let backend =
            backend.ok_or_else(|| StoreError::Config("a policy without limits".into()))?;
        Ok(Acquired {
            granted: units,
            views,
            binding,
            backend,
        })
    }

    /// Refunds the groups charged so far after a denial, and shows it in their views.
    async fn refund_all(
        &self,
        target: Target<'_>,
        charged: &[(&[usize], u64)],
        views: &mut [(usize, View)],
    ) {
        if charged.is_empty() {
            return;
        }
        let state = target.state;
        self.metrics.group_refunded(&state.name);
        if self.refund_groups(target, charged).await {
            for (group, units) in charged {
                for (index, view) in views.iter_mut().filter(|(i, _)| group.contains(i)) {
                    give_back(view, charge(state, *index, *units));
                }
            }
        }
        views.sort_by_key(|(index, _)| *index);
    }

    /// Gives units back to groups (in-flight limits release the target's holder),
    /// concurrently. Returns whether every refund reached the store (a lost refund
    /// under-admits; it never over-admits).
    pub(super) async fn refund_groups(
        &self,
        target: Target<'_>,
        refunds: &[(impl AsRef<[usize]>, u64)],
    ) -> bool {
        let state = target.state;
        let requests: Vec<Refund<'_>> = refunds
            .iter()
            .filter(|(_, units)| *units > 0)
            .map(|(group, units)| Refund {
                limits: target.calls(group.as_ref()),
                units: *units,
                holder: target.holder,
            })
            .collect();
        let mut ok = true;
        let timeout = state.settings.timeout;
        let calls = requests.iter().map(|request| async move {
            let started = self.clock.now();
            let result = self
                .reply_within(
                    self.store.refund(request),
                    &request.limits,
                    timeout,
                    started,
                )
                .await;
            self.metrics.store_latency(
                &state.name,
                "refund",
                self.clock.now().saturating_duration_since(started),
            );
            result
        });
        for result in join_all(calls).await {
            if let Err(error) = result {
                self.metrics.store_error(&state.name, error.kind());
                ok = false;
            }
        }
        ok
    }

    /// One store call, bounded by the policy's timeout (see [`Groups::reply_within`]),
    /// recorded in metrics and the breaker.
    async fn timed_call(
        &self,
        state: &PolicyState,
        request: &Acquire<'_>,
        op: &'static str,
    ) -> Result<GroupGrant, StoreError> {
        let timeout = state.settings.timeout;
        let breaker = &self.breaker;
        let sent = self.clock.now();
        let call = if op == PEEK {
            self.store.peek(request)
        } else {
            self.store.acquire(request)
        };
        let result = self
            .reply_within(call, &request.limits, timeout, sent)
            .await;
        let now = self.clock.now();
        self.metrics
            .store_latency(&state.name, op, now.saturating_duration_since(sent));
        match &result {
            Ok(_) => {
                if breaker.success(now) {
                    metrics::circuit(false);
                }
            }
            Err(error) => {
                self.metrics.store_error(&state.name, error.kind());
                if error.is_unavailability() && breaker.failure(sent, now) {
                    metrics::circuit_opened();
                }
            }
        }
        result
    }
}

impl Groups {
    /// Waits for a store call's reply, and gives up (a [`StoreError::Timeout`]) only when
    /// the store is not answering: its calls on the call's slot have heard no reply for a
    /// whole `timeout` ([`Store::silent_for`]), judged while this runtime has nothing else
    /// to run ([`runtime_idle`]). A burst waiting behind replies that keep coming waits for
    /// its own; a timer that fired late (this process was not running) first gives the
    /// connection half a timeout more to read what arrived meanwhile. A call waits at most
    /// [`MOST_TIMEOUTS`] timeouts in all, however the store answers.
    ///
    /// A store that does not track its replies gives each call its timeout, and one more
    /// if its timer fired late or the store answered another call since it was sent.
    async fn reply_within<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
        limits: &[LimitCall<'_>],
        timeout: Duration,
        sent: Instant,
    ) -> Result<T, StoreError> {
        tokio::pin!(call);
        let started = Instant::now();
        let most = timeout.saturating_mul(MOST_TIMEOUTS);
        let half = timeout.checked_div(2).unwrap_or_default();
        let mut wait = timeout;
        let mut excused = false;
        // When this runtime was last seen with tasks queued ahead of this call.
        let mut last_busy: Option<Instant> = None;
        loop {
            let armed = Instant::now();
            if let Ok(result) = tokio::time::timeout(wait, &mut call).await {
                return result;
            }
            // Before judging, the tasks that read replies get a turn: ours may be among them.
            let yielded = Instant::now();
            tokio::task::yield_now().await;
            if let Some(result) = (&mut call).now_or_never() {
                return result;
            }
            if yielded.elapsed() >= QUEUED_AFTER {
                // Tasks were queued ahead of this one (the runtime's metrics cannot say so
                // on a current-thread runtime): until they ran, the calls' bytes may not
                // have left, so the store's silence counts from now on.
                last_busy = Some(Instant::now());
            }
            let late = armed.elapsed() > wait.saturating_add(half);
            // The call's slot (its first key's; a group shares one), found only now that
            // its timeout fired.
            let slot = limits.first().and_then(|limit| self.store.slot(limit.key));
            let silent = self
                .store
                .silent_for(slot)
                .map(|silent| last_busy.map_or(silent, |since| silent.min(since.elapsed())));
            let Some(silent) = silent else {
                // No tracking: one more timeout after a stall of this process, or when the
                // store answered another call since this one was sent.
                let waited = self.clock.now().saturating_duration_since(sent);
                let stalled = waited > timeout.saturating_add(half);
                if excused || !(stalled || self.breaker.answered_since(sent)) {
                    return Err(StoreError::Timeout);
                }
                excused = true;
                continue;
            };
            if started.elapsed() >= most {
                return Err(StoreError::Timeout);
            }
            if late && !excused {
                excused = true;
                wait = half;
            } else if silent >= timeout && runtime_idle() {
                return Err(StoreError::Timeout);
            } else if silent >= timeout {
                // Replies may be waiting in this runtime's own queues: judge once it is
                // idle (every reply it read handed on), not before.
                wait = Duration::from_millis(1);
            } else {
                wait = timeout.saturating_sub(silent).max(Duration::from_millis(1));
            }
        }
    }
}

/// Whether this process's runtime has nothing to run but the caller (no task queued, every
/// other worker parked): only then is a silence the store's. While tasks wait to run, the
/// replies they would hand on may already be here (1,000 concurrent checks on a loaded
/// machine kept a multi-thread runtime's reply readers queued for over 50 ms).
fn runtime_idle() -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return true;
    };
    let metrics = runtime.metrics();
    let workers = metrics.num_workers();
    // An odd count of parks and unparks: that worker is parked now.
    let parked = (0..workers)
        .filter(|worker| metrics.worker_park_unpark_count(*worker) % 2 == 1)
        .count();
    metrics.global_queue_depth() == 0 && parked.saturating_add(1) >= workers
}

/// How long a yield to the runtime takes, at least, when tasks were queued ahead of the
/// yielding one (an idle runtime hands the turn back in microseconds).
const QUEUED_AFTER: Duration = Duration::from_millis(1);

/// The most timeouts a store call waits for its reply while the store answers other calls
/// (a burst queued behind them): 100, 5 s at the default 50 ms.
pub(super) const MOST_TIMEOUTS: u32 = 100;

/// The operation label of a probe's read (a [`Store::peek`](crate::store::Store::peek)).
const PEEK: &str = "peek";

impl Groups {
    /// Reads every probe of the check (each as a call of one unit would see it, nothing
    /// taken): their views by policy index, shown as a probe reports them (never denying,
    /// the unit a real call would take still there), and the backend that answered.
    pub(super) async fn read_probes(
        &self,
        target: Target<'_>,
    ) -> Result<(Vec<(usize, View)>, Option<StoreBackend>), StoreError> {
        let state = target.state;
        let mut views = Vec::new();
        let mut backend = None;
        for group in self.plan_probes(state, target.keys) {
            let request = Acquire {
                limits: target.calls(&group),
                units: 1,
                partial_min: None,
                holder: None,
            };
            let grant = self.timed_call(state, &request, PEEK).await?;
            backend = Some(grant.backend);
            views.extend(group.into_iter().zip(grant.views.into_iter().map(probed)));
        }
        Ok((views, backend))
    }
}

/// A probe's view: a peek of one unit shows what would be left after taking it; a probe
/// takes nothing and never denies.
pub(super) fn probed(mut view: View) -> View {
    if view.allowed {
        view.remaining = view.remaining.saturating_add(1).min(view.limit);
    }
    view.allowed = true;
    view.retry_after = Some(std::time::Duration::ZERO);
    view
}

/// What a call of `units` takes from limit `index`: `units × weight`, or one slot of an
/// in-flight limit whatever the units.
fn charge(state: &PolicyState, index: usize, units: u64) -> u64 {
    if state.in_flight(index) {
        1
    } else {
        units.saturating_mul(state.weight(index))
    }
}

/// Shows `units` given back in a view (never beyond the limit).
fn give_back(view: &mut View, units: u64) {
    view.remaining = view.remaining.saturating_add(units).min(view.limit);
}

/// Runs futures concurrently and collects their outputs in order (a few refunds at most:
/// no need for a crate).
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|context| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(context) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
