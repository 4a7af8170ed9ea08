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

pub use crate::header_settings::{FieldsDraft, HeaderSettings};
use crate::verdict::{Status, Verdict};

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
