//! Unit and property tests of the concurrency limit.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::decision::CallCost;
use crate::testing::{self, Driver, MS, SECOND, Step, T0_US};

/// The `ratelimit.max-holders` the tests run with.
const MAX_HOLDERS: u64 = 1_000;

fn holder(id: &str) -> HolderId {
    HolderId::new(id.as_bytes()).unwrap()
}

/// An acquire (or release) by `id` under `limit` holders of `ttl_us`.
fn acquire(limit: u64, id: &str, ttl_us: i64) -> ConcurrencyParams {
    ConcurrencyParams::new(limit, ttl_us as u64, MAX_HOLDERS)
        .unwrap()
        .with_holder(holder(id))
}

fn peek(limit: u64) -> ConcurrencyParams {
    ConcurrencyParams::peek(limit, MAX_HOLDERS).unwrap()
}

/// A limiter driven through a sequence of calls, as the glue would drive it.
type Key = Driver<ConcurrencyAlgorithm>;

/// The stored holders as (expiry, id), in stored order.
fn listed(holders: &Concurrency) -> Vec<(i64, Vec<u8>)> {
    holders
        .holders()
        .map(|(expiry, id)| (expiry, id.to_vec()))
        .collect()
}

/// A list of `(expiry, id)` holders, which must be valid.
fn list_of(holders: &[(i64, &str)]) -> Concurrency {
    let entries = holders.iter().map(|&(expiry, id)| (expiry, id.as_bytes()));
    Concurrency::from_holders(holders.len() as u64, entries).unwrap()
}

/// What `Driver::step` does, for a call named by `op`.
#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire,
    Release,
    Peek,
}

#[rustfmt::skip]
#[test]
fn acquires_renews_denies_and_releases() {
    // At most 2 holders of 10 s.
    let ttl = 10 * SECOND;
    let mut key = Key::default();
    let cases: &[(i64, &str, Op, [i64; 5])] = &[
        // (now offset s, holder, op, [allowed, free, retry_after_ms, reset_after_ms, limit])
        (0,  "a", Op::Acquire, [1, 1, 0,    10_000, 2]),
        (1,  "b", Op::Acquire, [1, 0, 0,    10_000, 2]),
        (2,  "c", Op::Acquire, [0, 0, 8000, 9000,   2]),  // until a expires at +10 s
        (3,  "a", Op::Acquire, [1, 0, 0,    10_000, 2]),  // renewed until +13 s, counted once
        (3,  "c", Op::Acquire, [0, 0, 8000, 10_000, 2]),  // now until b expires at +11 s
        (3,  "",  Op::Peek,    [0, 0, 8000, 10_000, 2]),
        (11, "c", Op::Acquire, [1, 0, 0,    10_000, 2]),  // b is gone at exactly +11 s
        (12, "a", Op::Release, [1, 1, 0,    9000,   2]),
        (12, "a", Op::Release, [0, 1, 0,    9000,   2]),  // unknown now: not an error
        (12, "",  Op::Peek,    [1, 1, 0,    9000,   2]),
        (21, "c", Op::Release, [0, 2, 0,    0,      2]),  // expired at exactly +21 s
    ];
    for &(offset, id, op, fields) in cases {
        let now = T0_US + offset * SECOND;
        let decision = match op {
            Op::Acquire => key.call(&acquire(2, id, ttl), now),
            Op::Release => key.refund(&acquire(2, id, ttl), now),
            Op::Peek => key.call(&peek(2), now),
        };
        assert_eq!(decision.reply_fields(), fields, "{op:?} {id} at +{offset} s");
    }
}

#[test]
fn only_changes_are_written_and_the_key_expires_with_its_last_holder() {
    let ttl = 10 * SECOND;
    let a = acquire(1, "a", ttl);
    let first = ConcurrencyAlgorithm::evaluate(None, &a, T0_US);
    let commit = first.commit.unwrap();
    assert_eq!(commit.expires_at_ms, (T0_US + ttl) / MS);
    assert_eq!(
        (commit.change.at_us(), commit.change.action()),
        (
            T0_US,
            ConcurrencyAction::Acquire {
                holder: holder("a"),
                expires_at_us: T0_US + ttl
            }
        )
    );
    let state = ConcurrencyAlgorithm::create(commit.change);
    assert_eq!(listed(&state), vec![(T0_US + ttl, b"a".to_vec())]);
    let denied = ConcurrencyAlgorithm::evaluate(Some(&state), &acquire(1, "b", ttl), T0_US);
    assert!(denied.commit.is_none(), "a denied call writes nothing");
    let peeked = ConcurrencyAlgorithm::evaluate(Some(&state), &peek(5), T0_US);
    assert!(peeked.commit.is_none(), "a peek writes nothing");
    assert_eq!(peeked.decision.reply_fields(), [1, 4, 0, 10_000, 5]);
}

