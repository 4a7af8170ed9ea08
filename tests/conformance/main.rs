//! Conformance of the Functions library (`functions/ratelimit.lua`) with the module.
//!
//! One server runs both, on a clock the test sets (`clock.rs`): the module's keys live in
//! database 0 and the library's, with the same names, in database 1. Every call of a random
//! trace goes to both at the same server instant; their replies (errors included, word for
//! word) and every touched key's `PTTL` and `PEXPIRETIME` must be equal. A failing trace is
//! shrunk to a short reproduction and printed with its instants; a difference that does not
//! recur when replayed (seen once on Redis 8.6.3, issue 35) is printed whole, with its seed
//! and both replies as first seen (one such cause, the server's active expiry while a trace's
//! clock stood past a key's expiry before stepping back, is switched off: `clock.rs`). `RL_CONFORMANCE_SEED=<n>`
//! replays one trace; `RL_TEST_LONG=1` runs ten times as many.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

mod clock;
mod hostile;
mod library;
mod trace;

use std::time::Instant;

use clock::{BASE_US, ClockedServer};
use redis_ratelimit_testkit::helpers::error_text;
use trace::{Step, long_trace, trace};

/// Traces per run and calls per trace: 40 × 250 = 10,000 calls to each backend.
const TRACES: u64 = 40;
const TRACE_LEN: usize = 250;

/// What one backend answered to a call, and the expiry of every key it touched.
#[derive(Debug, PartialEq)]
struct Observed {
    reply: Result<redis::Value, String>,
    expiries: Vec<(i64, i64)>,
}

fn send(con: &mut redis::Connection, line: &[String]) -> Result<redis::Value, String> {
    let mut command = redis::cmd(&line[0]);
    for arg in &line[1..] {
        command.arg(arg);
    }
    command
        .query::<redis::Value>(con)
        .map_err(|e| error_text(&e))
}

/// The module's keys: `PTTL` and `PEXPIRETIME` of each.
fn module_expiries(con: &mut redis::Connection, keys: &[String]) -> Vec<(i64, i64)> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("PTTL").arg(key).cmd("PEXPIRETIME").arg(key);
    }
    let times: Vec<i64> = pipe.query(con).expect("PTTL / PEXPIRETIME");
    times.chunks(2).map(|pair| (pair[0], pair[1])).collect()
}

/// For each key: PTTL, PEXPIRETIME and, for a limiter in a string, its field `x` (the last
/// of five; -1 when absent).
const LIBRARY_EXPIRIES: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  local x = -1
  if redis.call('TYPE', key).ok == 'string' then
    x = tonumber(string.match(redis.call('GET', key), ' (%d+)$')) or -1
  end
  out[i] = {redis.call('PTTL', key), redis.call('PEXPIRETIME', key), x}
end
return out";

/// The library's keys, as the module's expiries would read. A library key written back to
/// unused at the very millisecond `x` of its write carries its field `x`: the module's key
/// expires at `x` and lingers until that millisecond ends, but PEXPIREAT of `x` would delete
/// the library's at once, so it expires at `x + 1` and is gone, for the library, after `x`
/// (see `commit` in the library).
fn library_expiries(con: &mut redis::Connection, keys: &[String], now_ms: i64) -> Vec<(i64, i64)> {
    let rows: Vec<(i64, i64, i64)> = redis::cmd("EVAL")
        .arg(LIBRARY_EXPIRIES)
        .arg(keys.len())
        .arg(keys)
        .query(con)
        .expect("the library's expiries");
    rows.into_iter()
        .map(|(ttl, at, gone_at)| match gone_at {
            -1 => (ttl, at),
            x if now_ms > x => (-2, -2),
            x => (x - now_ms, x),
        })
        .collect()
}

/// Two connections to one clocked server: the module's database and the library's.
struct Backends {
    clocked: ClockedServer,
    module: redis::Connection,
    library: redis::Connection,
    /// How often the module's replies to in-flight regional calls said each why: the
    /// traces must reach the floor, the lease and each refusal, or their agreement says
    /// little.
    in_flight_whys: std::collections::BTreeMap<String, u64>,
}

impl Backends {
    /// `None` where the frozen clock cannot hold (said by [`ClockedServer::start`]).
    fn start() -> Option<Backends> {
        let clocked = ClockedServer::start(&[])?;
        let module = clocked.server.conn();
        let mut library = clocked.server.conn();
        let _: () = redis::cmd("SELECT")
            .arg(1)
            .query(&mut library)
            .expect("SELECT 1");
        Some(Backends {
            clocked,
            module,
            library,
            in_flight_whys: Default::default(),
        })
    }

