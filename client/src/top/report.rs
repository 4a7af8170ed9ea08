//! The top-keys storage format, version 1 (`docs/operating.md`, "Storage format"): what a
//! replica writes into Redis and any reader (any client language, `rlctl`, the service)
//! reads back. Pure: no I/O.
//!
//! - key: `rl:top:{rl-top}:v1:<bucket>`, one hash per minute (`<bucket>` its start in Unix
//!   seconds);
//! - field: `<replica>:<policy_len>:<policy>:<limit>`, only to keep writers apart;
//! - value: a JSON object, one replica's summary of one policy and limit in that minute.

use serde::{Deserialize, Serialize};

/// The width of a bucket, in seconds.
pub const BUCKET_SECONDS: u64 = 60;

/// The format's version (the `v` member and the key's `v1`).
pub const VERSION: u32 = 1;

/// What every bucket's key starts with (the hash tag keeps every bucket in one slot).
pub const KEY_PREFIX: &str = "rl:top:{rl-top}:v1:";

/// The start of the bucket holding `unix_s`.
pub fn bucket_of(unix_s: u64) -> u64 {
    unix_s.saturating_sub(unix_s.checked_rem(BUCKET_SECONDS).unwrap_or(0))
}

/// The key of the bucket starting at `bucket` (Unix seconds).
pub fn key(bucket: u64) -> String {
    format!("{KEY_PREFIX}{bucket}")
}

/// The keys of the `minutes` buckets ending with the one holding `now_unix_s`, newest
/// first (at least one).
pub fn window_keys(now_unix_s: u64, minutes: u64) -> Vec<String> {
    let newest = bucket_of(now_unix_s);
    (0..minutes.max(1))
        .map_while(|back| newest.checked_sub(back.saturating_mul(BUCKET_SECONDS)))
        .map(key)
        .collect()
}

/// The field of `replica`'s summary of `policy` and `limit`.
pub fn field(replica: &str, policy: &str, limit: &str) -> String {
    format!("{replica}:{}:{policy}:{limit}", policy.len())
}

/// One replica's summary of one policy and limit in one minute, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The format's version: [`VERSION`].
    pub v: u32,
    /// The policy (the service's domain).
    pub policy: String,
    /// The limit (`_none` for denials no limit was consulted for).
    pub limit: String,
    /// The reporting replica's id.
    pub replica: String,
    /// The client language: `rust`, `python`, `node`.
    #[serde(default)]
    pub client: String,
    /// The summary's size.
    pub capacity: u64,
    /// Every denial the replica counted for this policy and limit in this minute.
    pub denials: u64,
    /// 0 while the summary holds fewer than `capacity` keys (every denied key listed,
    /// exactly); else its least count: a key not listed was denied at most this often.
    pub floor: u64,
    /// `[key, count, error]`, most denied first: the key's true denials are in
    /// `count − error ..= count`.
    pub keys: Vec<(String, u64, u64)>,
}

/// Why a stored value is not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Not a version-1 report.
    #[error("not a top-keys report: {0}")]
    Malformed(String),
    /// A version this reader does not know.
    #[error("top-keys report version {0}, this reader reads version {VERSION}")]
    Version(u32),
    /// Numbers that break the format's rules.
    #[error("top-keys report of '{policy}'/'{limit}' is inconsistent: {why}")]
    Inconsistent {
        /// Its policy.
        policy: String,
        /// Its limit.
        limit: String,
        /// What is wrong.
        why: String,
    },
}

impl Report {
    /// The value stored.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored value, checked: the version, at most `capacity` keys, each error within its
    /// count (members it does not know are ignored).
    pub fn decode(value: &str) -> Result<Report, ReportError> {
        #[derive(Deserialize)]
        struct Versioned {
            v: u32,
        }
        let versioned: Versioned = serde_json::from_str(value)
            .map_err(|error| ReportError::Malformed(error.to_string()))?;
        if versioned.v != VERSION {
            return Err(ReportError::Version(versioned.v));
        }
        let report: Report = serde_json::from_str(value)
            .map_err(|error| ReportError::Malformed(error.to_string()))?;
        let inconsistent = |why: String| ReportError::Inconsistent {
            policy: report.policy.clone(),
            limit: report.limit.clone(),
            why,
        };
        if u64::try_from(report.keys.len()).unwrap_or(u64::MAX) > report.capacity {
            return Err(inconsistent(format!(
                "{} keys in a summary of {}",
                report.keys.len(),
                report.capacity
            )));
        }
        if let Some((key, count, error)) = report.keys.iter().find(|(_, c, e)| e > c) {
            return Err(inconsistent(format!(
                "key '{key}' has an error {error} above its count {count}"
            )));
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_fields_are_as_documented() {
        assert_eq!(bucket_of(1_700_000_059), 1_700_000_040);
        assert_eq!(key(1_700_000_040), "rl:top:{rl-top}:v1:1700000040");
        assert_eq!(
            window_keys(1_700_000_059, 2),
            vec![
                "rl:top:{rl-top}:v1:1700000040".to_string(),
                "rl:top:{rl-top}:v1:1699999980".to_string()
            ]
        );
        // The policy's length keeps "a:b" + "c" apart from "a" + "b:c".
        assert_ne!(field("r", "a:b", "c"), field("r", "a", "b:c"));
        assert_eq!(field("ab12", "api", "per-minute"), "ab12:3:api:per-minute");
    }

    #[test]
    fn a_report_reads_back_and_bad_ones_are_refused() {
        let report = Report {
            v: VERSION,
            policy: "api".into(),
            limit: "per-minute".into(),
            replica: "6f1c".into(),
            client: "rust".into(),
            capacity: 2,
            denials: 15,
            floor: 3,
            keys: vec![("rl:acme".into(), 9, 0), ("rl:globex".into(), 4, 3)],
        };
        let text = report.encode();
        assert!(
            text.starts_with(r#"{"v":1,"policy":"api","limit":"per-minute""#),
            "{text}"
        );
        assert_eq!(Report::decode(&text), Ok(report));
        // A member it does not know is ignored; a missing `client` is empty.
        let newer = r#"{"v":1,"policy":"p","limit":"l","replica":"r","capacity":1,"denials":1,"floor":0,"keys":[["k",1,0]],"extra":true}"#;
        assert_eq!(Report::decode(newer).map(|r| r.client), Ok(String::new()));
        assert_eq!(Report::decode(r#"{"v":2}"#), Err(ReportError::Version(2)));
        assert!(matches!(
            Report::decode("not json"),
            Err(ReportError::Malformed(_))
        ));
        let too_many = r#"{"v":1,"policy":"p","limit":"l","replica":"r","capacity":1,"denials":2,"floor":1,"keys":[["a",1,0],["b",1,0]]}"#;
        assert!(matches!(
            Report::decode(too_many),
            Err(ReportError::Inconsistent { .. })
        ));
        let error_above = r#"{"v":1,"policy":"p","limit":"l","replica":"r","capacity":1,"denials":2,"floor":1,"keys":[["a",1,2]]}"#;
        assert!(matches!(
            Report::decode(error_above),
            Err(ReportError::Inconsistent { .. })
        ));
    }
}
