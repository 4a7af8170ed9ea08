//! Remembered arguments never stand in for another call: every command parses each call as a
//! fresh server would, whatever other clients sent before (the parsed-arguments memo compares
//! everything a parse depends on: the arguments, `RL.MULTI`'s key count, the settings).

use crate::helpers::{expect_error, expect_refusal, multi, words, write_marks};
use crate::server::Server;

fn keys(con: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys
}

fn call(con: &mut redis::Connection, line: &str) -> redis::RedisResult<redis::Value> {
    let words = words(line);
    redis::cmd(words[0]).arg(&words[1..]).query(con)
}

fn refused(con: &mut redis::Connection, line: &str) -> String {
    let words = words(line);
    let bytes: Vec<&[u8]> = words.iter().map(|word| word.as_bytes()).collect();
    expect_error(con, &bytes)
}

const WRONG_ARITY: &str = "ERR wrong number of arguments for 'rl.multi' command";

/// The outside report: a call with more keys than limits was admitted after any successful
/// call with the same limits, checking only the first key.
#[test]
fn a_multi_call_with_more_keys_than_limits_is_refused_after_a_valid_one() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(
        refused(&mut con, "RL.MULTI 2 a b TOKENBUCKET 5 1"),
        WRONG_ARITY
    );
    multi(&mut con, &words("1 k TOKENBUCKET 5 1"));
    let marks = write_marks(&mut con);
    assert_eq!(
        refused(&mut con, "RL.MULTI 3 a b c TOKENBUCKET 5 1"),
        WRONG_ARITY
    );
    assert_eq!(
        refused(&mut con, "RL.MULTI 2 a b TOKENBUCKET 5 1"),
        WRONG_ARITY
    );
    assert_eq!(
        write_marks(&mut con),
        marks,
        "nothing written or propagated"
    );
    assert_eq!(
        keys(&mut con),
        ["k"],
        "a, b and c were neither checked nor charged"
    );
}

/// The converse: after a valid call of two keys and two limits, one key with those two
/// limits is refused.
#[test]
fn a_multi_call_with_more_limits_than_keys_is_refused_after_a_valid_one() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    multi(&mut con, &words("2 p1 p2 TOKENBUCKET 5 1 TOKENBUCKET 5 1"));
    let marks = write_marks(&mut con);
    assert_eq!(
        refused(&mut con, "RL.MULTI 1 x1 TOKENBUCKET 5 1 TOKENBUCKET 5 1"),
        "ERR option must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m] (got 'TOKENBUCKET')"
    );
    assert_eq!(write_marks(&mut con), marks);
    assert_eq!(keys(&mut con), ["p1", "p2"]);
}

/// A setting lowered after a successful call applies to the very next call with the same
/// arguments, for every command that checks it.
#[test]
fn a_changed_setting_applies_to_remembered_arguments() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let log_calls = [
        "RL.SLIDINGLOG k1 5000 60",
        "RL.PEEK k2 SLIDINGLOG 5000 60",
        "RL.REFUND k3 SLIDINGLOG 5000 60",
        "RL.MULTI 1 k4 SLIDINGLOG 5000 60",
    ];
    let holder_calls = [
        "RL.PEEK k5 CONCURRENCY 500",
        "RL.MULTI 1 k6 CONCURRENCY 500 1000 HOLDER h",
    ];
    for line in log_calls.iter().chain(&holder_calls) {
        call(&mut con, line).unwrap_or_else(|error| panic!("{line}: {error}"));
    }
    for (setting, value) in [
        ("ratelimit.max-log-entries", 1000),
        ("ratelimit.max-holders", 100),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting)
            .arg(value)
            .query(&mut con)
            .unwrap();
    }
    for line in log_calls {
        let message = refused(&mut con, line);
        assert!(
            message.contains("must be at most 1000 (the ratelimit.max-log-entries setting)"),
            "{line}: {message}"
        );
    }
    for line in holder_calls {
        let message = refused(&mut con, line);
        assert!(
            message.contains("must be at most 100 (the ratelimit.max-holders setting)"),
            "{line}: {message}"
        );
    }
}

/// `HOLDER` names the caller of an in-flight limit; a call without one is refused rather
/// than silently ignoring it.
#[test]
fn holder_without_an_in_flight_limit_is_refused() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let args: [&[u8]; 7] = [b"RL.MULTI", b"1", b"k", b"FIXED", b"5", b"60", b"HOLDER"];
    assert_eq!(
        expect_refusal(&mut con, &[&args[..], &[b"h"]].concat()),
        "ERR HOLDER id is for CONCURRENCY limits, and this call has none"
    );
    assert_eq!(keys(&mut con), Vec::<String>::new());
}

/// Past 2^62 ns (2116-02-20) the algorithms cannot compute: every command refuses, rather
/// than answering as of a clamped instant while Redis expires keys on its real clock.
#[test]
fn a_clock_past_2116_is_refused_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    multi(&mut con, &words("1 k TOKENBUCKET 5 1"));
    let now_ms: i64 = {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
        seconds * 1000 + micros / 1000
    };
    let last_ms = (1i64 << 62) / 1_000_000;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("ratelimit.test-clock-offset-ms")
        .arg(last_ms - now_ms + 60_000)
        .query(&mut con)
        .unwrap();
    let marks = write_marks(&mut con);
    for line in [
        "RL.TOKENBUCKET k 5 1",
        "RL.SLIDING s 5 60",
        "RL.FIXED f 5 60",
        "RL.SLIDINGLOG l 5 60",
        "RL.PEEK k TOKENBUCKET 5 1",
        "RL.REFUND k TOKENBUCKET 5 1",
        "CL.THROTTLE c 5 10 60",
        "RL.MULTI 1 k TOKENBUCKET 5 1",
        "RL.ACQUIRE a 5 h 1000",
        "RL.RELEASE a h",
    ] {
        assert_eq!(
            refused(&mut con, line),
            "ERR the server clock is past 2116-02-20 (2^62 ns since 1970), the last instant rate limits are computed for",
            "{line}"
        );
    }
    assert_eq!(
        write_marks(&mut con),
        marks,
        "nothing written or propagated"
    );
    assert_eq!(keys(&mut con), ["k"]);
}
