//! `/v1/completions` and `/v1/chat/completions`: the logprobs are those of `/generate` for the same tokens
//! (native bodies written here by hand, the ChatML prompt included, and answered by the oracle), streams
//! reassemble to the non-stream answer, errors have the OpenAI layer's shapes, and the fault catalogue and
//! the control plane reach these routes.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::Method;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Reply, advance_ms, slow, sse_json};

async fn post(server: &InProcess, path: &str, body: &Value) -> Reply {
    server
        .post(path, serde_json::to_vec(body).expect("serialisable"))
        .await
}

async fn post_with_fault(server: &InProcess, path: &str, body: &Value, fault: &str) -> Reply {
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-fault", fault),
    ];
    server
        .request(
            Method::POST,
            path,
            serde_json::to_vec(body).unwrap(),
            &headers,
        )
        .await
}

/// The `message` of an error answer.
fn error_message(reply: &Reply) -> String {
    reply.json()["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {}", reply.text()))
        .to_owned()
}

/// A JSON number as the f32 it was written from.
fn f32_of(v: &Value) -> f32 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as f32
}

fn texts(server: &InProcess, ids: &[u32]) -> Vec<String> {
    let tokenizer = server.oracle.model().tokenizer();
    ids.iter()
        .map(|&id| tokenizer.token_text(id).into_owned())
        .collect()
}

#[tokio::test]
async fn completion_logprobs_with_echo_are_the_generate_logprobs_of_the_same_tokens() {
    let server = InProcess::new(ServerConfig::default());
    let prompt = "The capital of France is";
    let reply = post(
        &server,
        "/v1/completions",
        &json!({"model": "toy", "prompt": prompt, "max_tokens": 8, "temperature": 0.7, "seed": 5,
                "logprobs": 3, "echo": true}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    let native = json!({"text": prompt, "return_logprob": true, "top_logprobs_num": 3, "logprob_start_len": 0,
                        "return_text_in_logprobs": true,
                        "sampling_params": {"max_new_tokens": 8, "temperature": 0.7, "sampling_seed": 5}});
    let expected = server
        .oracle
        .expect(&serde_json::to_vec(&native).unwrap())
        .unwrap();
    let want = &expected.items[0];
    let meta = &expected.body["meta_info"];

    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["model"], "toy");
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], format!("{prompt}{}", want.text));
    assert_eq!(choice["finish_reason"], "length");
    let lp = &choice["logprobs"];
    let n_prompt = want.prompt_tokens;
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.len(), n_prompt + want.output_ids.len());
    assert_eq!(tokens[n_prompt..], texts(&server, &want.output_ids));
    let token_logprobs = lp["token_logprobs"].as_array().unwrap();
    let output: Vec<f32> = token_logprobs[n_prompt..].iter().map(f32_of).collect();
    assert_eq!(output, want.output_logprobs, "output logprobs, bit for bit");
    // The prompt's entries are `/generate`'s input logprobs: the first has none.
    let input = meta["input_token_logprobs"].as_array().unwrap();
    assert_eq!(input.len(), n_prompt);
    for (i, entry) in input.iter().enumerate() {
        assert_eq!(token_logprobs[i], entry[0], "input position {i}");
        assert_eq!(tokens[i], entry[2], "input token text {i}");
    }
    assert!(token_logprobs[0].is_null());
    assert_eq!(lp["text_offset"], json!(vec![-1; tokens.len()]));
    // Top lists: the prompt's then the output's, each a {text: logprob} dict of three.
    let tops = lp["top_logprobs"].as_array().unwrap();
    assert_eq!(tops.len(), tokens.len());
    let native_tops = meta["output_top_logprobs"].as_array().unwrap();
    for (i, top) in native_tops.iter().enumerate() {
        let dict = tops[n_prompt + i].as_object().unwrap();
        assert_eq!(dict.len(), 3);
        for entry in top.as_array().unwrap() {
            assert_eq!(dict[entry[2].as_str().unwrap()], entry[0]);
        }
    }
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": n_prompt, "total_tokens": n_prompt + 8, "completion_tokens": 8,
               "prompt_tokens_details": null, "reasoning_tokens": 0, "completion_tokens_details": null})
    );
    // `build_endpoint_weight_version_metadata` (0.5.23): the native item's version and its spans.
    assert_eq!(
        body["metadata"],
        json!({"weight_version": "default",
               "weight_versions": [{"version": "default", "start": 0, "end": 8}]})
    );
}

#[tokio::test]
async fn chat_logprobs_are_the_generate_logprobs_of_the_chatml_prompt() {
    let server = InProcess::new(ServerConfig::default());
    let reply = post(
        &server,
        "/v1/chat/completions",
        &json!({"model": "toy", "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "What is 2+2?"}],
                "max_completion_tokens": 40, "logprobs": true, "top_logprobs": 2, "seed": 11}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    // The toy model's template, written out: ChatML with the generation prompt.
    let chatml = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n\
                  <|im_start|>assistant\n";
    let native = json!({"text": chatml, "return_logprob": true, "top_logprobs_num": 2,
                        "return_text_in_logprobs": true,
                        "sampling_params": {"max_new_tokens": 40, "sampling_seed": 11}});
    let expected = server
        .oracle
        .expect(&serde_json::to_vec(&native).unwrap())
        .unwrap();
    let want = &expected.items[0];
    assert_eq!(body["object"], "chat.completion");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], want.text.as_str());
    let finish = want.finish_reason.as_ref().unwrap();
    let native_finish = &expected.body["meta_info"]["finish_reason"];
    assert_eq!(choice["finish_reason"], native_finish["type"], "{finish:?}");
    assert_eq!(
        choice["matched_stop"],
        native_finish.get("matched").cloned().unwrap_or(Value::Null)
    );
    let content = choice["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), want.output_ids.len());
    let names = texts(&server, &want.output_ids);
    let native_tops = expected.body["meta_info"]["output_top_logprobs"]
        .as_array()
        .unwrap();
    for (i, entry) in content.iter().enumerate() {
        assert_eq!(
            f32_of(&entry["logprob"]),
            want.output_logprobs[i],
            "position {i}"
        );
        assert_eq!(entry["token"], names[i].as_str());
        assert_eq!(entry["bytes"], json!(names[i].as_bytes()));
        let top = entry["top_logprobs"].as_array().unwrap();
        let native_top = native_tops[i].as_array().unwrap();
        assert_eq!(top.len(), native_top.len());
        for t in top {
            let found = native_top
                .iter()
                .find(|n| n[2] == t["token"])
                .expect("a native top entry");
            assert_eq!(t["logprob"], found[0]);
        }
    }
    assert_eq!(body["usage"]["prompt_tokens"], want.prompt_tokens);
    assert_eq!(body["usage"]["completion_tokens"], want.output_ids.len());
}

/// Each top list of an OpenAI answer is the engine's row in its order, most likely first, as SGLang builds
/// it: `to_openai_style_logprobs` makes the `{text: logprob}` dict by inserting the row's triples in order,
/// and chat's `_process_logprobs_tokens` lists that dict's items. (The answers sorted them by token text, so
/// `top_logprobs[0]` was not the most likely token.)
#[tokio::test]
async fn top_logprobs_are_in_the_engines_order_most_likely_first() {
    for version in [SglangVersion::V0_5_23, SglangVersion::V0_5_3] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        // The issue's request: greedy, so the chosen token is the most likely one.
        let chat = json!({"model": "toy", "messages": [{"role": "user", "content": "Hi"}], "logprobs": true,
                          "top_logprobs": 5, "max_tokens": 1, "temperature": 0});
        for stream in [false, true] {
            let mut body = chat.clone();
            body["stream"] = json!(stream);
            let reply = post(&server, "/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            let content: Vec<Value> = if stream {
                sse_json(&reply.body)
                    .iter()
                    .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
                    .flatten()
                    .collect()
            } else {
                reply.json()["choices"][0]["logprobs"]["content"]
                    .as_array()
                    .unwrap()
                    .clone()
            };
            assert_eq!(content.len(), 1, "{version:?} stream={stream}");
            let top = content[0]["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), 5);
            assert_eq!(
                top[0]["token"], content[0]["token"],
                "{version:?} stream={stream}: {top:?}"
            );
            assert_eq!(top[0]["logprob"], content[0]["logprob"]);
            let logprobs: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
            assert!(
                logprobs.windows(2).all(|w| w[0] >= w[1]),
                "{version:?} stream={stream}: {logprobs:?}"
            );
        }

        let completion = json!({"model": "toy", "prompt": "Once upon", "max_tokens": 4, "logprobs": 3,
                                "seed": 2});
        let reply = post(&server, "/v1/completions", &completion).await;
        let body = reply.json();
        let lp = &body["choices"][0]["logprobs"];
        for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
            let values: Vec<f64> = top
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(values.len(), 3);
            assert!(
                values.windows(2).all(|w| w[0] >= w[1]),
                "{version:?} position {i}: {top}"
            );
        }
        // The raw body lists the keys in that order too (a reader's dict keeps them).
        let text = reply.text();
        let first = lp["top_logprobs"][0]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        let dict_start = text
            .find("\"top_logprobs\":[{")
            .expect("a top list in the body");
        let key = serde_json::to_string(&first).unwrap();
        assert_eq!(
            text[dict_start + "\"top_logprobs\":[{".len()..].find(&key),
            Some(0),
            "{text}"
        );
    }
}

