//! A network partition: one primary of a 3 + 3 container cluster is cut off its network
//! (`docker network disconnect`) while clients on both sides keep calling its limiters: one
//! on the majority side (it follows the slot to the promoted replica), and one that still
//! reaches the cut-off primary over a second network (clients in the same zone as the cut-off
//! node).
//!
//! Measured and asserted:
//! - the cut-off primary keeps admitting only until it sees it lost the majority, then
//!   refuses with `CLUSTERDOWN` and never admits again while cut off; the window is bounded
//!   by `cluster-node-timeout` (see [`ADMIT_WINDOW_BOUND_MS`]);
//! - what it admitted meanwhile is the over-admission: the new primary never learns of it;
//!   on a token bucket of capacity C and rate r it is at most C + r × window;
//! - the promoted replica goes on from the state it had replicated, exactly: it never admits
//!   more than that state allows;
//! - when the network heals, the old primary rejoins as a replica of the new one and holds
//!   its state byte for byte.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::cluster::keyslot;
use redis_ratelimit_testkit::docker::{Network, connect, docker};
use redis_ratelimit_testkit::docker_cluster::{ContainerCluster, readonly_conn, url};
use redis_ratelimit_testkit::helpers::error_text;
use redis_ratelimit_testkit::server::{caught_up, info_field, wait_until};

use crate::cluster::NODE_TIMEOUT_MS;
use crate::{bucket_tokens, setup};

/// The rate limiter whose over-admission is the README's figure: a token bucket.
const RATE_CAPACITY: i64 = 20;
const RATE_PER_S: i64 = 50;
/// The counter: a token bucket refilling one token per 1000 s, so `capacity - tokens` is
/// the number of calls the node holding it has seen admitted.
const COUNTER_CAPACITY: i64 = 1_000_000;
const COUNTER_RATE: &str = "0.001";

/// How long after the cut the cut-off primary may still admit: it marks the other
/// primaries as failing once a ping has gone `cluster-node-timeout` without an answer, and
/// the next ping to a node is sent at most half a timeout after the last answer; plus a
/// second for the cluster cron (100 ms), a slow 2-core machine and the cut itself.
const ADMIT_WINDOW_BOUND_MS: u64 = NODE_TIMEOUT_MS * 3 / 2 + 1_000;

/// How long a client waits for a node before it counts the call as failed.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Rate,
    Counter,
}

/// One call as a client saw it.
#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    key: Key,
    /// The node (index into the client's targets) it was sent to.
    target: usize,
    /// `Some(admitted)` for a reply, `None` for an error.
    admitted: Option<bool>,
    error: String,
}

