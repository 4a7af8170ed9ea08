//! The encoder against the parser: what is written parses back to what was encoded, for
//! every kind, and the bytes clients have always sent.

use proptest::prelude::*;

use super::*;
use crate::args::multi::{self, MultiArgs};
use crate::args::regional::{self, LeaseArgs};
use crate::args::{Settings, call as parse_call, quota, remembered};
use crate::commands::Syntax;
use crate::error::CommandError;
use redis_ratelimit_core::CallCost;
use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::kinds::Kind;

const SETTINGS: Settings = Settings {
    max_log_entries: 10_000,
    max_holders: 1_000,
};

/// The server's time a lease's expiry is checked against.
const NOW_US: i64 = 1_700_000_000_000_000;

/// A command as the module parses it.
#[derive(Debug, PartialEq)]
enum Parsed {
    Call(CallArgs),
    Multi(Vec<Vec<u8>>, MultiArgs),
    Acquire(Quota),
    Throttle(GcraParams),
    Refund(Quota),
    Release(HolderId),
    Peek(CallArgs),
    Regional(Vec<u8>, Quota),
    RegionLease(LeaseArgs),
}

/// Parses `args` (name first) as the module does.
fn parse(args: &Args) -> Result<(Vec<u8>, Parsed), CommandError> {
    let words: Vec<&[u8]> = args.iter().collect();
    let (name, rest) = words.split_first().ok_or(CommandError::WrongArity)?;
    let command = Command::named(name).ok_or(CommandError::WrongArity)?;
    assert_eq!(*name, &command.name().to_bytes().to_ascii_uppercase()[..]);
    if command.counts_keys() {
        let (numkeys, rest) = rest.split_first().ok_or(CommandError::WrongArity)?;
        let count = multi::key_count(numkeys)?;
        let (keys, limits) = rest.split_at(count);
        let parsed = multi::limits(count, limits, SETTINGS).map_err(|e| e.naming_keys(keys))?;
        let keys = keys.iter().map(|key| key.to_vec()).collect();
        return Ok((Vec::new(), Parsed::Multi(keys, parsed)));
    }
    let (key, rest) = rest.split_first().ok_or(CommandError::WrongArity)?;
    let parsed = match command.syntax() {
        Syntax::Call(kind) => Parsed::Call(parse_call::call(kind, rest, SETTINGS)?),
        Syntax::Acquire => Parsed::Acquire(quota::acquire(rest, SETTINGS.max_holders)?),
        Syntax::Throttle => Parsed::Throttle(quota::throttle(rest)?),
        Syntax::Refund => Parsed::Refund(remembered::refund(rest, SETTINGS)?),
        Syntax::Release => match rest {
            [holder] => Parsed::Release(quota::holder(holder)?),
            _ => return Err(CommandError::WrongArity),
        },
        Syntax::Peek => Parsed::Peek(remembered::peek(rest, SETTINGS)?),
        Syntax::Regional => {
            let (lease_key, floor) = rest.split_first().ok_or(CommandError::WrongArity)?;
            Parsed::Regional(lease_key.to_vec(), remembered::regional(floor, SETTINGS)?)
        }
        Syntax::RegionLease => Parsed::RegionLease(regional::lease(rest, NOW_US)?),
        Syntax::Multi | Syntax::Effects => unreachable!("not encoded"),
    };
    Ok((key.to_vec(), parsed))
}

fn words(args: &Args) -> Vec<String> {
    args.iter()
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect()
}

/// The parameters of a limit of `kind`, as text, valid or not: each as its command takes it
/// (`quota::params`), so a kind added to the table is covered as it is.
fn arb_params(kind: Kind) -> BoxedStrategy<Vec<String>> {
    let strategies: Vec<BoxedStrategy<String>> = quota::params(kind)
        .iter()
        .map(|param| arb_param(*param))
        .collect();
    strategies.boxed()
}

