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

/// The server (or cluster) that holds the policy store, and how long a connection to it may
/// take (and, to one server, each reply).
#[derive(Clone)]
pub struct PlanServer {
    at: Target,
    timeout: Duration,
}

#[derive(Clone)]
enum Target {
    /// One server (a standalone Redis, or a replica set's primary). Boxed, as the cluster
    /// client: their sizes depend on the `redis` crate's features (TLS).
    Single(Box<redis::Client>),
    /// A Redis Cluster, given some of its nodes.
    Cluster {
        /// Routes the store's commands to the `{rl-policy}` slot's primary.
        client: Box<ClusterClient>,
        /// The given nodes, tried in turn for the notifications' subscription.
        nodes: Vec<redis::Client>,
    },
    /// The primary that Redis Sentinels monitor under a name, asked for on every connect.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<SentinelPrimary>),
}

/// The sentinels, the monitored name, and how to reach the data nodes.
#[cfg(feature = "sentinel")]
struct SentinelPrimary {
    sentinel: tokio::sync::Mutex<redis::sentinel::Sentinel>,
    service: String,
    node: redis::sentinel::SentinelNodeConnectionInfo,
}

impl std::fmt::Debug for PlanServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Target::Single(client) => {
                write!(f, "Single({:?})", client.get_connection_info().addr())
            }
            Target::Cluster { nodes, .. } => {
                let addresses: Vec<String> = nodes
                    .iter()
                    .map(|node| node.get_connection_info().addr().to_string())
                    .collect();
                write!(f, "Cluster({addresses:?})")
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel(primary) => write!(f, "Sentinel({:?})", primary.service),
        }
    }
}

/// An error of the `Io` kind (a timeout) with `what` did not happen in time.
fn too_slow(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Io, what))
}

impl PlanServer {
    /// The store on the server at `url`; a `redis+sentinel://h1:p1,h2:p2/name[/db]` URL
    /// names the primary those sentinels monitor (with the `sentinel` feature).
    pub fn from_url(url: &str, timeout: Duration) -> Result<Self, RedisError> {
        let at = if url.starts_with("redis+sentinel://") {
            sentinel(url)?
        } else {
            Target::Single(Box::new(redis::Client::open(url)?))
        };
        Ok(Self { at, timeout })
    }

    /// The store on the Redis Cluster that `nodes` (URLs of some of its nodes) belong to.
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
        let client = ClusterClient::builder(nodes.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()?;
        Ok(Self {
            at: Target::Cluster {
                client: Box::new(client),
                nodes: clients,
            },
            timeout,
        })
    }

    /// The client of the one server the store is on now: the server itself, or the
    /// primary the sentinels name (checked with `ROLE` by the `redis` crate). `None` on a
    /// cluster.
    async fn server_now(&self) -> Result<Option<redis::Client>, RedisError> {
        match &self.at {
            Target::Single(client) => Ok(Some(redis::Client::clone(client))),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(primary) => {
                let asked = tokio::time::timeout(self.timeout, async {
                    let mut sentinel = primary.sentinel.lock().await;
                    sentinel
                        .async_master_for(&primary.service, Some(&primary.node))
                        .await
                })
                .await;
                asked
                    .map_err(|_| too_slow("the sentinels named no primary within the timeout"))?
                    .map(Some)
            }
            Target::Cluster { .. } => Ok(None),
        }
    }

    /// A connection for the store's commands.
    pub async fn connect(&self) -> Result<PlanConnection, RedisError> {
        if let Some(client) = self.server_now().await? {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout));
            let connection = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            return Ok(PlanConnection::Single(connection));
        }
        let Target::Cluster { client, .. } = &self.at else {
            return Err(too_slow("no server for the policy store"));
        };
        let connection = tokio::time::timeout(self.timeout, client.get_async_connection())
            .await
            .map_err(|_| too_slow("no cluster connection within the timeout"))??;
        Ok(PlanConnection::Cluster(connection))
    }

    /// A pub/sub connection for the change notifications: the server the store is on, or
    /// the first of the cluster's given nodes that answers, each attempt bounded by the
    /// timeout.
    pub async fn pubsub(&self) -> Result<PubSub, RedisError> {
        let bounded = |client: redis::Client| async move {
            tokio::time::timeout(self.timeout, client.get_async_pubsub())
                .await
                .map_err(|_| too_slow("no pub/sub connection within the timeout"))?
        };
        if let Some(client) = self.server_now().await? {
            return bounded(client).await;
        }
        let mut last = too_slow("no cluster node to subscribe on");
        if let Target::Cluster { nodes, .. } = &self.at {
            for node in nodes {
                match bounded(node.clone()).await {
                    Ok(pubsub) => return Ok(pubsub),
                    Err(error) => last = error,
                }
            }
        }
        Err(last)
    }
}

/// The target of a `redis+sentinel://h1:p1,h2:p2/name[/db]` URL.
#[cfg(feature = "sentinel")]
fn sentinel(url: &str) -> Result<Target, RedisError> {
    let invalid = |why: String| {
        RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "invalid Sentinel URL",
            format!("{why} in '{url}'"),
        ))
    };
    let (sentinels, service, db) = redis_ratelimit_client::store::parse_sentinel_url(url)
        .map_err(|why| invalid(why.to_string()))?;
    let urls: Vec<String> = sentinels
        .iter()
        .map(|address| format!("redis://{address}/"))
        .collect();
    let sentinel = redis::sentinel::Sentinel::build(urls)?;
    Ok(Target::Sentinel(Arc::new(SentinelPrimary {
        sentinel: tokio::sync::Mutex::new(sentinel),
        service,
        node: redis::sentinel::SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(redis::RedisConnectionInfo::default().set_db(db)),
    })))
}

#[cfg(not(feature = "sentinel"))]
fn sentinel(url: &str) -> Result<Target, RedisError> {
    Err(RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "a Sentinel URL needs the client's `sentinel` feature",
        url.to_string(),
    )))
}

/// A connection to the policy store: to one server, or through a cluster client. A clone
/// shares the connection (both are multiplexed).
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
