//! Where the policy store lives, and a connection to it. Every key of the store is in the
//! `{rl-policy}` slot, so on a Redis Cluster its commands must reach that slot's primary: a
//! plain connection to any other node answers `MOVED`. A [`PlanServer::cluster`] routes
//! them through the `redis` crate's cluster client (which follows failovers and slot
//! moves), and takes the change notifications from a plain connection to one of the given
//! nodes, since a cluster delivers a `PUBLISH` to the subscribers of every node. With the
//! `sentinel` feature, a `redis+sentinel://` URL names the primary the sentinels monitor:
//! each new connection (the first, and every one after a failure) asks them again, so the
//! store is followed through a failover.

#[cfg(feature = "sentinel")]
use std::sync::Arc;
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
    /// The primary that Redis Sentinels monitor under a name, asked for on every connect.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<SentinelPrimary>),
}

/// The sentinels, the monitored name, and how to reach the data nodes.
#[cfg(feature = "sentinel")]
pub struct SentinelPrimary {
    sentinel: tokio::sync::Mutex<redis::sentinel::Sentinel>,
    service: String,
    node: redis::sentinel::SentinelNodeConnectionInfo,
}

#[cfg(feature = "sentinel")]
impl SentinelPrimary {
    /// The current primary, as the sentinels name it (checked with `ROLE` by the `redis`
    /// crate).
    async fn client(&self, timeout: Duration) -> Result<redis::Client, RedisError> {
        let asked = tokio::time::timeout(timeout, async {
            let mut sentinel = self.sentinel.lock().await;
            sentinel
                .async_master_for(&self.service, Some(&self.node))
                .await
        })
        .await;
        asked.map_err(|_| {
            RedisError::from((
                redis::ErrorKind::IoError,
                "the sentinels named no primary within the timeout",
            ))
        })?
    }
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
            #[cfg(feature = "sentinel")]
            Self::Sentinel(primary) => write!(f, "Sentinel({:?})", primary.service),
        }
    }
}

impl PlanServer {
    /// The store on the server at `url`; a `redis+sentinel://h1:p1,h2:p2/name[/db]` URL
    /// names the primary those sentinels monitor (with the `sentinel` feature).
    pub fn single(url: &str) -> Result<Self, RedisError> {
        if url.starts_with("redis+sentinel://") {
            return Self::sentinel(url);
        }
        Ok(Self::Single(redis::Client::open(url)?))
    }

    #[cfg(feature = "sentinel")]
    fn sentinel(url: &str) -> Result<Self, RedisError> {
        let invalid = |why: String| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "invalid Sentinel URL",
                format!("{why} in '{url}'"),
            ))
        };
        let (sentinels, service, db) = crate::store::sentinel::parse_url(url).map_err(invalid)?;
        let urls: Vec<String> = sentinels
            .iter()
            .map(|address| format!("redis://{address}/"))
            .collect();
        let sentinel = redis::sentinel::Sentinel::build(urls)?;
        Ok(Self::Sentinel(Arc::new(SentinelPrimary {
            sentinel: tokio::sync::Mutex::new(sentinel),
            service,
            node: redis::sentinel::SentinelNodeConnectionInfo {
                tls_mode: None,
                redis_connection_info: Some(redis::RedisConnectionInfo {
                    db,
                    ..redis::RedisConnectionInfo::default()
                }),
            },
        })))
    }

    #[cfg(not(feature = "sentinel"))]
    fn sentinel(url: &str) -> Result<Self, RedisError> {
        Err(RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a Sentinel URL needs the client's `sentinel` feature",
            url.to_string(),
        )))
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
            #[cfg(feature = "sentinel")]
            Self::Sentinel(primary) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Ok(PlanConnection::Single(
                    primary
                        .client(timeout)
                        .await?
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

    /// A pub/sub connection for the change notifications: the server itself (the current
    /// primary, for sentinels), or the first of the cluster's given nodes that answers, each
    /// attempt bounded by `timeout`.
    pub async fn pubsub(&self, timeout: Duration) -> Result<PubSub, RedisError> {
        let bounded = |client: redis::Client| async move {
            tokio::time::timeout(timeout, client.get_async_pubsub())
                .await
                .map_err(|_| {
                    RedisError::from((
                        redis::ErrorKind::IoError,
                        "no pub/sub connection within the timeout",
                    ))
                })?
        };
        match self {
            Self::Single(client) => bounded(client.clone()).await,
            #[cfg(feature = "sentinel")]
            Self::Sentinel(primary) => bounded(primary.client(timeout).await?).await,
            Self::Cluster { nodes, .. } => {
                let mut last = None;
                for node in nodes {
                    match bounded(node.clone()).await {
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