#[test]
fn release_frees_a_live_holder_and_empties_the_key() {
    let ttl = 10 * SECOND;
    assert!(ConcurrencyAlgorithm::release(None, &holder("a"), T0_US).is_none());
    let mut key = Key::default();
    key.call(&acquire(5, "a", ttl), T0_US);
    key.call(&acquire(5, "b", 2 * ttl), T0_US);
    let state = key.state.clone().unwrap();
    let unknown = ConcurrencyAlgorithm::release(Some(&state), &holder("z"), T0_US);
    assert!(unknown.is_none(), "an unknown holder: 0, nothing written");
    let expired = ConcurrencyAlgorithm::release(Some(&state), &holder("a"), T0_US + ttl);
    assert!(expired.is_none(), "an expired holder: 0, nothing written");
    let commit = ConcurrencyAlgorithm::release(Some(&state), &holder("b"), T0_US + SECOND);
    let commit = commit.unwrap();
    assert_eq!(
        commit.expires_at_ms,
        (T0_US + ttl) / MS,
        "a is the last now"
    );
    key.commit(Some(commit));
    assert!(!key.state.as_ref().unwrap().is_empty());
    let commit =
        ConcurrencyAlgorithm::release(key.state.as_ref(), &holder("a"), T0_US + 2 * SECOND);
    let commit = commit.unwrap();
    assert_eq!(
        commit.expires_at_ms,
        (T0_US + 2 * SECOND) / MS,
        "empty: may go now"
    );
    key.commit(Some(commit));
    assert!(
        key.state.as_ref().unwrap().is_empty(),
        "the glue deletes the key"
    );
}

#[test]
fn a_lowered_limit_never_evicts_live_holders() {
    let ttl = 10 * SECOND;
    let mut key = Key::default();
    for (offset, id) in [(0, "a"), (1, "b"), (2, "c")] {
        assert!(
            key.call(&acquire(3, id, ttl), T0_US + offset * SECOND)
                .allowed
        );
    }
    // Limit 1: a newcomer waits for 3 − 1 + 1 = 3 holders to go, the last at +12 s.
    let now = T0_US + 3 * SECOND;
    let d = key.call(&acquire(1, "d", ttl), now);
    assert_eq!(d.reply_fields(), [0, 0, 9000, 9000, 1]);
    // A live holder still renews (until +13 s), and nobody is evicted.
    let d = key.call(&acquire(1, "a", ttl), now);
    assert_eq!(d.reply_fields(), [1, 0, 0, 10_000, 1]);
    assert_eq!(key.state.as_ref().unwrap().len(), 3);
    let d = key.call(&acquire(1, "d", ttl), now);
    assert_eq!(d.retry, Retry::AfterMs(10_000), "now a is the third to go");
    assert_eq!(
        key.call(&peek(1), now).reply_fields(),
        [0, 0, 10_000, 10_000, 1]
    );
}

#[test]
fn renewing_never_shortens_a_holders_life() {
    let mut key = Key::default();
    key.call(&acquire(1, "a", 10 * SECOND), T0_US);
    let d = key.call(&acquire(1, "a", SECOND), T0_US + SECOND);
    assert_eq!(d.reset_after_ms, 9000, "still until +10 s");
    // A clock that stepped back keeps the later expiry too.
    let d = key.call(&acquire(1, "a", 10 * SECOND), T0_US - 3600 * SECOND);
    assert!(d.allowed);
    assert_eq!(
        listed(key.state.as_ref().unwrap())[0].0,
        T0_US + 10 * SECOND
    );
}

