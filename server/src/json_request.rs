//! A check request in proto3's JSON mapping (the gRPC request's), read into the service's
//! [`CheckRequest`]: what `POST /v1/check` and the reference's `POST /json` take.

use serde::Deserialize;

use crate::config::Unit;
use crate::request::{CheckRequest, Descriptor};

/// A proto3 JSON integer: a number, or a string of digits (the mapping of 64-bit fields).
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonInt {
    Number(u64),
    Text(String),
}

impl JsonInt {
    fn value(&self, field: &str) -> Result<u64, JsonError> {
        match self {
            Self::Number(value) => Ok(*value),
            Self::Text(text) => text.parse().map_err(|_| JsonError::NotAnInteger {
                field: field.to_string(),
                text: text.clone(),
            }),
        }
    }
}

/// Why a JSON check request is refused (the `400` answer's message).
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON, or not a request's shape (an unknown field, a wrong type).
    #[error("malformed JSON: {0}")]
    Malformed(#[source] serde_json::Error),
    /// An integer given as a string that is not one.
    #[error("'{field}' must be a non-negative integer, not '{text}'")]
    NotAnInteger {
        /// The field's path in the request.
        field: String,
        /// What it held.
        text: String,
    },
    /// A `uint32` field above its range.
    #[error("'{0}' is a uint32")]
    NotAUint32(String),
    /// `isNegativeHits`, which the service does not take.
    #[error("descriptors[{0}].isNegativeHits is not supported")]
    NegativeHits(usize),
    /// A descriptor's limit in a unit that is not one.
    #[error("descriptors[{0}].limit.unit is not a known unit (SECOND … YEAR)")]
    UnknownUnit(usize),
}

/// A proto3 JSON enum: its name or its number.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonEnum {
    Number(i64),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLimit {
    #[serde(rename = "requestsPerUnit", alias = "requests_per_unit")]
    requests_per_unit: JsonInt,
    unit: JsonEnum,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonLimit>,
    #[serde(default, rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<JsonInt>,
    #[serde(default, rename = "isNegativeHits", alias = "is_negative_hits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<JsonInt>,
}

fn unit_from_json(unit: &JsonEnum) -> Option<Unit> {
    match unit {
        JsonEnum::Number(1) => Some(Unit::Second),
        JsonEnum::Number(2) => Some(Unit::Minute),
        JsonEnum::Number(3) => Some(Unit::Hour),
        JsonEnum::Number(4) => Some(Unit::Day),
        JsonEnum::Number(5) => Some(Unit::Month),
        JsonEnum::Number(6) => Some(Unit::Year),
        JsonEnum::Number(_) => None,
        JsonEnum::Name(name) => Unit::parse(name).filter(|unit| *unit != Unit::Week),
    }
}

/// The service's view of a JSON request.
pub fn from_json(body: &[u8]) -> Result<CheckRequest, JsonError> {
    let request: JsonRequest = serde_json::from_slice(body).map_err(JsonError::Malformed)?;
    let hits_addend = match &request.hits_addend {
        Some(hits) => hits.value("hitsAddend")?,
        None => 0,
    };
    if hits_addend > u64::from(u32::MAX) {
        return Err(JsonError::NotAUint32("hitsAddend".into()));
    }
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (index, descriptor) in request.descriptors.into_iter().enumerate() {
        if descriptor.is_negative_hits {
            return Err(JsonError::NegativeHits(index));
        }
        let limit = match &descriptor.limit {
            None => None,
            Some(limit) => {
                let field = format!("descriptors[{index}].limit.requestsPerUnit");
                let requests = limit.requests_per_unit.value(&field)?;
                let requests = u32::try_from(requests).map_err(|_| JsonError::NotAUint32(field))?;
                let unit = unit_from_json(&limit.unit).ok_or(JsonError::UnknownUnit(index))?;
                Some((requests, unit))
            }
        };
        let hits = match &descriptor.hits_addend {
            Some(hits) => Some(hits.value(&format!("descriptors[{index}].hitsAddend"))?),
            None => None,
        };
        descriptors.push(Descriptor {
            entries: descriptor
                .entries
                .into_iter()
                .map(|entry| (entry.key, entry.value))
                .collect(),
            limit,
            hits_addend: hits,
        });
    }
    Ok(CheckRequest {
        domain: request.domain,
        descriptors,
        hits_addend,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn reads_proto3_json() {
        let request = from_json(
            br#"{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"},"hitsAddend":"0"}],"hits_addend":3}"#,
        )
        .unwrap();
        assert_eq!(request.domain, "api");
        assert_eq!(request.hits_addend, 3);
        let descriptor = &request.descriptors[0];
        assert_eq!(descriptor.entries, vec![("api_key".into(), "k1".into())]);
        assert_eq!(descriptor.limit, Some((5, Unit::Minute)));
        assert_eq!(descriptor.hits_addend, Some(0));
        assert!(
            from_json(br#"{"domain":"api","descriptorz":[]}"#)
                .unwrap_err()
                .to_string()
                .contains("descriptorz")
        );
        assert!(matches!(
            from_json(b"{").unwrap_err(),
            JsonError::Malformed(_)
        ));
        assert_eq!(
            from_json(br#"{"domain":"a","hitsAddend":"x"}"#)
                .unwrap_err()
                .to_string(),
            "'hitsAddend' must be a non-negative integer, not 'x'"
        );
    }
}
