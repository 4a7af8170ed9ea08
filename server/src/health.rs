//! Whether the store answers: a `PING` every second on a connection of its own, so
//! `/readyz` reflects the store, not the traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

/// How often, and how long a `PING` may take.
const EVERY: Duration = Duration::from_secs(1);

/// Pings the store until the task is dropped, setting `reachable`.
pub async fn probe(
    urls: Vec<String>,
    cluster: bool,
    timeout: Duration,
    reachable: Arc<AtomicBool>,
) {
    let timeout = timeout.max(Duration::from_millis(500));
    let mut ticker = tokio::time::interval(EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connection: Option<Box<dyn ConnectionLike + Send>> = None;
    loop {
        if connection.is_none() {
            connection = tokio::time::timeout(timeout, connect(&urls, cluster))
                .await
                .ok()
                .flatten();
        }
        let ok = match connection.as_mut() {
            Some(connection) => {
                let ping = redis::cmd("PING");
                matches!(
                    tokio::time::timeout(timeout, connection.req_packed_command(&ping)).await,
                    Ok(Ok(_))
                )
            }
            None => false,
        };
        if !ok {
            connection = None;
        }
        let was = reachable.swap(ok, Ordering::Relaxed);
        if was != ok {
            if ok {
                tracing::info!("the store answers");
            } else {
                tracing::warn!("the store does not answer");
            }
        }
        ticker.tick().await;
    }
}

async fn connect(urls: &[String], cluster: bool) -> Option<Box<dyn ConnectionLike + Send>> {
    if cluster {
        let client = redis::cluster::ClusterClient::new(urls.to_vec()).ok()?;
        let connection = client.get_async_connection().await.ok()?;
        Some(Box::new(connection))
    } else {
        let client = redis::Client::open(urls.first()?.as_str()).ok()?;
        // Bounded by the probe's own timeout, not the crate's defaults (1 s to connect,
        // 500 ms per reply).
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        Some(Box::new(connection))
    }
}
