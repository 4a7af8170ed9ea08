//! The fleet test: Redis with the module, K replicas of the demo service as separate
//! processes, and a load generator sending requests round-robin, as a load balancer would.
//!
//! - one quota whatever the replica count (K = 1, 3, 6): admitted == quota, exactly;
//! - leases: admitted never above the quota, Redis calls per request cut by the lease size;
//! - Redis stopped mid-run: answers within the timeout plus a few ms, each replica admits at
//!   most its share, `/metrics` shows fallback decisions; Redis back: the store decides again;
//! - Redis Cluster: a policy with limits in two slots stays all-or-nothing.
//!
//! The figures are printed (`cargo test -p redis-ratelimit-client --test client fleet -- --nocapture`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_ratelimit_client::Algorithm;
use redis_ratelimit_client::store::StoreBackend;
use redis_ratelimit_testkit::helpers::commandstat_calls_of;
use redis_ratelimit_testkit::server::{Server, info_field, wait_until};

/// The window of the fleet's bucket: a day, so refill during a test is below one token.
const WINDOW_S: u64 = 86_400;

/// The demo service binary, built next to this test (`make client-test` builds it; so does
/// `cargo test -p redis-ratelimit-client`, which builds examples).
pub(super) fn demo_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile.join("examples").join("demo-service");
    assert!(
        binary.exists(),
        "{} is missing: build it first with \
         `cargo build -p redis-ratelimit-client --example demo-service`",
        binary.display()
    );
    binary
}

/// One replica of the demo service; killed on drop, even when a test fails.
pub(super) struct Replica {
    child: Child,
    pub(super) addr: SocketAddr,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `count` replicas in parallel on free ports and waits until each says where it
/// listens.
pub(super) fn fleet(redis: &str, count: usize, limit: u64, extra: &[&str]) -> Vec<Replica> {
    let binary = demo_binary();
    let mut starting = Vec::new();
    for _ in 0..count {
        let mut child = Command::new(&binary)
            .args(["--redis", redis, "--listen", "127.0.0.1:0"])
            .args([
                "--limit",
                &limit.to_string(),
                "--window",
                &WINDOW_S.to_string(),
            ])
            .args(["--replicas", &count.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        starting.push((child, receiver));
    }
    starting
        .into_iter()
        .map(|(child, receiver)| {
            let mut replica = Replica {
                child,
                addr: "0.0.0.0:0".parse().unwrap(),
            };
            let line = receiver
                .recv_timeout(Duration::from_secs(20))
                .expect("the demo service did not start within 20 s");
            replica.addr = line
                .trim()
                .strip_prefix("listening on ")
                .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
                .parse()
                .unwrap();
            replica
        })
        .collect()
}

/// A response, as much of it as the tests read.
pub(super) struct Response {
    pub(super) status: u16,
    pub(super) headers: BTreeMap<String, String>,
    pub(super) body: String,
}

/// A minimal HTTP/1.1 client on one keep-alive connection.
pub(super) struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    pub(super) fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            reader: BufReader::new(stream),
        }
    }

    pub(super) fn get(&mut self, path: &str, api_key: &str) -> Response {
        let request = format!("GET {path} HTTP/1.1\r\nHost: fleet\r\nx-api-key: {api_key}\r\n\r\n");
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = BTreeMap::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let (name, value) = trimmed.split_once(':').unwrap();
            headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
        }
        let length: usize = headers["content-length"].parse().unwrap();
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        Response {
            status,
            headers,
            body: String::from_utf8(body).unwrap(),
        }
    }
}

/// Sends `requests` requests for `api_key` round-robin over the replicas; returns each
/// request's replica index, status and latency.
pub(super) fn round_robin(
    replicas: &[Replica],
    api_key: &str,
    requests: usize,
) -> Vec<(usize, u16, Duration)> {
    let mut clients: Vec<Client> = replicas.iter().map(|r| Client::connect(r.addr)).collect();
    (0..requests)
        .map(|request| {
            let index = request % clients.len();
            let started = Instant::now();
            let response = clients[index].get("/", api_key);
            (index, response.status, started.elapsed())
        })
        .collect()
}

pub(super) fn admitted(results: &[(usize, u16, Duration)]) -> u64 {
    results
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .count() as u64
}

