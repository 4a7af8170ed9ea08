//! Redis Cluster: routing (`MOVED`, `ASK`), a cluster-aware client spreading limiters,
//! resharding a slot with its limiters, and a replica taking over with `CLUSTER FAILOVER`.
//!
//! Each test runs its own 3-primary, 3-replica loopback cluster.

use std::time::{Duration, Instant};

use redis::Value;

use crate::cluster_support::{Cluster, keyslot, node_id, role};
use crate::helpers::{error_text, multi, run, snapshot, try_multi};
use crate::limiter_model::{Algorithm, Limiter, limiters, partly_use, scaled};
use crate::server::{Server, caught_up, wait_until};

/// Every limiter command, each on its own key in `tag`'s slot: (key, command).
fn every_command(tag: &str) -> Vec<(String, redis::Cmd)> {
    let cases: [(&str, &[&str]); 10] = [
        ("RL.TOKENBUCKET", &["10", "1"]),
        ("RL.TOKENBUCKET", &["10", "1", "2"]),
        ("RL.SLIDING", &["10", "60"]),
        ("RL.FIXED", &["10", "60", "2"]),
        ("RL.SLIDINGLOG", &["10", "60"]),
        ("CL.THROTTLE", &["5", "10", "60"]),
        ("CL.THROTTLE", &["5", "10", "60", "2"]),
        ("RL.PEEK", &["TOKENBUCKET", "10", "1"]),
        ("RL.PEEK", &["SLIDINGLOG", "10", "60", "3"]),
        ("RL.REFUND", &["FIXED", "10", "60"]),
    ];
    cases
        .iter()
        .enumerate()
        .map(|(i, (command, args))| {
            let key = format!("{tag}:{i}");
            let mut cmd = redis::cmd(command);
            cmd.arg(&key).arg(*args);
            (key, cmd)
        })
        .collect()
}