/// A client calling both limiters in a loop on its first reachable target, in order: it
/// moves to the next target when a node stops answering (never back).
struct Client {
    calls: Arc<Mutex<Vec<Call>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Client {
    fn start(targets: Vec<String>, tag: String) -> Client {
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (calls, stop) = (calls.clone(), stop.clone());
            std::thread::spawn(move || run_client(&targets, &tag, &calls, &stop))
        };
        Client {
            calls,
            stop,
            thread: Some(thread),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn stop(&mut self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.calls()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn run_client(targets: &[String], tag: &str, calls: &Mutex<Vec<Call>>, stop: &AtomicBool) {
    let open = |url: &str| -> Option<redis::Connection> {
        let con = redis::Client::open(url)
            .and_then(|client| client.get_connection_with_timeout(CALL_TIMEOUT))
            .ok()?;
        con.set_read_timeout(Some(CALL_TIMEOUT)).ok()?;
        con.set_write_timeout(Some(CALL_TIMEOUT)).ok()?;
        Some(con)
    };
    let mut target = 0;
    let mut con = open(&targets[0]);
    while !stop.load(Ordering::Relaxed) {
        for key in [Key::Counter, Key::Rate] {
            let Some(connection) = con.as_mut() else {
                break;
            };
            let mut command = redis::cmd("RL.TOKENBUCKET");
            match key {
                Key::Rate => command
                    .arg(format!("{tag}:rate"))
                    .arg(RATE_CAPACITY)
                    .arg(RATE_PER_S),
                Key::Counter => command
                    .arg(format!("{tag}:counter"))
                    .arg(COUNTER_CAPACITY)
                    .arg(COUNTER_RATE),
            };
            let reply: redis::RedisResult<Vec<i64>> = command.query(connection);
            let (admitted, error) = match &reply {
                Ok(reply) => (Some(reply[0] == 1), String::new()),
                Err(error) => (None, error_text(error)),
            };
            calls.lock().unwrap().push(Call {
                at: Instant::now(),
                key,
                target,
                admitted,
                error,
            });
            // A node that stopped answering (not one that answers with an error): next.
            if reply
                .as_ref()
                .is_err_and(|e| e.is_io_error() || e.is_timeout())
            {
                con = None;
            }
        }
        if con.is_none() {
            if target + 1 < targets.len() {
                target += 1;
            }
            con = open(&targets[target]);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn admitted(calls: &[Call], key: Key, filter: impl Fn(&Call) -> bool) -> i64 {
    calls
        .iter()
        .filter(|c| c.key == key && c.admitted == Some(true) && filter(c))
        .count() as i64
}

/// `(DUMP, PEXPIRETIME)` of a key on the node at `ip`, read even from a replica.
fn state(ip: &str, key: &str) -> (Option<Vec<u8>>, i64) {
    let mut con = readonly_conn(ip);
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(&mut con).unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).unwrap();
    (dump, expiry)
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

#[test]
fn a_cut_off_primary_over_admits_only_until_it_sees_the_partition() {
    let Some(setup) = setup() else { return };
    // Declared first, so removed last: the cut-off primary's second network.
    let side = Network::create("side");
    let cluster = ContainerCluster::start(&setup.image, 3, 1, NODE_TIMEOUT_MS);
    let primary = cluster.primaries().remove(0);
    let old_primary = cluster.node(&primary.ip);
    let replica_ip = cluster.replica_of(&primary);
    docker(&["network", "connect", &side.name, &old_primary.name]);
    let side_ip = old_primary.ip_on(&side);
    let tag = (0..100_000)
        .map(|i| format!("{{partition{i}}}"))
        .find(|tag| {
            let slot = keyslot(tag);
            primary
                .slots
                .iter()
                .any(|(from, to)| (*from..=*to).contains(&slot))
        })
        .unwrap();
    let (rate_key, counter_key) = (format!("{tag}:rate"), format!("{tag}:counter"));

    // Both clients call the primary's limiters; the majority-side one falls back to the
    // replica when the primary stops answering.
    let mut minority = Client::start(vec![url(&side_ip)], tag.clone());
    let mut majority = Client::start(vec![url(&primary.ip), url(&replica_ip)], tag.clone());
    assert!(
        wait_until(Duration::from_secs(20), || {
            admitted(&minority.calls(), Key::Counter, |_| true) >= 200
                && admitted(&majority.calls(), Key::Counter, |_| true) >= 200
        }),
        "no traffic before the cut"
    );

    let cut = Instant::now();
    cluster.cut_off(old_primary);
    let cut_done = Instant::now();
    // What the replica holds now is all it will ever get from the old primary.
    let mut replica_con = readonly_conn(&replica_ip);
    let counter_replicated = bucket_tokens(
        &mut replica_con,
        &counter_key,
        COUNTER_CAPACITY,
        COUNTER_RATE,
    );
    let rate_replicated = bucket_tokens(
        &mut replica_con,
        &rate_key,
        RATE_CAPACITY,
        &RATE_PER_S.to_string(),
    );
    let replicated_at = Instant::now();

    // The cut-off primary stops admitting (CLUSTERDOWN), and the replica takes over.
    assert!(
        wait_until(Duration::from_millis(NODE_TIMEOUT_MS * 5), || minority
            .calls()
            .iter()
            .any(|c| c.at > cut && c.error.contains("CLUSTERDOWN"))),
        "the cut-off primary never refused: {:?}",
        minority.calls().last()
    );
    assert!(
        wait_until(Duration::from_secs(30), || admitted(
            &majority.calls(),
            Key::Rate,
            |c| c.target == 1
        ) >= RATE_PER_S),
        "the replica did not take over: {:?}",
        majority.calls().last()
    );
    let minority_calls = minority.stop();
    let majority_calls = majority.stop();
    let stopped = Instant::now();

    // The cut-off side: admissions after the cut, and when they stopped.
    let after_cut = |c: &Call| c.at > cut;
    let first_refusal = minority_calls
        .iter()
        .find(|c| after_cut(c) && c.error.contains("CLUSTERDOWN"))
        .unwrap()
        .at;
    let last_admission = minority_calls
        .iter()
        .filter(|c| after_cut(c) && c.admitted == Some(true))
        .map(|c| c.at)
        .max()
        .unwrap_or(cut);
    let admit_window = last_admission.duration_since(cut);
    let over_admitted_rate = admitted(&minority_calls, Key::Rate, after_cut);
    let over_admitted_counter = admitted(&minority_calls, Key::Counter, after_cut);
    assert!(
        !minority_calls
            .iter()
            .any(|c| c.at > first_refusal && c.admitted.is_some()),
        "the cut-off primary answered a limiter call after refusing with CLUSTERDOWN"
    );
    assert!(
        ms(admit_window) <= ADMIT_WINDOW_BOUND_MS,
        "the cut-off primary admitted for {} ms after the cut (bound {ADMIT_WINDOW_BOUND_MS})",
        ms(admit_window)
    );
    assert!(
        over_admitted_rate <= RATE_CAPACITY + RATE_PER_S * ms(admit_window) as i64 / 1000 + 1,
        "{over_admitted_rate} admitted in {} ms",
        ms(admit_window)
    );

    // The new primary went on from what it had replicated, exactly: the counter lost only
    // what it never received, and the rate limiter admitted no more than its replicated
    // tokens plus the refill since.
    let takeover = majority_calls
        .iter()
        .find(|c| c.target == 1 && c.admitted.is_some())
        .unwrap()
        .at;
    let new_primary_counter = admitted(&majority_calls, Key::Counter, |c| c.target == 1);
    let new_primary_rate = admitted(&majority_calls, Key::Rate, |c| c.target == 1);
    let mut new_primary = connect(&url(&replica_ip));
    let counter_now = bucket_tokens(
        &mut new_primary,
        &counter_key,
        COUNTER_CAPACITY,
        COUNTER_RATE,
    );
    assert!(
        (0..=1).contains(&(counter_now - (counter_replicated - new_primary_counter))),
        "the new primary's counter holds {counter_now} tokens: replicated \
         {counter_replicated}, then {new_primary_counter} admitted by it"
    );
    // Its first answer came at `takeover`: by then its bucket held at most the replicated
    // tokens plus their refill (never more than the capacity), then it refilled at the rate.
    // (+2: the peek and the refill figures are whole tokens, rounded down.)
    let refill_until =
        |from: Instant, to: Instant| RATE_PER_S * ms(to.duration_since(from)) as i64 / 1000;
    let at_takeover = RATE_CAPACITY.min(rate_replicated + refill_until(replicated_at, takeover));
    let refill = refill_until(takeover, stopped);
    assert!(
        new_primary_rate <= at_takeover + refill + 2,
        "the new primary admitted {new_primary_rate}: at most {at_takeover} tokens when it \
         took over (replicated {rate_replicated}), and {refill} refilled since"
    );
    let admitted_by_old_primary = admitted(&minority_calls, Key::Counter, |_| true)
        + admitted(&majority_calls, Key::Counter, |c| c.target == 0);
    let never_replicated = admitted_by_old_primary - (COUNTER_CAPACITY - counter_replicated);
    // At least every admission once the cut was done, at most those after the cut began
    // plus a second of replication lag before it.
    let surely_lost = admitted(&minority_calls, Key::Counter, |c| c.at > cut_done);
    let lag_bound = admitted(&minority_calls, Key::Counter, |c| {
        c.at + Duration::from_secs(1) > cut
    }) + admitted(&majority_calls, Key::Counter, |c| {
        c.target == 0 && c.at + Duration::from_secs(1) > cut
    });
    assert!(
        (surely_lost..=lag_bound).contains(&never_replicated),
        "{never_replicated} admitted calls never replicated: expected from {surely_lost} \
         (after the cut) to {lag_bound} (including a second before it)"
    );

    // Heal: the old primary rejoins as a replica of the new one, with its state.
    let heal = Instant::now();
    cluster.reconnect(old_primary, &primary.ip);
    let mut old_con = connect(&url(&side_ip));
    assert!(
        wait_until(Duration::from_secs(60), || {
            info_field(&mut old_con, "replication", "role").as_deref() == Some("slave")
                && info_field(&mut old_con, "replication", "master_host").as_deref()
                    == Some(replica_ip.as_str())
                && info_field(&mut old_con, "replication", "master_link_status").as_deref()
                    == Some("up")
        }),
        "the old primary did not rejoin as a replica of {replica_ip}: {:?}",
        info_field(&mut old_con, "replication", "role")
    );
    let rejoined = heal.elapsed();
    cluster.wait_healthy();
    assert!(
        caught_up(&mut new_primary, &mut old_con),
        "the old primary did not catch up with the new one"
    );
    for key in [&rate_key, &counter_key] {
        assert_eq!(state(&primary.ip, key), state(&replica_ip, key), "{key}");
    }
    docker(&["network", "disconnect", &side.name, &old_primary.name]);

    let _ = writeln!(
        std::io::stderr(),
        "partition (cluster-node-timeout {NODE_TIMEOUT_MS} ms, cut took {} ms): the cut-off \
         primary admitted for {} ms after the cut (first CLUSTERDOWN at {} ms): \
         {over_admitted_rate} calls on a {RATE_CAPACITY}-token, {RATE_PER_S}/s bucket and \
         {over_admitted_counter} on a counter; {never_replicated} admitted calls never reached \
         the replica; the replica took over at {} ms and admitted {new_primary_rate} \
         (at most {at_takeover} tokens then, {refill} refilled since); the old primary rejoined as \
         its replica {} ms after the heal, with identical state",
        ms(cut_done.duration_since(cut)),
        ms(admit_window),
        ms(first_refusal.duration_since(cut)),
        ms(takeover.duration_since(cut)),
        ms(rejoined),
    );
}
