//! Every validation rule of spec §1.1 and §1.2, data-driven from `data/validation.json`: status, body shape
//! and exact message, non-streamed and streamed.

use axum::http::Method;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Reply, read_sse, sse_json};

fn server() -> InProcess {
    InProcess::new(ServerConfig {
        context_length: Some(64),
        max_body_bytes: 4096,
        ..ServerConfig::default()
    })
}

/// One server per release, each with the cases' context length and body limit.
struct Servers(Vec<(SglangVersion, InProcess)>);

impl Servers {
    fn new() -> Servers {
        Servers(
            SglangVersion::all()
                .map(|sglang_version| {
                    let server = InProcess::new(ServerConfig {
                        context_length: Some(64),
                        max_body_bytes: 4096,
                        sglang_version,
                        ..ServerConfig::default()
                    });
                    (sglang_version, server)
                })
                .collect(),
        )
    }

    /// The server of the release a case names (`"sglang_version"`), by default the newest.
    fn of(&self, case: &Value) -> &InProcess {
        let version: SglangVersion = case["sglang_version"]
            .as_str()
            .map_or(SglangVersion::default(), |v| {
                v.parse().expect("a case names a release")
            });
        let (_, server) = self
            .0
            .iter()
            .find(|(v, _)| *v == version)
            .expect("a server per release");
        server
    }
}

/// The request body of a case, with the placeholders that JSON fixtures cannot hold expanded.
fn body_of(case: &Value) -> Vec<u8> {
    if let Some(raw) = case["raw"].as_str() {
        if raw == "DEEP" {
            // Deeper than both orjson's and serde_json's recursion limits, where a value is materialised.
            return format!(
                "{{\"text\": \"a\", \"sampling_params\": {{\"stop\": {}1{}}}}}",
                "[".repeat(2000),
                "]".repeat(2000)
            )
            .into_bytes();
        }
        return raw.as_bytes().to_vec();
    }
    let mut body = case["body"].clone();
    if body["input_ids"] == json!("ONES_64") {
        body["input_ids"] = json!(vec![1; 64]);
    }
    if body["text"] == json!("BIG") {
        body["text"] = json!("a".repeat(5000));
    }
    let text = serde_json::to_string(&body).expect("serialisable");
    text.replace("\"HUGE_ID\"", "[99999999999999999999]")
        .into_bytes()
}

