//! The client reads what the real releases sent: every `/generate` answer of the golden recordings
//! (`mock-server/conform/golden/`, 0.5.3, 0.5.15 and 0.5.23 running on the CPU, `mock-server/CONFORM.md`)
//! becomes turns whose ids, logprobs and counts agree, or, for an error answer, a typed error.

use std::path::{Path, PathBuf};

use rollout_client::StreamMode;
use rollout_client::stream::decode_stream;
use rollout_client::turn::{Turn, parse_many, parse_single};
use serde_json::Value;

fn goldens() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mock-server/conform/golden");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
}

/// The bytes of a recorded field: a string, or base64 (none of these answers needs it).
fn bytes(value: &Value) -> Vec<u8> {
    value
        .as_str()
        .map(|s| s.as_bytes().to_vec())
        .unwrap_or_default()
}

/// Each turn's own invariants: one logprob per id when asked, finite and `<= 0`, the count as declared.
fn check(turn: &Turn, logprobs: bool, what: &str) {
    if let Some(lps) = &turn.logprobs {
        assert_eq!(lps.len(), turn.output_ids.len(), "{what}");
        assert!(lps.iter().all(|lp| lp.is_finite() && *lp <= 0.0), "{what}");
    } else {
        assert!(
            !logprobs || turn.is_abort(),
            "{what}: logprobs were asked for"
        );
    }
    if let Some(c) = turn.meta_info.completion_tokens
        && !turn.is_abort()
    {
        assert_eq!(c, turn.output_ids.len(), "{what}");
    }
}

#[test]
fn every_generate_answer_the_releases_sent_decodes() {
    let mut decoded = 0;
    for golden in goldens() {
        let text = std::fs::read_to_string(&golden).unwrap();
        for line in text.lines().skip(1) {
            let exchange: Value = serde_json::from_str(line).unwrap();
            let request = &exchange["request"];
            let response = &exchange["response"];
            if request["path"] != "/generate" || response["status"] != 200 {
                continue;
            }
            let Ok(body) = serde_json::from_slice::<Value>(&bytes(&request["body"])) else {
                continue;
            };
            let logprobs = body["return_logprob"].as_bool().unwrap_or(false);
            let routes = body["return_routed_experts"].as_bool().unwrap_or(false);
            if routes {
                // The routes' rows are checked against the model's shape, which the client is told.
                continue;
            }
            let answer: Vec<u8> = response["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| bytes(&c["body"]))
                .collect();
            let what = format!(
                "{} #{} {}",
                golden.file_name().unwrap().to_string_lossy(),
                exchange["seq"],
                String::from_utf8_lossy(&bytes(&request["body"]))
            );
            let batch = body["text"].is_array() || body["input_ids"][0].is_array();
            let n = body["sampling_params"]["n"].as_u64().unwrap_or(1) as usize;
            let turns = if body["stream"].as_bool().unwrap_or(false) {
                let items = if batch { 2 } else { n };
                decode_stream([&answer[..]], StreamMode::Auto, logprobs, Some(items))
            } else if batch || n > 1 {
                parse_many(&answer, logprobs)
            } else {
                parse_single(&answer, logprobs).map(|t| vec![t])
            };
            let turns = turns.unwrap_or_else(|e| panic!("{what}: {e}"));
            for turn in &turns {
                check(turn, logprobs, &what);
            }
            decoded += 1;
        }
    }
    assert!(decoded > 60, "{decoded} answers");
}

/// 0.5.3's window is exactly the last `min(prompt_tokens, 5)` prompt ids before the output: the turn drops them
/// and keeps the generated ids (those of the logprobs); an `output_ids` with any other surplus is refused.
#[test]
fn the_0_5_3_decode_window_is_dropped_and_nothing_else_is() {
    // The running 0.5.3's answer to {"text":"The capital of France is", ..., "return_logprob":true} (5 prompt
    // tokens), cut to its ids and logprobs.
    let body = |ids: &str| {
        format!(
            r#"{{"text":" x","output_ids":[{ids}],"meta_info":{{"id":"a","finish_reason":{{"type":"length","length":2}},
            "prompt_tokens":5,"weight_version":"default","input_token_logprobs":[[null,785,null]],
            "output_token_logprobs":[[-11.9,139913,null],[-11.8,49023,null]],"completion_tokens":2,"cached_tokens":0}}}}"#
        )
    };
    let turn = parse_single(body("785,6722,315,9625,374,139913,49023").as_bytes(), true).unwrap();
    assert_eq!(turn.output_ids, [139913, 49023]);
    assert_eq!(turn.logprobs.as_ref().map(Vec::len), Some(2));
    // Four prompt ids, or six, are not the window: the columns do not line up and the answer is refused.
    for ids in [
        "6722,315,9625,374,139913,49023",
        "1,785,6722,315,9625,374,139913,49023",
    ] {
        assert!(parse_single(body(ids).as_bytes(), true).is_err(), "{ids}");
    }
}
