//! Random traces: calls of every command over a few keys per algorithm, with parameters
//! drawn from small pools (so that parameter changes on a key happen often), costs,
//! `PARTIAL [MIN m]`, `MAXWAIT`, peeks, refunds, `RL.MULTI`, in-flight limits, regional calls
//! and the leases they spend, bad input and clock steps forward and back.

use std::fmt;

use redis_ratelimit_core::kinds::Kind;

/// The families (key prefixes) of the kinds whose parameters are built apart: their short
/// names in core's kinds table. Every other kind's parameters are a window's.
const TOKEN: &str = "token";
const GCRA: &str = "gcra";
const CONCURRENCY: &str = "concurrency";

/// A small deterministic generator (SplitMix64), so that a seed replays a trace.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// One call: the module's command name and the library's function, the keys, and the
/// arguments after the keys. `multi` calls carry their key count (as both `RL.MULTI` and
/// `FCALL` do); single-key calls have exactly one key.
#[derive(Clone, Debug)]
pub struct Call {
    pub command: &'static str,
    pub function: &'static str,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

impl Call {
    /// The module's command line.
    pub fn module_args(&self) -> Vec<String> {
        let mut line = vec![self.command.to_string()];
        if self.command == "RL.MULTI" {
            line.push(self.keys.len().to_string());
        }
        line.extend(self.keys.iter().cloned());
        line.extend(self.args.iter().cloned());
        line
    }

    /// The library's command line.
    pub fn library_args(&self) -> Vec<String> {
        let mut line = vec![
            "FCALL".to_string(),
            self.function.to_string(),
            self.keys.len().to_string(),
        ];
        line.extend(self.keys.iter().cloned());
        line.extend(self.args.iter().cloned());
        line
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.module_args().join(" "))
    }
}

/// A call made after moving the clock by `step_us`.
#[derive(Clone, Debug)]
pub struct Step {
    pub step_us: i64,
    pub call: Call,
}

const KEYS_PER_ALGORITHM: u64 = 3;

fn key(rng: &mut Rng, family: &str) -> String {
    // Now and then a key of another algorithm: the kind-mismatch errors must agree too.
    let family = if rng.chance(3) {
        let families: Vec<&str> = Kind::ALL.iter().map(|kind| kind.short_name()).collect();
        rng.pick(&families).to_string()
    } else {
        family.to_string()
    };
    format!("{{t}}{family}:{}", rng.below(KEYS_PER_ALGORITHM))
}

fn token_bucket_params(rng: &mut Rng) -> Vec<String> {
    loop {
        let capacity = rng.pick(&["1", "2", "5", "10", "100", "3", "1000000", "86400"]);
        // Rates that divide 1e9 and rates that round (3, 0.3, 123.456789, 1.23e-2), slow
        // and fast.
        let rate = rng.pick(&[
            "0.5",
            "1",
            "2",
            "3",
            "7.5",
            "10",
            "1000",
            "0.001",
            "250000",
            "3e-2",
            "0.3",
            "123.456789",
            "1e6",
            "0.0000123e3",
            "999999937",
        ]);
        // Within the library's range: an empty bucket refills within 52 days (1000000
        // tokens at 0.5/s take 23).
        let refill_days =
            capacity.parse::<f64>().unwrap() / rate.parse::<f64>().unwrap() / 86_400.0;
        if refill_days < 50.0 {
            return vec![capacity.into(), rate.into()];
        }
    }
}

fn window_params(rng: &mut Rng) -> Vec<String> {
    // Large limits over long windows make counts × window exceed 2^53 (the library's exact
    // wide products); the sliding log's limit is at most 10000.
    let limit = rng.pick(&["1", "3", "10", "50", "7", "10000", "4294967295"]);
    let window = rng.pick(&[
        "0.5",
        "1",
        "2.5",
        "60",
        "0.0015",
        "3600",
        "0.25",
        "86400",
        "3155760000",
        "0.0010001",
    ]);
    vec![limit.into(), window.into()]
}

