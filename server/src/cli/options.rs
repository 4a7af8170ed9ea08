//! Everything the command line says ([`Options`]): one `#[command(flatten)]` group of flags
//! per file, each a struct the service reads as it is.

use clap::Parser;

use super::access::Access;
use super::admin::Admin;
use super::answers::Answers;
use super::config::ConfigSource;
use super::connections::Limits;
use super::limiter::Limiter;
use super::listen::Listen;
use super::reference::Reference;
use super::requests::Bounds;
use super::runtime::Runtime;
use super::store::Store;
use super::tls::Tls;

/// Everything the command line says.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "redis-ratelimit-server",
    version,
    about = "A rate-limit service on the redis-ratelimit module: Envoy's RLS v3 over gRPC and an \
             HTTP JSON API, configured by envoyproxy/ratelimit YAML files",
    override_usage = "redis-ratelimit-server --redis URL --config DIR [options]",
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct Options {
    #[command(flatten)]
    pub store: Store,
    #[command(flatten)]
    pub config: ConfigSource,
    #[command(flatten)]
    pub listen: Listen,
    #[command(flatten)]
    pub limiter: Limiter,
    #[command(flatten)]
    pub answers: Answers,
    #[command(flatten)]
    pub bounds: Bounds,
    #[command(flatten)]
    pub access: Access,
    #[command(flatten)]
    pub tls: Tls,
    #[command(flatten)]
    pub admin: Admin,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub runtime: Runtime,
    #[command(flatten)]
    pub reference: Reference,
    /// The environment variables a setting was read from (their names).
    #[arg(skip)]
    pub from_environment: Vec<&'static str>,
}
