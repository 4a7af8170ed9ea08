//! A check as the service sees it, whether it came over gRPC or HTTP, and the bounds a
//! request must respect before anything is charged.

use std::fmt;

use crate::config::{AlgorithmKind, LimitSpec, Unit};

/// One descriptor of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Its entries, in order (none: it matches no rule, as in the reference).
    pub entries: Vec<(String, String)>,
    /// A limit given by the caller instead of the config's (`requests_per_unit`, `unit`).
    pub limit: Option<(u32, Unit)>,
    /// Its own hits: `None` uses the request's; `Some(0)` checks without consuming.
    pub hits_addend: Option<u64>,
}

/// A check: a domain and its descriptors, decided together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRequest {
    /// The config domain.
    pub domain: String,
    /// The descriptors, in order (statuses answer in the same order).
    pub descriptors: Vec<Descriptor>,
    /// The request's hits (0 means 1, as in the reference).
    pub hits_addend: u64,
}

impl CheckRequest {
    /// The hits descriptor `index` is charged.
    pub fn hits(&self, descriptor: &Descriptor) -> u64 {
        descriptor
            .hits_addend
            .unwrap_or_else(|| self.hits_addend.max(1))
    }
}

impl Descriptor {
    /// The caller's limit override as a limit spec (fixed windows, as the reference counts).
    pub fn override_spec(&self) -> Option<LimitSpec> {
        self.limit.map(|(requests_per_unit, unit)| LimitSpec {
            requests_per_unit: u64::from(requests_per_unit),
            unit,
            algorithm: AlgorithmKind::FixedWindow,
            burst: None,
        })
    }
}

/// The most a request may carry (the command line's). Hits are not bounded: a charge above
/// a limit is a denial that can never pass, not bad input (a limit counted in bytes meets
/// large ones).
pub use crate::cli::Bounds;

/// Why a request is refused before anything is charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRequest(pub String);

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRequest {}

impl Bounds {
    /// Checks a request against the bounds; the error names the first field over one.
    pub fn check(&self, request: &CheckRequest) -> Result<(), BadRequest> {
        let bad = |text: String| Err(BadRequest(text));
        if request.domain.is_empty() {
            return bad("'domain' is empty".into());
        }
        if request.domain.len() > self.max_value_bytes {
            return bad(format!(
                "'domain' is longer than {} bytes",
                self.max_value_bytes
            ));
        }
        if request.descriptors.is_empty() {
            return bad("'descriptors' is empty".into());
        }
        if request.descriptors.len() > self.max_descriptors {
            return bad(format!(
                "{} descriptors: at most {} per request",
                request.descriptors.len(),
                self.max_descriptors
            ));
        }
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.limit.is_some() && !self.limit_overrides {
                return bad(format!(
                    "descriptors[{index}].limit: this service refuses limit overrides (--limit-overrides refuse)"
                ));
            }
            if descriptor.entries.len() > self.max_entries {
                return bad(format!(
                    "descriptors[{index}] has {} entries: at most {}",
                    descriptor.entries.len(),
                    self.max_entries
                ));
            }
            for (position, (key, value)) in descriptor.entries.iter().enumerate() {
                if key.is_empty() {
                    return bad(format!(
                        "descriptors[{index}].entries[{position}].key is empty"
                    ));
                }
                if key.len() > self.max_value_bytes || value.len() > self.max_value_bytes {
                    return bad(format!(
                        "descriptors[{index}].entries[{position}] is longer than {} bytes",
                        self.max_value_bytes
                    ));
                }
            }
        }
        Ok(())
    }
}
