//! The report's section **RLS vs RLQS through a real Envoy** (issue #42): one Envoy with
//! three kinds of listener in front of one backend, offered the same open-loop rate in the
//! same run, the paths alternating within each repeat:
//!
//! - no rate-limit filter: the latency baseline;
//! - `envoy.filters.http.ratelimit` (RLS v3) to the service: one gRPC call (and one Redis
//!   call) per request;
//! - `envoy.filters.http.rate_limit_quota` (RLQS, the filter of
//!   `examples/envoy-rlqs/envoy.yaml`) to the same service binary started with `--rlqs`:
//!   Envoy decides locally from the token bucket the service leased it.
//!
//! Both limited paths have the same YAML limit (one `tenant` descriptor at a third of the
//! offered rate a second, so demand is 3× the quota), on the same Redis. Each run uses a
//! tenant of its own (so a fresh Redis key and a new RLQS bucket), warmed up until Envoy
//! admits it (a new bucket's first requests are denied by `no_assignment_behavior`); the
//! warm-up is not measured. Accuracy is what Envoy admitted in each whole 1 s window of the
//! run (epoch-aligned, as the limit's fixed windows in Redis) against the quota.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis_ratelimit_testkit::helpers::commandstat_calls_of;

use crate::envoy::{Envoy, Filter, NO_ENVOY, cluster, config, envoy_binary, free_port, listener};
use crate::http::start_backend;
use crate::load::{Load, open_loop, warm_up};
use crate::{Counters, Redis, process_cpu_ns, service_binary, start_service};

/// The section's knobs (`--envoy-rates`, `--envoy-seconds`, `--repeats`).
pub struct Settings {
    pub rates: Vec<f64>,
    pub seconds: f64,
    pub repeats: usize,
}

/// Keep-alive HTTP/1.1 connections the load is spread over: at the rates offered here, at
/// most a few requests are pending at once when Envoy keeps up.
pub const CONNECTIONS: usize = 8;

/// Demand over quota: the quota is the offered rate over this.
const DEMAND_OVER_QUOTA: f64 = 3.0;

/// The paths, in the order they run within each repeat.
#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Plain,
    Rls,
    Rlqs,
}

pub const KINDS: [Kind; 3] = [Kind::Plain, Kind::Rls, Kind::Rlqs];

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Plain => "(a) Envoy, no rate-limit filter",
            Kind::Rls => "(b) Envoy + RLS (`ratelimit` filter)",
            Kind::Rlqs => "(c) Envoy + RLQS (`rate_limit_quota` filter, `--rlqs`)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Rls => "rls",
            Kind::Rlqs => "rlqs",
        }
    }
}

/// The quota a second for `rate` offered a second.
pub fn quota_of(rate: f64) -> u64 {
    ((rate / DEMAND_OVER_QUOTA).round() as u64).max(1)
}

/// The limit both limited paths of `rate` share: one tenant descriptor (any value) at the
/// quota a second; `anonymous` (no `x-tenant`) denied, as `examples/envoy-rlqs/config`.
fn domain_of(rate: f64) -> String {
    format!("bench-q{}", quota_of(rate))
}

fn limits_yaml(rate: f64) -> String {
    format!(
        "domain: {}
descriptors:
  - key: tenant
    value: anonymous
    rate_limit: {{unit: second, requests_per_unit: 0}}
  - key: tenant
    rate_limit: {{unit: second, requests_per_unit: {}}}
",
        domain_of(rate),
        quota_of(rate)
    )
}

/// One run's figures.
pub struct Run {
    pub achieved: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The same, of the `200`s only (each through the filter and to the backend).
    pub admitted_p50_us: f64,
    pub admitted_p99_us: f64,
    /// Answers `200`, `429`, any other status, and requests whose connection failed.
    pub admitted: usize,
    pub denied: usize,
    pub other: usize,
    pub failed: usize,
    /// Admitted in each whole 1 s window of the run.
    pub windows: Vec<u64>,
    pub cost: Counters,
    pub envoy_cpu_ns: u64,
    /// The warm-up: how long until the first `200`, and the requests refused before it.
    pub warm_up: Duration,
    pub warm_up_refused: usize,
}

impl Run {
    pub fn answered(&self) -> usize {
        self.admitted + self.denied + self.other
    }

    pub fn per_request_us(&self, ns: u64) -> f64 {
        ns as f64 / self.answered().max(1) as f64 / 1e3
    }

