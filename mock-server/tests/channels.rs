//! The per-token channels beside the logprobs, as the releases that have them send them: `routed_experts`
//! (0.5.15 and later, with `--enable-return-routed-experts`; MODEL.md section 12) and the sampling masks
//! (`output_token_sampling_mask`, `output_token_sampling_logprobs`, `output_token_sampling_mask_length`,
//! 0.5.23; MODEL.md section 7.1). The exact values are cross-checked against the Python reference
//! (`reference::server_agrees_with_the_python_reference_under_every_release`); these tests hold the shapes,
//! the frames that carry them, and the refusals, to SGLang's code.

use base64::Engine;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Reply, keys, sse_json};

const LAYERS: usize = 3;
const EXPERTS: i32 = 16;
const PER_TOKEN: usize = 4;

fn routing_server(version: SglangVersion, enabled: bool) -> InProcess {
    InProcess::new(ServerConfig {
        sglang_version: version,
        enable_return_routed_experts: enabled,
        num_hidden_layers: LAYERS as u32,
        num_experts: EXPERTS as u32,
        num_experts_per_tok: PER_TOKEN as u32,
        incremental_streaming_output: false,
        ..ServerConfig::default()
    })
}

/// `meta_info.routed_experts` decoded as slime's `decode_int32_meta_array` does, then cut into rows of
/// `[layers][experts per token]`.
fn rows(meta: &Value) -> Vec<Vec<i32>> {
    let text = meta["routed_experts"]
        .as_str()
        .expect("routed_experts is a string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("standard base64");
    assert_eq!(bytes.len() % 4, 0, "whole int32 values");
    let flat: Vec<i32> = bytes
        .chunks(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(flat.len() % (LAYERS * PER_TOKEN), 0, "whole rows");
    flat.chunks(LAYERS * PER_TOKEN)
        .map(<[i32]>::to_vec)
        .collect()
}

async fn generate_ok(server: &InProcess, body: &Value) -> Value {
    let reply = server.generate(body).await;
    assert_eq!(reply.status, 200, "{body}: {}", reply.text());
    reply.json()
}

fn ids(value: &Value) -> Vec<u32> {
    serde_json::from_value(value.clone()).expect("a list of ids")
}

/// Rows cover `[routed_experts_start_len, seqlen - 1)` with `seqlen` the prompt and every output id
/// (`BaseTopkCapturer.get_topk`): the last token has no row. Each layer routes to distinct experts in range, and a
/// row depends on its prefix alone, so a continuation that re-sends prompt and output as its prompt (a second
/// turn, a resumed partial rollout) gets the same rows for the positions they share; verl PR #6029 concatenated
/// such answers and duplicated rows.
#[tokio::test]
async fn routes_have_a_row_per_position_but_the_last_and_continuations_repeat_them() {
    for version in [SglangVersion::V0_5_15, SglangVersion::V0_5_23] {
        let server = routing_server(version, true);
        let first = generate_ok(
            &server,
            &json!({"input_ids": [5, 6, 7], "return_routed_experts": true,
                    "sampling_params": {"max_new_tokens": 6, "ignore_eos": true}}),
        )
        .await;
        let output = ids(&first["output_ids"]);
        let first_rows = rows(&first["meta_info"]);
        assert_eq!(first_rows.len(), 3 + output.len() - 1, "{version}");
        for row in &first_rows {
            for layer in row.chunks(PER_TOKEN) {
                let mut distinct = layer.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), PER_TOKEN, "{version}: {layer:?}");
                assert!(layer.iter().all(|e| (0..EXPERTS).contains(e)), "{layer:?}");
            }
        }
        assert_ne!(
            first_rows[0], first_rows[1],
            "rows differ along the sequence"
        );

        let mut prompt = vec![5, 6, 7];
        prompt.extend(&output);
        let second = generate_ok(
            &server,
            &json!({"input_ids": prompt, "return_routed_experts": true,
                    "sampling_params": {"max_new_tokens": 3, "ignore_eos": true, "sampling_seed": 1}}),
        )
        .await;
        let second_rows = rows(&second["meta_info"]);
        assert_eq!(second_rows.len(), prompt.len() + 3 - 1);
        assert_eq!(second_rows[..first_rows.len()], first_rows[..], "{version}");

        // A start skips the rows before it and changes none of the others.
        let from_two = generate_ok(
            &server,
            &json!({"input_ids": prompt, "return_routed_experts": true, "routed_experts_start_len": 2,
                    "sampling_params": {"max_new_tokens": 3, "ignore_eos": true, "sampling_seed": 1}}),
        )
        .await;
        assert_eq!(rows(&from_two["meta_info"]), second_rows[2..], "{version}");
        // A start at the prompt's end is allowed: the rows of the output but its last token.
        let from_end = generate_ok(
            &server,
            &json!({"input_ids": prompt, "return_routed_experts": true,
                    "routed_experts_start_len": prompt.len(),
                    "sampling_params": {"max_new_tokens": 3, "ignore_eos": true, "sampling_seed": 1}}),
        )
        .await;
        assert_eq!(rows(&from_end["meta_info"]), second_rows[prompt.len()..]);
    }
}