/// Per-choice text and logprob lists of a non-stream answer.
fn choices_of(api: &str, body: &Value) -> Vec<(String, Vec<Value>)> {
    body["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match api {
            "chat" => (
                c["message"]["content"].as_str().unwrap().to_owned(),
                c["logprobs"]["content"].as_array().unwrap().clone(),
            ),
            _ => (
                c["text"].as_str().unwrap().to_owned(),
                c["logprobs"]["token_logprobs"].as_array().unwrap().clone(),
            ),
        })
        .collect()
}

/// The same per-choice view, reassembled from stream chunks.
fn reassemble(api: &str, chunks: &[Value], n: usize) -> Vec<(String, Vec<Value>)> {
    let mut out = vec![(String::new(), Vec::new()); n];
    for chunk in chunks {
        for c in chunk["choices"].as_array().unwrap() {
            let slot = &mut out[c["index"].as_u64().unwrap() as usize];
            let (text, logprobs) = match api {
                "chat" => (&c["delta"]["content"], &c["logprobs"]["content"]),
                _ => (&c["text"], &c["logprobs"]["token_logprobs"]),
            };
            slot.0.push_str(text.as_str().unwrap_or(""));
            slot.1
                .extend(logprobs.as_array().into_iter().flatten().cloned());
        }
    }
    out
}

#[tokio::test]
async fn streams_reassemble_to_the_non_stream_answer_in_every_streaming_mode() {
    let modes = [
        ServerConfig::default(),
        ServerConfig {
            incremental_streaming_output: true,
            ..ServerConfig::default()
        },
        ServerConfig {
            sglang_version: SglangVersion::V0_5_3,
            ..ServerConfig::default()
        },
        ServerConfig {
            stream_interval: 3,
            ..ServerConfig::default()
        },
    ];
    for config in modes {
        check_streams(&InProcess::new(config)).await;
    }
}

/// Both routes, `n = 2`, streamed with `include_usage` and not: the same choices, logprobs and usage.
async fn check_streams(server: &InProcess) {
    let cases = [
        (
            "completions",
            "/v1/completions",
            json!({"prompt": "Once upon a time", "max_tokens": 12, "n": 2, "logprobs": 1, "seed": 3}),
        ),
        (
            "chat",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 12, "n": 2,
                   "logprobs": true, "top_logprobs": 1, "seed": 3}),
        ),
    ];
    for (api, path, request) in cases {
        let whole = post(server, path, &request).await.json();
        // Prompt tokens count once per prompt, not per choice; completion tokens add up over the choices.
        let tokens: Vec<u64> = whole["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| match api {
                "chat" => c["logprobs"]["content"].as_array().unwrap().len() as u64,
                _ => c["logprobs"]["tokens"].as_array().unwrap().len() as u64,
            })
            .collect();
        let prompt = match api {
            "chat" => "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n",
            _ => "Once upon a time",
        };
        let prompt_tokens = server.oracle.model().tokenizer().encode(prompt).len() as u64;
        let completion: u64 = tokens.iter().sum();
        // The counts; which keys each release writes, in which order, is
        // `usage_is_each_releases_usage_info_in_its_order`'s.
        for (key, value) in [
            ("prompt_tokens", prompt_tokens),
            ("total_tokens", prompt_tokens + completion),
            ("completion_tokens", completion),
        ] {
            assert_eq!(whole["usage"][key], value, "{api}: {key}");
        }
        let mut streamed_request = request.clone();
        streamed_request["stream"] = json!(true);
        streamed_request["stream_options"] = json!({"include_usage": true});
        // The stream is the same samples as the answer above (0.5.3 reads no `seed`, so its requests draw anew).
        server.reset().await;
        let reply = post(server, path, &streamed_request).await;
        assert_eq!(reply.status, 200);
        assert!(reply.content_type().starts_with("text/event-stream"));
        let chunks = sse_json(&reply.body);
        let (usage_chunk, chunks) = chunks.split_last().unwrap();
        assert_eq!(usage_chunk["choices"], json!([]), "{api}");
        // The completions route writes its last chunk with `exclude_none=True` (`serving_completions.py`):
        // the whole answer's usage without its `null` details.
        let mut usage = whole["usage"].clone();
        if api == "completions" {
            usage
                .as_object_mut()
                .unwrap()
                .retain(|_, value| !value.is_null());
        }
        assert_eq!(usage_chunk["usage"], usage, "{api}: usage");
        assert_eq!(reassemble(api, chunks, 2), choices_of(api, &whole), "{api}");
        for index in 0..2u64 {
            let mine: Vec<&Value> = chunks
                .iter()
                .flat_map(|c| c["choices"].as_array().unwrap())
                .filter(|c| c["index"] == index)
                .collect();
            let last = mine.last().unwrap();
            assert_eq!(
                last["finish_reason"],
                whole["choices"][index as usize]["finish_reason"]
            );
            assert!(
                mine[..mine.len() - 1]
                    .iter()
                    .all(|c| c["finish_reason"].is_null())
            );
            if api == "chat" {
                // Each release's full delta shape is `chat_stream_deltas_are_each_releases_delta_shape`'s.
                assert_eq!(mine[0]["delta"]["role"], "assistant");
                assert_eq!(mine[0]["delta"]["content"], "");
            }
        }
        let object = if api == "chat" {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        assert!(chunks.iter().all(|c| c["object"] == object));
        // Each chunk carries its sample's id (`content["meta_info"]["id"]` in SGLang's stream loop), and the
        // chunks written after the loop (chat's finish chunks, the usage chunk) the id of the loop's last one.
        let after_loop = match api {
            "chat" => chunks
                .iter()
                .position(|c| !c["choices"][0]["finish_reason"].is_null())
                .unwrap(),
            _ => chunks.len(),
        };
        let (in_loop, after) = chunks.split_at(after_loop);
        let ids: Vec<BTreeSet<&str>> = (0..2u64)
            .map(|index| {
                in_loop
                    .iter()
                    .filter(|c| c["choices"][0]["index"] == index)
                    .map(|c| c["id"].as_str().unwrap())
                    .collect()
            })
            .collect();
        assert!(ids.iter().all(|set| set.len() == 1), "{api}: {ids:?}");
        assert_ne!(ids[0], ids[1], "{api}: both choices' chunks have one id");
        let last = &in_loop.last().unwrap()["id"];
        assert!(
            after.iter().chain([usage_chunk]).all(|c| &c["id"] == last),
            "{api}: the chunks after the loop carry another id than its last chunk's"
        );
    }
}

