//! Every argument parser of `wire/src/args/` fed with arbitrary bytes.
//!
//! The input is split on 0xFF into command arguments (0xFF is one non-ASCII byte like any
//! other to the parsers, so nothing is lost by reserving it). Each piece goes through the
//! single-value parsers, and the whole list through every command's parser. Beyond "no
//! panic" (overflow checks are on in fuzz builds), each result is checked against what the
//! README promises: accepted values are in range and agree with an independent parse, and
//! every error is a one-line `ERR` text that names the argument.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_ratelimit_wire::args;
use redis_ratelimit_core::CallCost;
use redis_ratelimit_core::sliding_log::MAX_STORED_ENTRIES;
use redis_ratelimit_core::time::{MAX_NOW_US, MAX_WINDOW_US, MIN_WINDOW_US};
use redis_ratelimit_core::token_bucket::MAX_REFILL_NS;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_wire::error::{ArgError, CommandError};
use redis_ratelimit_core::kinds::{Kind, Quota};

const SEPARATOR: u8 = 0xFF;

/// `ratelimit.max-log-entries` values: its minimum, default and maximum, and beyond.
const MAX_LOG_ENTRIES: [u64; 4] = [1, 10_000, 10_000_000, u64::MAX];

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.split(|&byte| byte == SEPARATOR).collect();
    for part in &parts {
        single_values(part);
    }
    commands(&parts);
    // The same list behind one more or one fewer argument: every arity with the same bytes.
    if let Some((_, rest)) = parts.split_first() {
        commands(rest);
    }
});

/// The text as a float, by Rust's own parser (None if not UTF-8 or refused).
fn as_f64(text: &[u8]) -> Option<f64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn check_arg_error(error: &ArgError, name: &str) {
    check_message(&error.to_string());
    assert_eq!(error.name, name);
}

/// An error reply is one line, starts with an error code, and stays short whatever was sent.
fn check_message(message: &str) {
    assert!(message.starts_with("ERR "), "{message:?}");
    assert!(!message.contains(['\r', '\n']), "{message:?}");
    assert!(message.len() < 200, "{} bytes: {message:?}", message.len());
}

fn check_command_error(error: &CommandError) {
    check_message(&error.to_string());
}

fn single_values(text: &[u8]) {
    // A stored lease is its units' canonical decimal, nothing else.
    if let Some(units) = args::regional::stored_units(text) {
        assert_eq!(units.to_string().as_bytes(), text);
        assert!(units <= args::regional::MAX_LEASE_UNITS);
    }
    match args::positive_integer("x", text) {
        Ok(value) => {
            assert!(value >= 1);
            assert!(text.iter().all(u8::is_ascii_digit), "{text:?}");
            let trimmed = text
                .iter()
                .position(|&b| b != b'0')
                .map_or(&[][..], |at| &text[at..]);
            assert_eq!(value.to_string().as_bytes(), trimmed);
        }
        Err(error) => check_arg_error(&error, "x"),
    }
    match args::positive_decimal("x", text) {
        Ok(_) => {
            let float = as_f64(text).unwrap_or_else(|| panic!("accepted {text:?}, f64 refuses it"));
            assert!(float >= 0.0, "{text:?} = {float}"); // 0 only for underflow (1e-400)
        }
        Err(error) => check_arg_error(&error, "x"),
    }
    match args::duration_us("window", text) {
        Ok(us) => {
            assert!((MIN_WINDOW_US..=MAX_WINDOW_US).contains(&us), "{us}");
            // Exact decimal, rounded up to the µs: within one µs of the float's value.
            let float = as_f64(text).expect("a decimal");
            let exact = float * 1e6;
            let us = us as f64;
            assert!(
                us >= exact * (1.0 - 1e-12) && us <= exact * (1.0 + 1e-12) + 1.0,
                "{text:?}: {us} µs"
            );
        }
        Err(error) => check_arg_error(&error, "window"),
    }
    match args::algorithm(text) {
        Ok(kind) => {
            let name = kind.command_name().expect("only named kinds");
            assert!(text.eq_ignore_ascii_case(name.as_bytes()));
        }
        Err(error) => check_command_error(&error),
    }
}

/// The cost a single-key call's arguments after the parameters give: 1 when absent.
fn cost_of(rest: &[&[u8]]) -> u64 {
    match rest.first() {
        Some(cost) if !cost.eq_ignore_ascii_case(b"PARTIAL") => {
            args::positive_integer("cost", cost).expect("an accepted cost")
        }
        _ => 1,
    }
}