/// The routes are read out when a request finishes (`_maybe_collect_routed_experts`): in a stream only the
/// finishing frame has the key, with every row; earlier frames have none. `meta_info` puts it after
/// `weight_versions` and before `dp_rank` (`_handle_batch_output`).
#[tokio::test]
async fn a_stream_carries_the_routes_on_its_finishing_frame_only() {
    let server = routing_server(SglangVersion::V0_5_23, true);
    let body = json!({"input_ids": [5, 6, 7], "return_routed_experts": true, "stream": true,
                      "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}});
    let reply = server.generate(&body).await;
    let events = sse_json(&reply.body);
    let (last, earlier) = events.split_last().expect("frames");
    assert!(!earlier.is_empty());
    for frame in earlier {
        assert!(
            frame["meta_info"].get("routed_experts").is_none(),
            "{frame}"
        );
    }
    assert_eq!(rows(&last["meta_info"]).len(), 3 + 4 - 1);
    let keys: Vec<&str> = last["meta_info"]
        .as_object()
        .expect("meta_info")
        .keys()
        .map(String::as_str)
        .collect();
    let at = |key: &str| keys.iter().position(|k| *k == key).expect(key);
    // As the running 0.5.23 wrote them (`moe/routed_experts` in `conform/golden/0.5.23-moe.jsonl`).
    assert_eq!(
        at("cached_tokens_details"),
        at("weight_versions") + 1,
        "{keys:?}"
    );
    assert_eq!(
        at("routed_experts"),
        at("cached_tokens_details") + 1,
        "{keys:?}"
    );
    assert_eq!(at("dp_rank"), at("routed_experts") + 1, "{keys:?}");
}

/// Without `--enable-return-routed-experts` the capturer does not exist and a request that asks gets no key at
/// all (HTTP 200); 0.5.3 has neither the flag nor the fields. The scheduler still checks the start whenever
/// routes are asked for (0.5.15 and later), with its self-documenting f-strings: a 400 without a stream, an
/// abort frame with one.
#[tokio::test]
async fn routes_need_the_server_flag_and_a_start_within_the_prompt() {
    let ask = json!({"input_ids": [5, 6, 7], "return_routed_experts": true,
                     "sampling_params": {"max_new_tokens": 2}});
    for (version, enabled) in [
        (SglangVersion::V0_5_23, false),
        (SglangVersion::V0_5_15, false),
        (SglangVersion::V0_5_3, true),
    ] {
        let answer = generate_ok(&routing_server(version, enabled), &ask).await;
        assert!(
            answer["meta_info"].get("routed_experts").is_none(),
            "{version}: {answer}"
        );
    }
    for (version, enabled) in [
        (SglangVersion::V0_5_23, false),
        (SglangVersion::V0_5_15, true),
    ] {
        let server = routing_server(version, enabled);
        for (start, message) in [
            (
                -3,
                "recv_req.routed_experts_start_len=-3 is lower than 0. Please use a non-negative \
                 routed_experts_start_len.",
            ),
            (
                4,
                "recv_req.routed_experts_start_len=4 is higher than the number of input tokens \
                 len(req.origin_input_ids)=3. Please use a smaller routed_experts_start_len.",
            ),
        ] {
            let mut body = ask.clone();
            body["routed_experts_start_len"] = json!(start);
            let reply = server.generate(&body).await;
            assert_eq!(reply.status, 400, "{version}");
            assert_eq!(
                reply.json(),
                json!({"error": {"message": message}}),
                "{version}"
            );
            body["stream"] = json!(true);
            let frames = sse_json(&server.generate(&body).await.body);
            assert_eq!(
                frames[0]["meta_info"]["finish_reason"],
                json!({"type": "abort", "message": message, "status_code": 400,
                       "err_type": "BadRequestError"}),
                "{version}"
            );
        }
    }
    // 0.5.3 reads neither field.
    let mut body = ask.clone();
    body["routed_experts_start_len"] = json!(-3);
    generate_ok(&routing_server(SglangVersion::V0_5_3, true), &body).await;
}

fn logsumexp(values: &[f64]) -> f64 {
    let top = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    top + values.iter().map(|v| (v - top).exp()).sum::<f64>().ln()
}

/// The mask is the sampler's support: with `top_k = k` (and no other filter) the first `k` ids of the sorted
/// order, which is the top list of the same distribution; its logprobs are that distribution renormalised over
/// the support, `log(p / sum p)` (`Sampler._build_sampling_mask_output`). Checked at T = 0.7, where the reported
/// top logprobs are under the sampling temperature, against the server's own top lists, and for both modes.
#[tokio::test]
async fn a_sampling_mask_is_the_top_k_renormalised() {
    let server = routing_server(SglangVersion::V0_5_23, false);
    let k = 5;
    for mode in ["selected", "support"] {
        let answer = generate_ok(
            &server,
            &json!({"input_ids": [5, 6, 7], "return_logprob": true, "top_logprobs_num": k,
                    "return_sampling_mask": true, "sampling_logprobs_mode": mode,
                    "sampling_params": {"max_new_tokens": 8, "temperature": 0.7, "top_k": k,
                                        "ignore_eos": true, "sampling_seed": 3}}),
        )
        .await;
        let meta = &answer["meta_info"];
        let output = ids(&answer["output_ids"]);
        let masks = meta["output_token_sampling_mask"]
            .as_array()
            .expect("masks");
        let logprobs = meta["output_token_sampling_logprobs"]
            .as_array()
            .expect("logprobs");
        assert_eq!(masks.len(), output.len());
        assert_eq!(logprobs.len(), output.len());
        assert_eq!(meta["output_token_sampling_mask_length"], output.len());
        for (j, token) in output.iter().enumerate() {
            let top = meta["output_top_logprobs"][j]
                .as_array()
                .expect("a top list");
            let top_ids: Vec<u32> = top
                .iter()
                .map(|t| t[1].as_u64().unwrap_or(0) as u32)
                .collect();
            let top_lps: Vec<f64> = top.iter().map(|t| t[0].as_f64().unwrap_or(0.0)).collect();
            assert_eq!(ids(&masks[j]), top_ids, "{mode} position {j}");
            let norm = logsumexp(&top_lps);
            let want: Vec<f64> = top_lps.iter().map(|lp| lp - norm).collect();
            let at = top_ids
                .iter()
                .position(|id| id == token)
                .expect("the token is in its support");
            let got: Vec<f64> = match mode {
                "selected" => vec![logprobs[j].as_f64().unwrap_or(f64::NAN)],
                _ => logprobs[j]
                    .as_array()
                    .expect("a list per token")
                    .iter()
                    .map(|v| v.as_f64().unwrap_or(f64::NAN))
                    .collect(),
            };
            let want = if mode == "selected" {
                vec![want[at]]
            } else {
                want
            };
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "{mode} position {j}: {g} vs {w}");
            }
        }
    }
}

