//! The process: its worker threads, how long a stop waits, its log and its metrics' size.

use std::time::Duration;

use super::values::{LogLevel, at_least_one, ms, shown, worker_threads};
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
