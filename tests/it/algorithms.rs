//! `RL.SLIDING`, `RL.FIXED` and `RL.SLIDINGLOG` semantics through a real server, and what
//! they share with `RL.TOKENBUCKET`.

use crate::helpers::{expect_refusal, run, set_module_clock_offset_ms, token_bucket};
use crate::server::Server;

fn call(con: &mut redis::Connection, command: &str, key: &str, args: &[&str]) -> [i64; 5] {
    let reply: Vec<i64> = redis::cmd(command)
        .arg(key)
        .arg(args)
        .query(con)
        .expect(command);
    reply.try_into().unwrap()
}

fn server_time_ms(con: &mut redis::Connection) -> i64 {
    let time: Vec<String> = redis::cmd("TIME").query(con).unwrap();
    time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
}

#[test]
fn fixed_windows_are_aligned_to_the_epoch() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let before = server_time_ms(&mut con);
    let [allowed, remaining, retry, reset, limit] = call(&mut con, "RL.FIXED", "k", &["2", "60"]);
    let after = server_time_ms(&mut con);
    assert_eq!((allowed, remaining, retry, limit), (1, 1, 0, 2));
    // The window ends at the next whole minute of the server clock.
    let next_minute = (before / 60_000 + 1) * 60_000;
    assert!(
        (next_minute - after..=next_minute - before + 1).contains(&reset),
        "{reset}"
    );
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg("k").query(&mut con).unwrap();
    assert_eq!(expiry, next_minute);
    call(&mut con, "RL.FIXED", "k", &["2", "60"]);
    let before = server_time_ms(&mut con);
    let [allowed, _, retry, _, _] = call(&mut con, "RL.FIXED", "k", &["2", "60"]);
    let after = server_time_ms(&mut con);
    assert_eq!(allowed, 0);
    assert!(
        (next_minute - after..=next_minute - before + 1).contains(&retry),
        "denied until the next minute: {retry}"
    );
}

#[test]
fn the_sliding_counter_weights_the_previous_window() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Durations are checked against the server's TIME just before and after each call (a
    // fixed tolerance fails when the machine is busy).
    let before = server_time_ms(&mut con);
    let [allowed, remaining, _, reset, limit] =
        call(&mut con, "RL.SLIDING", "k", &["10", "86400", "4"]);
    let after = server_time_ms(&mut con);
    assert_eq!((allowed, remaining, limit), (1, 6, 10));
    // The units count until the end of the next window (when their weight reaches zero).
    let day = 86_400_000;
    let end_of_next_window = (before / day + 2) * day;
    assert!(
        (end_of_next_window - after..=end_of_next_window - before + 1).contains(&reset),
        "{reset}"
    );
    // 4 + 7 > 10: wait until the 4 units, as the previous window, weigh at most 3, a quarter
    // of the way into the next window.
    let before = server_time_ms(&mut con);
    let [allowed, remaining, retry, _, _] =
        call(&mut con, "RL.SLIDING", "k", &["10", "86400", "7"]);
    let after = server_time_ms(&mut con);
    assert_eq!((allowed, remaining), (0, 6));
    let admitted_at = (before / day + 1) * day + day / 4;
    assert!(
        (admitted_at - after..=admitted_at - before + 1).contains(&retry),
        "{retry}"
    );
}

#[test]
fn the_sliding_log_is_exact_and_retry_after_is_honest() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // A 1.5 s window: the four calls fit well within it even on a busy machine.
    for remaining in [2, 1, 0] {
        assert_eq!(
            call(&mut con, "RL.SLIDINGLOG", "k", &["3", "1.5"])[..2],
            [1, remaining]
        );
    }
    let [allowed, _, retry, reset, _] = call(&mut con, "RL.SLIDINGLOG", "k", &["3", "1.5"]);
    assert_eq!(allowed, 0);
    assert!(
        (1..=1500).contains(&retry) && reset >= retry,
        "{retry} {reset}"
    );
    // Under test: waiting retry_after_ms is enough. The module's clock is moved on by that
    // much (the test hook's fake clock) instead of waiting it out.
    set_module_clock_offset_ms(&mut con, retry);
    assert_eq!(call(&mut con, "RL.SLIDINGLOG", "k", &["3", "1.5"])[0], 1);
}

