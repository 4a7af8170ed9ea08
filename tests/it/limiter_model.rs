//! Limiters of every algorithm whose replies a test can predict exactly, and the decoding of
//! their stored state from `DUMP`, for the cluster and failover tests.
//!
//! Every limiter here refills or rolls over far slower than a test runs (one token per
//! 1000 s, windows of about a day placed so that no boundary falls within the next ten
//! minutes), so a fresh limiter admits a call iff the units admitted so far plus its cost
//! fit in the limit, and `remaining` is the limit minus the units admitted.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::ConnectionLike;

/// Whether the long variant of the suite runs (`make test-long` sets `RL_TEST_LONG=1`).
pub fn long_run() -> bool {
    std::env::var_os("RL_TEST_LONG").is_some_and(|value| !value.is_empty() && value != "0")
}

/// `short` normally, `long` under `RL_TEST_LONG`.
pub fn scaled(short: usize, long: usize) -> usize {
    if long_run() { long } else { short }
}

/// The limiter commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    TokenBucket,
    Sliding,
    Fixed,
    SlidingLog,
    Throttle,
}

impl Algorithm {
    /// Every algorithm, in the order of their kind bytes.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::TokenBucket,
        Algorithm::Sliding,
        Algorithm::Fixed,
        Algorithm::SlidingLog,
        Algorithm::Throttle,
    ];

    /// The kind byte of keys this algorithm writes (see `core/src/kinds.rs`).
    pub fn kind_byte(self) -> u8 {
        self as u8
    }

    fn command(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "RL.TOKENBUCKET",
            Algorithm::Sliding => "RL.SLIDING",
            Algorithm::Fixed => "RL.FIXED",
            Algorithm::SlidingLog => "RL.SLIDINGLOG",
            Algorithm::Throttle => "CL.THROTTLE",
        }
    }

    /// The ALGORITHM name of `RL.PEEK` / `RL.REFUND` (CL.THROTTLE keys have none).
    pub fn peek_name(self) -> Option<&'static str> {
        match self {
            Algorithm::TokenBucket => Some("TOKENBUCKET"),
            Algorithm::Sliding => Some("SLIDING"),
            Algorithm::Fixed => Some("FIXED"),
            Algorithm::SlidingLog => Some("SLIDINGLOG"),
            Algorithm::Throttle => None,
        }
    }
}

/// A window length in seconds, about a day, whose next epoch-aligned boundary is at least
/// ten minutes away, so windows never roll over while a test runs.
pub fn window_secs() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    const MARGIN: u64 = 600;
    [86_400, 90_000, 97_200, 100_800]
        .into_iter()
        .find(|window| window - now % window >= MARGIN)
        .expect("one of the candidate windows has no boundary within ten minutes")
}

/// One reply, whatever the command: admitted or not, units left, the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    pub remaining: i64,
    pub limit: i64,
}

/// A limiter on one key, with the units admitted on it so far.
#[derive(Clone, Debug)]
pub struct Limiter {
    pub key: String,
    pub algorithm: Algorithm,
    pub limit: u64,
    window: u64,
    /// Units admitted so far (what the model expects the server to hold).
    pub used: u64,
}

impl Limiter {
    pub fn new(key: impl Into<String>, algorithm: Algorithm, limit: u64) -> Limiter {
        assert!(limit >= 1);
        Limiter {
            key: key.into(),
            algorithm,
            limit,
            window: window_secs(),
            used: 0,
        }
    }

    /// The arguments after the key, without the cost.
    fn params(&self) -> Vec<String> {
        match self.algorithm {
            Algorithm::TokenBucket => vec![self.limit.to_string(), "0.001".into()],
            Algorithm::Sliding | Algorithm::Fixed | Algorithm::SlidingLog => {
                vec![self.limit.to_string(), self.window.to_string()]
            }
            // max_burst + 1 = limit; one unit per 1000 s.
            Algorithm::Throttle => vec![(self.limit - 1).to_string(), "1".into(), "1000".into()],
        }
    }

