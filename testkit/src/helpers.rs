//! Small helpers shared by the integration tests.

use redis::{Connection, RedisError, RedisResult};

use crate::server::{info_field, info_int};

/// The words of a command line: `words("2 a b FIXED 5 60")`, for readable arguments.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Runs a command given as its words (`run(con, "DEBUG SET-ACTIVE-EXPIRE 0")`), whatever it
/// replies; an error reply fails the test, naming the command.
pub fn run(con: &mut Connection, line: &str) {
    let words = words(line);
    let Some((name, args)) = words.split_first() else {
        panic!("an empty command line")
    };
    let mut command = redis::cmd(name);
    for arg in args {
        command.arg(*arg);
    }
    let _: () = command
        .query(con)
        .unwrap_or_else(|error| panic!("{line}: {error}"));
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

/// Moves the module's clock `offset_ms` from the server's (`ratelimit.test-clock-offset-ms`,
/// only in builds with the `test-hooks` feature, which the integration tests load): the fake
/// clock for a test that needs time to pass for the limiter without waiting it out. Redis's
/// own clock, that of key expiry, does not move.
pub fn set_module_clock_offset_ms(con: &mut Connection, offset_ms: i64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("ratelimit.test-clock-offset-ms")
        .arg(offset_ms)
        .query(con)
        .expect("CONFIG SET ratelimit.test-clock-offset-ms (a module built with test-hooks)");
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

/// How many times each command ran on a server, by name (`INFO commandstats`; `rl.fixed`,
/// `hset`, ...), the `INFO` that reads them included.
pub fn commandstats(con: &mut Connection) -> std::collections::BTreeMap<String, u64> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// The connections subscribed to some channel (`CLIENT LIST TYPE pubsub`): a test that cut
/// them waits for this count to come back before it relies on notifications again.
pub fn pubsub_clients(con: &mut Connection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(con)
        .expect("CLIENT LIST TYPE pubsub");
    list.lines().filter(|line| !line.trim().is_empty()).count()
}

/// Closes every connection subscribed to a channel (`CLIENT KILL TYPE pubsub`): the cut a
/// subscriber must recover from.
pub fn cut_subscriptions(con: &mut Connection) {
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(con)
        .expect("CLIENT KILL TYPE pubsub");
}

/// The calls of every one of `commands` so far, summed (`INFO commandstats`).
pub fn commandstat_calls_of(con: &mut Connection, commands: &[&str]) -> u64 {
    commands
        .iter()
        .map(|command| u64::try_from(commandstat_calls(con, command)).unwrap_or(0))
        .sum()
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

/// The commands whose key is argument 1 and whose arguments after it are remembered (parsed
/// once, reused while they repeat), or whose calls are at least harmless to repeat on another
/// key.
const SINGLE_KEY_COMMANDS: [&str; 9] = [
    "RL.TOKENBUCKET",
    "RL.SLIDING",
    "RL.FIXED",
    "RL.SLIDINGLOG",
    "RL.PEEK",
    "RL.REFUND",
    "CL.THROTTLE",
    "RL.ACQUIRE",
    "RL.RELEASE",
];

/// Calls that leave in the command's parsed-arguments memo exactly what `args` (a command
/// line) would be remembered as, if any of them succeeds: the same arguments on another key
/// for a single-key command, on other keys for `RL.REGIONAL`'s two; for `RL.MULTI`, the same limits and options after every key
/// count from 1 to 16, on other keys of the first key's hash tag (the call's own key count
/// first). Empty for a command line refused before its arguments are parsed.
pub fn memo_primers(args: &[&[u8]]) -> Vec<Vec<Vec<u8>>> {
    let Some((command, rest)) = args.split_first() else {
        return Vec::new();
    };
    let name = String::from_utf8_lossy(command).to_ascii_uppercase();
    if SINGLE_KEY_COMMANDS.contains(&name.as_str()) {
        let Some((key, after_key)) = rest.split_first() else {
            return Vec::new();
        };
        let mut primer = vec![command.to_vec(), [*key, b":memo-primer"].concat()];
        primer.extend(after_key.iter().map(|arg| arg.to_vec()));
        return vec![primer];
    }
    if name == "RL.REGIONAL" {
        // Both keys (the floor's and the lease's) replaced, in their own slots.
        let Some((keys, after_keys)) = rest.split_at_checked(2) else {
            return Vec::new();
        };
        let mut primer = vec![command.to_vec()];
        primer.extend(keys.iter().map(|key| [*key, b":memo-primer"].concat()));
        primer.extend(after_keys.iter().map(|arg| arg.to_vec()));
        return vec![primer];
    }
    if name != "RL.MULTI" {
        return Vec::new();
    }
    let Some(key_count) = rest
        .first()
        .and_then(|numkeys| std::str::from_utf8(numkeys).ok())
        .and_then(|numkeys| numkeys.parse::<usize>().ok())
        .filter(|count| (1..=16).contains(count))
    else {
        return Vec::new();
    };
    let Some(keys) = rest.get(1..=key_count) else {
        return Vec::new();
    };
    let limits = &rest[1 + key_count..];
    let first_key = String::from_utf8_lossy(keys[0]);
    let tag = match (first_key.find('{'), first_key.find('}')) {
        (Some(open), Some(close)) if open < close => &first_key[open..=close],
        _ => "",
    };
    std::iter::once(key_count)
        .chain((1..=16).filter(|&count| count != key_count))
        .map(|count| {
            let mut primer = vec![command.to_vec(), count.to_string().into_bytes()];
            primer.extend((0..count).map(|i| format!("{tag}memo-primer:{i}").into_bytes()));
            primer.extend(limits.iter().map(|arg| arg.to_vec()));
            primer
        })
        .collect()
}

/// Sends `args`, which must be refused, right after each call of [`memo_primers`] that
/// succeeds (so the command's memo holds exactly what it would remember of `args`): every
/// time the same error, and nothing written or propagated by the refused call. Returns the
/// error, or the plain refusal if no primer succeeds (the arguments never parse).
///
/// Run the cases once without primers too (as on a fresh server): both must refuse alike,
/// whatever was called before.
pub fn expect_error_primed(con: &mut Connection, args: &[&[u8]]) -> String {
    let mut error = None;
    for primer in memo_primers(args) {
        let mut command = redis::cmd(&String::from_utf8_lossy(&primer[0]));
        command.arg(&primer[1..]);
        if command.query::<redis::Value>(con).is_err() {
            continue;
        }
        let marks = write_marks(con);
        let message = expect_error(con, args);
        assert_eq!(
            write_marks(con),
            marks,
            "{:?} after a call sharing its remembered arguments wrote or propagated something",
            String::from_utf8_lossy(&args.join(&b' ')),
        );
        if let Some(first) = &error {
            assert_eq!(&message, first, "the same refusal after every primer");
        }
        error = Some(message);
    }
    error.unwrap_or_else(|| expect_error(con, args))
}

/// Sends `args`, which must be refused, as it comes (the memo holding whatever was called
/// before) and then through [`expect_error_primed`]: the same error both ways, which is
/// returned. Primers may leave keys of their own (`...memo-primer...`) behind.
pub fn expect_refusal(con: &mut Connection, args: &[&[u8]]) -> String {
    let plain = expect_error(con, args);
    let primed = expect_error_primed(con, args);
    assert_eq!(
        primed,
        plain,
        "{:?} is refused alike whatever was called before",
        String::from_utf8_lossy(&args.join(&b' ')),
    );
    plain
}