#[test]
fn the_log_length_is_bounded_by_a_setting() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    run(&mut con, "CONFIG SET ratelimit.max-log-entries 5");
    assert_eq!(call(&mut con, "RL.SLIDINGLOG", "k", &["5", "10"])[0], 1);
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.SLIDINGLOG", b"k", b"6", b"10"]),
        "ERR limit must be at most 5 (the ratelimit.max-log-entries setting) (got '6')"
    );
    let max: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.max-log-entries")
        .query(&mut con)
        .unwrap();
    assert_eq!(max, ["ratelimit.max-log-entries", "5"]);
}

#[test]
fn a_key_keeps_its_algorithm() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    token_bucket(&mut con, "bucket", 10, "1", 1);
    let before: Vec<u8> = redis::cmd("DUMP").arg("bucket").query(&mut con).unwrap();
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.SLIDING", b"bucket", b"10", b"60"]),
        "ERR key holds a token bucket, not a sliding window: use the matching command or delete the key"
    );
    assert_eq!(
        expect_refusal(
            &mut con,
            &[b"RL.PEEK", b"bucket", b"SLIDINGLOG", b"10", b"60"]
        ),
        "ERR key holds a token bucket, not a sliding log: use the matching command or delete the key"
    );
    let after: Vec<u8> = redis::cmd("DUMP").arg("bucket").query(&mut con).unwrap();
    assert_eq!(before, after);
}

#[test]
fn window_arguments_are_validated() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for command in ["RL.SLIDING", "RL.FIXED", "RL.SLIDINGLOG"] {
        let c = command.as_bytes();
        assert_eq!(
            expect_refusal(&mut con, &[c, b"k", b"10", b"0.0001"]),
            "ERR window must be at least 0.001 seconds (1 ms) (got '0.0001')"
        );
        assert_eq!(
            expect_refusal(&mut con, &[c, b"k", b"10", b"inf"]),
            "ERR window must be a finite number (got 'inf')"
        );
        assert_eq!(
            expect_refusal(&mut con, &[c, b"k", b"0", b"10"]),
            "ERR limit must be greater than 0 (got '0')"
        );
        assert_eq!(
            expect_refusal(&mut con, &[c, b"k", b"10", b"10", b"1", b"x"]),
            "ERR option must be PARTIAL [MIN m] (got 'x')"
        );
    }
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.FIXED", b"k", b"4294967296", b"10"]),
        "ERR limit must be at most 4294967295 (got '4294967296')"
    );
}

#[test]
fn memory_per_limiter_is_compact() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let mut usage = |command: &str, key: &str, args: &[&str]| -> i64 {
        call(&mut con, command, key, args);
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(&mut con)
            .unwrap()
    };
    let bucket = usage("RL.TOKENBUCKET", "tb", &["10", "1"]);
    assert_eq!(
        usage("RL.SLIDING", "sw", &["10", "60"]),
        bucket,
        "16 bytes of state each"
    );
    assert_eq!(usage("RL.FIXED", "fw", &["10", "60"]), bucket);
    let log_1 = usage("RL.SLIDINGLOG", "log", &["1000", "60"]);
    for _ in 0..99 {
        usage("RL.SLIDINGLOG", "log", &["1000", "60"]);
    }
    let log_100 = usage("RL.SLIDINGLOG", "log", &["1000", "60"]);
    let per_entry = (log_100 - log_1) as f64 / 100.0;
    assert!(
        per_entry <= 16.0,
        "at most 8 bytes per entry plus bounded slack: {per_entry}"
    );
}