/// Check one reply against the status, shape and message a case expects.
fn check_reply(case: &Value, reply: &Reply) -> Result<(), String> {
    let name = case["name"].as_str().unwrap_or("?");
    let status = case["status"].as_u64().unwrap_or(0) as u16;
    if reply.status.as_u16() != status {
        return Err(format!(
            "{name}: status {}, want {status}: {}",
            reply.status,
            reply.text()
        ));
    }
    let shape = case["shape"].as_str().unwrap_or("");
    if shape == "internal" {
        if reply.text() != "Internal Server Error"
            || !reply.content_type().starts_with("text/plain")
        {
            return Err(format!(
                "{name}: want a plain 500, got {:?} {:?}",
                reply.content_type(),
                reply.text()
            ));
        }
        return Ok(());
    }
    if reply.content_type() != "application/json" {
        return Err(format!("{name}: content-type {:?}", reply.content_type()));
    }
    let body = reply.json();
    let message = match shape {
        // Accepted: a generated answer.
        "ok" => {
            return match body["meta_info"]["finish_reason"]["type"].as_str() {
                Some("length" | "stop") => Ok(()),
                _ => Err(format!("{name}: want a finished answer, got {body}")),
            };
        }
        // 0.5.23's JSON contract: exactly `{"error": <text>}`.
        "contract" => match body.as_object() {
            Some(o) if o.len() == 1 && o["error"].is_string() => {
                body["error"].as_str().unwrap_or("").to_owned()
            }
            _ => return Err(format!("{name}: want {{\"error\": <text>}}, got {body}")),
        },
        // A scheduler's abort fails a non-stream request as a `ValueError` does.
        "value" | "scheduler" => {
            let keys: Vec<&String> = body
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            let inner: Vec<&String> = body["error"]
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if keys != ["error"] || inner != ["message"] {
                return Err(format!(
                    "{name}: want {{\"error\":{{\"message\"}}}}, got {body}"
                ));
            }
            body["error"]["message"].as_str().unwrap_or("").to_owned()
        }
        "validation" | "http" => {
            let want_type = if shape == "validation" {
                "Bad Request".to_owned()
            } else {
                status.to_string()
            };
            let expected_keys = ["object", "message", "type", "param", "code"];
            let body = crate::common::parse_json(&reply.body);
            let order = crate::common::keys(&body);
            if order != expected_keys {
                return Err(format!("{name}: keys {order:?}"));
            }
            if body["object"] != "error"
                || body["type"] != want_type.as_str()
                || !body["param"].is_null()
                || body["code"] != status
            {
                return Err(format!("{name}: ErrorResponse fields wrong: {body}"));
            }
            body["message"].as_str().unwrap_or("").to_owned()
        }
        other => return Err(format!("{name}: unknown shape {other}")),
    };
    if let Some(want) = case["message"].as_str()
        && message != want
    {
        return Err(format!("{name}: message\n  {message:?}\nwant\n  {want:?}"));
    }
    if let Some(parts) = case["message_contains"].as_array() {
        for part in parts {
            let part = part.as_str().unwrap_or("");
            if !message.contains(part) {
                return Err(format!("{name}: message {message:?} lacks {part:?}"));
            }
        }
    }
    Ok(())
}

/// A streamed ValueError is HTTP 200 with exactly one error event and `[DONE]`.
fn check_stream_reply(case: &Value, reply: &Reply) -> Result<(), String> {
    let name = case["name"].as_str().unwrap_or("?");
    let status = case["status"].as_u64().unwrap_or(0) as u16;
    let shape = case["shape"].as_str().unwrap_or("");
    if shape == "internal" {
        // The uncaught exception breaks the stream after its 200 headers: no event, no `[DONE]`.
        if reply.status.as_u16() != 200
            || !reply.content_type().starts_with("text/event-stream")
            || !reply.broken
        {
            return Err(format!(
                "{name}: want 200 headers and a broken stream, got {} {:?} broken={}",
                reply.status,
                reply.content_type(),
                reply.broken
            ));
        }
        return Ok(());
    }
    if shape == "ok" {
        read_sse(&reply.body)?;
        let chunks = sse_json(&reply.body);
        let finished = chunks
            .last()
            .is_some_and(|chunk| chunk["meta_info"]["finish_reason"].is_object());
        if reply.status.as_u16() != 200 || !finished {
            return Err(format!(
                "{name}: want a finished stream, got {}",
                reply.text()
            ));
        }
        return Ok(());
    }
    if shape == "scheduler" {
        // The scheduler refused the item after the stream began: its abort chunk ends it.
        let chunks = sse_json(&reply.body);
        let finish = chunks
            .last()
            .map(|c| c["meta_info"]["finish_reason"].clone());
        let want = json!({"type": "abort", "message": case["message"], "status_code": 400,
                          "err_type": "BadRequestError"});
        if reply.status.as_u16() != 200 || finish.as_ref() != Some(&want) {
            return Err(format!(
                "{name}: want the abort chunk {want}, got {}",
                reply.text()
            ));
        }
        return Ok(());
    }
    if shape != "value" {
        // FastAPI's type errors and the size limits happen before a stream starts.
        return check_reply(case, reply);
    }
    if reply.status.as_u16() != 200 || !reply.content_type().starts_with("text/event-stream") {
        return Err(format!(
            "{name}: streamed status {} {:?} (non-stream status {status})",
            reply.status,
            reply.content_type()
        ));
    }
    if case["stream"] == "abort" {
        let events = sse_json(&reply.body);
        let reason = &events.last().ok_or("no events")?["meta_info"]["finish_reason"];
        let want = json!({"type": "abort", "message": case["message"], "status_code": 400, "err_type": "BadRequestError"});
        if events.len() != 1 || *reason != want {
            return Err(format!(
                "{name}: want one abort chunk with {want}, got {events:?}"
            ));
        }
        return Ok(());
    }
    // `stream_results`' frame: the message alone in 0.5.3, with OpenAI's error fields from 0.5.15.
    let frame = if case["sglang_version"] == "0.5.3" {
        json!({"error": {"message": case["message"]}})
    } else {
        json!({"error": {"message": case["message"], "type": "invalid_request_error", "code": 400,
                         "retryable": false}})
    };
    let want = format!(
        "data: {}\n\ndata: [DONE]\n\n",
        serde_json::to_string(&frame).unwrap_or_default()
    );
    if reply.body != want.as_bytes() {
        return Err(format!(
            "{name}: stream body {:?}, want {want:?}",
            reply.text()
        ));
    }
    read_sse(&reply.body).map(|_| ())
}

