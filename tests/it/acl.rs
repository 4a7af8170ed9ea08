//! Key declarations make ACL key patterns apply to every limiter command.

use crate::helpers::{error_text, run};
use crate::server::Server;

/// Every client-facing single-key command with valid arguments after the key.
const COMMANDS: [(&str, &[&str]); 9] = [
    ("RL.TOKENBUCKET", &["10", "1"]),
    ("RL.SLIDING", &["10", "60"]),
    ("RL.FIXED", &["10", "60"]),
    ("RL.SLIDINGLOG", &["10", "60"]),
    ("CL.THROTTLE", &["9", "10", "60"]),
    ("RL.ACQUIRE", &["2", "h", "1000"]),
    ("RL.RELEASE", &["h"]),
    ("RL.PEEK", &["TOKENBUCKET", "10", "1"]),
    ("RL.REFUND", &["TOKENBUCKET", "10", "1"]),
];

#[test]
fn users_limited_to_a_key_pattern_get_noperm_elsewhere() {
    let server = Server::start(&[]);
    let mut admin = server.conn();
    // On Redis 7.0 ACL categories skip module commands, so the user gets them by +@all.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "tenant", "on", ">secret", "~allowed:*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let mut con = server.conn();
    run(&mut con, "AUTH tenant secret");
    for (index, (command, args)) in COMMANDS.iter().enumerate() {
        let key = if command.starts_with("RL.PEEK") || command.starts_with("RL.REFUND") {
            "allowed:0".to_string() // the token bucket the first command created
        } else {
            format!("allowed:{index}")
        };
        let reply = redis::cmd(command)
            .arg(&key)
            .arg(*args)
            .query::<redis::Value>(&mut con);
        assert!(reply.is_ok(), "{command} on an allowed key: {reply:?}");
        let error = redis::cmd(command)
            .arg("other:key")
            .arg(*args)
            .query::<redis::Value>(&mut con)
            .unwrap_err();
        assert!(
            error_text(&error).starts_with("NOPERM"),
            "{command}: {}",
            error_text(&error)
        );
    }
    let created: i64 = redis::cmd("EXISTS")
        .arg("other:key")
        .query(&mut admin)
        .unwrap();
    assert_eq!(created, 0);
}

/// On servers that let modules declare ACL categories (7.2+), `-@write` denies every RL write
/// while `RL.PEEK` (`@read`) stays allowed, and on 7.4+ `+@ratelimit` grants exactly the RL
/// commands. On 7.0, categories skip module commands: a `+@all -@write` user can still run
/// them, which is why the README says to name them.
#[test]
fn acl_categories_follow_what_the_server_supports() {
    let server = Server::start(&[]);
    let mut admin = server.conn();
    let info: redis::Value = redis::cmd("COMMAND")
        .arg(&["INFO", "rl.tokenbucket"])
        .query(&mut admin)
        .unwrap();
    let described = format!("{info:?}");
    let has_categories = described.contains("@write");
    let has_own_category = described.contains("@ratelimit");
    let user = |name: &str, rules: &[&str]| {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "on", ">secret", "~*"])
            .arg(rules)
            .query(&mut server.conn())
            .unwrap();
        let mut con = server.conn();
        let _: () = redis::cmd("AUTH")
            .arg(name)
            .arg("secret")
            .query(&mut con)
            .unwrap();
        con
    };
    let mut reader = user("reader", &["+@all", "-@write"]);
    let write = redis::cmd("RL.TOKENBUCKET")
        .arg(&["k", "10", "1"])
        .query::<Vec<i64>>(&mut reader);
    let peek = redis::cmd("RL.PEEK")
        .arg(&["k", "TOKENBUCKET", "10", "1"])
        .query::<Vec<i64>>(&mut reader);
    assert!(peek.is_ok(), "RL.PEEK is a read");
    if has_categories {
        let error = write.unwrap_err();
        assert!(
            error_text(&error).starts_with("NOPERM"),
            "{}",
            error_text(&error)
        );
    } else {
        eprintln!("this server gives module commands no ACL category (Redis 7.0): checked that");
        assert!(
            write.is_ok(),
            "on 7.0 -@write does not reach module commands"
        );
    }
    if has_own_category {
        let mut limiter = user("limiter", &["+@ratelimit"]);
        let admitted = crate::helpers::multi(&mut limiter, &["1", "m", "FIXED", "1", "60"]);
        assert_eq!(admitted.fields[0], 1);
        let error = redis::cmd("GET")
            .arg("m")
            .query::<redis::Value>(&mut limiter)
            .unwrap_err();
        assert!(error_text(&error).starts_with("NOPERM"));
    }
}