#[tokio::test]
async fn token_id_prompts_and_stop_strings_follow_generate() {
    let server = InProcess::new(ServerConfig::default());
    let ids = server
        .oracle
        .model()
        .tokenizer()
        .encode("Counting: one two");
    // Greedy until a stop string that the greedy answer contains.
    let native =
        json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 30, "temperature": 0}});
    let free = server
        .oracle
        .expect(&serde_json::to_vec(&native).unwrap())
        .unwrap();
    let text = &free.items[0].text;
    let stop: String = text.chars().skip(3).take(2).collect();
    let reply = post(
        &server,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 30, "temperature": 0, "stop": [stop], "echo": true}),
    )
    .await;
    let body = reply.json();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["matched_stop"], stop.as_str());
    let cut = text.find(&stop).unwrap();
    assert_eq!(choice["text"], format!("Counting: one two{}", &text[..cut]));
    assert!(choice["logprobs"].is_null());
}

#[tokio::test]
async fn errors_have_the_openai_layers_shapes() {
    let server = InProcess::new(ServerConfig::default());
    let bad_request = |reply: &Reply, kind: &str, message: &str| {
        assert_eq!(reply.status, 400, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "error");
        assert_eq!(body["type"], kind);
        assert_eq!(body["code"], 400);
        assert!(body["param"].is_null());
        let text = body["message"].as_str().unwrap();
        assert!(
            text.contains(message),
            "{text:?} should mention {message:?}"
        );
    };
    for content_type in [None, Some("text/plain")] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|c| ("content-type", c))
            .into_iter()
            .collect();
        let reply = server
            .request(
                Method::POST,
                "/v1/chat/completions",
                r#"{"messages":[]}"#,
                &headers,
            )
            .await;
        // The running 0.5.23's answer to a chat body sent as `text/plain`: the `RequestValidationError` of
        // `validate_json_request`, written as the handler writes any, without an endpoint frame.
        let error = "{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only \
                     'application/json' is allowed\", 'type': 'value_error'}";
        assert_eq!(
            reply.json()["message"],
            format!("1 validation error:\n  {error} [{error}]"),
        );
        bad_request(
            &reply,
            "Bad Request",
            "Unsupported Media Type: Only 'application/json' is allowed",
        );
    }
    let reply = server.post("/v1/completions", "{not json").await;
    bad_request(&reply, "Bad Request", "JSON decode error");
    let reply = post(&server, "/v1/completions", &json!({"model": "m"})).await;
    bad_request(&reply, "Bad Request", "Field required");
    let reply = post(&server, "/v1/completions", &json!({"prompt": ""})).await;
    bad_request(&reply, "BadRequestError", "Prompt cannot be empty");
    let reply = post(
        &server,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": "many"}),
    )
    .await;
    bad_request(&reply, "Bad Request", "valid integer");
    // The native planner's ValueError, in the OpenAI shape, streamed or not.
    for stream in [false, true] {
        let request = json!({"prompt": "x", "temperature": -1.0, "stream": stream});
        let reply = post(&server, "/v1/completions", &request).await;
        bad_request(&reply, "BadRequestError", "temperature");
    }
    let reply = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "robot", "content": "x"}]}),
    )
    .await;
    bad_request(&reply, "Bad Request", "role");
}

/// A body the release's request model refuses (the OpenAI routes', `/tokenize`'s, `/detokenize`'s) gets every
/// error of the model, in its field order, with each input: the lines below are what the running 0.5.23 answered
/// these bodies with (`scripts/real_sglang.py`, the
/// tiny Qwen3, 2026-12-07). Among them the bodies whose values the native planner cannot read (`"stop": 0`), which
/// the mock answered with a 500 when it left the types to the planner.
#[tokio::test]
async fn a_body_the_request_model_refuses_gets_the_models_errors() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let hi = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        // A constrained number in a union (`confloat(ge=0.0, le=0.99)`) is labelled `constrained-float`.
        (
            "/v1/tokenize",
            json!({"model": "x", "messages": hi, "reasoning_effort": "extreme"}),
            vec![
                "{'type': 'literal_error', 'loc': ('body', 'reasoning_effort', \"literal['none','minimal','low','medium','high','xhigh','ultra','max']\"), 'msg': \"Input should be 'none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'ultra' or 'max'\", 'input': 'extreme', 'ctx': {'expected': \"'none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'ultra' or 'max'\"}}",
                "{'type': 'float_parsing', 'loc': ('body', 'reasoning_effort', 'constrained-float'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'extreme'}",
            ],
        ),
        (
            "/v1/completions",
            json!({"model": "x", "prompt": "hi", "stop": 0, "max_tokens": 2}),
            vec![
                "{'type': 'list_type', 'loc': ('body', 'stop', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 0}",
                "{'type': 'string_type', 'loc': ('body', 'stop', 'str'), 'msg': 'Input should be a valid string', 'input': 0}",
            ],
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "temperature": "hot", "top_k": 1.5, "max_tokens": 2}),
            vec![
                "{'type': 'float_parsing', 'loc': ('body', 'temperature'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'hot'}",
                "{'type': 'int_from_float', 'loc': ('body', 'top_k'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 1.5}",
            ],
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "stop_token_ids": "x", "ignore_eos": "maybe"}),
            vec![
                "{'type': 'list_type', 'loc': ('body', 'stop_token_ids'), 'msg': 'Input should be a valid list', 'input': 'x'}",
                "{'type': 'bool_parsing', 'loc': ('body', 'ignore_eos'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'maybe'}",
            ],
        ),
        (
            "/v1/chat/completions",
            json!({"messages": hi, "stop": [1], "max_tokens": 2}),
            vec![
                "{'type': 'string_type', 'loc': ('body', 'stop', 'list[str]', 0), 'msg': 'Input should be a valid string', 'input': 1}",
                "{'type': 'string_type', 'loc': ('body', 'stop', 'str'), 'msg': 'Input should be a valid string', 'input': [1]}",
            ],
        ),
        (
            "/v1/chat/completions",
            json!({"messages": hi, "tools": [5], "max_tokens": 2}),
            vec![
                "{'type': 'model_attributes_type', 'loc': ('body', 'tools', 0), 'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': 5}",
            ],
        ),
        (
            "/tokenize",
            json!({"prompt": ["a", 1], "add_special_tokens": "x"}),
            vec![
                "{'type': 'string_type', 'loc': ('body', 'prompt', 'list[str]', 1), 'msg': 'Input should be a valid string', 'input': 1}",
                "{'type': 'string_type', 'loc': ('body', 'prompt', 'str'), 'msg': 'Input should be a valid string', 'input': ['a', 1]}",
                "{'type': 'bool_parsing', 'loc': ('body', 'add_special_tokens'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'x'}",
            ],
        ),
        (
            "/v1/tokenize",
            json!({}),
            vec![
                "{'type': 'value_error', 'loc': ('body',), 'msg': \"Value error, Exactly one of 'prompt' or 'messages' must be provided.\", 'input': {}, 'ctx': {'error': ValueError(\"Exactly one of 'prompt' or 'messages' must be provided.\")}}",
            ],
        ),
        (
            "/detokenize",
            json!({"tokens": [1, "a"]}),
            vec![
                "{'type': 'int_parsing', 'loc': ('body', 'tokens', 'list[int]', 1), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'a'}",
                "{'type': 'list_type', 'loc': ('body', 'tokens', 'list[list[int]]', 0), 'msg': 'Input should be a valid list', 'input': 1}",
                "{'type': 'list_type', 'loc': ('body', 'tokens', 'list[list[int]]', 1), 'msg': 'Input should be a valid list', 'input': 'a'}",
            ],
        ),
        (
            "/v1/chat/completions",
            json!({"max_tokens": 3}),
            vec![
                "{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required', 'input': {'max_tokens': 3, 'tool_choice': 'none'}}",
            ],
        ),
    ];
    for (path, body, errors) in cases {
        let reply = post(&server, path, &body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text());
        let count = match errors.len() {
            1 => "1 validation error:".to_owned(),
            n => format!("{n} validation errors:"),
        };
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        let want = format!("{count}\n{}\n\n", lines.join("\n"));
        let message = error_message(&reply);
        assert!(
            message.starts_with(&want),
            "{body}:\n{message}\nwant:\n{want}"
        );
    }
}

