//! The soak's Redis Cluster: 3 primaries and 3 replicas in containers on a private network,
//! with AOF on (a restarted node keeps its data, as in production); the client ports of one
//! shard's two nodes (node 0, first a primary, and node 3, its replica) behind a [`Proxy`]
//! each, on the gateways of two networks (clients are told to reach those nodes there; the
//! cluster bus and replication reach them directly); its faults, aimed by address; and the
//! checks after the run.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::cluster::{NodeLine, nodes_seen_by};
use redis_ratelimit_testkit::docker::{Container, Network, REDIS_PORT, Spec, docker};
use redis_ratelimit_testkit::server::{info_field, wait_until};

use crate::proxy::{LinkFault, Proxy};
use crate::record::{FaultKind, FaultRecord, now_us};

/// How long the cluster may take to be whole again after a fault.
const CONVERGE: Duration = Duration::from_secs(90);

/// A primary's index, its slot ranges, and its replica's index.
pub type Shard = (usize, Vec<(u16, u16)>, Option<usize>);

/// The nodes behind proxies: one shard's primary and replica at the start (they may swap).
pub const PROXIED: [usize; 2] = [0, 3];

/// A running soak cluster; nodes, then proxies, then the networks are removed on drop.
pub struct SoakCluster {
    pub nodes: Vec<Container>,
    /// The proxy in front of each [`PROXIED`] node's client port, in that order.
    pub proxies: Vec<Proxy>,
    /// Every node's own address.
    pub ips: Vec<String>,
    pub network: Network,
    /// The proxied nodes' second network, between them and their proxies.
    pub client_network: Network,
    pub node_timeout_ms: u64,
}

