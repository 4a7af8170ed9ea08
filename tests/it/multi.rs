//! `RL.MULTI`: several limits in one atomic call. Every limit admits its cost and all are
//! charged, or nothing is written or propagated; the reply names the binding limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::helpers::{
    commandstat_calls, dump, error_text, expect_error, expect_error_primed, multi, run, snapshot,
    try_multi, wait_replicas, words, write_marks,
};
use crate::server::{Server, info_int, primary_and_replica, wait_until};

/// Units `key`'s limiter (algorithm and parameters `args`) could grant now: a peek at a
/// partial grant of everything.
fn available(con: &mut redis::Connection, key: &str, args: &[&str]) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg(args)
        .arg(&["1000000", "PARTIAL"])
        .query(con)
        .unwrap();
    reply[0]
}

#[test]
fn every_limit_admits_or_none_is_charged() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // A plan allowing 5 calls a day and a user allowed 3 (refilled once in 1000 s).
    let call = words("2 {t}:plan {t}:user FIXED 5 86400 TOKENBUCKET 3 0.001");
    for user_left in [2, 1, 0] {
        let reply = multi(&mut con, &call);
        assert_eq!(reply.fields[..3], [1, user_left, 0]);
        assert_eq!(reply.binding, 1, "the user has the fewest calls left");
        assert_eq!(reply.per_limit[0][..2], [1, 2 + user_left]);
    }
    let plan_before = dump(&mut con, "{t}:plan");
    let denied = multi(&mut con, &call);
    assert_eq!(denied.fields[0], 0);
    assert_eq!(denied.binding, 1);
    assert!(denied.fields[2] > 0 && denied.fields[2] <= 1_000_000);
    assert_eq!(denied.per_limit[0][0], 1, "the plan alone would admit");
    assert_eq!(denied.per_limit[1][0], 0);
    assert_eq!(
        dump(&mut con, "{t}:plan"),
        plan_before,
        "a denied call charges no limit"
    );
    assert_eq!(available(&mut con, "{t}:plan", &["FIXED", "5", "86400"]), 2);
    // Another user under the same plan is admitted until the plan runs out.
    let other = words("2 {t}:plan {t}:other FIXED 5 86400 TOKENBUCKET 3 0.001");
    assert_eq!(multi(&mut con, &other).fields[0], 1);
    assert_eq!(multi(&mut con, &other).fields[0], 1);
    let reply = multi(&mut con, &other);
    assert_eq!(
        (reply.fields[0], reply.binding),
        (0, 0),
        "now the plan binds"
    );
    assert_eq!(
        available(&mut con, "{t}:other", &["TOKENBUCKET", "3", "0.001"]),
        1
    );
}

#[test]
fn the_reply_follows_the_binding_limit() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Admitted: with COST 2, the limit with the fewest calls of cost 2 left binds (ties go
    // to the lowest index); reset is the largest of all.
    let reply = multi(
        &mut con,
        &words("3 {a}:1 {a}:2 {a}:3 FIXED 10 86400 TOKENBUCKET 7 1 TOKENBUCKET 6 1000 COST 2"),
    );
    // Calls of 2 left: 8/2 = 4, 5/2 = 2, 4/2 = 2 → index 1.
    assert_eq!(reply.binding, 1);
    assert_eq!(reply.fields[..3], [1, 5, 0]);
    assert_eq!(reply.fields[4], 7);
    let resets: Vec<i64> = reply.per_limit.iter().map(|limit| limit[3]).collect();
    assert_eq!(reply.fields[3], *resets.iter().max().unwrap());
    assert_eq!(reply.per_limit[1][3], 2000, "7 tokens at 1/s, 2 missing");

    // Denied: the denying limit with the longest wait binds; one that can never admit this
    // cost beats any wait.
    let denied = multi(
        &mut con,
        &words("3 {b}:1 {b}:2 {b}:3 TOKENBUCKET 5 1 TOKENBUCKET 5 0.5 FIXED 100 86400 COST 6"),
    );
    assert_eq!(denied.fields[..3], [0, 5, -1]);
    assert_eq!(
        denied.binding, 0,
        "never: the first limit that can never admit 6"
    );
    assert!(denied.per_limit[2][0] == 1);
    assert!(
        denied.per_limit[2][3] > 0,
        "the fixed window's own view of the call"
    );
    assert_eq!(
        denied.fields[3], 0,
        "nothing was charged: every limit is still unused"
    );
    multi(&mut con, &words("1 {c}:1 TOKENBUCKET 5 1 COST 5"));
    multi(&mut con, &words("1 {c}:2 TOKENBUCKET 5 0.5 COST 5"));
    let denied = multi(
        &mut con,
        &words("2 {c}:1 {c}:2 TOKENBUCKET 5 1 TOKENBUCKET 5 0.5"),
    );
    assert_eq!((denied.fields[0], denied.binding), (0, 1));
    assert!((1900..=2000).contains(&denied.fields[2]), "{denied:?}");
    assert!((900..=1000).contains(&denied.per_limit[0][2]));
}