#[test]
fn holders_expire_exactly_at_their_microsecond() {
    // A 1.5 ms ttl from T0 + 250 µs: live until T0 + 1749 µs, gone at T0 + 1750 µs; the key
    // may expire at the next whole millisecond.
    let mut key = Key::default();
    let a = acquire(1, "a", 1_500);
    let d = key.call(&a, T0_US + 250);
    assert_eq!(d.reply_fields(), [1, 0, 0, 2, 1]);
    assert_eq!(key.expires_at_ms, Some(T0_US / MS + 2));
    let b = acquire(1, "b", 1_500);
    assert_eq!(key.call(&b, T0_US + 250).retry, Retry::AfterMs(2));
    assert_eq!(key.call(&b, T0_US + 1_749).retry, Retry::AfterMs(1));
    assert!(key.call(&b, T0_US + 1_750).allowed);
    let gone = key.state.as_ref().unwrap();
    assert_eq!(
        listed(gone),
        vec![(T0_US + 3_250, b"b".to_vec())],
        "a dropped"
    );
}

#[test]
fn holder_ids_are_validated() {
    assert_eq!(HolderId::new(b""), Err(HolderIdError::Empty));
    assert_eq!(HolderId::new(&[b'x'; 129]), Err(HolderIdError::TooLong));
    assert_eq!(HolderId::new(&[0; 128]).unwrap().as_bytes(), &[0; 128]);
    assert_eq!(holder("worker-7").as_bytes(), b"worker-7");
    assert_ne!(holder("a"), holder("a\0"), "length counts");
    assert_eq!(format!("{:?}", holder("a\"\n")), r#"HolderId("a\"\n")"#);
    assert_eq!(MAX_HOLDER_ID_BYTES, 128);
}

#[test]
fn parameters_are_validated() {
    use ConcurrencyParamError::*;
    let new = ConcurrencyParams::new;
    assert_eq!(new(1, 999, 10), Err(TtlTooShort));
    assert!(new(1, 1_000, 10).is_ok());
    assert!(new(1, MAX_TTL_US as u64, 10).is_ok());
    assert_eq!(new(1, MAX_TTL_US as u64 + 1, 10), Err(TtlTooLong));
    assert_eq!(new(1, u64::MAX, 10), Err(TtlTooLong));
    assert_eq!(
        new(11, 1_000, 10),
        Err(LimitAboveMaxHolders { max_holders: 10 })
    );
    assert_eq!(
        new(MAX_STORED_HOLDERS + 1, 1_000, u64::MAX),
        Err(LimitAboveMaxHolders {
            max_holders: MAX_STORED_HOLDERS
        })
    );
    let p = new(0, 1_500, 0).unwrap();
    assert_eq!((p.limit(), p.ttl_us(), p.holder()), (1, 1_500, None));
    assert_eq!(ConcurrencyParams::peek(7, 10).unwrap().limit(), 7);
    let p = acquire(2, "a", SECOND);
    assert_eq!(p.holder(), Some(&holder("a")));
    assert_eq!(
        (p.cost(), p.with_cost(5).cost(), p.with_cost(0).cost()),
        (1, 5, 1)
    );
    let d = ConcurrencyAlgorithm::evaluate(None, &p.with_cost(5), T0_US).decision;
    assert_eq!(d.remaining, 1, "one slot, whatever the cost");
}

#[test]
fn decoding_refuses_lists_no_evaluation_produces() {
    let from = |holders: &[(i64, &[u8])]| {
        Concurrency::from_holders(holders.len() as u64, holders.iter().copied())
    };
    assert_eq!(from(&[]), Some(Concurrency::default()));
    let valid = from(&[(T0_US, b"b"), (T0_US, b"c"), (T0_US + 1, b"a")]).unwrap();
    assert_eq!(valid.len(), 3);
    assert!(
        from(&[(T0_US, b"c"), (T0_US, b"b")]).is_none(),
        "ties by id"
    );
    assert!(
        from(&[(T0_US + 1, b"a"), (T0_US, b"b")]).is_none(),
        "by expiry"
    );
    assert!(
        from(&[(T0_US, b"a"), (T0_US + 1, b"a")]).is_none(),
        "one id twice"
    );
    assert!(
        from(&[(T0_US, b"a"), (T0_US, b"a")]).is_none(),
        "one holder twice"
    );
    assert!(from(&[(T0_US, b"")]).is_none(), "empty id");
    assert!(from(&[(T0_US, &[b'x'; 129])]).is_none(), "oversized id");
    assert!(from(&[(T0_US, &[b'x'; 128])]).is_some());
    assert!(
        from(&[(MIN_TTL_US - 1, b"a")]).is_none(),
        "before any expiry"
    );
    assert!(from(&[(MIN_TTL_US, b"a")]).is_some());
    assert!(from(&[(MAX_EXPIRY_US, b"a")]).is_some());
    assert!(
        from(&[(MAX_EXPIRY_US + 1, b"a")]).is_none(),
        "beyond any expiry"
    );
    let pair: [(i64, &[u8]); 2] = [(T0_US, b"a"), (T0_US, b"b")];
    assert!(
        Concurrency::from_holders(3, pair).is_none(),
        "fewer than announced"
    );
    assert!(
        Concurrency::from_holders(1, pair).is_none(),
        "more than announced"
    );
    let none: [(i64, &[u8]); 0] = [];
    assert!(Concurrency::from_holders(MAX_STORED_HOLDERS + 1, none).is_none());
    assert!(Concurrency::from_holders(u64::MAX, none).is_none());
}

#[test]
fn changes_are_validated_when_decoded() {
    let a = holder("a");
    let acquire_until = |at_us, expires_at_us| {
        ConcurrencyChange::new(
            at_us,
            ConcurrencyAction::Acquire {
                holder: a,
                expires_at_us,
            },
        )
    };
    let change = acquire_until(T0_US, T0_US + MS).unwrap();
    assert_eq!(change.at_us(), T0_US);
    assert!(
        acquire_until(T0_US, T0_US + MS - 1).is_none(),
        "shorter than any ttl"
    );
    assert!(acquire_until(MAX_NOW_US, MAX_EXPIRY_US).is_some());
    assert!(acquire_until(MAX_NOW_US, MAX_EXPIRY_US + 1).is_none());
    assert!(acquire_until(-1, T0_US).is_none());
    assert!(acquire_until(MAX_NOW_US + 1, MAX_EXPIRY_US).is_none());
    let release = ConcurrencyAction::Release { holder: a };
    assert!(ConcurrencyChange::new(0, release).is_some());
    assert!(ConcurrencyChange::new(-1, release).is_none());
}

#[test]
fn applying_is_canonical_and_saturates_on_a_mismatched_list() {
    // The same holders reached in different orders are the same bytes.
    let ttl = 10 * SECOND;
    let mut one = Key::default();
    let mut other = Key::default();
    for id in ["b", "a", "c"] {
        one.call(&acquire(3, id, ttl), T0_US);
    }
    for id in ["c", "b", "a"] {
        other.call(&acquire(3, id, ttl), T0_US);
    }
    assert_eq!(one.state, other.state);
    let ids: Vec<Vec<u8>> = listed(one.state.as_ref().unwrap())
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    assert_eq!(ids, [b"a", b"b", b"c"]);
    // A release of an unknown holder, or an acquire of a stored one, on a list that does not
    // match: nothing breaks.
    let mut state = list_of(&[(T0_US + SECOND, "a")]);
    let release = ConcurrencyAction::Release {
        holder: holder("z"),
    };
    ConcurrencyAlgorithm::apply(&mut state, ConcurrencyChange::new(T0_US, release).unwrap());
    assert_eq!(listed(&state), vec![(T0_US + SECOND, b"a".to_vec())]);
    let earlier = ConcurrencyAction::Acquire {
        holder: holder("a"),
        expires_at_us: T0_US + MS,
    };
    ConcurrencyAlgorithm::apply(&mut state, ConcurrencyChange::new(T0_US, earlier).unwrap());
    assert_eq!(
        listed(&state),
        vec![(T0_US + MS, b"a".to_vec())],
        "the change's expiry"
    );
    let created = ConcurrencyAlgorithm::create(ConcurrencyChange::new(T0_US, release).unwrap());
    assert!(created.is_empty());
}

#[test]
fn memory_per_holder_is_its_id_plus_thirteen_bytes() {
    assert_eq!(Concurrency::HEADER_BYTES, 72);
    assert_eq!(
        Concurrency::default().allocated_bytes(),
        Concurrency::HEADER_BYTES
    );
    // 1,000 holders with 36-byte ids (UUIDs), acquired one by one.
    let mut key = Key::default();
    for i in 0..1_000 {
        let id = format!("{i:08}-0000-4000-8000-000000000000");
        assert!(
            key.call(&acquire(1_000, &id, 60 * SECOND), T0_US + i)
                .allowed
        );
    }
    let state = key.state.unwrap();
    let payload = 1_000 * (8 + 1 + 36 + 4);
    let used = state.allocated_bytes() - Concurrency::HEADER_BYTES;
    assert!(
        (payload..=2 * payload + 8 * (8 + 4) + 8).contains(&used),
        "{used} bytes"
    );
    // Decoded, the buffers are exact for the expiries and within the bound for the ids.
    let decoded = Concurrency::from_holders(1_000, state.holders()).unwrap();
    assert_eq!(decoded, state);
    let used = decoded.allocated_bytes() - Concurrency::HEADER_BYTES;
    assert!((payload..=2 * payload).contains(&used), "{used} bytes");
}

// ----- property tests -----

/// One of a few holders, so that calls renew and release each other's slots; the last one
/// has the longest id allowed.
fn holder_of(index: u8) -> HolderId {
    if index == 7 {
        HolderId::new(&[b'x'; MAX_HOLDER_ID_BYTES]).unwrap()
    } else {
        HolderId::new(format!("h{index}").as_bytes()).unwrap()
    }
}

/// (limit, ttl µs): small limits, ttls of milliseconds (some not whole) to seconds.
fn arb_config() -> impl Strategy<Value = (u64, i64)> {
    (
        1u64..6,
        prop_oneof![Just(MS), 1_000i64..5_000, 1_000_000i64..10_000_000],
    )
}

/// Traffic as (µs since the previous call, holder, what it does: 0..6 acquire, 6..8 release,
/// 8..10 peek).
fn arb_traffic() -> impl Strategy<Value = Vec<(i64, u8, u8)>> {
    let elapsed = prop_oneof![Just(0i64), 0i64..5_000, 0i64..3_000_000, 0i64..30_000_000];
    prop::collection::vec((elapsed, 0u8..8, 0u8..10), 1..60)
}

/// The steps from T0 of `traffic` under `limit` holders of `ttl_us`.
fn steps((limit, ttl_us): (u64, i64), traffic: &[(i64, u8, u8)]) -> Vec<Step<ConcurrencyParams>> {
    let base = ConcurrencyParams::new(limit, ttl_us as u64, MAX_HOLDERS).unwrap();
    let mut steps = testing::steps(
        T0_US,
        traffic.iter().map(|&(elapsed, index, kind)| {
            let params = if kind < 8 {
                base.with_holder(holder_of(index))
            } else {
                base
            };
            (elapsed, params)
        }),
    );
    for (step, &(_, _, kind)) in steps.iter_mut().zip(traffic) {
        step.refund = (6..8).contains(&kind);
    }
    steps
}

/// The same call without its holder: a peek at the free slots.
fn probe(params: &ConcurrencyParams) -> ConcurrencyParams {
    ConcurrencyParams {
        holder: None,
        ..*params
    }
}

/// An independent model: a map from holder to expiry, expired holders dropped at every call,
/// every reply field computed from the sorted live expiries.
#[derive(Default)]
struct Naive {
    holders: BTreeMap<Vec<u8>, i64>,
}

impl Naive {
    /// The decision of an acquire (a peek without a holder), or of a release.
    fn step(&mut self, params: &ConcurrencyParams, release: bool, now: i64) -> Decision {
        self.holders.retain(|_, expiry| *expiry > now);
        let limit = params.limit();
        let id = params.holder().map(|holder| holder.as_bytes().to_vec());
        let allowed = match &id {
            Some(id) if release => self.holders.remove(id).is_some(),
            Some(id) => {
                let own = self.holders.get(id).copied();
                let admitted = own.is_some() || (self.holders.len() as u64) < limit;
                if admitted {
                    let expiry = (now + params.ttl_us() as i64).max(own.unwrap_or(i64::MIN));
                    self.holders.insert(id.clone(), expiry);
                }
                admitted
            }
            None => !release && (self.holders.len() as u64) < limit,
        };
        let mut expiries: Vec<i64> = self.holders.values().copied().collect();
        expiries.sort_unstable();
        let live = expiries.len() as u64;
        let ms = |expiry: i64| (expiry - now + 999).div_euclid(1_000) as u64;
        let holding = !release && id.is_some_and(|id| self.holders.contains_key(&id));
        let retry = if holding || live < limit {
            Retry::Now
        } else {
            Retry::AfterMs(ms(expiries[(live - limit) as usize]).max(1))
        };
        Decision {
            allowed,
            remaining: limit.saturating_sub(live),
            retry,
            reset_after_ms: expiries.last().map_or(0, |&last| ms(last)),
            limit,
        }
    }

    /// The live holders as (expiry, id), sorted as the list sorts them.
    fn listed(&self) -> Vec<(i64, Vec<u8>)> {
        let mut holders: Vec<(i64, Vec<u8>)> = self
            .holders
            .iter()
            .map(|(id, &expiry)| (expiry, id.clone()))
            .collect();
        holders.sort();
        holders
    }
}

/// Any decodable list: up to 40 distinct holders with valid expiries.
fn arb_list() -> impl Strategy<Value = Concurrency> {
    let expiry = prop_oneof![
        MIN_TTL_US..=MAX_EXPIRY_US,
        T0_US - 10 * SECOND..T0_US + 10 * SECOND
    ];
    let id = prop::collection::vec(any::<u8>(), 1..=MAX_HOLDER_ID_BYTES);
    prop::collection::btree_map(id, expiry, 0..40).prop_map(|holders| {
        let mut sorted: Vec<(i64, Vec<u8>)> = holders
            .into_iter()
            .map(|(id, expiry)| (expiry, id))
            .collect();
        sorted.sort();
        let entries = sorted.iter().map(|(expiry, id)| (*expiry, id.as_slice()));
        Concurrency::from_holders(sorted.len() as u64, entries).unwrap()
    })
}

/// `change` decodes to itself, and applied to a copy of `before` rebuilt from its encoded
/// holders (a replica) gives `after`, which decodes to itself too.
fn replicates(
    before: Option<&Concurrency>,
    change: ConcurrencyChange,
    after: &Concurrency,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        ConcurrencyChange::new(change.at_us(), change.action()),
        Some(change)
    );
    let mut replica = match before {
        Some(list) => Concurrency::from_holders(list.len() as u64, list.holders()).unwrap(),
        None => Concurrency::default(),
    };
    ConcurrencyAlgorithm::apply(&mut replica, change);
    prop_assert_eq!(&replica, after);
    let decoded = Concurrency::from_holders(after.len() as u64, after.holders());
    prop_assert_eq!(decoded.as_ref(), Some(after));
    let bytes: usize = after.holders().map(|(_, id)| 13 + id.len()).sum();
    prop_assert!(after.allocated_bytes() <= Concurrency::HEADER_BYTES + 2 * bytes + 8 * 13);
    Ok(())
}

