//! The server answers exactly what the oracle computes: non-streamed bodies compared whole (after zeroing the
//! wall-clock fields and generated ids), and streams in all three output modes reassembled and compared.

use mock_server::oracle::{normalize_body, normalize_stream};
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Mode, generated_ids, items, load_json, reassemble, sse_json};

fn requests() -> Vec<Value> {
    load_json("requests.json")
        .as_array()
        .cloned()
        .expect("a list of requests")
}

fn configs() -> Vec<(ServerConfig, Mode)> {
    vec![
        (ServerConfig::default(), Mode::Cumulative),
        (
            ServerConfig {
                incremental_streaming_output: true,
                seed: 7,
                ..ServerConfig::default()
            },
            Mode::Incremental,
        ),
        (
            ServerConfig {
                sglang_version: SglangVersion::V0_5_3,
                seed: 3,
                ..ServerConfig::default()
            },
            Mode::Mid,
        ),
    ]
}

#[tokio::test]
async fn non_streamed_bodies_equal_the_oracle() {
    for (config, _) in configs() {
        let server = InProcess::new(config.clone());
        for request in requests() {
            let bytes = serde_json::to_vec(&request).expect("serialisable");
            let expected = server.oracle.expect(&bytes).expect("valid request");
            let plan = server.oracle.plan(&bytes).expect("valid request");
            let reply = server.generate(&request).await;
            assert_eq!(reply.status, 200, "{request}: {}", reply.text());
            assert_eq!(reply.content_type(), "application/json");
            let mut body = reply.json();
            normalize_body(&mut body, &plan);
            assert_eq!(
                body, expected.body,
                "profile {}, request {request}",
                config.sglang_version
            );
            assert_eq!(body.is_array(), expected.is_batch);
            for (item, want) in items(&body).iter().zip(&expected.items) {
                assert_eq!(
                    json!(generated_ids(item, config.sglang_version, true)),
                    json!(want.output_ids)
                );
                assert_eq!(item["text"], want.text.as_str());
                if let Some(rid) = &want.rid {
                    assert_eq!(item["meta_info"]["id"], rid.as_str());
                }
            }
        }
    }
}

#[tokio::test]
async fn same_seed_and_request_give_the_same_bytes() {
    let a = InProcess::new(ServerConfig::default());
    let b = InProcess::new(ServerConfig::default());
    for request in requests() {
        let (ra, rb) = (a.generate(&request).await, b.generate(&request).await);
        let plan = a
            .oracle
            .plan(&serde_json::to_vec(&request).expect("serialisable"))
            .expect("valid");
        let (mut ja, mut jb) = (ra.json(), rb.json());
        normalize_body(&mut ja, &plan);
        normalize_body(&mut jb, &plan);
        assert_eq!(ja, jb, "{request}");
    }
    let other = InProcess::new(ServerConfig {
        seed: 99,
        ..ServerConfig::default()
    });
    let request = json!({"text": "seed", "sampling_params": {"max_new_tokens": 16}});
    assert_ne!(
        a.generate(&request).await.json()["output_ids"],
        other.generate(&request).await.json()["output_ids"]
    );
}

#[tokio::test]
async fn streams_reassemble_to_the_oracle_in_every_mode() {
    for (config, mode) in configs() {
        let server = InProcess::new(config.clone());
        for request in requests() {
            let mut streamed = request.clone();
            streamed["stream"] = json!(true);
            let bytes = serde_json::to_vec(&request).expect("serialisable");
            let expected = server.oracle.expect(&bytes).expect("valid request");
            let reply = server.generate(&streamed).await;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.content_type(), "text/event-stream; charset=utf-8");
            let chunks = sse_json(&reply.body);
            let rebuilt = reassemble(&chunks, mode);
            let want = items(&expected.body);
            assert_eq!(rebuilt.len(), want.len(), "{request}");
            for (got, want) in rebuilt.iter().zip(&want) {
                let ctx = format!(
                    "profile {} mode {mode:?} request {request}",
                    config.sglang_version
                );
                assert_eq!(got.text, want["text"].as_str().unwrap_or(""), "{ctx}");
                assert_eq!(json!(got.output_ids), want["output_ids"], "{ctx}");
                let meta = &want["meta_info"];
                if meta.get("output_token_logprobs").is_some() {
                    assert_eq!(
                        json!(got.output_token_logprobs),
                        meta["output_token_logprobs"],
                        "{ctx}"
                    );
                    assert_eq!(
                        got.last_meta["input_token_logprobs"], meta["input_token_logprobs"],
                        "{ctx}"
                    );
                }
                if meta.get("output_top_logprobs").is_some() {
                    assert_eq!(
                        json!(got.output_top_logprobs),
                        meta["output_top_logprobs"],
                        "{ctx}"
                    );
                }
                for key in [
                    "finish_reason",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "weight_version",
                ] {
                    assert_eq!(got.last_meta[key], meta[key], "{ctx}: {key}");
                }
                if meta["id"] != mock_server::oracle::FRESH_RID {
                    assert_eq!(got.last_meta["id"], meta["id"], "{ctx}");
                }
                assert!(
                    got.last_meta["e2e_latency"]
                        .as_f64()
                        .is_some_and(|l| l >= 0.0),
                    "{ctx}"
                );
            }
        }
    }
}

