//! A request's decision: its descriptors resolved to limits ([`resolve`](crate::resolve)),
//! then decided by the client library as one job each for the enforced and the
//! shadow-mode limits (limits in order in, statuses in order out, all or nothing): the
//! enforced first; the shadow ones after, charged only if the request is admitted, read
//! otherwise. A limit of 0 denies without asking the store, and the other limits are then
//! read, not charged. Under the global shadow mode a denial is reported and admitted.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_ratelimit_client::expiring::Expiring;
use redis_ratelimit_client::job::Charge;
use redis_ratelimit_client::{
    CheckError, Decision, InFlight, Job, JobLimit, LimitStatus, RateLimiter,
};
use serde_json::{Map, Value};

use crate::config::{Config, RegionConfig};
use crate::metrics;
use crate::plans::Plans;
use crate::regions::hot_keys::HotKeys;
use crate::regions::split::Parts;
use crate::request::{BadRequest, Bounds, CheckRequest};
use crate::resolve::{self, Item};
use crate::revision::{Revision, Revisions};
use crate::tally::Tally;
use crate::verdict::{CheckFailure, Decider, Status, Verdict};

#[cfg(test)]
mod tests;

/// The job profile every check runs under (the service's failure mode, timeout, lease).
pub const PROFILE: &str = "rls";

struct Held {
    in_flight: InFlight,
}

/// How a set of limits is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// Charged (all or nothing), deciding the request.
    Enforce,
    /// Charged (all or nothing), reported, never denying.
    Shadow,
    /// Read only, reported, never denying (shadow limits of a denied request).
    ShadowRead,
}

/// How the engine decides and what it answers besides the decision.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// What a request may carry.
    pub bounds: Bounds,
    /// The start of every Redis key.
    pub key_prefix: String,
    /// The global shadow mode: every denial reported, every request admitted.
    pub shadow_mode: bool,
    /// Answers carry the reference's dynamic metadata (`RESPONSE_DYNAMIC_METADATA`).
    pub reference_metadata: bool,
    /// The most admitted requests whose in-flight slots are held for release at once
    /// (`--max-tracked-keys`): past it, the one held longest ago is forgotten (its slots
    /// free themselves in Redis after their ttl).
    pub max_held: usize,
    /// A descriptor admitted with more than this share of its limit used is near it (the
    /// reference's `NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f64,
}

/// Whether a limit with `remaining` of `quota` left has more than `ratio` of it used.
#[allow(clippy::cast_precision_loss)]
fn near_limit(remaining: u64, quota: u64, ratio: f64) -> bool {
    quota > 0 && (remaining as f64) < (1.0 - ratio) * (quota as f64)
}

/// The service's decisions.
pub struct Engine {
    config: RwLock<Arc<Config>>,
    limiter: RateLimiter,
    settings: EngineSettings,
    held: Mutex<Expiring<Held>>,
    plans: Plans,
    /// This service as a region of a shared quota: its settings and the hot limits noted.
    region: Option<(Arc<RegionConfig>, Arc<HotKeys>)>,
    /// Which config is in force.
    revisions: Revisions,
    /// Requests decided, by who decided.
    tally: Tally,
}

impl Engine {
    /// An engine over `config`, deciding with `limiter` (which has the [`PROFILE`] job
    /// profile); `plans` serves the limits that name a `tenant_key`.
    pub fn new(
        config: Config,
        limiter: RateLimiter,
        plans: Plans,
        settings: EngineSettings,
    ) -> Self {
        Self {
            config: RwLock::new(Arc::new(config)),
            limiter,
            held: Mutex::new(Expiring::bounded(settings.max_held)),
            settings,
            plans,
            region: None,
            revisions: Revisions::new(0),
            tally: Tally::default(),
        }
    }

