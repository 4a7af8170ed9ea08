//! Why the service could not start, or stopped with an error: one variant per cause, so a
//! caller can tell them apart, each with the words the log shows.

use std::net::SocketAddr;
use std::path::PathBuf;

use redis_ratelimit_client::store::StoreError;

use crate::auth::TokenError;
use crate::metrics::InstallError;
use crate::plans::ConnectError;
use crate::serve::ListenerError;
use crate::tls::TlsError;

/// Why the service could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Prometheus recorder could not be installed.
    #[error(transparent)]
    Metrics(#[from] InstallError),
    /// The config directory was refused at start (its errors are logged before).
    #[error("{}: the config is refused (errors above)", dir.display())]
    ConfigRefused {
        /// The config directory.
        dir: PathBuf,
    },
    /// A token file could not be read or holds no token.
    #[error("{flag}: {source}")]
    TokenFile {
        /// The flag that named the file.
        flag: &'static str,
        /// What is wrong with it.
        source: TokenError,
    },
    /// `--redis` named no server.
    #[error("--redis is empty")]
    NoRedisUrl,
    /// The store refused its URL or nodes.
    #[error("--redis: {0}")]
    Store(#[source] StoreError),
    /// The command line's failure mode, timeout or lease make no profile.
    #[error("{0}")]
    Profile(#[source] redis_ratelimit_client::policy::PolicyError),
    /// The limiter could not be built.
    #[error("{0}")]
    Limiter(#[source] redis_ratelimit_client::BuildError),
    /// The config uses plans and the policy store could not be read.
    #[error(transparent)]
    Plans(#[from] ConnectError),
    /// A listener's TLS files make no TLS config.
    #[error("{listener} TLS: {source}")]
    Tls {
        /// `gRPC` or `HTTP`.
        listener: &'static str,
        /// What is wrong.
        source: TlsError,
    },
    /// A listener's address cannot be bound.
    #[error("{flag} {address}: {source}")]
    Bind {
        /// The flag that gave the address.
        flag: &'static str,
        /// The address.
        address: SocketAddr,
        /// Why not.
        source: std::io::Error,
    },
    /// The region file is refused, or the limits cannot be shared across regions (the
    /// errors are logged before).
    #[error("--region-config {}: refused (errors above)", file.display())]
    RegionRefused {
        /// The region file.
        file: PathBuf,
    },
    /// A region on a Redis Cluster (a limit's key and its lease's are in different slots).
    #[error(
        "--region-config: a region's Redis is one server (not --cluster): a limit's key and its lease's key must share a slot"
    )]
    RegionOnCluster,
    /// `--admin-listen` without `--admin-users-file`.
    #[error("--admin-listen needs --admin-users-file: who may use the console")]
    NoAdminUsers,
    /// The console's users file is refused.
    #[error("--admin-users-file {0}")]
    AdminUsers(#[source] crate::console::users::UsersError),
    /// The console cannot start.
    #[error("the operator console: {0}")]
    Console(#[source] crate::console::ConsoleError),
    /// A listener stopped with an error.
    #[error(transparent)]
    Listener(#[from] ListenerError),
}
