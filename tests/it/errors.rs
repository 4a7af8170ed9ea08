//! Bad input gets a clear error, changes nothing, propagates nothing, and never hurts the
//! server or its replica.

use crate::helpers::{dump, expect_error, token_bucket, wait_replicas};
use crate::server::{Server, info_int};

/// Every numeric argument at its extremes, and malformed text.
fn bad_numbers() -> Vec<Vec<u8>> {
    let mut values: Vec<Vec<u8>> = [
        "0",
        "-1",
        "-0",
        "9223372036854775808",
        "18446744073709551616",
        "1e308",
        "1e400",
        "1e-400",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "+inf",
        "infinity",
        "",
        " 5",
        "5 ",
        "5abc",
        "0x10",
        ".",
        "1,5",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    values.push(vec![b'9'; 1024 * 1024]);
    values.push(b"1\x002".to_vec());
    values
}

#[test]
fn bad_arguments_are_refused_without_side_effects() {
    let primary = Server::start(&["--repl-ping-replica-period", "3600"]);
    let replica = Server::start(&["--propagation-error-behavior", "panic"]);
    replica.replicate_from(&primary);
    let mut con = primary.conn();
    assert_eq!(token_bucket(&mut con, "existing", 10, "1", 1)[0], 1);
    assert_eq!(wait_replicas(&mut con), 1);
    let before = dump(&mut con, "existing");
    let offset = info_int(&mut con, "replication", "master_repl_offset");
    let dirty = info_int(&mut con, "persistence", "rdb_changes_since_last_save");

    let mut refused = 0;
    for key in ["existing", "missing"] {
        for bad in bad_numbers() {
            let good = [b"10".to_vec(), b"1".to_vec(), b"1".to_vec()];
            for position in 0..3 {
                if position == 2 && bad == b"9223372036854775808" {
                    continue; // a huge cost is valid: denied with retry_after -1
                }
                let mut args: Vec<&[u8]> = vec![b"RL.TOKENBUCKET", key.as_bytes()];
                for (index, good_value) in good.iter().enumerate() {
                    args.push(if index == position { &bad } else { good_value });
                }
                let message = expect_error(&mut con, &args);
                assert!(message.starts_with("ERR "), "{message}");
                let name = ["capacity", "rate", "cost"][position];
                assert!(
                    message.contains(name),
                    "error should name {name}: {message}"
                );
                refused += 1;
            }
        }
    }
    assert!(refused > 100);

    assert_eq!(dump(&mut con, "existing"), before, "state unchanged");
    let exists: i64 = redis::cmd("EXISTS").arg("missing").query(&mut con).unwrap();
    assert_eq!(exists, 0, "no key created");
    assert_eq!(
        info_int(&mut con, "replication", "master_repl_offset"),
        offset,
        "nothing propagated"
    );
    assert_eq!(
        info_int(&mut con, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
    let mut replica_con = replica.conn();
    assert_eq!(
        info_int(&mut replica_con, "stats", "unexpected_error_replies"),
        0
    );
}

#[test]
fn messages_name_the_argument_and_the_rule() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let cases: &[(&[&str], &str)] = &[
        (
            &["k", "0", "1"],
            "ERR capacity must be greater than 0 (got '0')",
        ),
        (
            &["k", "ten", "1"],
            "ERR capacity must be a positive integer (got 'ten')",
        ),
        (
            &["k", "10", "NaN"],
            "ERR rate must be a finite number (got 'NaN')",
        ),
        (
            &["k", "10", "-2"],
            "ERR rate must be greater than 0 (got '-2')",
        ),
        (
            &["k", "10", "1e10"],
            "ERR rate must be at most 1000000000 tokens per second (got '1e10')",
        ),
        (
            &["k", "10", "1", "2.5"],
            "ERR cost must be a positive integer (got '2.5')",
        ),
        (
            &["k", "1000000000000000", "1"],
            "ERR capacity / rate must be at most 100 years (the time an empty bucket takes to refill)",
        ),
        (
            &["k"],
            "ERR wrong number of arguments for 'rl.tokenbucket' command",
        ),
        (
            &["k", "10"],
            "ERR wrong number of arguments for 'rl.tokenbucket' command",
        ),
        (
            &["k", "10", "1", "1", "extra"],
            "ERR wrong number of arguments for 'rl.tokenbucket' command",
        ),
    ];
    for (args, expected) in cases {
        let mut all: Vec<&[u8]> = vec![b"RL.TOKENBUCKET"];
        all.extend(args.iter().map(|a| a.as_bytes()));
        assert_eq!(expect_error(&mut con, &all), *expected, "{args:?}");
    }
}

#[test]
fn other_types_get_wrongtype_and_stay_intact() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("string")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("a")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    for key in ["string", "list", "hash"] {
        let before = dump(&mut con, key);
        let message = expect_error(&mut con, &[b"RL.TOKENBUCKET", key.as_bytes(), b"10", b"1"]);
        assert_eq!(
            message,
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert_eq!(dump(&mut con, key), before);
    }
}

#[test]
fn the_internal_state_command_is_refused_to_clients() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "k", 10, "1", 1);
    let state = dump(&mut con, "k");
    let message = expect_error(&mut con, &[b"RL.SETSTATE", b"k", b"\x01\x00"]);
    assert_eq!(
        message,
        "ERR RL.SETSTATE is internal: only the replication link and AOF loading may call it"
    );
    let message = expect_error(&mut con, &[b"RL.SETSTATE", b"fresh", b"\x01\x00"]);
    assert!(message.starts_with("ERR RL.SETSTATE is internal"));
    assert_eq!(dump(&mut con, "k"), state);
}