impl SoakCluster {
    pub fn start(image: &str, node_timeout_ms: u64) -> SoakCluster {
        let (network, prefix) = Network::create_with_subnet("soak");
        // The proxied nodes also sit on a second network, their clients' link: their proxies
        // reach them there, so a partition of the cluster's network leaves their clients
        // connected (as when a primary loses its peers but not its clients: the README's
        // partition).
        let (client_network, client_prefix) = Network::create_with_subnet("soak-clients");
        // Each proxy listens on a gateway (an address of this host) at the node's own port:
        // the node announces that gateway as its hostname, which clients are given
        // (preferred endpoint: hostname), while the cluster bus and its replica use its
        // address.
        let gateways = [format!("{prefix}.1"), format!("{client_prefix}.1")];
        let ips: Vec<String> = (0..6)
            .map(|index| format!("{prefix}.{}", 11 + index))
            .collect();
        let socket = |ip: &str, port: u16| -> SocketAddr {
            format!("{ip}:{port}").parse().expect("address")
        };
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<Container> = ips
            .iter()
            .enumerate()
            .map(|(index, ip)| {
                let hostname = PROXIED
                    .iter()
                    .position(|proxied| *proxied == index)
                    .map_or(ip, |at| &gateways[at]);
                Spec::new(image, "soak", &network)
                    .ip(ip.clone())
                    .args(&[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        &timeout,
                        "--cluster-announce-ip",
                        ip,
                        "--cluster-announce-hostname",
                        hostname,
                        "--cluster-preferred-endpoint-type",
                        "hostname",
                        // DEBUG DIGEST-VALUE, for the replicas' comparison.
                        "--enable-debug-command",
                        "yes",
                        "--save",
                        "",
                        "--repl-diskless-sync-delay",
                        "0",
                    ])
                    .start()
            })
            .collect();
        let proxies: Vec<Proxy> = PROXIED
            .iter()
            .zip(&gateways)
            .map(|(index, gateway)| {
                docker(&[
                    "network",
                    "connect",
                    &client_network.name,
                    &nodes[*index].name,
                ]);
                let client_ip = nodes[*index].ip_on(&client_network);
                Proxy::start(socket(gateway, REDIS_PORT), socket(&client_ip, REDIS_PORT))
                    .unwrap_or_else(|error| panic!("proxy on {gateway}:{REDIS_PORT}: {error}"))
            })
            .collect();
        let cluster = SoakCluster {
            nodes,
            proxies,
            ips,
            network,
            client_network,
            node_timeout_ms,
        };
        // Three primaries by redis-cli, then each replica by hand: redis-cli 7.0 leaves the
        // replicas as empty primaries when nodes announce hostnames.
        let addresses: Vec<String> = cluster.ips[..3]
            .iter()
            .map(|ip| format!("{ip}:{REDIS_PORT}"))
            .collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addresses.iter().map(String::as_str));
        create.push("--cluster-yes");
        if let Err(error) = cluster.nodes[1].cli(&create) {
            panic!("redis-cli --cluster create failed: {error}");
        }
        for replica in 3..6 {
            let mut con = cluster.conn(replica).expect("replica connection");
            let met: Result<String, _> = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg(&cluster.ips[1])
                .arg(REDIS_PORT)
                .query(&mut con);
            assert!(met.is_ok(), "CLUSTER MEET from node {replica}: {met:?}");
        }
        for replica in 3..6 {
            let primary_id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut cluster.conn(replica - 3).expect("primary connection"))
                .expect("CLUSTER MYID");
            let mut con = cluster.conn(replica).expect("replica connection");
            let mut last = String::new();
            let replicating = wait_until(CONVERGE, || {
                match redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&primary_id)
                    .query::<String>(&mut con)
                {
                    Ok(_) => true,
                    Err(error) => {
                        // Until the node has heard of its primary through the meeting.
                        last = error.to_string();
                        false
                    }
                }
            });
            assert!(replicating, "CLUSTER REPLICATE on node {replica}: {last}");
        }
        cluster.wait_healthy();
        cluster
    }

    /// `CLUSTER FAILOVER` on replica `index`; waits until it is a primary.
    fn promote(&self, index: usize) {
        let mut con = self.conn(index).expect("replica connection");
        let reply: Result<String, _> = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut con);
        assert!(reply.is_ok(), "CLUSTER FAILOVER on node {index}: {reply:?}");
        let promoted = wait_until(CONVERGE, || {
            self.conn(index).is_ok_and(|mut con| {
                info_field(&mut con, "replication", "role").as_deref() == Some("master")
            })
        });
        assert!(
            promoted,
            "node {index} was not promoted by CLUSTER FAILOVER"
        );
    }

    /// The addresses clients start from: every node, the proxied ones by their proxies.
    pub fn client_addresses(&self) -> Vec<String> {
        self.ips
            .iter()
            .enumerate()
            .map(|(index, ip)| match self.proxy_of(index) {
                Some(proxy) => proxy.listen.to_string(),
                None => format!("{ip}:{REDIS_PORT}"),
            })
            .collect()
    }

    /// The proxy in front of node `index`, if it has one.
    fn proxy_of(&self, index: usize) -> Option<&Proxy> {
        let at = PROXIED.iter().position(|proxied| *proxied == index)?;
        self.proxies.get(at)
    }

    /// A connection straight to node `index` (never through the proxy).
    pub fn conn(&self, index: usize) -> Result<redis::Connection, String> {
        let client = redis::Client::open(format!("redis://{}:{REDIS_PORT}/", self.ips[index]))
            .map_err(|e| e.to_string())?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| format!("{}: {e}", self.ips[index]))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        Ok(con)
    }

    /// The index of the node an announced address names.
    fn index_of(&self, line: &NodeLine) -> Option<usize> {
        self.ips.iter().position(|ip| *ip == line.ip)
    }

    /// Waits until every node says `cluster_state:ok` with all slots, knows all six, sees no
    /// trouble, agrees on which node ids serve which slots, and every replica's link is up.
    pub fn wait_healthy(&self) {
        let mut last = String::new();
        let healthy = wait_until(CONVERGE, || match self.health() {
            Ok(()) => true,
            Err(why) => {
                last = why;
                false
            }
        });
        assert!(
            healthy,
            "the cluster did not converge in {CONVERGE:?}: {last}"
        );
    }

    fn health(&self) -> Result<(), String> {
        let mut reference: Option<BTreeMap<String, Vec<(u16, u16)>>> = None;
        for index in 0..self.ips.len() {
            let mut con = self.conn(index)?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            for wanted in [
                "cluster_state:ok",
                "cluster_slots_ok:16384",
                "cluster_known_nodes:6",
            ] {
                if !info.lines().any(|line| line.trim() == wanted) {
                    return Err(format!("node {index}: no {wanted}"));
                }
            }
            let seen = nodes_seen_by(&mut con);
            if let Some(line) = seen.iter().find(|line| line.trouble) {
                return Err(format!("node {index} sees trouble at {}", line.ip));
            }
            let map: BTreeMap<String, Vec<(u16, u16)>> = seen
                .iter()
                .filter(|line| line.primary && !line.slots.is_empty())
                .map(|line| (line.id.clone(), line.slots.clone()))
                .collect();
            if map.len() != 3 {
                return Err(format!(
                    "node {index} sees {} primaries with slots",
                    map.len()
                ));
            }
            let replicas = seen
                .iter()
                .filter(|line| {
                    line.primary_id
                        .as_ref()
                        .is_some_and(|id| map.contains_key(id))
                })
                .count();
            if replicas != 3 {
                return Err(format!(
                    "node {index} sees {replicas} replicas of the primaries"
                ));
            }
            match &reference {
                None => reference = Some(map),
                Some(reference) if *reference != map => {
                    return Err(format!("node {index} disagrees on the slot map"));
                }
                Some(_) => {}
            }
            if info_field(&mut con, "replication", "role").as_deref() == Some("slave")
                && info_field(&mut con, "replication", "master_link_status").as_deref()
                    != Some("up")
            {
                return Err(format!("node {index}: replica link down"));
            }
        }
        Ok(())
    }

    /// The primaries (by index) with their slot ranges, and each one's replica.
    pub fn shards(&self) -> Vec<Shard> {
        let view = (0..self.ips.len())
            .find_map(|index| self.conn(index).ok())
            .map(|mut con| nodes_seen_by(&mut con))
            .unwrap_or_default();
        view.iter()
            .filter(|line| line.primary && !line.slots.is_empty())
            .filter_map(|primary| {
                let replica = view
                    .iter()
                    .find(|line| line.primary_id.as_deref() == Some(primary.id.as_str()))
                    .and_then(|line| self.index_of(line));
                Some((self.index_of(primary)?, primary.slots.clone(), replica))
            })
            .collect()
    }

    /// Injects one fault of `kind` (its target and durations drawn from `random`), waits
    /// until the cluster is whole again, and returns its record; `keys` are the limiters'
    /// `(name, key)`, for the ones a fault on a primary hits.
    ///
    /// Targets are drawn from candidates in the order of their addresses, so a seed replays
    /// the same nodes (node ids, and the order of `CLUSTER NODES`, differ from run to run).
    /// The proxy's faults, and half the partitions, hit whichever proxied node is its
    /// shard's primary at the time: a primary whose clients keep their link.
    pub fn inject(
        &self,
        kind: FaultKind,
        random: &mut dyn FnMut(u64) -> u64,
        keys: &[(String, String)],
    ) -> FaultRecord {
        let by_address = |index: &usize| self.ips[*index].parse::<Ipv4Addr>().map_or(0, u32::from);
        let mut shards = self.shards();
        shards.sort_by_key(|(index, _, _)| by_address(index));
        let primaries: Vec<usize> = shards.iter().map(|(index, _, _)| *index).collect();
        let pick = |random: &mut dyn FnMut(u64) -> u64, from: &[usize]| -> usize {
            from[random(from.len() as u64) as usize]
        };
        let mut any: Vec<usize> = (0..self.ips.len()).collect();
        any.sort_by_key(by_address);
        let proxied_primary = PROXIED
            .iter()
            .copied()
            .find(|index| primaries.contains(index))
            .unwrap_or(PROXIED[0]);
        let target = match kind {
            FaultKind::Kill => pick(random, &primaries),
            FaultKind::Failover => shards
                .get(random(shards.len() as u64) as usize)
                .and_then(|(_, _, replica)| *replica)
                .expect("a replica"),
            // Half the partitions cut the proxied shard's primary off its peers only (its
            // clients keep their link through the proxy): a primary that goes on admitting.
            FaultKind::Partition if random(2) == 0 => proxied_primary,
            FaultKind::Stop | FaultKind::Partition | FaultKind::Restart => {
                // Half the time a primary (whose writes can be lost), else any node.
                if random(2) == 0 {
                    pick(random, &primaries)
                } else {
                    pick(random, &any)
                }
            }
            FaultKind::Latency | FaultKind::Stall | FaultKind::Reset => proxied_primary,
        };
        let role = if primaries.contains(&target) {
            "primary"
        } else {
            "replica"
        };
        let on_slots = |slots: &[(u16, u16)]| -> Vec<String> {
            keys.iter()
                .filter(|(_, key)| {
                    let slot = redis_ratelimit_testkit::cluster::keyslot(key);
                    slots.iter().any(|(from, to)| (*from..=*to).contains(&slot))
                })
                .map(|(name, _)| name.clone())
                .collect()
        };
        // The target's shard: the one it is the primary or the replica of.
        let shard = shards
            .iter()
            .find(|(index, _, replica)| *index == target || *replica == Some(target))
            .map(|(_, slots, _)| on_slots(slots))
            .unwrap_or_default();
        let node = &self.nodes[target];
        let proxy = self.proxy_of(target);
        let through = || proxy.expect("a proxied node");
        let start_us = now_us();
        let detail = match kind {
            FaultKind::Kill => {
                node.kill();
                // Back only after another node took its slots over, as after a real crash.
                let taken = wait_until(CONVERGE, || {
                    self.shards().iter().all(|(index, _, _)| *index != target)
                        && self.shards().len() == 3
                });
                assert!(taken, "nobody took over the slots of killed node {target}");
                node.start_again();
                "SIGKILL, restarted after the failover".to_string()
            }
            FaultKind::Stop => {
                let hold = Duration::from_millis(1000 + random(3000));
                docker(&["kill", "-s", "STOP", &node.name]);
                std::thread::sleep(hold);
                docker(&["kill", "-s", "CONT", &node.name]);
                format!("SIGSTOP for {} ms", hold.as_millis())
            }
            FaultKind::Partition => {
                let hold = Duration::from_millis(2000 + random(3000));
                docker(&["network", "disconnect", &self.network.name, &node.name]);
                std::thread::sleep(hold);
                docker(&[
                    "network",
                    "connect",
                    "--ip",
                    &self.ips[target],
                    &self.network.name,
                    &node.name,
                ]);
                let clients = if proxy.is_some() {
                    ", its clients' link kept"
                } else {
                    ""
                };
                format!("cut off for {} ms{clients}", hold.as_millis())
            }
            FaultKind::Restart => {
                node.restart();
                "docker restart".to_string()
            }
            FaultKind::Failover => {
                self.promote(target);
                "CLUSTER FAILOVER".to_string()
            }
            FaultKind::Latency => {
                let delay = Duration::from_millis(20 + random(180));
                let hold = Duration::from_millis(2000 + random(3000));
                through().set(LinkFault::Delay(delay));
                std::thread::sleep(hold);
                through().set(LinkFault::None);
                format!("+{} ms for {} ms", delay.as_millis(), hold.as_millis())
            }
            FaultKind::Stall => {
                let hold = Duration::from_millis(500 + random(2500));
                through().set(LinkFault::StallUntil(Instant::now() + hold));
                std::thread::sleep(hold);
                through().set(LinkFault::None);
                format!("stalled {} ms", hold.as_millis())
            }
            FaultKind::Reset => {
                let count = through().reset_all();
                format!("{count} connections reset")
            }
        };
        self.wait_healthy();
        FaultRecord {
            kind,
            target: self.ips[target].clone(),
            role: role.to_string(),
            start_us,
            end_us: now_us(),
            detail,
            // A fault on a replica loses no acknowledged write.
            affected: if kind.can_lose_writes() && role == "primary" {
                shard.clone()
            } else {
                Vec::new()
            },
            shard,
        }
    }

    /// Every node's `used_memory_dataset`, after emptying its slow log and latency samples
    /// (kept by the server for any command that took over 10 ms on a loaded machine; not
    /// the module's).
    pub fn datasets(&self) -> Vec<i64> {
        (0..self.ips.len())
            .map(|index| {
                let mut con = self.conn(index).expect("connection");
                let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query(&mut con);
                let _: Result<(), _> = redis::cmd("LATENCY").arg("RESET").query(&mut con);
                info_field(&mut con, "memory", "used_memory_dataset")
                    .and_then(|v| v.parse().ok())
                    .expect("used_memory_dataset")
            })
            .collect()
    }

    /// Waits until every replica holds exactly its primary's keys, each with the same
    /// `DEBUG DIGEST-VALUE`; returns the keys compared, as `node: key`.
    pub fn assert_replicas_identical(&self) -> Vec<String> {
        let mut last = String::new();
        let mut compared = Vec::new();
        let identical = wait_until(Duration::from_secs(30), || match self.compare_replicas() {
            Ok(keys) => {
                compared = keys;
                true
            }
            Err(why) => {
                last = why;
                false
            }
        });
        assert!(identical, "replicas differ from their primaries: {last}");
        compared
    }

    fn compare_replicas(&self) -> Result<Vec<String>, String> {
        let mut compared = Vec::new();
        for (primary, _, replica) in self.shards() {
            let replica = replica.ok_or(format!("node {primary} has no replica"))?;
            let mut on_primary = self.conn(primary)?;
            let mut on_replica = self.conn(replica)?;
            let _: () = redis::cmd("READONLY")
                .query(&mut on_replica)
                .map_err(|e| e.to_string())?;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query(&mut on_primary)
                .map_err(|e| e.to_string())?;
            let replica_size: i64 = redis::cmd("DBSIZE")
                .query(&mut on_replica)
                .map_err(|e| e.to_string())?;
            if replica_size != keys.len() as i64 {
                return Err(format!(
                    "node {primary} has {} keys, its replica {replica} {replica_size}",
                    keys.len()
                ));
            }
            for key in &keys {
                let digest = |con: &mut redis::Connection| -> Result<Vec<String>, String> {
                    redis::cmd("DEBUG")
                        .arg("DIGEST-VALUE")
                        .arg(key)
                        .query(con)
                        .map_err(|e| e.to_string())
                };
                let (mine, theirs) = (digest(&mut on_primary)?, digest(&mut on_replica)?);
                if mine != theirs {
                    return Err(format!(
                        "{key}: {mine:?} on {primary}, {theirs:?} on {replica}"
                    ));
                }
                compared.push(format!("{primary}: {key}"));
            }
        }
        Ok(compared)
    }

    /// Waits until every limiter expired on every node, then returns each node's
    /// `used_memory_dataset` growth over `baseline` (bytes).
    pub fn growth_after_expiry(&self, baseline: &[i64]) -> Vec<i64> {
        let empty = wait_until(Duration::from_secs(90), || {
            (0..self.ips.len()).all(|index| {
                self.conn(index)
                    .is_ok_and(|mut con| redis::cmd("DBSIZE").query::<i64>(&mut con) == Ok(0))
            })
        });
        assert!(
            empty,
            "limiters did not all expire within 90 s of the last call"
        );
        self.datasets()
            .iter()
            .zip(baseline)
            .map(|(now, before)| now - before)
            .collect()
    }

    /// Log lines of any node that tell of a crash, a panic or a module error.
    pub fn troubles_in_logs(&self) -> Vec<String> {
        let marks = [
            "panicked",
            "Guru Meditation",
            "REDIS BUG REPORT",
            "ASSERTION FAILED",
            "crashed by signal",
        ];
        let mut found = Vec::new();
        for node in &self.nodes {
            for line in node.logs().lines() {
                // The redis-module crate's notice that 7.0 has no defrag callbacks is logged
                // at warning level; it is not an error.
                let module_warning = line.contains(" # ")
                    && line.contains("<ratelimit>")
                    && !line.contains("defrag callbacks");
                if module_warning || marks.iter().any(|mark| line.contains(mark)) {
                    found.push(format!("{}: {line}", node.name));
                }
            }
        }
        found
    }
}
