//! RDB, AOF, DUMP/RESTORE, COPY and MEMORY USAGE keep limiter state exactly.

use std::time::Duration;

use crate::binaries::check_rdb_binary;
use crate::helpers::{
    dump, error_text, expect_error, keys, mixed_traffic, run, snapshot, token_bucket,
};
use crate::server::{Server, info_int, wait_until};

#[test]
fn debug_reload_keeps_state_and_expiry() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let keys = keys("reload", 20);
    mixed_traffic(&mut con, &keys);
    let before = snapshot(&mut con, &keys);
    assert!(
        before
            .iter()
            .all(|(state, expiry)| state.is_some() && *expiry > 0)
    );
    run(&mut con, "DEBUG RELOAD");
    assert_eq!(snapshot(&mut con, &keys), before);
    let kind: String = redis::cmd("TYPE").arg(&keys[0]).query(&mut con).unwrap();
    assert_eq!(kind, "ratelimit");
}

#[test]
fn a_restart_from_rdb_keeps_state_and_expiry() {
    let mut server = Server::start(&[]);
    let mut con = server.conn();
    let keys = keys("rdb", 20);
    mixed_traffic(&mut con, &keys);
    let before = snapshot(&mut con, &keys);
    run(&mut con, "SAVE");
    server.restart(&[]);
    let mut con = server.conn();
    assert_eq!(snapshot(&mut con, &keys), before);
    let check = std::process::Command::new(check_rdb_binary())
        .arg(server.dir.join("dump.rdb"))
        .output()
        .expect("the RDB checker (REDIS_CHECK_RDB)");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

fn aof_replay_is_exact(preamble: &str) {
    let server = Server::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]);
    let mut con = server.conn();
    let keys = keys("aof", 10);
    mixed_traffic(&mut con, &keys);
    // Rewrite (exercising rdb_save or aof_rewrite depending on the preamble), then more
    // traffic that lands in the incremental file.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        info_int(&mut con, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(&mut con, "persistence", "aof_rewrite_scheduled") == 0
    }));
    mixed_traffic(&mut con, &keys);
    let before = snapshot(&mut con, &keys);
    // A real pause, the time being what is tested: a replay that recomputed with the clock at
    // load time would differ. Real time, not the test hook's offset: that moves only the
    // module's clock, and a replay could as well read Redis's (a relative expiry).
    std::thread::sleep(Duration::from_millis(1100));
    run(&mut con, "DEBUG LOADAOF");
    assert_eq!(snapshot(&mut con, &keys), before);

    let mut logged = String::new();
    for entry in std::fs::read_dir(server.dir.join("appendonlydir")).unwrap() {
        logged.push_str(&String::from_utf8_lossy(
            &std::fs::read(entry.unwrap().path()).unwrap(),
        ));
    }
    let logged = logged.to_ascii_lowercase();
    for command in ["rl.tokenbucket", "rl.sliding", "rl.fixed", "cl.throttle"] {
        assert!(
            !logged.contains(command),
            "the AOF must hold effects, not {command}"
        );
    }
    assert!(logged.contains("rl.fx"));

    // The same files under the effect command's earlier name, as earlier versions wrote
    // them, replay to the same state.
    let mut renamed = 0;
    for entry in std::fs::read_dir(server.dir.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|extension| extension == "aof") {
            let text = std::fs::read(&path).unwrap();
            let legacy = replace_all(&text, b"$5\r\nrl.fx\r\n", b"$11\r\nrl.setstate\r\n");
            renamed += usize::from(legacy != text);
            std::fs::write(&path, legacy).unwrap();
        }
    }
    assert!(renamed > 0, "the AOF held no RL.FX to rename");
    run(&mut con, "DEBUG LOADAOF");
    assert_eq!(snapshot(&mut con, &keys), before);
}

/// `bytes` with every `from` replaced by `to`.
fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.starts_with(from) {
            out.extend_from_slice(to);
            rest = &rest[from.len()..];
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    out
}

