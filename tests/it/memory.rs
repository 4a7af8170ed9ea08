//! Memory limits and leaks (M1, M2, M4): `deny-oom` refuses new limiters while reads go on,
//! eviction removes limiters cleanly on the primary and its replica, and freeing or
//! reloading every limiter gives the memory back.
//!
//! They hold on stock Valkey defaults too, which differ from Redis's in two ways that move
//! `used_memory`: `FLUSHALL`/`FLUSHDB` and eviction free in a background thread
//! (`lazyfree-lazy-user-flush`, `lazyfree-lazy-eviction`), so the tests wait for
//! `lazyfree_pending_objects` to drain before reading memory; and the replication backlog is
//! 10 MB (1 MB in Redis), counted against `maxmemory` as it fills, so the eviction test
//! fills it before it measures the room it leaves.

use std::time::Duration;

use crate::helpers::{error_text, wait_replicas};
use crate::server::{Server, info_field, info_int, primary_and_replica, wait_until};

fn used_memory(con: &mut redis::Connection) -> i64 {
    info_int(con, "memory", "used_memory")
}

fn config_set(con: &mut redis::Connection, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap();
}

/// Waits (bounded) until no object waits to be freed in the background (lazy `FLUSHALL`,
/// `FLUSHDB`, `DEL`, eviction): until then `used_memory` still counts them.
fn wait_for_lazy_frees(con: &mut redis::Connection) {
    assert!(
        wait_until(Duration::from_secs(30), || info_int(
            con,
            "memory",
            "lazyfree_pending_objects"
        ) == 0),
        "lazyfree_pending_objects still {} after 30 s",
        info_int(con, "memory", "lazyfree_pending_objects")
    );
}

/// `FLUSHALL` (or `FLUSHDB`), then wait until its memory is really given back.
fn flush(con: &mut redis::Connection, command: &str) {
    let _: () = redis::cmd(command).query(con).unwrap();
    wait_for_lazy_frees(con);
}

fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).unwrap()
}

/// One call creating limiter `index`, cycling through every kind. Horizons are long (a full
/// refill or window of a day or more), so nothing expires while a test runs.
fn create_limiter(index: usize, key: &str) -> redis::Cmd {
    let mut command = match index % 5 {
        0 => redis::cmd("RL.TOKENBUCKET")
            .arg(key)
            .arg(100)
            .arg("0.001")
            .clone(),
        1 => redis::cmd("RL.SLIDING")
            .arg(key)
            .arg(100)
            .arg(86_400)
            .clone(),
        2 => redis::cmd("RL.FIXED")
            .arg(key)
            .arg(100)
            .arg(86_400 * 7)
            .clone(),
        3 => redis::cmd("RL.SLIDINGLOG")
            .arg(key)
            .arg(100)
            .arg(86_400)
            .clone(),
        _ => redis::cmd("CL.THROTTLE")
            .arg(key)
            .arg(10)
            .arg(1)
            .arg(86_400)
            .clone(),
    };
    // A few units per call, so sliding logs hold several entries (a heap allocation).
    command.arg(1 + index % 3);
    command
}

/// Creates limiters `prefix:0 .. prefix:count` of every kind, pipelined; returns the replies
/// that were errors (for example `-OOM` or nothing at all).
fn fill_limiters(con: &mut redis::Connection, prefix: &str, count: usize) -> usize {
    let mut errors = 0;
    for batch in (0..count).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for &index in batch {
            pipe.add_command(create_limiter(index, &format!("{prefix}:{index}")));
        }
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe
            .query::<Vec<redis::Value>>(con)
            .map(|values| values.into_iter().map(Ok).collect())
            .unwrap_or_else(|error| vec![Err(error)]);
        errors += replies
            .iter()
            .filter(|reply| matches!(reply, Err(_) | Ok(redis::Value::ServerError(_))))
            .count();
    }
    errors
}