fn describe(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => format!("<{other:?}>"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `cmd` and returns the error text it must get.
fn refused(con: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Err(error) => error_text(&error),
        Ok(value) => panic!("{} succeeded: {value:?}", describe(cmd)),
    }
}

/// Whether `server` itself stores `key` (`EXISTS` would redirect for a slot it does not
/// serve; `CLUSTER GETKEYSINSLOT` answers for the node).
fn exists(server: &Server, key: &str) -> bool {
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(keyslot(key))
        .arg(1000)
        .query(&mut server.conn())
        .unwrap();
    keys.iter().any(|k| k == key)
}

fn dbsize(server: &Server) -> i64 {
    redis::cmd("DBSIZE").query(&mut server.conn()).unwrap()
}

/// Waits until `replica` has processed everything `primary` had written when called.
fn wait_in_sync(primary: &Server, replica: &Server) {
    assert!(
        caught_up(&mut primary.conn(), &mut replica.conn()),
        "replica {} did not catch up with {}",
        replica.port,
        primary.port
    );
}

fn key_names(limiters: &[Limiter]) -> Vec<String> {
    limiters.iter().map(|l| l.key.clone()).collect()
}

/// Calls of one unit until the limiter is full, then one that is denied; every reply checked.
fn use_up(con: &mut dyn redis::ConnectionLike, limiter: &mut Limiter) {
    while limiter.used < limiter.limit {
        assert!(limiter.call_checked(con, 1), "{}", limiter.key);
    }
    assert!(!limiter.call_checked(con, 1), "{}", limiter.key);
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_wrong_node_redirects_every_command_and_a_cluster_client_spreads_limiters() {
    let cluster = Cluster::start(3, 1);
    let primaries = cluster.primaries();

    // MOVED from every primary, for every command, and nothing is created there.
    for (i, wrong) in primaries.iter().enumerate() {
        let owner = primaries[(i + 1) % primaries.len()];
        let tag = cluster.tag_on(owner, "moved");
        let slot = keyslot(&tag);
        let server_slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&tag)
            .query(&mut wrong.conn())
            .unwrap();
        assert_eq!(slot, server_slot);
        let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
        let mut con = wrong.conn();
        let stored = dbsize(wrong);
        for (key, cmd) in every_command(&tag) {
            assert_eq!(refused(&mut con, &cmd), moved, "{}", describe(&cmd));
            assert!(!exists(wrong, &key), "{key} created on the wrong node");
        }
        assert_eq!(dbsize(wrong), stored, "the wrong node stores nothing more");
        // The owner serves every one of them.
        let mut owner_con = owner.conn();
        for (_, cmd) in every_command(&tag) {
            let reply: Vec<i64> = cmd
                .query(&mut owner_con)
                .unwrap_or_else(|e| panic!("{}: {e}", describe(&cmd)));
            assert_eq!(reply.len(), 5);
        }
    }

    // RL.MULTI: keys of one slot are served by their owner and redirected from elsewhere;
    // keys of two slots are refused (CROSSSLOT), even by a node owning both.
    let owner = primaries[0];
    let tag = cluster.tag_on(owner, "multi");
    let other_tag = cluster.tag_on(owner, "multi-other");
    assert_ne!(keyslot(&tag), keyslot(&other_tag));
    let limits = ["FIXED", "5", "60", "TOKENBUCKET", "5", "1"];
    let call = |first: &str, second: &str| {
        let mut args = vec!["2".to_string(), first.to_string(), second.to_string()];
        args.extend(limits.iter().map(|s| s.to_string()));
        args
    };
    let same_slot = call(&format!("{tag}:a"), &format!("{tag}:b"));
    assert_eq!(multi(&mut owner.conn(), &as_strs(&same_slot)).fields[0], 1);
    let cross = call(&format!("{tag}:c"), &format!("{other_tag}:d"));
    let error = try_multi(&mut owner.conn(), &as_strs(&cross)).unwrap_err();
    assert_eq!(
        error_text(&error),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    assert!(!exists(owner, &format!("{tag}:c")));
    let mut multi_cmd = redis::cmd("RL.MULTI");
    multi_cmd.arg(as_strs(&same_slot));
    assert_eq!(
        refused(&mut primaries[1].conn(), &multi_cmd),
        format!("MOVED {} 127.0.0.1:{}", keyslot(&tag), owner.port)
    );
    let routed: (i64, i64, i64, i64, i64, i64, Vec<Vec<i64>>) = multi_cmd
        .query(&mut cluster.client().get_connection().unwrap())
        .unwrap();
    assert_eq!(routed.0, 1, "a cluster client reaches the owner");

    // A replica sends writes to its primary; with READONLY it serves RL.PEEK itself.
    let owner = primaries[0];
    let replica = cluster.replica_of(owner);
    let tag = cluster.tag_on(owner, "ro");
    let slot = keyslot(&tag);
    let mut limiter = Limiter::new(format!("{tag}:tb"), Algorithm::TokenBucket, 10);
    let mut owner_con = owner.conn();
    partly_use(&mut owner_con, &mut limiter);
    wait_in_sync(owner, replica);
    let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
    let mut replica_con = replica.conn();
    let peek = limiter.peek_command(1).unwrap();
    assert_eq!(refused(&mut replica_con, &peek), moved, "before READONLY");
    run(&mut replica_con, "READONLY");
    let peeked: Vec<i64> = peek.query(&mut replica_con).unwrap();
    let from_owner: Vec<i64> = peek.query(&mut owner_con).unwrap();
    assert_eq!(peeked[..2], from_owner[..2], "the replica's peek");
    assert_eq!(limiter.outcome(&peeked), limiter.expected(1));
    for (_, cmd) in every_command(&tag)
        .into_iter()
        .filter(|(_, cmd)| !describe(cmd).starts_with("RL.PEEK"))
    {
        assert_eq!(refused(&mut replica_con, &cmd), moved, "{}", describe(&cmd));
    }

    // A cluster-aware client puts each limiter on its slot's primary; replies are exact.
    let client = cluster.client();
    let mut con = client.get_connection().unwrap();
    let mut spread = limiters("spread", scaled(12, 120));
    for limiter in &mut spread {
        partly_use(&mut con, limiter);
    }
    for limiter in &mut spread {
        use_up(&mut con, limiter);
    }
    for primary in &primaries {
        let mine: Vec<String> = spread
            .iter()
            .filter(|l| cluster.owner(keyslot(&l.key)).port == primary.port)
            .map(|l| l.key.clone())
            .collect();
        assert!(
            !mine.is_empty(),
            "primary {} got no limiter of {}",
            primary.port,
            spread.len()
        );
        for key in &mine {
            assert!(exists(primary, key), "{key} missing on its owner");
        }
        for other in primaries.iter().filter(|p| p.port != primary.port) {
            for key in &mine {
                assert!(!exists(other, key), "{key} also on {}", other.port);
            }
        }
        // Each primary's replica holds exactly the same limiters.
        let replica = cluster.replica_of(primary);
        wait_in_sync(primary, replica);
        let mut replica_con = replica.conn();
        run(&mut replica_con, "READONLY");
        assert_eq!(
            snapshot(&mut replica_con, &mine),
            snapshot(&mut primary.conn(), &mine)
        );
    }
}

#[test]
fn resharding_moves_state_and_expiry_and_asks_for_missing_keys() {
    let cluster = Cluster::start(3, 1);
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0], primaries[1]);
    let tag = cluster.tag_on(source, "reshard");
    let slot = keyslot(&tag);
    let mut moving: Vec<Limiter> = Algorithm::ALL
        .iter()
        .map(|&algorithm| Limiter::new(format!("{tag}:{algorithm:?}"), algorithm, 10))
        .collect();
    let mut source_con = source.conn();
    for limiter in &mut moving {
        partly_use(&mut source_con, limiter);
    }
    let keys = key_names(&moving);
    let before = snapshot(&mut source_con, &keys);
    assert!(
        before
            .iter()
            .all(|(state, expiry)| state.is_some() && *expiry > 0)
    );

    let (source_id, target_id) = (node_id(source), node_id(target));
    let setslot = |server: &Server, args: &[&str]| {
        let reply: String = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query(&mut server.conn())
            .unwrap_or_else(|e| panic!("SETSLOT {args:?} on {}: {e}", server.port));
        assert_eq!(reply, "OK");
    };
    setslot(target, &["IMPORTING", &source_id]);
    setslot(source, &["MIGRATING", &target_id]);

    // Keys still on the source are served there.
    for limiter in &moving {
        if let Some(peek) = limiter.peek_command(1) {
            let reply: Vec<i64> = peek.query(&mut source_con).unwrap();
            assert_eq!(
                limiter.outcome(&reply),
                limiter.expected(1),
                "{}",
                limiter.key
            );
        }
    }
    // A missing key of the migrating slot is sent to the target, never created here.
    let ask = format!("ASK {slot} 127.0.0.1:{}", target.port);
    let missing = format!("{tag}:missing");
    for (key, cmd) in every_command(&missing) {
        assert_eq!(refused(&mut source_con, &cmd), ask, "{}", describe(&cmd));
        assert!(!exists(source, &key), "{key} created on the source");
    }
    assert_eq!(dbsize(source), keys.len() as i64);
    // The target redirects plain calls back to the owner, and serves asked ones.
    let mut target_con = target.conn();
    let moved_back = format!("MOVED {slot} 127.0.0.1:{}", source.port);
    for (_, cmd) in every_command(&missing) {
        assert_eq!(
            refused(&mut target_con, &cmd),
            moved_back,
            "{}",
            describe(&cmd)
        );
    }
    let mut asked = Limiter::new(format!("{tag}:asked"), Algorithm::TokenBucket, 10);
    let (_, reply): ((), Vec<i64>) = redis::pipe()
        .cmd("ASKING")
        .add_command(asked.command(3))
        .query(&mut target_con)
        .unwrap();
    assert_eq!(asked.outcome(&reply), asked.expected(3));
    asked.used = 3;
    assert!(exists(target, &asked.key));

    // Move the keys, then the slot.
    let started = Instant::now();
    let migrated: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("")
        .arg(0)
        .arg(10_000)
        .arg("KEYS")
        .arg(&keys)
        .query(&mut source_con)
        .unwrap();
    let migrate_ms = started.elapsed().as_millis() as i64;
    assert_eq!(migrated, "OK");
    setslot(target, &["NODE", &target_id]);
    setslot(source, &["NODE", &target_id]);
    for other in &primaries[2..] {
        setslot(other, &["NODE", &target_id]);
    }
    cluster.wait_healthy();
    assert_eq!(cluster.owner(slot).port, target.port);

    let after = snapshot(&mut target_con, &keys);
    for ((key, (state, expiry)), (state_before, expiry_before)) in
        keys.iter().zip(&after).zip(&before)
    {
        assert_eq!(state, state_before, "{key}: DUMP on the new owner");
        // MIGRATE sends the TTL relative to the source's clock and RESTORE adds it to the
        // target's, so the expiry can only move later by the time the transfer took.
        assert!(
            (*expiry_before..=*expiry_before + migrate_ms + 1).contains(expiry),
            "{key}: PEXPIRETIME {expiry_before} became {expiry} (MIGRATE took {migrate_ms} ms)"
        );
    }
    for key in &keys {
        assert!(!exists(source, key), "{key} left on the source");
    }
    let moved = format!("MOVED {slot} 127.0.0.1:{}", target.port);
    for limiter in &moving {
        assert_eq!(refused(&mut source_con, &limiter.command(1)), moved);
    }
    // Traffic continues on the new owner, from the migrated state.
    moving.push(asked);
    for limiter in &mut moving {
        use_up(&mut target_con, limiter);
    }
    let all = key_names(&moving);
    let replica = cluster.replica_of(target);
    wait_in_sync(target, replica);
    let mut replica_con = replica.conn();
    run(&mut replica_con, "READONLY");
    assert_eq!(
        snapshot(&mut replica_con, &all),
        snapshot(&mut target_con, &all)
    );
}

