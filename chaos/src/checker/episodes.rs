//! A client's fallback episodes for one limiter: maximal runs of its decisions that the store
//! did not make, holding at least one by the fallback. The client's local fallback starts
//! each episode from the store's last answer before it and keeps its state until the store
//! answers again, so its share's bound holds within an episode, and the fleet's allowance
//! for the fallback (the client's `U`) is at most a share's quota per episode.

use crate::record::{DecisionRecord, Source};

/// One episode of `client`, from its first fallback decision's send to its last one's
/// receive (or the release of the last slot its fallback gave, which it holds until then),
/// with the admissions of its fallback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode<'a> {
    pub client: u32,
    pub from_us: u64,
    pub to_us: u64,
    pub admitted: Vec<&'a DecisionRecord>,
}

impl Episode<'_> {
    pub fn admitted_units(&self) -> u64 {
        self.admitted.iter().map(|decision| decision.cost).sum()
    }
}

/// The episodes in `decisions` (one limiter's, any clients, any order).
pub fn episodes<'a>(decisions: &[&'a DecisionRecord]) -> Vec<Episode<'a>> {
    let mut sorted: Vec<&DecisionRecord> = decisions.to_vec();
    sorted.sort_by_key(|decision| (decision.client, decision.send_us, decision.recv_us));
    let mut all: Vec<Episode> = Vec::new();
    let mut open: Option<Episode> = None;
    for decision in sorted {
        if open
            .as_ref()
            .is_some_and(|episode| episode.client != decision.client)
        {
            all.extend(open.take());
        }
        match decision.source {
            // The store answered: the next fallback starts from this answer.
            Source::Store => all.extend(open.take()),
            Source::Fallback => {
                let episode = open.get_or_insert_with(|| Episode {
                    client: decision.client,
                    from_us: decision.send_us,
                    to_us: decision.recv_us,
                    admitted: Vec::new(),
                });
                episode.to_us = episode.to_us.max(decision.recv_us);
                if decision.allowed {
                    episode.to_us = episode.to_us.max(decision.release_us.unwrap_or(0));
                    episode.admitted.push(decision);
                }
            }
            // Leases and cached denials leave the fallback's state as it was.
            Source::Lease | Source::Cache | Source::Error => {}
        }
    }
    all.extend(open);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(client: u32, send_us: u64, source: Source, allowed: bool) -> DecisionRecord {
        DecisionRecord {
            client,
            limiter: "tb0".into(),
            cost: 2,
            allowed,
            source,
            send_us,
            recv_us: send_us + 5,
            release_us: None,
        }
    }

    #[test]
    fn a_store_answer_ends_an_episode_and_a_lease_does_not() {
        let log = [
            decision(0, 10, Source::Store, true),
            decision(0, 20, Source::Fallback, true),
            decision(0, 30, Source::Lease, true),
            DecisionRecord {
                release_us: Some(48),
                ..decision(0, 40, Source::Fallback, true)
            },
            decision(0, 50, Source::Store, true),
            decision(0, 60, Source::Fallback, true),
            decision(1, 25, Source::Fallback, true),
        ];
        let refs: Vec<&DecisionRecord> = log.iter().collect();
        let found = episodes(&refs);
        let summary: Vec<(u32, u64, u64, u64)> = found
            .iter()
            .map(|e| (e.client, e.from_us, e.to_us, e.admitted_units()))
            .collect();
        assert_eq!(summary, [(0, 20, 48, 4), (0, 60, 65, 2), (1, 25, 30, 2)]);
    }
}
