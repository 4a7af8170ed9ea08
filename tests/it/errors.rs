//! Bad input gets a clear error, changes nothing, propagates nothing, and never hurts the
//! server or its replica.

use crate::helpers::{dump, expect_error, expect_refusal, run, token_bucket};
use crate::server::Server;

// Every numeric argument of every command at its extremes, with a replica attached:
// `adversarial::bad_numbers_are_refused_by_every_command_without_side_effects`.

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
            "ERR option must be PARTIAL [MIN m] or MAXWAIT ms (got 'extra')",
        ),
    ];
    for (args, expected) in cases {
        let mut all: Vec<&[u8]> = vec![b"RL.TOKENBUCKET"];
        all.extend(args.iter().map(|a| a.as_bytes()));
        assert_eq!(expect_refusal(&mut con, &all), *expected, "{args:?}");
    }
}

#[test]
fn other_types_get_wrongtype_and_stay_intact() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    run(&mut con, "SET string v");
    run(&mut con, "RPUSH list a");
    run(&mut con, "HSET hash f v");
    for key in ["string", "list", "hash"] {
        let before = dump(&mut con, key);
        let message = expect_refusal(&mut con, &[b"RL.TOKENBUCKET", key.as_bytes(), b"10", b"1"]);
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
    let message = expect_error(&mut con, &[b"RL.FX", b"k", b"\x01\x00"]);
    assert_eq!(
        message,
        "ERR RL.FX is internal: only the replication link and AOF loading may call it"
    );
    let message = expect_error(&mut con, &[b"RL.FX", b"fresh", b"\x01\x00"]);
    assert!(message.starts_with("ERR RL.FX is internal"));
    // Its earlier name, still accepted from the replication link and AOF files, is refused
    // to clients as well.
    let message = expect_error(&mut con, &[b"RL.SETSTATE", b"k", b"\x01\x00"]);
    assert_eq!(
        message,
        "ERR RL.SETSTATE is internal: only the replication link and AOF loading may call it"
    );
    assert_eq!(dump(&mut con, "k"), state);
}
