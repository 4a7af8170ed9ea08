//! A Redis Cluster of containers of the module's image on a private network, each node with
//! its own fixed address (so a node cut off the network can come back with the same one),
//! created with the image's own `redis-cli --cluster create`.

use std::time::Duration;

use crate::cluster::{NodeLine, nodes_seen_by};
use crate::docker::{Container, Network, REDIS_PORT, Spec, connect, docker};
use crate::server::wait_until;

/// A primary's address, its slot ranges and its replicas' addresses.
type Shard = (String, Vec<(u16, u16)>, Vec<String>);

/// How long a cluster may take to converge after a change.
const CONVERGE: Duration = Duration::from_secs(60);

/// A running cluster; every node, then the network, is removed on drop.
pub struct ContainerCluster {
    /// The nodes, in address order (`<prefix>.11`, `.12`, ...). Declared before the network
    /// so they are removed first.
    pub nodes: Vec<Container>,
    /// Their fixed addresses, by index (known even while a node is cut off).
    pub ips: Vec<String>,
    pub network: Network,
    pub node_timeout_ms: u64,
}

impl ContainerCluster {
    /// Starts `primaries × (1 + replicas)` nodes, creates the cluster and waits until every
    /// node agrees on a complete slot map with every replica in sync.
    pub fn start(
        image: &str,
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u64,
    ) -> ContainerCluster {
        let (network, prefix) = Network::create_with_subnet("cluster");
        let timeout = node_timeout_ms.to_string();
        let ips: Vec<String> = (0..primaries * (1 + replicas))
            .map(|index| format!("{prefix}.{}", 11 + index))
            .collect();
        let nodes: Vec<Container> = ips
            .iter()
            .map(|ip| {
                Spec::new(image, "node", &network)
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
                        "--appendonly",
                        "no",
                        "--save",
                        "",
                        "--repl-diskless-sync-delay",
                        "0",
                    ])
                    .start()
            })
            .collect();
        let cluster = ContainerCluster {
            nodes,
            ips,
            network,
            node_timeout_ms,
        };
        let addresses: Vec<String> = cluster
            .ips
            .iter()
            .map(|ip| format!("{ip}:{REDIS_PORT}"))
            .collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addresses.iter().map(String::as_str));
        let replicas = replicas.to_string();
        create.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        if let Err(error) = cluster.nodes[0].cli(&create) {
            panic!("redis-cli --cluster create failed: {error}");
        }
        cluster.wait_healthy();
        cluster
    }

    /// Waits until every node reports `cluster_state:ok` with every slot served, knows every
    /// node, suspects none, agrees with the others on the slot map, and every replica's link
    /// to its primary is up.
    pub fn wait_healthy(&self) {
        let mut last = String::new();
        let healthy = wait_until(CONVERGE, || match self.health() {
            Ok(()) => true,
            Err(why) => {
                last = why;
                false
            }
        });
        assert!(healthy, "the cluster did not converge: {last}");
    }

    fn health(&self) -> Result<(), String> {
        let mut reference: Option<Vec<Shard>> = None;
        for ip in &self.ips {
            let mut con = redis::Client::open(url(ip))
                .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
                .map_err(|error| format!("{ip}: {error}"))?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|error| format!("{ip}: {error}"))?;
            for wanted in [
                "cluster_state:ok".to_string(),
                "cluster_slots_ok:16384".to_string(),
                format!("cluster_known_nodes:{}", self.nodes.len()),
            ] {
                if !info.lines().any(|line| line.trim() == wanted) {
                    return Err(format!("{ip}: no {wanted}"));
                }
            }
            let seen = nodes_seen_by(&mut con);
            if let Some(line) = seen.iter().find(|line| line.trouble) {
                return Err(format!("{ip} sees trouble at {}", line.ip));
            }
            let map = slot_map(&seen);
            match &reference {
                None => reference = Some(map),
                Some(reference) if *reference != map => {
                    return Err(format!("{ip} disagrees on the slot map"));
                }
                Some(_) => {}
            }
            let me = seen
                .iter()
                .find(|line| line.ip == *ip)
                .ok_or_else(|| format!("{ip} does not list itself"))?;
            if !me.primary {
                let link = crate::server::info_field(&mut con, "replication", "master_link_status");
                if link.as_deref() != Some("up") {
                    return Err(format!("{ip}: replica link {link:?}"));
                }
            }
        }
        Ok(())
    }

    /// The nodes as the first node sees them.
    pub fn view(&self) -> Vec<NodeLine> {
        nodes_seen_by(&mut connect(&url(&self.ips[0])))
    }

    /// The container with address `ip`.
    pub fn node(&self, ip: &str) -> &Container {
        self.ips
            .iter()
            .position(|known| known == ip)
            .map(|index| &self.nodes[index])
            .unwrap_or_else(|| panic!("no node at {ip}"))
    }

    /// The primaries, as the first node sees them.
    pub fn primaries(&self) -> Vec<NodeLine> {
        self.view().into_iter().filter(|n| n.primary).collect()
    }

    /// The address of the replica of `primary`, as the first node sees it.
    pub fn replica_of(&self, primary: &NodeLine) -> String {
        self.view()
            .into_iter()
            .find(|n| n.primary_id.as_deref() == Some(primary.id.as_str()))
            .map(|replica| replica.ip)
            .unwrap_or_else(|| panic!("{} has no replica", primary.ip))
    }

    /// A client that knows every node, with bounded connects and replies.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::builder(
            self.ips.iter().map(|ip| url(ip)).collect::<Vec<_>>(),
        )
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .build()
        .expect("cluster client")
    }

    /// `docker network disconnect`: cuts `node` off the cluster's network.
    pub fn cut_off(&self, node: &Container) {
        docker(&["network", "disconnect", &self.network.name, &node.name]);
    }

    /// `docker network connect` with the address it had (`ip`).
    pub fn reconnect(&self, node: &Container, ip: &str) {
        docker(&[
            "network",
            "connect",
            "--ip",
            ip,
            &self.network.name,
            &node.name,
        ]);
    }
}

/// For each primary with slots (by address): its ranges and its replicas' addresses.
fn slot_map(nodes: &[NodeLine]) -> Vec<Shard> {
    let mut map: Vec<_> = nodes
        .iter()
        .filter(|node| node.primary && !node.slots.is_empty())
        .map(|primary| {
            let mut replicas: Vec<String> = nodes
                .iter()
                .filter(|node| node.primary_id.as_deref() == Some(primary.id.as_str()))
                .map(|node| node.ip.clone())
                .collect();
            replicas.sort();
            (primary.ip.clone(), primary.slots.clone(), replicas)
        })
        .collect();
    map.sort();
    map
}

/// `redis://<ip>:6379/`.
pub fn url(ip: &str) -> String {
    format!("redis://{ip}:{REDIS_PORT}/")
}

/// A connection to the node at `ip` that may read even as a replica (`READONLY`).
pub fn readonly_conn(ip: &str) -> redis::Connection {
    let mut con = connect(&url(ip));
    let _: () = redis::cmd("READONLY").query(&mut con).expect("READONLY");
    con
}
