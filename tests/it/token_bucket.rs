//! `RL.TOKENBUCKET` semantics through a real server.

use std::time::Duration;

use crate::helpers::{pexpiretime, set_module_clock_offset_ms, token_bucket};
use crate::server::{Server, wait_until};

#[test]
fn a_fresh_key_is_a_full_bucket() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let [allowed, remaining, retry, reset, limit] = token_bucket(&mut con, "k", 10, "2", 3);
    assert_eq!((allowed, remaining, retry, limit), (1, 7, 0, 10));
    assert!(
        (1490..=1500).contains(&reset),
        "3 tokens at 2/s refill in 1500 ms, got {reset}"
    );
}

#[test]
fn drains_then_denies_and_waiting_retry_after_is_enough() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // One token per second: the three calls fit well within one refill even on a busy
    // machine.
    assert_eq!(token_bucket(&mut con, "k", 2, "1", 1)[..2], [1, 1]);
    assert_eq!(token_bucket(&mut con, "k", 2, "1", 1)[..2], [1, 0]);
    let [allowed, remaining, retry, reset, _] = token_bucket(&mut con, "k", 2, "1", 1);
    assert_eq!((allowed, remaining), (0, 0));
    assert!(
        (1..=1000).contains(&retry),
        "one token at 1/s: at most 1000 ms, got {retry}"
    );
    assert!(reset >= retry);
    // The behaviour under test: a client that waits retry_after_ms and calls again must be
    // admitted. The module's clock is moved on by that much (the test hook's fake clock)
    // instead of waiting it out; the real time between the calls only adds to it.
    set_module_clock_offset_ms(&mut con, retry);
    assert_eq!(token_bucket(&mut con, "k", 2, "1", 1)[0], 1);
}

#[test]
fn cost_above_capacity_is_denied_forever_and_creates_nothing() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(token_bucket(&mut con, "k", 5, "1", 6), [0, 5, -1, 0, 5]);
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut con).unwrap();
    assert_eq!(exists, 0, "a denied call writes nothing");
}

#[test]
fn the_key_expires_exactly_when_the_bucket_is_full_again() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let server_ms = |con: &mut redis::Connection| -> i64 {
        let time: Vec<String> = redis::cmd("TIME").query(con).unwrap();
        time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
    };
    // The call happened between two readings of the server's TIME (a fixed tolerance around
    // one reading fails when the machine is busy).
    let before = server_ms(&mut con);
    let [_, _, _, reset, _] = token_bucket(&mut con, "k", 4, "1", 2);
    let after = server_ms(&mut con);
    let expire_at = pexpiretime(&mut con, "k");
    assert!(
        (before - 1..=after + 1).contains(&(expire_at - reset)),
        "expiry {expire_at} - reset {reset} outside [{before}, {after}]"
    );

    // An idle limiter disappears by itself once full (active expiry).
    let [_, _, _, reset, _] = token_bucket(&mut con, "short", 1, "20", 1);
    assert!(reset <= 50);
    assert!(wait_until(Duration::from_secs(5), || {
        redis::cmd("EXISTS")
            .arg("short")
            .query::<i64>(&mut con)
            .unwrap()
            == 0
    }));
    assert_eq!(
        token_bucket(&mut con, "short", 1, "20", 1)[..2],
        [1, 0],
        "indistinguishable from full"
    );
}

#[test]
fn changed_parameters_clamp_tokens_to_the_new_capacity() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(token_bucket(&mut con, "k", 10, "0.001", 1)[..2], [1, 9]);
    assert_eq!(token_bucket(&mut con, "k", 5, "0.001", 1)[..2], [1, 4]);
    assert_eq!(
        token_bucket(&mut con, "k", 50, "0.001", 1)[..2],
        [1, 3],
        "no tokens appear"
    );
}

#[test]
fn resp3_clients_get_the_same_array() {
    let server = Server::start(&[]);
    let mut con = server.conn_resp3();
    let reply: redis::Value = redis::cmd("RL.TOKENBUCKET")
        .arg("k")
        .arg(3)
        .arg(1)
        .query(&mut con)
        .unwrap();
    let redis::Value::Array(items) = reply else {
        panic!("expected an array, got {reply:?}")
    };
    let integers: Vec<i64> = items
        .iter()
        .map(|item| match item {
            redis::Value::Int(v) => *v,
            other => panic!("expected integers, got {other:?}"),
        })
        .collect();
    assert_eq!(integers, [1, 2, 0, 1000, 3]);
}

#[test]
fn any_key_bytes_work() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let binary: &[u8] = b"k\0\r\n\xff";
    let big = vec![b'x'; 512 * 1024];
    for key in [binary, &big[..], "clé-ü".as_bytes()] {
        let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
            .arg(key)
            .arg(2)
            .arg(1)
            .query(&mut con)
            .unwrap();
        assert_eq!(reply[..2], [1, 1]);
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
        assert!(ttl > 0);
    }
}