/// A denied call charges nothing, so its field 4 is the largest reset of the limits as they
/// stand; each limit's own entry is what its call alone would do (an admitting limit shows
/// its reset after being charged).
#[test]
fn a_denial_reports_the_reset_of_the_states_as_they_stand() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let _: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg(words("a 2 1 2"))
        .query(&mut con)
        .unwrap();
    let reply = multi(
        &mut con,
        &words("2 a b TOKENBUCKET 2 1 TOKENBUCKET 10 0.001 COST 2"),
    );
    assert_eq!((reply.fields[0], reply.binding), (0, 0), "{reply:?}");
    assert!(
        (1_900..=2_000).contains(&reply.fields[3]),
        "a refills in 2 s, b was not charged: {reply:?}"
    );
    assert_eq!(reply.per_limit[1][..2], [1, 8], "b alone would admit");
    assert_eq!(
        reply.per_limit[1][3], 2_000_000,
        "b alone would be full in 2,000 s"
    );
    assert_eq!(dump(&mut con, "b"), None, "nothing was charged");
}

#[test]
fn cost_and_weights_charge_each_limit_and_algorithms_mix() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Requests and bytes in one call: 2 requests of 10 KB each.
    let reply = multi(
        &mut con,
        &words("2 {r}:requests {r}:kbytes SLIDING 100 60 TOKENBUCKET 1000 10 COST 2 WEIGHTS 1 10"),
    );
    assert_eq!(reply.per_limit[0][1], 98);
    assert_eq!(reply.per_limit[1][1], 980);
    // Every algorithm in one call, each limit's view equal to its own command's.
    let keys = ["{m}:tb", "{m}:sw", "{m}:fw", "{m}:sl", "{m}:gcra"];
    let limits: [&[&str]; 5] = [
        &["TOKENBUCKET", "10", "1"],
        &["SLIDING", "10", "60"],
        &["FIXED", "10", "86400"],
        &["SLIDINGLOG", "10", "60"],
        &["GCRA", "9", "10", "60"],
    ];
    let mut args: Vec<&str> = vec!["5"];
    args.extend(keys);
    args.extend(limits.iter().flat_map(|limit| limit.iter().copied()));
    args.extend(["COST", "3"]);
    let reply = multi(&mut con, &args);
    assert_eq!(reply.fields[0], 1);
    for ((key, limit), view) in keys.iter().zip(limits).zip(&reply.per_limit) {
        assert_eq!(view[..2], [1, 7], "{key}");
        assert_eq!(available(&mut con, key, limit), 7, "{key} was charged 3");
    }
    assert_eq!(
        expect_error(&mut con, &[b"RL.TOKENBUCKET", b"{m}:gcra", b"10", b"1"]),
        "ERR key holds a CL.THROTTLE (GCRA), not a token bucket: use the matching \
         command or delete the key"
    );
    // RL.MULTI's GCRA and CL.THROTTLE share keys.
    let cell: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg("{m}:gcra")
        .arg(&["9", "10", "60"])
        .query(&mut con)
        .unwrap();
    assert_eq!(cell[..3], [0, 10, 6]);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let (primary, _replica) = primary_and_replica();
    let mut con = primary.conn();
    let _: () = redis::cmd("SET")
        .arg("{e}:string")
        .arg("x")
        .query(&mut con)
        .unwrap();
    // A bucket that refills for 10,000 s: it does not expire while the test runs.
    multi(&mut con, &["1", "{e}:bucket", "TOKENBUCKET", "10", "0.001"]);
    assert_eq!(wait_replicas(&mut con), 1);
    let marks = write_marks(&mut con);
    let keys = ["{e}:string", "{e}:bucket"];
    let before = snapshot(&mut con, &keys.map(String::from));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            words("0 {e}:a TOKENBUCKET 1 1"),
            "ERR numkeys must be greater than 0 (got '0')",
        ),
        (
            words("-1 {e}:a TOKENBUCKET 1 1"),
            "ERR numkeys must be greater than 0 (got '-1')",
        ),
        (
            words("x {e}:a TOKENBUCKET 1 1"),
            "ERR numkeys must be a positive integer (got 'x')",
        ),
        (
            words("17 {e}:a TOKENBUCKET 1 1"),
            "ERR numkeys must be at most 16 (got '17')",
        ),
        (
            words("3 {e}:a {e}:b TOKENBUCKET 1"),
            "ERR limit of key '{e}:a': algorithm must be TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY (got '1')",
        ),
        (
            words("2 {e}:a {e}:b TOKENBUCKET 1 1"),
            "ERR wrong number of arguments for 'rl.multi' command",
        ),
        (
            words("2 {e}:a {e}:b TOKENBUCKET 1 1 LEAKY 1 1"),
            "ERR limit of key '{e}:b': algorithm must be TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY (got 'LEAKY')",
        ),
        (
            words("2 {e}:a {e}:b TOKENBUCKET 0 1 FIXED 1 1"),
            "ERR limit of key '{e}:a': capacity must be greater than 0 (got '0')",
        ),
        (
            words("2 {e}:a {e}:b TOKENBUCKET 1 1 FIXED 1 nan"),
            "ERR limit of key '{e}:b': window must be a finite number (got 'nan')",
        ),
        (
            words("1 {e}:a SLIDINGLOG 20000 60"),
            "ERR limit of key '{e}:a': limit must be at most 10000 (the ratelimit.max-log-entries setting) (got '20000')",
        ),
        (
            words("1 {e}:a GCRA -1 1 1"),
            "ERR limit of key '{e}:a': max_burst must be at least 0 (got '-1')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 COST 0"),
            "ERR cost must be greater than 0 (got '0')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 COST 1e3"),
            "ERR cost must be a positive integer (got '1e3')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 WEIGHTS -2"),
            "ERR weight must be greater than 0 (got '-2')",
        ),
        (
            words("2 {e}:a {e}:b TOKENBUCKET 1 1 FIXED 1 1 WEIGHTS 1"),
            "ERR wrong number of arguments for 'rl.multi' command",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 COST 2 PARTIAL MIN 3"),
            "ERR MIN must be at most the cost (got '3')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 MAXWAIT 3"),
            "ERR option must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m] (got 'MAXWAIT')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 1 1 COST 99999999999 WEIGHTS 999999999999"),
            "ERR cost * weight is too large",
        ),
        (
            words("3 {e}:a {e}:b {e}:c TOKENBUCKET 5 1"),
            "ERR wrong number of arguments for 'rl.multi' command",
        ),
        (
            words("1 {e}:a TOKENBUCKET 5 1 TOKENBUCKET 5 1"),
            "ERR option must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m] (got 'TOKENBUCKET')",
        ),
        (
            words("1 {e}:a TOKENBUCKET 5 1 HOLDER h"),
            "ERR HOLDER id is for CONCURRENCY limits, and this call has none",
        ),
        (
            words("2 {e}:a {e}:a TOKENBUCKET 1 1 TOKENBUCKET 1 1"),
            "ERR key '{e}:a' is given twice: each key takes one limit",
        ),
        (
            words("2 {e}:a {e}:string TOKENBUCKET 1 1 TOKENBUCKET 1 1"),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            words("2 {e}:a {e}:bucket TOKENBUCKET 1 1 FIXED 1 1"),
            "ERR key holds a token bucket, not a fixed window: use the matching command or delete the key",
        ),
    ];
    for (args, expected) in &cases {
        let mut all: Vec<&[u8]> = vec![b"RL.MULTI"];
        all.extend(args.iter().map(|a| a.as_bytes()));
        assert_eq!(expect_error(&mut con, &all), *expected, "{args:?}");
    }
    assert_eq!(dump(&mut con, "{e}:a"), None, "nothing was created");
    assert_eq!(dump(&mut con, "{e}:b"), None);
    assert_eq!(snapshot(&mut con, &keys.map(String::from)), before);
    assert_eq!(
        write_marks(&mut con),
        marks,
        "nothing written or propagated"
    );
    // The same refusals right after a successful call that leaves the bad call's limits in
    // the memo (with each key count that parses them): a remembered parse never stands in
    // for another key count.
    for (args, expected) in &cases {
        let mut all: Vec<&[u8]> = vec![b"RL.MULTI"];
        all.extend(args.iter().map(|a| a.as_bytes()));
        assert_eq!(expect_error_primed(&mut con, &all), *expected, "{args:?}");
    }
    assert_eq!(dump(&mut con, "{e}:a"), None, "nothing was created");
    assert_eq!(dump(&mut con, "{e}:b"), None);
    assert_eq!(dump(&mut con, "{e}:c"), None);
    assert_eq!(snapshot(&mut con, &keys.map(String::from)), before);
}

