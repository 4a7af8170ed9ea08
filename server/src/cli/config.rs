//! The limits' sources: the config directory (how often it is read, what it may hold), the
//! region file and the policy store's version check.

use std::path::PathBuf;
use std::time::Duration;

use redis_ratelimit_plans::PlanOptions;

use super::values::{at_least_one, count, ms_or_never, positive_ms};

/// Deepest nesting of YAML collections a config file may have. A descriptor level takes
/// two (its list and its mapping), so 64 allows some 30 levels of nested descriptors,
/// far more than any request's entries can reach.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Largest config file read, in bytes (a Kubernetes ConfigMap holds at most 1 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Most config files one directory may hold.
pub const DEFAULT_MAX_FILES: usize = 100;

/// The flags of the config.
#[derive(Clone, Debug, clap::Args)]
pub struct ConfigSource {
    /// The envoyproxy/ratelimit YAML files (*.yaml, *.yml), watched
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,

    /// The config directory, as [`super::parse`] reads `--config` and the reference's
    /// settings.
    #[arg(skip)]
    pub dir: PathBuf,

    /// This service is one region of quotas shared across regions: the region file (home,
    /// weights, floor share, the lease agent's settings; see docs/regions.md)
    #[arg(long, value_name = "FILE")]
    pub region_config: Option<PathBuf>,

    /// How often the config directory is checked for changes (0: never)
    #[arg(
        long = "watch-ms",
        value_name = "MS",
        default_value = "1000",
        value_parser = ms_or_never
    )]
    pub watch: ::std::option::Option<Duration>,

    /// Limits with 'tenant_key' (plans): the policy store's version is checked this often
    /// besides its change notifications
    #[arg(long = "plans-check-ms", value_name = "MS", value_parser = positive_ms)]
    pub plans_check_ms: Option<Duration>,

    #[command(flatten)]
    pub bounds: FileBounds,
}

impl ConfigSource {
    /// The policy store's backstop version check (plans).
    pub fn plans_check(&self) -> Duration {
        self.plans_check_ms
            .unwrap_or(PlanOptions::default().check_every)
    }
}

/// What a config directory may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct FileBounds {
    /// Deepest nesting of YAML collections in a config file (a descriptor level takes two)
    #[arg(
        long = "config-max-depth",
        value_name = "N",
        default_value_t = DEFAULT_MAX_DEPTH,
        value_parser = at_least_one
    )]
    pub max_depth: usize,

    /// Largest config file, in bytes (1 MiB)
    #[arg(
        long = "config-max-file-bytes",
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_FILE_BYTES,
        value_parser = count
    )]
    pub max_file_bytes: u64,

    /// Most config files in the directory
    #[arg(
        long = "config-max-files",
        value_name = "N",
        default_value_t = DEFAULT_MAX_FILES,
        value_parser = at_least_one
    )]
    pub max_files: usize,
}

impl Default for FileBounds {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}