fn arb_param(param: quota::Param) -> BoxedStrategy<String> {
    use quota::Param;
    match param {
        Param::Count(_) => prop_oneof![
            1u64..20,
            1u64..100_000,
            Just(u64::from(u32::MAX)),
            any::<u64>()
        ]
        .prop_map(|n| n.to_string())
        .boxed(),
        Param::Rate(_) | Param::Seconds(_) => prop_oneof![
            (1u64..10_000).prop_map(|n| n.to_string()),
            (0u64..1_000, 0u64..1_000_000).prop_map(|(a, b)| format!("{a}.{b}")),
            (1u64..100, -12i32..12).prop_map(|(a, e)| format!("{a}e{e}")),
            Just("0.000694444".to_string()),
            Just("1000000000".to_string()),
        ]
        .boxed(),
        Param::Integer(_) | Param::WholeSeconds(_) => {
            prop_oneof![0i64..50, -5i64..5, 1i64..1_000_000, any::<i64>()]
                .prop_map(|n| n.to_string())
                .boxed()
        }
        Param::Millis(_) => (1u64..100_000_000).prop_map(|n| n.to_string()).boxed(),
    }
}

/// A single-key call of any kind: its parameters, a cost, and options.
fn arb_call() -> impl Strategy<Value = (Kind, Vec<String>)> {
    prop::sample::select(Kind::ALL).prop_flat_map(|kind| {
        let options = prop_oneof![
            Just(vec![]),
            Just(vec!["PARTIAL".to_string()]),
            (1u64..10).prop_map(|m| vec!["PARTIAL".into(), "MIN".into(), m.to_string()]),
            (0u64..86_400_001).prop_map(|ms| vec!["MAXWAIT".into(), ms.to_string()]),
        ];
        let cost = prop_oneof![Just(None), (1u64..1_000).prop_map(Some)];
        (arb_params(kind), cost, options).prop_map(move |(mut args, cost, options)| {
            args.extend(cost.map(|c| c.to_string()));
            args.extend(options);
            (kind, args)
        })
    })
}

fn bytes(words: &[String]) -> Vec<&[u8]> {
    words.iter().map(|word| word.as_bytes()).collect()
}

fn holder() -> HolderId {
    HolderId::new(b"req-1").unwrap()
}

