//! In-flight limits: `RL.ACQUIRE key limit holder ttl_ms` / `RL.RELEASE key holder`. At most
//! `limit` live holders at once; holders expire by the server clock `ttl_ms` after their
//! last acquire; the key goes with its last holder.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::helpers::{dump, expect_refusal, multi, run, snapshot, wait_replicas, words};
use crate::server::{Server, info_int, primary_and_replica, wait_until};

fn acquire(
    con: &mut redis::Connection,
    key: &str,
    limit: u64,
    holder: &str,
    ttl_ms: u64,
) -> [i64; 5] {
    let reply: Vec<i64> = redis::cmd("RL.ACQUIRE")
        .arg(key)
        .arg(limit)
        .arg(holder)
        .arg(ttl_ms)
        .query(con)
        .unwrap();
    reply.try_into().unwrap()
}

fn release(con: &mut redis::Connection, key: &str, holder: &str) -> i64 {
    redis::cmd("RL.RELEASE")
        .arg(key)
        .arg(holder)
        .query(con)
        .unwrap()
}

fn free_slots(con: &mut redis::Connection, key: &str, limit: u64) -> [i64; 5] {
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg("CONCURRENCY")
        .arg(limit)
        .query(con)
        .unwrap();
    reply.try_into().unwrap()
}

#[test]
fn holders_acquire_renew_release_and_expire() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "s", 2, "a", 60_000)[..3], [1, 1, 0]);
    assert_eq!(acquire(&mut con, "s", 2, "b", 60_000)[..3], [1, 0, 0]);
    let denied = acquire(&mut con, "s", 2, "c", 60_000);
    assert_eq!(denied[..2], [0, 0]);
    assert!(
        (59_000..=60_000).contains(&denied[2]),
        "retry: until the earliest holder expires: {denied:?}"
    );
    assert!(
        (59_000..=60_000).contains(&denied[3]),
        "reset: the last holder's expiry"
    );
    assert_eq!(
        acquire(&mut con, "s", 2, "a", 60_000)[0],
        1,
        "a live holder renews, never counted twice"
    );
    assert_eq!(free_slots(&mut con, "s", 2)[..2], [0, 0]);
    assert_eq!(
        free_slots(&mut con, "s", 3)[..2],
        [1, 1],
        "a larger limit has room"
    );
    assert_eq!(release(&mut con, "s", "a"), 1);
    assert_eq!(release(&mut con, "s", "a"), 0, "already released");
    assert_eq!(release(&mut con, "s", "unknown"), 0);
    assert_eq!(release(&mut con, "missing", "a"), 0);
    assert_eq!(acquire(&mut con, "s", 2, "c", 60_000)[0], 1);
    // Lowering the limit evicts no live holder: b and c stay, newcomers wait.
    assert_eq!(acquire(&mut con, "s", 1, "d", 60_000)[0], 0);
    assert_eq!(
        acquire(&mut con, "s", 1, "b", 60_000)[0],
        1,
        "b still renews"
    );
    assert_eq!(release(&mut con, "s", "b"), 1);
    assert_eq!(release(&mut con, "s", "c"), 1);
    assert_eq!(
        dump(&mut con, "s"),
        None,
        "the key goes with its last holder"
    );

    // Expiry by the server clock: a 300 ms holder frees its slot by itself.
    assert_eq!(acquire(&mut con, "e", 1, "short", 300)[0], 1);
    assert_eq!(acquire(&mut con, "e", 1, "other", 60_000)[0], 0);
    let pttl: i64 = redis::cmd("PTTL").arg("e").query(&mut con).unwrap();
    // 301: on 7.2+ the clock has µs resolution and expiries round up to the next ms.
    assert!(
        (200..=301).contains(&pttl),
        "the key expires with its last holder: {pttl}"
    );
    assert!(wait_until(Duration::from_secs(2), || {
        acquire(&mut con, "e", 1, "other", 60_000)[0] == 1
    }));
    assert_eq!(
        release(&mut con, "e", "short"),
        0,
        "an expired holder is unknown"
    );
}