    /// The command that asks for `cost` units.
    pub fn command(&self, cost: u64) -> redis::Cmd {
        let mut cmd = redis::cmd(self.algorithm.command());
        cmd.arg(&self.key).arg(self.params()).arg(cost);
        cmd
    }

    /// `RL.PEEK` for `cost` units (None for CL.THROTTLE, which has no peek).
    pub fn peek_command(&self, cost: u64) -> Option<redis::Cmd> {
        let name = self.algorithm.peek_name()?;
        let mut cmd = redis::cmd("RL.PEEK");
        cmd.arg(&self.key).arg(name).arg(self.params()).arg(cost);
        Some(cmd)
    }

    /// Parses a reply of [`Self::command`] or [`Self::peek_command`].
    pub fn outcome(&self, reply: &[i64]) -> Outcome {
        assert_eq!(reply.len(), 5, "{}: {reply:?}", self.key);
        match self.algorithm {
            // [limited, limit, remaining, retry_after_s, reset_after_s]
            Algorithm::Throttle => Outcome {
                allowed: reply[0] == 0,
                remaining: reply[2],
                limit: reply[1],
            },
            // [allowed, remaining, retry_after_ms, reset_after_ms, limit]
            _ => Outcome {
                allowed: reply[0] == 1,
                remaining: reply[1],
                limit: reply[4],
            },
        }
    }

    /// Sends a call of `cost` units and returns its outcome, without checking it.
    pub fn call(&self, con: &mut dyn ConnectionLike, cost: u64) -> Outcome {
        let reply: Vec<i64> = self
            .command(cost)
            .query(con)
            .unwrap_or_else(|error| panic!("{} {}: {error}", self.algorithm.command(), self.key));
        self.outcome(&reply)
    }

    /// What a call of `cost` units must get now, if the model's count is right.
    pub fn expected(&self, cost: u64) -> Outcome {
        let allowed = self.used + cost <= self.limit;
        let used = if allowed { self.used + cost } else { self.used };
        Outcome {
            allowed,
            remaining: (self.limit - used) as i64,
            limit: self.limit as i64,
        }
    }

    /// Sends a call of `cost` units, asserts the exact reply, and counts what it admitted.
    pub fn call_checked(&mut self, con: &mut dyn ConnectionLike, cost: u64) -> bool {
        let expected = self.expected(cost);
        let got = self.call(con, cost);
        assert_eq!(
            got,
            expected,
            "{} {} cost {cost} with {} of {} used",
            self.algorithm.command(),
            self.key,
            self.used,
            self.limit
        );
        if got.allowed {
            self.used += cost;
        }
        got.allowed
    }
}

/// `count` limiters per algorithm, keys `prefix:<algorithm>:<i>`, limits 5 to 12.
pub fn limiters(prefix: &str, count: usize) -> Vec<Limiter> {
    let mut all = Vec::new();
    for i in 0..count {
        for algorithm in Algorithm::ALL {
            let key = format!("{prefix}:{algorithm:?}:{i}");
            all.push(Limiter::new(key, algorithm, 5 + (i as u64 % 8)));
        }
    }
    all
}

/// Admitted calls of 1, 2 and 1 units, then a call asking one unit more than is left and
/// one asking more than the limit (both denied); every reply checked. A limiter of limit 5
/// or more ends partly used: 4 units used, at least 1 left.
pub fn partly_use(con: &mut dyn ConnectionLike, limiter: &mut Limiter) {
    for cost in [1, 2, 1] {
        assert!(limiter.call_checked(con, cost), "{}", limiter.key);
    }
    let left = limiter.limit - limiter.used;
    assert!(!limiter.call_checked(con, left + 1), "{}", limiter.key);
    assert!(
        !limiter.call_checked(con, limiter.limit + 1),
        "{}",
        limiter.key
    );
}

/// What a `DUMP` payload holds, decoded. Layout: `[7][0x81][8-byte module id][5 = string
/// opcode][RDB string: length, state][0 = EOF][2-byte RDB version][8-byte CRC]`; the state is
/// `[version 1][kind][fields, little-endian]` (`wire/src/codec.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredState {
    pub kind: u8,
    /// The instant the state is anchored at: the empty instant of a token bucket (ns), the
    /// window start of a fixed or sliding window (µs), the `as_of` of a sliding log (µs), the
    /// TAT of a CL.THROTTLE limiter (ns).
    pub instant: i64,
    /// A sliding log's entries (µs); empty for other kinds.
    pub entries: Vec<i64>,
    /// The token bucket's refill interval (ns); the window counts otherwise.
    pub other: Vec<u64>,
}

