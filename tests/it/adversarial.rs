//! Hostile input from clients: corrupt and forged `RESTORE` payloads and every
//! numeric argument of every command at its extremes. The server must refuse cleanly,
//! write nothing, propagate nothing, and never die.
//!
//! Bounded to a few seconds; `RL_TEST_LONG=1` runs the RESTORE fuzz for 60 s instead, and
//! `RL_TEST_SEED=<n>` replays one seed (each run prints the seed it used).

use std::time::{Duration, Instant};

use crate::helpers::{
    dump, error_text, expect_error, expect_refusal, keys, mixed_traffic, run, wait_replicas,
    write_marks,
};
use crate::server::{Server, info_int, primary_and_replica};

/// xorshift64*: small, deterministic, good enough to pick bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The seed of this run: `RL_TEST_SEED`, or one drawn from the clock (printed either way).
fn seed() -> u64 {
    let seed = std::env::var("RL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("RESTORE fuzz seed: {seed} (replay with RL_TEST_SEED={seed})");
    seed
}

fn long_run() -> bool {
    std::env::var("RL_TEST_LONG").is_ok_and(|v| v == "1")
}

/// Redis's CRC-64 (Jones polynomial, reflected), as in the DUMP trailer (little-endian).
fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Rewrites the CRC-64 trailer so the payload passes checksum validation.
fn reseal(payload: &mut [u8]) {
    let body = payload.len() - 8;
    let crc = crc64(&payload[..body]);
    payload[body..].copy_from_slice(&crc.to_le_bytes());
}

/// DUMP payloads with our bytes as they are: Redis compresses strings over 20 bytes (LZF)
/// by default, which would hide the state of a sliding log.
const UNCOMPRESSED: &[&str] = &["--rdbcompression", "no"];

/// Where our state starts in an uncompressed DUMP payload, and its length:
/// `[7][0x81][8-byte module id][5 = string][RDB length][state...][0 = EOF][2-byte version][CRC]`.
fn state_span(payload: &[u8]) -> Option<(usize, usize)> {
    if payload.len() < 22 || payload[0] != 7 || payload[1] != 0x81 || payload[10] != 5 {
        return None;
    }
    let at = 11;
    let (len, header) = match payload[at] >> 6 {
        0 => (usize::from(payload[at] & 0x3f), 1),
        1 => (
            usize::from(payload[at] & 0x3f) << 8 | usize::from(payload[at + 1]),
            2,
        ),
        _ if payload[at] == 0x80 => (
            u32::from_be_bytes(payload[at + 1..at + 5].try_into().unwrap()) as usize,
            5,
        ),
        _ => return None,
    };
    Some((at + header, len))
}

/// One limiter of every kind, with some history: every algorithm through the shared
/// traffic, and more CL.THROTTLE keys. Returns the keys.
fn one_of_every_kind(con: &mut redis::Connection) -> Vec<String> {
    let mut all = keys("fuzz", 8);
    mixed_traffic(con, &all);
    for (index, quantity) in [1, 4].iter().enumerate() {
        let key = format!("fuzz:gcra:{index}");
        let _: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg(&key)
            .arg(5)
            .arg(10)
            .arg(3600)
            .arg(quantity)
            .query(con)
            .unwrap();
        all.push(key);
    }
    all
}

/// The command and peek to run on a restored key, by the state's kind byte, with the limit
/// they pass (field 5 of an RL reply, field 2 of CL.THROTTLE's).
fn calls_for_kind(kind: u8) -> Vec<(Vec<&'static str>, i64)> {
    let rl = |command: &'static str, algorithm: &'static str, args: [&'static str; 2]| {
        vec![
            (vec![command, "_k", args[0], args[1]], 10),
            (vec!["RL.PEEK", "_k", algorithm, args[0], args[1]], 10),
        ]
    };
    match kind {
        0 => rl("RL.TOKENBUCKET", "TOKENBUCKET", ["10", "0.5"]),
        1 => rl("RL.SLIDING", "SLIDING", ["10", "60"]),
        2 => rl("RL.FIXED", "FIXED", ["10", "60"]),
        3 => rl("RL.SLIDINGLOG", "SLIDINGLOG", ["10", "60"]),
        4 => vec![
            (vec!["CL.THROTTLE", "_k", "5", "10", "60"], 6),
            (vec!["CL.THROTTLE", "_k", "5", "10", "60", "0"], 6),
        ],
        other => panic!("a value of unknown kind {other} was restored"),
    }
}

/// DUMP every kind, flip one or two bytes of the module value, RESTORE with checksum
/// validation off. Refusals are fine; the server must survive every attempt, and whatever
/// loads must be canonical (DUMP gives the same module bytes back) and usable.
#[test]
fn corrupt_restore_payloads_never_hurt_the_server() {
    let mut server = Server::start(UNCOMPRESSED);
    let mut con = server.conn();
    let originals: Vec<Vec<u8>> = one_of_every_kind(&mut con)
        .iter()
        .map(|key| dump(&mut con, key).unwrap())
        .collect();
    for payload in &originals {
        let body = payload.len() - 8;
        assert_eq!(
            crc64(&payload[..body]).to_le_bytes(),
            payload[body..],
            "the CRC-64 here is Redis's"
        );
    }
    run(&mut con, "DEBUG SET-SKIP-CHECKSUM-VALIDATION 1");

    let mut rng = Rng::new(seed());
    let (budget, max_attempts) = if long_run() {
        (Duration::from_secs(60), usize::MAX)
    } else {
        (Duration::from_secs(3), 3_000)
    };
    let started = Instant::now();
    let (mut attempts, mut loaded) = (0usize, 0usize);
    while attempts < max_attempts && started.elapsed() < budget {
        attempts += 1;
        let original = &originals[rng.below(originals.len())];
        let mut payload = original.clone();
        // Inside the module value: the module id (with the encver), our opcodes and state,
        // and the EOF opcode; not the RDB version and CRC trailer.
        let value_end = payload.len() - 10;
        for _ in 0..1 + rng.below(2) {
            let at = 1 + rng.below(value_end - 1);
            payload[at] ^= 1 + rng.below(255) as u8;
        }
        let restored = redis::cmd("RESTORE")
            .arg("_k")
            .arg(0)
            .arg(&payload)
            .arg("REPLACE")
            .query::<()>(&mut con);
        let alive = redis::cmd("PING").query::<String>(&mut con);
        assert!(
            alive.is_ok() && server.is_alive(),
            "the server died on attempt {attempts} with payload {payload:?}"
        );
        if restored.is_err() {
            continue; // any refusal is fine
        }
        loaded += 1;
        let stored = dump(&mut con, "_k").unwrap();
        let (start, len) = state_span(&stored).unwrap();
        if let Some((from, from_len)) = state_span(&payload) {
            assert_eq!(
                &stored[start..start + len],
                &payload[from..from + from_len],
                "a restored value must DUMP to the bytes it was restored from"
            );
        }
        for (args, limit) in calls_for_kind(stored[start + 1]) {
            let mut command = redis::cmd(args[0]);
            command.arg(&args[1..]);
            let reply: Vec<i64> = command.query(&mut con).unwrap_or_else(|error| {
                panic!("{args:?} on restored {payload:?}: {}", error_text(&error))
            });
            assert_eq!(reply.len(), 5, "{args:?}: {reply:?}");
            if args[0] == "CL.THROTTLE" {
                // [limited, limit, remaining, retry_after_s, reset_after_s]
                assert!(matches!(reply[0], 0 | 1) && reply[1] == limit, "{reply:?}");
                assert!((0..=limit).contains(&reply[2]) && reply[3] >= -1 && reply[4] >= 0);
            } else {
                // [allowed, remaining, retry_after_ms, reset_after_ms, limit]
                assert!(matches!(reply[0], 0 | 1) && reply[4] == limit, "{reply:?}");
                assert!((0..=limit).contains(&reply[1]) && reply[2] >= -1 && reply[3] >= 0);
            }
        }
    }
    println!(
        "RESTORE fuzz: {attempts} attempts in {:.1?}, {loaded} loaded",
        started.elapsed()
    );
    assert!(attempts >= 200, "only {attempts} attempts");
    assert!(server.is_alive());
}

/// A newer encver in the module id, and our own version byte changed, are refused for
/// every kind, with a log line, and the server stays up.
#[test]
fn forged_encoding_versions_are_refused_for_every_kind() {
    let mut server = Server::start(UNCOMPRESSED);
    let mut con = server.conn();
    let keys = one_of_every_kind(&mut con);
    let mut kinds_seen = Vec::new();
    for key in &keys {
        let payload = dump(&mut con, key).unwrap();
        let (start, _) = state_span(&payload).unwrap();
        assert_eq!(payload[start], 1, "encoding version 1");
        kinds_seen.push(payload[start + 1]);

        // The module id is big-endian: its low 10 bits (the encver) are the last byte and
        // the two low bits of the one before.
        for encver in [2u16, 1023] {
            let mut forged = payload.clone();
            forged[8] = (forged[8] & !0x03) | (encver >> 8) as u8;
            forged[9] = encver as u8;
            reseal(&mut forged);
            let message = expect_error(&mut con, &[b"RESTORE", b"t", b"0", &forged]);
            assert!(message.contains("Bad data format"), "{key}: {message}");
            assert!(
                server
                    .log()
                    .contains(&format!("refusing a value with encoding version {encver}")),
                "{key}: no log line for encver {encver}"
            );
        }
        for version in [0u8, 2, 255] {
            let mut forged = payload.clone();
            forged[start] = version;
            reseal(&mut forged);
            let message = expect_error(&mut con, &[b"RESTORE", b"t", b"0", &forged]);
            assert!(message.contains("Bad data format"), "{key}: {message}");
            assert!(
                server.log().contains(&format!(
                    "refusing a stored limiter: encoding version {version} "
                )),
                "{key}: no log line for version byte {version}"
            );
        }
        // The untouched payload, resealed, still loads: the forgeries failed for their bytes.
        let mut control = payload.clone();
        reseal(&mut control);
        assert_eq!(control, payload);
    }
    kinds_seen.sort_unstable();
    kinds_seen.dedup();
    assert_eq!(kinds_seen, [0, 1, 2, 3, 4], "every kind was forged");
    assert!(server.is_alive());
    let exists: i64 = redis::cmd("EXISTS").arg("t").query(&mut con).unwrap();
    assert_eq!(exists, 0);
}

/// Every numeric argument at its extremes, and malformed text.
fn bad_numbers() -> Vec<Vec<u8>> {
    let mut values: Vec<Vec<u8>> = [
        "0",
        "-1",
        "-0",
        "9223372036854775808",
        "18446744073709551616",
        "1e308",
        "1e400",
        "1e-400",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "+inf",
        "infinity",
        "",
        " 5",
        "5 ",
        "5abc",
        "0x10",
        ".",
        "1,5",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    values.push(vec![b'9'; 1024 * 1024]);
    values.push(b"1\x002".to_vec());
    values
}

/// A command's numeric arguments: good values, their names, and the extreme values that are
/// valid for one of them (so not expected to be refused).
struct Numeric {
    algorithm: Option<&'static str>,
    command: &'static str,
    good: &'static [&'static str],
    names: &'static [&'static str],
    valid: fn(usize, &[u8]) -> bool,
}

