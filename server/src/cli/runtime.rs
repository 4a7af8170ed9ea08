//! The process: its worker threads, how long a stop waits, its log and its metrics' size.

use std::time::Duration;

use super::values::{LogLevel, at_least_one, ms, ratio, shown, top_keys, worker_threads};
use crate::metrics::DEFAULT_MAX_RULE_LABELS;

/// How long a stop waits for connections to finish before closing them.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;

/// The flags of the process.
#[derive(Clone, Debug, clap::Args)]
pub struct Runtime {
    /// The runtime's worker threads (default: one per core, or TOKIO_WORKER_THREADS); on a
    /// machine the service shares, 1 spends less CPU per check (fewer hand-offs between
    /// threads: docs/bench-service.md)
    #[arg(long, value_name = "N", value_parser = worker_threads)]
    pub worker_threads: Option<usize>,

    /// On SIGTERM, how long requests in flight may take before the connections still open
    /// are closed (leases are given back after)
    #[arg(
        long = "shutdown-timeout-ms",
        value_name = "MS",
        default_value = shown!(DEFAULT_SHUTDOWN_TIMEOUT_MS),
        value_parser = ms
    )]
    pub shutdown_timeout: Duration,

    /// Distinct 'rule' label values per domain in ratelimit_service_descriptors_total (the
    /// request's own values with detailed_metric); past it, rule="_other"
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_RULE_LABELS,
        value_parser = at_least_one
    )]
    pub max_metric_rules: usize,

    /// A descriptor admitted with more than this share of its limit used counts its hits in
    /// ratelimit_service_rate_limit_near_limit (and ratelimit_near_limit_total), as the
    /// reference's NEAR_LIMIT_RATIO
    #[arg(
        long,
        value_name = "RATIO",
        default_value = "0.8",
        value_parser = ratio,
        env = "NEAR_LIMIT_RATIO"
    )]
    pub near_limit_ratio: f64,

    /// Keys per summary of the fleet's top denied keys (per domain, limit and minute, written
    /// to Redis once a second, read with GET /v1/top and rlctl top); 0 turns the counting off
    #[arg(
        long,
        value_name = "N",
        default_value = "128",
        value_parser = top_keys
    )]
    pub top_keys: usize,

    /// The most verbose log lines written
    #[arg(
        long,
        value_name = "LEVEL",
        value_enum,
        ignore_case = true,
        default_value = "info",
        env = "LOG_LEVEL"
    )]
    pub log_level: LogLevel,
}