/// 16 clients race for 3 slots, each holding its slot a little while and releasing it: the
/// number of holders that believe they hold a slot never exceeds 3 at any moment.
#[test]
fn racing_clients_never_hold_more_than_the_limit() {
    const LIMIT: u64 = 3;
    let server = Server::start(&[]);
    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));
    let acquired = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_millis(1500);
    let workers: Vec<_> = (0..16)
        .map(|client| {
            let mut con = server.conn();
            let (inside, most_inside, acquired) = (
                Arc::clone(&inside),
                Arc::clone(&most_inside),
                Arc::clone(&acquired),
            );
            std::thread::spawn(move || {
                let mut call = 0;
                while Instant::now() < deadline {
                    call += 1;
                    let holder = format!("client-{client}-{call}");
                    if acquire(&mut con, "race", LIMIT, &holder, 30_000)[0] == 1 {
                        let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most_inside.fetch_max(now_inside, Ordering::SeqCst);
                        acquired.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(release(&mut con, "race", &holder), 1);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let most = most_inside.load(Ordering::SeqCst);
    eprintln!(
        "{} acquisitions, at most {most} holders at once (limit {LIMIT})",
        acquired.load(Ordering::Relaxed)
    );
    assert!(most <= LIMIT as usize, "{most} holders at once");
    assert_eq!(most, LIMIT as usize, "the slots were all used");
    assert_eq!(
        dump(&mut server.conn(), "race"),
        None,
        "every slot was released"
    );
}

#[test]
fn replicas_and_the_aof_hold_the_holders_exactly() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    let _: () = redis::cmd("CONFIG")
        .arg(words("SET appendonly yes"))
        .query(&mut con)
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let mut con = primary.conn();
        info_int(&mut con, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(&mut con, "persistence", "aof_rewrite_scheduled") == 0
    }));
    let keys = ["h:0", "h:1"].map(String::from);
    for (index, holder) in ["w1", "w2", "w3", "w1", "w4"].iter().enumerate() {
        acquire(&mut con, &keys[index % 2], 3, holder, 60_000 + index as u64);
    }
    release(&mut con, &keys[0], "w3");
    let before = info_int(&mut con, "replication", "master_repl_offset");
    assert_eq!(acquire(&mut con, "h:full", 1, "x", 60_000)[0], 1);
    assert_eq!(acquire(&mut con, "h:full", 1, "y", 60_000)[0], 0);
    let after_denial = info_int(&mut con, "replication", "master_repl_offset");
    assert!(after_denial > before, "the admitted acquire propagated");
    assert_eq!(acquire(&mut con, "h:full", 1, "y", 60_000)[0], 0);
    assert_eq!(
        info_int(&mut con, "replication", "master_repl_offset"),
        after_denial,
        "a denied acquire propagates nothing"
    );
    assert_eq!(wait_replicas(&mut con), 1);
    let expected = snapshot(&mut con, &keys);
    assert_eq!(snapshot(&mut replica.conn(), &keys), expected);
    run(&mut con, "DEBUG RELOAD");
    assert_eq!(snapshot(&mut con, &keys), expected);
    run(&mut con, "DEBUG LOADAOF");
    assert_eq!(snapshot(&mut con, &keys), expected);
    // The replica deletes the key with its last holder too.
    for holder in ["w2", "w1"] {
        assert_eq!(release(&mut con, &keys[1], holder), 1);
    }
    assert_eq!(wait_replicas(&mut con), 1);
    assert_eq!(dump(&mut replica.conn(), &keys[1]), None);
}

/// A replica promoted while holders are live keeps them, none lost or duplicated: their
/// slots stay taken until they expire by the (new primary's) server clock.
#[test]
fn a_promoted_replica_keeps_live_holders() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    // Holders live 2.5 s: long enough to outlast the promotion on a loaded machine.
    for holder in ["p1", "p2"] {
        assert_eq!(acquire(&mut con, "promoted", 3, holder, 2_500)[0], 1);
    }
    assert_eq!(wait_replicas(&mut con), 1);
    drop(primary);
    let mut promoted = replica.conn();
    let _: () = redis::cmd("REPLICAOF")
        .arg(words("NO ONE"))
        .query(&mut promoted)
        .unwrap();
    assert_eq!(
        free_slots(&mut promoted, "promoted", 3)[1],
        1,
        "both holders live"
    );
    assert_eq!(
        acquire(&mut promoted, "promoted", 3, "p1", 800)[..2],
        [1, 1]
    );
    assert_eq!(
        acquire(&mut promoted, "promoted", 3, "new", 60_000)[..2],
        [1, 0]
    );
    assert_eq!(acquire(&mut promoted, "promoted", 3, "late", 60_000)[0], 0);
    assert!(wait_until(Duration::from_secs(8), || {
        free_slots(&mut promoted, "promoted", 3)[1] == 2
    }));
    assert_eq!(release(&mut promoted, "promoted", "p2"), 0, "expired");
}

#[test]
fn several_limits_and_an_in_flight_slot_in_one_call() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // "100 per minute and at most 2 in flight", one atomic call.
    let call = |holder: &str| {
        let line = format!(
            "2 {{u}}:rate {{u}}:inflight SLIDING 100 60 CONCURRENCY 2 30000 HOLDER {holder}"
        );
        line
    };
    assert_eq!(multi(&mut con, &words(&call("r1"))).fields[0], 1);
    assert_eq!(multi(&mut con, &words(&call("r2"))).fields[0], 1);
    let denied = multi(&mut con, &words(&call("r3")));
    assert_eq!((denied.fields[0], denied.binding), (0, 1));
    let rate = snapshot(&mut con, &["{u}:rate".to_string()]);
    assert_eq!(multi(&mut con, &words(&call("r3"))).fields[0], 0);
    assert_eq!(
        snapshot(&mut con, &["{u}:rate".to_string()]),
        rate,
        "the rate limit was not charged for the denied call"
    );
    assert_eq!(release(&mut con, "{u}:inflight", "r1"), 1);
    let admitted = multi(&mut con, &words(&call("r3")));
    assert_eq!(admitted.fields[0], 1);
    assert_eq!(admitted.per_limit[1][1], 0, "no slot left");
    assert_eq!(
        admitted.binding, 1,
        "the in-flight limit has the fewest calls left"
    );
}

