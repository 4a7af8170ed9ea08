//! What the store last answered for each key set, and what the local fallback admitted
//! since it could not ask.
//!
//! The fallback continues from the store's last answer instead of a fresh share: a key the
//! store had exhausted stays exhausted, a key with 30 units left gets `30 / replicas`. The
//! local states seeded from an answer are used until the store answers again (they survive
//! breaker cycles; they expire on their own once back to unused, at least a window or refill
//! period). Units the fallback admitted are owed to the store, and charged to it (a partial
//! grant: as many as it has) the first time it answers again for that key set, so the
//! refill the store saw during an outage pays for what the fallback admitted, and a flapping
//! store never grants a share twice.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::expiring::Expiring;
use crate::store::View;

/// One key set's last answer from the store.
#[derive(Debug)]
struct Entry {
    /// Each consulted limit's view (policy index).
    views: Vec<(usize, View)>,
    /// When the answer came (this process's clock, Unix µs).
    answered_at_us: i64,
    /// A denial: denied until then (Unix µs) for calls of at least this cost.
    denied: Option<(i64, u64)>,
    /// Whether the local states were seeded from this answer (then they continue).
    seeded: bool,
    /// Units the fallback admitted since, not yet charged to the store.
    owed: u64,
}

/// A seed for the local states: the store's views and when they were true.
pub(super) struct Seed {
    pub(super) views: Vec<(usize, View)>,
    pub(super) answered_at_us: i64,
}

/// The store's last answers for one policy's (or job profile's) key sets, each forgotten
/// once its window is over (Unix µs), at most `max_keys` of them: a new key set at the bound
/// drops the expired answers, or else the one answered (or owed) longest ago. A key set
/// forgotten so has no last answer: its fallback starts from a fresh share, and what it owed
/// the store is forgotten with it.
#[derive(Debug)]
pub(crate) struct Answers {
    entries: Mutex<Expiring<Entry, i64>>,
}

/// How long an answer (or a debt) is kept: the check's longest window or refill period
/// (at least a second); after that the store has refilled completely and a fresh share is
/// right.
fn keep_us(keep: Duration) -> i64 {
    i64::try_from(keep.as_micros())
        .unwrap_or(i64::MAX)
        .max(1_000_000)
}

impl Answers {
    /// An empty table of at most `max_keys` key sets.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            entries: Mutex::new(Expiring::bounded(max_keys)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Expiring<Entry, i64>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what the store answered for key set `id` at `now_us`, kept for `keep`;
    /// `denied` is the answer's wait and the cost it was for, when it denied.
    pub(super) fn record(
        &self,
        id: &str,
        views: &[(usize, View)],
        denied: Option<(Duration, u64)>,
        now_us: i64,
        keep: Duration,
    ) {
        let expires_at_us = now_us.saturating_add(keep_us(keep));
        let denied = denied.map(|(wait, cost)| {
            let wait_us = i64::try_from(wait.as_micros()).unwrap_or(i64::MAX);
            (now_us.saturating_add(wait_us), cost)
        });
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(id) {
            entry.views.clear();
            entry.views.extend_from_slice(views);
            entry.answered_at_us = now_us;
            entry.denied = denied;
            entry.seeded = false;
            entries.renew(id, expires_at_us);
            return;
        }
        let entry = Entry {
            views: views.to_vec(),
            answered_at_us: now_us,
            denied,
            seeded: false,
            owed: 0,
        };
        entries.insert(id, entry, expires_at_us, now_us);
    }

    /// How much longer the store's last denial of key set `id` holds for a call of `cost`
    /// (a denial the store made stays a denial in the fallback).
    pub(super) fn denied_for(&self, id: &str, cost: u64, now_us: i64) -> Option<Duration> {
        let entries = self.lock();
        let (until_us, denied_cost) = entries.get(id)?.0.denied?;
        let left_us = until_us.saturating_sub(now_us);
        (cost >= denied_cost && left_us > 0)
            .then(|| Duration::from_micros(u64::try_from(left_us).unwrap_or(0)))
    }

