//! The oracle predicts what the outside world did to a request: the `abort-running` fault, `/abort_request`
//! and `retract` pauses, non-streamed and streamed, replayed as `Interventions` on the same step core.
//!
//! Where a position comes from the server (the token count at which an `/abort_request` landed), the test
//! reads it from the answer and checks that the oracle, given only that position, reproduces everything
//! else: the tokens, logprobs, texts, finish reasons, chunk boundaries and retraction counts. The latency
//! model (`slow()`: the first token at once, then one per simulated second) says where the clock stands.

use axum::http::Method;
use mock_server::engine::Interventions;
use mock_server::oracle::{normalize_body, normalize_stream};
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{
    InProcess, Reply, advance_ms, generated_ids, items, slow, spawn_generate, sse_json,
};

fn body(rid: &str, tokens: u32, n: u32, stream: bool) -> Value {
    json!({
        "text": "interventions",
        "rid": rid,
        "stream": stream,
        "sampling_params": {"max_new_tokens": tokens, "n": n, "ignore_eos": true, "temperature": 0.9},
        "return_logprob": true,
        "top_logprobs_num": 2,
    })
}

fn bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("serialisable")
}

/// The server's stream chunks with wall-clock fields zeroed, for comparison with the oracle's.
fn normalized_chunks(server: &InProcess, body: &Value, reply: &Reply) -> Vec<Value> {
    let plan = server.oracle.plan(&bytes(body)).expect("a valid request");
    let mut chunks = sse_json(&reply.body);
    normalize_stream(&mut chunks, &plan);
    chunks
}

fn normalized_body(server: &InProcess, body: &Value, reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    let plan = server.oracle.plan(&bytes(body)).expect("a valid request");
    let mut got = reply.json();
    normalize_body(&mut got, &plan);
    got
}

#[tokio::test]
async fn the_oracle_predicts_the_abort_running_fault() {
    for version in [SglangVersion::V0_5_23, SglangVersion::V0_5_3] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let after = Interventions {
            abort_after: Some(3),
            ..Interventions::default()
        };
        for (n, stream) in [(1, false), (2, false), (1, true), (2, true)] {
            let body = body("fault", 8, n, stream);
            let header = [
                ("content-type", "application/json"),
                ("x-mock-fault", "abort-running;after=3"),
            ];
            let reply = server
                .request(Method::POST, "/generate", bytes(&body), &header)
                .await;
            if stream {
                let expected = server
                    .oracle
                    .expect_stream_with(&bytes(&body), &after)
                    .expect("a stream");
                assert_eq!(
                    normalized_chunks(&server, &body, &reply),
                    expected,
                    "{version:?} n={n}"
                );
                continue;
            }
            let got = normalized_body(&server, &body, &reply);
            let expected = server
                .oracle
                .expect_with(&bytes(&body), &after)
                .expect("an answer");
            assert_eq!(got, expected.body, "{version:?} n={n}");
            // Independently of the oracle's replay: three tokens each, then SGLang's abort of this release,
            // and those three are the start of the undisturbed answer, logprobs included: the same samples,
            // at the draws the oracle predicted for this request.
            let draws: Vec<u64> = expected.items.iter().map(|item| item.draw).collect();
            let whole = server
                .oracle
                .expect_drawn(&bytes(&body), &draws)
                .expect("an answer");
            // `FINISH_ABORT`'s `message or "Aborted"` in `srt/managers/schedule_batch.py` of every release.
            let message = "Aborted";
            for (item, full) in items(&got).iter().zip(items(&whole.body)) {
                assert_eq!(item["meta_info"]["finish_reason"]["type"], "abort");
                assert_eq!(item["meta_info"]["finish_reason"]["message"], message);
                assert_eq!(generated_ids(item, version, true).len(), 3);
                let lps = item["meta_info"]["output_token_logprobs"]
                    .as_array()
                    .expect("logprobs");
                assert_eq!(
                    lps[..],
                    full["meta_info"]["output_token_logprobs"]
                        .as_array()
                        .expect("logprobs")[..3]
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_oracle_predicts_an_abort_request_from_the_position_it_landed_at() {
    let server = InProcess::new(slow());
    for stream in [false, true] {
        // A batch of two prompts (`job_0` and `job_1`: the parent rid `job` is no request's, so only an
        // abort-all reaches both).
        let mut body = body("job", 50, 1, stream);
        body["text"] = json!(["interventions", "and a second prompt"]);
        let handle = spawn_generate(&server, body.clone());
        advance_ms(3500).await;
        server
            .post("/abort_request", bytes(&json!({"abort_all": true})))
            .await;
        let reply = handle.await.expect("the request ends");
        // Both prompts of the batch stop at the same tick: the abort reached them between the same two steps.
        let (got, positions) = if stream {
            let chunks = normalized_chunks(&server, &body, &reply);
            let finals: Vec<usize> = chunks
                .iter()
                .filter(|c| !c["meta_info"]["finish_reason"].is_null())
                .map(|c| c["meta_info"]["completion_tokens"].as_u64().unwrap_or(0) as usize)
                .collect();
            (json!(chunks), finals)
        } else {
            let got = normalized_body(&server, &body, &reply);
            let positions = items(&got)
                .iter()
                .map(|i| i["output_ids"].as_array().map_or(0, Vec::len))
                .collect();
            (got, positions)
        };
        assert_eq!(
            positions,
            [5, 5],
            "one token at once, one per second for 3.5 s, then the step SGLang runs after an abort"
        );
        let landed = Interventions {
            aborts: vec![(0, 4), (1, 4)],
            ..Interventions::default()
        };
        let expected = if stream {
            json!(
                server
                    .oracle
                    .expect_stream_with(&bytes(&body), &landed)
                    .expect("a stream")
            )
        } else {
            server
                .oracle
                .expect_with(&bytes(&body), &landed)
                .expect("an answer")
                .body
        };
        assert_eq!(got, expected, "stream={stream}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_oracle_predicts_which_chunks_a_retract_pause_counts_in() {
    let server = InProcess::new(slow());
    for stream in [false, true] {
        let body = body("retracted", 8, 2, stream);
        let handle = spawn_generate(&server, body.clone());
        advance_ms(2500).await;
        server
            .post("/pause_generation", bytes(&json!({"mode": "retract"})))
            .await;
        advance_ms(5000).await;
        server.post("/continue_generation", bytes(&json!({}))).await;
        advance_ms(10_000).await;
        let reply = handle.await.expect("the request ends");
        // At 2.5 s the third token is out and the run sleeps before the fourth, which it still makes; the
        // pause holds it before the tick after that, so tick 4 is where both samples were sent back.
        let retracted = Interventions {
            retractions: vec![4],
            ..Interventions::default()
        };
        if stream {
            let chunks = normalized_chunks(&server, &body, &reply);
            let counted: Vec<u64> = chunks
                .iter()
                .map(|c| c["meta_info"]["num_retractions"].as_u64().unwrap_or(99))
                .collect();
            assert_eq!(
                counted,
                [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
                "two samples, eight chunks each"
            );
            let expected = server
                .oracle
                .expect_stream_with(&bytes(&body), &retracted)
                .expect("a stream");
            assert_eq!(chunks, expected);
        } else {
            let got = normalized_body(&server, &body, &reply);
            for item in items(&got) {
                assert_eq!(item["meta_info"]["num_retractions"], 1);
                assert_eq!(item["meta_info"]["finish_reason"]["type"], "length");
            }
            assert_eq!(
                got,
                server
                    .oracle
                    .expect_with(&bytes(&body), &retracted)
                    .expect("an answer")
                    .body
            );
        }
    }
}