    /// The config given to [`new`](Self::new) was read from files of fingerprint
    /// `fingerprint` (`watch::fingerprint`).
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: u64) -> Self {
        self.revisions = Revisions::new(fingerprint);
        self
    }

    /// Which config is in force.
    pub fn revision(&self) -> Revision {
        self.revisions.current()
    }

    /// Requests decided, by who decided.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Refuses a config this region cannot share (see [`RegionConfig::check`]); any config
    /// when the service is not a region.
    pub fn check_region(&self, config: &Config) -> Result<(), Vec<crate::config::ConfigError>> {
        match &self.region {
            Some((region, _)) => region.check(config),
            None => Ok(()),
        }
    }

    /// Decides every limit (fixed window, token bucket, GCRA) as this region's share of it (`RL.REGIONAL`: the
    /// floor, then a lease), noting the hot ones in `hot` for the lease agent.
    #[must_use]
    pub fn with_region(mut self, region: Arc<RegionConfig>, hot: Arc<HotKeys>) -> Self {
        self.region = Some((region, hot));
        self
    }

    /// The policy store, followed once some limit uses plans.
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Swaps a new config in, read from files of fingerprint `fingerprint`: requests
    /// already running finish on the old one.
    pub fn swap(&self, config: Config, fingerprint: u64) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        self.revisions.reloaded(fingerprint);
    }

    /// The start of every Redis key.
    pub fn key_prefix(&self) -> &str {
        &self.settings.key_prefix
    }

    /// The library's limiter (for shutdown and readiness).
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Decides a request.
    pub async fn check(&self, request: &CheckRequest) -> Result<Verdict, CheckFailure> {
        self.settings
            .bounds
            .check(request)
            .map_err(CheckFailure::BadRequest)?;
        let config = self.config();
        let domain = config.domain(&request.domain).ok_or_else(|| {
            CheckFailure::BadRequest(BadRequest(format!("unknown domain '{}'", request.domain)))
        })?;
        let resolved = resolve::resolve(domain, request, &self.plans, &self.settings.key_prefix)?;
        let (shadow, enforced): (Vec<Item>, Vec<Item>) =
            resolved.items.into_iter().partition(|item| item.shadow);
        let mut verdict = Verdict::new(resolved.statuses);
        self.decide(&request.domain, &enforced, Ask::Enforce, &mut verdict)
            .await?;
        let ask = if verdict.allowed {
            Ask::Shadow
        } else {
            Ask::ShadowRead
        };
        self.decide(&request.domain, &shadow, ask, &mut verdict)
            .await?;
        if self.settings.shadow_mode && !verdict.allowed {
            verdict.allowed = true;
            verdict.shadowed = true;
            verdict.retry_after = None;
            metrics::global_shadow(&request.domain);
        }
        for item in enforced.iter().chain(&shadow) {
            if let Some(status) = verdict.statuses.get(item.index) {
                metrics::descriptor(&request.domain, &item.rule, status.ok);
                let shadowed = status.over && (status.shadow || verdict.shadowed);
                if shadowed {
                    metrics::shadow_denied(&request.domain, &item.rule);
                }
                let near = !status.over
                    && near_limit(
                        status.remaining,
                        status.quota,
                        self.settings.near_limit_ratio,
                    );
                let hits = metrics::Hits {
                    hits: item.hits,
                    over: status.over,
                    near,
                    shadowed,
                };
                metrics::hits(&request.domain, &item.rule, hits);
            }
        }
        if self.settings.reference_metadata {
            verdict.reference_metadata = Some(reference_metadata(request, &verdict));
        }
        Ok(verdict)
    }

    /// Decides `items` as one job, writing their statuses into the verdict (a limit of 0
    /// denies without asking: the others are then read, not charged).
    async fn decide(
        &self,
        domain: &str,
        items: &[Item],
        ask: Ask,
        verdict: &mut Verdict,
    ) -> Result<(), CheckFailure> {
        if items.is_empty() {
            return Ok(());
        }
        let blocked = items.iter().any(|item| item.algorithm.is_none());
        let region = self.region.as_ref().map(|(region, _)| &**region);
        let parts = match region {
            Some(region) => split(region, items)?,
            None => Vec::new(),
        };
        let asked = same_keys(items)?;
        let job = job(
            domain,
            items,
            &asked,
            blocked || ask == Ask::ShadowRead,
            ask != Ask::Enforce,
            region.map(|region| (region, parts.as_slice())),
        );
        let decision = match asked.is_empty() {
            true => None,
            false => Some(
                self.limiter
                    .check_job(&job)
                    .await
                    .map_err(|error| match error {
                        // The store refused the request's arguments (a hits_addend beyond what
                        // the Functions library counts, a limit above a server setting): the
                        // caller is told what, and no fallback decides.
                        CheckError::Refused(_) => CheckFailure::BadRequest(BadRequest(format!(
                            "{error}; nothing was charged"
                        ))),
                        other => CheckFailure::Internal(other.to_string()),
                    })?,
            ),
        };
        if let (Some((_, hot)), Some(decision)) = (&self.region, &decision) {
            note_hot(hot, items, &parts, &asked, decision);
        }
        record(items, &asked, &job, decision.as_ref(), verdict);
        match ask {
            Ask::Enforce => {
                let in_flight = enforce(blocked, decision, verdict);
                verdict.in_flight = in_flight.map(|in_flight| self.hold(in_flight, items));
            }
            Ask::Shadow | Ask::ShadowRead => shadow(items, decision.as_ref(), verdict),
        }
        Ok(())
    }

    /// Keeps an admitted request's in-flight slots until released (or their unit is over).
    fn hold(&self, in_flight: InFlight, items: &[Item]) -> String {
        let ttl = items
            .iter()
            .map(Item::unit)
            .max()
            .unwrap_or(Duration::from_secs(1));
        let id = in_flight.holder().to_string();
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        // Slots never released (a gRPC caller cannot) free themselves in Redis after the
        // limit's unit; their entries are dropped here as they expire, oldest first (and
        // past the bound, the one held longest ago: under-admission until its ttl).
        held.expire(now);
        let expires = now.checked_add(ttl).unwrap_or(now);
        held.insert(&id, Held { in_flight }, expires, now);
        id
    }

    /// Gives back the in-flight slots held under `id`; false if none are held.
    pub async fn release(&self, id: &str) -> bool {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        match held {
            Some(held) => {
                self.limiter.release(&held.in_flight).await;
                true
            }
            None => false,
        }
    }
}

