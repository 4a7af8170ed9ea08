//! Pacing (`MAXWAIT ms` on `RL.TOKENBUCKET`): a call whose tokens refill within the wait is
//! admitted now and told how long to wait; the bucket goes into debt. With capacity 1 this
//! is the leaky bucket as a queue.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::helpers::{dump, expect_refusal, run, snapshot, wait_replicas, words};
use crate::server::{Server, primary_and_replica};

fn server_time_ms(con: &mut redis::Connection) -> i64 {
    let time: Vec<i64> = redis::cmd("TIME").query(con).unwrap();
    time[0] * 1000 + time[1] / 1000
}

/// `RL.TOKENBUCKET key <args>` → the five fields.
fn paced(con: &mut redis::Connection, key: &str, args: &str) -> [i64; 5] {
    let reply: Vec<i64> = redis::cmd("RL.TOKENBUCKET")
        .arg(key)
        .arg(words(args))
        .query(con)
        .unwrap();
    reply.try_into().unwrap()
}

#[test]
fn a_queue_spaces_calls_one_interval_apart() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // Capacity 1, 10 per second: one call every 100 ms, queueing up to a second.
    let mut pipe = redis::pipe();
    for _ in 0..13 {
        pipe.cmd("RL.TOKENBUCKET")
            .arg(words("queue 1 10 MAXWAIT 1000"));
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut con).unwrap();
    let waits: Vec<i64> = replies.iter().map(|reply| reply[2]).collect();
    // The pipeline runs within a few ms of server time: the waits step by 100 ms.
    for (index, reply) in replies.iter().take(11).enumerate() {
        let expected = 100 * index as i64;
        assert_eq!(
            reply[0], 1,
            "call {index} is admitted with a wait: {waits:?}"
        );
        assert!(
            (expected - 5..=expected).contains(&reply[2]),
            "call {index} waits {} ms, not ~{expected}: {waits:?}",
            reply[2]
        );
        assert_eq!(reply[1], 0, "a bucket in debt has nothing left");
    }
    // The 12th would wait 1100 ms: denied, told when a call fits in a 1 s wait again.
    for reply in &replies[11..] {
        assert_eq!(reply[0], 0, "{waits:?}");
        assert!((95..=100).contains(&reply[2]), "{reply:?}");
    }
    assert_eq!(replies[11], replies[12], "a denied call takes nothing");
    // A call without MAXWAIT sees the debt: denied until the queue has drained.
    let plain = paced(&mut con, "queue", "1 10");
    assert_eq!(plain[0], 0);
    assert!((1000..=1100).contains(&plain[2]), "{plain:?}");
}

#[test]
fn callers_that_wait_as_told_never_exceed_the_rate() {
    let server = Server::start(&[]);
    // Capacity 2, 20 per second, waits of up to 300 ms; 4 clients as fast as they can. Each
    // admitted call proceeds at (server time of the call + its wait); the server time is
    // bracketed by TIME before and after, so each proceed instant is known to lie in
    // [earliest, latest].
    let proceeded: Arc<Mutex<Vec<(i64, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_millis(1500);
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut con = server.conn();
            let proceeded = Arc::clone(&proceeded);
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let before_ms = server_time_ms(&mut con);
                    let reply = paced(&mut con, "paced", "2 20 MAXWAIT 300");
                    let after_ms = server_time_ms(&mut con);
                    let wait_ms = reply[2].max(0);
                    if reply[0] == 1 {
                        let at = (before_ms + wait_ms, after_ms + wait_ms);
                        proceeded.lock().unwrap().push(at);
                    }
                    // The wait is what is tested: each caller waits as it was told.
                    std::thread::sleep(Duration::from_millis(wait_ms as u64));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let mut at = proceeded.lock().unwrap().clone();
    at.sort_unstable();
    assert!(
        at.len() >= 20,
        "pacing admits at the rate: {} calls",
        at.len()
    );
    // Calls i..=j proceed within at most (latest_j − earliest_i) ms, which may hold at most
    // capacity + rate × that (+1 for the ms clock).
    for (i, &(earliest, _)) in at.iter().enumerate() {
        for (j, &(_, latest)) in at.iter().enumerate().skip(i) {
            let calls = (j - i + 1) as i64;
            let bound = 2 + (latest - earliest).max(0) * 20 / 1000 + 1;
            assert!(
                calls <= bound,
                "{calls} calls within [{earliest}, {latest}] ms, bound {bound}"
            );
        }
    }
    let span_ms = at.last().unwrap().1 - at[0].0;
    eprintln!(
        "{} calls proceeded within {span_ms} ms (bound {})",
        at.len(),
        2 + span_ms * 20 / 1000 + 1
    );
}

#[test]
fn a_reservation_given_up_is_refunded() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    assert_eq!(paced(&mut con, "r", "1 1 MAXWAIT 5000")[..3], [1, 0, 0]);
    let reserved = paced(&mut con, "r", "1 1 MAXWAIT 5000");
    assert_eq!(reserved[0], 1);
    assert!((990..=1000).contains(&reserved[2]), "{reserved:?}");
    // The caller gives up waiting: its token goes back, and the next caller waits as if it
    // had never reserved.
    let refund: Vec<i64> = redis::cmd("RL.REFUND")
        .arg(words("r TOKENBUCKET 1 1"))
        .query(&mut con)
        .unwrap();
    assert_eq!(refund[0], 1);
    let next = paced(&mut con, "r", "1 1 MAXWAIT 5000");
    assert!((990..=1000).contains(&next[2]), "{next:?}");
}

