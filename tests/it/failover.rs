//! Failover of a primary/replica pair: a crash (SIGKILL) keeps every state acknowledged with
//! `WAIT`; a promoted replica whose clock is behind never admits more than the primary would
//! and never moves a stored instant back; the old primary rejoins as an exact replica.

use std::time::Duration;

use crate::cluster_support::role;
use crate::helpers::{dump, pexpiretime, run, snapshot, wait_replicas};
use crate::limiter_model::{Algorithm, Limiter, StoredState, decode_dump, limiters, scaled};
use crate::server::{Server, wait_until};

/// Every node may serve a full sync (after a promotion): without the delay a diskless one
/// waits 5 s for more replicas.
const PRIMARY_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];
const REPLICA_ARGS: [&str; 4] = [
    "--propagation-error-behavior",
    "panic",
    "--repl-diskless-sync-delay",
    "0",
];

fn keys_of(limiters: &[Limiter]) -> Vec<String> {
    limiters.iter().map(|l| l.key.clone()).collect()
}

/// `REPLICAOF NO ONE`, then waits until `ROLE` says master.
fn promote(server: &Server) {
    let mut con = server.conn();
    run(&mut con, "REPLICAOF NO ONE");
    assert!(
        wait_until(Duration::from_secs(10), || role(server) == "master"),
        "{} was not promoted",
        server.port
    );
}

/// Restarts `old` (empty: nothing was saved) as a replica of `primary`; waits for its link.
fn rejoin(old: &mut Server, primary: &Server) {
    let port = primary.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend(REPLICA_ARGS);
    old.restart(&args);
    old.wait_for_primary_link();
}

fn assert_healthy(server: &mut Server) {
    assert!(server.is_alive(), "server {} died", server.port);
    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");
    let log = server.log();
    assert!(
        !log.contains("panicked") && !log.contains("internal error"),
        "the module panicked:\n{log}"
    );
}

#[test]
fn a_crash_failover_keeps_every_acknowledged_state() {
    let mut nodes = [Server::start(&PRIMARY_ARGS), Server::start(&REPLICA_ARGS)];
    nodes[1].replicate_from(&nodes[0]);
    let rounds = scaled(1, 5);
    let mut limiters = limiters("crash", scaled(2, 8));
    for limiter in &mut limiters {
        limiter.limit += 6 * rounds as u64; // room for every round's calls
    }
    let keys = keys_of(&limiters);
    let (mut primary, mut replica) = (0, 1);
    for round in 0..rounds {
        // Traffic with WAIT after every call; the acknowledged state of each key is recorded.
        let mut con = nodes[primary].conn();
        let mut acknowledged = Vec::new();
        for limiter in &mut limiters {
            let left = limiter.limit - limiter.used;
            for cost in [1, 2, left + 1, 1, limiter.limit + 1] {
                limiter.call_checked(&mut con, cost);
                assert_eq!(wait_replicas(&mut con), 1, "round {round}: WAIT");
            }
            acknowledged.push((
                dump(&mut con, &limiter.key),
                pexpiretime(&mut con, &limiter.key),
            ));
        }
        // One more admitted call per key, not waited for: after the crash each key holds
        // either the acknowledged state or this one, nothing else.
        let mut unacknowledged = Vec::new();
        for limiter in &limiters {
            let outcome = limiter.call(&mut con, 1);
            assert!(outcome.allowed, "{}", limiter.key);
            unacknowledged.push((
                dump(&mut con, &limiter.key),
                pexpiretime(&mut con, &limiter.key),
            ));
        }

        nodes[primary].kill();
        promote(&nodes[replica]);
        let mut con = nodes[replica].conn();
        let kept = snapshot(&mut con, &keys);
        for (((limiter, kept), acked), later) in limiters
            .iter_mut()
            .zip(&kept)
            .zip(&acknowledged)
            .zip(&unacknowledged)
        {
            assert!(
                kept == acked || kept == later,
                "round {round}: {} holds neither the acknowledged state nor the later one",
                limiter.key
            );
            if kept == later {
                limiter.used += 1;
            }
        }
        // Traffic continues on the promoted node, from the kept state.
        for limiter in &mut limiters {
            assert!(limiter.call_checked(&mut con, 1), "{}", limiter.key);
            if let Some(peek) = limiter.peek_command(1) {
                let reply: Vec<i64> = peek.query(&mut con).unwrap();
                assert_eq!(
                    limiter.outcome(&reply),
                    limiter.expected(1),
                    "{}",
                    limiter.key
                );
            }
        }
        // The old primary rejoins as a replica of the new one and ends identical.
        let (old, new) = if primary == 0 {
            let (a, b) = nodes.split_at_mut(1);
            (&mut a[0], &b[0])
        } else {
            let (a, b) = nodes.split_at_mut(1);
            (&mut b[0], &a[0])
        };
        rejoin(old, new);
        assert_eq!(wait_replicas(&mut con), 1);
        assert_eq!(snapshot(&mut old.conn(), &keys), snapshot(&mut con, &keys));
        assert_healthy(&mut nodes[replica]);
        (primary, replica) = (replica, primary);
    }
}

