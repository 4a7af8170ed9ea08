//! A replica's side of the fleet's top denied keys: every denial counted in a Space-Saving
//! summary per policy and limit and per minute (in memory, nothing sent), and once a report
//! period the summaries that changed written whole, in one pipelined write, into the
//! minute's hash ([`report`](super::report)'s format).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::options::TopKeys;
use super::report::{self, BUCKET_SECONDS, Report, VERSION};
use super::summary::SpaceSaving;
use crate::fx_hash::FxBuild;
use crate::store::HashWrite;

/// One policy and limit's summary of the current minute.
struct Local {
    /// The minute it counts (its start, Unix seconds).
    bucket: u64,
    summary: SpaceSaving,
    /// Counted since it was last written.
    changed: bool,
}

/// One policy's summaries by limit.
type ByLimit = HashMap<Arc<str>, Mutex<Local>, FxBuild>;

/// The summaries by policy, then limit (looked up by the names as they are, nothing
/// cloned), and how many there are.
#[derive(Default)]
struct Summaries {
    by_policy: HashMap<Arc<str>, ByLimit, FxBuild>,
    count: usize,
}

impl Summaries {
    fn get(&self, policy: &str, limit: &str) -> Option<&Mutex<Local>> {
        self.by_policy.get(policy)?.get(limit)
    }

    fn each(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>, &Mutex<Local>)> {
        self.by_policy.iter().flat_map(|(policy, limits)| {
            limits
                .iter()
                .map(move |(limit, local)| (policy, limit, local))
        })
    }
}

/// The replica's summaries, and who it is.
pub(crate) struct Recorder {
    options: TopKeys,
    /// This replica's id in the fields it writes: 32 hex digits, random.
    replica: String,
    summaries: RwLock<Summaries>,
    /// Denials not counted: their policy and limit came past `max_summaries`.
    dropped: AtomicU64,
}