/// Sums one metric over the replicas' `/metrics` (lines whose name and labels contain every
/// one of `parts`).
pub(super) fn metric(replicas: &[Replica], parts: &[&str]) -> f64 {
    replicas
        .iter()
        .map(|replica| {
            let text = Client::connect(replica.addr).get("/metrics", "-").body;
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .filter(|line| parts.iter().all(|part| line.contains(part)))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum()
}

/// Calls of the module's commands so far (`INFO commandstats`).
pub(super) fn module_calls(server: &Server) -> u64 {
    commandstat_calls_of(
        &mut server.conn(),
        &["rl.tokenbucket", "rl.multi", "rl.refund"],
    )
}

pub(super) fn url(server: &Server) -> String {
    format!("redis://127.0.0.1:{}/", server.port)
}

/// Tokens in the demo's bucket for `api_key`. `RL.PEEK` replies what a call would (and
/// changes nothing): `remaining` after taking one token when it would be admitted.
fn peek_remaining(server: &Server, api_key: &str, limit: u64) -> i64 {
    let bucket = Algorithm::token_bucket(limit, Duration::from_secs(WINDOW_S)).unwrap();
    let reply: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(format!("demo:{{{api_key}}}"))
        .arg("TOKENBUCKET")
        .arg(bucket.wire_args())
        .query(&mut server.conn())
        .unwrap();
    reply[1] + reply[0]
}

#[test]
fn one_quota_whatever_the_replica_count() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    let quota = 60;
    for count in [1, 3, 6] {
        // A generous timeout (a loaded CI machine is slow): this test is about exactness,
        // not about the fallback.
        let replicas = fleet(&url(&server), count, quota, &["--timeout-ms", "1000"]);
        let key = format!("fleet-{count}");
        let results = round_robin(&replicas, &key, 3 * quota as usize);
        let fallbacks = metric(&replicas, &["source=\"fallback\""]);
        assert_eq!(
            fallbacks, 0.0,
            "K={count}: a store call fell back; exactness not tested"
        );
        let admitted = admitted(&results);
        println!(
            "fleet K={count}: {admitted} admitted of {} requests, quota {quota}",
            results.len()
        );
        assert_eq!(admitted, quota, "K={count}: one quota for the whole fleet");
        // Every replica took part in admitting.
        for index in 0..count {
            assert!(
                results.iter().any(|(i, s, _)| *i == index && *s == 200),
                "K={count}: replica {index} admitted nothing"
            );
        }
    }
    // What a refused client is told.
    let replicas = fleet(&url(&server), 1, quota, &["--timeout-ms", "1000"]);
    let mut client = Client::connect(replicas[0].addr);
    let refused = client.get("/", "fleet-1");
    assert_eq!(refused.status, 429);
    let retry: u64 = refused.headers["retry-after"].parse().unwrap();
    // 60 tokens a day: one every 1440 s.
    assert!((1..=1440).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        refused.headers["ratelimit-policy"],
        "\"per-key\";q=60;w=86400"
    );
    assert!(refused.headers["ratelimit"].starts_with("\"per-key\";r=0;t="));
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    assert!(refused.body.contains("\"violated-policies\":[\"per-key\"]"));
    let other = client.get("/", "somebody-else");
    assert_eq!(other.status, 200);
    assert_eq!(other.headers["ratelimit"], "\"per-key\";r=59;t=1440");
    assert_eq!(client.get("/nowhere", "x").status, 404);
}

/// A managed host: no module, and `MODULE LOAD` refused. The replicas find no `RL.*`
/// command and use the Functions library (`--backend auto` loads it once), or the library
/// as a script (`--backend scripts`): the fleet still admits exactly one quota.
#[test]
fn without_the_module_the_library_admits_one_quota() {
    let server = Server::start_without_module(&["--enable-module-command", "no"]);
    let quota = 60;
    let runs: [(&str, &[usize]); 2] = [("auto", &[1, 3, 6]), ("scripts", &[3])];
    for (backend, counts) in runs {
        for &count in counts {
            let extra = ["--timeout-ms", "1000", "--backend", backend];
            let replicas = fleet(&url(&server), count, quota, &extra);
            let key = format!("managed-{backend}-{count}");
            let results = round_robin(&replicas, &key, 3 * quota as usize);
            let fallbacks = metric(&replicas, &["source=\"fallback\""]);
            assert_eq!(
                fallbacks, 0.0,
                "{backend} K={count}: a store call fell back"
            );
            let admitted = admitted(&results);
            println!(
                "fleet without the module, {backend} K={count}: {admitted} admitted of {} requests, quota {quota}",
                results.len()
            );
            assert_eq!(
                admitted, quota,
                "{backend} K={count}: one quota for the whole fleet"
            );
            let on_library = metric(
                &replicas,
                &["ratelimit_store_backend", "backend=\"functions\""],
            ) + metric(
                &replicas,
                &["ratelimit_store_backend", "backend=\"scripts\""],
            );
            assert_eq!(
                on_library, count as f64,
                "{backend} K={count}: every replica says its backend"
            );
        }
    }
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("ratelimit")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(libraries.len(), 1, "the replicas loaded the library");
}

#[test]
fn leases_cut_redis_calls_and_never_exceed_the_quota() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    let count = 3;
    let requests = 600;
    // Calls per request without leases: every request is one RL.TOKENBUCKET.
    let plain = fleet(&url(&server), count, 1_000_000, &["--timeout-ms", "1000"]);
    let before = module_calls(&server);
    let results = round_robin(&plain, "plain", requests);
    let plain_calls = module_calls(&server) - before;
    assert_eq!(admitted(&results), requests as u64);
    drop(plain);

    let lease = 10;
    let leased = fleet(
        &url(&server),
        count,
        1_000_000,
        &["--timeout-ms", "1000", "--lease", &lease.to_string()],
    );
    let before = module_calls(&server);
    let results = round_robin(&leased, "leased", requests);
    let leased_calls = module_calls(&server) - before;
    assert_eq!(admitted(&results), requests as u64);
    let per_request = |calls: u64| calls as f64 / requests as f64;
    println!(
        "leases: Redis calls per request {:.3} without leases, {:.3} with leases of {lease} \
         ({plain_calls} and {leased_calls} calls for {requests} requests over {count} replicas)",
        per_request(plain_calls),
        per_request(leased_calls),
    );
    assert_eq!(plain_calls, requests as u64);
    assert!(
        leased_calls <= (requests as u64) / lease + 2 * count as u64,
        "{leased_calls} calls: leases of {lease} should need about one call per {lease} requests"
    );

    // Exhausting a small quota: never more than the quota, and once the leases are refunded,
    // admitted + what the bucket holds is the quota exactly (nothing lost, nothing extra).
    let quota = 100;
    let small = fleet(
        &url(&server),
        count,
        quota,
        &["--timeout-ms", "1000", "--lease", &lease.to_string()],
    );
    let results = round_robin(&small, "small", 4 * quota as usize);
    let admitted = admitted(&results);
    println!(
        "leases: {admitted} admitted of {} requests, quota {quota}",
        results.len()
    );
    assert!(
        admitted <= quota,
        "{admitted} admitted above the quota of {quota}"
    );
    // Claims grow up to 4 × the lease size while a key is hot.
    let max_claim = 4 * lease;
    assert!(
        admitted >= quota.saturating_sub(count as u64 * max_claim),
        "{admitted} admitted: more than the leases outstanding went missing"
    );
    let conserved = wait_until(Duration::from_secs(10), || {
        admitted as i64 + peek_remaining(&server, "small", quota) == quota as i64
    });
    assert!(
        conserved,
        "after the leases expired, admitted {admitted} + bucket {} != quota {quota}",
        peek_remaining(&server, "small", quota)
    );
}