    /// The answer to seed key set `id`'s local states from, once per answer: `None` when
    /// they were seeded from the latest answer already (they continue), or there is none.
    pub(super) fn seed(&self, id: &str, now_us: i64) -> Option<Seed> {
        let mut entries = self.lock();
        entries
            .get(id)
            .filter(|(entry, expires_at_us)| !entry.seeded && *expires_at_us > now_us)?;
        let entry = entries.get_mut(id)?;
        entry.seeded = true;
        Some(Seed {
            views: entry.views.clone(),
            answered_at_us: entry.answered_at_us,
        })
    }

    /// Records `units` admitted by the fallback for key set `id`, owed to the store for
    /// `keep`.
    pub(super) fn owe(&self, id: &str, units: u64, now_us: i64, keep: Duration) {
        let expires_at_us = now_us.saturating_add(keep_us(keep));
        let mut entries = self.lock();
        let Some((_, old_expires_at_us)) = entries.get(id) else {
            let entry = Entry {
                views: Vec::new(),
                answered_at_us: now_us,
                denied: None,
                // No answer to seed from: the local states start from a fresh share.
                seeded: true,
                owed: units,
            };
            entries.insert(id, entry, expires_at_us, now_us);
            return;
        };
        let Some(entry) = entries.get_mut(id) else {
            return;
        };
        if old_expires_at_us <= now_us {
            // Its answer is older than a window: the local states began from a fresh share,
            // and must not start over from that answer later in this outage (which would
            // grant the share twice); its debt is forgotten, as `take_owed` would.
            entry.views.clear();
            entry.denied = None;
            entry.seeded = true;
            entry.owed = 0;
        }
        entry.owed = entry.owed.saturating_add(units);
        entries.renew(id, expires_at_us.max(old_expires_at_us));
    }

    /// Takes what key set `id` owes the store (to charge it now).
    pub(super) fn take_owed(&self, id: &str, now_us: i64) -> Option<u64> {
        let mut entries = self.lock();
        let (_, expires_at_us) = entries.get(id)?;
        let entry = entries.get_mut(id)?;
        if expires_at_us <= now_us {
            // A window has passed: the store has refilled what the fallback took.
            entry.owed = 0;
            return None;
        }
        Some(std::mem::take(&mut entry.owed)).filter(|owed| *owed > 0)
    }

