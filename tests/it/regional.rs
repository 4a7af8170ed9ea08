//! `RL.REGIONAL` and `RL.REGIONLEASE`: a region's admission under one quota across regions,
//! its floor (a limiter key) then its leased balance (a string whose absolute expiry is the
//! lease's end), replicated and persisted exactly, refusing bad input without a write.

use std::time::Duration;

use redis::Value;

use crate::cluster_support::{Cluster, keyslot};
use crate::helpers::{
    error_text, expect_error, expect_refusal, pexpiretime, run, snapshot, wait_replicas,
    write_marks,
};
use crate::server::{Server, caught_up, primary_and_replica, wait_until};

/// A regional reply: the five fields, why, and the lease's units left.
#[derive(Debug, PartialEq)]
struct Regional {
    fields: [i64; 5],
    why: String,
    lease_units: i64,
}

fn regional(con: &mut redis::Connection, floor: &str, lease: &str, args: &[&str]) -> Regional {
    let reply: Value = redis::cmd("RL.REGIONAL")
        .arg(floor)
        .arg(lease)
        .arg(args)
        .query(con)
        .unwrap();
    let Value::Array(items) = reply else {
        panic!("an array: {reply:?}")
    };
    assert_eq!(items.len(), 7, "{items:?}");
    let int = |value: &Value| match value {
        Value::Int(n) => *n,
        other => panic!("an integer: {other:?}"),
    };
    let why = match &items[5] {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("a bulk string: {other:?}"),
    };
    Regional {
        fields: std::array::from_fn(|i| int(&items[i])),
        why,
        lease_units: int(&items[6]),
    }
}

fn install(con: &mut redis::Connection, key: &str, units: u64, expires_at_ms: i64) -> i64 {
    redis::cmd("RL.REGIONLEASE")
        .arg(key)
        .arg(units)
        .arg(expires_at_ms)
        .query(con)
        .unwrap()
}

fn server_ms(con: &mut redis::Connection) -> i64 {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    seconds * 1_000 + micros / 1_000
}

/// The floors every algorithm but in-flight limits can be (those: below): 2 units, slow to
/// come back.
const FLOORS: &[&[&str]] = &[
    &["TOKENBUCKET", "2", "0.001"],
    &["SLIDING", "2", "86400"],
    &["FIXED", "2", "86400"],
    &["SLIDINGLOG", "2", "86400"],
    &["GCRA", "1", "1", "3600"],
];

#[test]
fn the_floor_then_the_lease_then_why_not_and_replicas_hold_the_same() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    let mut keys = Vec::new();
    for (index, floor) in FLOORS.iter().enumerate() {
        let (floor_key, lease_key) = (format!("{{r{index}}}floor"), format!("{{r{index}}}lease"));
        // No lease yet: the floor alone, and once it denies, home is unreachable.
        for _ in 0..2 {
            let admitted = regional(&mut con, &floor_key, &lease_key, floor);
            assert_eq!(
                (admitted.fields[0], admitted.why.as_str()),
                (1, "floor"),
                "{floor:?}"
            );
        }
        let cut_off = regional(&mut con, &floor_key, &lease_key, floor);
        assert_eq!(
            (cut_off.fields[0], cut_off.why.as_str(), cut_off.lease_units),
            (0, "home_unreachable", 0),
            "{floor:?}"
        );
        assert!(
            cut_off.fields[2] > 0,
            "{floor:?}: the floor's retry is shown"
        );
        // A lease of 3 units for a minute: spent one call at a time, then exhausted.
        let end_ms = server_ms(&mut con) + 60_000;
        assert_eq!(install(&mut con, &lease_key, 3, end_ms), 0);
        let lease_paid: Vec<(i64, String, i64)> = (0..4)
            .map(|_| {
                let reply = regional(&mut con, &floor_key, &lease_key, floor);
                (reply.fields[0], reply.why, reply.lease_units)
            })
            .collect();
        assert_eq!(
            lease_paid,
            [
                (1, "lease".into(), 2),
                (1, "lease".into(), 1),
                (1, "lease".into(), 0),
                (0, "lease_exhausted".into(), 0)
            ],
            "{floor:?}"
        );
        assert_eq!(
            pexpiretime(&mut con, &lease_key),
            end_ms,
            "the lease keeps its end"
        );
        // A cost the lease cannot cover whole is denied, and takes nothing.
        assert_eq!(
            install(&mut con, &lease_key, 2, end_ms),
            0,
            "nothing was left"
        );
        let mut costly: Vec<&str> = floor.to_vec();
        costly.push("3");
        let short = regional(&mut con, &floor_key, &lease_key, &costly);
        assert_eq!(
            (short.fields[0], short.why.as_str(), short.lease_units),
            (0, "lease_exhausted", 2)
        );
        assert_eq!(
            install(&mut con, &lease_key, 5, end_ms),
            2,
            "the replaced lease had 2 left"
        );
        keys.push(floor_key);
        keys.push(lease_key);
    }
    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    assert!(caught_up(&mut con, &mut replica_con));
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
    let stats: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    assert!(stats.contains("ratelimit_regional_admitted:"), "{stats}");
}