/// At a cold temperature most weights underflow to 0 (MODEL.md section 5: more than about 745 nats below the top),
/// and the sampler cannot draw them, so the support holds only ids of positive weight (section 7.1): a prefix of
/// the top-k list, never a tail id (the tail lies 1,200 nats down at T = 0.01), each with a logprob above the
/// underflow and together of mass 1. Every id of the top-k list left out has a whole-distribution logprob far
/// below the underflow.
#[tokio::test]
async fn a_cold_sampling_mask_holds_only_ids_the_sampler_can_draw() {
    let server = routing_server(SglangVersion::V0_5_23, false);
    let k = 50;
    let answer = generate_ok(
        &server,
        &json!({"input_ids": [5, 6, 7], "return_logprob": true, "top_logprobs_num": k,
                "return_sampling_mask": true, "sampling_logprobs_mode": "support",
                "sampling_params": {"max_new_tokens": 8, "temperature": 0.01, "top_k": k,
                                    "ignore_eos": true, "sampling_seed": 5}}),
    )
    .await;
    let meta = &answer["meta_info"];
    let output = ids(&answer["output_ids"]);
    let mut cut = 0;
    for (j, token) in output.iter().enumerate() {
        let support = ids(&meta["output_token_sampling_mask"][j]);
        let logprobs: Vec<f64> = meta["output_token_sampling_logprobs"][j]
            .as_array()
            .expect("a list per token")
            .iter()
            .map(|v| v.as_f64().expect("finite"))
            .collect();
        let top = meta["output_top_logprobs"][j]
            .as_array()
            .expect("a top list");
        let top_ids: Vec<u32> = top.iter().map(|t| t[1].as_u64().unwrap() as u32).collect();
        assert!(support.contains(token), "position {j}");
        assert!(
            support.len() <= 9,
            "explicit entries only: {}",
            support.len()
        );
        assert_eq!(support[..], top_ids[..support.len()], "position {j}");
        assert!(
            logprobs.iter().all(|&lp| lp > -745.0),
            "position {j}: {logprobs:?}"
        );
        let mass: f64 = logprobs.iter().map(|lp| lp.exp()).sum();
        assert!((mass - 1.0).abs() < 1e-5, "position {j}: mass {mass}");
        for left_out in &top[support.len()..] {
            let lp = left_out[0].as_f64().expect("a logprob");
            assert!(lp < -745.0, "position {j}: a drawable id left out ({lp})");
        }
        cut += top.len() - support.len();
    }
    assert!(cut > 0, "the case has weights that underflow");
}

/// Greedy sampling has a one-id support, the most probable id, with logprob 0
/// (`_build_greedy_sampling_mask_output`).
#[tokio::test]
async fn a_greedy_mask_is_the_argmax_with_logprob_zero() {
    let server = routing_server(SglangVersion::V0_5_23, false);
    let answer = generate_ok(
        &server,
        &json!({"input_ids": [5, 6, 7], "return_sampling_mask": true,
                "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}}),
    )
    .await;
    let output = ids(&answer["output_ids"]);
    let masks: Vec<Vec<u32>> = output.iter().map(|&id| vec![id]).collect();
    assert_eq!(
        answer["meta_info"]["output_token_sampling_mask"],
        json!(masks)
    );
    assert_eq!(
        answer["meta_info"]["output_token_sampling_logprobs"],
        json!(vec![0.0; output.len()])
    );
}

/// Every frame of a mask request carries the keys (`_handle_batch_output` extends the tokenizer's lists on each):
/// cumulative lists by default; with `--incremental-streaming-output` the two lists are the new rows only while
/// the length stays the count of every row (`_slice_streaming_output_meta_info` leaves it alone).
#[tokio::test]
async fn stream_frames_carry_the_masks_cumulative_or_as_deltas() {
    let body = json!({"input_ids": [5, 6, 7], "return_sampling_mask": true, "stream": true,
                      "sampling_params": {"max_new_tokens": 5, "top_k": 3, "ignore_eos": true,
                                          "sampling_seed": 1}});
    let cumulative = sse_json(
        &routing_server(SglangVersion::V0_5_23, false)
            .generate(&body)
            .await
            .body,
    );
    let incremental = sse_json(
        &InProcess::new(ServerConfig {
            incremental_streaming_output: true,
            ..ServerConfig::default()
        })
        .generate(&body)
        .await
        .body,
    );
    assert_eq!(cumulative.len(), 5);
    assert_eq!(incremental.len(), 5);
    let full = &cumulative[4]["meta_info"]["output_token_sampling_mask"];
    let mut joined = Vec::new();
    for (j, (c, i)) in cumulative.iter().zip(&incremental).enumerate() {
        let (c, i) = (&c["meta_info"], &i["meta_info"]);
        assert_eq!(
            c["output_token_sampling_mask"],
            json!(full.as_array().unwrap()[..=j])
        );
        assert_eq!(c["output_token_sampling_mask_length"], j + 1);
        assert_eq!(i["output_token_sampling_mask_length"], j + 1);
        let delta = i["output_token_sampling_mask"].as_array().expect("a delta");
        assert_eq!(delta.len(), 1, "frame {j}");
        joined.extend(delta.iter().cloned());
        assert_eq!(
            i["output_token_sampling_logprobs"].as_array().map(Vec::len),
            Some(1)
        );
    }
    assert_eq!(json!(joined), *full);
}

/// The requests SGLang refuses, each with its own text and shape: the scheduler's top-k gate (a 400 without a
/// stream; with one, an abort frame without `err_type`, its mask lists empty); the tokenizer's check of a mode
/// without a mask; a mode outside the `Literal` (FastAPI's 400); a list with `n > 1`. Releases before 0.5.23
/// have no such fields and ignore them.
#[tokio::test]
async fn sampling_mask_requests_are_refused_as_sglang_refuses_them() {
    let server = routing_server(SglangVersion::V0_5_23, false);
    let gate = "return_sampling_mask requires top_k=1 for greedy sampling or finite 1 < top_k <= 4096; \
                got top_k=1073741824. Lower top_k or increase --sampling-mask-max-tokens.";
    let unbounded = json!({"input_ids": [5, 6, 7], "return_sampling_mask": true,
                           "sampling_params": {"max_new_tokens": 2}});
    let reply = server.generate(&unbounded).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json(), json!({"error": {"message": gate}}));
    let mut streamed = unbounded.clone();
    streamed["stream"] = json!(true);
    let frames = sse_json(&server.generate(&streamed).await.body);
    assert_eq!(frames.len(), 1);
    let meta = &frames[0]["meta_info"];
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "abort", "message": gate, "status_code": 400, "err_type": null})
    );
    assert_eq!(meta["output_token_sampling_mask"], json!([]));
    assert_eq!(meta["output_token_sampling_mask_length"], 0);

    let above_cap = json!({"input_ids": [5, 6, 7], "return_sampling_mask": true,
                           "sampling_params": {"max_new_tokens": 2, "top_k": 5000}});
    let reply = server.generate(&above_cap).await;
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("got top_k=5000."), "{}", reply.text());

    let mode_alone = json!({"input_ids": [5, 6, 7], "sampling_logprobs_mode": "support"});
    let reply = server.generate(&mode_alone).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json(),
        json!({"error": {"message": "sampling_logprobs_mode can only be set when return_sampling_mask=true."}})
    );

    let bad_mode = json!({"input_ids": [5, 6, 7], "return_sampling_mask": true,
                          "sampling_logprobs_mode": "all"});
    let reply = server.generate(&bad_mode).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["object"], "error");
    assert!(
        reply
            .text()
            .contains("Input should be 'selected' or 'support'")
    );

    let list_with_n = json!({"input_ids": [5, 6, 7], "return_sampling_mask": [true],
                             "sampling_params": {"n": 2, "top_k": 3}});
    let reply = server.generate(&list_with_n).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json(),
        json!({"error": {"message": "Cannot use list return_sampling_mask with parallel_sample_num > 1"}})
    );

    for version in [SglangVersion::V0_5_3, SglangVersion::V0_5_15] {
        let answer = generate_ok(&routing_server(version, false), &unbounded).await;
        assert!(
            answer["meta_info"]
                .get("output_token_sampling_mask")
                .is_none(),
            "{version}"
        );
        generate_ok(&routing_server(version, false), &bad_mode).await;
    }
}