fn gcra_params(rng: &mut Rng) -> Vec<String> {
    let burst = rng.pick(&["0", "1", "5", "15", "100"]);
    let count = rng.pick(&["1", "10", "30", "7", "-3", "999", "3000000"]);
    let period = rng.pick(&["1", "60", "2", "-7", "3600"]);
    vec![burst.into(), count.into(), period.into()]
}

fn cost(rng: &mut Rng, args: &mut Vec<String>) -> u64 {
    if rng.chance(50) {
        return 1;
    }
    let cost = rng.pick(&["1", "2", "3", "7", "20", "5000"]);
    args.push(cost.into());
    cost.parse().unwrap_or(1)
}

fn partial(rng: &mut Rng, args: &mut Vec<String>, cost: u64) {
    args.push(rng.pick(&["PARTIAL", "partial"]).into());
    if rng.chance(40) {
        args.push("MIN".into());
        args.push((1 + rng.below(cost)).to_string());
    }
}

/// `params [cost] [options]` for one algorithm of a single-key call or a peek.
fn call_args(rng: &mut Rng, family: &str) -> Vec<String> {
    let mut args = match family {
        TOKEN => token_bucket_params(rng),
        GCRA => gcra_params(rng),
        _ => window_params(rng),
    };
    let cost = cost(rng, &mut args);
    if family == TOKEN && rng.chance(30) {
        args.push("MAXWAIT".into());
        args.push(rng.pick(&["0", "100", "1000", "5000", "250"]).into());
    } else if rng.chance(25) {
        partial(rng, &mut args, cost);
    }
    args
}

/// A kind with a command of its own other than the in-flight limit (whose calls are built
/// apart): its family (the table's short name, which names its keys) and its ALGORITHM
/// name, from core's kinds table, so a new kind is in every trace with no edit here.
fn algorithm_name(rng: &mut Rng) -> (&'static str, &'static str) {
    let names: Vec<(&'static str, &'static str)> = Kind::ALL
        .iter()
        .filter(|kind| **kind != Kind::Concurrency)
        .filter_map(|kind| Some((kind.short_name(), kind.command_name()?)))
        .collect();
    names[rng.below(names.len() as u64) as usize]
}

fn single(command: &'static str, function: &'static str, key: String, args: Vec<String>) -> Call {
    Call {
        command,
        function,
        keys: vec![key],
        args,
    }
}

/// Bad input the module refuses: the library must refuse it with the same text.
fn bad_call(rng: &mut Rng) -> Call {
    let key = key(rng, TOKEN);
    let cases: &[(&'static str, &'static str, &[&str])] = &[
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["0", "1"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["5abc", "1"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "inf"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "-0.5"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "2e9"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "1e-400"]),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "1/s"]),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["99999999999999999999", "1"],
        ),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "1", "0"]),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["10", "1", "5", "PARTIAL", "MIN", "6"],
        ),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10", "1", "PARTAIL"]),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["10", "1", "MAXWAIT", "86400001"],
        ),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["10", "1", "MAXWAIT", "5", "PARTIAL"],
        ),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["10", "1", "MAXWAIT", "-1"],
        ),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["10", "1", "PARTIAL", "MIN"],
        ),
        ("RL.TOKENBUCKET", "rl_tokenbucket", &["10"]),
        ("RL.SLIDING", "rl_sliding", &["10", "0.0001"]),
        ("RL.SLIDING", "rl_sliding", &["10", "1e10"]),
        ("RL.SLIDING", "rl_sliding", &["4294967296", "60"]),
        ("RL.FIXED", "rl_fixed", &["10", "nan"]),
        ("RL.FIXED", "rl_fixed", &["10", "60", "MAXWAIT", "5"]),
        ("RL.SLIDINGLOG", "rl_slidinglog", &["20000", "60"]),
        ("CL.THROTTLE", "cl_throttle", &["x", "30", "60"]),
        ("CL.THROTTLE", "cl_throttle", &["-1", "30", "60"]),
        ("CL.THROTTLE", "cl_throttle", &["1", "0", "60"]),
        ("CL.THROTTLE", "cl_throttle", &["1", "-1", "60"]),
        ("CL.THROTTLE", "cl_throttle", &["1", "30"]),
        ("RL.ACQUIRE", "rl_acquire", &["0", "h", "1000"]),
        ("RL.ACQUIRE", "rl_acquire", &["2", "", "1000"]),
        ("RL.ACQUIRE", "rl_acquire", &["1001", "h", "1000"]),
        ("RL.PEEK", "rl_peek", &["LEAKY", "1", "1"]),
        ("RL.REFUND", "rl_refund", &["CONCURRENCY", "1", "1"]),
        (
            "RL.REFUND",
            "rl_refund",
            &["TOKENBUCKET", "10", "1", "4", "PARTIAL"],
        ),
    ];
    let (command, function, args) = cases[rng.below(cases.len() as u64) as usize];
    single(
        command,
        function,
        key,
        args.iter().map(|a| a.to_string()).collect(),
    )
}

