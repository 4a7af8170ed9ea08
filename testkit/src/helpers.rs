//! Small helpers shared by the integration tests.

use redis::{Connection, RedisError, RedisResult};

use crate::server::{info_field, info_int};

/// The words of a command line: `words("2 a b FIXED 5 60")`, for readable arguments.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `RL.TOKENBUCKET key capacity rate [cost]` → the five reply integers.
pub fn token_bucket(
    con: &mut Connection,
    key: &str,
    capacity: u64,
    rate: &str,
    cost: u64,
) -> [i64; 5] {
    try_token_bucket(con, key, capacity, rate, cost).expect("RL.TOKENBUCKET")
}

/// `RL.TOKENBUCKET`, returning the error if the server sends one.
pub fn try_token_bucket(
    con: &mut Connection,
    key: &str,
    capacity: u64,
    rate: &str,
    cost: u64,
) -> RedisResult<[i64; 5]> {
    let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg(key)
        .arg(capacity)
        .arg(rate)
        .arg(cost)
        .query(con)?;
    Ok(reply.try_into().expect("five integers"))
}

/// A server error as it was sent: `CODE detail`.
pub fn error_text(error: &RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// Sends any command and returns the error text it gets (panics if it succeeds).
pub fn expect_error(con: &mut Connection, args: &[&[u8]]) -> String {
    let mut command = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for arg in &args[1..] {
        command.arg(*arg);
    }
    match command.query::<redis::Value>(con) {
        Err(error) => error_text(&error),
        Ok(value) => panic!(
            "{:?} succeeded: {value:?}",
            String::from_utf8_lossy(args[0])
        ),
    }
}

/// `DUMP key` (None if the key does not exist).
pub fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

/// `PEXPIRETIME key`: absolute expiry in Unix ms (-1 none, -2 missing).
pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// The exact stored state of some keys: (DUMP, PEXPIRETIME) of each.
pub fn snapshot(con: &mut Connection, keys: &[String]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|key| (dump(con, key), pexpiretime(con, key)))
        .collect()
}

/// The limiter commands with arguments `limit rate_or_window`, for traffic over every kind.
/// Refill is slow and windows are a day long so no key expires while a test runs (a fixed
/// window ends at midnight UTC at worst).
pub const LIMITER_COMMANDS: [(&str, &str); 4] = [
    ("RL.TOKENBUCKET", "0.01"),
    ("RL.SLIDING", "86400"),
    ("RL.FIXED", "86400"),
    ("RL.SLIDINGLOG", "86400"),
];

/// Calls on several keys with varied parameters, some admitted and some denied; key `i`
/// gets the algorithm `i mod 5` (the four `RL.*` ones and `CL.THROTTLE`, with a burst of
/// `limit - 1` and one unit per 600 s), so every kind is covered.
pub fn mixed_traffic(con: &mut Connection, keys: &[String]) {
    for (index, key) in keys.iter().enumerate() {
        let limit = 3 + index as u64;
        for cost in [1, 2, 1, 5, 1] {
            let mut command = match LIMITER_COMMANDS.get(index % 5) {
                Some((name, rate_or_window)) => {
                    let mut command = redis::cmd(name);
                    command.arg(key).arg(limit).arg(*rate_or_window);
                    command
                }
                None => {
                    let mut command = redis::cmd("CL.THROTTLE");
                    command.arg(key).arg(limit - 1).arg(1).arg(600);
                    command
                }
            };
            let _: Vec<i64> = command.arg(cost).query(con).expect("a limiter command");
        }
    }
}

/// Key names `prefix:0 .. prefix:n`.
pub fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

/// `WAIT 1 timeout`: returns how many replicas acknowledged.
pub fn wait_replicas(con: &mut Connection) -> i64 {
    redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(con)
        .expect("WAIT")
}

/// How many times `command` ran on a server (`INFO commandstats`; 0 if never).
pub fn commandstat_calls(con: &mut Connection, command: &str) -> i64 {
    info_field(con, "commandstats", &format!("cmdstat_{command}"))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|part| part.strip_prefix("calls=").and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// A reply of `RL.MULTI`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiReply {
    /// `[allowed or units, remaining, retry_after_ms, reset_after_ms, limit]` of the binding
    /// limit.
    pub fields: [i64; 5],
    /// The binding limit's index.
    pub binding: i64,
    /// Each limit's own five fields.
    pub per_limit: Vec<[i64; 5]>,
}

/// Sends `RL.MULTI` with `args` (everything after the command name).
pub fn try_multi(con: &mut Connection, args: &[&str]) -> RedisResult<MultiReply> {
    let reply: (i64, i64, i64, i64, i64, i64, Vec<Vec<i64>>) =
        redis::cmd("RL.MULTI").arg(args).query(con)?;
    let (first, remaining, retry, reset, limit, binding, per_limit) = reply;
    Ok(MultiReply {
        fields: [first, remaining, retry, reset, limit],
        binding,
        per_limit: per_limit
            .into_iter()
            .map(|fields| fields.try_into().expect("five integers per limit"))
            .collect(),
    })
}

/// `RL.MULTI` that must succeed.
pub fn multi(con: &mut Connection, args: &[&str]) -> MultiReply {
    try_multi(con, args).unwrap_or_else(|error| panic!("RL.MULTI {args:?}: {}", error_text(&error)))
}

/// What every propagated write moves: the replication offset, and the change counter that
/// drives RDB save points. Equal marks before and after some calls mean they wrote and
/// propagated nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMarks {
    /// `master_repl_offset`.
    pub repl_offset: i64,
    /// `rdb_changes_since_last_save`.
    pub changes: i64,
}

/// The server's [`WriteMarks`] now.
pub fn write_marks(con: &mut Connection) -> WriteMarks {
    WriteMarks {
        repl_offset: info_int(con, "replication", "master_repl_offset"),
        changes: info_int(con, "persistence", "rdb_changes_since_last_save"),
    }
}