/// `/v1/completions` or `/v1/chat/completions` with `body`, answered 200.
async fn openai_ok(server: &InProcess, path: &str, body: &Value) -> Reply {
    let reply = server
        .post(path, serde_json::to_vec(body).expect("serialisable"))
        .await;
    assert_eq!(reply.status, 200, "{path} {body}: {}", reply.text());
    reply
}

/// The OpenAI routes' `sglext.routed_experts` (0.5.15 and later, `serving_completions.py` and `serving_chat.py`):
/// a non-stream answer carries the first item's routes after `metadata`, the very string `/generate` sends for
/// the same request, `n = 2` included; a stream sends them once, in a chunk of their own with no choices and a
/// `null` usage, after every choice's chunks and before the usage chunk. Without the request field, without the
/// server flag, or on 0.5.3, no answer has an `sglext`.
#[tokio::test]
async fn openai_answers_carry_the_first_choices_routes_in_sglext() {
    let chatml = "<|im_start|>user\nroute me<|im_end|>\n<|im_start|>assistant\n";
    for version in [SglangVersion::V0_5_15, SglangVersion::V0_5_23] {
        let server = routing_server(version, true);
        for n in [1, 2] {
            let sampling =
                json!({"max_new_tokens": 4, "sampling_seed": 3, "ignore_eos": true, "n": n});
            let routes_of = |answer: &Value| -> Value {
                let first = if n == 1 { answer } else { &answer[0] };
                first["meta_info"]["routed_experts"].clone()
            };
            let native_ids = generate_ok(
                &server,
                &json!({"input_ids": [5, 6, 7], "return_routed_experts": true, "sampling_params": sampling}),
            )
            .await;
            let native_text = generate_ok(
                &server,
                &json!({"text": chatml, "return_routed_experts": true, "sampling_params": sampling}),
            )
            .await;
            let common = json!({"max_tokens": 4, "seed": 3, "ignore_eos": true, "n": n,
                                "return_routed_experts": true});
            let mut completion = common.clone();
            completion["prompt"] = json!([5, 6, 7]);
            let mut chat = common.clone();
            chat["messages"] = json!([{"role": "user", "content": "route me"}]);
            for (path, mut request, want) in [
                ("/v1/completions", completion, routes_of(&native_ids)),
                ("/v1/chat/completions", chat, routes_of(&native_text)),
            ] {
                assert!(want.is_string(), "{version} {path}: {want}");
                let reply = openai_ok(&server, path, &request).await;
                let answer = reply.json();
                assert_eq!(
                    answer["sglext"],
                    json!({"routed_experts": want}),
                    "{version} {path} n={n}"
                );
                let text = reply.text();
                let at = |key: &str| text.find(&format!("\"{key}\":")).expect(key);
                assert!(at("metadata") < at("sglext"), "{text}");

                request["stream"] = json!(true);
                request["stream_options"] = json!({"include_usage": true});
                let chunks = sse_json(&openai_ok(&server, path, &request).await.body);
                let carrying: Vec<usize> = (0..chunks.len())
                    .filter(|&i| chunks[i].get("sglext").is_some())
                    .collect();
                assert_eq!(carrying.len(), 1, "{version} {path}: {chunks:?}");
                let at = carrying[0];
                assert_eq!(at, chunks.len() - 2, "before the usage chunk alone");
                let chunk = &chunks[at];
                assert_eq!(
                    (&chunk["choices"], &chunk["usage"], &chunk["sglext"]),
                    (&json!([]), &Value::Null, &json!({"routed_experts": want})),
                    "{version} {path}"
                );
                assert!(chunk.as_object().unwrap().contains_key("usage"));
                assert!(
                    chunks[..at]
                        .iter()
                        .all(|c| !c["choices"].as_array().unwrap().is_empty())
                );
            }
        }
    }
    let plain = json!({"prompt": [5, 6, 7], "max_tokens": 2});
    let asked = json!({"prompt": [5, 6, 7], "max_tokens": 2, "return_routed_experts": true});
    for (version, enabled, request) in [
        (SglangVersion::V0_5_23, true, &plain),
        (SglangVersion::V0_5_23, false, &asked),
        (SglangVersion::V0_5_15, false, &asked),
        (SglangVersion::V0_5_3, true, &asked),
    ] {
        let server = routing_server(version, enabled);
        let answer = openai_ok(&server, "/v1/completions", request).await.json();
        assert!(answer.get("sglext").is_none(), "{version}: {answer}");
        let mut request = request.clone();
        request["stream"] = json!(true);
        let chunks = sse_json(&openai_ok(&server, "/v1/completions", &request).await.body);
        assert!(
            chunks.iter().all(|c| c.get("sglext").is_none()),
            "{version}"
        );
    }
}