fn multi_call(rng: &mut Rng) -> Call {
    let most = if rng.chance(10) { 6 } else { 3 };
    let count = 1 + rng.below(most);
    let mut keys: Vec<String> = Vec::new();
    let mut args = Vec::new();
    let mut has_holder_limit = false;
    while (keys.len() as u64) < count {
        let (family, name) = if rng.chance(15) {
            (CONCURRENCY, "CONCURRENCY")
        } else {
            algorithm_name(rng)
        };
        let key = key(rng, family);
        if keys.contains(&key) && !rng.chance(5) {
            continue;
        }
        keys.push(key);
        args.push(name.to_string());
        match family {
            TOKEN => args.extend(token_bucket_params(rng)),
            GCRA => args.extend(gcra_params(rng)),
            CONCURRENCY => {
                has_holder_limit = true;
                args.push(rng.pick(&["1", "2", "3"]).into());
                args.push(rng.pick(&["50", "1000", "30000"]).into());
            }
            _ => args.extend(window_params(rng)),
        }
    }
    let mut cost = 1;
    if rng.chance(40) {
        cost = 1 + rng.below(4);
        args.push("COST".into());
        args.push(cost.to_string());
    }
    if rng.chance(25) {
        args.push("WEIGHTS".into());
        for _ in 0..count {
            args.push(rng.pick(&["1", "2", "3"]).into());
        }
    }
    if has_holder_limit && !rng.chance(3) || rng.chance(5) {
        args.push("HOLDER".into());
        args.push(format!("h{}", rng.below(4)));
    }
    if rng.chance(30) {
        partial(rng, &mut args, cost);
    }
    Call {
        command: "RL.MULTI",
        function: "rl_multi",
        keys,
        args,
    }
}

/// A region's lease key: now and then one of a limiter's (WRONGTYPE must agree too).
fn lease_key(rng: &mut Rng) -> String {
    if rng.chance(4) {
        return key(rng, TOKEN);
    }
    format!("{{t}}lease:{}", rng.below(2))
}

/// `RL.REGIONAL floor lease CONCURRENCY limit holder ttl_ms`: a region's in-flight call,
/// mostly on one small floor whose holders outgrow it (so calls reach the lease, some with
/// ttls past its end, and renew), now and then malformed.
fn regional_in_flight_call(rng: &mut Rng) -> Call {
    let floor = if rng.chance(90) {
        format!("{{t}}floor-{CONCURRENCY}")
    } else {
        key(rng, CONCURRENCY)
    };
    let lease = if rng.chance(2) {
        floor.clone()
    } else {
        lease_key(rng)
    };
    let mut args = vec![
        rng.pick(&["CONCURRENCY", "concurrency"]).to_string(),
        rng.pick(&["1", "2"]).to_string(),
        format!("h{}", rng.below(6)),
        rng.pick(&["50", "1000", "2500", "30000", "3600000"])
            .to_string(),
    ];
    match rng.below(100) {
        0..=2 => {
            args.pop();
        }
        3..=4 => args.push("1".into()),
        5 => args[2] = String::new(),
        6 => args[3] = "0".into(),
        _ => {}
    }
    Call {
        command: "RL.REGIONAL",
        function: "rl_regional",
        keys: vec![floor, lease],
        args,
    }
}