#[tokio::test]
async fn every_validation_rule_non_streamed() {
    let servers = Servers::new();
    let cases = crate::common::load_json("validation.json");
    let mut failures = Vec::new();
    for case in cases.as_array().expect("a list of cases") {
        let reply = servers.of(case).post("/generate", body_of(case)).await;
        if let Err(e) = check_reply(case, &reply) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn every_validation_rule_streamed() {
    let servers = Servers::new();
    let cases = crate::common::load_json("validation.json");
    let mut failures = Vec::new();
    for case in cases.as_array().expect("a list of cases") {
        if case.get("raw").is_some() || !case["body"].is_object() || case["status"] == 413 {
            continue;
        }
        let mut body = case["body"].clone();
        if body.get("stream").is_none() {
            body["stream"] = json!(true);
        }
        let mut case = case.clone();
        case["body"] = body;
        let reply = servers.of(&case).post("/generate", body_of(&case)).await;
        if let Err(e) = check_stream_reply(&case, &reply) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn unknown_and_null_fields_are_ignored() {
    let server = server();
    let plain = server
        .generate(&json!({"text": "hello", "sampling_params": {"max_new_tokens": 3}, "rid": "r"}))
        .await;
    // The same prompt again would hit the prefix cache and take the prompt's next draw: the server starts again.
    server.reset().await;
    let noisy = server
        .generate(&json!({
            "text": "hello", "sampling_params": {"max_new_tokens": 3, "temperature": null, "top_p": null, "stop": null},
            "rid": "r", "model": null, "log_metrics": false, "background": true, "no_logs": true,
            "return_logprob": null, "stream": false, "bootstrap_host": null, "priority": 3,
            "routing_key": "k", "custom_labels": {"a": "b"}, "extra": [1, {"x": null}]
        }))
        .await;
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(noisy.status, 200, "{}", noisy.text());
    let strip = |v: Value| {
        let mut v = v;
        v["meta_info"]["e2e_latency"] = json!(0);
        v["meta_info"]["response_sent_to_client_ts"] = json!(0);
        v
    };
    assert_eq!(strip(plain.json()), strip(noisy.json()));
}

#[tokio::test]
async fn text_and_input_ids_together_use_input_ids() {
    let server = server();
    let both = server.generate(&json!({"text": "ignored", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}})).await;
    // Both are the prompt's first draw.
    server.reset().await;
    let ids = server
        .generate(&json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}))
        .await;
    assert_eq!(both.status, 200);
    assert_eq!(both.json()["output_ids"], ids.json()["output_ids"]);
    assert_eq!(both.json()["meta_info"]["prompt_tokens"], 3);
}

#[tokio::test]
async fn greedy_rewrite_happens_before_top_k_is_checked() {
    // `temperature < 1e-6` sets top_k = 1 in `__post_init__`, so a bad top_k no longer fails.
    let server = server();
    let reply = server.generate(&json!({"text": "a", "sampling_params": {"temperature": 0, "top_k": 0, "max_new_tokens": 2}})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test]
async fn a_masked_token_reports_null_in_latest_and_fails_a_mid_body() {
    // `min_new_tokens` masks EOS, so its logprob is -inf at those positions: orjson writes null, 0.5.3's
    // `allow_nan=False` JSONResponse fails the whole non-stream body with a 500.
    let latest = InProcess::new(ServerConfig::default());
    let eos = latest.oracle.model().tokenizer().eos_token_ids()[0];
    let request = json!({"text": "mask", "sampling_params": {"max_new_tokens": 3, "min_new_tokens": 3},
                         "return_logprob": true, "token_ids_logprob": [eos]});
    let reply = latest.generate(&request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let per_position = reply.json()["meta_info"]["output_token_ids_logprobs"].clone();
    assert_eq!(per_position.as_array().map(Vec::len), Some(3));
    for list in per_position.as_array().into_iter().flatten() {
        assert_eq!(list[0][0], Value::Null, "{list}");
        assert_eq!(list[0][1], eos);
    }
    let mid = InProcess::new(ServerConfig {
        sglang_version: mock_server::SglangVersion::V0_5_3,
        ..ServerConfig::default()
    });
    let reply = mid.generate(&request).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.text(), "Internal Server Error");
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let reply = mid.generate(&streamed).await;
    assert_eq!(
        reply.status, 200,
        "streams are serialised with orjson even in 0.5.3"
    );
    assert!(
        sse_json(&reply.body)
            .iter()
            .all(|c| c.get("error").is_none())
    );
}

#[tokio::test]
async fn responses_too_large_to_build_are_refused() {
    let server = InProcess::new(ServerConfig::default());
    let reply = server
        .generate(&json!({"text": "a", "return_logprob": true, "top_logprobs_num": 151936, "sampling_params": {"max_new_tokens": 200}}))
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json()["error"]["message"],
        "top_logprobs_num=151936 and 0 token_ids_logprob over 200 positions would return 30387200 logprob entries; \
         the mock refuses more than 20000000."
    );
}

#[tokio::test]
async fn hostile_bodies_get_answers_not_crashes() {
    let server = InProcess::new(ServerConfig::default());
    let deep_ignored = format!(
        "{{\"text\": \"a\", \"sampling_params\": {{\"max_new_tokens\": 1}}, \"x\": {}{}}}",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let bodies: Vec<Vec<u8>> = vec![
        deep_ignored.into_bytes(),
        b"{\"text\": \"\\ud800\"}".to_vec(),
        vec![b'{', b'"', b't', 0xff, 0xfe, b'"', b':', b'1', b'}'],
        b"{\"input_ids\": [1e999]}".to_vec(),
        b"{\"input_ids\": [-9223372036854775809]}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"max_new_tokens\": 1e300}}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"temperature\": 1e308, \"max_new_tokens\": 1}}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"max_new_tokens\": 99999999999}}".to_vec(),
        b"{\"text\": \"a\", \"top_logprobs_num\": -5, \"return_logprob\": true, \"sampling_params\": {\"max_new_tokens\": 1}}".to_vec(),
        b"{\"text\": \"a\", \"logprob_start_len\": -7, \"return_logprob\": true, \"sampling_params\": {\"max_new_tokens\": 1}}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"stop\": [\"\"], \"max_new_tokens\": 3}}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"n\": 0, \"max_new_tokens\": 1}}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"stream_interval\": -3, \"max_new_tokens\": 2}, \"stream\": true}".to_vec(),
        b"{\"text\": \"a\", \"sampling_params\": {\"sampling_seed\": -1, \"max_new_tokens\": 2}}".to_vec(),
        b"\xef\xbb\xbf{\"text\": \"bom\"}".to_vec(),
    ];
    for body in bodies {
        let reply = server.post("/generate", body.clone()).await;
        let status = reply.status.as_u16();
        assert!(
            status == 200 || status == 400 || status == 500,
            "{status} for {:?}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
        if status == 200 && reply.content_type().starts_with("text/event-stream") {
            read_sse(&reply.body).expect("exact framing");
        }
    }
    // The server still answers afterwards.
    assert_eq!(server.get("/health").await.status, 200);
}

/// An item the scheduler refuses (`logprob_start_len` past the prompt) streams one abort chunk with the meta_info
/// keys of a normal final chunk of the same request, in each profile, and empty lists; it carries the one token
/// the scheduler still makes from the prompt `[0]` that `set_finish_with_abort` puts in the refused prompt's
/// place, so `prompt_tokens` is 1 and `completion_tokens` 1 (the running 0.5.23 answered a refused 6-token prompt
/// so). Greedy, that token is a greedy generation's from `[0]`.
#[tokio::test]
async fn a_scheduler_abort_chunk_has_the_keys_of_a_normal_chunk() {
    for version in [
        mock_server::SglangVersion::V0_5_23,
        mock_server::SglangVersion::V0_5_3,
    ] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        for extra in [
            json!({}),
            json!({"top_logprobs_num": 2}),
            json!({"token_ids_logprob": [5, 7]}),
            json!({"top_logprobs_num": 1, "token_ids_logprob": [5]}),
        ] {
            // One token, so that the normal stream's last chunk is also its first, as the abort chunk is:
            // both carry `response_sent_to_client_ts`.
            let mut body = json!({"input_ids": [1, 2, 3], "return_logprob": true, "stream": true,
                                  "sampling_params": {"max_new_tokens": 1, "temperature": 0}});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let mut normal = body.clone();
            normal["logprob_start_len"] = json!(2);
            // Past the prompt in every release (0.5.3 refuses a start at its end already).
            body["logprob_start_len"] = json!(4);
            let what = format!("{version:?} {extra}");
            let aborted = sse_json(&server.generate(&body).await.body);
            let normal = sse_json(&server.generate(&normal).await.body);
            assert_eq!(aborted.len(), 1, "{what}");
            let (a, n) = (&aborted[0], normal.last().unwrap());
            let keys = |v: &Value| {
                let mut k: Vec<String> = v["meta_info"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect();
                k.sort();
                k
            };
            assert_eq!(keys(a), keys(n), "{what}");
            assert_eq!(a["meta_info"]["finish_reason"]["type"], "abort", "{what}");
            let from_zero = server
                .generate(&json!({"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}}))
                .await
                .json();
            // 0.5.3's ids begin with its detokenizer's window, the prompt `[0]`, in both.
            assert_eq!(
                (&a["text"], &a["output_ids"]),
                (&from_zero["text"], &from_zero["output_ids"]),
                "{what}"
            );
            let window = usize::from(version.decode_window_ids);
            assert_eq!(
                a["output_ids"].as_array().map(Vec::len),
                Some(window + 1),
                "{what}"
            );
            for (key, value) in a["meta_info"].as_object().unwrap() {
                if key.ends_with("logprobs") {
                    assert_eq!(value, &json!([]), "{what} {key}");
                }
            }
            assert_eq!(a["meta_info"]["prompt_tokens"], 1, "{what}");
            assert_eq!(a["meta_info"]["completion_tokens"], 1, "{what}");
        }
    }
}

/// The toy model has no grammar, so the server answers a constrained request as a release launched with
/// `--grammar-backend none` answers it, never with unconstrained text: each of `json_schema`, `regex`, `ebnf` and
/// `structural_tag` is the scheduler's 400 abort, in a batch the constrained item only, in a stream its abort
/// chunk, on the OpenAI routes the OpenAI layer's `BadRequestError` (the running 0.5.23 with `--grammar-backend
/// none` answered each of these; `/server_info` reports the backend as `none`).
#[tokio::test]
async fn a_grammar_constraint_is_refused_never_ignored() {
    const REFUSED: &str = "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported \
                           when the server is launched with --grammar-backend none";
    for version in SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        let keys: &[&str] = if version.structural_tag {
            &["json_schema", "regex", "ebnf", "structural_tag"]
        } else {
            &["json_schema", "regex", "ebnf"]
        };
        for key in keys {
            let what = format!("{version:?} {key}");
            let mut body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 4}});
            body["sampling_params"][*key] = json!("a");
            let reply = server.generate(&body).await;
            assert_eq!(reply.status, 400, "{what}");
            assert_eq!(
                reply.json(),
                json!({"error": {"message": REFUSED}}),
                "{what}"
            );
        }
        // `null` sets no grammar.
        let free = server
            .generate(
                &json!({"text": "hi", "sampling_params": {"max_new_tokens": 2, "regex": null}}),
            )
            .await;
        assert_eq!(free.status, 200, "{version:?}");
        // A batch stream: the free item streams its tokens, the constrained one its abort.
        let batch = json!({"text": ["a b", "c d"], "stream": true,
                           "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 2, "regex": "x"}]});
        let events = sse_json(&server.generate(&batch).await.body);
        let finish = |index: u64| {
            events
                .iter()
                .rev()
                .find(|e| e["index"] == index)
                .map(|e| e["meta_info"]["finish_reason"].clone())
        };
        assert_eq!(finish(0).unwrap()["type"], "length", "{version:?}");
        let aborted = finish(1).unwrap();
        assert_eq!(
            (
                &aborted["type"],
                &aborted["message"],
                &aborted["status_code"]
            ),
            (&json!("abort"), &json!(REFUSED), &json!(400)),
            "{version:?}"
        );
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                          "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "a", "schema": {"type": "object"}}}});
        let reply = server
            .post("/v1/chat/completions", serde_json::to_vec(&chat).unwrap())
            .await;
        assert_eq!(reply.status, 400, "{version:?}");
        assert_eq!(
            reply.json(),
            json!({"object": "error", "message": REFUSED, "type": "BadRequestError", "param": null, "code": 400}),
            "{version:?}"
        );
        let info = server.get("/get_server_info").await.json();
        assert_eq!(info["grammar_backend"], "none", "{version:?}");
    }
}

/// `FINISH_LENGTH(length=max_new_tokens)` holds the value as the request gave it: a float `max_new_tokens` comes
/// back as a float `length` (0.5.3, seen on the running release; 0.5.15's scheduler dies on it, 0.5.23's gate
/// refuses it); `null`, no limit but the window, ends at the window's int. A bool is an int to Python: `top_k:
/// true` is greedy.
#[tokio::test]
async fn python_numbers_keep_their_type_through_sampling_params() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_3,
        context_length: Some(64),
        ..ServerConfig::default()
    });
    let finish = |max_new_tokens: Value| json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": true}});
    for (given, want) in [
        (json!(4.0), "{\"type\":\"length\",\"length\":4.0}"),
        (json!(4), "{\"type\":\"length\",\"length\":4}"),
    ] {
        let reply = server.generate(&finish(given.clone())).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.text().contains(want), "{given}: {}", reply.text());
    }
    // The window: 64 - 3 - 2 = 59 tokens.
    let capped = server.generate(&finish(json!(null))).await.json();
    assert_eq!(capped["meta_info"]["finish_reason"]["length"], json!(59));
    let greedy = |top_k: Value| json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8, "top_k": top_k, "ignore_eos": true}});
    let by_bool = server.generate(&greedy(json!(true))).await.json();
    let by_int = server.generate(&greedy(json!(1))).await.json();
    assert_eq!(by_bool["output_ids"], by_int["output_ids"]);
}