#[tokio::test]
async fn faults_reach_the_openai_routes() {
    let server = InProcess::new(ServerConfig::default());
    let completion = json!({"prompt": "faults", "max_tokens": 6, "logprobs": 0});
    let chat = json!({"messages": [{"role": "user", "content": "faults"}], "max_tokens": 6,
                      "logprobs": true});

    let reply = post_with_fault(&server, "/v1/completions", &completion, "status;code=503").await;
    assert_eq!(reply.status, 503);

    let reply = post_with_fault(
        &server,
        "/v1/chat/completions",
        &chat,
        "abort-running;after=2",
    )
    .await;
    let body = reply.json();
    assert_eq!(body["choices"][0]["finish_reason"], "abort");
    assert_eq!(body["usage"]["completion_tokens"], 2);
    assert_eq!(
        body["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let reply = post_with_fault(&server, "/v1/completions", &completion, "missing-logprobs").await;
    assert!(reply.json()["choices"][0]["logprobs"].is_null());

    let reply = post_with_fault(
        &server,
        "/v1/completions",
        &completion,
        "short-logprobs;by=2",
    )
    .await;
    let lp = &reply.json()["choices"][0]["logprobs"];
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4);

    let reply = post_with_fault(&server, "/v1/chat/completions", &chat, "null-logprob;at=1").await;
    let content = reply.json()["choices"][0]["logprobs"]["content"].clone();
    assert!(content[1]["logprob"].is_null());
    assert!(content[0]["logprob"].is_number());

    let reply = post_with_fault(&server, "/v1/completions", &completion, "nan-logprob;at=0").await;
    assert!(
        reply.text().contains(r#""token_logprobs":[NaN,"#),
        "{}",
        reply.text()
    );

    let reply = post_with_fault(
        &server,
        "/v1/chat/completions",
        &chat,
        "wrong-token-id;at=0",
    )
    .await;
    let content = reply.json()["choices"][0]["logprobs"]["content"].clone();
    assert_eq!(content[0]["token"], "<|wrong-token|>");

    let reply = post_with_fault(
        &server,
        "/v1/completions",
        &completion,
        "string-logprob;at=2",
    )
    .await;
    assert!(reply.json()["choices"][0]["logprobs"]["token_logprobs"][2].is_string());

    let reply = post_with_fault(&server, "/v1/completions", &completion, "missing-meta-info").await;
    let body = reply.json();
    assert!(body.get("usage").is_none() && body.get("metadata").is_none());
    assert_eq!(body["choices"][0]["finish_reason"], "length");

    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let reply = post_with_fault(
        &server,
        "/v1/chat/completions",
        &streamed,
        "truncate-stream;after=2",
    )
    .await;
    assert!(!reply.text().contains("[DONE]"));
    assert_eq!(reply.text().matches("data: ").count(), 2);

    let reply = post_with_fault(
        &server,
        "/v1/completions",
        &json!({"prompt": "faults", "max_tokens": 6, "stream": true}),
        "error-event;after=2;message=boom",
    )
    .await;
    let events = sse_json(&reply.body);
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[2],
        json!({"error": {"object": "error", "message": "boom", "type": "BadRequestError", "param": null,
                         "code": 400}})
    );

    let reply = post_with_fault(
        &server,
        "/v1/chat/completions",
        &streamed,
        "abort-running;after=3",
    )
    .await;
    let chunks = sse_json(&reply.body);
    let finish = chunks
        .iter()
        .rev()
        .find(|c| !c["choices"][0]["finish_reason"].is_null())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "abort");
}

