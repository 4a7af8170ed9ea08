//! The header fields a decision asks the proxy to add: `Retry-After`, the IETF `RateLimit`
//! fields, and optionally the legacy `X-RateLimit-*` triple.
//!
//! - `draft-11` (`draft-ietf-httpapi-ratelimit-headers-11`, May 2026):
//!   `RateLimit-Policy: "per-key";q=100;w=60` and `RateLimit: "per-key";r=42;t=18`;
//! - `draft-12` (November 2026, after the HTTP directorate review): the service field's
//!   parameters are renamed, `a` for the available quota and `w` for the effective window,
//!   and `c` gives what this request cost: `RateLimit: "per-key";a=42;w=18;c=1`. The policy
//!   field is unchanged.
//!
//! Items are the enforced limits consulted, named by their config `name` (or the rule's
//! path), as SF Strings. Seconds are whole and rounded up; `Retry-After` is at least 1.

use redis_ratelimit_client::http::headers::ceil_seconds;

use crate::verdict::{Status, Verdict};

/// Which form of the IETF fields to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldsDraft {
    /// None.
    Off,
    /// Draft 11 (`r`, `t`).
    #[default]
    Draft11,
    /// Draft 12 (`a`, `w`, `c`).
    Draft12,
}

/// The names of the limit / remaining / reset triple of the binding limit: the
/// `X-RateLimit-*` of `--legacy-headers`, or the reference's `RateLimit-Limit`,
/// `RateLimit-Remaining`, `RateLimit-Reset` (`LIMIT_RESPONSE_HEADERS_ENABLED`, the names from
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TripleNames {
    /// The limit's requests per window.
    pub limit: String,
    /// Units left.
    pub remaining: String,
    /// Seconds until the limit resets.
    pub reset: String,
}

impl TripleNames {
    /// `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`.
    pub fn legacy() -> Self {
        Self {
            limit: "x-ratelimit-limit".into(),
            remaining: "x-ratelimit-remaining".into(),
            reset: "x-ratelimit-reset".into(),
        }
    }
}

/// What to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderSettings {
    /// The IETF fields' form.
    pub draft: FieldsDraft,
    /// Also on admitted requests (always on denied ones).
    pub on_admitted: bool,
    /// The limit / remaining / reset triple of the binding limit, under these names.
    pub legacy: Option<TripleNames>,
}

/// The fields for a verdict, in order; `hits` is what the request cost each limit.
pub fn fields(verdict: &Verdict, settings: &HeaderSettings, hits: &[u64]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(wait) = verdict.retry_after.filter(|_| !verdict.allowed) {
        out.push((
            "retry-after".to_string(),
            ceil_seconds(wait).max(1).to_string(),
        ));
    }
    if verdict.allowed && !settings.on_admitted {
        return out;
    }
    let shown: Vec<(usize, &Status)> = verdict
        .statuses
        .iter()
        .enumerate()
        .filter(|(_, status)| status.consulted && !status.shadow && status.quota > 0)
        .collect();
    if shown.is_empty() {
        return out;
    }
    if settings.draft != FieldsDraft::Off {
        let mut policy = Vec::new();
        let mut service = Vec::new();
        for (index, status) in &shown {
            let Some(limit) = &status.limit else { continue };
            let name = sf_string(&limit.label);
            let window = ceil_seconds(status.window);
            if window > 0 {
                policy.push(format!("{name};q={};w={window}", status.quota));
            } else {
                policy.push(format!(
                    "{name};q={};qu=\"concurrent-requests\"",
                    status.quota
                ));
            }
            let more = ceil_seconds(status.more_in);
            service.push(match settings.draft {
                FieldsDraft::Draft12 => format!(
                    "{name};a={};w={more};c={}",
                    status.remaining,
                    hits.get(*index).copied().unwrap_or(1)
                ),
                _ => format!("{name};r={};t={more}", status.remaining),
            });
        }
        out.push(("ratelimit-policy".to_string(), policy.join(", ")));
        out.push(("ratelimit".to_string(), service.join(", ")));
    }
    if let Some(names) = &settings.legacy {
        // The binding limit: a denying one, else the one with the fewest units left.
        let binding = shown
            .iter()
            .find(|(_, status)| status.over)
            .or_else(|| shown.iter().min_by_key(|(_, status)| status.remaining));
        if let Some((_, status)) = binding {
            out.push((names.limit.clone(), status.quota.to_string()));
            out.push((names.remaining.clone(), status.remaining.to_string()));
            out.push((
                names.reset.clone(),
                ceil_seconds(status.reset_after).to_string(),
            ));
        }
    }
    out
}

/// An SF String: printable ASCII, `"` and `\` escaped (other bytes become `?`).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len().saturating_add(2));
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sf_strings_are_escaped() {
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(sf_string("é"), "\"?\"");
    }
}