/// FastAPI reads a body as JSON only without a content type or with a JSON one (`get_request_handler`); any
/// other body reaches the route's model as bytes, which it refuses with the bytes as the input. Each message is
/// the running 0.5.23's, but for the frame's directory: `/generate` sent as `text/plain` (its dataclass's
/// `dataclass_type`), `/pause_generation` sent as `foo` (a struct's two errors), and the same `/generate` body
/// sent as JSON that is not an object.
#[tokio::test]
async fn a_body_sent_as_another_media_type_reaches_the_model_as_bytes() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let body = "{\"rid\": \"é'x\"}";
    let bytes = "b'{\"rid\": \"\\xc3\\xa9\\'x\"}'";
    let message = |reply: &Reply| {
        assert_eq!(reply.status, 400, "{}", reply.text());
        reply.json()["message"]
            .as_str()
            .expect("a message")
            .to_owned()
    };
    let generate = |input: &str| {
        format!(
            "{{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance \
             of GenerateReqInput', 'input': {input}, 'ctx': {{'class_name': 'GenerateReqInput'}}}}"
        )
    };
    let reply = server
        .request(
            Method::POST,
            "/generate",
            body,
            &[("content-type", "text/plain")],
        )
        .await;
    let error = generate(bytes);
    assert_eq!(
        message(&reply),
        format!(
            "1 validation error:\n  {error}\n\n  File \"/sgl-workspace/sglang/python/sglang/srt/entrypoints/\
             http_server.py\", line 928, in generate_request\n    POST /generate [{error}]"
        )
    );
    let reply = server
        .request(
            Method::POST,
            "/generate",
            "[1]",
            &[("content-type", "application/json")],
        )
        .await;
    assert!(message(&reply).starts_with(&format!("1 validation error:\n  {}\n", generate("[1]"))));

    let reply = server
        .request(
            Method::POST,
            "/pause_generation",
            body,
            &[("content-type", "foo")],
        )
        .await;
    let errors = [
        format!(
            "{{'type': 'is_instance_of', 'loc': ('body', 'is-instance[PauseGenerationReqInput]'), 'msg': 'Input \
             should be an instance of PauseGenerationReqInput', 'input': {bytes}, 'ctx': {{'class': \
             'PauseGenerationReqInput'}}}}"
        ),
        format!(
            "{{'type': 'dict_type', 'loc': ('body', 'function-after[build_struct(), PauseGenerationReqInput]'), \
             'msg': 'Input should be a valid dictionary', 'input': {bytes}}}"
        ),
    ];
    assert!(
        message(&reply).starts_with(&format!(
            "2 validation errors:\n  {}\n  {}\n",
            errors[0], errors[1]
        )),
        "{}",
        reply.text()
    );
    // Nothing was paused: a generation still runs.
    let reply = server
        .generate(&json!({"text": "hi", "sampling_params": {"max_new_tokens": 2}}))
        .await;
    assert_eq!(reply.status, 200);
}

/// A single request keeps a list `logprob_start_len` or `top_logprobs_num` as given: unread without
/// `return_logprob`, it changes nothing (the running 0.5.23 serves `[0]`, `[]` and `[2]` so), read with it, it is
/// the scheduler's failure (0.5.23's dies on a list `logprob_start_len`), a 500 here.
#[tokio::test]
async fn a_list_logprob_setting_of_a_single_request_is_read_only_with_return_logprob() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let plain = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3, "sampling_seed": 4}});
    let base = server.generate(&plain).await;
    assert_eq!(base.status, 200);
    for extra in [
        json!({"logprob_start_len": [0]}),
        json!({"logprob_start_len": []}),
        json!({"top_logprobs_num": [2]}),
    ] {
        let mut body = plain.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let reply = server.generate(&body).await;
        assert_eq!(reply.status, 200, "{extra}: {}", reply.text());
        assert_eq!(
            reply.json()["output_ids"],
            base.json()["output_ids"],
            "{extra}"
        );
        body["return_logprob"] = json!(true);
        let reply = server.generate(&body).await;
        assert_eq!(
            reply.status,
            500,
            "{extra} with return_logprob: {}",
            reply.text()
        );
    }
}