/// M1: with `noeviction` and the memory full, every limiter write that could grow memory is
/// refused with `-OOM` (deny-oom is checked before the command runs), on new and existing
/// keys; reads (`RL.PEEK`) still answer, and writes work again once memory is freed.
#[test]
fn deny_oom_refuses_limiter_writes_but_not_peeks() {
    let server = Server::start(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.conn();
    let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg("existing")
        .arg(10)
        .arg("0.001")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply[..2], [1, 9]);
    let limit = used_memory(&mut con) + 1024 * 1024;
    config_set(&mut con, "maxmemory", limit);

    // Fill with junk until Redis itself refuses (bounded: 1 MB is ~100 values of 10 KB).
    let junk = vec![b'x'; 10 * 1024];
    let mut refused = None;
    for index in 0..1_000 {
        match redis::cmd("SET")
            .arg(format!("junk:{index}"))
            .arg(&junk)
            .query::<()>(&mut con)
        {
            Ok(()) => {}
            Err(error) => {
                refused = Some(error_text(&error));
                break;
            }
        }
    }
    let refused = refused.expect("SET was never refused");
    assert!(refused.starts_with("OOM "), "{refused}");
    // The refused SET's 10 KB argument is freed after the refusal, which can bring memory
    // back under the limit: lower the limit a little below what is in use.
    let limit = used_memory(&mut con) - 128 * 1024;
    config_set(&mut con, "maxmemory", limit);

    let writes: [&[&str]; 7] = [
        &["RL.TOKENBUCKET", "new", "10", "1"],
        &["RL.TOKENBUCKET", "existing", "10", "0.001"],
        &["RL.SLIDING", "new", "10", "60"],
        &["RL.FIXED", "new", "10", "60"],
        &["RL.SLIDINGLOG", "new", "10", "60"],
        &["CL.THROTTLE", "new", "5", "10", "60"],
        &["CL.THROTTLE", "new", "5", "10", "60", "0"],
    ];
    for args in writes {
        let mut command = redis::cmd(args[0]);
        command.arg(&args[1..]);
        let message = match command.query::<redis::Value>(&mut con) {
            Err(error) => error_text(&error),
            Ok(value) => panic!("{args:?} succeeded while out of memory: {value:?}"),
        };
        assert!(
            message.starts_with("OOM command not allowed"),
            "{args:?}: {message}"
        );
    }
    let exists: i64 = redis::cmd("EXISTS").arg("new").query(&mut con).unwrap();
    assert_eq!(exists, 0, "nothing was created");
    let peek = |con: &mut redis::Connection, key: &str| -> Vec<i64> {
        redis::cmd("RL.PEEK")
            .arg(key)
            .arg("TOKENBUCKET")
            .arg(10)
            .arg("0.001")
            .query(con)
            .unwrap()
    };
    assert_eq!(
        peek(&mut con, "existing")[..2],
        [1, 8],
        "a read still works"
    );
    assert_eq!(peek(&mut con, "new")[..2], [1, 9]);

    // Freeing memory lets writes through again (once a lazy FLUSHDB has freed it).
    flush(&mut con, "FLUSHDB");
    let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg("new")
        .arg(10)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply[0], 1);
}

/// M2: `allkeys-lru` with a small `maxmemory` evicts limiters of every kind cleanly; the
/// replica (which panics on any replicated command it rejects) receives the deletes and ends
/// with the same keys; memory stays within the limit, and evicted limiters start afresh.
#[test]
fn eviction_removes_limiters_on_primary_and_replica() {
    let (primary, mut replica) = primary_and_replica();
    let mut con = primary.conn();
    // Room for a few thousand limiters beyond what the server already uses, once the
    // replication backlog is full: it grows with writes up to `repl-backlog-size` (1 MB in
    // Redis, 10 MB in Valkey) and counts against maxmemory.
    fill_replication_backlog(&mut con);
    let maxmemory = used_memory(&mut con) + 2 * 1024 * 1024;
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    config_set(&mut con, "maxmemory", maxmemory);

    let count = 60_000;
    assert_eq!(
        fill_limiters(&mut con, "evict", count),
        0,
        "eviction makes room: no write is refused"
    );
    let evicted = info_int(&mut con, "stats", "evicted_keys");
    let left = dbsize(&mut con);
    println!("{count} limiters written, {evicted} evicted, {left} left");
    assert!(evicted > 10_000, "evicted {evicted}");
    assert!(left > 1_000 && left < count as i64, "{left} left");
    assert_eq!(
        evicted + left,
        count as i64,
        "every limiter is stored or evicted"
    );
    // Eviction may go on in the background for a moment; then memory is within the limit.
    assert!(
        wait_until(Duration::from_secs(10), || {
            used_memory(&mut con) - info_int(&mut con, "memory", "mem_not_counted_for_evict")
                <= maxmemory
        }),
        "used_memory {} above maxmemory {maxmemory}",
        used_memory(&mut con)
    );

    assert_eq!(wait_replicas(&mut con), 1);
    let mut replica_con = replica.conn();
    assert!(
        wait_until(Duration::from_secs(10), || dbsize(&mut replica_con)
            == dbsize(&mut con)),
        "replica has {} keys, primary {}",
        dbsize(&mut replica_con),
        dbsize(&mut con)
    );
    // The same keys on both: sample every 97th.
    for index in (0..count).step_by(97) {
        let key = format!("evict:{index}");
        let on_primary: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
        let on_replica: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut replica_con)
            .unwrap();
        assert_eq!(on_primary, on_replica, "{key}");
    }
    assert!(replica.is_alive());
    assert_eq!(
        info_int(&mut replica_con, "stats", "unexpected_error_replies"),
        0
    );
    assert!(!replica.log().contains("CRITICAL"), "{}", replica.log());
    // The oldest limiters went first (LRU): an evicted token bucket is full again.
    let first: i64 = redis::cmd("EXISTS").arg("evict:0").query(&mut con).unwrap();
    assert_eq!(first, 0, "evict:0 survived {evicted} evictions");
    let peek: Vec<i64> = redis::cmd("RL.PEEK")
        .arg("evict:0")
        .arg("TOKENBUCKET")
        .arg(100)
        .arg("0.001")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        peek[..2],
        [1, 99],
        "an evicted limiter starts afresh (fails open)"
    );
    assert_eq!(
        info_field(&mut con, "replication", "connected_slaves").as_deref(),
        Some("1")
    );
}

