//! `CL.THROTTLE`: a drop-in for redis-cell, with the server clock and effects replication.

use crate::helpers::{dump, expect_refusal, wait_replicas};
use crate::server::{Server, info_field, primary_and_replica};

fn throttle(con: &mut redis::Connection, key: &str, args: &[&str]) -> Vec<i64> {
    redis::cmd("CL.THROTTLE")
        .arg(key)
        .arg(args)
        .query(con)
        .unwrap()
}

#[test]
fn replies_like_redis_cell() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // redis-cell's README: 15 burst, 30 per 60 s → limit 16, one token every 2 s.
    assert_eq!(
        throttle(&mut con, "user123", &["15", "30", "60", "1"]),
        [0, 16, 15, -1, 2]
    );
    for remaining in (0..15).rev() {
        let reply = throttle(&mut con, "user123", &["15", "30", "60"]);
        assert_eq!(reply[..4], [0, 16, remaining, -1]);
    }
    let [limited, limit, remaining, retry, reset] =
        throttle(&mut con, "user123", &["15", "30", "60"])[..]
    else {
        panic!()
    };
    assert_eq!((limited, limit, remaining), (1, 16, 0));
    assert!(
        (1..=2).contains(&retry),
        "whole seconds, rounded up: {retry}"
    );
    assert!((31..=32).contains(&reset), "{reset}");
    // A quantity above the limit can never pass: retry -1 (redis-cell's reply).
    assert_eq!(
        throttle(&mut con, "other", &["15", "30", "60", "17"])[..4],
        [1, 16, 16, -1]
    );
    let exists: i64 = redis::cmd("EXISTS").arg("other").query(&mut con).unwrap();
    assert_eq!(exists, 0, "denied calls write nothing");
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_throttle_admitted").as_deref(),
        Some("16")
    );
}

#[test]
fn replicates_effects_and_refuses_bad_input() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    throttle(&mut con, "k", &["5", "10", "3600", "3"]);
    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    assert_eq!(dump(&mut replica_con, "k"), dump(&mut con, "k"));
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut replica_con)
        .unwrap();
    assert!(
        !stats.contains("cmdstat_cl.throttle"),
        "never re-executed on the replica"
    );

    let cases: &[(&[&str], &str)] = &[
        (
            &["k", "x", "1", "1"],
            "ERR max_burst must be an integer (got 'x')",
        ),
        (
            &["k", "-1", "1", "1"],
            "ERR max_burst must be at least 0 (got '-1')",
        ),
        (
            &["k", "1", "0", "1"],
            "ERR count / period must be a non-zero rate of at most 1e9 per second (zero rates are not supported)",
        ),
        (
            &["k", "1", "1", "1", "1.5"],
            "ERR quantity must be an integer (got '1.5')",
        ),
        (
            &["k", "1", "1"],
            "ERR wrong number of arguments for 'cl.throttle' command",
        ),
    ];
    for (args, expected) in cases {
        let mut all: Vec<&[u8]> = vec![b"CL.THROTTLE"];
        all.extend(args.iter().map(|a| a.as_bytes()));
        assert_eq!(expect_refusal(&mut con, &all), *expected);
    }
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.PEEK", b"k", b"TOKENBUCKET", b"1", b"1"]),
        "ERR key holds a CL.THROTTLE (GCRA), not a token bucket: use the matching command or delete the key"
    );
}