/// An in-flight call: `RL.REGIONAL floor lease CONCURRENCY limit holder ttl_ms`, the reply's
/// admitted, why and free leased slots.
fn in_flight(
    con: &mut redis::Connection,
    keys: (&str, &str),
    limit: &str,
    holder: &str,
    ttl_ms: &str,
) -> (i64, String, i64) {
    let reply = regional(con, keys.0, keys.1, &["CONCURRENCY", limit, holder, ttl_ms]);
    (reply.fields[0], reply.why, reply.lease_units)
}

fn free_slots(con: &mut redis::Connection, floor: &str, limit: u64) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(floor)
        .arg("CONCURRENCY")
        .arg(limit)
        .query(con)
        .unwrap();
    reply[1]
}

#[test]
fn in_flight_calls_take_the_floor_then_leased_slots_ending_by_the_lease() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    let keys = ("{i}floor", "{i}lease");
    let call = |con: &mut redis::Connection, holder: &str, ttl_ms: &str| {
        in_flight(con, keys, "1", holder, ttl_ms)
    };
    // No lease yet: the floor alone (a holder renews, never counted twice), then home is
    // unreachable.
    assert_eq!(call(&mut con, "a", "60000"), (1, "floor".into(), 0));
    assert_eq!(call(&mut con, "a", "60000"), (1, "floor".into(), 0));
    assert_eq!(
        call(&mut con, "b", "1000"),
        (0, "home_unreachable".into(), 0)
    );
    // A lease of 2 slots for 30 s: a call whose holder would outlive it is refused.
    let end_ms = server_ms(&mut con) + 30_000;
    assert_eq!(install(&mut con, keys.1, 2, end_ms), 0);
    assert_eq!(
        call(&mut con, "b", "60000"),
        (0, "lease_exhausted".into(), 2)
    );
    assert_eq!(call(&mut con, "b", "1000"), (1, "lease".into(), 1));
    assert_eq!(call(&mut con, "c", "1000"), (1, "lease".into(), 0));
    assert_eq!(
        call(&mut con, "b", "2000"),
        (1, "lease".into(), 0),
        "a renewal"
    );
    assert_eq!(
        call(&mut con, "d", "1000"),
        (0, "lease_exhausted".into(), 0)
    );
    let denied = regional(&mut con, keys.0, keys.1, &["CONCURRENCY", "1", "d", "1000"]);
    // The floor as it stands: no slot, free again once all three holders go (the floor's
    // own, a minute long, last), its limit.
    assert_eq!((denied.fields[1], denied.fields[4]), (0, 1));
    assert!(
        denied.fields[2] > 50_000 && denied.fields[3] >= denied.fields[2],
        "{denied:?}"
    );
    // Every holder lives in the floor's key; the lease is only read.
    assert_eq!(free_slots(&mut con, keys.0, 10), 7);
    let units: String = redis::cmd("GET").arg(keys.1).query(&mut con).unwrap();
    assert_eq!(
        (units.as_str(), pexpiretime(&mut con, keys.1)),
        ("2", end_ms)
    );
    // A release gives the leased slot back.
    let released: i64 = redis::cmd("RL.RELEASE")
        .arg(keys.0)
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(call(&mut con, "d", "1000"), (1, "lease".into(), 0));
    let keys = vec![keys.0.to_string(), keys.1.to_string()];
    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    assert!(caught_up(&mut con, &mut replica_con));
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
}