    /// Admitted over the quota of the run's whole windows, per cent.
    pub fn accuracy(&self, quota: u64) -> f64 {
        let admitted: u64 = self.windows.iter().sum();
        100.0 * admitted as f64 / (self.windows.len() as u64 * quota).max(1) as f64
    }
}

/// Admitted requests in each whole 1 s window from the run's first due instant to its last:
/// a request is placed at the midpoint of its sending and its answer (where RLS decides, in
/// Redis; RLQS decides in Envoy as the request arrives, well inside that span here).
fn admitted_per_window(load: &Load) -> Vec<u64> {
    let (Some(first), Some(last)) = (load.answers.first(), load.answers.last()) else {
        return Vec::new();
    };
    let from = load.unix_seconds(first.due).ceil();
    let to = load.unix_seconds(last.due);
    let count = if to > from {
        (to - from).floor() as usize
    } else {
        0
    };
    let mut windows = vec![0u64; count];
    for answer in load
        .answers
        .iter()
        .filter(|answer| answer.status == Some(200))
    {
        let midpoint = answer.sent + (answer.answered - answer.sent) / 2;
        let at = load.unix_seconds(midpoint) - from;
        if at >= 0.0
            && let Some(window) = windows.get_mut(at.floor() as usize)
        {
            *window += 1;
        }
    }
    windows
}

/// The commands of the RLQS services' demand exchange (`server/src/rlqs/fleet.rs`, only for
/// limits in contention), beside the `RL.*` ones [`Counters`] counts.
fn exchange_commands(redis: &Redis) -> u64 {
    commandstat_calls_of(&mut redis.server.conn(), &["hset", "pexpireat", "hgetall"])
}

fn quantile_us(sorted: &[Duration], q: f64) -> f64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
        .map_or(0.0, |latency| latency.as_secs_f64() * 1e6)
}

/// Everything the section runs, stopped when dropped (Envoy first).
struct Stack {
    envoy: Envoy,
    /// Per rate: the RLS and the RLQS listener's ports.
    ports: Vec<(u16, u16)>,
    plain: u16,
    rls_pid: u32,
    rlqs_pid: u32,
    _services: Vec<crate::Service>,
}

fn start_stack(redis: &Redis, settings: &Settings, dir: &Path) -> Result<Stack, String> {
    let rls = start_service(&service_binary(), &redis.server, dir, &[]);
    let rlqs = start_service(&service_binary(), &redis.server, dir, &["--rlqs".into()]);
    let backend = start_backend();
    let plain = free_port();
    let mut listeners = vec![listener("plain", plain, &Filter::None)];
    let mut ports = Vec::new();
    for rate in &settings.rates {
        let (rls_port, rlqs_port) = (free_port(), free_port());
        let domain = domain_of(*rate);
        listeners.push(listener(
            &format!("rls-{rate}"),
            rls_port,
            &Filter::Rls {
                domain: &domain,
                cluster: "rls",
                actions: "
                                  - request_headers: {header_name: x-tenant, descriptor_key: tenant}",
            },
        ));
        listeners.push(listener(
            &format!("rlqs-{rate}"),
            rlqs_port,
            &Filter::Rlqs {
                domain: &domain,
                cluster: "rlqs",
            },
        ));
        ports.push((rls_port, rlqs_port));
    }
    let clusters = [
        cluster("rls", rls.grpc.port(), true),
        cluster("rlqs", rlqs.grpc.port(), true),
        cluster("backend", backend, false),
    ];
    let mut all_ports = vec![plain];
    all_ports.extend(ports.iter().flat_map(|(rls, rlqs)| [*rls, *rlqs]));
    let envoy = Envoy::start(&config(&listeners, &clusters), &all_ports)?;
    Ok(Stack {
        envoy,
        ports,
        plain,
        rls_pid: rls.child.id(),
        rlqs_pid: rlqs.child.id(),
        _services: vec![rls, rlqs],
    })
}

impl Stack {
    fn port(&self, kind: Kind, rate_index: usize) -> u16 {
        match kind {
            Kind::Plain => self.plain,
            Kind::Rls => self.ports[rate_index].0,
            Kind::Rlqs => self.ports[rate_index].1,
        }
    }

    fn service_pid(&self, kind: Kind) -> Option<u32> {
        match kind {
            Kind::Plain => None,
            Kind::Rls => Some(self.rls_pid),
            Kind::Rlqs => Some(self.rlqs_pid),
        }
    }

