//! What the console's handlers share ([`Console`]) and what it is made of ([`Parts`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis_ratelimit_client::store::Store;
use redis_ratelimit_plans::plan_store::PlanStoreError;

use super::policy_store::PolicyStore;
use super::session::{RandomError, Sessions};
use super::top::{RedisTop, TopSource};
use super::users::Users;
use crate::engine::Engine;

/// What the console's handlers share.
pub struct Console {
    /// The service's decisions, config and followed policy store.
    pub(super) engine: Arc<Engine>,
    /// The limiter's store, for `RL.PEEK`.
    pub(super) store: Arc<dyn Store>,
    /// How long a store read may take.
    pub(super) store_timeout: Duration,
    /// Who may use the console.
    pub(super) users: Users,
    /// The browser sessions.
    pub(super) sessions: Sessions,
    /// The policy store's keys.
    pub(super) policy_store: Arc<PolicyStore>,
    /// Where "Throttled now" reads.
    pub(super) top: Arc<dyn TopSource>,
    /// The health probe's last answer.
    pub(super) store_reachable: Arc<AtomicBool>,
    /// `--failure-mode`.
    pub(super) failure_mode: &'static str,
    /// Served over TLS (cookies `Secure`, the origin `https`).
    pub(super) tls: bool,
    /// The longest a request may take.
    pub(super) request_timeout: Duration,
}

/// What the console is made of.
pub struct Parts {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The limiter's store.
    pub store: Arc<dyn Store>,
    /// `--redis` (with `cluster`, nodes of a cluster).
    pub urls: Vec<String>,
    /// A cluster.
    pub cluster: bool,
    /// `--timeout-ms`.
    pub store_timeout: Duration,
    /// The users.
    pub users: Users,
    /// The health probe's last answer.
    pub store_reachable: Arc<AtomicBool>,
    /// `--failure-mode`'s name.
    pub failure_mode: &'static str,
    /// Served over TLS.
    pub tls: bool,
    /// `--request-timeout-ms`.
    pub request_timeout: Duration,
}

/// Why the console cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No randomness for sessions.
    #[error("{0}")]
    Random(#[from] RandomError),
    /// `--redis` makes no connection to the policy store.
    #[error("{0}")]
    Store(#[from] PlanStoreError),
}

impl Console {
    /// The console of `parts`.
    pub fn new(parts: Parts) -> Result<Self, ConsoleError> {
        let timeout = parts.store_timeout.max(Duration::from_millis(500));
        let policy_store = Arc::new(PolicyStore::new(&parts.urls, parts.cluster, timeout)?);
        Ok(Self {
            engine: parts.engine,
            store: parts.store,
            store_timeout: timeout,
            users: parts.users,
            sessions: Sessions::new()?,
            top: Arc::new(RedisTop {
                store: Arc::clone(&policy_store),
            }),
            policy_store,
            store_reachable: parts.store_reachable,
            failure_mode: parts.failure_mode,
            tls: parts.tls,
            request_timeout: parts.request_timeout,
        })
    }
}