#[test]
fn denials_propagate_nothing_and_replicas_apply_each_call_as_one_op() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    let call = words("2 {p}:a {p}:b FIXED 2 86400 SLIDINGLOG 5 86400");
    multi(&mut con, &call);
    multi(&mut con, &call);
    assert_eq!(wait_replicas(&mut con), 1);
    let marks = write_marks(&mut con);
    for _ in 0..10 {
        assert_eq!(multi(&mut con, &call).fields[0], 0);
    }
    assert_eq!(
        write_marks(&mut con),
        marks,
        "nothing written or propagated"
    );
    let mut replica_con = replica.conn();
    let keys = ["{p}:a", "{p}:b"].map(String::from);
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
    assert_eq!(
        commandstat_calls(&mut replica_con, "rl.fx"),
        2,
        "one op per call"
    );
    assert_eq!(commandstat_calls(&mut replica_con, "rl.multi"), 0);
    assert_eq!(
        commandstat_calls(&mut replica_con, "multi"),
        0,
        "no MULTI/EXEC wrapper"
    );
}

#[test]
fn replicas_and_the_aof_hold_exactly_the_primary_state() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    run(&mut con, "CONFIG SET appendonly yes");
    let aof_ready = || {
        let mut con = primary.conn();
        info_int(&mut con, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(&mut con, "persistence", "aof_rewrite_scheduled") == 0
    };
    assert!(wait_until(Duration::from_secs(10), aof_ready));
    let keys: Vec<String> = (0..4).map(|i| format!("{{x}}:{i}")).collect();
    for round in 0..30 {
        let cost = (1 + round % 4).to_string();
        let args = [
            "4",
            &keys[0],
            &keys[1],
            &keys[2],
            &keys[3],
            "TOKENBUCKET",
            "20",
            "0.01",
            "SLIDING",
            "25",
            "86400",
            "SLIDINGLOG",
            "30",
            "86400",
            "GCRA",
            "15",
            "1",
            "600",
            "COST",
            &cost,
            "PARTIAL",
        ];
        multi(&mut con, &args);
    }
    assert_eq!(wait_replicas(&mut con), 1);
    let expected = snapshot(&mut con, &keys);
    assert_eq!(snapshot(&mut replica.conn(), &keys), expected);
    assert_eq!(
        info_int(&mut replica.conn(), "stats", "unexpected_error_replies"),
        0
    );
    // Replaying the AOF (commands as propagated: pairs of keys and effects) rebuilds the
    // same state with the same absolute expiries.
    run(&mut con, "DEBUG LOADAOF");
    assert_eq!(snapshot(&mut con, &keys), expected);
    let aof = std::fs::read_dir(primary.dir.join("appendonlydir"))
        .unwrap()
        .flat_map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect::<Vec<u8>>();
    let text = String::from_utf8_lossy(&aof).to_lowercase();
    assert!(text.contains("rl.fx"));
    assert!(
        !text.contains("rl.multi"),
        "the AOF holds effects, never the command"
    );
}