    /// One run of `kind` at `rate` with the tenant `tenant`: warmed up, then measured.
    fn run(
        &self,
        redis: &Redis,
        kind: Kind,
        rate_index: usize,
        rate: f64,
        seconds: f64,
        tenant: &str,
    ) -> Result<Run, String> {
        let port = self.port(kind, rate_index);
        let headers = [("x-tenant", tenant)];
        let (warm_up, warm_up_refused) = warm_up(port, &headers)?;
        let pid = self.service_pid(kind);
        let before = Counters::read(redis, pid);
        let exchange_before = exchange_commands(redis);
        let envoy_before = process_cpu_ns(self.envoy.pid());
        let load = open_loop(port, &headers, rate, seconds, CONNECTIONS)?;
        let mut cost = Counters::read(redis, pid).since(before);
        cost.redis_commands += exchange_commands(redis).saturating_sub(exchange_before);
        let envoy_cpu_ns = process_cpu_ns(self.envoy.pid()).saturating_sub(envoy_before);
        let count = |status: u16| {
            load.answers
                .iter()
                .filter(|answer| answer.status == Some(status))
                .count()
        };
        let failed = load
            .answers
            .iter()
            .filter(|answer| answer.status.is_none())
            .count();
        let (admitted, denied) = (count(200), count(429));
        let latencies_of = |admitted_only: bool| {
            let mut latencies: Vec<Duration> = load
                .answers
                .iter()
                .filter(|answer| answer.status.is_some())
                .filter(|answer| !admitted_only || answer.status == Some(200))
                .map(|answer| answer.answered - answer.due)
                .collect();
            latencies.sort_unstable();
            latencies
        };
        let (latencies, admitted_latencies) = (latencies_of(false), latencies_of(true));
        Ok(Run {
            achieved: latencies.len() as f64 / load.elapsed.as_secs_f64(),
            p50_us: quantile_us(&latencies, 0.5),
            p99_us: quantile_us(&latencies, 0.99),
            admitted_p50_us: quantile_us(&admitted_latencies, 0.5),
            admitted_p99_us: quantile_us(&admitted_latencies, 0.99),
            admitted,
            denied,
            other: latencies.len() - admitted - denied,
            failed,
            windows: admitted_per_window(&load),
            cost,
            envoy_cpu_ns,
            warm_up,
            warm_up_refused,
        })
    }
}

/// Every run, by rate then path (in `KINDS` order), each with its repeats.
pub type Runs = Vec<Vec<Vec<Run>>>;

/// Every run of the section, or why it could not run (no Envoy, Envoy not starting, a
/// warm-up never admitted).
pub fn measure(redis: &Redis, settings: &Settings) -> Result<Runs, String> {
    envoy_binary().ok_or(NO_ENVOY)?;
    let dir = std::env::temp_dir().join(format!("rls-bench-rlqs-{}", std::process::id()));
    let measured = measure_in(redis, settings, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

/// The runs, the limits' YAML in `dir`.
fn measure_in(redis: &Redis, settings: &Settings, dir: &Path) -> Result<Runs, String> {
    std::fs::create_dir_all(dir).map_err(|error| error.to_string())?;
    for rate in &settings.rates {
        let file: PathBuf = dir.join(format!("{}.yaml", domain_of(*rate)));
        std::fs::write(&file, limits_yaml(*rate)).map_err(|error| error.to_string())?;
    }
    let stack = start_stack(redis, settings, dir)?;
    let mut runs: Runs = Vec::new();
    for (rate_index, rate) in settings.rates.iter().enumerate() {
        eprintln!("bench-service: RLS vs RLQS through Envoy, {rate:.0}/s…");
        let mut by_kind: Vec<Vec<Run>> = KINDS.iter().map(|_| Vec::new()).collect();
        // The paths alternate within each repeat, so a slow spell of the machine falls on
        // all three.
        for repeat in 0..settings.repeats {
            for (index, kind) in KINDS.iter().enumerate() {
                let tenant = format!("{}-{rate:.0}-{repeat}", kind.name());
                let run = stack.run(redis, *kind, rate_index, *rate, settings.seconds, &tenant)?;
                by_kind[index].push(run);
            }
        }
        runs.push(by_kind);
    }
    Ok(runs)
}