#[test]
fn aof_with_rdb_preamble_replays_exactly() {
    aof_replay_is_exact("yes");
}

#[test]
fn aof_without_rdb_preamble_replays_exactly() {
    aof_replay_is_exact("no");
}

#[test]
fn dump_restore_copy_and_memory_usage() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "k", 10, "1", 3);
    let payload = dump(&mut con, "k").unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(dump(&mut con, "restored").as_ref(), Some(&payload));
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    let future_ms = 4_102_444_800_000i64; // 2100-01-01
    let _: () = redis::cmd("RESTORE")
        .arg("abs")
        .arg(future_ms)
        .arg(&payload)
        .arg("ABSTTL")
        .query(&mut con)
        .unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg("abs")
        .query(&mut con)
        .unwrap();
    assert_eq!(expiry, future_ms);

    let copied: i64 = redis::cmd("COPY")
        .arg("k")
        .arg("copy")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    assert_eq!(dump(&mut con, "copy").as_ref(), Some(&payload));
    let digests = |con: &mut redis::Connection| -> Vec<String> {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg("k")
            .arg("copy")
            .query(con)
            .unwrap()
    };
    let before = digests(&mut con);
    assert_eq!(before[0], before[1]);
    // The copy is independent, and the digest covers the state.
    token_bucket(&mut con, "copy", 10, "1", 5);
    assert_eq!(dump(&mut con, "k").as_ref(), Some(&payload));
    let after = digests(&mut con);
    assert_eq!(after[0], before[0]);
    assert_ne!(after[1], before[1]);

    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert!((16..200).contains(&usage), "MEMORY USAGE {usage}");
}

#[test]
fn corrupt_or_forged_restore_payloads_are_refused() {
    let mut server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "k", 10, "1", 3);
    let payload = dump(&mut con, "k").unwrap();
    // Layout: [7 = module type][0x81][8-byte module id, low 10 bits = encver][module stream]
    //         [2-byte RDB version][8-byte CRC64].
    run(&mut con, "DEBUG SET-SKIP-CHECKSUM-VALIDATION 1");

    // Cut the body short and keep a valid footer: the loader then reads footer bytes as
    // data. Every attempt must be refused or yield a limiter that works.
    let mut refused = 0;
    for cut in 1..payload.len() - 10 {
        let mut truncated = payload[..cut].to_vec();
        truncated.extend_from_slice(&payload[payload.len() - 10..]);
        match redis::cmd("RESTORE")
            .arg("t")
            .arg(0)
            .arg(&truncated)
            .query::<()>(&mut con)
        {
            Err(error) => {
                assert!(
                    error_text(&error).starts_with("ERR Bad data format"),
                    "{}",
                    error_text(&error)
                );
                refused += 1;
            }
            Ok(()) => {
                let reply = token_bucket(&mut con, "t", 10, "1", 1);
                assert_eq!(reply[4], 10);
                run(&mut con, "DEL t");
            }
        }
    }
    assert!(refused >= payload.len() - 13, "only {refused} refused");
    let mut newer_encver = payload.clone();
    newer_encver[9] = (newer_encver[9] & !0x03) | 0x02;
    let message = expect_error(&mut con, &[b"RESTORE", b"t", b"0", &newer_encver]);
    assert!(message.contains("Bad data format"), "{message}");
    assert!(
        server
            .log()
            .contains("refusing a value with encoding version 2")
    );

    // Our own version byte and kind byte: the module stream starts with a string opcode (5)
    // and the state's length (18), then the state.
    assert_eq!(payload[10..12], [5, 18]);
    let state_at = 12;
    for (offset, value) in [(0, 9u8), (1, 200u8)] {
        let mut forged = payload.clone();
        forged[state_at + offset] = value;
        let message = expect_error(&mut con, &[b"RESTORE", b"t", b"0", &forged]);
        assert!(message.contains("Bad data format"), "{message}");
    }
    assert!(server.is_alive());
    let exists: i64 = redis::cmd("EXISTS").arg("t").query(&mut con).unwrap();
    assert_eq!(exists, 0);
}