/// `RL.REGIONAL floor lease ALGORITHM <parameters> [cost]`, a floor of any algorithm but
/// in-flight limits (those: [`regional_in_flight_call`]; now and then refused: an in-flight
/// floor without a holder, an option after the cost, the same key twice).
fn regional_call(rng: &mut Rng) -> Call {
    let (family, name) = algorithm_name(rng);
    // Mostly a small floor of its own, soon spent, so that calls reach the lease; now and
    // then any key and parameters of the family.
    let small = rng.chance(75);
    let floor = if small && !rng.chance(5) {
        format!("{{t}}floor-{family}")
    } else {
        key(rng, family)
    };
    let lease = if rng.chance(2) {
        floor.clone()
    } else {
        lease_key(rng)
    };
    let mut args = vec![rng.pick(&[name, &name.to_lowercase()]).to_string()];
    if rng.chance(3) {
        args = vec!["CONCURRENCY".into(), "2".into(), "1000".into()];
    } else {
        args.extend(match (family, small) {
            (TOKEN, true) => vec![
                rng.pick(&["1", "2"]).into(),
                rng.pick(&["0.001", "0.5"]).into(),
            ],
            (GCRA, true) => vec![
                rng.pick(&["0", "1"]).into(),
                "1".into(),
                rng.pick(&["60", "3600"]).into(),
            ],
            (_, true) => vec![
                rng.pick(&["1", "2"]).into(),
                rng.pick(&["60", "3600", "1"]).into(),
            ],
            (TOKEN, false) => token_bucket_params(rng),
            (GCRA, false) => gcra_params(rng),
            _ => window_params(rng),
        });
        cost(rng, &mut args);
        if rng.chance(3) {
            args.push(rng.pick(&["PARTIAL", "MAXWAIT", "9"]).into());
        }
    }
    Call {
        command: "RL.REGIONAL",
        function: "rl_regional",
        keys: vec![floor, lease],
        args,
    }
}

/// `RL.REGIONLEASE key units expires_at_ms` at `now_us`: lease ends from the past to an
/// hour ahead (the past and now refused), units from 0 to the most a lease holds, and now
/// and then bad ones.
fn region_lease_call(rng: &mut Rng, now_us: i64) -> Call {
    let units = if rng.chance(80) {
        rng.pick(&["0", "1", "2", "3", "5", "20", "007", "1000000000000000"])
    } else {
        rng.pick(&["1000000000000001", "-1", "x", "inf", "99999999999999999999"])
    };
    let now_ms = now_us.div_euclid(1_000);
    let end = match rng.below(100) {
        0..=2 => "0".to_string(),
        3..=4 => "soon".to_string(),
        5 => "4611686018428".to_string(),
        6..=9 => (now_ms - rng.below(2_000) as i64).to_string(),
        10..=14 => (now_ms + 1).to_string(),
        15..=29 => (now_ms + 1 + rng.below(1_000) as i64).to_string(),
        30..=59 => (now_ms + 1 + rng.below(30_000) as i64).to_string(),
        _ => (now_ms + 1 + rng.below(3_600_000) as i64).to_string(),
    };
    single(
        "RL.REGIONLEASE",
        "rl_regionlease",
        lease_key(rng),
        vec![units.to_string(), end],
    )
}

