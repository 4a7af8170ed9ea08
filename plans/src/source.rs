//! A replica's view of the policy store: the latest snapshot, kept current by the change
//! notifications (pub/sub) and, as the backstop for a lost message or a reconnect, a check
//! of the version and stamp every [`PlanOptions::check_every`]. The view follows the store
//! wherever it goes, back to a lower version included (a store wiped or restored, then
//! changed again).
//!
//! Until a first snapshot is read (Redis down at start) the view is empty, so every
//! store-backed policy applies its own defaults; [`PlanSource::status`] and the metrics
//! `ratelimit_plans_loaded` / `ratelimit_plans_version` say so. Once read, a snapshot is
//! kept while Redis is out of reach.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use redis_ratelimit_client::{BuildError, Limit, PolicySource};

use super::connection::{PlanConnection, PlanServer};
use super::plan_store::{self, CHANNEL, PlanStoreError};
use super::snapshot::{Effective, Rule, Snapshot};
use super::spec::{LimitSpec, plan_kind_names};

/// How a [`PlanSource`] follows the store.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// The backstop: how often the version (and stamp) is compared even without a
    /// notification. A
    /// replica is never staler than this (plus one read) while Redis is reachable.
    pub check_every: Duration,
    /// Whether to follow the change notifications (off: only the periodic check).
    pub subscribe: bool,
    /// Longest wait for a connection or a read.
    pub timeout: Duration,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            check_every: Duration::from_millis(500),
            subscribe: true,
            timeout: Duration::from_secs(1),
        }
    }
}

/// Whether the store has been read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanStatus {
    /// Never read: the policies' defaults apply. The reason is the last error.
    Defaults(String),
    /// The snapshot at this version applies.
    Loaded(u64),
}

impl fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Defaults(reason) => write!(
                f,
                "policy store not read yet ({reason}): the policies' defaults apply"
            ),
            Self::Loaded(version) => write!(f, "policy store at version {version}"),
        }
    }
}

/// The snapshot in use and the offset of Redis's clock over this host's (override expiries
/// are instants of Redis's clock).
pub(crate) struct View {
    pub(crate) snapshot: Snapshot,
    clock_offset_ms: i64,
}

impl View {
    /// Now on Redis's clock, in ms since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        let local = local_now_ms();
        let now = i128::from(local).saturating_add(i128::from(self.clock_offset_ms));
        u64::try_from(now.max(0)).unwrap_or(u64::MAX)
    }
}

fn local_now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

struct Inner {
    server: PlanServer,
    options: PlanOptions,
    view: RwLock<Arc<View>>,
    status: RwLock<PlanStatus>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let task = self.task.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = task.take() {
            task.abort();
        }
    }
}

/// The policy store as this replica sees it. Cheap to clone (clones share one view).
#[derive(Clone)]
pub struct PlanSource {
    inner: Arc<Inner>,
}

