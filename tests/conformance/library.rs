//! The library on its own: replicas and the AOF hold exactly the primary's keys, racing
//! clients never exceed the bound, the other backend's keys are refused and left alone,
//! values beyond exact doubles are refused saying so, EVALSHA runs the same code, and
//! `rl_peek` works on a replica through `FCALL_RO`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::cluster::Cluster;
use redis_ratelimit_testkit::helpers::{dump, error_text, pexpiretime};
use redis_ratelimit_testkit::server::{Server, caught_up};

use crate::clock::{BASE_US, ClockedServer, LIBRARY, load_library};
use crate::trace::{Rng, random_call, random_step_us};

fn fcall(
    con: &mut redis::Connection,
    function: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    redis::cmd("FCALL")
        .arg(function)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(con)
}

fn fcall_error(
    con: &mut redis::Connection,
    function: &str,
    keys: &[&str],
    args: &[&str],
) -> String {
    match fcall(con, function, keys, args) {
        Err(error) => error_text(&error),
        Ok(value) => panic!("FCALL {function} {args:?} succeeded: {value:?}"),
    }
}

/// Random library calls (the conformance traces' calls) with the clock moving.
fn library_traffic(
    clocked: &mut ClockedServer,
    con: &mut redis::Connection,
    seed: u64,
    calls: usize,
) {
    let mut rng = Rng::new(seed);
    let mut now_us = BASE_US;
    for _ in 0..calls {
        now_us += random_step_us(&mut rng);
        clocked.set(now_us);
        let call = random_call(&mut rng);
        let line = call.library_args();
        let mut command = redis::cmd(&line[0]);
        command.arg(&line[1..]);
        let _ = command.query::<redis::Value>(con);
    }
}

/// Every key with its DUMP and absolute expiry.
fn snapshot(con: &mut redis::Connection) -> Vec<(String, Option<Vec<u8>>, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let bytes = dump(con, &key);
            let at = pexpiretime(con, &key);
            (key, bytes, at)
        })
        .collect()
}

#[test]
fn replicas_and_the_aof_hold_exactly_the_primarys_keys() {
    let seed = 0x5eed_0015;
    let Some(mut clocked) = ClockedServer::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--repl-diskless-sync-delay",
        "0",
    ]) else {
        return;
    };
    let replica = clocked.start_another(&["--propagation-error-behavior", "panic"]);
    replica.replicate_from(&clocked.server);
    let mut primary = clocked.server.conn();
    let mut replica_con = replica.conn();
    library_traffic(&mut clocked, &mut primary, seed, 3_000);
    assert!(
        caught_up(&mut primary, &mut replica_con),
        "the replica did not catch up"
    );
    let on_primary = snapshot(&mut primary);
    assert!(
        on_primary.len() > 5,
        "the traffic left only {} keys",
        on_primary.len()
    );
    assert_eq!(
        snapshot(&mut replica_con),
        on_primary,
        "seed {seed}: the replica differs"
    );
    // Reload the primary from its AOF alone (the clock stands still, so nothing expires).
    let _: () = redis::cmd("DEBUG")
        .arg("LOADAOF")
        .query(&mut primary)
        .expect("DEBUG LOADAOF");
    assert_eq!(
        snapshot(&mut primary),
        on_primary,
        "seed {seed}: the AOF replay differs"
    );
}