#[tokio::test(start_paused = true)]
async fn abort_all_ends_an_openai_stream_with_finish_reason_abort() {
    let server = InProcess::new(slow());
    let body = json!({"messages": [{"role": "user", "content": "long"}], "max_tokens": 50, "stream": true,
                      "logprobs": true});
    let task = {
        let server = server.clone();
        tokio::spawn(async move { post(&server, "/v1/chat/completions", &body).await })
    };
    advance_ms(2500).await;
    let reply = post(&server, "/abort_request", &json!({"abort_all": true})).await;
    assert_eq!(reply.status, 200);
    let chunks = sse_json(&task.await.unwrap().body);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "abort");
    let tokens: usize = chunks
        .iter()
        .map(|c| {
            c["choices"][0]["logprobs"]["content"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .sum();
    assert!(
        (1..50).contains(&tokens),
        "{tokens} tokens before the abort"
    );
}

#[tokio::test]
async fn tokenize_gives_the_ids_generate_reads_and_detokenize_inverts_it() {
    let server = InProcess::new(ServerConfig::default());
    let text = "<|im_start|>user\nHéllo wörld<|im_end|>";
    // The ids `/generate` reports for its prompt, an independent view of the tokenizer.
    let native = server
        .generate(
            &json!({"text": text, "sampling_params": {"max_new_tokens": 0}, "return_logprob": true,
                          "logprob_start_len": 0}),
        )
        .await
        .json();
    let prompt_ids: Vec<Value> = native["meta_info"]["input_token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[1].clone())
        .collect();
    for path in ["/tokenize", "/v1/tokenize"] {
        let reply = post(&server, path, &json!({"prompt": text})).await.json();
        assert_eq!(reply["tokens"], Value::Array(prompt_ids.clone()), "{path}");
        assert_eq!(reply["count"], prompt_ids.len());
        assert_eq!(reply["max_model_len"], 32_768);
    }
    let reply = post(&server, "/tokenize", &json!({"prompt": ["a b", ""]}))
        .await
        .json();
    assert_eq!(
        reply["count"],
        json!([reply["tokens"][0].as_array().unwrap().len(), 0])
    );

    for path in ["/detokenize", "/v1/detokenize"] {
        let kept = post(
            &server,
            path,
            &json!({"tokens": prompt_ids, "skip_special_tokens": false}),
        )
        .await;
        assert_eq!(kept.json(), json!({"text": text}), "{path}");
    }
    let skipped = post(
        &server,
        "/detokenize",
        &json!({"tokens": [prompt_ids.clone(), []]}),
    )
    .await;
    assert_eq!(skipped.json(), json!({"text": ["user\nHéllo wörld", ""]}));

    let reply = post(&server, "/detokenize", &json!({"tokens": []})).await;
    assert_eq!(reply.json(), json!({"text": ""}));
    // A Pydantic lax bool: "yes" is true, "maybe" is nothing.
    let reply = post(
        &server,
        "/tokenize",
        &json!({"prompt": "x", "add_special_tokens": "yes"}),
    )
    .await;
    assert_eq!(reply.status, 200);
    let reply = post(
        &server,
        "/tokenize",
        &json!({"prompt": "x", "add_special_tokens": "maybe"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(error_message(&reply).contains("add_special_tokens"));
    // `add_special_tokens: bool` takes no `null` (the running 0.5.23 answers a `bool_type` error).
    let reply = post(
        &server,
        "/tokenize",
        &json!({"prompt": "x", "add_special_tokens": null}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        error_message(&reply).contains("'type': 'bool_type', 'loc': ('body', 'add_special_tokens'), 'msg': 'Input should be a valid boolean', 'input': None"),
        "{}",
        error_message(&reply)
    );
    let reply = post(&server, "/detokenize", &json!({"tokens": [151_936]})).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["type"], "BadRequestError");
    // Neither `prompt` nor `messages`: `TokenizeRequest.validate_tokenize_input` refuses it.
    let reply = post(&server, "/tokenize", &json!({"text": "wrong field"})).await;
    assert_eq!(reply.status, 400);
    assert!(
        error_message(&reply).contains("Exactly one of 'prompt' or 'messages' must be provided.")
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_is_a_503_or_an_error_event() {
    let server = InProcess::new(ServerConfig {
        max_running_requests: Some(1),
        max_queued_requests: Some(0),
        ..slow()
    });
    let running = {
        let server = server.clone();
        tokio::spawn(async move {
            post(
                &server,
                "/v1/completions",
                &json!({"prompt": "busy", "max_tokens": 5}),
            )
            .await
        })
    };
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    let reply = post(
        &server,
        "/v1/completions",
        &json!({"prompt": "more", "max_tokens": 5}),
    )
    .await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.json()["code"], 503);
    let reply = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "more"}], "stream": true}),
    )
    .await;
    assert_eq!(reply.status, 200);
    let events = sse_json(&reply.body);
    assert_eq!(events.len(), 1, "{events:?}");
    let error = &events[0]["error"];
    assert_eq!(error["type"], "SERVICE_UNAVAILABLE");
    assert_eq!(error["code"], 503);
    assert_eq!(error["object"], "error");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(running.await.unwrap().status, 200);
}

/// A choice's per-token logprobs and token texts, for either route.
fn entries(api: &str, choice: &Value) -> (Vec<Value>, Vec<Value>) {
    let lp = &choice["logprobs"];
    match api {
        "chat" => {
            let content = lp["content"].as_array().unwrap();
            (
                content.iter().map(|e| e["logprob"].clone()).collect(),
                content.iter().map(|e| e["token"].clone()).collect(),
            )
        }
        _ => (
            lp["token_logprobs"].as_array().unwrap().clone(),
            lp["tokens"].as_array().unwrap().clone(),
        ),
    }
}

#[tokio::test]
async fn every_body_fault_lands_on_its_openai_field() {
    let server = InProcess::new(ServerConfig::default());
    let routes = [
        (
            "completions",
            "/v1/completions",
            json!({"prompt": "faults", "max_tokens": 6, "logprobs": 1}),
        ),
        (
            "chat",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "faults"}], "max_tokens": 6, "logprobs": true}),
        ),
    ];
    for (api, path, request) in routes {
        let clean = post(&server, path, &request).await.json();
        let (logprobs, tokens) = entries(api, &clean["choices"][0]);
        assert_eq!(logprobs.len(), 6);
        // Each faulted answer is the clean one's samples: the draws start again before it.
        let faulted = |fault: &'static str| {
            let server = server.clone();
            let request = request.clone();
            async move {
                server.reset().await;
                post_with_fault(&server, path, &request, fault).await
            }
        };
        let body = faulted("missing-meta-info").await.json();
        assert!(
            body.get("usage").is_none() && body.get("metadata").is_none(),
            "{api}"
        );
        assert_eq!(
            body["choices"], clean["choices"],
            "{api}: choices untouched"
        );
        let body = faulted("missing-logprobs").await.json();
        assert!(body["choices"][0]["logprobs"].is_null(), "{api}");
        let body = faulted("short-logprobs;by=2").await.json();
        assert_eq!(
            entries(api, &body["choices"][0]),
            (logprobs[..4].to_vec(), tokens[..4].to_vec())
        );
        let body = faulted("long-logprobs;by=2").await.json();
        let (long, long_tokens) = entries(api, &body["choices"][0]);
        assert_eq!(long[..6], logprobs[..], "{api}");
        assert_eq!(
            long[6..],
            [logprobs[5].clone(), logprobs[5].clone()],
            "{api}"
        );
        assert_eq!(long_tokens.len(), 8, "{api}");
        for (fault, want) in [
            ("null-logprob;at=1", Value::Null),
            ("positive-logprob;at=1", json!(0.5)),
            ("positive-logprob;at=1;value=2.25", json!(2.25)),
            ("string-logprob;at=1", json!(logprobs[1].to_string())),
        ] {
            let body = faulted(fault).await.json();
            let (got, got_tokens) = entries(api, &body["choices"][0]);
            assert_eq!(got[1], want, "{api}: {fault}");
            assert_eq!(
                (&got[..1], &got[2..]),
                (&logprobs[..1], &logprobs[2..]),
                "{api}: {fault}"
            );
            assert_eq!(got_tokens, tokens, "{api}: {fault}");
        }
        let body = faulted("wrong-token-id;at=1").await.json();
        let (got, got_tokens) = entries(api, &body["choices"][0]);
        assert_eq!(got, logprobs, "{api}");
        assert_eq!(got_tokens[1], "<|wrong-token|>", "{api}");
        assert_eq!(
            (&got_tokens[..1], &got_tokens[2..]),
            (&tokens[..1], &tokens[2..]),
            "{api}"
        );
        let text = faulted("nan-logprob;at=1;value=-Infinity").await.text();
        let bare = match api {
            "chat" => r#""logprob":-Infinity,"#.to_owned(),
            _ => format!(",-Infinity,{}", logprobs[2]),
        };
        assert!(text.contains(&bare), "{api}: {text}");

        // The spans faults act on `metadata.weight_versions` as on `meta_info.weight_versions`: one span of the
        // six tokens under the version now, then the catalogue's change of it.
        let span = json!({"version": "default", "start": 0, "end": 6});
        assert_eq!(clean["metadata"]["weight_versions"], json!([span]), "{api}");
        for (fault, want) in [
            (
                "spans-gap",
                json!([{"version": "default", "start": 1, "end": 6}]),
            ),
            (
                "spans-overlap",
                json!([span, {"version": "default", "start": 5, "end": 6}]),
            ),
            (
                "stale-version",
                json!([{"version": "stale", "start": 0, "end": 6}]),
            ),
        ] {
            let body = faulted(fault).await.json();
            assert_eq!(body["metadata"]["weight_versions"], want, "{api}: {fault}");
            assert_eq!(body["choices"], clean["choices"], "{api}: {fault}");
        }
        let body = faulted("drop-channel;channel=weight_versions").await.json();
        assert_eq!(
            body["metadata"],
            json!({"weight_version": "default"}),
            "{api}: the spans go, the version stays"
        );
        // An answer without tokens has one empty span, which neither a gap nor an overlap can leave a span. Only
        // chat can ask for one: `CompletionRequest` refuses `max_tokens` 0 with Pydantic's error (a field validator,
        // `validate_max_tokens_positive`).
        let mut empty = request.clone();
        empty["max_tokens"] = json!(0);
        if api == "completions" {
            let reply = post(&server, path, &empty).await;
            assert_eq!(reply.status, 400, "{api}");
            assert!(
                reply.text().contains(
                    "{'type': 'value_error', 'loc': ('body', 'max_tokens'), 'msg': 'Value error, max_tokens must be positive', 'input': 0, 'ctx': {'error': ValueError('max_tokens must be positive')}}"
                ),
                "{}",
                reply.text()
            );
            continue;
        }
        for fault in ["spans-gap", "spans-overlap"] {
            let body = post_with_fault(&server, path, &empty, fault).await.json();
            assert_eq!(
                body["metadata"]["weight_versions"],
                json!([{"version": "default", "start": 0, "end": 0}]),
                "{api}: {fault}"
            );
        }
    }
}

#[tokio::test]
async fn body_faults_rewrite_every_stream_chunk() {
    let server = InProcess::new(ServerConfig::default());
    let request = json!({"messages": [{"role": "user", "content": "faults"}], "max_tokens": 5, "logprobs": true,
                         "stream": true});
    let reply = post_with_fault(
        &server,
        "/v1/chat/completions",
        &request,
        "positive-logprob",
    )
    .await;
    let logprobs: Vec<Value> = sse_json(&reply.body)
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .map(|e| e["logprob"].clone())
        .collect();
    assert_eq!(logprobs, vec![json!(0.5); 5]);
}