#[test]
fn bad_input_creates_nothing() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    run(&mut con, "SET string x");
    let long = "x".repeat(129);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            words("RL.ACQUIRE k 0 h 1000"),
            "ERR limit must be greater than 0 (got '0')",
        ),
        (
            words("RL.ACQUIRE k x h 1000"),
            "ERR limit must be a positive integer (got 'x')",
        ),
        (
            words("RL.ACQUIRE k 1001 h 1000"),
            "ERR limit must be at most 1000 (the ratelimit.max-holders setting) (got '1001')",
        ),
        (
            vec!["RL.ACQUIRE", "k", "2", "", "1000"],
            "ERR holder must be 1 to 128 bytes (got '')",
        ),
        (
            vec!["RL.ACQUIRE", "k", "2", &long, "1000"],
            "ERR holder must be 1 to 128 bytes (got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...')",
        ),
        (
            words("RL.ACQUIRE k 2 h 0"),
            "ERR ttl_ms must be greater than 0 (got '0')",
        ),
        (
            words("RL.ACQUIRE k 2 h 1.5"),
            "ERR ttl_ms must be a positive integer (got '1.5')",
        ),
        (
            words("RL.ACQUIRE k 2 h 3155760000001"),
            "ERR ttl_ms must be at most 3155760000000 (100 years) (got '3155760000001')",
        ),
        (
            words("RL.ACQUIRE k 2 h"),
            "ERR wrong number of arguments for 'rl.acquire' command",
        ),
        (
            words("RL.RELEASE k"),
            "ERR wrong number of arguments for 'rl.release' command",
        ),
        (
            vec!["RL.RELEASE", "k", ""],
            "ERR holder must be 1 to 128 bytes (got '')",
        ),
        (
            words("RL.ACQUIRE string 2 h 1000"),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            words("RL.RELEASE string h"),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            words("RL.PEEK k CONCURRENCY 0"),
            "ERR limit must be greater than 0 (got '0')",
        ),
        (
            words("RL.REFUND k CONCURRENCY 1 1"),
            "ERR in-flight slots are given back with RL.RELEASE key holder",
        ),
        (
            words("RL.MULTI 1 k CONCURRENCY 2 1000"),
            "ERR a CONCURRENCY limit needs HOLDER id: the caller's id for its slot",
        ),
    ];
    for (args, expected) in &cases {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(expect_refusal(&mut con, &bytes), *expected, "{args:?}");
    }
    assert_eq!(dump(&mut con, "k"), None);
    // Another algorithm's key is refused, both ways.
    let _: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg(words("tb 1 1"))
        .query(&mut con)
        .unwrap();
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.ACQUIRE", b"tb", b"1", b"h", b"10"]),
        "ERR key holds a token bucket, not an in-flight limit: use the matching command or delete the key"
    );
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.RELEASE", b"tb", b"h"]),
        "ERR key holds a token bucket, not an in-flight limit: use the matching command or delete the key"
    );
    acquire(&mut con, "sem", 1, "h", 10_000);
    assert_eq!(
        expect_refusal(&mut con, &[b"RL.TOKENBUCKET", b"sem", b"1", b"1"]),
        "ERR key holds an in-flight limit, not a token bucket: use the matching command or delete the key"
    );
    let types: HashSet<String> = ["sem", "tb"]
        .iter()
        .map(|k| redis::cmd("TYPE").arg(k).query(&mut con).unwrap())
        .collect();
    assert_eq!(types, HashSet::from(["ratelimit".to_string()]));
}
