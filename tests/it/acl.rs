//! Key declarations make ACL key patterns apply to every limiter command.

use crate::helpers::error_text;
use crate::server::Server;

/// Every client-facing command with valid arguments after the key.
const COMMANDS: [(&str, &[&str]); 7] = [
    ("RL.TOKENBUCKET", &["10", "1"]),
    ("RL.SLIDING", &["10", "60"]),
    ("RL.FIXED", &["10", "60"]),
    ("RL.SLIDINGLOG", &["10", "60"]),
    ("CL.THROTTLE", &["9", "10", "60"]),
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
    let _: () = redis::cmd("AUTH")
        .arg("tenant")
        .arg("secret")
        .query(&mut con)
        .unwrap();
    for (index, (command, args)) in COMMANDS.iter().enumerate() {
        let key = if command.starts_with("RL.PEEK") || command.starts_with("RL.REFUND") {
            "allowed:0".to_string() // the token bucket the first command created
        } else {
            format!("allowed:{index}")
        };
        let reply = redis::cmd(command)
            .arg(&key)
            .arg(*args)
            .query::<Vec<i64>>(&mut con);
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