#[tokio::test]
async fn echo_prefixes_each_prompts_own_choices() {
    let server = InProcess::new(ServerConfig::default());
    let request =
        json!({"prompt": ["Alpha", "Beta"], "n": 2, "max_tokens": 3, "echo": true, "seed": 2});
    let whole = post(&server, "/v1/completions", &request).await.json();
    let texts: Vec<&str> = whole["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 4);
    for (i, text) in texts.iter().enumerate() {
        let prompt = if i < 2 { "Alpha" } else { "Beta" };
        assert!(text.starts_with(prompt), "choice {i}: {text:?}");
        assert!(
            text.len() > prompt.len(),
            "choice {i} has its answer after the prompt"
        );
    }
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let chunks = sse_json(&post(&server, "/v1/completions", &streamed).await.body);
    let mut again = vec![String::new(); 4];
    for chunk in &chunks {
        let c = &chunk["choices"][0];
        again[c["index"].as_u64().unwrap() as usize].push_str(c["text"].as_str().unwrap());
    }
    assert_eq!(again, texts);

    // With logprobs, the first chunk of each choice carries the prompt's entries too.
    let mut with_logprobs = request.clone();
    with_logprobs["logprobs"] = json!(0);
    let whole = post(&server, "/v1/completions", &with_logprobs)
        .await
        .json();
    with_logprobs["stream"] = json!(true);
    let chunks = sse_json(&post(&server, "/v1/completions", &with_logprobs).await.body);
    for (i, choice) in whole["choices"].as_array().unwrap().iter().enumerate() {
        let streamed: Vec<Value> = chunks
            .iter()
            .map(|c| &c["choices"][0])
            .filter(|c| c["index"] == i)
            .flat_map(|c| {
                c["logprobs"]["token_logprobs"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(
            &streamed,
            choice["logprobs"]["token_logprobs"].as_array().unwrap(),
            "choice {i}"
        );
        assert!(
            streamed[0].is_null(),
            "the prompt's first token has no logprob"
        );
    }
}

#[tokio::test]
async fn a_chunk_without_new_tokens_has_no_logprobs() {
    let server = InProcess::new(ServerConfig::default());
    let request =
        json!({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "stream": true});
    let reply = post_with_fault(&server, "/v1/chat/completions", &request, "abort-waiting").await;
    let chunks = sse_json(&reply.body);
    let finish = chunks.last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "abort");
    assert!(
        chunks.iter().all(|c| c["choices"][0]["logprobs"].is_null()),
        "{chunks:?}"
    );
}

#[tokio::test]
async fn chat_streams_without_logprobs_carry_the_text() {
    let server = InProcess::new(ServerConfig::default());
    let request =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "seed": 4});
    let whole = post(&server, "/v1/chat/completions", &request).await.json();
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let chunks = sse_json(&post(&server, "/v1/chat/completions", &streamed).await.body);
    let text: String = chunks
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert!(!text.is_empty());
    // The role chunk, one chunk per token with text, and the finish chunk: no empty content chunks.
    let empty = chunks
        .iter()
        .filter(|c| {
            let delta = &c["choices"][0]["delta"];
            delta["content"] == "" && delta.get("role").is_none()
        })
        .count();
    assert_eq!(empty, 0, "{chunks:?}");
    assert!(chunks.iter().all(|c| c["choices"][0]["logprobs"].is_null()));
}

/// A chat answer's `message` and a `/v1/models` card are each release's `ChatMessage` and `ModelCard`
/// (`srt/entrypoints/openai/protocol.py`), keys in order, as each running release wrote them for these requests
/// (`scripts/real_sglang.py`): 0.5.23 leaves out a `tool_calls` of `None`, 0.5.15 added `parent`.
#[tokio::test]
async fn chat_messages_and_model_cards_are_each_releases() {
    let expected = [
        (
            SglangVersion::V0_5_3,
            &["role", "content", "reasoning_content", "tool_calls"][..],
            &[
                "id",
                "object",
                "created",
                "owned_by",
                "root",
                "max_model_len",
            ][..],
        ),
        (
            SglangVersion::V0_5_15,
            &["role", "content", "reasoning_content", "tool_calls"][..],
            &[
                "id",
                "object",
                "created",
                "owned_by",
                "root",
                "parent",
                "max_model_len",
            ][..],
        ),
        (
            SglangVersion::V0_5_23,
            &["role", "content", "reasoning_content"][..],
            &[
                "id",
                "object",
                "created",
                "owned_by",
                "root",
                "parent",
                "max_model_len",
            ][..],
        ),
    ];
    assert_eq!(
        expected.iter().map(|(v, _, _)| *v).collect::<Vec<_>>(),
        SglangVersion::all().collect::<Vec<_>>(),
        "one expectation per release"
    );
    for (version, message_keys, card_keys) in expected {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
        let body = post(&server, "/v1/chat/completions", &chat).await.json();
        let message = &body["choices"][0]["message"];
        assert_eq!(crate::common::keys(message), message_keys, "{version}");
        for key in ["reasoning_content", "tool_calls"] {
            assert!(
                message.get(key).is_none_or(Value::is_null),
                "{version}: {key}"
            );
        }
        let models = server.get("/v1/models").await.json();
        let card = &models["data"][0];
        assert_eq!(crate::common::keys(card), card_keys, "{version}");
        if card_keys.contains(&"parent") {
            assert!(card["parent"].is_null(), "{version}");
        }
    }
}

/// `usage` is each release's `UsageInfo` (`srt/entrypoints/openai/protocol.py`), its fields in their declared
/// order, which is also what each running release wrote for these requests (`scripts/real_sglang.py`): the
/// mock wrote `completion_tokens` before `total_tokens` and no `reasoning_tokens`. Non-stream answers and a
/// stream's usage chunk alike.
#[tokio::test]
async fn usage_is_each_releases_usage_info_in_its_order() {
    let base = [
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "reasoning_tokens",
    ];
    let with_details = [&base[..], &["completion_tokens_details"]].concat();
    let expected = [
        (SglangVersion::V0_5_3, &base[..]),
        (SglangVersion::V0_5_15, &base[..]),
        (SglangVersion::V0_5_23, &with_details[..]),
    ];
    assert_eq!(
        expected.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        SglangVersion::all().collect::<Vec<_>>(),
        "one expectation per release"
    );
    for (version, keys) in expected {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let completion = json!({"prompt": "hi", "max_tokens": 3});
        let body = post(&server, "/v1/completions", &completion).await.json();
        assert_eq!(crate::common::keys(&body["usage"]), keys, "{version}");
        assert_eq!(body["usage"]["reasoning_tokens"], 0, "{version}");
        assert_eq!(
            body["usage"]["total_tokens"],
            json!(body["usage"]["prompt_tokens"].as_u64().unwrap() + 3),
            "{version}"
        );
        let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true,
                          "stream_options": {"include_usage": true}});
        let chunks = sse_json(&post(&server, "/v1/chat/completions", &chat).await.body);
        let last = chunks.last().expect("a usage chunk");
        assert_eq!(
            crate::common::keys(&last["usage"]),
            keys,
            "{version}: stream"
        );
    }
}

/// Every chat stream delta carries `reasoning_content`, `null` here, in every release: 0.5.15 and 0.5.23 write
/// msgspec's `StreamDelta`, which omits unset fields but keeps that one so that the openai SDK's
/// `delta.reasoning_content` exists; 0.5.3 writes pydantic's `DeltaMessage` with every field. (The SGLang-versions
/// issue: the mock's deltas lacked it, and the SDK raised `AttributeError` on the final chunk of this request.)
#[tokio::test]
async fn chat_stream_deltas_are_each_releases_delta_shape() {
    let request =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true});
    for version in SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let chunks = sse_json(&post(&server, "/v1/chat/completions", &request).await.body);
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        let (first, last) = (deltas[0], deltas[deltas.len() - 1]);
        if version == SglangVersion::V0_5_3 {
            assert_eq!(
                *first,
                json!({"role": "assistant", "content": "", "reasoning_content": null, "tool_calls": null})
            );
            assert_eq!(
                *last,
                json!({"role": null, "content": null, "reasoning_content": null, "tool_calls": null})
            );
            assert!(
                chunks
                    .iter()
                    .all(|c| c["usage"].is_null() && c.get("usage").is_some())
            );
        } else {
            assert_eq!(
                *first,
                json!({"reasoning_content": null, "role": "assistant", "content": ""})
            );
            assert_eq!(
                *last,
                json!({"reasoning_content": null}),
                "{version}: the finish chunk"
            );
            assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{version}");
        }
        for (chunk, delta) in chunks.iter().zip(&deltas) {
            let keys: Vec<&String> = delta.as_object().expect("a delta object").keys().collect();
            assert!(
                keys.iter().any(|k| *k == "reasoning_content"),
                "{version}: {chunk}"
            );
            let choice_keys: Vec<&String> = chunk["choices"][0]
                .as_object()
                .expect("a choice")
                .keys()
                .collect();
            assert_eq!(
                choice_keys,
                [
                    "index",
                    "delta",
                    "logprobs",
                    "finish_reason",
                    "matched_stop"
                ],
                "{version}"
            );
        }
        assert_eq!(
            chunks.last().expect("chunks")["choices"][0]["finish_reason"],
            "length",
            "{version}"
        );
    }
}

