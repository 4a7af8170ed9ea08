//! The library against the module where an outside review found them to differ: under
//! `maxmemory` with `noeviction` (the commands that free or read still answer), and on a
//! sorted set of the user's (`WRONGTYPE`, the set left alone). Both run on one clocked
//! server, the module's keys in database 0 and the library's in database 1, as the traces.

use redis_ratelimit_testkit::helpers::{dump, error_text};

use crate::clock::ClockedServer;
use crate::trace::Call;

fn call(command: &'static str, function: &'static str, keys: &[&str], args: &[&str]) -> Call {
    Call {
        command,
        function,
        keys: keys.iter().map(|key| key.to_string()).collect(),
        args: args.iter().map(|arg| arg.to_string()).collect(),
    }
}

fn send(con: &mut redis::Connection, line: &[String]) -> Result<redis::Value, String> {
    let mut command = redis::cmd(&line[0]);
    command.arg(&line[1..]);
    command
        .query::<redis::Value>(con)
        .map_err(|error| error_text(&error))
}

/// The clocked server and a connection to each backend's database; `None` where the frozen
/// clock cannot hold (said loudly by [`ClockedServer::start`]).
fn backends() -> Option<(ClockedServer, redis::Connection, redis::Connection)> {
    let clocked = ClockedServer::start(&[])?;
    let module = clocked.server.conn();
    let mut library = clocked.server.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut library).unwrap();
    Some((clocked, module, library))
}

/// Sends `call` to both backends; returns what each answered.
type Answers = (Result<redis::Value, String>, Result<redis::Value, String>);

fn both(module: &mut redis::Connection, library: &mut redis::Connection, call: &Call) -> Answers {
    (
        send(module, &call.module_args()),
        send(library, &call.library_args()),
    )
}

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Over `maxmemory` with `noeviction`, `RL.RELEASE`, `RL.PEEK` and `RL.REFUND` still answer
/// (they free or read); so must `rl_release`, `rl_peek` and `rl_refund`, with the same
/// replies. What takes memory is refused by both alike.
#[test]
fn under_maxmemory_what_frees_or_reads_answers_as_the_module() {
    let Some((clocked, mut module, mut library)) = backends() else {
        return;
    };
    for setup in [
        call(
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["b"],
            &["10", "1", "3"],
        ),
        call("RL.ACQUIRE", "rl_acquire", &["s"], &["2", "h1", "60000"]),
        call("RL.ACQUIRE", "rl_acquire", &["s"], &["2", "h2", "60000"]),
    ] {
        let (m, l) = both(&mut module, &mut library, &setup);
        assert_eq!(m, l, "{setup}");
        assert!(m.is_ok(), "{setup}: {m:?}");
    }
    let mut admin = clocked.server.conn();
    for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut admin)
            .unwrap();
    }
    let answered = [
        call("RL.PEEK", "rl_peek", &["b"], &["TOKENBUCKET", "10", "1"]),
        call("RL.PEEK", "rl_peek", &["s"], &["CONCURRENCY", "2"]),
        call(
            "RL.REFUND",
            "rl_refund",
            &["b"],
            &["TOKENBUCKET", "10", "1", "2"],
        ),
        call("RL.RELEASE", "rl_release", &["s"], &["h1"]),
        call("RL.RELEASE", "rl_release", &["s"], &["h2"]),
        call("RL.PEEK", "rl_peek", &["s"], &["CONCURRENCY", "2"]),
    ];
    for call in &answered {
        let (m, l) = both(&mut module, &mut library, call);
        assert!(m.is_ok(), "the module refused {call}: {m:?}");
        assert_eq!(m, l, "{call}");
    }
    let refused = [
        call("RL.TOKENBUCKET", "rl_tokenbucket", &["b"], &["10", "1"]),
        call("RL.ACQUIRE", "rl_acquire", &["s"], &["2", "h3", "60000"]),
    ];
    for call in &refused {
        let (m, l) = both(&mut module, &mut library, call);
        assert_eq!(m, Err(OOM.to_string()), "{call}");
        assert_eq!(m, l, "{call}");
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut admin)
        .unwrap();
}

