//! Everything an RLQS test runs: Redis with the module, one or more services with `--rlqs`
//! and `examples/envoy-rlqs/config/edge.yaml` (a service can be killed and started again on
//! its port), the backend, and Envoys running `examples/envoy-rlqs/envoy.yaml` as it is
//! (only its addresses changed; validated first with `envoy --mode validate`). Stopped on
//! drop, the Envoys first, Redis last.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use redis_ratelimit_testkit::helpers::commandstats;
use redis_ratelimit_testkit::server::{Server, free_port, wait_until};

use super::super::backend::Backend;
use super::super::proxy::{Envoy, replace_once, yaml_address};
use super::load::{Sent, now_seconds};
use crate::harness::{Service, TempDir, redis_url};

/// The example's limit per tenant, requests a second (`config/edge.yaml`).
pub const QUOTA_PER_SECOND: u64 = 100;

pub fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/envoy-rlqs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The example with its addresses substituted: its `ratelimit` cluster is `services[0]`,
/// and the others at priority 1 (used when the first is unhealthy), so that which service
/// an Envoy streams to is chosen by the order given.
pub fn example_config(services: &[SocketAddr], backend: SocketAddr) -> String {
    let text = example("envoy.yaml");
    let any_port = "{address: 127.0.0.1, port_value: 0}";
    let at = yaml_address;
    let text = replace_once(&text, "{address: 0.0.0.0, port_value: 10000}", any_port);
    let text = replace_once(&text, "{address: 127.0.0.1, port_value: 9901}", any_port);
    let mut endpoints = at(services[0]);
    for other in &services[1..] {
        endpoints.push_str(&format!(
            "\n          - priority: 1\n            lb_endpoints:\n              - endpoint:\
             \n                  address:\n                    socket_address: {}",
            at(*other)
        ));
    }
    let text = replace_once(&text, "{address: ratelimit, port_value: 8081}", &endpoints);
    replace_once(&text, "{address: backend, port_value: 8080}", &at(backend))
}

/// One service with `--rlqs` on a port of its own, which it keeps across a restart; the
/// logs of every process it was, for the journal.
pub struct RlqsService {
    redis: String,
    grpc_port: u16,
    pub running: Option<Service>,
    earlier_logs: Vec<String>,
}

impl RlqsService {
    fn start(redis: &str) -> RlqsService {
        let mut service = RlqsService {
            redis: redis.to_string(),
            grpc_port: free_port(),
            running: None,
            earlier_logs: Vec::new(),
        };
        service.start_again();
        service
    }

    pub fn grpc(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.grpc_port))
    }

    /// Starts the service (again) on its gRPC port.
    pub fn start_again(&mut self) {
        assert!(self.running.is_none(), "the service is running");
        let config = TempDir::new("rlqs-config");
        config.write("edge.yaml", &example("config/edge.yaml"));
        let grpc = format!("127.0.0.1:{}", self.grpc_port);
        let dir = config.0.to_string_lossy().into_owned();
        let args = [
            "--redis",
            self.redis.as_str(),
            "--config",
            dir.as_str(),
            "--grpc-listen",
            grpc.as_str(),
            "--http-listen",
            "127.0.0.1:0",
            "--rlqs",
            "--log-level",
            "debug",
            // RLQS denials are Envoy's: none reaches the top-keys summaries, whose reader
            // (about 5 `HGETALL` a second per service, whatever the traffic) is left out of
            // the Redis commands counted per request.
            "--top-keys",
            "0",
        ];
        self.running = Some(Service::start_with_env(&args, &[], config));
    }

    /// SIGKILL: a crash; Envoy's assignments run out on their own.
    pub fn kill(&mut self) {
        if let Some(mut service) = self.running.take() {
            service.kill();
            self.earlier_logs.push(service.log());
        }
    }

    /// The logs of every process this service was, the running one's so far last.
    pub fn logs(&self) -> Vec<String> {
        let mut logs = self.earlier_logs.clone();
        logs.extend(self.running.as_ref().map(Service::log));
        logs
    }

    /// A counter of the running service's `/metrics` (summed over its labels matching
    /// `label`).
    pub fn counter(&self, name: &str, label: &str) -> u64 {
        let Some(service) = &self.running else {
            return 0;
        };
        let body = service.http("GET", "/metrics", "", &[]).body;
        body.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

/// Redis, the services, the backend, the Envoys.
pub struct Stack {
    pub envoys: Vec<Envoy>,
    pub backend: Backend,
    pub services: Vec<RlqsService>,
    pub redis: Server,
}

impl Stack {
    /// Redis with the module, `services` services, the backend, and `envoys` Envoys, Envoy
    /// `i` streaming to service `i % services` first.
    pub fn start(services: usize, envoys: usize) -> Stack {
        let redis = Server::start(&[]);
        let url = redis_url(&redis);
        let services: Vec<RlqsService> = (0..services).map(|_| RlqsService::start(&url)).collect();
        let backend = Backend::start();
        let grpcs: Vec<SocketAddr> = services.iter().map(RlqsService::grpc).collect();
        let envoys = (0..envoys)
            .map(|index| {
                let mut order = grpcs.clone();
                order.rotate_left(index % grpcs.len());
                Envoy::start(&example_config(&order, backend.address))
            })
            .collect();
        Stack {
            envoys,
            backend,
            services,
            redis,
        }
    }

    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.envoys.iter().map(Envoy::address).collect()
    }

    /// Waits until Envoys `envoys` admit `tenant` (an assignment applied): the requests
    /// admitted (their charges are in the journal, so they count against the bound).
    pub fn await_assignments(&self, tenant: &'static str, envoys: &[usize]) -> Vec<Sent> {
        let mut first_admitted = Vec::new();
        for &index in envoys {
            let envoy = &self.envoys[index];
            let admitted = wait_until(Duration::from_secs(20), || {
                let sent = now_seconds();
                let admitted = envoy.status_of("/", &[("x-tenant", tenant)]) == 200;
                if admitted {
                    first_admitted.push(Sent {
                        envoy: index,
                        tenant,
                        sent,
                        answered: now_seconds(),
                        status: 200,
                    });
                }
                admitted
            });
            assert!(
                admitted,
                "Envoy {index} never admitted {tenant}:\n{}",
                self.logs().join("\n---\n")
            );
        }
        first_admitted
    }

    /// Every service's logs.
    pub fn logs(&self) -> Vec<String> {
        self.services.iter().flat_map(RlqsService::logs).collect()
    }

    /// Commands Redis ran (`INFO commandstats`) by name, but the test's own `INFO`.
    pub fn redis_commands(&self) -> BTreeMap<String, u64> {
        let mut commands = commandstats(&mut self.redis.conn());
        commands.remove("info");
        commands
    }

    /// RLQS stream messages (received and sent) of the running services so far.
    pub fn stream_messages(&self) -> u64 {
        self.services
            .iter()
            .map(|service| service.counter("ratelimit_rlqs_messages_total", "direction="))
            .sum()
    }
}