/// SGLang's `test_request_length_validation.py`, as the SGLang-versions issue ran it: a chat `max_tokens` (or
/// `max_completion_tokens`) above the context length is refused by `_validate_request` in `serving_chat.py` with
/// its own message (no space after its first period), before the prompt is counted; one that fits the context
/// alone but not with the prompt gets the native check's message. The mock gave the native message for both.
#[tokio::test]
async fn chat_max_tokens_above_the_context_gets_serving_chats_message() {
    let server = InProcess::new(ServerConfig {
        context_length: Some(64),
        ..ServerConfig::default()
    });
    for key in ["max_tokens", "max_completion_tokens"] {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], key: 100});
        let reply = post(&server, "/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 400, "{key}");
        assert_eq!(
            reply.json(),
            json!({"object": "error", "type": "BadRequestError", "param": null, "code": 400,
                   "message": "max_completion_tokens is too large: 100.This model supports at most 64 completion tokens."}),
            "{key}"
        );
    }
    let fits_alone = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60});
    let reply = post(&server, "/v1/chat/completions", &fits_alone).await;
    assert_eq!(reply.status, 400);
    let message = reply.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.starts_with(
            "Requested token count exceeds the model's maximum context length of 64 tokens."
        ),
        "{message}"
    );
}

/// SGLang's `test_tokenize_detokenize` tests, as the SGLang-versions issue ran them: `/detokenize` with a
/// negative id passes the `List[int]` check, then the fast tokenizer's decode raises an `OverflowError` whose
/// text lacks "decode", which `OpenAIServingDetokenize` answers as a 500 `InternalServerError`. The mock answered
/// it with a 400.
#[tokio::test]
async fn detokenize_answers_a_negative_id_as_the_tokenizers_overflow() {
    let server = InProcess::new(ServerConfig::default());
    for path in ["/detokenize", "/v1/detokenize"] {
        let reply = post(&server, path, &json!({"tokens": [1, -1, 2]})).await;
        assert_eq!(reply.status, 500, "{path}");
        assert_eq!(
            reply.text(),
            r#"{"object":"error","message":"Internal server error during detokenization: out of range integral type conversion attempted","type":"InternalServerError","param":null,"code":500}"#,
            "{path}"
        );
    }
}

/// SGLang's `test_tokenize_detokenize` tests, as the SGLang-versions issue ran them: `/tokenize` (and
/// `/v1/tokenize`) take `messages` instead of `prompt` and render them with the chat template as a chat
/// completion would (`OpenAIServingTokenize._tokenize_chat_request`); 0.5.23's `add_generation_prompt: false`
/// leaves the assistant turn unopened; exactly one of the two is required (`validate_tokenize_input`). The mock
/// refused `messages`.
#[tokio::test]
async fn tokenize_renders_messages_with_the_chat_template() {
    let server = InProcess::new(ServerConfig::default());
    let messages =
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]);
    let turns = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n";
    let tokens_of = |prompt: String| {
        let server = server.clone();
        async move {
            post(&server, "/tokenize", &json!({"prompt": prompt}))
                .await
                .json()["tokens"]
                .clone()
        }
    };
    let opened = tokens_of(format!("{turns}<|im_start|>assistant\n")).await;
    for path in ["/tokenize", "/v1/tokenize"] {
        let reply = post(&server, path, &json!({"messages": messages})).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let body = reply.json();
        assert_eq!(body["tokens"], opened, "{path}");
        assert_eq!(body["count"], opened.as_array().unwrap().len(), "{path}");
        assert_eq!(body["max_model_len"], 32768);
    }
    let chat = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1}),
    )
    .await
    .json();
    assert_eq!(
        chat["usage"]["prompt_tokens"],
        opened.as_array().unwrap().len()
    );
    let closed = post(
        &server,
        "/tokenize",
        &json!({"messages": messages, "add_generation_prompt": false}),
    )
    .await
    .json();
    assert_eq!(closed["tokens"], tokens_of(turns.to_owned()).await);
    for body in [
        json!({"prompt": "hi", "messages": messages}),
        json!({"model": "x"}),
    ] {
        let reply = post(&server, "/tokenize", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        let message = reply.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("Exactly one of 'prompt' or 'messages' must be provided."),
            "{message}"
        );
    }
}

/// SGLang's own `test_chat_completion` sends a greedy chat without `max_tokens`; against a model whose turn
/// never ends it runs to the context window (32,729 tokens here, minutes at 5 ms a token). The toy model's
/// `<|im_end|>` outgrows every candidate within 210 tokens of the turn (MODEL.md section 4.2), so the greedy
/// answer stops on it, under every release, with the token and text counts of the same native request.
#[tokio::test]
async fn a_greedy_chat_without_max_tokens_ends_its_turn() {
    for version in SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let body = json!({"model": "toy", "temperature": 0,
                          "messages": [{"role": "user", "content": "What is the capital of France?"}]});
        let reply = post(&server, "/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 200, "{version}: {}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{version}");
        let tokens = answer["usage"]["completion_tokens"]
            .as_u64()
            .expect("a count");
        assert!((1..=211).contains(&tokens), "{version}: {tokens} tokens");
    }
}

/// A message's role as each release's message union takes it: a generic role in any case, lowercased for the
/// template (`_normalize_role`); `user` exactly; anything else the union's two errors. 0.5.3's generic roles
/// have no `developer`, 0.5.15's do.
#[tokio::test]
async fn chat_roles_are_the_releases_own() {
    let chat = |role: &str| json!({"model": "toy", "max_tokens": 2, "messages": [{"role": role, "content": "Hi"}]});
    for (version, role, ok) in [
        (SglangVersion::V0_5_3, "System", true),
        (SglangVersion::V0_5_3, "developer", false),
        (SglangVersion::V0_5_3, "User", false),
        (SglangVersion::V0_5_15, "developer", true),
        (SglangVersion::V0_5_15, "root", false),
        (SglangVersion::V0_5_23, "ROOT", true),
    ] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let reply = post(&server, "/v1/chat/completions", &chat(role)).await;
        assert_eq!(
            reply.status == 200,
            ok,
            "{version} {role}: {}",
            reply.text()
        );
        if !ok {
            let message = reply.json()["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                message.starts_with(
                    "2 validation errors:\n  {'type': 'value_error', 'loc': ('body', 'messages', 0, "
                ),
                "{message}"
            );
            assert!(
                message.contains("'msg': \"Input should be 'user'\""),
                "{message}"
            );
        }
    }
    // The template sees the lowercased role: the prompt is that of the lowercase request.
    let server = InProcess::new(ServerConfig::default());
    let mut counts = Vec::new();
    for role in ["SYSTEM", "system"] {
        let body = json!({"model": "toy", "max_tokens": 1,
                          "messages": [{"role": role, "content": "Hi"}, {"role": "user", "content": "Yo"}]});
        let reply = post(&server, "/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        counts.push(reply.json()["usage"]["prompt_tokens"].clone());
    }
    assert_eq!(counts[0], counts[1]);
}

/// The prompt of SGLang's `test_matched_stop.py` (`MANY_NEW_TOKENS_PROMPT`): plain text of some 600 characters.
const MANY_NEW_TOKENS_PROMPT: &str = "
Please write an extremely detailed and vivid fantasy story, set in a world full of intricate magic systems, political intrigue, and complex characters.
Ensure that you thoroughly describe every scene, character's motivations, and the environment. Include long, engaging dialogues and elaborate on the inner thoughts of the characters.
Each section should be as comprehensive as possible to create a rich and immersive experience for the reader.
The story should span multiple events, challenges, and character developments over time. Aim to make the story at least 3,000 words long.
";