#[test]
fn keys_are_declared_for_getkeys_and_acl() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(words("GETKEYS RL.MULTI 3 a b c FIXED 1 1 FIXED 1 1"))
        .arg(&["FIXED", "1", "1", "COST", "2"])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["a", "b", "c"]);
    for effects in ["RL.FX", "RL.SETSTATE"] {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(effects)
            .arg(words("a x b y"))
            .query(&mut con)
            .unwrap();
        assert_eq!(keys, ["a", "b"], "{effects}");
    }
    let _: () = redis::cmd("ACL")
        .arg(words("SETUSER tenant on nopass ~{t1}:* +rl.multi"))
        .query(&mut con)
        .unwrap();
    let mut tenant = server.conn();
    let _: () = redis::cmd("AUTH")
        .arg(&["tenant", "x"])
        .query(&mut tenant)
        .unwrap();
    multi(&mut tenant, &words("2 {t1}:a {t1}:b FIXED 1 60 FIXED 1 60"));
    let error =
        try_multi(&mut tenant, &words("2 {t1}:a {t2}:b FIXED 1 60 FIXED 1 60")).unwrap_err();
    assert!(
        error_text(&error).starts_with("NOPERM"),
        "{}",
        error_text(&error)
    );
    assert_eq!(dump(&mut con, "{t2}:b"), None);
}