/// `call` with the holder every in-flight call carries.
fn with_holder(mut call: CallArgs) -> CallArgs {
    if let Quota::Concurrency(params) = &mut call.quota {
        **params = params.with_holder(holder());
    }
    call
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A call encoded as its kind's command parses back to itself; a call of a kind
    /// without a command of its own goes as `RL.MULTI 1`, which parses to the same limit.
    #[test]
    fn a_call_parses_back_to_itself((kind, args) in arb_call()) {
        let Ok(parsed) = parse_call::call(kind, &bytes(&args), SETTINGS) else {
            return Ok(());
        };
        let parsed = with_holder(parsed);
        let mut out = Args::default();
        match call(b"user:7", &parsed, &mut out) {
            Some(command) => {
                prop_assert_eq!(command.syntax(), Syntax::Call(kind));
                let reparsed = parse(&out);
                prop_assert_eq!(reparsed, Ok((b"user:7".to_vec(), Parsed::Call(parsed))), "{:?}", words(&out));
            }
            None => {
                prop_assert!(Command::calling(kind).is_none());
                let limits = MultiArgs {
                    quotas: vec![parsed.quota.with_cost(1)],
                    weights: vec![1],
                    cost: parsed.quota.cost(),
                    grant: parsed.grant,
                };
                if max_wait_ns(&parsed.quota).is_some() {
                    return Ok(());
                }
                let command = group(&[b"user:7"], &limits, true, &mut out);
                if kind == Kind::Concurrency && parsed.grant == Grant::Whole {
                    prop_assert_eq!(command, Ok(Command::Acquire));
                    let Parsed::Acquire(quota) = parse(&out).unwrap().1 else { panic!() };
                    prop_assert_eq!(quota, parsed.quota.with_cost(1));
                } else {
                    prop_assert_eq!(command, Ok(Command::Multi));
                    let reparsed = parse(&out);
                    prop_assert_eq!(reparsed, Ok((Vec::new(), Parsed::Multi(vec![b"user:7".to_vec()], limits))), "{:?}", words(&out));
                }
            }
        }
    }

    /// Several limits of any kinds, with weights, a holder and a partial grant, parse back.
    #[test]
    fn a_multi_call_parses_back_to_itself(
        limits in prop::collection::vec(prop::sample::select(Kind::ALL).prop_flat_map(|kind| {
            arb_params(kind).prop_map(move |params| (kind, params))
        }), 1..5),
        weights in prop::collection::vec(1u64..4, 5),
        cost in 1u64..100,
        partial in prop_oneof![Just(None), (1u64..100).prop_map(Some)],
    ) {
        let keys: Vec<String> = (0..limits.len()).map(|i| format!("{{t}}:{i}")).collect();
        let mut args: Vec<String> = Vec::new();
        for (kind, params) in &limits {
            args.push(kind.command_name().unwrap().into());
            args.extend(params.iter().cloned());
        }
        args.extend(["COST".into(), cost.to_string(), "WEIGHTS".into()]);
        args.extend(weights.iter().take(limits.len()).map(u64::to_string));
        if limits.iter().any(|(kind, _)| *kind == Kind::Concurrency) {
            args.extend(["HOLDER".into(), "req-1".into()]);
        }
        if let Some(min) = partial {
            args.extend(["PARTIAL".into(), "MIN".into(), min.to_string()]);
        }
        let Ok(parsed) = multi::limits(limits.len(), &bytes(&args), SETTINGS) else {
            return Ok(());
        };
        let key_bytes = bytes(&keys);
        let mut out = Args::default();
        prop_assert_eq!(multi(&key_bytes, &parsed, &mut out), Ok(Command::Multi));
        let expected = Parsed::Multi(keys.iter().map(|k| k.as_bytes().to_vec()).collect(), parsed);
        prop_assert_eq!(parse(&out), Ok((Vec::new(), expected)), "{:?}", words(&out));
    }

    /// A refund of any kind parses back to the quota it gives back.
    #[test]
    fn a_refund_parses_back((kind, args) in arb_call()) {
        let Ok(parsed) = parse_call::call(kind, &bytes(&args), SETTINGS) else {
            return Ok(());
        };
        let quota = with_holder(parsed).quota;
        let mut out = Args::default();
        let command = refund(b"k", &quota, &mut out).unwrap();
        let (key, reparsed) = parse(&out).unwrap();
        prop_assert_eq!(key, b"k".to_vec());
        match (command, reparsed) {
            (Command::Refund, Parsed::Refund(back)) => {
                // A refund takes no MAXWAIT: it never waits.
                let unpaced = match quota {
                    Quota::TokenBucket(p) => Quota::TokenBucket(p.with_max_wait_ns(0).unwrap()),
                    other => other,
                };
                prop_assert_eq!(back, unpaced);
            }
            (Command::Throttle, Parsed::Throttle(back)) => {
                let Quota::Gcra(params) = quota else { panic!("a GCRA") };
                let units = i64::try_from(params.cost()).unwrap();
                prop_assert_eq!(back, params.with_quantity(-units));
            }
            (Command::Release, Parsed::Release(id)) => prop_assert_eq!(id, holder()),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    /// A regional call of any floor parses back to its keys and its floor; the floors
    /// `RL.REGIONAL` refuses (in-flight, paced) are refused by the encoder too.
    #[test]
    fn a_regional_call_parses_back((kind, args) in arb_call()) {
        let Ok(parsed) = parse_call::call(kind, &bytes(&args), SETTINGS) else {
            return Ok(());
        };
        let floor = with_holder(parsed).quota;
        let mut out = Args::default();
        let refused = matches!(floor, Quota::Concurrency(_))
            || matches!(&floor, Quota::TokenBucket(p) if p.max_wait_ns() > 0);
        match regional(b"{r}floor", b"{r}lease", &floor, &mut out) {
            Err(error) => prop_assert!(refused && error == EncodeError::NotAFloor),
            Ok(command) => {
                prop_assert!(!refused);
                prop_assert_eq!(command, Command::Regional);
                let (key, reparsed) = parse(&out).unwrap();
                prop_assert_eq!(key, b"{r}floor".to_vec());
                prop_assert_eq!(reparsed, Parsed::Regional(b"{r}lease".to_vec(), floor));
            }
        }
    }

    /// A lease parses back to itself, whatever its units and (future) expiry.
    #[test]
    fn a_region_lease_parses_back(
        units in prop_oneof![0u64..100, Just(regional::MAX_LEASE_UNITS), 0..=regional::MAX_LEASE_UNITS],
        after_ms in 1i64..1_000_000_000_000,
    ) {
        let lease = LeaseArgs { units, expires_at_ms: NOW_US / 1_000 + after_ms };
        let mut out = Args::default();
        prop_assert_eq!(region_lease(b"k", &lease, &mut out), Command::RegionLease);
        prop_assert_eq!(parse(&out).unwrap(), (b"k".to_vec(), Parsed::RegionLease(lease)));
    }

    /// A peek of any kind parses back to the quota it reads, taken whole (an in-flight
    /// limit: its limit alone, which is all a peek of one says).
    #[test]
    fn a_peek_parses_back((kind, args) in arb_call()) {
        let Ok(parsed) = parse_call::call(kind, &bytes(&args), SETTINGS) else {
            return Ok(());
        };
        let quota = parsed.quota;
        let mut out = Args::default();
        prop_assert_eq!(peek(b"k", &quota, &mut out), Command::Peek);
        let (key, reparsed) = parse(&out).unwrap();
        prop_assert_eq!(key, b"k".to_vec());
        let Parsed::Peek(back) = reparsed else { panic!("a peek") };
        prop_assert_eq!(back.grant, Grant::Whole);
        match quota {
            Quota::Concurrency(params) => {
                let Quota::Concurrency(read) = back.quota else { panic!("in-flight") };
                prop_assert_eq!(read.limit(), params.limit());
                prop_assert!(read.holder().is_none());
            }
            // A peek asks no wait: it never waits.
            Quota::TokenBucket(p) => prop_assert_eq!(back.quota, Quota::TokenBucket(p.with_max_wait_ns(0).unwrap())),
            other => prop_assert_eq!(back.quota, other),
        }
    }

    /// Every refill interval has a rate the parser turns back into exactly that interval.
    #[test]
    fn every_interval_has_a_rate(interval_ns in prop_oneof![
        1u64..10_000,
        1u64..1_000_000_000_000,
        1u64..=3_155_760_000_000_000_000,
    ]) {
        let mut out = Args::default();
        push_rate(interval_ns, &mut out);
        let text = out.get(0).unwrap();
        let bucket = quota::token_bucket(&[b"1", text]).unwrap();
        prop_assert_eq!(bucket.interval_ns(), interval_ns, "{}", String::from_utf8_lossy(text));
    }
}

fn parsed_call(kind: Kind, args: &[&str]) -> CallArgs {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    with_holder(parse_call::call(kind, &args, SETTINGS).unwrap())
}

#[test]
fn rates_are_the_shortest_decimal_of_their_interval() {
    let text = |interval_ns| {
        let mut out = Args::default();
        push_rate(interval_ns, &mut out);
        words(&out).remove(0)
    };
    assert_eq!(text(600_000_000), "1.666666667");
    assert_eq!(text(500_000_000), "2");
    assert_eq!(text(4_000_000_000), "0.25");
    assert_eq!(text(2_000_000_000), "0.5");
    assert_eq!(text(1), "1000000000");
    assert_eq!(text(1_440_000_000_000), "0.0006944444444445");
    assert_eq!(text(333_333_334), "3");
}

#[test]
fn the_commands_clients_have_always_sent() {
    let mut out = Args::default();
    let bucket = parsed_call(Kind::TokenBucket, &["10", "2", "6", "PARTIAL", "MIN", "1"]);
    assert_eq!(call(b"k", &bucket, &mut out), Some(Command::TokenBucket));
    assert_eq!(
        words(&out),
        ["RL.TOKENBUCKET", "k", "10", "2", "6", "PARTIAL", "MIN", "1"]
    );
    let paced = parsed_call(Kind::TokenBucket, &["1", "1", "1", "MAXWAIT", "1500"]);
    call(b"q", &paced, &mut out);
    assert_eq!(
        words(&out),
        ["RL.TOKENBUCKET", "q", "1", "1", "1", "MAXWAIT", "1500"]
    );
    let window = parsed_call(Kind::FixedWindow, &["100", "60"]);
    let limits = MultiArgs {
        quotas: vec![bucket.quota.with_cost(1), window.quota],
        weights: vec![1, 3],
        cost: 2,
        grant: Grant::Whole,
    };
    assert_eq!(
        group(&[b"a", b"b"], &limits, true, &mut out),
        Ok(Command::Multi)
    );
    assert_eq!(
        words(&out).join(" "),
        "RL.MULTI 2 a b TOKENBUCKET 10 2 FIXED 100 60.000000 COST 2 WEIGHTS 1 3"
    );
    assert_eq!(
        group(&[b"a", b"b"], &limits, false, &mut out),
        Err(EncodeError::NeedsMulti)
    );
    let gcra = parsed_call(Kind::Gcra, &["4", "10", "60"]).quota;
    let lone = MultiArgs {
        quotas: vec![gcra.clone()],
        weights: vec![1],
        cost: 1,
        grant: Grant::Whole,
    };
    assert_eq!(
        group(&[b"g"], &lone, false, &mut out),
        Ok(Command::Throttle)
    );
    assert_eq!(words(&out).join(" "), "CL.THROTTLE g 4 10 60 1");
    assert_eq!(group(&[b"g"], &lone, true, &mut out), Ok(Command::Multi));
    assert_eq!(words(&out).join(" "), "RL.MULTI 1 g GCRA 4 10 60 COST 1");
    let slots = parsed_call(Kind::Concurrency, &["5", "30000"]).quota;
    let slot = MultiArgs {
        quotas: vec![slots.clone()],
        ..lone.clone()
    };
    assert_eq!(group(&[b"s"], &slot, true, &mut out), Ok(Command::Acquire));
    assert_eq!(words(&out).join(" "), "RL.ACQUIRE s 5 req-1 30000");
    let window = parsed_call(Kind::SlidingWindow, &["100", "1"]).quota;
    refund(b"a", &window.with_cost(10), &mut out).unwrap();
    assert_eq!(words(&out).join(" "), "RL.REFUND a SLIDING 100 1.000000 10");
    refund(b"g", &gcra.with_cost(5), &mut out).unwrap();
    assert_eq!(words(&out).join(" "), "CL.THROTTLE g 4 10 60 -5");
    refund(b"s", &slots, &mut out).unwrap();
    assert_eq!(words(&out).join(" "), "RL.RELEASE s req-1");
    peek(b"a", &window.with_cost(10), &mut out);
    assert_eq!(words(&out).join(" "), "RL.PEEK a SLIDING 100 1.000000 10");
    peek(b"s", &slots, &mut out);
    assert_eq!(words(&out).join(" "), "RL.PEEK s CONCURRENCY 5");
}

#[test]
fn calls_that_cannot_be_written_say_why() {
    let mut out = Args::default();
    let none = MultiArgs {
        quotas: vec![],
        weights: vec![],
        cost: 1,
        grant: Grant::Whole,
    };
    assert_eq!(
        group(&[], &none, true, &mut out),
        Err(EncodeError::NoLimits)
    );
    assert_eq!(
        group(&[], &none, false, &mut out),
        Err(EncodeError::NoLimits)
    );
    let args: Vec<&[u8]> = vec![b"5", b"30000"];
    let anonymous = quota::concurrency(&args, 1_000).unwrap();
    let slot = MultiArgs {
        quotas: vec![Quota::Concurrency(Box::new(anonymous))],
        weights: vec![1],
        cost: 1,
        grant: Grant::Whole,
    };
    assert_eq!(
        group(&[b"s"], &slot, true, &mut out),
        Err(EncodeError::NoHolder)
    );
    let paced = parsed_call(Kind::TokenBucket, &["1", "1", "MAXWAIT", "5"]).quota;
    let two = MultiArgs {
        quotas: vec![paced.clone(), paced],
        weights: vec![1, 1],
        cost: 1,
        grant: Grant::Whole,
    };
    assert_eq!(
        group(&[b"a", b"b"], &two, true, &mut out),
        Err(EncodeError::PacedInGroup)
    );
    assert_eq!(
        EncodeError::PacedInGroup.to_string(),
        "a paced limit (MAXWAIT) needs a call of its own"
    );
}
