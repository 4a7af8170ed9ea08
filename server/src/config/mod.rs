//! The limits the service enforces: the envoyproxy/ratelimit YAML format, read as it is
//! ([`load`] parses and validates one directory of files), and the lookup of a request
//! descriptor's rule ([`Domain::find`]).
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: api_key                    # any value: one counter per value
//!     rate_limit: {unit: minute, requests_per_unit: 100, name: per-key}
//!     descriptors:
//!       - key: path
//!         value: "/search*"           # wildcards: trailing or inner '*'
//!         rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
//!   - key: remote_address
//!     shadow_mode: true               # decides and reports, never denies
//!     rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window}
//! ```
//!
//! The one extension to the reference's format is per limit: `algorithm` (`fixed_window`,
//! the reference's behaviour and the default; `sliding_window`; `token_bucket` and `gcra`,
//! both with an optional `burst`; `concurrency`, at most `requests_per_unit` requests at once,
//! a slot not released freed after one `unit`).
//!
//! A second per-limit extension takes the limit from the policy store (plans, see the
//! client's `plans` module): `tenant_key: <descriptor key>` on a named limit means the
//! tenant is the value of the request's entry with that key (the rule's own key or one of
//! its parents'), and the tenant's effective limit called `name` replaces the YAML one,
//! which stays the default (no plan for the tenant, the limit not in it, the store never
//! read). `concurrency` limits are not plan limits.
//!
//! ```yaml
//!   - key: tenant
//!     rate_limit: {unit: minute, requests_per_unit: 100, name: per-minute,
//!                  algorithm: sliding_window, tenant_key: tenant}
//! ```
//!
//! `limit` is a limit (written, and built once), `rules` the rules and their lookup, `load`
//! a directory's files, `descriptors` a file's domain, `reader` and `yaml` the typed and
//! bounded reading of YAML, `pattern` a wildcard value, `error` why a file is refused, and
//! `region_file` the region file of `--region-config` (read here; what it does to the
//! limits is `crate::regions`).

#[cfg(test)]
mod cases;
mod descriptors;
mod error;
mod limit;
mod load;
mod pattern;
mod reader;
mod region_file;
mod rules;
mod yaml;

pub use self::error::ConfigError;
pub use self::limit::{AlgorithmKind, BuiltLimit, LimitSpec, Unit};
#[cfg(test)]
pub use self::load::assemble;
pub use self::load::{config_files, load};
pub use self::pattern::ValuePattern;
#[cfg(test)]
pub use self::region_file::{GOOD_REGION_FILE, parse_region};
pub use self::region_file::{HomeBackend, PoolMode, RegionConfig, load_region};
pub use self::rules::{Config, Domain, Found, Rule};
pub use self::yaml::{FileBounds, read_head};