proptest! {
    #[test]
    fn matches_the_naive_model(
        (limit, ttl) in arb_config(),
        traffic in arb_traffic(),
        lowered in prop::collection::vec(0u64..3, 60),
    ) {
        // Every field of every decision, and the live holders, with the limit sometimes
        // lowered below the holders already live.
        let mut key = Key::default();
        let mut model = Naive::default();
        let steps = steps((limit, ttl), &traffic);
        for (step, lowered) in steps.iter().zip(lowered) {
            let params = ConcurrencyParams { limit: (limit.saturating_sub(lowered)).max(1), ..step.params };
            let decision = if step.refund { key.refund(&params, step.now_us) } else { key.call(&params, step.now_us) };
            prop_assert_eq!(decision, model.step(&params, step.refund, step.now_us), "at {}", step.now_us);
            let live: Vec<(i64, Vec<u8>)> = key.state.as_ref().map_or(Vec::new(), |state| {
                listed(state).into_iter().filter(|&(expiry, _)| expiry > step.now_us).collect()
            });
            prop_assert_eq!(live, model.listed());
        }
    }

    #[test]
    fn waiting_retry_after_is_enough_and_necessary(config in arb_config(), traffic in arb_traffic()) {
        testing::check_retry_after_is_honest::<ConcurrencyAlgorithm>(&steps(config, &traffic))?;
    }

    #[test]
    fn reset_after_and_expiry_are_when_no_holder_is_left(config in arb_config(), traffic in arb_traffic()) {
        // A peek with a limit of 1 finds a free slot exactly when no holder is live.
        testing::check_reset_and_expiry_are_when_unused::<ConcurrencyAlgorithm>(&steps(config, &traffic), &peek(1))?;
    }

    #[test]
    fn peeking_between_calls_changes_nothing(config in arb_config(), traffic in arb_traffic()) {
        testing::check_peeking_changes_nothing::<ConcurrencyAlgorithm>(&steps(config, &traffic))?;
    }

    #[test]
    fn grantable_is_all_or_nothing_and_exact(config in arb_config(), traffic in arb_traffic()) {
        testing::check_grantable_is_exact::<ConcurrencyAlgorithm>(&steps(config, &traffic), ConcurrencyParams::limit)?;
    }

    #[test]
    fn releasing_an_acquired_slot_undoes_it(config in arb_config(), traffic in arb_traffic()) {
        // Acquires only (a peek takes nothing to give back).
        let acquires: Vec<_> = steps(config, &traffic).into_iter().filter(|step| step.params.holder().is_some()).collect();
        testing::check_refund_undoes_an_admission::<ConcurrencyAlgorithm>(&acquires, |_| 1)?;
    }

    #[test]
    fn a_backwards_clock_never_sees_more_free_slots(
        config in arb_config(),
        traffic in prop::collection::vec((testing::arb_clock_jump_us(), 0u8..8, 0u8..10), 1..60),
    ) {
        // Free slots, as a peek sees them, are never more at an earlier clock; the list never
        // holds more than the limit; a holder's stored expiry never moves back; and every
        // change replicates.
        let steps = steps(config, &traffic);
        let transitions = testing::check_earlier_clocks_never_see_more_room_by::<ConcurrencyAlgorithm>(&steps, probe)?;
        for transition in &transitions {
            let after = transition.after.as_ref().map_or(Vec::new(), listed);
            prop_assert!(after.len() as u64 <= config.0);
            if let Some(before) = &transition.before {
                for (expiry, id) in listed(before) {
                    if let Some((later, _)) = after.iter().find(|(_, stored)| *stored == id) {
                        prop_assert!(*later >= expiry, "an expiry moved back");
                    }
                }
            }
        }
    }

    #[test]
    fn every_commit_replicates_and_decodes(config in arb_config(), traffic in arb_traffic()) {
        let mut key = Key::default();
        for step in steps(config, &traffic) {
            key.expire(step.now_us);
            let before = key.state.clone();
            let evaluation = if step.refund {
                ConcurrencyAlgorithm::refund(before.as_ref(), &step.params, step.now_us)
            } else {
                ConcurrencyAlgorithm::evaluate(before.as_ref(), &step.params, step.now_us)
            };
            let change = evaluation.commit.as_ref().map(|commit| commit.change);
            key.store(evaluation);
            if let (Some(change), Some(after)) = (change, &key.state) {
                replicates(before.as_ref(), change, after)?;
            }
        }
    }

    #[test]
    fn extremes_never_panic(
        limit in prop_oneof![1u64..5, 1u64..=MAX_STORED_HOLDERS],
        ttl in prop_oneof![Just(MIN_TTL_US), Just(MAX_TTL_US), MIN_TTL_US..=MAX_TTL_US],
        index in 0u8..8,
        now in testing::arb_extreme_now_us(),
        list in arb_list(),
        with_holder in any::<bool>(),
    ) {
        let p = ConcurrencyParams::new(limit, ttl as u64, MAX_STORED_HOLDERS).unwrap();
        let p = if with_holder { p.with_holder(holder_of(index)) } else { p };
        let decodes = |change: &ConcurrencyChange| ConcurrencyChange::new(change.at_us(), change.action()) == Some(*change);
        for state in [None, Some(&list)] {
            let evaluations = testing::check_extremes::<ConcurrencyAlgorithm>(state, &p, now, limit, decodes)?;
            for commit in evaluations.into_iter().filter_map(|evaluation| evaluation.commit) {
                let mut after = state.cloned().unwrap_or_default();
                ConcurrencyAlgorithm::apply(&mut after, commit.change);
                replicates(state, commit.change, &after)?;
            }
        }
    }

    #[test]
    fn decoding_round_trips_any_list(list in arb_list()) {
        let decoded = Concurrency::from_holders(list.len() as u64, list.holders());
        prop_assert_eq!(decoded.as_ref(), Some(&list));
        prop_assert_eq!(list.holders().len(), list.len());
    }
}