/// The stored instants of `key` now, with its expiry.
fn stored(con: &mut redis::Connection, key: &str) -> (StoredState, i64) {
    let payload = dump(con, key).unwrap_or_else(|| panic!("{key} is gone"));
    (decode_dump(&payload), pexpiretime(con, key))
}

/// Asserts that nothing stored moved back between two observations of one key.
fn assert_not_rewound(key: &str, before: &(StoredState, i64), after: &(StoredState, i64)) {
    let ((state_before, expiry_before), (state_after, expiry_after)) = (before, after);
    assert_eq!(state_after.kind, state_before.kind, "{key}");
    assert!(
        state_after.instant >= state_before.instant,
        "{key}: stored instant moved back from {} to {}",
        state_before.instant,
        state_after.instant
    );
    let newest = |s: &StoredState| s.entries.iter().copied().max();
    assert!(
        newest(state_after) >= newest(state_before),
        "{key}: the newest log entry moved back"
    );
    assert!(
        expiry_after >= expiry_before,
        "{key}: expiry moved back from {expiry_before} to {expiry_after}"
    );
}

const HOUR_MS: i64 = 3_600_000;

#[test]
fn a_promoted_replica_with_its_clock_behind_never_admits_more() {
    let mut primary = Server::start(&PRIMARY_ARGS);
    let replica = Server::start(&REPLICA_ARGS);
    replica.replicate_from(&primary);
    let mut replica_con = replica.conn();
    let set_offset = |con: &mut redis::Connection, ms: i64| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("ratelimit.test-clock-offset-ms")
            .arg(ms)
            .query(con)
            .unwrap();
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("ratelimit.test-clock-offset-ms")
            .query(con)
            .unwrap();
        assert_eq!(got[1], ms.to_string());
    };
    set_offset(&mut replica_con, -HOUR_MS);

    // Partly used limiters of every algorithm, acknowledged by the replica: 4 units used,
    // limits 5 to 12, refills of one unit per 1000 s and windows of about a day.
    let mut limiters = limiters("behind", scaled(2, 8));
    let mut con = primary.conn();
    for limiter in &mut limiters {
        for cost in [1, 2, 1] {
            assert!(limiter.call_checked(&mut con, cost));
        }
    }
    // A fast bucket (1000 tokens at 1/s, 400 used): an hour back, it is empty.
    let fast = "behind:fast";
    let fast_call = |con: &mut redis::Connection, cost: u64| -> Vec<i64> {
        redis::cmd("RL.TOKENBUCKET")
            .arg(fast)
            .arg(1000)
            .arg(1)
            .arg(cost)
            .query(con)
            .unwrap()
    };
    assert_eq!(fast_call(&mut con, 400)[..2], [1, 600]);
    assert_eq!(wait_replicas(&mut con), 1);
    let mut keys = keys_of(&limiters);
    keys.push(fast.to_string());
    let acknowledged = snapshot(&mut con, &keys);

    primary.kill();
    promote(&replica);
    assert_eq!(snapshot(&mut replica_con, &keys), acknowledged);
    // The old primary rejoins at once, so it receives what the skewed node computes.
    rejoin(&mut primary, &replica);

    // What the primary would still admit: the limit minus the units used (nothing refills
    // or rolls over within the test).
    let mut admitted_behind = Vec::new();
    for limiter in &limiters {
        let remaining = limiter.limit - limiter.used;
        let mut last = stored(&mut replica_con, &limiter.key);
        assert_eq!(
            last.0.kind,
            limiter.algorithm.kind_byte(),
            "{}",
            limiter.key
        );
        if let Some(peek) = limiter.peek_command(1) {
            let reply: Vec<i64> = peek.query(&mut replica_con).unwrap();
            let outcome = limiter.outcome(&reply);
            assert!(
                outcome.remaining <= remaining as i64 - i64::from(outcome.allowed),
                "{}: a peek an hour back promises {outcome:?}, the primary had {remaining} left",
                limiter.key
            );
            assert_eq!(
                stored(&mut replica_con, &limiter.key),
                last,
                "peeks write nothing"
            );
        }
        // More than the primary would admit is refused.
        let outcome = limiter.call(&mut replica_con, remaining + 1);
        assert!(!outcome.allowed, "{}: {outcome:?}", limiter.key);
        assert_eq!(stored(&mut replica_con, &limiter.key), last);
        // Unit by unit until refused.
        let mut admitted = 0;
        for _ in 0..=limiter.limit {
            let outcome = limiter.call(&mut replica_con, 1);
            let now = stored(&mut replica_con, &limiter.key);
            assert_not_rewound(&limiter.key, &last, &now);
            last = now;
            if !outcome.allowed {
                assert!(outcome.remaining <= (remaining - admitted) as i64);
                break;
            }
            admitted += 1;
            assert!(
                outcome.remaining <= (remaining - admitted) as i64,
                "{}: {outcome:?} after {admitted} admitted of {remaining}",
                limiter.key
            );
        }
        assert!(
            admitted <= remaining,
            "{}: admitted {admitted} with the clock behind; the primary had {remaining} left",
            limiter.key
        );
        // The hour that did not happen yet: a token bucket or GCRA refilling one unit per
        // 1000 s lacks 3.6 units of refill; a window still counts what it held.
        let expected = match limiter.algorithm {
            Algorithm::TokenBucket | Algorithm::Throttle => remaining.saturating_sub(4),
            _ => remaining,
        };
        assert_eq!(
            admitted, expected,
            "{}: admitted with the clock behind",
            limiter.key
        );
        admitted_behind.push(admitted);
    }
    let fast_before = stored(&mut replica_con, fast);
    for cost in [1, 400, 1] {
        // It was empty 600 s before the primary's call, so a call `cost` s of refill needs
        // is admitted in 3600 − 600 + cost seconds, minus the time since that call.
        let reply = fast_call(&mut replica_con, cost as u64);
        assert_eq!(
            reply[0], 0,
            "an hour back the fast bucket is empty: {reply:?}"
        );
        let at_most = (3_000 + cost) * 1_000;
        assert!(
            (at_most - 60_000..=at_most).contains(&reply[2]),
            "retry_after_ms {} for {cost} tokens",
            reply[2]
        );
    }
    assert_eq!(stored(&mut replica_con, fast), fast_before);
    let mut promoted = replica;
    assert_healthy(&mut promoted);

    // The clock is right again: each limiter admits exactly what is left, counting the units
    // admitted while the clock was behind.
    set_offset(&mut replica_con, 0);
    for (limiter, admitted) in limiters.iter_mut().zip(admitted_behind) {
        limiter.used += admitted;
        let mut last = stored(&mut replica_con, &limiter.key);
        while limiter.used < limiter.limit {
            assert!(limiter.call_checked(&mut replica_con, 1), "{}", limiter.key);
            let now = stored(&mut replica_con, &limiter.key);
            assert_not_rewound(&limiter.key, &last, &now);
            last = now;
        }
        assert!(
            !limiter.call_checked(&mut replica_con, 1),
            "{}",
            limiter.key
        );
    }
    assert_eq!(
        fast_call(&mut replica_con, 1)[0],
        1,
        "the fast bucket refilled"
    );
    assert_healthy(&mut promoted);

    // The rejoined old primary holds exactly what the promoted node computed.
    assert_eq!(wait_replicas(&mut replica_con), 1);
    assert_eq!(
        snapshot(&mut primary.conn(), &keys),
        snapshot(&mut replica_con, &keys)
    );
    assert_healthy(&mut primary);
}
