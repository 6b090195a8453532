//! Streaming: exact SSE framing byte by byte, chunk cadence under `stream_interval` (flag and per request),
//! `index` on batch and `n` chunks, cumulative vs incremental vs 0.5.3's fields, and `e2e_latency` only at the end.

use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, keys, parse_json, read_sse, sse_json};

#[test]
fn the_sse_reader_rejects_anything_but_exact_framing() {
    assert_eq!(
        read_sse(b"data: {}\n\ndata: [DONE]\n\n"),
        Ok(vec![b"{}".to_vec()])
    );
    for bad in [
        &b"data: {}\n\n"[..],
        b"data:{}\n\ndata: [DONE]\n\n",
        b"data: {}\ndata: [DONE]\n\n",
        b"data: {}\r\n\r\ndata: [DONE]\r\n\r\n",
        b": keep-alive\n\ndata: [DONE]\n\n",
        b"event: x\ndata: {}\n\ndata: [DONE]\n\n",
        b"data: [DONE]\n\ndata: {}\n\n",
        b"data: [DONE]\n",
    ] {
        assert!(
            read_sse(bad).is_err(),
            "accepted {:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

async fn stream(server: &InProcess, body: Value) -> Vec<Value> {
    let mut body = body;
    body["stream"] = json!(true);
    let reply = server.generate(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.content_type(), "text/event-stream; charset=utf-8");
    // Every payload is one compact JSON object; the framing is checked by `sse_json`.
    for payload in read_sse(&reply.body).expect("exact framing") {
        assert!(!payload.starts_with(b" ") && payload.starts_with(b"{"));
    }
    sse_json(&reply.body)
}

fn completion_tokens(chunks: &[Value]) -> Vec<u64> {
    chunks
        .iter()
        .map(|c| c["meta_info"]["completion_tokens"].as_u64().unwrap_or(0))
        .collect()
}

#[tokio::test]
async fn one_chunk_per_token_by_default_and_only_the_last_is_finished() {
    let server = InProcess::new(ServerConfig::default());
    let chunks = stream(
        &server,
        json!({"text": "count", "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}}),
    )
    .await;
    assert_eq!(completion_tokens(&chunks), [1, 2, 3, 4, 5]);
    for (i, chunk) in chunks.iter().enumerate() {
        let meta = &chunk["meta_info"];
        let last = i + 1 == chunks.len();
        assert_eq!(meta["finish_reason"].is_null(), !last, "{chunk}");
        assert_eq!(meta.get("e2e_latency").is_some(), last, "{chunk}");
        // Once per request, on the first object it yields (`TM: _stream_one_response`, 0.5.23).
        assert_eq!(
            meta.get("response_sent_to_client_ts").is_some(),
            i == 0,
            "{chunk}"
        );
        assert!(chunk.get("index").is_none());
    }
    assert_eq!(
        chunks[4]["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 5})
    );
}

#[tokio::test]
async fn stream_interval_sends_the_first_token_then_every_kth() {
    // SGLang flushes at lengths 1, 1 + k, 1 + 2k, ... and at the end.
    let per_request = InProcess::new(ServerConfig::default());
    let chunks = stream(
        &per_request,
        json!({"text": "count", "sampling_params": {"max_new_tokens": 10, "ignore_eos": true, "stream_interval": 4}}),
    )
    .await;
    assert_eq!(completion_tokens(&chunks), [1, 5, 9, 10]);

    let flag = InProcess::new(ServerConfig {
        stream_interval: 3,
        ..ServerConfig::default()
    });
    let chunks = stream(
        &flag,
        json!({"text": "count", "sampling_params": {"max_new_tokens": 7, "ignore_eos": true}}),
    )
    .await;
    assert_eq!(completion_tokens(&chunks), [1, 4, 7]);
    // A request's own interval wins over the flag; 0 or null means the flag.
    let chunks = stream(&flag, json!({"text": "count", "sampling_params": {"max_new_tokens": 3, "ignore_eos": true, "stream_interval": 1}})).await;
    assert_eq!(completion_tokens(&chunks), [1, 2, 3]);
    let chunks = stream(&flag, json!({"text": "count", "sampling_params": {"max_new_tokens": 7, "ignore_eos": true, "stream_interval": 0}})).await;
    assert_eq!(completion_tokens(&chunks), [1, 4, 7]);
}

#[tokio::test]
async fn batch_and_parallel_chunks_carry_index_and_interleave() {
    let server = InProcess::new(ServerConfig::default());
    let chunks = stream(
        &server,
        json!({"text": ["a", "b"], "sampling_params": {"max_new_tokens": 3, "ignore_eos": true}, "rid": "job"}),
    )
    .await;
    let indexes: Vec<u64> = chunks
        .iter()
        .map(|c| c["index"].as_u64().expect("index on every chunk"))
        .collect();
    assert_eq!(indexes, [0, 1, 0, 1, 0, 1]);
    for chunk in &chunks {
        let index = chunk["index"].as_u64().unwrap_or(9);
        assert_eq!(chunk["meta_info"]["id"], format!("job_{index}"));
        // `index` is the last top-level key, after meta_info.
        assert_eq!(keys(chunk).len(), 4);
    }
    let raw = server
        .generate(&json!({"text": "p", "sampling_params": {"n": 3, "max_new_tokens": 2, "ignore_eos": true}, "stream": true}))
        .await;
    let events = read_sse(&raw.body).expect("exact framing");
    for event in &events {
        assert_eq!(
            keys(&parse_json(event)),
            ["text", "output_ids", "meta_info", "index"]
        );
    }
    let indexes: Vec<u64> = sse_json(&raw.body)
        .iter()
        .map(|c| c["index"].as_u64().unwrap_or(9))
        .collect();
    assert_eq!(indexes, [0, 1, 2, 0, 1, 2]);
}

#[tokio::test]
async fn incremental_mode_sends_deltas_of_text_ids_and_logprobs() {
    let server = InProcess::new(ServerConfig {
        incremental_streaming_output: true,
        ..ServerConfig::default()
    });
    let chunks = stream(
        &server,
        json!({"text": "delta", "sampling_params": {"max_new_tokens": 6, "ignore_eos": true}, "return_logprob": true, "top_logprobs_num": 2}),
    )
    .await;
    for (i, chunk) in chunks.iter().enumerate() {
        let meta = &chunk["meta_info"];
        assert_eq!(
            chunk["output_ids"].as_array().map(Vec::len),
            Some(1),
            "{chunk}"
        );
        assert_eq!(
            meta["output_token_logprobs"].as_array().map(Vec::len),
            Some(1)
        );
        assert_eq!(
            meta["output_top_logprobs"].as_array().map(Vec::len),
            Some(1)
        );
        // The length stays cumulative, so clients can check they missed nothing.
        assert_eq!(meta["output_token_logprobs_length"], i + 1);
        assert_eq!(meta["completion_tokens"], i + 1);
        assert_eq!(meta["output_token_logprobs"][0][1], chunk["output_ids"][0]);
    }
}

#[tokio::test]
async fn mid_streams_send_delta_ids_with_cumulative_text_and_logprobs() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_3,
        ..ServerConfig::default()
    });
    let chunks = stream(
        &server,
        json!({"text": "mid", "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}, "return_logprob": true}),
    )
    .await;
    let mut text_len = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let meta = &chunk["meta_info"];
        // One new id a chunk; the first is preceded by the detokenizer's window of the prompt (VERSIONS.md,
        // `decode_window_ids`): `min(prompt_tokens, 5)` ids.
        let window = if i == 0 {
            meta["prompt_tokens"].as_u64().map(|p| p.min(5) as usize)
        } else {
            Some(0)
        };
        assert_eq!(
            chunk["output_ids"].as_array().map(Vec::len),
            window.map(|w| w + 1)
        );
        assert_eq!(
            meta["output_token_logprobs"].as_array().map(Vec::len),
            Some(i + 1)
        );
        let text = chunk["text"].as_str().unwrap_or("");
        assert!(text.len() >= text_len, "text is cumulative");
        text_len = text.len();
        assert!(
            meta.get("num_retractions").is_none()
                && meta.get("output_token_logprobs_length").is_none()
        );
        // 0.5.3's default logprob_start_len covers the last prompt token.
        assert_eq!(
            meta["input_token_logprobs"].as_array().map(Vec::len),
            Some(1)
        );
        assert!(meta["input_token_logprobs"][0][0].is_null());
    }
}

#[tokio::test]
async fn cumulative_text_only_grows_and_ends_trimmed_at_a_stop_string() {
    let server = InProcess::new(ServerConfig::default());
    let mut string_stops = 0;
    for request in crate::common::load_json("requests.json")
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if request["sampling_params"].get("stop").is_none() {
            continue;
        }
        let chunks = stream(&server, request.clone()).await;
        let texts: Vec<&str> = chunks
            .iter()
            .map(|c| c["text"].as_str().unwrap_or(""))
            .collect();
        for w in texts.windows(2) {
            assert!(
                w[1].starts_with(w[0]),
                "{request}: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
        let reason = &chunks.last().expect("chunks")["meta_info"]["finish_reason"];
        if reason["type"] == "stop" && reason["matched"].is_string() {
            string_stops += 1;
            let matched = reason["matched"].as_str().unwrap_or("");
            let text = texts.last().copied().unwrap_or("");
            if request["sampling_params"]["no_stop_trim"] == true {
                assert!(text.ends_with(matched), "{text:?} keeps {matched:?}");
            } else {
                assert!(
                    !text.contains(matched),
                    "{text:?} is cut before {matched:?}"
                );
            }
        }
    }
    assert!(
        string_stops >= 2,
        "the fixtures should end on stop strings, saw {string_stops}"
    );
}

#[tokio::test]
async fn a_scheduler_abort_in_a_batch_stream_ends_only_that_item() {
    let server = InProcess::new(ServerConfig::default());
    let chunks = stream(
        &server,
        json!({"input_ids": [[1, 2, 3], [4, 5]], "return_logprob": true, "logprob_start_len": [0, 3],
               "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}}),
    )
    .await;
    let aborted: Vec<&Value> = chunks.iter().filter(|c| c["index"] == 1).collect();
    assert_eq!(aborted.len(), 1);
    assert_eq!(aborted[0]["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(aborted[0]["meta_info"]["finish_reason"]["status_code"], 400);
    // The one token the scheduler still makes for a refused item, from the prompt `[0]` (0.5.23 live).
    assert_eq!(aborted[0]["output_ids"].as_array().map(Vec::len), Some(1));
    assert_eq!(aborted[0]["meta_info"]["prompt_tokens"], 1);
    let finished: Vec<&Value> = chunks.iter().filter(|c| c["index"] == 0).collect();
    assert_eq!(
        finished
            .last()
            .map(|c| c["meta_info"]["completion_tokens"].clone()),
        Some(json!(2))
    );
}

#[tokio::test]
async fn max_new_tokens_zero_streams_one_finished_chunk() {
    let server = InProcess::new(ServerConfig::default());
    let chunks = stream(&server, json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 0}, "return_logprob": true, "logprob_start_len": 0})).await;
    assert_eq!(chunks.len(), 1);
    let chunk = &chunks[0];
    assert_eq!(chunk["text"], "");
    assert_eq!(chunk["output_ids"], json!([]));
    assert_eq!(
        chunk["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 0})
    );
    assert_eq!(chunk["meta_info"]["output_token_logprobs"], json!([]));
    assert_eq!(
        chunk["meta_info"]["input_token_logprobs"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
}

#[tokio::test]
async fn an_empty_batch_streams_only_done() {
    let server = InProcess::new(ServerConfig::default());
    let reply = server.generate(&json!({"text": [], "stream": true})).await;
    assert_eq!(reply.body, b"data: [DONE]\n\n");
    let reply = server.generate(&json!({"text": []})).await;
    assert_eq!(reply.json(), json!([]));
}

/// 400 concurrent streams of 7 prompts: each finishes, and each is the answer the oracle computes from its body
/// and the draw its ledger entry records (MODEL.md 8.3); the draws of each prompt are 0, 1, 2, ... whatever order
/// the streams arrived in, so no two identical requests drew alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_finish_and_match_the_oracle() {
    let live = std::sync::Arc::new(
        crate::common::Live::start(ServerConfig {
            ledger: true,
            ..ServerConfig::default()
        })
        .await,
    );
    let streams = 400;
    let mut tasks = Vec::with_capacity(streams);
    for i in 0..streams {
        let live = std::sync::Arc::clone(&live);
        tasks.push(tokio::spawn(async move {
            let request = json!({"text": format!("prompt {}", i % 7), "rid": format!("c{i}"), "stream": true,
                                 "sampling_params": {"max_new_tokens": 12, "ignore_eos": true}, "return_logprob": true});
            let reply = live.post_json("/generate", &request).await;
            (request, reply)
        }));
    }
    let mut answers = Vec::with_capacity(streams);
    for task in tasks {
        let (request, reply) = task.await.expect("task joins");
        assert_eq!(reply.status, 200);
        answers.push((request, reply));
    }
    let ledger = live.get_json("/admin/ledger").await;
    let draw_of: std::collections::HashMap<String, u64> = ledger["items"]
        .as_array()
        .expect("the ledger's items")
        .iter()
        .map(|entry| {
            let rid = entry["rid"].as_str().expect("a rid").to_owned();
            (rid, entry["draw"].as_u64().expect("a draw"))
        })
        .collect();
    let mut draws_by_prompt = vec![Vec::new(); 7];
    for (i, (request, reply)) in answers.iter().enumerate() {
        let rebuilt =
            crate::common::reassemble(&sse_json(&reply.body), crate::common::Mode::Cumulative);
        let draw = draw_of[request["rid"].as_str().unwrap_or_default()];
        draws_by_prompt[i % 7].push(draw);
        let expected = live
            .oracle
            .expect_drawn(&serde_json::to_vec(request).unwrap_or_default(), &[draw])
            .expect("valid");
        assert_eq!(json!(rebuilt[0].output_ids), expected.body["output_ids"]);
        assert_eq!(
            json!(rebuilt[0].output_token_logprobs),
            expected.body["meta_info"]["output_token_logprobs"]
        );
        assert_eq!(rebuilt[0].last_meta["id"], request["rid"]);
    }
    for (prompt, mut draws) in draws_by_prompt.into_iter().enumerate() {
        draws.sort_unstable();
        let count = draws.len() as u64;
        assert_eq!(draws, (0..count).collect::<Vec<_>>(), "prompt {prompt}");
    }
}

#[tokio::test]
async fn a_chunk_is_skipped_while_the_output_could_be_starting_a_stop_string() {
    // SGLang's `check_match_stop_str_prefix`: with a stop string that never matches in full but whose start
    // equals the text of the third generated token, the chunk after that token is held back.
    let server = InProcess::new(ServerConfig::default());
    // Seeded: the request with the stop string is the same sample as this one.
    let base = json!({"text": "List things",
                      "sampling_params": {"max_new_tokens": 8, "ignore_eos": true, "sampling_seed": 2}});
    let ids: Vec<u32> = server.generate(&base).await.json()["output_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .map(|x| x as u32)
        .collect();
    let tokenizer = server.oracle.model().tokenizer();
    let stop = format!("{}\u{1}", tokenizer.token_text(ids[2]));
    let mut request = base.clone();
    request["sampling_params"]["stop"] = json!([stop]);
    let chunks = stream(&server, request).await;
    let held = |len: usize| {
        let text = tokenizer.decode(&ids[..len], true);
        (1..stop.len()).any(|n| stop.is_char_boundary(n) && text.ends_with(&stop[..n]))
    };
    let want: Vec<u64> = (1..=ids.len())
        .filter(|&len| len == ids.len() || !held(len))
        .map(|l| l as u64)
        .collect();
    assert!(!want.contains(&3), "the third token starts the stop string");
    assert_eq!(completion_tokens(&chunks), want);
}

/// An uncaught exception in a stream (a `TypeError` of a sampling parameter): SGLang raises it inside
/// `stream_results`, after the 200 headers are out, and catches only `ValueError` there, so the connection
/// breaks with no event and no `[DONE]`; without a stream it is a plain 500. (The SGLang-versions issue: the
/// mock answered the stream with the 500 too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncaught_error_in_a_stream_breaks_it_after_the_headers() {
    for version in [SglangVersion::V0_5_3, SglangVersion::V0_5_15] {
        let live = crate::common::Live::start(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        })
        .await;
        let body = json!({"text": "x", "stream": true, "sampling_params": {"stop": 5}});
        let reply = live.post_json("/generate", &body).await;
        assert_eq!(reply.status, 200, "{version}");
        assert!(
            reply.content_type().starts_with("text/event-stream"),
            "{version}"
        );
        assert!(
            reply.broken,
            "{version}: the stream breaks instead of ending"
        );
        let mut plain = body.clone();
        plain["stream"] = json!(false);
        let reply = live.post_json("/generate", &plain).await;
        assert_eq!(
            (reply.status.as_u16(), reply.text()),
            (500, "Internal Server Error".to_owned())
        );
        live.stop().await.expect("clean shutdown");
    }
}
