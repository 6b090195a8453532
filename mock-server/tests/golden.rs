//! The spec's wire examples (§7, plus §2.3, §3 and §5.3) as golden files under `data/golden/`: the server's
//! answer must have the golden's keys, key order and shapes at every level; its values must be the oracle's.

use mock_server::oracle::normalize_body;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::Value;

use crate::common::{InProcess, data_path, parse_json, read_sse, shape_diff};

fn golden_files() -> Vec<(String, Value)> {
    let dir = data_path("golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Read in document order (serde_json's `preserve_order`): the shapes are the key order too.
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, value)
        })
        .collect()
}

/// Check one golden file against a fresh server; returns every difference.
async fn check(name: &str, golden: &Value) -> Vec<String> {
    // The golden files name the former profiles, which are the version flag's aliases.
    let version: SglangVersion = golden["profile"]
        .as_str()
        .unwrap_or("latest")
        .parse()
        .expect("a golden file names a version");
    let server = InProcess::new(ServerConfig {
        sglang_version: version,
        incremental_streaming_output: golden["incremental_streaming_output"] == true,
        ..ServerConfig::default()
    });
    let request = &golden["request"];
    let reply = server.generate(request).await;
    let mut diffs = Vec::new();
    if reply.status != 200 {
        return vec![format!("{name}: status {} {}", reply.status, reply.text())];
    }
    if let Some(raw) = golden["raw"].as_str() {
        if reply.body != raw.as_bytes() {
            diffs.push(format!("{name}: body {:?}, golden {raw:?}", reply.text()));
        }
        return diffs;
    }
    if let Some(Value::Array(chunks)) = golden.get("stream") {
        let events = match read_sse(&reply.body) {
            Ok(events) => events,
            Err(e) => return vec![format!("{name}: {e}")],
        };
        if events.len() != chunks.len() {
            diffs.push(format!(
                "{name}: {} chunks, golden {}",
                events.len(),
                chunks.len()
            ));
        }
        for (i, (event, chunk)) in events.iter().zip(chunks).enumerate() {
            shape_diff(
                chunk,
                &parse_json(event),
                &format!("{name} chunk {i}"),
                &mut diffs,
            );
        }
        return diffs;
    }
    // Non-stream: shapes from the golden file, values from the oracle.
    let Some(golden_node) = golden.get("response") else {
        return vec![format!("{name}: no response, stream or raw")];
    };
    shape_diff(golden_node, &parse_json(&reply.body), name, &mut diffs);
    let bytes = serde_json::to_vec(request).unwrap_or_default();
    let expected = server
        .oracle
        .expect(&bytes)
        .expect("golden requests are valid");
    let plan = server
        .oracle
        .plan(&bytes)
        .expect("golden requests are valid");
    let mut body = reply.json();
    normalize_body(&mut body, &plan);
    if body != expected.body {
        diffs.push(format!(
            "{name}: values differ from the oracle:\n{body}\n{}",
            expected.body
        ));
    }
    if let Some(ids) = golden["ids"].as_array() {
        let got: Vec<Value> = reply
            .json()
            .as_array()
            .map(|a| a.iter().map(|i| i["meta_info"]["id"].clone()).collect())
            .unwrap_or_default();
        if &got != ids {
            diffs.push(format!("{name}: ids {got:?}, golden {ids:?}"));
        }
    }
    diffs
}

#[tokio::test]
async fn every_golden_example_matches_key_by_key() {
    let files = golden_files();
    assert!(files.len() >= 10, "golden files missing: {}", files.len());
    let mut diffs = Vec::new();
    for (name, golden) in &files {
        diffs.extend(check(name, golden).await);
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

#[test]
fn the_shape_check_catches_order_kind_and_emptiness() {
    let parse = |s: &str| parse_json(s.as_bytes());
    let golden = parse(r#"{"a":1,"b":[[null,2,null]],"c":[]}"#);
    let mut diffs = Vec::new();
    shape_diff(
        &golden,
        &parse(r#"{"a":1.5,"b":[[-0.5,3,null],[null,4,null]],"c":[]}"#),
        "ok",
        &mut diffs,
    );
    assert!(diffs.is_empty(), "{diffs:?}");
    for bad in [
        r#"{"b":[],"a":1,"c":[]}"#,
        r#"{"a":"1","b":[],"c":[]}"#,
        r#"{"a":1,"b":[[null,2,"x"]],"c":[]}"#,
        r#"{"a":1,"b":[[null,"2",null]],"c":[]}"#,
        r#"{"a":1,"b":[],"c":[1]}"#,
        r#"{"a":1,"b":[[null,2,null]],"c":[],"d":0}"#,
    ] {
        let mut diffs = Vec::new();
        shape_diff(&golden, &parse(bad), "bad", &mut diffs);
        assert!(!diffs.is_empty(), "accepted {bad}");
    }
}