#[test]
fn an_in_flight_lease_lapses_and_the_floor_decides_alone() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let keys = ("{j}floor", "{j}lease");
    assert_eq!(in_flight(&mut con, keys, "1", "a", "60000").1, "floor");
    let end_ms = server_ms(&mut con) + 500;
    install(&mut con, keys.1, 1, end_ms);
    assert_eq!(in_flight(&mut con, keys, "1", "b", "100").1, "lease");
    assert!(wait_until(Duration::from_secs(5), || {
        in_flight(&mut con, keys, "1", "c", "1").1 == "home_unreachable"
    }));
    assert!(server_ms(&mut con) >= end_ms, "lapsed only at its end");
    assert_eq!(
        free_slots(&mut con, keys.0, 1),
        0,
        "the floor's own holder stays"
    );
}

#[test]
fn a_lapsed_lease_is_never_spent() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let floor = ["FIXED", "1", "86400"];
    assert_eq!(regional(&mut con, "{l}f", "{l}l", &floor).why, "floor");
    let end_ms = server_ms(&mut con) + 300;
    install(&mut con, "{l}l", 100, end_ms);
    assert_eq!(regional(&mut con, "{l}f", "{l}l", &floor).why, "lease");
    assert!(wait_until(Duration::from_secs(5), || {
        regional(&mut con, "{l}f", "{l}l", &floor).why == "home_unreachable"
    }));
    assert!(server_ms(&mut con) >= end_ms, "lapsed only at its end");
    // Installing a lease that has already ended is refused, and changes nothing.
    let marks = write_marks(&mut con);
    let past = (server_ms(&mut con) - 1).to_string();
    assert_eq!(
        expect_error(
            &mut con,
            &[b"RL.REGIONLEASE", b"{l}l", b"5", past.as_bytes()]
        ),
        format!(
            "ERR expires_at_ms must be after the server's time (the lease would have ended) (got '{past}')"
        )
    );
    assert_eq!(write_marks(&mut con), marks);
}

#[test]
fn bad_arguments_and_other_types_change_nothing() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let _: () = redis::cmd("RPUSH")
        .arg("{e}list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}text")
        .arg("hello")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}forever")
        .arg("5")
        .query(&mut con)
        .unwrap();
    let _: Vec<i64> = redis::cmd("RL.FIXED")
        .arg("{e}limiter")
        .arg(5)
        .arg(60)
        .query(&mut con)
        .unwrap();
    let later = (server_ms(&mut con) + 60_000).to_string();
    let later = later.as_bytes();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let not_a_lease = "ERR the lease key holds a string that is not a lease (units with an expiry)";
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (
            vec![b"RL.REGIONAL", b"{e}list", b"{e}l", b"FIXED", b"5", b"60"],
            wrongtype,
        ),
        (
            vec![b"RL.REGIONAL", b"{e}f", b"{e}list", b"FIXED", b"5", b"60"],
            wrongtype,
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}f",
                b"{e}limiter",
                b"FIXED",
                b"5",
                b"60",
            ],
            wrongtype,
        ),
        (
            vec![b"RL.REGIONAL", b"{e}f", b"{e}text", b"FIXED", b"5", b"60"],
            not_a_lease,
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}f",
                b"{e}forever",
                b"FIXED",
                b"5",
                b"60",
            ],
            not_a_lease,
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}limiter",
                b"{e}l",
                b"TOKENBUCKET",
                b"5",
                b"1",
            ],
            "ERR key holds a fixed window, not a token bucket: use the matching command or delete the key",
        ),
        (
            vec![b"RL.REGIONAL", b"{e}f", b"{e}f", b"FIXED", b"5", b"60"],
            "ERR RL.REGIONAL needs two keys: the floor's limiter and the lease (the same key was given twice)",
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}f",
                b"{e}l",
                b"CONCURRENCY",
                b"5",
                b"60",
            ],
            "ERR wrong number of arguments for 'rl.regional' command",
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}limiter",
                b"{e}l",
                b"CONCURRENCY",
                b"5",
                b"h",
                b"60",
            ],
            "ERR key holds a fixed window, not an in-flight limit: use the matching command or delete the key",
        ),
        (
            vec![
                b"RL.REGIONAL",
                b"{e}f",
                b"{e}text",
                b"CONCURRENCY",
                b"5",
                b"h",
                b"60",
            ],
            not_a_lease,
        ),
        (
            vec![b"RL.REGIONAL", b"{e}f", b"{e}l", b"FIXED", b"0", b"60"],
            "ERR limit must be greater than 0 (got '0')",
        ),
        (
            vec![b"RL.REGIONAL", b"{e}f", b"{e}l", b"FIXED", b"5"],
            "ERR wrong number of arguments for 'rl.regional' command",
        ),
        (vec![b"RL.REGIONLEASE", b"{e}list", b"5", later], wrongtype),
        (
            vec![b"RL.REGIONLEASE", b"{e}limiter", b"5", later],
            wrongtype,
        ),
        (
            vec![b"RL.REGIONLEASE", b"{e}text", b"5", later],
            not_a_lease,
        ),
        (
            vec![b"RL.REGIONLEASE", b"{e}l", b"-5", later],
            "ERR units must be at least 0 (got '-5')",
        ),
        (
            vec![b"RL.REGIONLEASE", b"{e}l", b"5", b"0"],
            "ERR expires_at_ms must be greater than 0 (got '0')",
        ),
    ];
    let keys: Vec<String> = ["list", "text", "forever", "limiter", "f", "l"]
        .iter()
        .map(|name| format!("{{e}}{name}"))
        .collect();
    let before = snapshot(&mut con, &keys);
    for (args, error) in cases {
        let marks = write_marks(&mut con);
        assert_eq!(
            expect_error(&mut con, &args),
            error,
            "{:?}",
            String::from_utf8_lossy(&args.join(&b' '))
        );
        assert_eq!(
            write_marks(&mut con),
            marks,
            "{:?} wrote something",
            String::from_utf8_lossy(&args.join(&b' '))
        );
        // The same refusal whatever the command remembered (after a call that parsed the
        // same arguments on other keys), and nothing written by it.
        assert_eq!(expect_refusal(&mut con, &args), error);
    }
    assert_eq!(snapshot(&mut con, &keys), before);
}