    /// Replays `steps` from an empty server at [`BASE_US`]: the index of the first call the
    /// two backends disagree on, with what each observed.
    fn first_difference(&mut self, steps: &[Step]) -> Option<(usize, Observed, Observed)> {
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut self.module)
            .expect("FLUSHALL");
        let mut now_us = BASE_US;
        for (index, step) in steps.iter().enumerate() {
            now_us += step.step_us;
            self.clocked.set(now_us);
            let call = &step.call;
            let now_ms = now_us.div_euclid(1_000);
            let module = Observed {
                reply: send(&mut self.module, &call.module_args()),
                expiries: module_expiries(&mut self.module, &call.keys),
            };
            let library = Observed {
                reply: send(&mut self.library, &call.library_args()),
                expiries: library_expiries(&mut self.library, &call.keys, now_ms),
            };
            if module != library {
                return Some((index, module, library));
            }
            let in_flight = call.command == "RL.REGIONAL"
                && call
                    .args
                    .first()
                    .is_some_and(|name| name.eq_ignore_ascii_case("CONCURRENCY"));
            if let (true, Ok(redis::Value::Array(fields))) = (in_flight, &module.reply)
                && let Some(redis::Value::BulkString(why)) = fields.get(5)
            {
                let why = String::from_utf8_lossy(why).into_owned();
                *self.in_flight_whys.entry(why).or_default() += 1;
            }
        }
        None
    }
}

/// The shortest failing sub-trace found by removing chunks of steps (each removed step's
/// clock move is kept, folded into the next step, so the remaining calls keep their instants).
fn shrink(backends: &mut Backends, steps: &[Step]) -> Vec<Step> {
    let mut failing: Vec<Step> = steps.to_vec();
    let mut chunk = failing.len() / 2;
    let mut replays = 0;
    while chunk >= 1 && replays < 400 {
        let mut start = 0;
        let mut removed_any = false;
        while start < failing.len().saturating_sub(1) && replays < 400 {
            let end = (start + chunk).min(failing.len() - 1);
            if end <= start {
                break;
            }
            let moved: i64 = failing[start..end].iter().map(|s| s.step_us).sum();
            let mut candidate: Vec<Step> = failing[..start].to_vec();
            let mut next = failing[end].clone();
            next.step_us += moved;
            candidate.push(next);
            candidate.extend_from_slice(&failing[end + 1..]);
            replays += 1;
            match backends.first_difference(&candidate) {
                Some((index, _, _)) => {
                    candidate.truncate(index + 1);
                    failing = candidate;
                    removed_any = true;
                }
                None => start += chunk,
            }
        }
        if !removed_any {
            chunk /= 2;
        }
    }
    failing
}

/// A difference as first seen: the trace's seed, its calls up to the one that differed,
/// and what each backend answered to that call.
struct Difference<'a> {
    seed: u64,
    steps: &'a [Step],
    module: Observed,
    library: Observed,
}

/// The report of a difference: shrunk to a short reproduction when the shrunk trace still
/// differs; otherwise (a difference that did not recur when replayed: it depended on
/// timing the replay did not reproduce) the original trace, its seed and both replies as
/// first seen, and whether replaying the whole trace differed again.
fn describe(backends: &mut Backends, difference: Difference<'_>) -> String {
    let Difference {
        seed,
        steps,
        module,
        library,
    } = difference;
    let shrunk = shrink(backends, steps);
    if let Some((_, module, library)) = backends.first_difference(&shrunk) {
        return format!(
            "seed {seed}: the library differs from the module at call {} of the trace; \
             shrunk to {} calls (RL_CONFORMANCE_SEED={seed} replays it):\n{}",
            steps.len(),
            shrunk.len(),
            report(&shrunk, &module, &library)
        );
    }
    let replayed = match backends.first_difference(steps) {
        Some((index, _, _)) => format!("differed again, at call {}", index + 1),
        None => "agreed".to_string(),
    };
    format!(
        "seed {seed}: the library differed from the module at call {} of the trace, and the \
         difference did not recur when replayed: the shrunk trace ({} calls) agreed, and the \
         trace replayed whole {replayed} (RL_CONFORMANCE_SEED={seed} replays it). The trace \
         and both replies as first seen:\n{}",
        steps.len(),
        shrunk.len(),
        report(steps, &module, &library)
    )
}