/// Every function on a sorted set of the user's answers `WRONGTYPE`, word for word as the
/// module, and leaves it alone: one without an expiry for every function (whether its
/// scores look like expired holders or live ones), one with an
/// expiry (and scores no in-flight limit has) for every function but the in-flight ones
/// (a limit of plain types: README, "What differs"). The library's own in-flight limit is
/// told apart: the module's "key holds an in-flight limit" for another algorithm.
#[test]
fn a_sorted_set_of_the_users_is_refused_with_wrongtype_and_left_alone() {
    let Some((_clocked, mut module, mut library)) = backends() else {
        return;
    };
    for con in [&mut module, &mut library] {
        let _: () = redis::cmd("ZADD")
            .arg("board")
            .arg(&["1", "alice", "2", "bob"])
            .query(con)
            .unwrap();
        // Scores after every instant of the test: members that look like live holders.
        let _: () = redis::cmd("ZADD")
            .arg("future")
            .arg(&["9000000000000000", "alice", "9000000000000001", "bob"])
            .query(con)
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg("timed")
            .arg(&["1.5", "alice"])
            .query(con)
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg("timed")
            .arg(600_000)
            .query(con)
            .unwrap();
    }
    let before: Vec<_> = [&mut module, &mut library]
        .into_iter()
        .flat_map(|con| [dump(con, "board"), dump(con, "future"), dump(con, "timed")])
        .collect();
    let others = |key: &'static str| {
        vec![
            call("RL.TOKENBUCKET", "rl_tokenbucket", &[key], &["10", "1"]),
            call("RL.SLIDING", "rl_sliding", &[key], &["10", "60"]),
            call("RL.FIXED", "rl_fixed", &[key], &["10", "60"]),
            call("RL.SLIDINGLOG", "rl_slidinglog", &[key], &["10", "60"]),
            call("CL.THROTTLE", "cl_throttle", &[key], &["10", "1", "60"]),
            call("RL.PEEK", "rl_peek", &[key], &["TOKENBUCKET", "10", "1"]),
            call(
                "RL.REFUND",
                "rl_refund",
                &[key],
                &["FIXED", "10", "60", "1"],
            ),
            call(
                "RL.MULTI",
                "rl_multi",
                &["other", key],
                &["FIXED", "5", "60", "TOKENBUCKET", "10", "1"],
            ),
        ]
    };
    let in_flight = |key: &'static str| {
        vec![
            call("RL.ACQUIRE", "rl_acquire", &[key], &["5", "carol", "1000"]),
            call("RL.ACQUIRE", "rl_acquire", &[key], &["5", "alice", "1000"]),
            call("RL.ACQUIRE", "rl_acquire", &[key], &["1", "carol", "1000"]),
            call("RL.RELEASE", "rl_release", &[key], &["alice"]),
            call("RL.RELEASE", "rl_release", &[key], &["nobody"]),
            call("RL.PEEK", "rl_peek", &[key], &["CONCURRENCY", "5"]),
            call(
                "RL.MULTI",
                "rl_multi",
                &[key],
                &["CONCURRENCY", "5", "1000", "HOLDER", "carol"],
            ),
        ]
    };
    let calls = others("board")
        .into_iter()
        .chain(in_flight("board"))
        .chain(others("future"))
        .chain(in_flight("future"))
        .chain(others("timed"));
    for call in calls {
        let (m, l) = both(&mut module, &mut library, &call);
        assert!(
            matches!(&m, Err(error) if error.starts_with("WRONGTYPE")),
            "the module: {call}: {m:?}"
        );
        assert_eq!(m, l, "{call}");
    }
    let after: Vec<_> = [&mut module, &mut library]
        .into_iter()
        .flat_map(|con| [dump(con, "board"), dump(con, "future"), dump(con, "timed")])
        .collect();
    assert_eq!(before, after, "a refused call changed a user's sorted set");

    // Each backend's own in-flight limit, under another algorithm: the same words.
    let acquire = call("RL.ACQUIRE", "rl_acquire", &["mine"], &["2", "h", "60000"]);
    let (m, l) = both(&mut module, &mut library, &acquire);
    assert_eq!(m, l);
    for call in others("mine") {
        let (m, l) = both(&mut module, &mut library, &call);
        assert!(
            matches!(&m, Err(error) if error.contains("key holds an in-flight limit")),
            "{call}: {m:?}"
        );
        assert_eq!(m, l, "{call}");
    }
}