/// A cost of 2^63 is valid for every RL algorithm: always denied, retry_after -1.
fn huge_cost(position: usize, value: &[u8]) -> bool {
    position == 2 && value == b"9223372036854775808"
}

// The good values give limiters that live far longer than the test (slow refill, day-long
// windows), so "no state changed" cannot be confused with a key expiring on its own.
const RL_COMMANDS: [Numeric; 4] = [
    Numeric {
        algorithm: Some("TOKENBUCKET"),
        command: "RL.TOKENBUCKET",
        good: &["10", "0.001", "1"],
        names: &["capacity", "rate", "cost"],
        valid: huge_cost,
    },
    Numeric {
        algorithm: Some("SLIDING"),
        command: "RL.SLIDING",
        good: &["10", "86400", "1"],
        names: &["limit", "window", "cost"],
        valid: huge_cost,
    },
    Numeric {
        algorithm: Some("FIXED"),
        command: "RL.FIXED",
        good: &["10", "86400", "1"],
        names: &["limit", "window", "cost"],
        valid: huge_cost,
    },
    Numeric {
        algorithm: Some("SLIDINGLOG"),
        command: "RL.SLIDINGLOG",
        good: &["10", "86400", "1"],
        names: &["limit", "window", "cost"],
        valid: huge_cost,
    },
];