/// The edges, as SGLang's code has them: routes without a row (a start at the prompt's end and one output
/// token) are an empty string, which a non-stream answer leaves out (`if routed_experts or ...`) and a stream
/// sends (`is not None`); a start past the prompt is the scheduler's 400, as on `/generate`.
#[tokio::test]
async fn openai_routes_without_rows_and_a_start_past_the_prompt() {
    let server = routing_server(SglangVersion::V0_5_23, true);
    let mut request = json!({"prompt": [5, 6, 7], "max_tokens": 1, "return_routed_experts": true,
                             "routed_experts_start_len": 3});
    let answer = openai_ok(&server, "/v1/completions", &request).await.json();
    assert!(answer.get("sglext").is_none(), "{answer}");
    request["stream"] = json!(true);
    let chunks = sse_json(&openai_ok(&server, "/v1/completions", &request).await.body);
    let carrying: Vec<&Value> = chunks
        .iter()
        .filter(|c| c.get("sglext").is_some())
        .collect();
    assert_eq!(carrying.len(), 1);
    assert_eq!(carrying[0]["sglext"], json!({"routed_experts": ""}));

    request["routed_experts_start_len"] = json!(4);
    request["stream"] = json!(false);
    let reply = server
        .post("/v1/completions", serde_json::to_vec(&request).unwrap())
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.text().contains(
            "recv_req.routed_experts_start_len=4 is higher than the number of input tokens \
             len(req.origin_input_ids)=3."
        ),
        "{}",
        reply.text()
    );
}

/// The routes faults reach `sglext.routed_experts`: dropped with the `sglext` it leaves empty, a row short, a
/// row repeated, every expert id changed.
#[tokio::test]
async fn routes_faults_reach_the_openai_sglext() {
    let server = routing_server(SglangVersion::V0_5_23, true);
    // Greedy: each faulted answer is the clean one's sample (identical unseeded requests draw anew).
    let request = json!({"prompt": [5, 6, 7], "max_tokens": 4, "ignore_eos": true, "temperature": 0,
                         "return_routed_experts": true});
    let clean = openai_ok(&server, "/v1/completions", &request).await.json();
    let clean_rows = rows(&clean["sglext"]);
    assert_eq!(clean_rows.len(), 3 + 4 - 1);
    let faulted = |fault: &'static str| {
        let server = server.clone();
        let request = request.clone();
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("x-mock-fault", fault),
            ];
            let reply = server
                .request(
                    axum::http::Method::POST,
                    "/v1/completions",
                    serde_json::to_vec(&request).unwrap(),
                    &headers,
                )
                .await;
            assert_eq!(reply.status, 200, "{fault}");
            reply.json()
        }
    };
    let dropped = faulted("drop-channel").await;
    assert!(dropped.get("sglext").is_none(), "{dropped}");
    assert_eq!(dropped["choices"], clean["choices"]);
    assert_eq!(
        rows(&faulted("routes-short").await["sglext"]),
        clean_rows[..5]
    );
    let extra = rows(&faulted("routes-extra-row").await["sglext"]);
    assert_eq!((&extra[..6], &extra[6]), (&clean_rows[..], &clean_rows[5]));
    let retracted = rows(&faulted("retract-routes").await["sglext"]);
    for (got, clean) in retracted.iter().flatten().zip(clean_rows.iter().flatten()) {
        assert_eq!(*got, clean ^ 1);
    }
    assert_eq!(retracted.len(), clean_rows.len());
}