#[tokio::test]
async fn parallel_samples_get_fresh_distinct_ids_and_differ() {
    let server = InProcess::new(ServerConfig::default());
    let reply = server
        .generate(&json!({"text": "same prompt", "sampling_params": {"n": 4, "max_new_tokens": 8}, "rid": "mine"}))
        .await;
    let body = reply.json();
    let list = body.as_array().expect("n > 1 answers an array");
    assert_eq!(list.len(), 4);
    let ids: Vec<&str> = list
        .iter()
        .map(|i| i["meta_info"]["id"].as_str().unwrap_or(""))
        .collect();
    for id in &ids {
        assert_eq!(id.len(), 32, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{id}"
        );
        assert_eq!(&id[12..13], "4", "uuid4 version nibble in {id}");
    }
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{ids:?}");
    let outputs: Vec<&Value> = list.iter().map(|i| &i["output_ids"]).collect();
    assert!(
        outputs.windows(2).any(|w| w[0] != w[1]),
        "parallel samples should differ: {outputs:?}"
    );
}

#[tokio::test]
async fn streams_equal_the_oracle_chunk_by_chunk() {
    for (config, _) in configs() {
        let server = InProcess::new(config.clone());
        for request in requests() {
            let mut streamed = request.clone();
            streamed["stream"] = json!(true);
            let bytes = serde_json::to_vec(&streamed).expect("serialisable");
            let expected = server.oracle.expect_stream(&bytes).expect("valid request");
            let plan = server.oracle.plan(&bytes).expect("valid request");
            let reply = server.generate(&streamed).await;
            let mut chunks = sse_json(&reply.body);
            normalize_stream(&mut chunks, &plan);
            assert_eq!(
                chunks, expected,
                "profile {} request {request}",
                config.sglang_version
            );
        }
    }
    // Errors stream the same event the oracle predicts.
    let server = InProcess::new(ServerConfig::default());
    let bad = json!({"text": "a", "stream": true, "sampling_params": {"top_p": 0}});
    let expected = server
        .oracle
        .expect_stream(&serde_json::to_vec(&bad).unwrap_or_default())
        .expect("a stream");
    assert_eq!(sse_json(&server.generate(&bad).await.body), expected);
}

#[test]
fn the_free_oracle_function_matches_the_oracle() {
    let body = br#"{"text": "free", "sampling_params": {"max_new_tokens": 5}, "rid": "f"}"#;
    let config = ServerConfig::default();
    let a = mock_server::oracle::expect(&config, body).expect("valid");
    let b = mock_server::oracle::Oracle::new(config)
        .expect("valid")
        .expect(body)
        .expect("valid");
    assert_eq!(a.body, b.body);
    assert_eq!(a.items[0].rid.as_deref(), Some("f"));
    let err = mock_server::oracle::expect(&ServerConfig::default(), b"{}").expect_err("no input");
    assert!(
        err.to_string()
            .contains("Either text, input_ids or input_embeds"),
        "{err}"
    );
}

#[tokio::test]
async fn return_original_logprob_reports_untempered_probabilities() {
    let request = json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 6, "temperature": 0.5},
                         "return_logprob": true});
    for original in [false, true] {
        let server = InProcess::new(ServerConfig {
            return_original_logprob: original,
            ..ServerConfig::default()
        });
        let body = server.generate(&request).await.json();
        let model = server.oracle.model();
        let mut context = vec![5u32, 6, 7];
        let report_t = if original { 1.0 } else { 0.5 };
        for entry in body["meta_info"]["output_token_logprobs"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let id = entry[1].as_u64().unwrap_or(0) as u32;
            let want = model.distribution(&context, report_t, &[]).logprob(id) as f32;
            assert_eq!(
                entry[0].as_f64().map(|v| v as f32),
                Some(want),
                "original={original} id={id}"
            );
            context.push(id);
        }
    }
}