/// redis-cell's syntax: a burst of 0, and a quantity of 0 (peek) or below (give back), are
/// valid.
const THROTTLE: Numeric = Numeric {
    algorithm: None,
    command: "CL.THROTTLE",
    good: &["5", "10", "86400", "1"],
    names: &["max_burst", "count", "period", "quantity"],
    valid: |position, value| match position {
        0 => value == b"0" || value == b"-0",
        3 => value == b"0" || value == b"-0" || value == b"-1",
        _ => false,
    },
};

/// I: every numeric argument of every command (the four RL algorithms, CL.THROTTLE, and
/// RL.PEEK / RL.REFUND for each algorithm) at its extremes, on a key holding that algorithm
/// and on a missing key, with a replica attached: a clear error naming the argument, no
/// write, no key created, nothing propagated, and a healthy replica.
#[test]
fn bad_numbers_are_refused_by_every_command_without_side_effects() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();

    // (command line prefix before the numbers, numeric spec, existing key)
    let mut cases: Vec<(Vec<&str>, &Numeric, String)> = Vec::new();
    for spec in RL_COMMANDS.iter().chain([&THROTTLE]) {
        let key = format!("existing:{}", spec.command);
        let mut command = redis::cmd(spec.command);
        command.arg(&key).arg(spec.good);
        let _: Vec<i64> = command.query(&mut con).unwrap();
        cases.push((vec![spec.command], spec, key.clone()));
        if let Some(algorithm) = spec.algorithm {
            cases.push((vec!["RL.PEEK", algorithm], spec, key.clone()));
            cases.push((vec!["RL.REFUND", algorithm], spec, key));
        }
    }
    assert_eq!(wait_replicas(&mut con), 1);
    let existing: Vec<String> = cases.iter().map(|(_, _, key)| key.clone()).collect();
    let before: Vec<Option<Vec<u8>>> = existing.iter().map(|k| dump(&mut con, k)).collect();
    let marks = write_marks(&mut con);

    let started = Instant::now();
    let mut refused = 0;
    for (prefix, spec, existing_key) in &cases {
        for key in [existing_key.as_str(), "missing"] {
            for bad in bad_numbers() {
                for position in 0..spec.good.len() {
                    if (spec.valid)(position, &bad) {
                        continue;
                    }
                    let mut args: Vec<&[u8]> = vec![prefix[0].as_bytes(), key.as_bytes()];
                    args.extend(prefix[1..].iter().map(|p| p.as_bytes()));
                    for (index, good) in spec.good.iter().enumerate() {
                        args.push(if index == position {
                            &bad
                        } else {
                            good.as_bytes()
                        });
                    }
                    let message = expect_refusal(&mut con, &args);
                    let shown = String::from_utf8_lossy(&bad[..bad.len().min(20)]).to_string();
                    assert!(
                        message.starts_with("ERR "),
                        "{prefix:?} {shown:?}: {message}"
                    );
                    let name = spec.names[position];
                    assert!(
                        message.contains(name),
                        "{prefix:?} with {name} = {shown:?}: the error should name {name}: \
                         {message}"
                    );
                    assert!(message.len() < 200, "{message}");
                    refused += 1;
                }
            }
        }
    }
    println!("{refused} bad calls refused in {:.1?}", started.elapsed());
    assert!(refused > 1_500, "{refused}");

    let after: Vec<Option<Vec<u8>>> = existing.iter().map(|k| dump(&mut con, k)).collect();
    assert_eq!(after, before, "no state changed");
    let exists: i64 = redis::cmd("EXISTS").arg("missing").query(&mut con).unwrap();
    assert_eq!(exists, 0, "no key created");
    assert_eq!(
        write_marks(&mut con),
        marks,
        "nothing written or propagated"
    );
    let mut replica_con = replica.conn();
    assert_eq!(
        info_int(&mut replica_con, "stats", "unexpected_error_replies"),
        0
    );
    for (key, state) in existing.iter().zip(&before) {
        assert_eq!(
            &dump(&mut replica_con, key),
            state,
            "replica holds {key} as before"
        );
    }
}