/// 16 clients race through two tenants' limits and a shared global one: no limit ever goes
/// beyond its bound, and the global limit was charged exactly once per admitted call (so no
/// call was charged by halves).
#[test]
fn racing_clients_never_exceed_any_limit() {
    const CLIENTS: usize = 16;
    let server = Server::start(&[]);
    let global = ["FIXED", "150", "86400"];
    let tenant = ["TOKENBUCKET", "100", "0.001"];
    let admitted: Arc<[AtomicI64; 2]> = Arc::new([AtomicI64::new(0), AtomicI64::new(0)]);
    let deadline = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let mut con = server.conn();
            let admitted = Arc::clone(&admitted);
            std::thread::spawn(move || {
                let tenant_key = format!("{{race}}:tenant:{}", client % 2);
                let mut args = vec!["2", "{race}:global", &tenant_key];
                args.extend(global);
                args.extend(tenant);
                while Instant::now() < deadline {
                    if multi(&mut con, &args).fields[0] == 1 {
                        admitted[client % 2].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let mut con = server.conn();
    let [a, b] = [0, 1].map(|i| admitted[i].load(Ordering::Relaxed));
    eprintln!("tenant 0: {a} admitted, tenant 1: {b} admitted");
    assert!(a <= 100 && b <= 100, "{a}, {b}");
    assert_eq!(a + b, 150, "the global limit binds exactly");
    assert_eq!(available(&mut con, "{race}:global", &global), 0);
    assert_eq!(available(&mut con, "{race}:tenant:0", &tenant), 100 - a);
    assert_eq!(available(&mut con, "{race}:tenant:1", &tenant), 100 - b);
}
