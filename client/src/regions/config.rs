//! How the agent leases: the limits it leases ([`HotLimit`]), its settings
//! ([`AgentConfig`]: `P`, `a`, `ρ`, the `WAIT`, what each side runs) and the lease lifetime
//! they give.

use std::time::Duration;

use redis_ratelimit_wire::encode::Args;

use crate::Algorithm;
use crate::store::StoreBackend;
use crate::store::backend;

/// One global limit this region leases units of.
#[derive(Clone, Debug)]
pub struct HotLimit {
    /// The pool's key in the home Redis.
    pub pool_key: String,
    /// The pool's algorithm and parameters, as home holds it.
    pub pool: Algorithm,
    /// The lease's key in the region's Redis (in the floor key's slot on a Cluster: give
    /// both one hash tag).
    pub lease_key: String,
    /// `k`: the most units one lease holds (at least the region's demand over one `T`).
    pub lease_units: u64,
    /// The prefix of the pool holders an in-flight pool's leased slots are
    /// (`<slot_holder>:<i>`): the region's name, unique among the regions leasing the pool
    /// and the same at every refresh (which then renews them). Unused by other kinds.
    pub slot_holder: String,
}

/// How the agent leases.
#[derive(Clone, Copy, Debug)]
pub struct AgentConfig {
    /// `P`: how often the agent asks home.
    pub period: Duration,
    /// `a`: at least one round trip to home plus the `WAIT`; a lease lives `T = P + a`.
    pub margin: Duration,
    /// `ρ`, in parts per million: how far the region's clock may run fast of home's. A
    /// lease lives `⌊T·(1 − ρ)⌋` of the region's time.
    pub drift_ppm: u32,
    /// Replicas of the home primary that must have a batch (`WAIT n`) before its grants
    /// count; 0 skips the `WAIT` (a failover may then lose grants: see `docs/regions.md`).
    pub wait_replicas: u32,
    /// How long the `WAIT` may take. The home connection's own response timeout (the redis
    /// crate's 1.x default is 500 ms) must be longer, or a slow `WAIT` fails the refresh.
    pub wait_timeout: Duration,
    /// What home runs: the module's commands, or the Functions library (the grants are then
    /// sent as `FCALL rl_tokenbucket 1 pool_key ...`, the same grants call for call).
    pub home: ServerForm,
    /// What the region runs (the installs are `RL.REGIONLEASE` or `FCALL rl_regionlease`).
    pub region: ServerForm,
    /// How a sliding log pool's leases are counted at home.
    pub log_leases: LogLeases,
}

/// How a sliding log pool's grants are counted at home.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogLeases {
    /// As if stamped at the lease's end: the pool is asked with its window lengthened by
    /// `T`, so every unit spent from a lease is counted for a whole window after (exact).
    #[default]
    StampedAtEnd,
    /// As given: the pool is asked as [`HotLimit::pool`] says (a caller that widens the
    /// window itself, or measures the plain `T`-long grant, which no exact bound covers).
    AsGiven,
}

/// What a server answers the agent's calls with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerForm {
    /// The module's `RL.*` commands.
    #[default]
    Module,
    /// The Functions library (`functions/ratelimit.lua`) through `FCALL`; it must be loaded
    /// there (the agent does not load it).
    Functions,
}

impl ServerForm {
    /// The module command `words` as this server takes it.
    pub(super) fn command(self, words: &Args) -> redis::Cmd {
        let backend = match self {
            ServerForm::Module => StoreBackend::Module,
            ServerForm::Functions => StoreBackend::Functions,
        };
        backend::command(backend, "", words)
    }
}

impl AgentConfig {
    /// `⌊(P + a)·(1 − ρ)⌋` in whole milliseconds: how long, on the region's clock, a lease
    /// lives after its request was sent.
    pub fn lease_lifetime_ms(&self) -> i64 {
        let lifetime_us = self.period.saturating_add(self.margin).as_micros();
        let kept_ppm = 1_000_000u128.saturating_sub(u128::from(self.drift_ppm));
        let derated_ms = lifetime_us.saturating_mul(kept_ppm) / 1_000_000 / 1_000;
        i64::try_from(derated_ms).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lives_p_plus_a_derated_for_drift() {
        let config = AgentConfig {
            period: Duration::from_millis(1_000),
            margin: Duration::from_millis(250),
            drift_ppm: 0,
            wait_replicas: 1,
            wait_timeout: Duration::from_millis(100),
            home: ServerForm::Module,
            region: ServerForm::Module,
            log_leases: LogLeases::StampedAtEnd,
        };
        assert_eq!(config.lease_lifetime_ms(), 1_250);
        let drifting = AgentConfig {
            drift_ppm: 50_000,
            ..config
        };
        // ⌊1250 × 0.95⌋ = 1187.
        assert_eq!(drifting.lease_lifetime_ms(), 1_187);
    }
}