/// Regression, found by the `decode` fuzz target (reproducer: `fuzz/regressions/decode/`): a
/// refund on a token bucket whose empty instant is ahead of the clock (the clock stepped
/// back, as after a failover to a node whose clock is behind), with a different rate, used
/// to rescale that gap by the ratio of the intervals and store an empty instant beyond what
/// the decoder accepts, so the replica refused the effect and the RDB no longer loaded.
#[test]
fn a_refund_after_the_clock_steps_back_and_the_rate_changes_stays_loadable() {
    let (primary, mut replica) = primary_and_replica();
    let mut con = primary.conn();
    // Take every token of a bucket refilled at 1e9/s: empty now, full (and expired) in 1 s.
    let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg("k")
        .arg(1_000_000_000)
        .arg(1_000_000_000)
        .arg(1_000_000_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply[..2], [1, 0]);
    // The primary's clock steps back by 1 s; then a refund at another rate (capacity 3, so
    // the refunded bucket is not full and its key does not expire at once: the test hook
    // shifts only the module's clock, not Redis's expiry clock).
    run(&mut con, "CONFIG SET ratelimit.test-clock-offset-ms -1000");
    let refund: Vec<i64> = redis::cmd("RL.REFUND")
        .arg("k")
        .arg("TOKENBUCKET")
        .arg(3)
        .arg("0.001")
        .query(&mut con)
        .unwrap();
    println!("refund reply {refund:?}");
    let payload = dump(&mut con, "k").expect("the key exists");

    assert!(
        replica.is_alive() && wait_replicas(&mut con) == 1,
        "the replica refused the effect; its log:\n{}",
        replica.log()
    );
    assert_eq!(dump(&mut replica.conn(), "k"), Some(payload.clone()));
    let restored = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(&payload)
        .query::<()>(&mut con);
    assert!(
        restored.is_ok(),
        "RESTORE of the module's own DUMP: {restored:?}"
    );
    let reloaded = redis::cmd("DEBUG").arg("RELOAD").query::<()>(&mut con);
    assert!(reloaded.is_ok(), "DEBUG RELOAD: {reloaded:?}");
    assert_eq!(dump(&mut con, "k"), Some(payload));
}