/// A shard's limiters: its tag (a hash tag of one of its slots), its primary's port, and
/// limiters of every algorithm under the tag.
struct Shard {
    tag: String,
    primary: u16,
    limiters: Vec<Limiter>,
}

fn every_limiter<'a>(
    shards: &'a mut [Shard],
    elsewhere: &'a mut [Limiter],
) -> impl Iterator<Item = &'a mut Limiter> {
    shards
        .iter_mut()
        .flat_map(|shard| shard.limiters.iter_mut())
        .chain(elsewhere.iter_mut())
}

#[test]
fn cluster_failover_keeps_state_and_traffic_follows_the_new_primary() {
    let cluster = Cluster::start(3, 1);
    let client = cluster.client();
    let mut con = client.get_connection().unwrap();
    // Limiters on each shard (by hash tag), and others anywhere.
    let mut shards: Vec<Shard> = cluster
        .primaries()
        .into_iter()
        .map(|primary| {
            let tag = cluster.tag_on(primary, "failover");
            let limiters = (0..scaled(1, 3))
                .flat_map(|i| {
                    Algorithm::ALL.map(|algorithm| {
                        Limiter::new(format!("{tag}:{algorithm:?}:{i}"), algorithm, 40)
                    })
                })
                .collect();
            Shard {
                tag,
                primary: primary.port,
                limiters,
            }
        })
        .collect();
    let mut elsewhere = limiters("anywhere", scaled(3, 20));
    for limiter in every_limiter(&mut shards, &mut elsewhere) {
        partly_use(&mut con, limiter);
    }

    // Each round fails over the next shard. A replica that won an election less than
    // 4 × node timeout ago would reuse that election's votes and stale epoch (Redis then
    // turns it back into a replica), so a node is promoted again only after that: time that
    // must pass on Redis's own clock, which no test hook moves.
    let mut elected: Vec<(u16, Instant)> = Vec::new();
    for round in 0..scaled(1, 6) {
        let shard = &mut shards[round % 3];
        let primary = cluster.node(shard.primary);
        let replica = cluster.replica_of(primary);
        if let Some((_, at)) = elected.iter().find(|(port, _)| *port == replica.port) {
            std::thread::sleep(
                (*at + Duration::from_secs(9)).saturating_duration_since(Instant::now()),
            );
        }
        let keys = key_names(&shard.limiters);
        let slot = keyslot(&shard.tag);
        wait_in_sync(primary, replica);
        let before = snapshot(&mut primary.conn(), &keys);
        let reply: String = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut replica.conn())
            .unwrap();
        assert_eq!(reply, "OK");
        assert!(
            wait_until(Duration::from_secs(20), || role(replica) == "master"
                && role(primary) == "slave"),
            "round {round}: {} did not take over from {}",
            replica.port,
            primary.port
        );
        elected.retain(|(port, _)| *port != replica.port);
        elected.push((replica.port, Instant::now()));
        cluster.wait_healthy();
        assert_eq!(cluster.owner(slot).port, replica.port);
        assert_eq!(
            snapshot(&mut replica.conn(), &keys),
            before,
            "round {round}: the new primary's state"
        );
        // The old primary now redirects writes to the new one.
        let moved = format!("MOVED {slot} 127.0.0.1:{}", replica.port);
        assert_eq!(
            refused(&mut primary.conn(), &shard.limiters[0].command(1)),
            moved
        );
        shard.primary = replica.port;
        // The same client follows the new primary; replies continue from the kept state.
        for limiter in every_limiter(&mut shards, &mut elsewhere) {
            limiter.call_checked(&mut con, 1);
        }
        wait_in_sync(replica, primary);
        let mut old_con = primary.conn();
        run(&mut old_con, "READONLY");
        assert_eq!(
            snapshot(&mut old_con, &keys),
            snapshot(&mut replica.conn(), &keys),
            "round {round}: the old primary follows the new one"
        );
    }
    for limiter in every_limiter(&mut shards, &mut elsewhere) {
        use_up(&mut con, limiter);
    }
}
