//! The two listeners, each within bounds: connections open at once, the time a connection
//! may take to say what it speaks and to send a request head, the time a request may
//! take, HTTP/2 streams per connection and keep-alive pings; and a stop that drains
//! connections until a deadline, then closes the rest.
//!
//! One accept loop ([`conn::Acceptor`]) serves both: it waits for a free slot before it
//! accepts, and backs off when the process is out of file descriptors. Each connection
//! then completes its TLS handshake and sends its first bytes within the header timeout
//! ([`conn::open`]), and is served by hyper (HTTP/1.1, or HTTP/2 with prior knowledge) or
//! handed to tonic (gRPC, HTTP/2 only).

pub mod conn;
pub mod grpc;
pub mod http;

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a ping's answer may take before the connection is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener's bounds (the command line's).
pub use crate::cli::Limits;

/// The two signals of a stop: `finish` asks connections to finish their requests and
/// close; `close` ends them where they stand (the deadline passed).
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// Stop accepting; finish what is in flight.
    pub finish: CancellationToken,
    /// Close every connection now.
    pub close: CancellationToken,
}

/// How long the listeners have to end once their connections are closed at the deadline.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Why a listener stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[source] tonic::transport::Error),
    /// A listener's task panicked or was cancelled.
    #[error("a listener task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Stops the listeners: each finishes the requests it has, until `timeout`; then the
/// connections still open are closed. The first listener error is returned.
pub async fn drain(
    servers: Vec<JoinHandle<Result<(), ListenerError>>>,
    timeout: Duration,
    stop: &Stop,
) -> Result<(), ListenerError> {
    stop.finish.cancel();
    let started = tokio::time::Instant::now();
    let mut result = Ok(());
    let mut keep = |joined: Result<Result<(), ListenerError>, tokio::task::JoinError>| {
        let error = match joined {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error,
            Err(error) => ListenerError::Task(error),
        };
        if result.is_ok() {
            result = Err(error);
        }
    };
    let mut late = Vec::new();
    for mut server in servers {
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, &mut server).await {
            Ok(joined) => keep(joined),
            Err(_) => late.push(server),
        }
    }
    if !late.is_empty() {
        tracing::warn!(
            "the shutdown deadline ({} ms) passed: closing the connections still open",
            timeout.as_millis()
        );
        stop.close.cancel();
        for mut server in late {
            match tokio::time::timeout(CLOSE_WAIT, &mut server).await {
                Ok(joined) => keep(joined),
                Err(_) => server.abort(),
            }
        }
    }
    result
}