    /// What key set `id` owes the store.
    #[cfg(test)]
    pub(super) fn owed(&self, id: &str) -> u64 {
        self.lock().get(id).map_or(0, |(entry, _)| entry.owed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000_000;

    fn view(remaining: u64, retry_ms: Option<u64>) -> View {
        View {
            allowed: retry_ms.is_none(),
            remaining,
            retry_after: Some(Duration::from_millis(retry_ms.unwrap_or(0))),
            reset_after: Duration::from_secs(1),
            limit: 100,
            regional: None,
        }
    }

    #[test]
    fn an_answer_seeds_once_then_the_local_states_continue() {
        let answers = Answers::new(crate::expiring::DEFAULT_MAX_KEYS);
        let keep = Duration::from_secs(60);
        answers.record("k", &[(0, view(30, None))], None, T0, keep);
        let seed = answers.seed("k", T0 + 5).unwrap();
        assert_eq!(seed.views[0].1.remaining, 30);
        assert_eq!(seed.answered_at_us, T0);
        assert!(
            answers.seed("k", T0 + 10).is_none(),
            "seeded once per answer"
        );
        answers.record("k", &[(0, view(10, None))], None, T0 + 20, keep);
        assert_eq!(answers.seed("k", T0 + 30).unwrap().views[0].1.remaining, 10);
        assert!(answers.seed("other", T0).is_none());
    }

    #[test]
    fn an_expired_answer_never_seeds_after_the_fallback_started_afresh() {
        // The answer is a second old when the store first fails: the local states start from
        // a fresh share and owe the store; the debt must not revive the old answer, which
        // would start them over and grant the share again within one outage.
        let answers = Answers::new(crate::expiring::DEFAULT_MAX_KEYS);
        let keep = Duration::from_secs(1);
        answers.record("k", &[(0, view(0, None))], None, T0, keep);
        let late = T0 + 1_200_000;
        assert!(answers.seed("k", late).is_none(), "expired");
        answers.owe("k", 1, late, keep);
        assert!(answers.seed("k", late + 250_000).is_none(), "revived");
        assert_eq!(answers.take_owed("k", late + 250_000), Some(1));
    }

    #[test]
    fn a_denial_holds_for_its_wait_and_cost() {
        let answers = Answers::new(crate::expiring::DEFAULT_MAX_KEYS);
        let keep = Duration::from_secs(60);
        let wait = Duration::from_millis(500);
        answers.record("k", &[(0, view(0, Some(500)))], Some((wait, 2)), T0, keep);
        assert_eq!(
            answers.denied_for("k", 2, T0 + 100_000),
            Some(Duration::from_millis(400))
        );
        assert_eq!(
            answers.denied_for("k", 1, T0 + 100_000),
            None,
            "a smaller cost"
        );
        assert_eq!(answers.denied_for("k", 2, T0 + 500_000), None, "waited out");
    }

    #[test]
    fn past_the_bound_expired_answers_go_first_then_the_one_answered_longest_ago() {
        let answers = Answers::new(3);
        let minute = Duration::from_secs(60);
        answers.record("a", &[(0, view(1, None))], None, T0, minute);
        answers.record(
            "b",
            &[(0, view(2, None))],
            None,
            T0 + 1,
            Duration::from_secs(1),
        );
        answers.record("c", &[(0, view(3, None))], None, T0 + 2, minute);
        // Answered again: "a" is now the latest, "b" the oldest.
        answers.record("a", &[(0, view(4, None))], None, T0 + 3, minute);
        answers.record("d", &[(0, view(5, None))], None, T0 + 4, minute);
        assert!(
            !answers.lock().contains_key("b"),
            "b was answered longest ago"
        );
        assert_eq!(answers.seed("a", T0 + 5).unwrap().views[0].1.remaining, 4);
        // A debt is a use too ("c" is now the latest); seeding is not ("a" stays oldest).
        answers.owe("c", 1, T0 + 6, minute);
        answers.record("e", &[(0, view(6, None))], None, T0 + 7, minute);
        assert_eq!(answers.owed("c"), 1);
        assert!(
            !answers.lock().contains_key("a"),
            "a was answered longest ago"
        );
        assert_eq!(answers.seed("d", T0 + 8).unwrap().views[0].1.remaining, 5);
        assert_eq!(answers.lock().len(), 3);
        // An evicted key set has no last answer: its fallback starts from a fresh share.
        let late = T0 + 61_000_000;
        answers.record("f", &[(0, view(7, None))], None, late, minute);
        assert_eq!(
            answers.lock().len(),
            1,
            "the expired answers went, none evicted"
        );
    }

    #[test]
    fn debts_accumulate_until_taken_and_expire_with_the_window() {
        let answers = Answers::new(crate::expiring::DEFAULT_MAX_KEYS);
        let keep = Duration::from_secs(2);
        answers.owe("k", 2, T0, keep);
        answers.owe("k", 3, T0, keep);
        assert_eq!(answers.owed("k"), 5);
        assert!(answers.seed("k", T0).is_none(), "no answer to seed from");
        assert_eq!(answers.take_owed("k", T0), Some(5));
        assert_eq!(answers.take_owed("k", T0), None);
        answers.owe("k", 1, T0, keep);
        assert_eq!(
            answers.take_owed("k", T0 + 2_000_000),
            None,
            "refilled since"
        );
    }
}