/// One limit of a job: the items asking it, the first at `first` of the items decided and
/// the others after it on the same key, in request order (more than one when a request
/// gives a descriptor twice: one key, charged their hits together, as the reference counts
/// each in turn), how many they are, and their hits in all.
struct Asked {
    first: usize,
    count: usize,
    hits: u64,
}

impl Asked {
    /// The first item asking it (its limit, key and label are every one's), and its
    /// position.
    fn first<'a>(&self, items: &'a [Item]) -> Option<(usize, &'a Item)> {
        Some((self.first, items.get(self.first)?))
    }

    /// The items asking it, in request order: from the first, those of its key that the
    /// store is asked (`same_keys`).
    fn each<'a>(&self, items: &'a [Item]) -> impl Iterator<Item = &'a Item> {
        let key = items.get(self.first).map(|first| &first.key);
        items
            .iter()
            .skip(self.first)
            .filter(move |item| item.algorithm.is_some() && Some(&item.key) == key)
    }
}

/// `items`' limits asked of the store (those with an algorithm: a limit of 0 is decided
/// without it), one per key in order of first appearance. The same key twice (a descriptor
/// given twice, as Envoy sends when two actions produce it) is one limit charged both hits;
/// the same key under two different limits is refused (a key holds one limiter).
fn same_keys(items: &[Item]) -> Result<Vec<Asked>, CheckFailure> {
    let mut asked: Vec<Asked> = Vec::with_capacity(items.len());
    for (position, item) in items.iter().enumerate() {
        if item.algorithm.is_none() {
            continue;
        }
        match asked.iter_mut().find_map(|known| {
            let (_, first) = known.first(items)?;
            (first.key == item.key).then_some((known, first))
        }) {
            Some((known, first)) => {
                if first.algorithm != item.algorithm {
                    return Err(CheckFailure::BadRequest(BadRequest(format!(
                        "descriptors {} and {} count on one key under different limits ('{}' \
                         and '{}'): give one limit to a descriptor asked twice",
                        first.index, item.index, first.reported.label, item.reported.label
                    ))));
                }
                known.hits = known.hits.saturating_add(item.hits);
                known.count = known.count.saturating_add(1);
            }
            None => asked.push(Asked {
                first: position,
                count: 1,
                hits: item.hits,
            }),
        }
    }
    Ok(asked)
}

/// The job asking `asked`, each charged its hits, or read (hits 0, or `read_only`; a shadow
/// in-flight limit, which would hold a slot nobody releases).
fn job(
    domain: &str,
    items: &[Item],
    asked: &[Asked],
    read_only: bool,
    shadow: bool,
    region: Option<(&RegionConfig, &[Option<Parts>])>,
) -> Job {
    let mut job = Job::new(PROFILE).label(domain);
    for one in asked {
        let Some((position, item)) = one.first(items) else {
            continue;
        };
        let Some(algorithm) = item.algorithm.clone() else {
            continue;
        };
        let slots = algorithm.is_in_flight();
        // Every limit is regional in a region (`split` refused the request otherwise).
        let floor = region.and_then(|(region, parts)| {
            let parts = parts.get(position)?.as_ref()?;
            Some((parts.floor.clone(), region.lease_suffix.as_str()))
        });
        let mut limit = match floor {
            Some((floor, suffix)) => {
                JobLimit::new(&item.reported.label, item.key.as_str(), floor).regional(suffix)
            }
            None => JobLimit::new(&item.reported.label, item.key.as_str(), algorithm),
        }
        .specificity(item.depth);
        if let Some(class) = &item.key_class {
            limit = limit.key_class(class);
        }
        job = job.limit(if read_only || one.hits == 0 || (shadow && slots) {
            limit.probe()
        } else {
            limit.units(one.hits)
        });
    }
    job
}