#[test]
fn an_aof_replays_floors_and_leases_exactly() {
    let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    let mut keys = Vec::new();
    let end_ms = server_ms(&mut con) + 600_000;
    for (index, floor) in FLOORS.iter().enumerate() {
        let (floor_key, lease_key) = (format!("{{a{index}}}floor"), format!("{{a{index}}}lease"));
        install(&mut con, &lease_key, 2, end_ms);
        for _ in 0..3 {
            regional(&mut con, &floor_key, &lease_key, floor);
        }
        keys.push(floor_key);
        keys.push(lease_key);
    }
    // An in-flight floor: a holder on the floor, two on the lease, one renewed.
    let in_flight_keys = ("{ai}floor", "{ai}lease");
    install(&mut con, in_flight_keys.1, 2, end_ms);
    for holder in ["a", "b", "c", "b"] {
        assert_eq!(
            in_flight(&mut con, in_flight_keys, "1", holder, "300000").0,
            1
        );
    }
    keys.push(in_flight_keys.0.to_string());
    keys.push(in_flight_keys.1.to_string());
    let before = snapshot(&mut con, &keys);
    // A real pause, the time being what is tested: a replay that recomputed with the clock at
    // load time would differ. Real time, not the test hook's offset: that moves only the
    // module's clock, and a replay could as well read Redis's (a relative expiry).
    std::thread::sleep(Duration::from_millis(1100));
    run(&mut con, "DEBUG LOADAOF");
    assert_eq!(snapshot(&mut con, &keys), before);
}

#[test]
fn a_cluster_routes_both_keys_and_refuses_two_slots() {
    let cluster = Cluster::start(3, 0);
    let primaries = cluster.primaries();
    let owner = primaries[0];
    let tag = cluster.tag_on(owner, "regional");
    let other = cluster.tag_on(owner, "regional-other");
    assert_ne!(keyslot(&tag), keyslot(&other));
    let mut con = owner.conn();
    let floor = ["TOKENBUCKET", "1", "1"];
    let served = regional(
        &mut con,
        &format!("{tag}:floor"),
        &format!("{tag}:lease"),
        &floor,
    );
    assert_eq!(served.why, "floor");
    let cross: Result<Value, _> = redis::cmd("RL.REGIONAL")
        .arg(format!("{tag}:floor2"))
        .arg(format!("{other}:lease"))
        .arg(&floor)
        .query(&mut con);
    assert_eq!(
        error_text(&cross.unwrap_err()),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    let moved: Result<Value, _> = redis::cmd("RL.REGIONAL")
        .arg(format!("{tag}:floor"))
        .arg(format!("{tag}:lease"))
        .arg(&floor)
        .query(&mut primaries[1].conn());
    assert_eq!(
        error_text(&moved.unwrap_err()),
        format!("MOVED {} 127.0.0.1:{}", keyslot(&tag), owner.port)
    );
}