#[test]
fn when_redis_stops_each_replica_falls_back_to_its_share() {
    let _heavy = super::exclusive();
    let server = Server::start(&[]);
    let count = 3;
    let quota = 30;
    let timeout_ms = 25;
    let replicas = fleet(
        &url(&server),
        count,
        quota,
        &["--timeout-ms", &timeout_ms.to_string()],
    );
    // Warm up until every replica has had a decision from the store (on a loaded machine a
    // first call, which also connects, can exceed the short timeout and fall back).
    let warmed = wait_until(Duration::from_secs(20), || {
        round_robin(&replicas, "warm", count);
        replicas
            .iter()
            .all(|replica| metric(std::slice::from_ref(replica), &["source=\"store\""]) >= 1.0)
    });
    assert!(warmed, "the replicas never got a decision from the store");

    let resume = server.pause();
    let results = round_robin(&replicas, "down", 4 * quota as usize);
    let mut latencies: Vec<Duration> = results.iter().map(|(_, _, latency)| *latency).collect();
    latencies.sort();
    let quantile = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "fallback: latency with Redis stopped p50 {:?}, p99 {:?}, max {:?} (timeout {timeout_ms} ms)",
        quantile(0.5),
        quantile(0.99),
        latencies.last().unwrap()
    );
    // Without the timeout a request would hang as long as Redis is stopped. With it, none
    // waits much longer than the timeout (the margin is for a loaded CI machine), and once
    // the breaker is open most do not wait at all.
    let slowest = *latencies.last().unwrap();
    assert!(
        slowest < Duration::from_millis(timeout_ms + 200),
        "a request took {slowest:?} with a store timeout of {timeout_ms} ms"
    );
    assert!(
        quantile(0.5) < Duration::from_millis(timeout_ms / 2),
        "the median request waited {:?}: the circuit breaker did not spare the timeouts",
        quantile(0.5)
    );
    let share = quota / count as u64;
    for index in 0..count {
        let mine: Vec<_> = results
            .iter()
            .filter(|(i, _, _)| *i == index)
            .cloned()
            .collect();
        let admitted = admitted(&mine);
        println!("fallback: replica {index} admitted {admitted} (share {share})");
        assert!(
            admitted <= share,
            "replica {index} admitted {admitted} > share {share}"
        );
        assert!(
            admitted > 0,
            "replica {index} admitted nothing: the fallback is not local"
        );
    }
    assert!(metric(&replicas, &["outcome=\"fallback_allowed\""]) > 0.0);
    assert!(metric(&replicas, &["outcome=\"fallback_denied\""]) > 0.0);
    assert!(
        metric(
            &replicas,
            &["ratelimit_store_errors_total", "kind=\"timeout\""]
        ) > 0.0
    );

    // Redis back: every replica's breaker probes and decisions come from the store again
    // (denials too: what the replicas admitted of key "after" meanwhile is charged to the
    // store first, and that may be its whole quota).
    drop(resume);
    let store_decisions =
        |replica: &Replica| metric(std::slice::from_ref(replica), &["source=\"store\""]);
    let before: Vec<f64> = replicas.iter().map(store_decisions).collect();
    let recovered = wait_until(Duration::from_secs(15), || {
        round_robin(&replicas, "after", count);
        replicas
            .iter()
            .zip(&before)
            .all(|(replica, before)| store_decisions(replica) > *before)
    });
    assert!(recovered, "decisions never came from the store again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_policy_across_two_slots_is_all_or_nothing() {
    across_two_slots_of_a_cluster(StoreBackend::Module).await;
}

