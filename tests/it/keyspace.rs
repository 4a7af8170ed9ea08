//! Limiters as ordinary keys: TYPE/SCAN, renames and moves, user TTL changes, lazy expiry,
//! other databases, and the module staying loaded while it owns data.

use std::time::Duration;

use crate::helpers::{dump, error_text, pexpiretime, run, snapshot, token_bucket, wait_replicas};
use crate::server::{Server, primary_and_replica, wait_until};

#[test]
fn limiters_are_typed_keys_that_move_intact() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "a", 10, "1", 4);
    let state = (dump(&mut con, "a"), pexpiretime(&mut con, "a"));
    let kind: String = redis::cmd("TYPE").arg("a").query(&mut con).unwrap();
    assert_eq!(kind, "ratelimit");
    let (_, found): (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("TYPE")
        .arg("ratelimit")
        .query(&mut con)
        .unwrap();
    assert_eq!(found, ["a"]);

    run(&mut con, "RENAME a b");
    assert_eq!((dump(&mut con, "b"), pexpiretime(&mut con, "b")), state);
    let moved: i64 = redis::cmd("MOVE").arg("b").arg(1).query(&mut con).unwrap();
    assert_eq!(moved, 1);
    run(&mut con, "SWAPDB 0 1");
    assert_eq!((dump(&mut con, "b"), pexpiretime(&mut con, "b")), state);
    assert_eq!(
        token_bucket(&mut con, "b", 10, "1", 1)[..2],
        [1, 5],
        "still the same bucket"
    );
}

#[test]
fn user_ttl_changes_reset_or_keep_the_limiter() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "k", 10, "0.001", 9);
    // PERSIST keeps the state; the next admitted call sets the expiry again.
    let _: i64 = redis::cmd("PERSIST").arg("k").query(&mut con).unwrap();
    assert_eq!(pexpiretime(&mut con, "k"), -1);
    assert_eq!(token_bucket(&mut con, "k", 10, "0.001", 1)[..2], [1, 0]);
    assert!(pexpiretime(&mut con, "k") > 0);
    // Expiring (or deleting) the key early resets the limiter to unused: it fails open.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("k")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        redis::cmd("EXISTS")
            .arg("k")
            .query::<i64>(&mut con)
            .unwrap()
            == 0
    }));
    assert_eq!(token_bucket(&mut con, "k", 10, "0.001", 1)[..2], [1, 9]);
}

#[test]
fn a_logically_expired_key_is_a_missing_limiter() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    run(&mut con, "DEBUG SET-ACTIVE-EXPIRE 0");
    let [_, _, _, reset, _] = token_bucket(&mut con, "k", 1, "50", 1);
    assert!(reset <= 20);
    std::thread::sleep(Duration::from_millis(reset as u64 + 5)); // the expiry itself is under test
    let peeked: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(&["k", "TOKENBUCKET", "1", "50"])
        .query(&mut con)
        .unwrap();
    assert_eq!(peeked[..2], [1, 0], "a peek sees a full bucket");
    assert_eq!(token_bucket(&mut con, "k", 1, "50", 1)[..2], [1, 0]);
}

#[test]
fn other_databases_replicate_too() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    run(&mut con, "SELECT 3");
    token_bucket(&mut con, "k", 10, "1", 2);
    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    run(&mut replica_con, "SELECT 3");
    let keys = vec!["k".to_string()];
    assert_eq!(snapshot(&mut replica_con, &keys), snapshot(&mut con, &keys));
}

#[test]
fn the_module_cannot_be_unloaded_while_it_owns_a_type() {
    let mut server = Server::start(&["--enable-module-command", "yes"]);
    let mut con = server.conn();
    let error = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("ratelimit")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        error_text(&error).contains("data types"),
        "{}",
        error_text(&error)
    );
    assert!(server.is_alive());
}
