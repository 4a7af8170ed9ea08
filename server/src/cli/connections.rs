//! Each listener's bounds: connections open at once, the time a connection may take to say
//! what it speaks and to send a request head, the time a request may take, HTTP/2 streams
//! per connection and keep-alive pings.

use std::time::Duration;

use super::values::{at_least_one, ms_or_never, positive_ms, shown, streams};
/// Connections open at once on one listener: with `DEFAULT_MAX_STREAMS` each, whose
/// streams cost some 9 KiB while their message is awaited, about 0.6 GiB at the most.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The time a connection has for its TLS handshake and first bytes, and an HTTP/1.1
/// connection for each request head (between requests: how long it may sit idle).
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;

/// The longest one request may take, its body included.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// HTTP/2 streams open at once on one connection (Envoy opens another connection past it).
pub const DEFAULT_MAX_STREAMS: u32 = 128;

/// gRPC requests one connection has handled at once (past it, RESOURCE_EXHAUSTED at once):
/// as many as its streams, so a client that keeps to the streams it is told it may open
/// (Envoy opens another connection then) is never refused; lower it to shed load sooner.
pub const DEFAULT_GRPC_CONCURRENCY: usize = 128;

/// How often an HTTP/2 connection is pinged.
pub const DEFAULT_KEEPALIVE_MS: u64 = 30_000;

/// A listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct Limits {
    /// Connections open at once on each listener (the others wait in the kernel's backlog)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        value_parser = at_least_one
    )]
    pub max_connections: usize,

    /// A connection's TLS handshake and first bytes, and each HTTP/1.1 request head, within
    /// this; an HTTP/1.1 connection idle this long is closed
    #[arg(
        long = "header-timeout-ms",
        value_name = "MS",
        default_value = shown!(DEFAULT_HEADER_TIMEOUT_MS),
        value_parser = positive_ms
    )]
    pub header_timeout: Duration,

    /// The longest one request may take, its body included (HTTP: 408; gRPC: CANCELLED)
    #[arg(
        long = "request-timeout-ms",
        value_name = "MS",
        default_value = shown!(DEFAULT_REQUEST_TIMEOUT_MS),
        value_parser = positive_ms
    )]
    pub request_timeout: Duration,

    /// HTTP/2 streams open at once on one connection (gRPC and h2c)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_STREAMS,
        value_parser = streams
    )]
    pub max_streams: u32,

    /// gRPC requests one connection has handled at once; past it, RESOURCE_EXHAUSTED at once (a
    /// queue would wait outside the request timeout)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_GRPC_CONCURRENCY,
        value_parser = at_least_one
    )]
    pub grpc_concurrency: usize,

    /// HTTP/2 keep-alive: a ping this often, the connection closed when one goes unanswered
    /// for 10 s (0: no pings)
    #[arg(
        long = "keepalive-ms",
        value_name = "MS",
        default_value = shown!(DEFAULT_KEEPALIVE_MS),
        value_parser = ms_or_never
    )]
    pub keepalive: ::std::option::Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_millis(DEFAULT_HEADER_TIMEOUT_MS),
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            max_streams: DEFAULT_MAX_STREAMS,
            grpc_concurrency: DEFAULT_GRPC_CONCURRENCY,
            keepalive: Some(Duration::from_millis(DEFAULT_KEEPALIVE_MS)),
        }
    }
}
