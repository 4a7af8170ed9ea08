//! Where the policy store lives, and a connection to it. Every key of the store is in the
//! `{rl-policy}` slot, so on a Redis Cluster its commands must reach that slot's primary: a
//! plain connection to any other node answers `MOVED`. A [`PlanServer::cluster`] routes
//! them through the `redis` crate's cluster client (which follows failovers and slot
//! moves), and takes the change notifications from a plain connection to one of the given
//! nodes, since a cluster delivers a `PUBLISH` to the subscribers of every node.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// The server (or cluster) that holds the policy store.
#[derive(Clone)]
pub enum PlanServer {
    /// One server (a standalone Redis, or a replica set's primary).
    Single(redis::Client),
    /// A Redis Cluster, given some of its nodes.
    Cluster {
        /// Routes the store's commands to the `{rl-policy}` slot's primary.
        client: ClusterClient,
        /// The given nodes, tried in turn for the notifications' subscription.
        nodes: Vec<redis::Client>,
    },
}

impl std::fmt::Debug for PlanServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Single(client) => write!(f, "Single({:?})", client.get_connection_info().addr),
            Self::Cluster { nodes, .. } => {
                let addresses: Vec<String> = nodes
                    .iter()
                    .map(|node| node.get_connection_info().addr.to_string())
                    .collect();
                write!(f, "Cluster({addresses:?})")
            }
        }
    }
}

impl PlanServer {
    /// The store on the server at `url`.
    pub fn single(url: &str) -> Result<Self, RedisError> {
        Ok(Self::Single(redis::Client::open(url)?))
    }

    /// The store on the Redis Cluster that `nodes` (URLs of some of its nodes) belong to;
    /// `timeout` bounds connecting to a node and each reply.
    pub fn cluster(nodes: &[&str], timeout: Duration) -> Result<Self, RedisError> {
        if nodes.is_empty() {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster's policy store needs at least one node URL",
            )));
        }
        let clients = nodes
            .iter()
            .map(|node| redis::Client::open(*node))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::Cluster {
            client: ClusterClient::builder(nodes.to_vec())
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()?,
            nodes: clients,
        })
    }

    /// A connection for the store's commands; `timeout` bounds connecting (and, to one
    /// server, each reply).
    pub async fn connect(&self, timeout: Duration) -> Result<PlanConnection, RedisError> {
        match self {
            Self::Single(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Ok(PlanConnection::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Self::Cluster { client, .. } => {
                let connection = tokio::time::timeout(timeout, client.get_async_connection())
                    .await
                    .map_err(|_| {
                        RedisError::from((
                            redis::ErrorKind::IoError,
                            "no cluster connection within the timeout",
                        ))
                    })??;
                Ok(PlanConnection::Cluster(connection))
            }
        }
    }

    /// A pub/sub connection for the change notifications: the server itself, or the first of
    /// the cluster's given nodes that answers.
    pub async fn pubsub(&self) -> Result<PubSub, RedisError> {
        match self {
            Self::Single(client) => client.get_async_pubsub().await,
            Self::Cluster { nodes, .. } => {
                let mut last = None;
                for node in nodes {
                    match node.get_async_pubsub().await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(error) => last = Some(error),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    RedisError::from((redis::ErrorKind::IoError, "no cluster node to subscribe on"))
                }))
            }
        }
    }
}

/// A connection to the policy store: to one server, or through a cluster client.
#[derive(Clone)]
pub enum PlanConnection {
    /// To one server.
    Single(MultiplexedConnection),
    /// Through a cluster client, routed by the `{rl-policy}` slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for PlanConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(con) => con.req_packed_command(cmd),
            Self::Cluster(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(con) => con.req_packed_commands(cmd, offset, count),
            Self::Cluster(con) => con.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(con) => con.get_db(),
            Self::Cluster(con) => con.get_db(),
        }
    }
}
