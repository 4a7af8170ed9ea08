//! Replicas and the AOF receive the primary's computed state (effects), never the command.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::helpers::{
    commandstat_calls, error_text, keys, mixed_traffic, run, snapshot, token_bucket, wait_replicas,
    write_marks,
};
use crate::server::{Server, info_int, primary_and_replica, wait_until};

/// Whether the server on `port` is busy (a `DEBUG SLEEP`): an inline `PING` on a raw socket
/// gets no answer within 50 ms (a client library would wait on its own handshake). The ping
/// is answered once the server wakes, on a connection dropped by then.
fn asleep(port: u16) -> bool {
    let mut probe = TcpStream::connect(("127.0.0.1", port)).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    probe.write_all(b"PING\r\n").unwrap();
    probe.read(&mut [0u8; 16]).is_err()
}

#[test]
fn a_lagging_replica_ends_byte_identical() {
    let (primary, replica) = primary_and_replica();
    let keys = keys("lag", 10);
    // The replica stops processing for 2 s while the primary keeps computing: a replica that
    // recomputed the command with its own (later) clock would refill more.
    let port = replica.port;
    let sleeper = std::thread::spawn(move || {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        run(&mut con, "DEBUG SLEEP 2");
    });
    assert!(
        wait_until(Duration::from_secs(5), || asleep(port)),
        "the replica never went to sleep"
    );
    let mut con = primary.conn();
    mixed_traffic(&mut con, &keys);
    sleeper.join().unwrap();
    assert_eq!(wait_replicas(&mut con), 1);

    let mut replica_con = replica.conn();
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
    assert_eq!(
        commandstat_calls(&mut replica_con, "rl.tokenbucket"),
        0,
        "never re-executed"
    );
    assert!(commandstat_calls(&mut replica_con, "rl.fx") > 0);
    assert_eq!(
        info_int(&mut replica_con, "stats", "unexpected_error_replies"),
        0
    );
}

#[test]
fn denied_calls_propagate_nothing() {
    let (primary, _replica) = primary_and_replica();
    let mut con = primary.conn();
    token_bucket(&mut con, "k", 2, "0.001", 2);
    assert_eq!(wait_replicas(&mut con), 1);
    let marks = write_marks(&mut con);
    for _ in 0..20 {
        assert_eq!(token_bucket(&mut con, "k", 2, "0.001", 1)[0], 0);
        assert_eq!(token_bucket(&mut con, "k", 2, "0.001", 3)[0], 0);
    }
    assert_eq!(
        write_marks(&mut con),
        marks,
        "denials wrote and propagated nothing"
    );
    // An admitted call does propagate, and counts as a change for RDB save points.
    token_bucket(&mut con, "other", 2, "1", 1);
    let after = write_marks(&mut con);
    assert!(after.repl_offset > marks.repl_offset);
    assert_eq!(after.changes, marks.changes + 1);
}

#[test]
fn the_replica_refuses_writes() {
    let (_primary, replica) = primary_and_replica();
    let mut con = replica.conn();
    let error = redis::cmd("RL.TOKENBUCKET")
        .arg("k")
        .arg(1)
        .arg(1)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(
        error_text(&error).starts_with("READONLY"),
        "{}",
        error_text(&error)
    );
}

#[test]
fn multi_exec_and_scripts_replicate_their_effects() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    let replies: Vec<Vec<i64>> = redis::pipe()
        .atomic()
        .cmd("RL.TOKENBUCKET")
        .arg("m")
        .arg(3)
        .arg(1)
        .cmd("RL.TOKENBUCKET")
        .arg("m")
        .arg(3)
        .arg(1)
        .arg(2)
        .cmd("RL.TOKENBUCKET")
        .arg("m")
        .arg(3)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(replies.iter().map(|r| r[0]).collect::<Vec<_>>(), [1, 1, 0]);
    let scripted: Vec<i64> = redis::cmd("EVAL")
        .arg("redis.call('RL.TOKENBUCKET', KEYS[1], 5, 1, 2); return redis.call('RL.TOKENBUCKET', KEYS[1], 5, 1, 2)")
        .arg(1)
        .arg("s")
        .query(&mut con)
        .unwrap();
    assert_eq!(scripted[..2], [1, 1]);
    assert_eq!(wait_replicas(&mut con), 1);
    let keys = vec!["m".to_string(), "s".to_string()];
    let mut replica_con = replica.conn();
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
    assert_eq!(
        info_int(&mut replica_con, "stats", "unexpected_error_replies"),
        0
    );
}

#[test]
fn a_full_sync_carries_the_state() {
    let primary = Server::start(&[]);
    let mut con = primary.conn();
    let keys = keys("sync", 20);
    mixed_traffic(&mut con, &keys);
    let replica = Server::start(&["--propagation-error-behavior", "panic"]);
    replica.replicate_from(&primary);
    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
    assert!(!replica.log().contains("Skipping diskless-load"));
}