fn report(steps: &[Step], module: &Observed, library: &Observed) -> String {
    let mut text = String::new();
    let mut now_us = BASE_US;
    for step in steps {
        now_us += step.step_us;
        text.push_str(&format!("  at {now_us} µs: {}\n", step.call));
    }
    text.push_str(&format!("  module:  {module:?}\n  library: {library:?}\n"));
    text
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("RL_CONFORMANCE_SEED") {
        return vec![seed.parse().expect("RL_CONFORMANCE_SEED is a number")];
    }
    let first = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let traces = if std::env::var_os("RL_TEST_LONG").is_some() {
        TRACES * 10
    } else {
        TRACES
    };
    (0..traces)
        .map(|i| first.wrapping_add(i.wrapping_mul(7919)))
        .collect()
}

#[test]
fn the_library_answers_every_call_exactly_as_the_module() {
    agree_on(&seeds(), "", |seed| trace(seed, TRACE_LEN, BASE_US));
}

/// Long sliding logs and many holders, which the random traces do not build (`long_trace`):
/// a trace per window, of 1,500 calls.
#[test]
fn long_logs_and_many_holders_agree_too() {
    let seeds: Vec<u64> = seeds().into_iter().take(3).collect();
    agree_on(&seeds, "long ", |seed| long_trace(seed, 1_500));
}

/// Replays the traces `make` draws from `seeds` on both backends; a difference is shrunk
/// and reported with its seed.
fn agree_on(seeds: &[u64], name: &str, make: impl Fn(u64) -> Vec<Step>) {
    let Some(mut backends) = Backends::start() else {
        return;
    };
    let started = Instant::now();
    println!(
        "conformance: {} {name}traces, seeds {}..{} (RL_CONFORMANCE_SEED=<seed> replays one)",
        seeds.len(),
        seeds[0],
        seeds[seeds.len() - 1]
    );
    let mut calls = 0;
    for &seed in seeds {
        let steps = make(seed);
        if let Some((index, module, library)) = backends.first_difference(&steps) {
            let difference = Difference {
                seed,
                steps: &steps[..=index],
                module,
                library,
            };
            panic!("{}", describe(&mut backends, difference));
        }
        calls += steps.len();
    }
    if !backends.in_flight_whys.is_empty() {
        println!(
            "conformance: in-flight regional replies by why: {:?}",
            backends.in_flight_whys
        );
        for why in ["floor", "lease", "lease_exhausted", "home_unreachable"] {
            assert!(
                backends.in_flight_whys.contains_key(why),
                "no in-flight regional call said {why}: {:?}",
                backends.in_flight_whys
            );
        }
    }
    println!(
        "conformance: {calls} {name}calls to each backend agreed (replies, PTTL, PEXPIRETIME) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// A difference that does not recur on replay (one the module and the library agree on when
/// replayed, reported as if it had differed once) is reported with its seed, its trace and
/// both replies as first seen, not lost in a panic of the shrinker.
#[test]
fn a_difference_that_vanishes_on_replay_is_reported_whole() {
    let Some(mut backends) = Backends::start() else {
        return;
    };
    let seed = 42;
    let steps: Vec<Step> = trace(seed, TRACE_LEN, BASE_US)
        .into_iter()
        .take(6)
        .collect();
    assert!(
        backends.first_difference(&steps).is_none(),
        "the first calls of trace {seed} agree"
    );
    let seen = |reply: &str| Observed {
        reply: Ok(redis::Value::SimpleString(reply.to_string())),
        expiries: vec![(1_000, 2_000)],
    };
    let difference = Difference {
        seed,
        steps: &steps,
        module: seen("as-the-module-answered"),
        library: seen("as-the-library-answered"),
    };
    let text = describe(&mut backends, difference);
    for wanted in [
        "seed 42:",
        "did not recur when replayed",
        "the trace replayed whole agreed",
        "RL_CONFORMANCE_SEED=42",
        "as-the-module-answered",
        "as-the-library-answered",
    ] {
        assert!(text.contains(wanted), "{wanted:?} missing from:\n{text}");
    }
    assert_eq!(
        text.lines()
            .filter(|line| line.starts_with("  at "))
            .count(),
        steps.len(),
        "every call of the trace is listed:\n{text}"
    );
}