#[test]
fn racing_clients_never_exceed_the_bound() {
    const CLIENTS: usize = 16;
    // (function, arguments after the key) and the bound over [start, end] server µs.
    let server = Server::start(&[]);
    let mut con = server.conn();
    load_library(&mut con);
    let server_us = |con: &mut redis::Connection| {
        let time: Vec<i64> = redis::cmd("TIME").query(con).expect("TIME");
        time[0] * 1_000_000 + time[1]
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let in_window = Arc::new(AtomicU64::new(0));
    let start_us = server_us(&mut con);
    let deadline = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut client = server.conn();
            let (admitted, in_window) = (Arc::clone(&admitted), Arc::clone(&in_window));
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let bucket: Vec<i64> = fcall(
                        &mut client,
                        "rl_tokenbucket",
                        &["race:bucket"],
                        &["50", "100"],
                    )
                    .and_then(|v| Ok(redis::from_redis_value(v)?))
                    .expect("rl_tokenbucket");
                    admitted.fetch_add(bucket[0] as u64, Ordering::Relaxed);
                    let log: Vec<i64> =
                        fcall(&mut client, "rl_slidinglog", &["race:log"], &["100", "10"])
                            .and_then(|v| Ok(redis::from_redis_value(v)?))
                            .expect("rl_slidinglog");
                    in_window.fetch_add(log[0] as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    let elapsed_us = (server_us(&mut con) - start_us) as u64;
    let admitted = admitted.load(Ordering::Relaxed);
    // capacity 50 + 100 per second (+1 for the millisecond clock at the start).
    let bound = 50 + elapsed_us * 100 / 1_000_000 + 1;
    assert!(
        admitted <= bound,
        "the token bucket admitted {admitted} > {bound} in {elapsed_us} µs"
    );
    assert!(
        admitted >= 50,
        "the token bucket admitted only {admitted}: the test did not race"
    );
    // The sliding log's 10 s window spans the whole run: exactly its limit.
    assert_eq!(in_window.load(Ordering::Relaxed), 100);
}

#[test]
fn the_other_backends_keys_are_refused_and_left_alone() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    load_library(&mut con);
    let _: redis::Value = redis::cmd("RL.TOKENBUCKET")
        .arg("module")
        .arg(10)
        .arg(1)
        .query(&mut con)
        .unwrap();
    let _: redis::Value = fcall(&mut con, "rl_tokenbucket", &["library"], &["10", "1"]).unwrap();
    let _: () = redis::cmd("SET")
        .arg("string")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let before: Vec<_> = ["module", "library", "string"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    for function in ["rl_tokenbucket", "rl_sliding", "rl_fixed", "rl_slidinglog"] {
        assert_eq!(
            fcall_error(&mut con, function, &["module"], &["10", "1"]),
            "WRONGTYPE key holds a limiter of the ratelimit module: call its RL.* command or delete the key"
        );
        assert_eq!(
            fcall_error(&mut con, function, &["string"], &["10", "1"]),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
    assert!(
        fcall_error(&mut con, "rl_acquire", &["module"], &["1", "h", "1000"])
            .starts_with("WRONGTYPE key holds a limiter of the ratelimit module")
    );
    assert!(
        fcall_error(
            &mut con,
            "rl_multi",
            &["library", "module"],
            &["TOKENBUCKET", "10", "1", "FIXED", "5", "60"]
        )
        .starts_with("WRONGTYPE key holds a limiter of the ratelimit module")
    );
    let module_error = redis::cmd("RL.TOKENBUCKET")
        .arg("library")
        .arg(10)
        .arg(1)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert_eq!(
        error_text(&module_error),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(
        fcall_error(&mut con, "rl_sliding", &["library"], &["10", "1"]),
        "ERR key holds a token bucket, not a sliding window: use the matching command or delete the key"
    );
    let after: Vec<_> = ["module", "library", "string"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    assert_eq!(before, after, "a refused call changed a key");
}

#[test]
fn values_beyond_exact_doubles_are_refused_saying_so() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    load_library(&mut con);
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "rl_tokenbucket",
            &["9007199254740993", "1e9"],
            "ERR capacity / rate must be at most 4503599627370496 ns (52 days) in the ratelimit library",
        ),
        (
            "rl_tokenbucket",
            &["1000", "0.0001"],
            "ERR capacity / rate must be at most 4503599627370496 ns (52 days) in the ratelimit library",
        ),
        (
            "rl_tokenbucket",
            &["10", "1.23456789012345"],
            "ERR rate must have at most 14 significant digits in the ratelimit library",
        ),
        (
            "rl_tokenbucket",
            &["10", "1", "9007199254740993"],
            "ERR cost must be at most 9007199254740992 in the ratelimit library",
        ),
        (
            "cl_throttle",
            &["100", "1", "86400"],
            "ERR period / count * (max_burst + 1) must be at most 4503599627370496 ns (52 days) in the ratelimit library",
        ),
    ];
    for (function, args, expected) in cases {
        let error = fcall_error(&mut con, function, &["k"], args);
        assert!(error.starts_with(expected), "{function} {args:?}: {error}");
        assert!(
            error.contains("(Lua numbers are exact only to 2^53); the module accepts more"),
            "{error}"
        );
        // The module accepts every one of them.
        let command = if *function == "cl_throttle" {
            "CL.THROTTLE"
        } else {
            "RL.TOKENBUCKET"
        };
        let accepted = redis::cmd(command)
            .arg(format!("m:{function}"))
            .arg(*args)
            .query::<Vec<i64>>(&mut con);
        assert!(accepted.is_ok(), "{command} {args:?}: {accepted:?}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("k").query(&mut con).unwrap();
    assert!(keys.is_empty(), "a refused call wrote");
}

#[test]
fn evalsha_runs_the_same_code_and_fcall_ro_peeks_on_a_replica() {
    // A frozen wall clock stalls what Redis times by it: no delay before the full sync.
    let Some(mut clocked) = ClockedServer::start(&["--repl-diskless-sync-delay", "0"]) else {
        return;
    };
    let replica = clocked.start_another(&[]);
    replica.replicate_from(&clocked.server);
    let mut con = clocked.server.conn();
    // The script form: the file without its first line (`#!lua name=ratelimit`).
    let script = LIBRARY.split_once('\n').expect("a first line").1;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query(&mut con)
        .expect("SCRIPT LOAD");
    for step in 0..20 {
        clocked.set(BASE_US + step * 137_000);
        let by_function: Vec<i64> = redis::from_redis_value(
            fcall(&mut con, "rl_tokenbucket", &["f"], &["5", "3", "2"]).unwrap(),
        )
        .unwrap();
        let by_script: Vec<i64> = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg("s")
            .arg("rl_tokenbucket")
            .arg(5)
            .arg(3)
            .arg(2)
            .query(&mut con)
            .expect("EVALSHA");
        assert_eq!(by_script, by_function, "step {step}");
        assert_eq!(pexpiretime(&mut con, "s"), pexpiretime(&mut con, "f"));
    }
    let unknown = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("s")
        .arg("rl_nope")
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(
        error_text(&unknown).starts_with(
            "ERR the first argument must name one of the ratelimit library's functions"
        )
    );
    // On the replica: FCALL_RO of the read-only peek works; a write is refused.
    let mut replica_con = replica.conn();
    assert!(caught_up(&mut con, &mut replica_con));
    let peeked: Vec<i64> = redis::cmd("FCALL_RO")
        .arg("rl_peek")
        .arg(1)
        .arg("f")
        .arg("TOKENBUCKET")
        .arg(5)
        .arg(3)
        .query(&mut replica_con)
        .expect("FCALL_RO rl_peek on a replica");
    let on_primary: Vec<i64> = redis::cmd("FCALL_RO")
        .arg("rl_peek")
        .arg(1)
        .arg("f")
        .arg("TOKENBUCKET")
        .arg(5)
        .arg(3)
        .query(&mut con)
        .expect("FCALL_RO rl_peek");
    assert_eq!(peeked, on_primary);
    assert!(
        redis::cmd("FCALL_RO")
            .arg("rl_tokenbucket")
            .arg(1)
            .arg("f")
            .arg(5)
            .arg(3)
            .query::<redis::Value>(&mut replica_con)
            .is_err()
    );
}

/// On a Redis Cluster every function declares its keys: a key another primary owns is
/// redirected (`MOVED`) and never created where it was sent, `rl_multi` over two slots is
/// refused (`CROSSSLOT`) and writes nothing, and a cluster client reaches every function on
/// every primary, each limiter on the primary that owns its key.
#[test]
fn on_a_cluster_keys_are_declared_and_routed() {
    let cluster = Cluster::start_without_module(3, 0);
    let primaries = cluster.primaries();
    // Functions are per node: each primary is given the library (its replicas would get it
    // by replication).
    for primary in &primaries {
        load_library(&mut primary.conn());
    }
    let (first, second) = (primaries[0], primaries[1]);
    let here = cluster.tag_on(first, "here");
    let there = cluster.tag_on(second, "there");
    let mut con = first.conn();
    let dbsize =
        |server: &Server| -> i64 { redis::cmd("DBSIZE").query(&mut server.conn()).unwrap() };

    let elsewhere = format!("{there}:k");
    let moved = fcall_error(&mut con, "rl_tokenbucket", &[&elsewhere], &["10", "1"]);
    assert!(moved.starts_with("MOVED "), "{moved}");
    let (a, b) = (format!("{here}:a"), format!("{there}:b"));
    let buckets = ["TOKENBUCKET", "5", "1", "TOKENBUCKET", "5", "1"];
    let cross = fcall_error(&mut con, "rl_multi", &[&a, &b], &buckets);
    assert!(cross.starts_with("CROSSSLOT "), "{cross}");
    assert_eq!(
        (dbsize(first), dbsize(second)),
        (0, 0),
        "nothing written anywhere"
    );
    // Two keys of one slot (one hash tag) are one atomic call.
    let together = format!("{here}:b");
    let reply = fcall(&mut con, "rl_multi", &[&a, &together], &buckets).unwrap();
    assert!(
        matches!(&reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(1))),
        "{reply:?}"
    );

    let client = cluster.client();
    let mut routed = client.get_connection().unwrap();
    let calls: [(&str, &[&str]); 10] = [
        ("rl_tokenbucket", &["10", "1"]),
        ("rl_sliding", &["10", "60"]),
        ("rl_fixed", &["10", "60"]),
        ("rl_slidinglog", &["10", "60"]),
        ("cl_throttle", &["9", "10", "60"]),
        ("rl_acquire", &["3", "holder-1", "60000"]),
        ("rl_release", &["holder-1"]),
        ("rl_peek", &["TOKENBUCKET", "10", "1"]),
        ("rl_refund", &["TOKENBUCKET", "10", "1", "1"]),
        ("rl_tokenbucket", &["10", "1"]),
    ];
    for primary in &primaries {
        let tag = cluster.tag_on(primary, "routed");
        for (function, args) in calls {
            // Each algorithm on its own key; the in-flight pair and the bucket's peek and
            // refund share theirs.
            let key = match function {
                "rl_release" => format!("{tag}:rl_acquire"),
                "rl_peek" | "rl_refund" => format!("{tag}:rl_tokenbucket"),
                _ => format!("{tag}:{function}"),
            };
            let reply: redis::Value = redis::cmd("FCALL")
                .arg(function)
                .arg(1)
                .arg(&key)
                .arg(args)
                .query(&mut routed)
                .unwrap_or_else(|error| panic!("{function} on {key}: {}", error_text(&error)));
            assert!(
                matches!(reply, redis::Value::Array(_) | redis::Value::Int(_)),
                "{function}: {reply:?}"
            );
        }
        // Every limiter lives on the primary that owns its slot, nowhere else.
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut primary.conn())
            .unwrap();
        assert!(!keys.is_empty());
        assert!(
            keys.iter()
                .all(|key| key.contains(&tag) || key.contains(&here)),
            "{keys:?}"
        );
        let bucket: Vec<i64> = redis::cmd("FCALL")
            .arg("rl_peek")
            .arg(1)
            .arg(format!("{tag}:rl_tokenbucket"))
            .arg(&["TOKENBUCKET", "10", "1"])
            .query(&mut routed)
            .unwrap();
        // Two calls took a unit each and the refund gave one back: 9 held, and the peek
        // answers as a call would (8 left), unless a second of refill came meanwhile.
        assert!((8..=9).contains(&bucket[1]), "{bucket:?}");
    }
}
