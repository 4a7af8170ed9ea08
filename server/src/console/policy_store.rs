//! The console's connection to the policy store (the `{rl-policy}` keys, on the service's
//! `--redis`): opened on first use, shared by the requests (it is multiplexed), opened
//! again after a failure.

use std::time::Duration;

use redis_ratelimit_plans::plan_store::PlanStoreError;
use redis_ratelimit_plans::{PlanConnection, PlanServer};

/// Where the store is and the connection to it.
pub struct PolicyStore {
    server: PlanServer,
    connection: tokio::sync::Mutex<Option<PlanConnection>>,
}

impl PolicyStore {
    /// The store on `urls` (with `cluster`, nodes of a Redis Cluster), each call bounded
    /// by `timeout`.
    pub fn new(urls: &[String], cluster: bool, timeout: Duration) -> Result<Self, PlanStoreError> {
        let server = if cluster {
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            PlanServer::cluster(&nodes, timeout)?
        } else {
            PlanServer::from_url(urls.first().map_or("", String::as_str), timeout)?
        };
        Ok(Self {
            server,
            connection: tokio::sync::Mutex::new(None),
        })
    }

    /// The connection (a clone of the one open, else a new one).
    pub async fn connection(&self) -> Result<PlanConnection, PlanStoreError> {
        let mut held = self.connection.lock().await;
        if let Some(connection) = held.as_ref() {
            return Ok(connection.clone());
        }
        let connection = self.server.connect().await?;
        *held = Some(connection.clone());
        Ok(connection)
    }

    /// Drops the connection after `error` if it says the connection failed (the next call
    /// opens another); a refusal leaves it.
    pub async fn failed(&self, error: &PlanStoreError) {
        if let PlanStoreError::Redis(error) = error
            && (error.is_io_error()
                || error.is_connection_dropped()
                || error.is_timeout()
                || error.is_connection_refusal())
        {
            *self.connection.lock().await = None;
        }
    }
}