/// The same on a cluster without the module: the store loads the Functions library on every
/// primary (a cluster client sends `FUNCTION LOAD` to each), and each call goes to the
/// primary of the keys it declares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_without_the_module_the_library_is_all_or_nothing_too() {
    across_two_slots_of_a_cluster(StoreBackend::Functions).await;
}

/// Three replicas of a service on a 3-primary cluster (with the module, or without it for
/// the library), a policy with a global limit and a per-user one in another slot: the
/// global limit binds exactly, and every per-user bucket holds exactly what was admitted
/// (the units taken for requests the global limit denied were refunded).
async fn across_two_slots_of_a_cluster(backend: StoreBackend) {
    use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions};
    use redis_ratelimit_client::{Inputs, Limit, Policy, RateLimiter};
    use redis_ratelimit_testkit::cluster::{Cluster, keyslot};

    let module = backend == StoreBackend::Module;
    let cluster = tokio::task::block_in_place(|| {
        if module {
            Cluster::start(3, 0)
        } else {
            Cluster::start_without_module(3, 0)
        }
    });
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    let hour = Duration::from_secs(3600);
    let per_user = 3;
    let global = 10;
    let policy = || {
        Policy::builder("api")
            .limit(
                Limit::new(
                    "global",
                    Algorithm::token_bucket(global, hour).unwrap(),
                    "rl:{{global}}",
                )
                .unwrap(),
            )
            .limit(
                Limit::new(
                    "per-user",
                    Algorithm::token_bucket(per_user, hour).unwrap(),
                    "rl:{{{user}}}",
                )
                .unwrap(),
            )
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let users: Vec<String> = (0..10)
        .map(|i| format!("user{i}"))
        .filter(|user| keyslot(&format!("{{{user}}}")) != keyslot("{global}"))
        .collect();
    assert!(
        users.len() >= 8,
        "most users live in another slot than the global key"
    );
    // Three replicas of a service, each with its own connections to the cluster.
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let replicas: Vec<RateLimiter> = (0..3)
        .map(|_| {
            let store = RedisStore::cluster(&node_refs, RedisStoreOptions::default()).unwrap();
            RateLimiter::builder(store)
                .policy(policy())
                .build()
                .unwrap()
        })
        .collect();
    // Every user sends 5 requests through every replica, all at once.
    let mut tasks = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        for user in &users {
            let replica = replica.clone();
            let user = user.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..5 {
                    let decision = replica
                        .check("api", &Inputs::new().with("user", user.as_str()))
                        .await
                        .unwrap();
                    assert_eq!(decision.source.backend(), Some(backend), "{decision:?}");
                    admitted += u64::from(decision.allowed);
                }
                (index, user, admitted)
            }));
        }
    }
    let mut per_user_admitted: BTreeMap<String, u64> = BTreeMap::new();
    for task in tasks {
        let (_, user, admitted) = task.await.unwrap();
        *per_user_admitted.entry(user).or_default() += admitted;
    }
    let total: u64 = per_user_admitted.values().sum();
    println!("cluster: {total} admitted (global limit {global}), by user {per_user_admitted:?}");
    assert_eq!(total, global, "the global limit binds exactly");
    // All or nothing: every user's bucket was charged exactly for the requests admitted; the
    // units taken for requests the global limit then denied were all refunded.
    let client = cluster.client();
    let peek = |key: String, capacity: u64| {
        let bucket = Algorithm::token_bucket(capacity, hour).unwrap();
        let mut con = client.get_connection().unwrap();
        let mut peek = if module {
            redis::cmd("RL.PEEK")
        } else {
            let mut fcall = redis::cmd("FCALL");
            fcall.arg("rl_peek").arg(1);
            fcall
        };
        let reply: Vec<i64> = peek
            .arg(key)
            .arg("TOKENBUCKET")
            .arg(bucket.wire_args())
            .query(&mut con)
            .unwrap();
        // What a call would reply: after taking one token when admitted.
        (reply[1] + reply[0]) as u64
    };
    for user in &users {
        let admitted = per_user_admitted[user];
        assert!(admitted <= per_user);
        let remaining = tokio::task::block_in_place(|| peek(format!("rl:{{{user}}}"), per_user));
        assert_eq!(
            remaining,
            per_user - admitted,
            "{user}: admitted {admitted}, bucket left at {remaining}"
        );
    }
    let global_left = tokio::task::block_in_place(|| peek("rl:{global}".into(), global));
    assert_eq!(global_left, 0);
    if !module {
        // Every primary was given the library, by the first call of the stores.
        for primary in cluster.primaries() {
            let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg("ratelimit")
                .query(&mut primary.conn())
                .unwrap();
            assert_eq!(libraries.len(), 1, "primary {}", primary.port);
        }
        // The library keeps no per-command statistics (all are FCALL): the module run shows
        // the refund path taken; here the buckets above show its effect.
        return;
    }
    // And refunds did happen: per-user units were taken for requests the global limit
    // denied afterwards.
    let refunds: u64 = cluster
        .nodes
        .iter()
        .map(|node| {
            info_field(&mut node.conn(), "commandstats", "cmdstat_rl.refund")
                .and_then(|stats| {
                    stats
                        .split(',')
                        .next()?
                        .strip_prefix("calls=")?
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
        })
        .sum();
    println!("cluster: {refunds} refunds of per-user units denied by the global limit");
    assert!(refunds > 0, "the cross-slot refund path was not exercised");
}