/// Each item's split in this region (`None`: a limit of 0, decided without a store). A limit
/// the region cannot split (a caller's own `limit` the config's check never saw) is refused:
/// decided whole in one region it would admit its global quota there alone.
fn split(region: &RegionConfig, items: &[Item]) -> Result<Vec<Option<Parts>>, CheckFailure> {
    items
        .iter()
        .map(|item| {
            let Some(algorithm) = item.algorithm.as_ref() else {
                return Ok(None);
            };
            region.split(algorithm).map(Some).map_err(|refusal| {
                CheckFailure::BadRequest(BadRequest(format!(
                    "limit '{}' cannot be shared across regions: {refusal}",
                    item.reported.label
                )))
            })
        })
        .collect()
}

/// Notes the regional limits of a decided job whose floor ran out or near it.
fn note_hot(
    hot: &HotKeys,
    items: &[Item],
    parts: &[Option<Parts>],
    asked: &[Asked],
    decision: &Decision,
) {
    for (one, status) in asked.iter().zip(&decision.limits) {
        let Some((position, item)) = one.first(items) else {
            continue;
        };
        if status.regional.is_none() {
            continue;
        }
        let pool = parts
            .get(position)
            .and_then(|parts| parts.as_ref()?.pool.as_ref());
        if let Some(pool) = pool {
            hot.note(&item.key, pool, one.hits, status);
        }
    }
}

/// Who decided a job (`None`: no store call, a limit of 0 denied).
fn decider(decision: Option<&Decision>) -> Decider {
    match decision {
        None => Decider::Store(None),
        Some(decision) => match decision.source.backend() {
            Some(backend) => Decider::Store(Some(backend)),
            None => Decider::Fallback,
        },
    }
}

/// The request's decision from its enforced limits' job (`None`: only limits of 0); the
/// in-flight slots it holds, if admitted.
fn enforce(blocked: bool, decision: Option<Decision>, verdict: &mut Verdict) -> Option<InFlight> {
    let allowed = !blocked && decision.as_ref().is_none_or(|decision| decision.allowed);
    verdict.allowed = allowed;
    verdict.decider = decider(decision.as_ref());
    if !allowed {
        // A limit of 0 never admits: no wait to tell.
        verdict.retry_after = decision
            .as_ref()
            .filter(|_| !blocked)
            .and_then(|decision| decision.retry_after);
        // The failure mode denied every limit (a limit of 0 is a denial, not an outage).
        verdict.unavailable = !blocked
            && decision
                .as_ref()
                .is_some_and(|decision| decision.limits.is_empty());
    }
    decision.and_then(|decision| decision.in_flight)
}

/// Shadow-mode limits: reported (with whether they would have denied), always OK.
fn shadow(items: &[Item], decision: Option<&Decision>, verdict: &mut Verdict) {
    for item in items {
        if let Some(status) = verdict.statuses.get_mut(item.index) {
            status.ok = true;
            status.shadow = true;
        }
    }
    if verdict.decider == Decider::Nothing {
        verdict.decider = decider(decision);
    }
}

/// Writes the statuses of `items`: the limits of 0, and the job's (in the job's order,
/// `asked`; a key asked by several descriptors is reported to each in request order).
fn record(
    items: &[Item],
    asked: &[Asked],
    job: &Job,
    decision: Option<&Decision>,
    verdict: &mut Verdict,
) {
    let now = SystemTime::now();
    for item in items.iter().filter(|item| item.algorithm.is_none()) {
        if let Some(status) = verdict.statuses.get_mut(item.index) {
            record_blocked(status, item, now);
        }
    }
    let Some(decision) = decision else {
        return;
    };
    for (position, one) in asked.iter().enumerate() {
        let limit = decision.limits.get(position);
        let charged = decision.allowed
            && job
                .limits()
                .get(position)
                .is_some_and(|limit| matches!(limit.charge(), Charge::Units(_)));
        let mut before = 0u64;
        for (turn, item) in one.each(items).enumerate() {
            let Some(status) = verdict.statuses.get_mut(item.index) else {
                continue;
            };
            let hits_so_far = before.saturating_add(item.hits);
            let last = turn.saturating_add(1) == one.count;
            match limit {
                Some(limit) => {
                    let seen = in_turn(limit, charged, one.hits, hits_so_far, last);
                    record_limit(status, item, limit, seen, decision.allowed, now);
                }
                // The failure mode decided for every limit.
                None => {
                    status.ok = decision.allowed;
                    status.over = !decision.allowed;
                }
            }
            before = hits_so_far;
        }
    }
}