/// A region's random call at `now_us` (the instant it will be made at).
pub fn random_call_at(rng: &mut Rng, now_us: i64) -> Call {
    match rng.below(100) {
        0..=34 => regional_call(rng),
        35..=54 => regional_in_flight_call(rng),
        // The in-flight floor's slots back, leased or not.
        55..=59 => single(
            "RL.RELEASE",
            "rl_release",
            format!("{{t}}floor-{CONCURRENCY}"),
            vec![format!("h{}", rng.below(6))],
        ),
        _ => region_lease_call(rng, now_us),
    }
}

/// One random call.
pub fn random_call(rng: &mut Rng) -> Call {
    match rng.below(100) {
        0..=17 => single(
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            key(rng, TOKEN),
            call_args(rng, TOKEN),
        ),
        18..=27 => single(
            "RL.SLIDING",
            "rl_sliding",
            key(rng, "sw"),
            call_args(rng, "sw"),
        ),
        28..=35 => single("RL.FIXED", "rl_fixed", key(rng, "fw"), call_args(rng, "fw")),
        36..=43 => single(
            "RL.SLIDINGLOG",
            "rl_slidinglog",
            key(rng, "sl"),
            call_args(rng, "sl"),
        ),
        44..=51 => {
            let mut args = gcra_params(rng);
            if rng.chance(50) {
                args.push(rng.pick(&["0", "1", "3", "-2", "20", "1"]).into());
            }
            single("CL.THROTTLE", "cl_throttle", key(rng, GCRA), args)
        }
        52..=59 => {
            let args = vec![
                rng.pick(&["1", "2", "3"]).to_string(),
                format!("h{}", rng.below(4)),
                rng.pick(&["50", "1000", "30000", "2500"]).to_string(),
            ];
            single("RL.ACQUIRE", "rl_acquire", key(rng, CONCURRENCY), args)
        }
        60..=63 => single(
            "RL.RELEASE",
            "rl_release",
            key(rng, CONCURRENCY),
            vec![format!("h{}", rng.below(4))],
        ),
        64..=71 => {
            if rng.chance(15) {
                let args = vec![
                    "CONCURRENCY".to_string(),
                    rng.pick(&["1", "2", "3"]).to_string(),
                ];
                return single("RL.PEEK", "rl_peek", key(rng, CONCURRENCY), args);
            }
            let (family, name) = algorithm_name(rng);
            let mut args = vec![rng.pick(&[name, &name.to_lowercase()]).to_string()];
            args.extend(call_args(rng, family));
            single("RL.PEEK", "rl_peek", key(rng, family), args)
        }
        72..=79 => {
            let (family, name) = algorithm_name(rng);
            let mut args = vec![name.to_string()];
            args.extend(match family {
                TOKEN => token_bucket_params(rng),
                GCRA => gcra_params(rng),
                _ => window_params(rng),
            });
            cost(rng, &mut args);
            single("RL.REFUND", "rl_refund", key(rng, family), args)
        }
        80..=94 => multi_call(rng),
        _ => bad_call(rng),
    }
}

/// How far the clock moves before a call: mostly small steps with µs fractions, sometimes
/// none, sometimes minutes or hours ahead, sometimes back.
pub fn random_step_us(rng: &mut Rng) -> i64 {
    match rng.below(100) {
        0..=14 => 0,
        15..=79 => rng.below(300_000) as i64,
        80..=87 => rng.below(3_000_000) as i64,
        88..=92 => 1_000_000 * (1 + rng.below(120)) as i64,
        93..=96 => -(rng.below(5_000_000) as i64),
        97 => -(60_000_000 * (1 + rng.below(10)) as i64),
        98 => 60_000_000 * (1 + rng.below(120)) as i64,
        // Days, and now and then beyond the library's 52 days.
        _ => 86_400_000_000 * (1 + rng.below(60)) as i64,
    }
}

