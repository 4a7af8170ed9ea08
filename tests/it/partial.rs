//! Partial grants (`PARTIAL [MIN m]`): take what is available up to the cost, in whole
//! units, at least `m`, else nothing. What a lease holder claims, and gives back with
//! `RL.REFUND`.

use crate::helpers::{dump, multi, words};
use crate::server::Server;

/// The algorithms with their limit of 10 units, slow enough that nothing refills or slides
/// during a test.
const LIMITERS: [(&str, &str, [&str; 2]); 4] = [
    ("RL.TOKENBUCKET", "TOKENBUCKET", ["10", "0.001"]),
    ("RL.SLIDING", "SLIDING", ["10", "86400"]),
    ("RL.FIXED", "FIXED", ["10", "86400"]),
    ("RL.SLIDINGLOG", "SLIDINGLOG", ["10", "86400"]),
];

fn call(con: &mut redis::Connection, command: &str, key: &str, args: &[&str]) -> [i64; 5] {
    let reply: Vec<i64> = redis::cmd(command).arg(key).arg(args).query(con).unwrap();
    reply.try_into().unwrap()
}

#[test]
fn partial_grants_at_every_boundary() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for (command, algorithm, params) in LIMITERS {
        let key = |case: &str| format!("{command}:{case}");
        let with = |rest: &[&'static str]| {
            let mut args = params.to_vec();
            args.extend(rest);
            args
        };
        // Each case starts from a limiter with 3 units left.
        let drained = |con: &mut redis::Connection, case: &str| {
            assert_eq!(call(con, command, &key(case), &with(&["7"]))[0], 1);
        };
        drained(&mut con, "exact");
        let reply = call(&mut con, command, &key("exact"), &with(&["3", "PARTIAL"]));
        assert_eq!(reply[..3], [3, 0, 0], "{command}: exactly available");

        drained(&mut con, "short");
        let reply = call(&mut con, command, &key("short"), &with(&["4", "PARTIAL"]));
        assert_eq!(reply[..3], [3, 0, 0], "{command}: one short");

        drained(&mut con, "min");
        let before = dump(&mut con, &key("min"));
        let reply = call(
            &mut con,
            command,
            &key("min"),
            &with(&["5", "PARTIAL", "MIN", "4"]),
        );
        assert_eq!(
            reply[..2],
            [0, 3],
            "{command}: MIN above available grants nothing"
        );
        assert!(reply[2] > 0, "{command}: retry for 4 units");
        assert_eq!(
            dump(&mut con, &key("min")),
            before,
            "{command}: nothing written"
        );
        let reply = call(
            &mut con,
            command,
            &key("min"),
            &with(&["5", "PARTIAL", "MIN", "3"]),
        );
        assert_eq!(reply[..2], [3, 0], "{command}: MIN exactly available");

        // A peek reports the grant and writes nothing; a refund gives unused units back.
        drained(&mut con, "lease");
        let mut peek_args = vec![algorithm];
        peek_args.extend(with(&["8", "PARTIAL"]));
        let peeked = call(&mut con, "RL.PEEK", &key("lease"), &peek_args);
        assert_eq!(peeked[0], 3, "{command}: peek");
        let reply = call(&mut con, command, &key("lease"), &with(&["8", "PARTIAL"]));
        assert_eq!(
            (reply[..3].to_vec(), reply[4]),
            (peeked[..3].to_vec(), peeked[4]),
            "{command}: the call gets what the peek said"
        );
        assert!(
            (0..=100).contains(&(peeked[3] - reply[3])),
            "{command}: reset counts down between the peek and the call"
        );
        let mut refund_args = vec![algorithm];
        refund_args.extend(with(&["2"]));
        assert_eq!(
            call(&mut con, "RL.REFUND", &key("lease"), &refund_args)[..2],
            [1, 2]
        );
        let reply = call(&mut con, command, &key("lease"), &with(&["8", "PARTIAL"]));
        assert_eq!(reply[0], 2, "{command}: refunded units are granted again");
    }
}

#[test]
fn a_multi_limit_call_grants_the_same_units_from_every_limit() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Requests (10) and weighted bytes (30, weight 5): 6 of a requested 8 units fit the
    // bytes limit (6 × 5 = 30).
    let args = words(
        "2 {l}:requests {l}:bytes FIXED 10 86400 TOKENBUCKET 30 0.001 COST 8 WEIGHTS 1 5 PARTIAL",
    );
    let reply = multi(&mut con, &args);
    assert_eq!(reply.fields[..2], [6, 4]);
    assert_eq!(
        reply.binding, 0,
        "neither has a call of this cost left: the tie goes to the first"
    );
    assert_eq!(reply.per_limit[0][1], 4, "requests charged 6");
    assert_eq!(reply.per_limit[1][1], 0, "bytes charged 30");
    let requests_before = dump(&mut con, "{l}:requests");
    let reply = multi(&mut con, &args);
    assert_eq!(reply.fields[0], 0, "nothing left in the bytes limit");
    assert_eq!(
        dump(&mut con, "{l}:requests"),
        requests_before,
        "so nothing is charged"
    );
}