/// A chat request's `return_meta_info` (0.5.15 and later): each choice carries its item's native `meta_info`,
/// with the keys the running releases wrote (`chat/return_meta_info` in `mock-server/conform/golden/`); a
/// stream cannot (the release's `ValueError`), and 0.5.23's sampling masks need it (its `_validate_request`)
/// and travel in it. 0.5.3 has neither field and ignores both.
#[tokio::test]
async fn chat_meta_info_is_the_native_items_and_carries_the_sampling_masks() {
    let messages = json!([{"role": "user", "content": "mask me"}]);
    let server = routing_server(SglangVersion::V0_5_23, false);
    let refused = |body: Value| {
        let server = server.clone();
        async move {
            let reply = server
                .post("/v1/chat/completions", serde_json::to_vec(&body).unwrap())
                .await;
            assert_eq!(reply.status, 400, "{body}");
            reply.json()["message"]
                .as_str()
                .expect("a message")
                .to_owned()
        }
    };
    assert_eq!(
        refused(json!({"messages": messages, "return_sampling_mask": true})).await,
        "return_sampling_mask requires return_meta_info=true."
    );
    assert_eq!(
        refused(json!({"messages": messages, "return_meta_info": true, "stream": true})).await,
        "return_meta_info is not supported with streaming. Please set stream=false when using \
         return_meta_info=true."
    );
    // The keys 0.5.23 and 0.5.15 wrote for `{"messages", "max_tokens": 3, "return_meta_info": true}`.
    let recorded = [
        (
            SglangVersion::V0_5_15,
            &[
                "id",
                "finish_reason",
                "prompt_tokens",
                "weight_version",
                "num_retractions",
                "reasoning_tokens",
                "completion_tokens",
                "cached_tokens",
                "cached_tokens_details",
                "dp_rank",
                "e2e_latency",
                "response_sent_to_client_ts",
            ][..],
        ),
        (
            SglangVersion::V0_5_23,
            &[
                "id",
                "finish_reason",
                "prompt_tokens",
                "weight_version",
                "num_retractions",
                "reasoning_tokens",
                "completion_tokens",
                "cached_tokens",
                "weight_versions",
                "cached_tokens_details",
                "dp_rank",
                "e2e_latency",
                "response_sent_to_client_ts",
            ][..],
        ),
    ];
    for (version, keys) in recorded {
        let server = routing_server(version, false);
        let body = json!({"messages": messages, "max_tokens": 3, "ignore_eos": true, "return_meta_info": true});
        let answer = openai_ok(&server, "/v1/chat/completions", &body)
            .await
            .json();
        let choice = &answer["choices"][0];
        assert_eq!(
            crate::common::keys(choice).last(),
            Some(&"meta_info"),
            "{version}"
        );
        let meta = &choice["meta_info"];
        assert_eq!(crate::common::keys(meta), keys, "{version}");
        assert_eq!(
            meta["completion_tokens"], answer["usage"]["completion_tokens"],
            "{version}"
        );
        assert_eq!(meta["id"], answer["id"], "{version}");
    }
    // With logprobs and masks: the native lists, the same logprobs as the choice's, and one mask per token.
    let body = json!({"messages": messages, "max_tokens": 3, "ignore_eos": true, "logprobs": true,
                      "top_k": 20, "return_meta_info": true, "return_sampling_mask": true});
    let answer = openai_ok(&server, "/v1/chat/completions", &body)
        .await
        .json();
    let meta = &answer["choices"][0]["meta_info"];
    let native: Vec<f64> = meta["output_token_logprobs"]
        .as_array()
        .expect("the native logprobs")
        .iter()
        .map(|entry| entry[0].as_f64().unwrap())
        .collect();
    let chat: Vec<f64> = answer["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["logprob"].as_f64().unwrap())
        .collect();
    assert_eq!((native.len(), &native), (3, &chat));
    assert_eq!(
        meta["output_token_sampling_mask"].as_array().map(Vec::len),
        Some(3),
        "{meta}"
    );
    let old = routing_server(SglangVersion::V0_5_3, false);
    let plain = openai_ok(
        &old,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 2, "return_sampling_mask": true, "return_meta_info": true}),
    )
    .await
    .json();
    assert!(plain["choices"][0].get("meta_info").is_none());
}

fn slime_server(patched: bool) -> InProcess {
    InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        slime_patches: patched,
        ..ServerConfig::default()
    })
}