/// A trace of `len` steps from `seed`, starting at `base_us`; one call in four is a
/// region's (`RL.REGIONAL` and the leases it spends, whose ends are absolute instants).
pub fn trace(seed: u64, len: usize, base_us: i64) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut now_us = base_us;
    (0..len)
        .map(|_| {
            let step_us = random_step_us(&mut rng);
            now_us += step_us;
            let call = if rng.chance(25) {
                random_call_at(&mut rng, now_us)
            } else {
                random_call(&mut rng)
            };
            Step { step_us, call }
        })
        .collect()
}

/// A call of a trace on one sliding log and one in-flight limit that grow long: the
/// library's sliding log keeps records it searches and rewrites only now and then, and
/// `rl_acquire` / `rl_release` ask Redis about the holders instead of reading them all, so
/// their searches, rewrites and counts need logs of hundreds of records and limits of dozens
/// of holders, which the random traces (a few calls per key) do not build.
fn long_call(rng: &mut Rng, window: &str) -> Call {
    let log = "{t}long:log".to_string();
    let holders = "{t}long:cc".to_string();
    let window = window.to_string();
    let mut args = vec!["10000".to_string(), window.clone()];
    match rng.below(100) {
        0..=49 => {
            if rng.chance(30) {
                args.push(rng.pick(&["2", "3", "40"]).into());
            }
            if rng.chance(10) {
                args.push("PARTIAL".into());
            }
            single("RL.SLIDINGLOG", "rl_slidinglog", log, args)
        }
        50..=57 => {
            let mut refund = vec!["SLIDINGLOG".to_string()];
            refund.extend(args);
            refund.push(rng.pick(&["1", "2", "5", "60"]).into());
            single("RL.REFUND", "rl_refund", log, refund)
        }
        58..=62 => {
            let mut peek = vec!["SLIDINGLOG".to_string()];
            peek.extend(args);
            peek.push(rng.pick(&["1", "9000", "10000"]).into());
            single("RL.PEEK", "rl_peek", log, peek)
        }
        63..=65 => {
            // A small limit on the long log: denials, whose retry is the k-th unit's instant.
            let small = vec![
                rng.pick(&["5", "50", "300"]).to_string(),
                window,
                rng.pick(&["1", "4"]).to_string(),
            ];
            single("RL.SLIDINGLOG", "rl_slidinglog", log, small)
        }
        66..=67 => {
            let mut multi_args = vec!["SLIDINGLOG".to_string()];
            multi_args.extend(args);
            Call {
                command: "RL.MULTI",
                function: "rl_multi",
                keys: vec![log],
                args: multi_args,
            }
        }
        68..=89 => single(
            "RL.ACQUIRE",
            "rl_acquire",
            holders,
            vec![
                rng.pick(&["20", "40", "45"]).to_string(),
                format!("h{}", rng.below(50)),
                rng.pick(&["2000", "30000", "500", "100000"]).to_string(),
            ],
        ),
        90..=97 => single(
            "RL.RELEASE",
            "rl_release",
            holders,
            vec![format!("h{}", rng.below(50))],
        ),
        _ => single(
            "RL.PEEK",
            "rl_peek",
            holders,
            vec!["CONCURRENCY".to_string(), "40".to_string()],
        ),
    }
}

/// A trace of `len` calls on a long sliding log (window 1, 2.5 or 60 s, limit 10,000) and
/// an in-flight limit of up to 50 holders, tens of milliseconds apart, now and then a step
/// back or seconds ahead.
pub fn long_trace(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let window = rng.pick(&["1", "2.5", "60"]);
    (0..len)
        .map(|_| Step {
            step_us: match rng.below(100) {
                0..=9 => 0,
                10..=93 => rng.below(40_000) as i64,
                94..=96 => -(rng.below(3_000_000) as i64),
                _ => rng.below(20_000_000) as i64,
            },
            call: long_call(&mut rng, window),
        })
        .collect()
}
