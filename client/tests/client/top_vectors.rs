//! The top-keys vectors shared with the Python suite (`tests/vectors/top_merge_v1.json`,
//! written by this crate's `top` code): a Space-Saving summary of a stream, and the merge of
//! stored values (some unreadable) for several queries, as `docs/operating.md` states them.
//! The Python client's `python/tests/test_top_keys.py` checks its port against the same file.

use redis_ratelimit_client::top::merge;
use redis_ratelimit_client::top::report::Report;
use redis_ratelimit_client::top::summary::SpaceSaving;
use serde_json::{Value, json};

#[test]
fn the_shared_top_keys_vectors_hold() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/top_merge_v1.json"
    );
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = &vectors["summary"];
    let mut summary =
        SpaceSaving::new(usize::try_from(case["capacity"].as_u64().unwrap()).unwrap());
    for key in case["stream"].as_array().unwrap() {
        summary.add(key.as_str().unwrap(), 1);
    }
    assert_eq!(
        (summary.total(), summary.floor()),
        (
            case["total"].as_u64().unwrap(),
            case["floor"].as_u64().unwrap()
        )
    );
    let counted: Vec<Value> = summary
        .counted()
        .into_iter()
        .map(|c| json!([c.key.to_string(), c.count, c.error]))
        .collect();
    assert_eq!(Value::from(counted), case["counted"]);
    let merges = vectors["merges"].as_array().unwrap();
    assert!(merges.len() >= 6);
    for case in merges {
        let stored = vectors["stored"][case["stored"].as_str().unwrap()]
            .as_array()
            .unwrap();
        let decoded: Vec<_> = stored
            .iter()
            .map(|value| Report::decode(value.as_str().unwrap()))
            .collect();
        let unreadable = decoded.iter().filter(|report| report.is_err()).count();
        assert_eq!(
            Some(unreadable as u64),
            case["unreadable"].as_u64(),
            "{}",
            case["name"]
        );
        let reports: Vec<Report> = decoded.into_iter().filter_map(Result::ok).collect();
        let query = &case["query"];
        let merged = merge::merge(
            &reports,
            query["policy"].as_str().unwrap(),
            query["limit"].as_str(),
            usize::try_from(query["count"].as_u64().unwrap()).unwrap(),
        );
        let mut merged = serde_json::to_value(&merged).unwrap();
        let mut expected = case["expected"].clone();
        // serde_json reads a float to within an ulp (exactly only with `float_roundtrip`).
        for (got, want) in merged
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .zip(expected.as_array_mut().unwrap())
        {
            let (got, want) = (got["top10_share"].take(), want["top10_share"].take());
            assert!(
                (got.as_f64().unwrap() - want.as_f64().unwrap()).abs() < 1e-12,
                "{}",
                case["name"]
            );
        }
        assert_eq!(merged, expected, "{}", case["name"]);
    }
}