#[test]
fn debt_replicates_persists_and_restores_exactly() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.conn();
    for _ in 0..5 {
        assert_eq!(paced(&mut con, "debt", "2 1 MAXWAIT 60000")[0], 1);
    }
    let keys = ["debt".to_string()];
    assert_eq!(wait_replicas(&mut con), 1);
    let expected = snapshot(&mut con, &keys);
    assert_eq!(snapshot(&mut replica.conn(), &keys), expected);
    run(&mut con, "DEBUG RELOAD");
    assert_eq!(snapshot(&mut con, &keys), expected);
    let payload = dump(&mut con, "debt").unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(dump(&mut con, "copy"), dump(&mut con, "debt"));
    // Bad MAXWAIT use is refused and creates nothing.
    assert_eq!(
        expect_refusal(
            &mut con,
            &[b"RL.FIXED", b"f", b"10", b"60", b"MAXWAIT", b"5"]
        ),
        "ERR MAXWAIT paces token buckets only (RL.TOKENBUCKET)"
    );
    assert_eq!(
        expect_refusal(
            &mut con,
            &[b"RL.TOKENBUCKET", b"t", b"1", b"1", b"MAXWAIT", b"86400001"]
        ),
        "ERR MAXWAIT must be at most 86400000 ms (1 day) (got '86400001')"
    );
    assert_eq!(dump(&mut con, "f"), None);
    assert_eq!(dump(&mut con, "t"), None);
}

/// A queue is first in, first out: when the rate changes, the reservations already handed
/// out stay where they were scheduled and the next call queues behind the last of them at
/// the new rate. Raising the rate lets no new call overtake one already told to wait;
/// lowering it pushes back none of them.
#[test]
fn a_rate_change_keeps_the_queue_of_a_bucket_in_debt() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for (key, new_rate, interval_ms) in [("faster", "10", 100), ("slower", "0.1", 10_000)] {
        // The first call's instant, bracketed by the server clock: five calls of one token
        // on a bucket of two at 1/s leave the queue's tail exactly 3 s after it.
        let before_first = server_time_ms(&mut con);
        let waits: Vec<i64> = (0..5)
            .map(|_| paced(&mut con, key, "2 1 MAXWAIT 5000")[2])
            .collect();
        assert_eq!(
            waits[..2],
            [0, 0],
            "two tokens, then reservations: {waits:?}"
        );
        let next = paced(&mut con, key, &format!("2 {new_rate} MAXWAIT 20000"));
        let after_change = server_time_ms(&mut con);
        assert_eq!(next[..2], [1, 0], "{key}: admitted, in debt: {next:?}");
        // wait = first + 3 s + one interval - now, rounded up to the ms, where the first call
        // came after before_first and the changed call (now) after it, before after_change.
        let tail_and_interval = 3_000 + interval_ms;
        let earliest = before_first + tail_and_interval - after_change - 1;
        let latest = tail_and_interval + 1;
        assert!(
            (earliest..=latest).contains(&next[2]),
            "{key}: the next call waits for the queue's tail plus one interval at the new rate \
             ({earliest}..={latest} ms): {next:?}"
        );
    }
}