/// What one of the descriptors asking a limit sees of it, in request order: its units left
/// and whether it is over. `charged` (the request admitted, the limit charged), each is told
/// what was left after its own hits and those before it, as the reference counts them; not
/// charged, each is told what the limit has, and is over when its hits and those before it
/// do not fit (the last is over whenever the limit denied).
fn in_turn(
    limit: &LimitStatus,
    charged: bool,
    hits_in_all: u64,
    hits_so_far: u64,
    last: bool,
) -> (u64, bool) {
    if charged {
        let after_all = limit.remaining;
        return (
            after_all.saturating_add(hits_in_all.saturating_sub(hits_so_far)),
            false,
        );
    }
    let over = !limit.allowed && (hits_in_all == 0 || last || hits_so_far > limit.remaining);
    (limit.remaining, over)
}

fn record_limit(
    status: &mut Status,
    item: &Item,
    limit: &LimitStatus,
    (remaining, over): (u64, bool),
    allowed: bool,
    now: SystemTime,
) {
    status.consulted = true;
    status.over = over;
    status.ok = allowed || !over;
    status.remaining = remaining;
    status.quota = limit.quota;
    status.regional = limit.regional.map(|regional| regional.why_str());
    status.window = limit.window;
    status.reset_after = match limit.reset_after {
        // A window nothing was counted in yet (a fresh key, or a charge that can never
        // pass) still ends where the epoch-aligned window does, as the reference says.
        Duration::ZERO if item.aligned => until_window_end(item.unit(), now),
        reset => reset,
    };
    status.more_in = limit.more_in;
    status.metadata.clone_from(&item.metadata);
}

/// A limit of 0: denied, nothing counted, reset at the window's end.
fn record_blocked(status: &mut Status, item: &Item, now: SystemTime) {
    status.consulted = true;
    status.over = true;
    status.ok = false;
    status.reset_after = until_window_end(item.unit(), now);
    status.metadata.clone_from(&item.metadata);
}

/// The time from `now` to the end of the epoch-aligned window of length `unit`.
fn until_window_end(unit: Duration, now: SystemTime) -> Duration {
    let unit_ms = u64::try_from(unit.as_millis()).unwrap_or(u64::MAX).max(1);
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
    let into = now_ms.checked_rem(unit_ms).unwrap_or(0);
    Duration::from_millis(unit_ms.saturating_sub(into))
}

/// The dynamic metadata the reference answers with `RESPONSE_DYNAMIC_METADATA`: the domain,
/// each descriptor (its entries as `key=value`, its limit override, its hits), the
/// request's hits, and the `metadata` of the rules of the descriptors that passed (the
/// first descriptor's value kept where two give one key).
fn reference_metadata(request: &CheckRequest, verdict: &Verdict) -> Map<String, Value> {
    let descriptors: Vec<Value> = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let entries: Vec<Value> = descriptor
                .entries
                .iter()
                .map(|(key, value)| Value::String(format!("{key}={value}")))
                .collect();
            let mut fields = Map::new();
            fields.insert("entries".into(), Value::Array(entries));
            if let Some((requests_per_unit, unit)) = descriptor.limit {
                fields.insert(
                    "limit".into(),
                    Value::String(format!(
                        "requests_per_unit:{requests_per_unit} unit:{}",
                        unit.name()
                    )),
                );
            }
            if let Some(hits) = descriptor.hits_addend {
                fields.insert("hitsAddend".into(), Value::from(hits));
            }
            Value::Object(fields)
        })
        .collect();
    let mut metadata = Map::new();
    metadata.insert("domain".into(), Value::String(request.domain.clone()));
    metadata.insert("descriptors".into(), Value::Array(descriptors));
    if request.hits_addend != 0 {
        metadata.insert("hitsAddend".into(), Value::from(request.hits_addend));
    }
    let mut passed = Map::new();
    for status in verdict.statuses.iter().filter(|status| status.ok) {
        if let Some(rule) = &status.metadata {
            merge(&mut passed, rule);
        }
    }
    if !passed.is_empty() {
        metadata.insert("metadata".into(), Value::Object(passed));
    }
    metadata
}

/// Adds `from`'s fields missing in `into`, merging mappings present in both.
fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(Value::Object(inner)), Value::Object(more)) => merge(inner, more),
            (Some(_), _) => {}
            (None, value) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}
