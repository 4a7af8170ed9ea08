//! The store: where Redis is, how long it may stay silent, how checks share its writes, and
//! the prefix of every key written to it.

use std::time::Duration;

use redis_ratelimit_client::store::BatchOptions;

use super::values::{batch_max, batch_window, positive_ms};

/// The flags of the store.
#[derive(Clone, Debug, clap::Args)]
pub struct Store {
    /// redis://[user:password@]host:port/ or rediss:// (TLS);
    /// redis+sentinel://h1:port,h2:port/primary-name[/db] (Sentinel); with --cluster, a
    /// comma-separated list of seed nodes
    #[arg(long, value_name = "URL", env = "REDIS_URL")]
    pub redis: Option<String>,

    /// The store's URL(s), as [`super::parse`] reads `--redis` and the reference's settings.
    #[arg(skip)]
    pub urls: Vec<String>,

    /// The store is a Redis Cluster
    #[arg(long)]
    pub cluster: bool,

    /// How long Redis may stay silent while store calls wait for it before they are decided
    /// by the fallback (a call is given up when its server, or its slot on a Cluster, had
    /// calls waiting and sent no reply for this long, not when the call's own timer fires)
    #[arg(
        long = "timeout-ms",
        value_name = "MS",
        default_value = "20",
        value_parser = positive_ms
    )]
    pub timeout: Duration,

    /// Longest a check waits to share a write to Redis with the checks arriving while an
    /// earlier call is in flight (0: each check its own write; a check on an idle
    /// connection is never held)
    #[arg(
        long = "batch-window-us",
        value_name = "US",
        default_value = "200",
        value_parser = batch_window
    )]
    pub batch_window: Duration,

    /// Most checks in one write to Redis
    #[arg(long, value_name = "N", default_value = "64", value_parser = batch_max)]
    pub batch_max: usize,

    /// Prefix of every Redis key
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "rls:",
        env = "CACHE_KEY_PREFIX"
    )]
    pub key_prefix: String,
}

impl Store {
    /// How concurrent checks share a write to Redis.
    pub fn batch(&self) -> BatchOptions {
        BatchOptions {
            window: self.batch_window,
            max: self.batch_max,
        }
    }
}
