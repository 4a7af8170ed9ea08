//! The two listeners' addresses.

use std::net::SocketAddr;

use std::time::Duration;

use super::values::{Address, listen, rlqs_ttl};
use crate::reference_env;

/// The flags of the listeners.
#[derive(Clone, Debug, clap::Args)]
pub struct Listen {
    /// Envoy RLS v3 ('off' disables it) [default: 127.0.0.1:8081; with GRPC_HOST or
    /// GRPC_PORT, their address]
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub grpc_listen: Option<Address>,

    /// HTTP JSON API, /metrics, /healthz, /readyz ('off' disables it) [default:
    /// 127.0.0.1:8080; with HOST or PORT, their address]
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub http_listen: Option<Address>,

    /// Also serve Envoy's Rate Limit Quota Service (RLQS) on the gRPC listener: each Envoy
    /// is assigned token buckets whose tokens are leased from the quotas in Redis
    /// (docs/rlqs.md)
    #[arg(long)]
    pub rlqs: bool,

    /// How long an RLQS assignment lives (renewed every half of it; at most 3600000)
    #[arg(
        long = "rlqs-ttl-ms",
        value_name = "MS",
        default_value = "2000",
        value_parser = rlqs_ttl
    )]
    pub rlqs_ttl: Duration,

    /// The gRPC listener (`None`: off), as [`super::parse`] reads `--grpc-listen` and the
    /// reference's settings.
    #[arg(skip)]
    pub grpc: Option<SocketAddr>,

    /// The HTTP listener (`None`: off).
    #[arg(skip)]
    pub http: Option<SocketAddr>,
}

impl Listen {
    /// The gRPC listener's address when neither `--grpc-listen` nor the reference's
    /// settings say.
    pub const GRPC: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        8081,
    ));

    /// The HTTP listener's.
    pub const HTTP: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        8080,
    ));
}

/// A listener's address: `given` by its flag (`None`: off), else the reference's `host`
/// and `port` when either is set (the other defaulted), else `default`.
pub fn address(
    given: Option<Address>,
    (host, port): (Option<&str>, Option<u16>),
    default: SocketAddr,
) -> Result<Option<SocketAddr>, String> {
    match (given, host, port) {
        (Some(given), ..) => Ok(given.0),
        (None, None, None) => Ok(Some(default)),
        (None, host, port) => reference_env::listen_address(host, port, default.port())
            .map(Some)
            .map_err(|error| error.to_string()),
    }
}