/// A random replica id: 128 bits in hex.
fn replica_id() -> String {
    let mut bytes = [0u8; 16];
    // Without entropy, the clock's nanoseconds (an id need only differ between replicas).
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl Recorder {
    pub(crate) fn new(options: TopKeys) -> Self {
        Self {
            options,
            replica: replica_id(),
            summaries: RwLock::new(Summaries::default()),
            dropped: AtomicU64::new(0),
        }
    }

    pub(crate) fn options(&self) -> &TopKeys {
        &self.options
    }

    /// This replica's id.
    #[cfg(test)]
    pub(crate) fn replica(&self) -> &str {
        &self.replica
    }

    /// Denials not counted because `max_summaries` policies and limits were counted already
    /// this minute.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Counts a denial of `key` under `policy`'s `limit` at `now_unix_s`.
    pub(crate) fn denied(&self, policy: &Arc<str>, limit: &Arc<str>, key: &str, now_unix_s: u64) {
        {
            let summaries = self
                .summaries
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(local) = summaries.get(policy, limit) {
                let mut local = local.lock().unwrap_or_else(PoisonError::into_inner);
                local.summary.add(key, 1);
                local.changed = true;
                return;
            }
        }
        let mut summaries = self
            .summaries
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let known = summaries.get(policy, limit).is_some();
        if !known && summaries.count >= self.options.max_summaries {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !known {
            summaries.count = summaries.count.saturating_add(1);
        }
        let capacity = self.options.capacity;
        let local = summaries
            .by_policy
            .entry(Arc::clone(policy))
            .or_default()
            .entry(Arc::clone(limit))
            .or_insert_with(|| {
                Mutex::new(Local {
                    bucket: report::bucket_of(now_unix_s),
                    summary: SpaceSaving::new(capacity),
                    changed: false,
                })
            });
        let local = local.get_mut().unwrap_or_else(PoisonError::into_inner);
        local.summary.add(key, 1);
        local.changed = true;
    }

    /// The writes of one report at `now_unix_s`: every summary that changed since the last,
    /// whole, in its minute's hash (each hash expiring `retention` after its minute ends).
    /// A summary of a minute now over is written a last time and starts the new minute
    /// empty (and is forgotten if nothing comes).
    pub(crate) fn report(&self, now_unix_s: u64) -> Vec<HashWrite> {
        let bucket = report::bucket_of(now_unix_s);
        let mut fields: BTreeMap<u64, Vec<(String, String)>> = BTreeMap::new();
        let mut turned = false;
        {
            let summaries = self
                .summaries
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            for (policy, limit, local) in summaries.each() {
                let mut local = local.lock().unwrap_or_else(PoisonError::into_inner);
                if local.changed {
                    let value = self.encode(policy, limit, &local.summary);
                    let field = report::field(&self.replica, policy, limit);
                    fields.entry(local.bucket).or_default().push((field, value));
                    local.changed = false;
                }
                if local.bucket != bucket {
                    local.bucket = bucket;
                    local.summary = SpaceSaving::new(self.options.capacity);
                    turned = true;
                }
            }
        }
        if turned {
            let mut summaries = self
                .summaries
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for limits in summaries.by_policy.values_mut() {
                limits.retain(|_, local| {
                    !local
                        .get_mut()
                        .unwrap_or_else(PoisonError::into_inner)
                        .summary
                        .is_empty()
                });
            }
            summaries.by_policy.retain(|_, limits| !limits.is_empty());
            summaries.count = summaries.by_policy.values().map(HashMap::len).sum();
        }
        let retention_s = self.options.retention.as_secs();
        fields
            .into_iter()
            .map(|(bucket, fields)| HashWrite {
                key: report::key(bucket),
                fields,
                expire_at_ms: bucket
                    .saturating_add(BUCKET_SECONDS)
                    .saturating_add(retention_s)
                    .saturating_mul(1_000),
            })
            .collect()
    }

    /// A report failed: every summary is written again at the next (whole, so twice is
    /// harmless; a minute over whose last write failed is lost).
    pub(crate) fn unwritten(&self) {
        let summaries = self
            .summaries
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, _, local) in summaries.each() {
            let mut local = local.lock().unwrap_or_else(PoisonError::into_inner);
            if !local.summary.is_empty() {
                local.changed = true;
            }
        }
    }

    fn encode(&self, policy: &str, limit: &str, summary: &SpaceSaving) -> String {
        Report {
            v: VERSION,
            policy: policy.to_string(),
            limit: limit.to_string(),
            replica: self.replica.clone(),
            client: "rust".into(),
            capacity: u64::try_from(summary.capacity()).unwrap_or(u64::MAX),
            denials: summary.total(),
            floor: summary.floor(),
            keys: summary
                .counted()
                .into_iter()
                .map(|counted| (counted.key.to_string(), counted.count, counted.error))
                .collect(),
        }
        .encode()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn options() -> TopKeys {
        TopKeys {
            capacity: 2,
            max_summaries: 2,
            retention: Duration::from_secs(600),
            ..TopKeys::default()
        }
    }

    #[test]
    fn a_report_writes_what_changed_in_its_minute() {
        let recorder = Recorder::new(options());
        let (api, minute): (Arc<str>, Arc<str>) = ("api".into(), "per-minute".into());
        let start = 1_800_000_000u64; // a minute's start
        for key in ["a", "a", "b", "c"] {
            recorder.denied(&api, &minute, key, start + 5);
        }
        let writes = recorder.report(start + 6);
        assert_eq!(writes.len(), 1);
        let write = &writes[0];
        assert_eq!(write.key, format!("rl:top:{{rl-top}}:v1:{start}"));
        assert_eq!(write.expire_at_ms, (start + 60 + 600) * 1000);
        assert_eq!(write.fields.len(), 1);
        let (field, value) = &write.fields[0];
        assert_eq!(field, &format!("{}:3:api:per-minute", recorder.replica()));
        let stored = Report::decode(value).unwrap();
        assert_eq!((stored.denials, stored.capacity, stored.floor), (4, 2, 2));
        assert_eq!(stored.keys[0], ("a".to_string(), 2, 0));
        // Nothing changed: nothing written.
        assert!(recorder.report(start + 7).is_empty());
        // A denial past the minute's end: written in the old minute, then the summary
        // starts the new one (and goes, empty).
        recorder.denied(&api, &minute, "a", start + 60);
        let writes = recorder.report(start + 61);
        assert_eq!(writes[0].key, format!("rl:top:{{rl-top}}:v1:{start}"));
        assert!(recorder.report(start + 62).is_empty());
        assert_eq!(recorder.summaries.read().unwrap().count, 0);
        recorder.denied(&api, &minute, "d", start + 63);
        let writes = recorder.report(start + 64);
        assert_eq!(
            writes[0].key,
            format!("rl:top:{{rl-top}}:v1:{}", start + 60)
        );
    }

    #[test]
    fn past_max_summaries_denials_are_dropped_and_counted() {
        let recorder = Recorder::new(options());
        let api: Arc<str> = "api".into();
        for limit in ["a", "b", "c"] {
            recorder.denied(&api, &Arc::from(limit), "k", 1_800_000_000);
        }
        assert_eq!(recorder.dropped(), 1);
        assert_eq!(recorder.report(1_800_000_001)[0].fields.len(), 2);
        recorder.unwritten();
        assert_eq!(recorder.report(1_800_000_002)[0].fields.len(), 2);
    }
}