fn commands(list: &[&[u8]]) {
    // A lease to install: at most the most a lease holds, ending after the server's time.
    for now_us in [0, 1_800_000_000_000_000, MAX_NOW_US] {
        match args::regional::lease(list, now_us) {
            Ok(lease) => {
                assert!(lease.units <= args::regional::MAX_LEASE_UNITS);
                assert!(lease.expires_at_ms.saturating_mul(1_000) > now_us);
            }
            Err(error) => check_command_error(&error),
        }
    }
    for max_log_entries in MAX_LOG_ENTRIES {
        let settings = args::Settings {
            max_log_entries,
            max_holders: max_log_entries,
        };
        for &kind in Kind::ALL {
            match args::call(kind, list, settings) {
                Ok(call) => {
                    assert_eq!(call.quota.kind(), kind);
                    check_quota(&call.quota, list, max_log_entries);
                    if let Grant::Partial { min } = call.grant {
                        assert!(min >= 1 && min <= call.quota.cost());
                    }
                }
                Err(error) => check_command_error(&error),
            }
            match args::refund(kind, list, settings) {
                Ok(quota) => check_quota(&quota, list, max_log_entries),
                Err(error) => check_command_error(&error),
            }
            match args::peek(kind, list, settings) {
                Ok(call) => assert_eq!(call.quota.kind(), kind),
                Err(error) => check_command_error(&error),
            }
        }
        match args::regional::floor(list, settings) {
            Ok(quota) => {
                assert_ne!(quota.kind(), Kind::Concurrency);
                check_quota(&quota, &list[1..], max_log_entries);
            }
            Err(error) => check_command_error(&error),
        }
        if let Some((numkeys, rest)) = list.split_first() {
            if let Ok(count) = args::multi::key_count(numkeys) {
                if let Some((keys, rest)) = rest.split_at_checked(count) {
                    match args::multi::limits(count, rest, settings).map_err(|e| e.naming_keys(keys)) {
                        Ok(parsed) => {
                            assert_eq!(parsed.quotas.len(), count);
                            assert_eq!(parsed.weights.len(), count);
                            assert!(parsed.weights.iter().all(|w| w.checked_mul(parsed.cost).is_some()));
                        }
                        Err(error) => check_command_error(&error),
                    }
                }
            }
        }
    }
    match args::quota::acquire(list, 1_000) {
        Ok(Quota::Concurrency(params)) => {
            let [limit, holder, _ttl] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert_eq!(Ok(params.limit()), args::positive_integer("limit", limit));
            assert!(params.limit() <= 1_000);
            assert_eq!(params.holder().map(|id| id.as_bytes()), Some(*holder));
        }
        Ok(other) => panic!("RL.ACQUIRE parsed {other:?}"),
        Err(error) => check_command_error(&error),
    }
    match args::throttle(list) {
        Ok(params) => {
            let [burst, _count, _period, rest @ ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert!(rest.len() <= 1);
            let burst: i64 = std::str::from_utf8(burst).unwrap().parse().unwrap();
            assert_eq!(params.max_burst(), burst);
            assert!(params.max_burst() >= 0);
            assert!(params.interval_ns() >= 1);
            let quantity = rest
                .first()
                .map_or(1, |q| std::str::from_utf8(q).unwrap().parse().unwrap());
            assert_eq!(params.quantity(), quantity);
        }
        Err(error) => check_command_error(&error),
    }
}

/// What the README promises of accepted parameters (`list` starts with them).
fn check_quota(quota: &Quota, list: &[&[u8]], max_log_entries: u64) {
    match quota {
        Quota::TokenBucket(params) => {
            let [capacity, rate, rest @ ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert_eq!(
                Ok(params.capacity()),
                args::positive_integer("capacity", capacity)
            );
            assert_eq!(params.cost(), cost_of(rest));
            let interval = params.interval_ns();
            assert!(interval >= 1);
            assert!(
                params
                    .capacity()
                    .checked_mul(interval)
                    .is_some_and(|ns| ns <= MAX_REFILL_NS)
            );
            // The interval is 1e9 / rate rounded up: never a faster rate than requested.
            let rate = as_f64(rate).expect("a decimal");
            let exact = 1e9 / rate;
            let interval = interval as f64;
            assert!(
                interval >= exact * (1.0 - 1e-12) && interval <= exact * (1.0 + 1e-12) + 1.0,
                "rate {rate}: interval {interval} ns"
            );
        }
        Quota::SlidingWindow(params) | Quota::FixedWindow(params) => {
            let [limit, window, rest @ ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert_eq!(Ok(params.limit()), args::positive_integer("limit", limit));
            assert!(params.limit() <= u64::from(u32::MAX));
            assert_eq!(Ok(params.window_us()), args::duration_us("window", window));
            assert_eq!(params.cost(), cost_of(rest));
        }
        Quota::SlidingLog(params) => {
            let [limit, window, rest @ ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert_eq!(Ok(params.limit()), args::positive_integer("limit", limit));
            assert!(params.limit() <= max_log_entries.clamp(1, MAX_STORED_ENTRIES));
            assert_eq!(Ok(params.window_us()), args::duration_us("window", window));
            assert_eq!(params.cost(), cost_of(rest));
        }
        Quota::Concurrency(params) => {
            let [limit, ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            assert_eq!(Ok(params.limit()), args::positive_integer("limit", limit));
            assert!(params.limit() <= max_log_entries.clamp(1, 100_000));
            assert!(params.holder().is_none(), "a holder comes from HOLDER or RL.ACQUIRE");
        }
        Quota::Gcra(params) => {
            let [burst, _count, _period, rest @ ..] = list else {
                panic!("accepted {} arguments", list.len())
            };
            let burst: i64 = std::str::from_utf8(burst).unwrap().parse().unwrap();
            assert_eq!(params.max_burst(), burst);
            assert!(params.interval_ns() >= 1);
            assert_eq!(params.cost(), cost_of(rest));
        }
    }
}