/// SGLang's own `test_finish_length` and `test_finish_stop_str` (`test_matched_stop.py`): a greedy completion and
/// a greedy chat of its long plain prompt end by length at `max_tokens: 5` and on the stop string `"\n"` at
/// `max_tokens: 1000`, with `matched_stop` null and `"\n"`. A completion's prompt holds no special token, so its
/// end of turn stays unlikely however long it is (MODEL.md section 4.2); before that rule the completion stopped on
/// `<|im_end|>` at its first token.
#[tokio::test]
async fn sglangs_matched_stop_tests_pass() {
    for version in SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        for (path, prompt) in [
            ("/v1/completions", json!({"prompt": MANY_NEW_TOKENS_PROMPT})),
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "system", "content": "You are a helpful AI assistant"},
                                    {"role": "user", "content": MANY_NEW_TOKENS_PROMPT}]}),
            ),
        ] {
            for (max_tokens, stop, finish, matched) in [
                (5, None, "length", Value::Null),
                (1000, Some("\n"), "stop", json!("\n")),
            ] {
                let mut body =
                    json!({"model": "toy", "temperature": 0, "top_p": 1, "max_tokens": max_tokens});
                body.as_object_mut()
                    .unwrap()
                    .extend(prompt.as_object().unwrap().clone());
                if let Some(stop) = stop {
                    body["stop"] = json!(stop);
                }
                let reply = post(&server, path, &body).await;
                assert_eq!(reply.status, 200, "{version} {path}: {}", reply.text());
                let choice = &reply.json()["choices"][0];
                assert_eq!(
                    choice["finish_reason"], finish,
                    "{version} {path} {max_tokens}: {choice}"
                );
                assert_eq!(
                    choice["matched_stop"], matched,
                    "{version} {path} {max_tokens}: {choice}"
                );
            }
        }
    }
}

/// No release checks `n`: one below 1 runs as one sample, and the answer breaks where the usage sums use it, as
/// the running 0.5.23 answered each of these: `n: 0` is `range()`'s `ValueError` (400 `BadRequest`) and in a
/// stream with usage `integer modulo by zero`; a negative `n` is served with no prompt tokens in its usage (an
/// empty `range`), and a stream counts them (`0 % -1 == 0`); several prompts index past the choices (500).
#[tokio::test]
async fn an_n_below_one_breaks_the_answer_as_the_release_s_usage_sums_do() {
    let server = InProcess::new(ServerConfig::default());
    let error = |status: u16, kind: &str, message: &str| {
        (
            status,
            json!({"object": "error", "message": message, "type": kind, "param": null, "code": status}),
        )
    };
    let user = json!([{"role": "user", "content": "hi"}]);
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "hi", "max_tokens": 3, "n": 0}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": user, "max_tokens": 3, "n": 0}),
        ),
    ] {
        let reply = post(&server, path, &body).await;
        assert_eq!(
            (reply.status.as_u16(), reply.json()),
            error(400, "BadRequest", "range() arg 3 must not be zero"),
            "{path}"
        );
    }
    for n in [0, -1] {
        let body = json!({"prompt": ["hi", "yo"], "max_tokens": 3, "n": n});
        let reply = post(&server, "/v1/completions", &body).await;
        assert_eq!(
            (reply.status.as_u16(), reply.json()),
            error(
                500,
                "InternalServerError",
                "Internal server error: list index out of range"
            ),
            "n {n}"
        );
    }
    let served = post(
        &server,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 3, "n": -1}),
    )
    .await;
    assert_eq!(served.status, 200);
    let answer = served.json();
    assert_eq!(answer["choices"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        (
            &answer["usage"]["prompt_tokens"],
            &answer["usage"]["completion_tokens"]
        ),
        (&json!(0), &json!(3))
    );
    let stream = |n: i64| {
        json!({"messages": user, "max_tokens": 2, "n": n, "stream": true,
                                 "stream_options": {"include_usage": true}})
    };
    let events = sse_json(&post(&server, "/v1/chat/completions", &stream(0)).await.body);
    assert_eq!(
        events.last(),
        Some(
            &json!({"error": {"object": "error", "message": "integer modulo by zero",
                               "type": "BadRequestError", "param": null, "code": 400}})
        )
    );
    let events = sse_json(
        &post(&server, "/v1/chat/completions", &stream(-1))
            .await
            .body,
    );
    let usage = &events.last().expect("a usage chunk")["usage"];
    assert!(
        usage["prompt_tokens"].as_u64().is_some_and(|p| p > 0),
        "{usage}"
    );
    assert_eq!(usage["completion_tokens"], 2);
}

/// A body that is not an object: Pydantic's `model_attributes_type` with the body as its input on the
/// completions, tokenize and detokenize routes, and on the chat route the uncaught `AttributeError` of its
/// `mode="before"` validator (`set_tool_choice_default` calls `values.get`), a plain 500 in every release. The
/// running 0.5.23 answers `"x"`, `null`, `[]` and `5` so on each of these routes.
#[tokio::test]
async fn a_body_that_is_not_an_object_is_refused_as_each_route_s_model_refuses_it() {
    for version in SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        for (body, input) in [
            (json!("x"), "'x'"),
            (json!(null), "None"),
            (json!([]), "[]"),
            (json!(5), "5"),
        ] {
            let reply = post(&server, "/v1/completions", &body).await;
            assert_eq!(reply.status, 400, "{version} {body}");
            let message = reply.json()["message"]
                .as_str()
                .expect("a message")
                .to_owned();
            let error = format!(
                "{{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary \
                 or object to extract fields from', 'input': {input}}}"
            );
            assert!(
                message.starts_with(&format!("1 validation error:\n  {error}\n")),
                "{version}: {message}"
            );
            let reply = post(&server, "/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 500, "{version} {body}");
            assert_eq!(reply.text(), "Internal Server Error");
        }
    }
}

/// The sampling fields reach `sampling_params` as the request model holds them after Pydantic's lax parse, and
/// an uncaught exception behind the OpenAI layer is its `Internal server error: <str(e)>`. The running 0.5.23
/// answers each body so: `"top_p": false` is `0.0` to `verify`, `"presence_penalty": "1"` and `"top_k": "3"` are
/// served, a list `rid` is `unhashable type: 'list'`, and `top_logprobs` is unbounded.
#[tokio::test]
async fn sampling_fields_arrive_as_the_request_model_holds_them() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let completion = |extra: Value| {
        let mut body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let reply = post(
        &server,
        "/v1/completions",
        &completion(json!({"top_p": false})),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["message"], "top_p must be in (0, 1], got 0.0.");
    assert_eq!(reply.json()["type"], "BadRequestError");
    let reply = post(
        &server,
        "/v1/completions",
        &completion(json!({"temperature": -1})),
    )
    .await;
    assert_eq!(
        reply.json()["message"],
        "temperature must be a non-negative finite number, got -1.0."
    );
    for served in [
        json!({"presence_penalty": "1"}),
        json!({"top_k": "3"}),
        json!({"ignore_eos": "yes"}),
    ] {
        let reply = post(&server, "/v1/completions", &completion(served.clone())).await;
        assert_eq!(reply.status, 200, "{served}: {}", reply.text());
    }
    let reply = post(&server, "/v1/completions", &completion(json!({"rid": []}))).await;
    assert_eq!(reply.status, 500);
    assert_eq!(
        reply.json(),
        json!({"object": "error", "message": "Internal server error: unhashable type: 'list'",
               "type": "InternalServerError", "param": null, "code": 500})
    );
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                      "logprobs": true, "top_logprobs": 25});
    let reply = post(&server, "/v1/chat/completions", &chat).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let top = &reply.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
    assert_eq!(top.as_array().map(Vec::len), Some(25));
}
