//! What Redis and its tooling see of the commands: key specs, flags, INFO, notifications.

use std::time::Duration;

use crate::helpers::token_bucket;
use crate::server::{Server, info_field};

#[test]
fn keys_are_declared_for_acl_and_cluster_routing() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.TOKENBUCKET")
        .arg("the-key")
        .arg(10)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["the-key"]);
    let info: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("rl.tokenbucket")
        .query(&mut con)
        .unwrap();
    let text = format!("{info:?}");
    for expected in ["write", "denyoom", "fast", "RW", "access", "update"] {
        assert!(text.contains(expected), "{expected} missing from {text}");
    }
    let redis::Value::Array(outer) = info else {
        panic!()
    };
    let redis::Value::Array(fields) = &outer[0] else {
        panic!()
    };
    assert_eq!(fields[1], redis::Value::Int(-4), "arity");
}

#[test]
fn info_counts_admitted_and_denied_calls() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for _ in 0..3 {
        token_bucket(&mut con, "k", 2, "0.001", 1);
    }
    let field = |con: &mut redis::Connection, name: &str| info_field(con, "ratelimit", name);
    assert_eq!(
        field(&mut con, "ratelimit_tokenbucket_admitted").as_deref(),
        Some("2")
    );
    assert_eq!(
        field(&mut con, "ratelimit_tokenbucket_denied").as_deref(),
        Some("1")
    );
}

#[test]
fn writes_emit_keyspace_events_and_signal_watchers() {
    let server = Server::start(&["--notify-keyspace-events", "KEd"]);
    let mut subscriber = server.conn();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut con = server.conn();
    token_bucket(&mut con, "k", 1, "0.001", 1);
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), "__keyevent@0__:rl.tokenbucket");
    assert_eq!(message.get_payload::<String>().unwrap(), "k");

    // WATCH: a denied call changes nothing, so it does not abort a transaction, while an
    // admitted one does ("k" is spent above, "k2" is fresh).
    let mut watcher = server.conn();
    for (key, allowed, what) in [
        ("k", 0, "a denied call must not invalidate WATCH"),
        ("k2", 1, "an admitted call must invalidate WATCH"),
    ] {
        let _: () = redis::cmd("WATCH").arg(key).query(&mut watcher).unwrap();
        assert_eq!(token_bucket(&mut con, key, 1, "0.001", 1)[0], allowed);
        let committed: Option<Vec<String>> = redis::pipe()
            .atomic()
            .cmd("PING")
            .query(&mut watcher)
            .unwrap();
        assert_eq!(committed.is_some(), allowed == 0, "{what}");
    }
}