/// slime's `_encode_top_p_token_ids` decoded: the kept ids of each output token, cut by the offsets.
fn top_p_rows(meta: &Value) -> Vec<Vec<i32>> {
    let int32 = |key: &str| -> Vec<i32> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(meta[key].as_str().expect("a base64 string"))
            .expect("standard base64");
        bytes
            .chunks(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let (flat, offsets) = (int32("top_p_token_ids"), int32("top_p_token_offsets"));
    assert_eq!(offsets[0], 0);
    assert_eq!(*offsets.last().expect("offsets") as usize, flat.len());
    offsets
        .windows(2)
        .map(|w| flat[w[0] as usize..w[1] as usize].to_vec())
        .collect()
}

/// slime's top-p replay (`docker/patch/v0.5.15.post1/sglang-top_p.patch`, served with `--slime-patches`), at
/// T = 0.7 with `top_k` 4 and `top_p` 0.75 both active. The patched answer is checked against the unpatched one,
/// whose top logprobs (under the sampling temperature) give the sorted probabilities: each row is the prefix that
/// `_top_p_keep_mask_sorted` keeps (rank below `top_k`, probability before it at most `top_p`), and every logprob
/// the patch reports (`renorm_logprob_over_top_p`) is the distribution renormalised over that row: the chosen
/// token's, the top list's (`null`, orjson's `-inf`, past the row) and the token-id list's. The tokens are the
/// same: the rows change what is reported, not what is sampled.
#[tokio::test]
async fn slimes_top_p_replay_reports_the_kept_prefix_and_renormalises_every_logprob() {
    let (top_k, top_p) = (4, 0.75);
    let body = |patched: bool| {
        let mut params = json!({"max_new_tokens": 12, "temperature": 0.7, "top_k": top_k, "top_p": top_p,
                                "ignore_eos": true, "sampling_seed": 8});
        if patched {
            params["custom_params"] = json!({"return_top_p_token_ids": true});
        }
        json!({"input_ids": [5, 6, 7], "return_logprob": true, "top_logprobs_num": 6,
               "token_ids_logprob": [44], "sampling_params": params})
    };
    let server = slime_server(true);
    let patched = generate_ok(&server, &body(true)).await;
    let plain = generate_ok(&server, &body(false)).await;
    assert_eq!(patched["output_ids"], plain["output_ids"]);
    let (meta, raw) = (&patched["meta_info"], &plain["meta_info"]);
    let rows = top_p_rows(meta);
    let output = ids(&plain["output_ids"]);
    assert_eq!(rows.len(), output.len());
    let mut sizes = std::collections::BTreeSet::new();
    for (j, &token) in output.iter().enumerate() {
        let top: Vec<(i32, f64)> = raw["output_top_logprobs"][j]
            .as_array()
            .expect("a top list")
            .iter()
            .map(|t| {
                (
                    t[1].as_i64().unwrap_or(-1) as i32,
                    t[0].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect();
        let mut before = 0.0;
        let mut kept = Vec::new();
        for &(id, lp) in &top {
            if kept.len() == top_k || before > top_p {
                break;
            }
            kept.push((id, lp));
            before += lp.exp();
        }
        let row: Vec<i32> = kept.iter().map(|k| k.0).collect();
        assert_eq!(rows[j], row, "position {j}");
        sizes.insert(row.len());
        let norm = logsumexp(&kept.iter().map(|k| k.1).collect::<Vec<f64>>());
        let renormalised = |id: i32| kept.iter().find(|k| k.0 == id).map(|k| k.1 - norm);
        let close = |got: &Value, want: Option<f64>, what: &str| match want {
            Some(want) => assert!(
                (got.as_f64().unwrap_or(f64::NAN) - want).abs() < 1e-5,
                "position {j} {what}: {got} vs {want}"
            ),
            None => assert!(got.is_null(), "position {j} {what}: {got} is not -inf"),
        };
        close(
            &meta["output_token_logprobs"][j][0],
            renormalised(token as i32),
            "chosen",
        );
        for (n, &(id, _)) in top.iter().enumerate() {
            let entry = &meta["output_top_logprobs"][j][n];
            assert_eq!(entry[1], id, "position {j}: the top list keeps its order");
            close(&entry[0], renormalised(id), "top");
        }
        close(
            &meta["output_token_ids_logprobs"][j][0][0],
            renormalised(44),
            "token id 44",
        );
    }
    assert!(sizes.len() > 1, "rows of one size only: {sizes:?}");
    // The input logprobs come from the prefill, which the patch leaves alone.
    assert_eq!(meta["input_token_logprobs"], raw["input_token_logprobs"]);
}

/// Where slime's patch writes the rows, and when: after the token-id logprobs, at the end of
/// `add_logprob_to_meta_info`; on the finishing frame of a stream only (`meta_info.get("finish_reason") is not
/// None`), whole; for a request with logprobs, a truthy `custom_params.return_top_p_token_ids` and a filter
/// (`_top_p_filter_rows`), on the patched server. A greedy request keeps the model's logprobs (the all-greedy
/// path never renormalises) and its rows are its tokens. `drop-channel;channel=top_p` takes both keys away.
#[tokio::test]
async fn top_p_rows_come_where_and_when_the_patch_writes_them() {
    let ask = |params: Value, logprob: bool| {
        json!({"input_ids": [5, 6, 7], "return_logprob": logprob, "top_logprobs_num": 2,
               "sampling_params": params})
    };
    // Seeded: the stream below and the fault are the same sample as this answer (MODEL.md 8.3).
    let asked = json!({"max_new_tokens": 5, "top_p": 0.9, "ignore_eos": true, "sampling_seed": 4,
                       "custom_params": {"return_top_p_token_ids": true}});
    let patched = slime_server(true);
    let answer = generate_ok(&patched, &ask(asked.clone(), true)).await;
    let keys: Vec<&str> = answer["meta_info"]
        .as_object()
        .expect("meta_info")
        .keys()
        .map(String::as_str)
        .collect();
    let at = keys
        .iter()
        .position(|&k| k == "top_p_token_ids")
        .expect("rows");
    assert_eq!(
        keys[at - 1..at + 3],
        [
            "output_top_logprobs",
            "top_p_token_ids",
            "top_p_token_offsets",
            "reasoning_tokens"
        ]
    );
    assert_eq!(top_p_rows(&answer["meta_info"]).len(), 5);

    // No rows: an unpatched server, no logprobs, no filter, a falsy or misplaced flag. Rows: a truthy flag.
    let mut cases = vec![
        (slime_server(false), ask(asked.clone(), true), false),
        (slime_server(true), ask(asked.clone(), false), false),
    ];
    for (custom, top_p, rows) in [
        (json!({"return_top_p_token_ids": true}), 1.0, false),
        (json!({"return_top_p_token_ids": false}), 0.9, false),
        (json!({"return_top_p_token_ids": 0}), 0.9, false),
        (json!({"return_top_p_token_ids": ""}), 0.9, false),
        (json!([["return_top_p_token_ids", true]]), 0.9, false),
        (json!({"return_top_p_token_ids": 1}), 0.9, true),
        (json!({"return_top_p_token_ids": "no"}), 0.9, true),
    ] {
        let params = json!({"max_new_tokens": 5, "top_p": top_p, "custom_params": custom});
        cases.push((slime_server(true), ask(params, true), rows));
    }
    for (server, body, rows) in cases {
        let meta = &generate_ok(&server, &body).await["meta_info"];
        assert_eq!(meta.get("top_p_token_ids").is_some(), rows, "{body}");
        assert_eq!(meta.get("top_p_token_offsets").is_some(), rows, "{body}");
    }

    // Greedy: each row is its token, and the logprobs are the model's.
    let greedy = |custom: bool| {
        let mut params = json!({"max_new_tokens": 6, "temperature": 0, "ignore_eos": true});
        if custom {
            params["custom_params"] = json!({"return_top_p_token_ids": true});
        }
        ask(params, true)
    };
    let with = generate_ok(&patched, &greedy(true)).await;
    let without = generate_ok(&patched, &greedy(false)).await;
    let rows = top_p_rows(&with["meta_info"]);
    let want: Vec<Vec<i32>> = ids(&with["output_ids"])
        .iter()
        .map(|&id| vec![id as i32])
        .collect();
    assert_eq!(rows, want);
    assert_eq!(
        with["meta_info"]["output_token_logprobs"],
        without["meta_info"]["output_token_logprobs"]
    );

    // A stream: the finishing frame alone carries the rows, all of them.
    let mut streamed = ask(asked.clone(), true);
    streamed["stream"] = json!(true);
    let frames = sse_json(&patched.generate(&streamed).await.body);
    let (last, earlier) = frames.split_last().expect("frames");
    assert!(
        earlier
            .iter()
            .all(|f| f["meta_info"].get("top_p_token_ids").is_none())
    );
    assert_eq!(
        top_p_rows(&last["meta_info"]),
        top_p_rows(&answer["meta_info"])
    );

    // The fault takes both keys.
    let dropped = patched
        .request(
            axum::http::Method::POST,
            "/generate",
            serde_json::to_vec(&ask(asked, true)).expect("JSON"),
            &[
                ("content-type", "application/json"),
                ("x-mock-fault", "drop-channel;channel=top_p"),
            ],
        )
        .await
        .json();
    let meta = &dropped["meta_info"];
    assert!(meta.get("top_p_token_ids").is_none() && meta.get("top_p_token_offsets").is_none());
    assert!(meta.get("output_token_logprobs").is_some());
}

/// A hot nucleus keeps most of the vocabulary at every token (T = 3 with `top_p` 0.999: the tail holds most of the
/// mass); past `MAX_TOP_P_IDS` kept ids the answer ends as a 400 abort that says why, without the rows, rather
/// than growing without bound.
#[tokio::test]
async fn top_p_rows_past_the_bound_end_the_answer() {
    let body = json!({"input_ids": [5, 6, 7], "return_logprob": true,
                      "sampling_params": {"max_new_tokens": 1000, "temperature": 3.0, "top_p": 0.999,
                                          "ignore_eos": true,
                                          "custom_params": {"return_top_p_token_ids": true}}});
    let answer = generate_ok(&slime_server(true), &body).await;
    let meta = &answer["meta_info"];
    assert_eq!(meta["finish_reason"]["type"], "abort");
    assert_eq!(meta["finish_reason"]["status_code"], 400);
    let message = meta["finish_reason"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(&mock_server::engine::MAX_TOP_P_IDS.to_string()),
        "{message}"
    );
    let tokens = meta["completion_tokens"].as_u64().unwrap_or(0);
    assert!((1..1000).contains(&tokens), "{tokens}");
    assert!(meta.get("top_p_token_ids").is_none());
}

/// `return_prompt_token_ids` (0.5.23, `TM: _handle_batch_output`): every object of an item carries, after
/// `meta_info`, the ids its prompt ran as (the tokenized text, or the `input_ids` given), each item of a batch
/// its own, every sample of `n > 1` its prompt's, every chunk of a stream, before a streamed batch's `index`. The
/// running 0.5.23 answered the same bodies with the same keys in the same order and the same ids (under Qwen's
/// tokenizer, 2026-12-07). A release without the field (0.5.15) reads the body without it.
#[tokio::test]
async fn prompt_token_ids_are_the_ids_each_prompt_ran_as() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let encode = |text: &str| json!(server.oracle.model().tokenizer().encode(text));
    let sp = json!({"max_new_tokens": 3, "ignore_eos": true});
    let out = generate_ok(
        &server,
        &json!({"text": "Hello world", "sampling_params": sp, "return_prompt_token_ids": true}),
    )
    .await;
    assert_eq!(
        keys(&out),
        ["text", "output_ids", "meta_info", "prompt_token_ids"]
    );
    assert_eq!(out["prompt_token_ids"], encode("Hello world"));
    assert_eq!(
        out["meta_info"]["prompt_tokens"],
        out["prompt_token_ids"].as_array().unwrap().len()
    );
    let given = json!([785, 6722, 315, 9625]);
    let out = generate_ok(
        &server,
        &json!({"input_ids": given, "sampling_params": sp, "return_prompt_token_ids": true}),
    )
    .await;
    assert_eq!(out["prompt_token_ids"], given);
    let batch = generate_ok(
        &server,
        &json!({"text": ["Hi", "Hello there"], "sampling_params": sp, "return_prompt_token_ids": true}),
    )
    .await;
    let held: Vec<&Value> = batch
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["prompt_token_ids"])
        .collect();
    assert_eq!(held, [&encode("Hi"), &encode("Hello there")]);
    let samples = generate_ok(
        &server,
        &json!({"text": "Hi", "sampling_params": {"max_new_tokens": 3, "n": 2}, "return_prompt_token_ids": true}),
    )
    .await;
    assert!(
        samples
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["prompt_token_ids"] == encode("Hi"))
    );
    let reply = server
        .generate(&json!({"text": ["Hi", "Yo"], "sampling_params": sp, "return_prompt_token_ids": true, "stream": true}))
        .await;
    let chunks = sse_json(&reply.body);
    assert_eq!(chunks.len(), 6, "three chunks of each prompt");
    for chunk in &chunks {
        assert_eq!(
            keys(chunk),
            [
                "text",
                "output_ids",
                "meta_info",
                "prompt_token_ids",
                "index"
            ]
        );
        let prompt = ["Hi", "Yo"][chunk["index"].as_u64().unwrap() as usize];
        assert_eq!(chunk["prompt_token_ids"], encode(prompt));
    }
    let without = generate_ok(
        &server,
        &json!({"text": "Hi", "sampling_params": sp, "return_prompt_token_ids": false}),
    )
    .await;
    assert_eq!(keys(&without), ["text", "output_ids", "meta_info"]);
    let older = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        ..ServerConfig::default()
    });
    let out = generate_ok(
        &older,
        &json!({"text": "Hi", "sampling_params": sp, "return_prompt_token_ids": true}),
    )
    .await;
    assert_eq!(keys(&out), ["text", "output_ids", "meta_info"]);
}