/// A value at a key that the library never writes (a negative count, a field that is not a
/// number, a count too long to be exact, a log whose counts do not add up), in each of its
/// string layouts, is refused by every function with `WRONGTYPE`, word for word as the
/// module refuses the same string, and left alone: never read as a limiter (a hand-written
/// `fw <start> -5 - -` admitted 10 of 10 calls on a limit of 5).
#[test]
fn a_value_the_library_never_writes_is_refused_as_the_module_refuses_it() {
    let Some((mut clocked, mut module, mut library)) = backends() else {
        return;
    };
    let window_start = crate::clock::BASE_US - crate::clock::BASE_US % 60_000_000;
    let instant_ns = format!("{}000", crate::clock::BASE_US);
    // A log the library wrote (3 records), to tamper with.
    for (step, units) in [1, 2, 1].into_iter().enumerate() {
        clocked.set(crate::clock::BASE_US + 1_000 * step as i64);
        let _: redis::Value = redis::cmd("FCALL")
            .arg("rl_slidinglog")
            .arg(1)
            .arg("log")
            .arg(&[10, 60, units])
            .query(&mut library)
            .unwrap();
    }
    let log: String = redis::cmd("GET").arg("log").query(&mut library).unwrap();
    assert!(log.starts_with("sl "), "{log}");
    let trailer = log.len() - 98;
    let tampered = |at: usize, with: &str| {
        let mut value = log.clone();
        value.replace_range(at..at + with.len(), with);
        value
    };
    let huge = format!("1{}", "0".repeat(400));
    let values = [
        // Fixed window: `fw <start µs> <count> - <x>`.
        format!("fw {window_start} -5 - -"),
        format!("fw {window_start} 2x - -"),
        format!("fw {window_start} 2 2 -"),
        format!("fw {window_start} 12345678901234567890 - -"),
        format!("fw {window_start} 2 - 1.5"),
        // Sliding window: `sw <start µs> <previous> <current> <x>`.
        format!("sw {window_start} 0 -5 -"),
        format!("sw {window_start} -3 0 -"),
        format!("sw {window_start} {huge} 0 -"),
        // Token bucket: `tb <empty instant ns> <interval ns> - <x>`.
        format!("tb {instant_ns} 0 - -"),
        "tb 1800000000x00250000 100000000 - -".to_string(),
        format!("tb {instant_ns} 100000000 7 -"),
        format!("tb {instant_ns} 100000000 - 5x"),
        // GCRA: `gcra <tat ns> - - <x>`.
        "gcra 1800000000x00250000 - - -".to_string(),
        format!("gcra {instant_ns} 5 - -"),
        // No limiter is a string of this kind.
        "cc 1 2 3 -".to_string(),
        // Sliding log: the last record's count negative, the trailer's base above the
        // total (a negative count in the window), its record count not a number.
        tampered(trailer - 16, "-000000000000005"),
        tampered(trailer + 49, "0000000000000099"),
        tampered(trailer + 17, "00000000000000x3"),
    ];
    let calls = |key: &'static str| {
        vec![
            call("RL.TOKENBUCKET", "rl_tokenbucket", &[key], &["10", "10"]),
            call("RL.SLIDING", "rl_sliding", &[key], &["5", "60"]),
            call("RL.FIXED", "rl_fixed", &[key], &["5", "60"]),
            call("RL.SLIDINGLOG", "rl_slidinglog", &[key], &["5", "60"]),
            call("CL.THROTTLE", "cl_throttle", &[key], &["4", "10", "1"]),
            call("RL.PEEK", "rl_peek", &[key], &["FIXED", "5", "60"]),
            call("RL.PEEK", "rl_peek", &[key], &["SLIDING", "5", "60"]),
            call("RL.PEEK", "rl_peek", &[key], &["SLIDINGLOG", "5", "60"]),
            call("RL.PEEK", "rl_peek", &[key], &["TOKENBUCKET", "10", "10"]),
            call("RL.REFUND", "rl_refund", &[key], &["FIXED", "5", "60", "1"]),
            call(
                "RL.REFUND",
                "rl_refund",
                &[key],
                &["SLIDING", "5", "60", "1"],
            ),
            call(
                "RL.REFUND",
                "rl_refund",
                &[key],
                &["SLIDINGLOG", "5", "60", "1"],
            ),
            call(
                "RL.MULTI",
                "rl_multi",
                &["other", key],
                &["FIXED", "5", "60", "SLIDING", "5", "60"],
            ),
            call("RL.MULTI", "rl_multi", &[key], &["SLIDINGLOG", "5", "60"]),
        ]
    };
    for value in &values {
        for con in [&mut module, &mut library] {
            let _: () = redis::cmd("SET").arg("hand").arg(value).query(con).unwrap();
        }
        let before = (dump(&mut module, "hand"), dump(&mut library, "hand"));
        // Twice each: the repeated calls of the review's reproduction.
        for call in calls("hand").iter().chain(&calls("hand")) {
            let (m, l) = both(&mut module, &mut library, call);
            assert!(
                matches!(&m, Err(error) if error.starts_with("WRONGTYPE")),
                "the module: {call} on {value:?}: {m:?}"
            );
            assert_eq!(m, l, "{call} on {value:?}");
        }
        let after = (dump(&mut module, "hand"), dump(&mut library, "hand"));
        assert_eq!(before, after, "a refused call changed {value:?}");
        for con in [&mut module, &mut library] {
            let other: Option<String> = redis::cmd("GET").arg("other").query(con).unwrap();
            assert_eq!(other, None, "RL.MULTI wrote beside {value:?}");
        }
    }
}