/// Propagates more than `repl-backlog-size` bytes of throwaway writes, so the backlog has
/// reached its full size (it then stays there) and the replica has read them.
fn fill_replication_backlog(con: &mut redis::Connection) {
    let (_, backlog_bytes): (String, usize) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("repl-backlog-size")
        .query(con)
        .unwrap();
    let chunk = vec![b'b'; 256 * 1024];
    for _ in 0..backlog_bytes / chunk.len() + 2 {
        let _: () = redis::cmd("SET")
            .arg("backlog-filler")
            .arg(&chunk)
            .query(con)
            .unwrap();
    }
    let _: () = redis::cmd("DEL").arg("backlog-filler").query(con).unwrap();
    assert_eq!(wait_replicas(con), 1);
    wait_for_lazy_frees(con);
    let filled = info_int(con, "replication", "repl_backlog_histlen");
    assert!(
        filled as usize >= backlog_bytes,
        "backlog holds {filled} of {backlog_bytes} bytes"
    );
}

/// A warm server with `count` limiters of every kind, and its memory before them.
fn with_limiters(count: usize) -> (Server, i64) {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Warm up allocator size classes and the dict before the baseline.
    assert_eq!(fill_limiters(&mut con, "warm", 1_000), 0);
    flush(&mut con, "FLUSHALL");
    let baseline = used_memory(&mut con);
    assert_eq!(fill_limiters(&mut con, "limiter", count), 0);
    assert_eq!(dbsize(&mut con), count as i64);
    (server, baseline)
}

/// M4: `FLUSHALL` after 100k limiters of mixed kinds brings `used_memory` back to the
/// baseline. Module values are allocated with Redis's allocator, so they are counted (M3):
/// 100k limiters take several MB, and a leak of even one small allocation per limiter
/// (≥ 1.6 MB here) is far above the tolerance of 256 KB.
#[test]
fn flushall_returns_the_memory_of_100k_limiters() {
    let count = 100_000;
    let (server, baseline) = with_limiters(count);
    let mut con = server.conn();
    let filled = used_memory(&mut con);
    assert!(
        filled - baseline > 8 * 1024 * 1024,
        "100k limiters use {} bytes",
        filled - baseline
    );
    flush(&mut con, "FLUSHALL");
    let after = used_memory(&mut con);
    println!("baseline {baseline}, with {count} limiters {filled}, after FLUSHALL {after}");
    assert!(
        (after - baseline).abs() <= 256 * 1024,
        "after FLUSHALL {after} vs baseline {baseline}"
    );
}

/// M4: 20 × `DEBUG RELOAD` (save, free every value, load every value) with 10k limiters show
/// no growth: at most 64 KB over the first reload (one leaked 16-byte allocation per
/// limiter per reload would be 160 KB each time).
#[test]
fn debug_reload_does_not_leak() {
    let (server, _) = with_limiters(10_000);
    let mut con = server.conn();
    let reload = |con: &mut redis::Connection| {
        let _: () = redis::cmd("DEBUG").arg("RELOAD").query(con).unwrap();
    };
    reload(&mut con);
    let first = used_memory(&mut con);
    for _ in 0..20 {
        reload(&mut con);
    }
    let last = used_memory(&mut con);
    println!("after 1 reload {first}, after 21 {last}");
    assert!(last - first <= 64 * 1024, "grew from {first} to {last}");
    assert_eq!(dbsize(&mut con), 10_000);
}