/// An RDB length: (value, bytes it took).
fn rdb_length(bytes: &[u8]) -> (usize, usize) {
    match bytes[0] >> 6 {
        0 => (usize::from(bytes[0] & 0x3f), 1),
        1 => (usize::from(bytes[0] & 0x3f) << 8 | usize::from(bytes[1]), 2),
        _ => {
            assert_eq!(bytes[0], 0x80, "32-bit length expected: {bytes:?}");
            let length = u32::from_be_bytes(bytes[1..5].try_into().unwrap());
            (length as usize, 5)
        }
    }
}

/// An RDB string: (its bytes, the bytes it took). Redis stores strings longer than 20
/// bytes LZF-compressed (`0xC3`, compressed length, length, data) when that saves space.
fn rdb_string(bytes: &[u8]) -> (Vec<u8>, usize) {
    if bytes[0] == 0xC3 {
        let (compressed, a) = rdb_length(&bytes[1..]);
        let (length, b) = rdb_length(&bytes[1 + a..]);
        let start = 1 + a + b;
        let data = lzf_decompress(&bytes[start..start + compressed], length);
        (data, start + compressed)
    } else {
        let (length, header) = rdb_length(bytes);
        (bytes[header..header + length].to_vec(), header + length)
    }
}

/// LZF decompression (liblzf's format, as Redis writes it).
fn lzf_decompress(input: &[u8], length: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(length);
    let mut at = 0;
    while at < input.len() {
        let control = usize::from(input[at]);
        at += 1;
        if control < 32 {
            out.extend_from_slice(&input[at..at + control + 1]);
            at += control + 1;
        } else {
            let mut run = control >> 5;
            if run == 7 {
                run += usize::from(input[at]);
                at += 1;
            }
            let back = ((control & 0x1f) << 8) + usize::from(input[at]) + 1;
            at += 1;
            let from = out.len() - back;
            for i in 0..run + 2 {
                out.push(out[from + i]);
            }
        }
    }
    assert_eq!(out.len(), length, "LZF output length");
    out
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn u32_at(bytes: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()))
}

/// Decodes a limiter's `DUMP` payload (panics on anything else).
pub fn decode_dump(payload: &[u8]) -> StoredState {
    assert_eq!(payload[..2], [7, 0x81], "a module value: {payload:?}");
    assert_eq!(payload[10], 5, "a string opcode: {payload:?}");
    let (state, taken) = rdb_string(&payload[11..]);
    let end = 11 + taken;
    assert_eq!(payload[end], 0, "EOF opcode after the state");
    assert_eq!(payload.len(), end + 1 + 10, "version and CRC");
    assert_eq!(state[0], 1, "encoding version 1");
    let kind = state[1];
    let fields = &state[2..];
    let instant = i64_at(fields, 0);
    let (entries, other) = match kind {
        0 => {
            assert_eq!(fields.len(), 16);
            (
                vec![],
                vec![u64::from_le_bytes(fields[8..16].try_into().unwrap())],
            )
        }
        1 => {
            assert_eq!(fields.len(), 16);
            (vec![], vec![u32_at(fields, 8), u32_at(fields, 12)])
        }
        2 => {
            assert_eq!(fields.len(), 12);
            (vec![], vec![u32_at(fields, 8)])
        }
        3 => {
            let count = u32_at(fields, 8) as usize;
            assert_eq!(fields.len(), 12 + 8 * count);
            let entries = (0..count).map(|i| i64_at(fields, 12 + 8 * i)).collect();
            (entries, vec![])
        }
        4 => {
            assert_eq!(fields.len(), 8);
            (vec![], vec![])
        }
        other => panic!("unknown kind {other}"),
    };
    StoredState {
        kind,
        instant,
        entries,
        other,
    }
}