impl fmt::Debug for PlanSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanSource")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl PlanSource {
    /// Follows the store at `url` (or, with the `sentinel` feature, on the primary a
    /// `redis+sentinel://` URL names): reads it once now (bounded by the options' timeout; if
    /// Redis is not there, the defaults apply meanwhile), then keeps the view current in a
    /// task of the current Tokio runtime (outside one, an error). Fails only on a malformed
    /// URL.
    pub async fn connect(url: &str, options: PlanOptions) -> Result<PlanSource, PlanStoreError> {
        Self::follow(PlanServer::from_url(url, options.timeout)?, options).await
    }

    /// Follows the store on the Redis Cluster that `nodes` (URLs of some of its nodes)
    /// belong to, as [`connect`](Self::connect) does on one server: the store's commands go
    /// to the `{rl-policy}` slot's primary wherever it is.
    pub async fn connect_cluster(
        nodes: &[&str],
        options: PlanOptions,
    ) -> Result<PlanSource, PlanStoreError> {
        let server = PlanServer::cluster(nodes, options.timeout)?;
        Self::follow(server, options).await
    }

    /// Follows the store on `server`.
    pub async fn follow(
        server: PlanServer,
        options: PlanOptions,
    ) -> Result<PlanSource, PlanStoreError> {
        let source = PlanSource {
            inner: Arc::new(Inner {
                server,
                options,
                view: RwLock::new(Arc::new(View {
                    snapshot: Snapshot::default(),
                    clock_offset_ms: 0,
                })),
                status: RwLock::new(PlanStatus::Defaults("not read yet".into())),
                task: Mutex::new(None),
            }),
        };
        let mut connection = None;
        refresh(&source.inner, &mut connection).await;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            PlanStoreError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "PlanSource::connect runs inside a Tokio runtime (it follows the store in a task)",
            )))
        })?;
        let task = runtime.spawn(keep_following(Arc::downgrade(&source.inner), connection));
        *source
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(source)
    }

    /// Whether the store was read, and at which version.
    pub fn status(&self) -> PlanStatus {
        self.inner
            .status
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The version in use (0 before the first read).
    pub fn version(&self) -> u64 {
        self.view().snapshot.version
    }

    /// The limits that apply to `tenant` now (on Redis's clock), given `defaults`, with the
    /// rule each comes from: [`Snapshot::resolve`] on the snapshot in use.
    pub fn resolve(&self, tenant: &str, defaults: &[LimitSpec]) -> Vec<Effective> {
        let view = self.view();
        view.snapshot.resolve(tenant, defaults, view.now_ms())
    }

    /// The view in use; one check uses one view throughout.
    pub(crate) fn view(&self) -> Arc<View> {
        Arc::clone(
            &self
                .inner
                .view
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// The `key_class` of the policy's own defaults.
pub const DEFAULT_CLASS: &str = "default";

/// The `key_class` of a limit an override sets (one tenant's, or a wildcard's).
pub const OVERRIDE_CLASS: &str = "override";

/// A limit that applies to a tenant, and the class of the tenant's keys that the limiter's
/// metrics label it with (`key_class`): the tenant's plan, [`OVERRIDE_CLASS`] or
/// [`DEFAULT_CLASS`], never the tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClassedLimit {
    /// The limit.
    pub spec: LimitSpec,
    /// Where it comes from, as a metric label.
    pub class: String,
}

impl ClassedLimit {
    /// `effective`'s limit and the class its rule gives.
    pub fn of(effective: Effective) -> Self {
        let class = match effective.rule {
            Rule::Default => DEFAULT_CLASS.to_string(),
            Rule::Plan(plan) => plan,
            Rule::Override { .. } => OVERRIDE_CLASS.to_string(),
        };
        Self {
            spec: effective.spec,
            class,
        }
    }
}

/// The limiter's view of the store: a store-backed policy's limits for a tenant, from one
/// snapshot, keyed by tenant, policy, limit name and kind ([`key_template`](crate::key_template)),
/// labelled by the tenant's plan.
impl PolicySource for PlanSource {
    type Limit = ClassedLimit;

    fn default_limit(&self, policy: &str, limit: &Limit) -> Result<ClassedLimit, BuildError> {
        LimitSpec::from_algorithm(limit.name(), limit.algorithm())
            .filter(|_| limit.weight_units() == 1 && limit.paced().is_none())
            .ok_or_else(|| {
                BuildError::StorePolicy(format!(
                    "policy '{policy}', limit '{}': a store-backed policy's defaults are plan \
                     limits (amount per period of {}; weight 1, not paced, not in-flight)",
                    limit.name(),
                    plan_kind_names()
                ))
            })
            .map(|spec| ClassedLimit {
                spec,
                class: DEFAULT_CLASS.to_string(),
            })
    }

    fn limits(&self, tenant: &str, defaults: &[ClassedLimit]) -> Vec<ClassedLimit> {
        let view = self.view();
        let defaults: Vec<LimitSpec> = defaults.iter().map(|limit| limit.spec.clone()).collect();
        view.snapshot
            .resolve(tenant, &defaults, view.now_ms())
            .into_iter()
            .map(ClassedLimit::of)
            .collect()
    }

    fn to_limit(&self, tenant_input: &str, policy: &str, limit: &ClassedLimit) -> Option<Limit> {
        let spec = &limit.spec;
        let algorithm = spec.algorithm().clone();
        let key = crate::key_template(tenant_input, policy, spec.name(), spec.kind());
        let built = Limit::new(spec.name(), algorithm, &key).ok()?;
        // A plan's name is a limit name, so a valid class; were it not, unlabelled.
        Some(built.clone().key_class(&limit.class).unwrap_or(built))
    }
}

/// Reads the store if its version or stamp differs from the view's (or it was never read),
/// and puts what it read in force whatever its version: a store wiped, restored or failed
/// over to a lagging replica and changed again is at a lower version, or at the same with
/// other contents (and another stamp), and it is the store every writer now changes. A
/// store holding a field this version cannot read is not applied (the snapshot in force
/// stays, and the read counts as failed).
async fn refresh(inner: &Inner, connection: &mut Option<PlanConnection>) {
    let timeout = inner.options.timeout;
    let result = tokio::time::timeout(timeout, async {
        let con = match connection {
            Some(con) => con,
            None => connection.insert(inner.server.connect().await?),
        };
        let held = {
            let view = inner.view.read().unwrap_or_else(PoisonError::into_inner);
            (view.snapshot.version, view.snapshot.stamp.clone())
        };
        let loaded = matches!(
            *inner.status.read().unwrap_or_else(PoisonError::into_inner),
            PlanStatus::Loaded(_)
        );
        if loaded && plan_store::revision(con).await? == held {
            return Ok(None);
        }
        let local_before = local_now_ms();
        let (snapshot, server_ms) = plan_store::read(con).await?;
        if let Some(bad) = snapshot.unreadable.first() {
            return Err(PlanStoreError::Corrupt(bad.reason.clone()));
        }
        let local_after = local_now_ms();
        let local_mid = local_before.saturating_add(local_after.saturating_sub(local_before) / 2);
        let offset = i128::from(server_ms).saturating_sub(i128::from(local_mid));
        Ok::<_, PlanStoreError>(Some((snapshot, i64::try_from(offset).unwrap_or(0))))
    })
    .await;
    match result {
        Ok(Ok(Some((snapshot, clock_offset_ms)))) => {
            let version = snapshot.version;
            // One task reads, one read at a time: what it read last is the store now. The
            // view, the status and the gauge change together, under the view's lock.
            let mut view = inner.view.write().unwrap_or_else(PoisonError::into_inner);
            *view = Arc::new(View {
                snapshot,
                clock_offset_ms,
            });
            *inner.status.write().unwrap_or_else(PoisonError::into_inner) =
                PlanStatus::Loaded(version);
            metrics::gauge!("ratelimit_plans_version").set(version as f64);
            metrics::gauge!("ratelimit_plans_loaded").set(1.0);
            drop(view);
        }
        Ok(Ok(None)) => {}
        Ok(Err(error)) => {
            // A store holding what this version cannot read is no connection's fault.
            if matches!(
                error,
                PlanStoreError::Redis(_) | PlanStoreError::Stale { .. }
            ) {
                *connection = None;
            }
            failed(inner, error.to_string());
        }
        Err(_) => {
            *connection = None;
            failed(inner, format!("no answer within {timeout:?}"));
        }
    }
}

fn failed(inner: &Inner, reason: String) {
    metrics::counter!("ratelimit_plans_read_errors_total").increment(1);
    let mut status = inner.status.write().unwrap_or_else(PoisonError::into_inner);
    if let PlanStatus::Defaults(_) = *status {
        *status = PlanStatus::Defaults(reason);
        metrics::gauge!("ratelimit_plans_loaded").set(0.0);
    }
}

/// Follows the store until the source is dropped: notifications when subscribed, a version
/// check every period in any case; a lost subscription is made again at the next period.
async fn keep_following(weak: Weak<Inner>, mut connection: Option<PlanConnection>) {
    let Some((server, options)) = weak
        .upgrade()
        .map(|inner| (inner.server.clone(), inner.options.clone()))
    else {
        return;
    };
    let mut ticker = tokio::time::interval(options.check_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut messages = None;
        if options.subscribe {
            let subscribed = tokio::time::timeout(options.timeout, async {
                let mut pubsub = server.pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            if let Ok(Ok(pubsub)) = subscribed {
                messages = Some(pubsub.into_on_message());
            }
        }
        // Read after subscribing: a change between the last read and the subscription is
        // not missed.
        {
            let Some(inner) = weak.upgrade() else { return };
            refresh(&inner, &mut connection).await;
        }
        loop {
            let notified = async {
                match messages.as_mut() {
                    Some(stream) => stream.next().await.map(|_| ()),
                    None => std::future::pending().await,
                }
            };
            let lost = tokio::select! {
                message = notified => message.is_none(),
                _ = ticker.tick() => false,
            };
            let Some(inner) = weak.upgrade() else { return };
            refresh(&inner, &mut connection).await;
            drop(inner);
            if lost || (options.subscribe && messages.is_none()) {
                break;
            }
        }
    }
}
