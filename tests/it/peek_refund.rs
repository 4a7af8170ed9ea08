//! `RL.PEEK` and `RL.REFUND`, for every algorithm they can name.

use crate::helpers::{dump, error_text, expect_refusal, run, wait_replicas};
use crate::server::{Server, info_int, primary_and_replica};

/// (ALGORITHM, its arguments with a limit of 3 units and a slow refill or long window, the
/// RL command that takes the same arguments).
pub const ALGORITHMS: &[(&str, &[&str], &str)] =
    &[("TOKENBUCKET", &["3", "0.001"], "RL.TOKENBUCKET")];

fn call(
    con: &mut redis::Connection,
    command: &str,
    key: &str,
    algorithm: Option<&str>,
    args: &[&str],
) -> Vec<i64> {
    let mut cmd = redis::cmd(command);
    cmd.arg(key);
    if let Some(algorithm) = algorithm {
        cmd.arg(algorithm);
    }
    cmd.arg(args).query(con).unwrap()
}

#[test]
fn peek_reports_the_real_reply_and_changes_nothing() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    for (algorithm, args, command) in ALGORITHMS {
        let key = format!("peek:{algorithm}");
        let fresh = call(&mut con, "RL.PEEK", &key, Some(algorithm), args);
        assert_eq!(
            fresh[..3],
            [1, 2, 0],
            "{algorithm}: a missing limiter admits"
        );
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
        assert_eq!(exists, 0, "{algorithm}: peek creates nothing");
        for _ in 0..3 {
            assert_eq!(call(&mut con, command, &key, None, args)[0], 1);
        }
        assert_eq!(wait_replicas(&mut con), 1);
        let state = dump(&mut con, &key);
        let offset = info_int(&mut con, "replication", "master_repl_offset");
        let peeked = call(&mut con, "RL.PEEK", &key, Some(algorithm), args);
        let real = call(&mut con, command, &key, None, args);
        assert_eq!(
            peeked[..2],
            real[..2],
            "{algorithm}: peek = the real call's reply"
        );
        // The real call comes a moment later: its wait may be a millisecond shorter.
        assert!(
            (0..=2).contains(&(peeked[2] - real[2])),
            "{algorithm}: {peeked:?} vs {real:?}"
        );
        assert_eq!(peeked[0], 0);
        assert_eq!(
            dump(&mut con, &key),
            state,
            "{algorithm}: denied calls and peeks change nothing"
        );
        assert_eq!(
            info_int(&mut con, "replication", "master_repl_offset"),
            offset
        );

        let mut replica_con = replica.conn();
        let on_replica = call(&mut replica_con, "RL.PEEK", &key, Some(algorithm), args);
        assert_eq!(
            on_replica[..2],
            peeked[..2],
            "{algorithm}: peek works on a replica"
        );
    }
}

#[test]
fn refund_gives_back_never_beyond_the_limit_and_replicates() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    for (algorithm, args, command) in ALGORITHMS {
        let key = format!("refund:{algorithm}");
        let nothing = call(&mut con, "RL.REFUND", &key, Some(algorithm), args);
        assert_eq!(
            nothing[..2],
            [0, 3],
            "{algorithm}: nothing to give back on a missing key"
        );
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
        assert_eq!(exists, 0);
        for _ in 0..3 {
            call(&mut con, command, &key, None, args);
        }
        assert_eq!(call(&mut con, command, &key, None, args)[0], 0);
        let refunded = call(&mut con, "RL.REFUND", &key, Some(algorithm), args);
        assert_eq!(
            refunded[..3],
            [1, 1, 0],
            "{algorithm}: one unit back, and a call now fits"
        );
        let mut cost_two = args.to_vec();
        cost_two.push("2");
        let refunded = call(&mut con, "RL.REFUND", &key, Some(algorithm), &cost_two);
        assert_eq!(refunded[..2], [1, 3], "{algorithm}: clamped to the limit");
        assert_eq!(
            call(&mut con, "RL.REFUND", &key, Some(algorithm), args)[0],
            0,
            "already full"
        );
        assert_eq!(call(&mut con, command, &key, None, args)[..2], [1, 2]);
        assert_eq!(wait_replicas(&mut con), 1);
        let mut replica_con = replica.conn();
        assert_eq!(
            dump(&mut replica_con, &key),
            dump(&mut con, &key),
            "{algorithm}"
        );
    }
}

#[test]
fn algorithm_names_and_arities_are_checked() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.PEEK", b"k", b"LEAKY", b"1", b"1"]),
        "ERR algorithm must be TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY (got 'LEAKY')"
    );
    for command in ["RL.PEEK", "RL.REFUND"] {
        let message = expect_refusal(&mut con, &[command.as_bytes(), b"k", b"TOKENBUCKET", b"1"]);
        assert_eq!(
            message,
            format!(
                "ERR wrong number of arguments for '{}' command",
                command.to_lowercase()
            )
        );
        let message = expect_refusal(
            &mut con,
            &[
                command.as_bytes(),
                b"k",
                b"tokenbucket",
                b"1",
                b"1",
                b"1",
                b"1",
            ],
        );
        let expected = match command {
            "RL.PEEK" => "ERR option must be PARTIAL [MIN m] or MAXWAIT ms (got '1')",
            _ => "ERR wrong number of arguments for 'rl.refund' command",
        };
        assert_eq!(message, expected);
    }
}

#[test]
fn peek_is_read_only_for_acl_key_permissions() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "reader", "on", ">pw", "%R~*", "+@all"])
        .query(&mut con)
        .unwrap();
    run(&mut con, "AUTH reader pw");
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(&["k", "TOKENBUCKET", "3", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(reply[0], 1);
    let error = redis::cmd("RL.TOKENBUCKET")
        .arg(&["k", "3", "1"])
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(
        error_text(&error).starts_with("NOPERM"),
        "{}",
        error_text(&error)
    );
}
