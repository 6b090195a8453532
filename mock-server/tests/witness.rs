//! The witness over HTTP: every item the server answers is in the ledger exactly as the client received it
//! (decoded here from the answer's own bytes, independently of the server's recording), across `/generate`,
//! the OpenAI routes, streams, batches, `n > 1`, aborts, retractions and every body and stream fault; the
//! ledger's bound, its reset, and `/admin/audit` and `sglang-mock audit` at their edges.

use std::process::Command;

use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use mock_server::{FaultClass, FaultKind, ServerConfig};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common::{
    InProcess, Live, Reply, advance_ms, slow, sole_problem, spawn_generate, sse_json,
};

/// A server that keeps a ledger and sends every channel (a small MoE shape keeps the routes short).
fn witness() -> ServerConfig {
    ServerConfig {
        ledger: true,
        enable_return_routed_experts: true,
        num_hidden_layers: 2,
        num_experts: 8,
        num_experts_per_tok: 2,
        ..ServerConfig::default()
    }
}

/// A body asking for logprobs, routes and sampling supports.
fn body(prompt: Value, tokens: u32) -> Value {
    json!({
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": tokens, "top_k": 5},
        "return_logprob": true,
        "return_routed_experts": true,
        "return_sampling_mask": true,
    })
}

/// The ledger's items, read over HTTP.
async fn ledger(server: &InProcess) -> Vec<Value> {
    let reply = server.get("/admin/ledger").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["items"].as_array().expect("items").clone()
}

/// The items recorded since the ledger held `before`.
async fn new_items(server: &InProcess, before: usize) -> Vec<Value> {
    ledger(server).await.split_off(before)
}

/// A body JSON can read: the bare `NaN`, `Infinity` and `-Infinity` the `nan-logprob` fault writes (as
/// Python's json does) become the strings the ledger writes for them.
fn lenient(body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body)
        .replace("[NaN,", "[\"NaN\",")
        .replace("[-Infinity,", "[\"-Infinity\",")
        .replace("[Infinity,", "[\"Infinity\",");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A sent logprob as the ledger writes it: a number, `null`, or the string of a non-finite value; a logprob
/// the fault sent as a string holds its number.
fn logprob_value(v: &Value) -> Value {
    match v {
        Value::String(s) => match s.parse::<f64>() {
            Ok(x) if x.is_finite() => json!(x),
            _ => v.clone(),
        },
        other => other.clone(),
    }
}

/// What a client received of one native item object: its id, output ids, the logprobs of its entries, its
/// routes and sampling supports (each `null` when absent).
fn native_view(item: &Value) -> Value {
    let meta = &item["meta_info"];
    let logprobs = match meta.get("output_token_logprobs") {
        Some(Value::Array(entries)) => {
            Value::Array(entries.iter().map(|e| logprob_value(&e[0])).collect())
        }
        _ => Value::Null,
    };
    json!({
        "rid": meta.get("id").cloned().unwrap_or(Value::Null),
        "output_ids": item["output_ids"],
        "output_logprobs": logprobs,
        "routes": meta.get("routed_experts").cloned().unwrap_or(Value::Null),
        "sampling_supports": meta.get("output_token_sampling_mask").cloned().unwrap_or(Value::Null),
    })
}

/// The same view of a ledger entry, its floats as the client's JSON reads them.
fn entry_view(entry: &Value) -> Value {
    let logprobs = match &entry["output_logprobs"] {
        Value::Array(values) => Value::Array(values.iter().map(logprob_value).collect()),
        other => other.clone(),
    };
    json!({
        "rid": entry["rid"],
        "output_ids": entry["output_ids"],
        "output_logprobs": logprobs,
        "routes": entry.get("routes").cloned().unwrap_or(Value::Null),
        "sampling_supports": entry["sampling_supports"],
    })
}

/// An entry's spans as 0.5.23 sends them: without the weights' number, which only the ledger keeps.
fn wire_spans(entry: &Value) -> Value {
    let mut spans = entry["weight_versions"].clone();
    for span in spans.as_array_mut().into_iter().flatten() {
        span.as_object_mut().map(|o| o.remove("weights"));
    }
    spans
}

fn objects(body: &Value) -> Vec<Value> {
    match body {
        Value::Array(items) => items.clone(),
        item => vec![item.clone()],
    }
}

/// The final object of each item of a cumulative stream, in item order.
fn stream_finals(reply: &Reply) -> Vec<Value> {
    let mut finals: Vec<(u64, Value)> = sse_json(&reply.body)
        .into_iter()
        .filter(|e| !e["meta_info"]["finish_reason"].is_null())
        .map(|e| (e["index"].as_u64().unwrap_or(0), e))
        .collect();
    finals.sort_by_key(|(i, _)| *i);
    finals.into_iter().map(|(_, e)| e).collect()
}

/// The entries `items` in item order (a stream records items in the order they end).
fn by_index(mut items: Vec<Value>) -> Vec<Value> {
    items.sort_by_key(|e| e["index"].as_u64());
    items
}

#[tokio::test]
async fn every_native_answer_is_in_the_ledger_as_the_client_received_it() {
    let server = InProcess::new(witness());
    let cases: Vec<(&str, Value)> = vec![
        ("one prompt", body(json!([1, 2, 3]), 9)),
        ("a batch", body(json!([[1, 2], [3, 4, 5]]), 6)),
        (
            "n = 2",
            json!({"input_ids": [7, 8], "sampling_params": {"max_new_tokens": 5, "n": 2},
                   "return_logprob": true}),
        ),
        (
            "no logprobs asked",
            json!({"input_ids": [4], "sampling_params": {"max_new_tokens": 4}}),
        ),
        ("a stream", {
            let mut b = body(json!([2, 3]), 7);
            b["stream"] = json!(true);
            b
        }),
        ("a streamed batch", {
            let mut b = body(json!([[2, 3], [9]]), 5);
            b["stream"] = json!(true);
            b
        }),
    ];
    for (name, request) in cases {
        let before = ledger(&server).await.len();
        let reply = server.generate(&request).await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        let received: Vec<Value> = if request["stream"] == true {
            stream_finals(&reply)
        } else {
            objects(&reply.json())
        };
        let recorded = by_index(new_items(&server, before).await);
        assert_eq!(recorded.len(), received.len(), "{name}");
        for (entry, item) in recorded.iter().zip(&received) {
            assert_eq!(entry_view(entry), native_view(item), "{name}");
            assert_eq!(entry["route"], "/generate", "{name}");
            assert_eq!(entry["stream"], request["stream"] == true, "{name}");
            assert_eq!(entry["fault"], Value::Null, "{name}");
            assert_eq!(
                wire_spans(entry),
                item["meta_info"]["weight_versions"],
                "{name}"
            );
            assert_eq!(
                entry["finish_reason"], item["meta_info"]["finish_reason"]["type"],
                "{name}"
            );
        }
        // The prompts, in item order: a batch's own, repeated for `n`.
        let prompts: Vec<Value> = recorded.iter().map(|e| e["prompt_ids"].clone()).collect();
        let asked = match &request["input_ids"] {
            Value::Array(p) if p.first().is_some_and(Value::is_array) => p.clone(),
            one => vec![one.clone(); received.len()],
        };
        assert_eq!(prompts, asked, "{name}");
    }
}

#[tokio::test]
async fn every_openai_answer_is_in_the_ledger_with_the_prompt_the_model_ran_on() {
    let server = InProcess::new(witness());
    let messages = json!([{"role": "user", "content": "Hi there"}]);
    // The chat prompt is the chat template's rendering, as `/tokenize` gives it.
    let templated = server
        .post(
            "/tokenize",
            serde_json::to_vec(&json!({"messages": messages})).expect("json"),
        )
        .await
        .json()["tokens"]
        .clone();
    let cases: Vec<(&str, &str, Value, Value)> = vec![
        (
            "completions",
            "/v1/completions",
            json!({"model": "m", "prompt": [1, 2, 3], "max_tokens": 6, "logprobs": 1, "n": 2}),
            json!([1, 2, 3]),
        ),
        (
            "chat",
            "/v1/chat/completions",
            json!({"model": "m", "messages": messages, "max_tokens": 6, "logprobs": true,
                   "return_routed_experts": true}),
            templated,
        ),
    ];
    for (name, path, request, prompt) in cases {
        let before = ledger(&server).await.len();
        let reply = server
            .post(path, serde_json::to_vec(&request).expect("json"))
            .await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        let answer = reply.json();
        let recorded = by_index(new_items(&server, before).await);
        let choices = answer["choices"].as_array().expect("choices");
        assert_eq!(recorded.len(), choices.len(), "{name}");
        for (entry, choice) in recorded.iter().zip(choices) {
            assert_eq!(entry["route"], path, "{name}");
            assert_eq!(entry["prompt_ids"], prompt, "{name}");
            let sent: Vec<Value> = match path {
                "/v1/completions" => choice["logprobs"]["token_logprobs"]
                    .as_array()
                    .expect("token_logprobs")
                    .clone(),
                _ => choice["logprobs"]["content"]
                    .as_array()
                    .expect("content")
                    .iter()
                    .map(|t| t["logprob"].clone())
                    .collect(),
            };
            assert_eq!(entry_view(entry)["output_logprobs"], json!(sent), "{name}");
            assert_eq!(
                entry["output_ids"].as_array().map(Vec::len),
                Some(sent.len()),
                "{name}"
            );
        }
        // Only the first choice's routes go out, in `sglext`.
        if let Some(routes) = answer.get("sglext").and_then(|s| s.get("routed_experts")) {
            assert_eq!(recorded[0]["routes"], *routes, "{name}");
        }
        assert!(recorded[1..].iter().all(|e| e["routed_experts"].is_null()));
    }
}

#[tokio::test]
async fn aborted_items_and_items_that_never_ran_are_recorded() {
    let server = InProcess::new(witness());
    let request = body(json!([5, 6]), 8);
    let faulted = |fault: &'static str| {
        let server = server.clone();
        let request = request.clone();
        async move {
            let bytes = serde_json::to_vec(&request).expect("json");
            let reply = server
                .request(Method::POST, "/generate", bytes, &[("x-mock-fault", fault)])
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            reply.json()
        }
    };
    let answer = faulted("abort-running;after=3").await;
    let entry = &ledger(&server).await[0];
    assert_eq!(entry_view(entry), native_view(&answer));
    assert_eq!(entry["output_ids"].as_array().map(Vec::len), Some(3));
    assert_eq!(entry["finish_reason"], "abort");
    // An abort happens in the engine: the answer is what was generated, not a corruption.
    assert_eq!(entry["fault"], Value::Null);

    let answer = faulted("abort-waiting").await;
    let entry = &ledger(&server).await[1];
    assert_eq!(wire_spans(entry), answer["meta_info"]["weight_versions"]);
    assert_eq!(entry["output_ids"], json!([]));
    assert_eq!(entry["finish_reason"], "abort");
    assert_eq!(entry["prompt_ids"], json!([5, 6]));
    assert_eq!(entry["output_logprobs"], json!([]));
}

/// A weight update that names no version (AReaL's disk updates send none) while an in-place pause holds a request:
/// the wire's spans stay one, the ledger's split where the new weights began, and whole-number labels are checked
/// against the weights the server had loaded.
#[tokio::test(start_paused = true)]
async fn a_weight_update_without_a_version_is_counted_in_the_ledger_and_checks_number_labels() {
    let server = InProcess::new(ServerConfig {
        ledger: true,
        ..slow()
    });
    let handle = spawn_generate(
        &server,
        json!({"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 6, "ignore_eos": true},
               "return_logprob": true}),
    );
    advance_ms(2500).await;
    let post = |path: &'static str, body: Value| {
        let server = server.clone();
        async move { server.post(path, body.to_string()).await }
    };
    post("/pause_generation", json!({"mode": "in_place"})).await;
    let model = server.get("/model_info").await.json()["model_path"].clone();
    let update = post("/update_weights_from_disk", json!({"model_path": model})).await;
    assert_eq!(update.status, 200, "{}", update.text());
    post("/continue_generation", json!({})).await;
    advance_ms(10_000).await;
    let answer = handle.await.expect("the request ends").json();
    let (version, spans) = (
        &answer["meta_info"]["weight_version"],
        &answer["meta_info"]["weight_versions"],
    );
    assert_eq!(version, "default");
    assert_eq!(
        spans,
        &json!([{"version": "default", "start": 0, "end": 6}])
    );
    let entry = &ledger(&server).await[0];
    let split = entry["weight_versions"][0]["end"]
        .as_u64()
        .expect("a span end");
    assert!((1..6).contains(&split), "{entry:#}");
    assert_eq!(
        entry["weight_versions"],
        json!([
            {"version": "default", "start": 0, "end": split, "weights": 0},
            {"version": "default", "start": split, "end": 6, "weights": 1},
        ])
    );
    let output: Vec<u64> = serde_json::from_value(answer["output_ids"].clone()).expect("ids");
    let logprobs: Vec<Value> = answer["meta_info"]["output_token_logprobs"]
        .as_array()
        .expect("logprobs")
        .iter()
        .map(|item| item[0].clone())
        .collect();
    let sample = |versions: Vec<u64>| {
        json!({"input_tokens": [3, 4], "output_tokens": output, "output_logprobs": logprobs,
               "output_versions": versions})
    };
    let labels: Vec<u64> = (0..6).map(|p| u64::from(p >= split)).collect();
    let report = post("/admin/audit", json!([sample(labels)])).await.json();
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["checked_versions"], 6);
    assert_eq!(report["version_fields"], json!(["output_versions"]));
    // Every token labelled with the version before the update.
    let report = post("/admin/audit", json!([sample(vec![0; 6])]))
        .await
        .json();
    assert_eq!(
        sole_problem(&report),
        (&json!("version-mismatch"), &json!(split), &json!(6))
    );
}

#[tokio::test(start_paused = true)]
async fn a_retracted_item_is_recorded_with_its_retractions() {
    let server = InProcess::new(ServerConfig {
        ledger: true,
        ..slow()
    });
    let handle = spawn_generate(
        &server,
        json!({"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 6}, "return_logprob": true}),
    );
    advance_ms(2500).await;
    server
        .post(
            "/pause_generation",
            serde_json::to_vec(&json!({"mode": "retract"})).expect("json"),
        )
        .await;
    advance_ms(3000).await;
    server.post("/continue_generation", "{}").await;
    advance_ms(10_000).await;
    let reply = handle.await.expect("the request ends");
    let answer = reply.json();
    let entries = ledger(&server).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["num_retractions"], 1);
    assert_eq!(
        entries[0]["num_retractions"],
        answer["meta_info"]["num_retractions"]
    );
    assert_eq!(entry_view(&entries[0]), native_view(&answer));
}

/// A weight update that aborts a running request: the entry holds the version and spans the aborted answer
/// reported, whichever side of the update they fall on.
#[tokio::test(start_paused = true)]
async fn an_item_aborted_by_a_weight_update_is_recorded_with_the_version_it_reported() {
    let server = InProcess::new(ServerConfig {
        ledger: true,
        ..slow()
    });
    let handle = spawn_generate(
        &server,
        json!({"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 50}, "return_logprob": true}),
    );
    advance_ms(2500).await;
    let update = server
        .post(
            "/update_weight_version",
            serde_json::to_vec(&json!({"new_version": "w1", "abort_all_requests": true}))
                .expect("json"),
        )
        .await;
    assert_eq!(update.status, 200, "{}", update.text());
    let answer = handle.await.expect("the request ends").json();
    assert_eq!(answer["meta_info"]["finish_reason"]["type"], "abort");
    let entries = ledger(&server).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["finish_reason"], "abort");
    assert_eq!(
        entries[0]["weight_version"],
        answer["meta_info"]["weight_version"]
    );
    assert_eq!(
        wire_spans(&entries[0]),
        answer["meta_info"]["weight_versions"]
    );
    // Aborted before the update loaded anything: the weights the server started with made its tokens.
    assert_eq!(entries[0]["weight_versions"][0]["weights"], 0);
    assert_eq!(entry_view(&entries[0]), native_view(&answer));
}

/// Every body fault of the catalogue, on a whole answer: the entry holds what the answer carried and names
/// the fault. Spans a fault edits stay as the versions that made the tokens (the entry's `weight_versions`).
#[tokio::test]
async fn a_body_fault_is_recorded_as_what_was_sent() {
    let server = InProcess::new(witness());
    let clean_spans = json!([{"version": "default", "start": 0, "end": 6}]);
    let kinds = FaultKind::ALL
        .iter()
        .filter(|k| {
            format!("{k}")
                .parse::<mock_server::Fault>()
                .is_ok_and(|f| f.class() == FaultClass::Body)
        })
        .collect::<Vec<_>>();
    assert_eq!(kinds.len(), 19, "the catalogue's body faults");
    for kind in kinds {
        let header = kind.name();
        let tokens = if *kind == FaultKind::PhantomLogprob {
            0
        } else {
            6
        };
        let request = body(json!([1, 9, 4]), tokens);
        let before = ledger(&server).await.len();
        let reply = server
            .request(
                Method::POST,
                "/generate",
                serde_json::to_vec(&request).expect("json"),
                &[("x-mock-fault", header)],
            )
            .await;
        assert_eq!(reply.status, 200, "{header}: {}", reply.text());
        let sent = lenient(&reply.body);
        let recorded = new_items(&server, before).await;
        assert_eq!(recorded.len(), 1, "{header}");
        let entry = &recorded[0];
        let mut got = entry_view(entry);
        let want = native_view(&sent);
        // `missing-meta-info` takes the id with the rest of `meta_info`.
        if *kind == FaultKind::MissingMetaInfo {
            got["rid"] = Value::Null;
        }
        assert_eq!(got, want, "{header}");
        let written = header
            .parse::<mock_server::Fault>()
            .expect("a fault")
            .to_string();
        assert_eq!(entry["fault"], written, "{header}");
        // `routed_experts.rows` counts the rows that went out.
        if let Some(routes) = sent["meta_info"]["routed_experts"].as_str() {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(routes)
                .expect("base64");
            let row_bytes = 4 * 2 * 2;
            assert_eq!(
                entry["routed_experts"]["rows"].as_u64(),
                Some((bytes.len() / row_bytes) as u64),
                "{header}"
            );
        }
        if tokens > 0 {
            assert_eq!(wire_spans(entry), clean_spans, "{header}");
        }
    }
}

#[tokio::test]
async fn a_stream_cut_short_is_recorded_with_its_fault_and_what_it_generated() {
    let server = InProcess::new(witness());
    let mut request = body(json!([8, 8]), 10);
    request["stream"] = json!(true);
    let reply = server
        .request(
            Method::POST,
            "/generate",
            serde_json::to_vec(&request).expect("json"),
            &[("x-mock-fault", "truncate-stream;after=2")],
        )
        .await;
    assert_eq!(reply.status, 200);
    let entries = ledger(&server).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["fault"], "truncate-stream;after=2");
    // What the client saw is a prefix of what the entry holds.
    let text = reply.text();
    let seen: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    let last: &Value = seen.last().expect("two events");
    let got = entries[0]["output_ids"].as_array().expect("ids");
    let shown = last["output_ids"].as_array().expect("ids");
    assert_eq!(got[..shown.len()], shown[..]);
}

#[tokio::test]
async fn a_stream_the_client_drops_is_recorded_as_far_as_it_got() {
    let state = mock_server::AppState::new(witness()).expect("config");
    let request = json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 50},
                         "return_logprob": true, "return_routed_experts": true, "stream": true});
    let req = Request::builder()
        .method(Method::POST)
        .uri("/generate")
        .body(Body::from(serde_json::to_vec(&request).expect("json")))
        .expect("request");
    let response = mock_server::app(state.clone())
        .oneshot(req)
        .await
        .expect("infallible");
    let mut body = response.into_body();
    let first = body
        .frame()
        .await
        .expect("an event")
        .expect("a frame")
        .into_data()
        .expect("data");
    assert!(first.starts_with(b"data: "));
    drop(body);
    let ledger = state.ledger().expect("a ledger");
    let records = ledger.read();
    let entries: Vec<_> = records.entries().collect();
    assert_eq!(entries.len(), 1, "the dropped stream's item is recorded");
    assert_eq!(entries[0].finish_reason, None);
    let n = entries[0].output_ids.len();
    assert!((1..50).contains(&n), "{n} tokens");
    assert_eq!(
        entries[0].output_logprobs.as_ref().map(|l| l.len()),
        Some(n)
    );
    // Routes go out on an item's last object, which this stream never sent.
    assert_eq!(entries[0].routed_experts, None);
}

#[tokio::test]
async fn each_entry_records_the_temperature_its_logprobs_are_at() {
    let temperatures = |config: ServerConfig| async move {
        let server = InProcess::new(config);
        for temperature in [0.7, 0.0, 1.0] {
            let mut request = body(json!([1, 2]), 2);
            request["sampling_params"]["temperature"] = json!(temperature);
            server.generate(&request).await;
        }
        let items = ledger(&server).await;
        items
            .iter()
            .map(|e| e["logprob_temperature"].as_f64().expect("a temperature"))
            .collect::<Vec<f64>>()
    };
    // The sampling temperature; a greedy request's logprobs are at temperature 1 (SGLang's rewrite).
    assert_eq!(temperatures(witness()).await, [0.7, 1.0, 1.0]);
    // `--return-original-logprob` reports every logprob at temperature 1.
    let original = ServerConfig {
        return_original_logprob: true,
        ..witness()
    };
    assert_eq!(temperatures(original).await, [1.0, 1.0, 1.0]);
}

#[tokio::test]
async fn the_ledger_is_off_by_default_and_says_how_to_turn_it_on() {
    let server = InProcess::new(ServerConfig::default());
    server.generate(&body(json!([1]), 2)).await;
    for reply in [
        server.get("/admin/ledger").await,
        server.post("/admin/audit", "[]").await,
    ] {
        assert_eq!(reply.status, 400);
        assert!(reply.text().contains("--ledger"), "{}", reply.text());
    }
}

#[tokio::test]
async fn reset_empties_the_ledger() {
    let server = InProcess::new(witness());
    server.generate(&body(json!([1]), 2)).await;
    assert_eq!(ledger(&server).await.len(), 1);
    server.post("/admin/reset", "{}").await;
    assert!(ledger(&server).await.is_empty());
    server.generate(&body(json!([2]), 2)).await;
    assert_eq!(ledger(&server).await[0]["seq"], 0);
}

/// One slime sample of the answer to `prompt`, built as slime's `generate` builds it.
fn slime_sample(prompt: &[u32], answer: &Value) -> Value {
    let entries = answer["meta_info"]["output_token_logprobs"]
        .as_array()
        .expect("logprobs");
    let ids: Vec<Value> = entries.iter().map(|e| e[1].clone()).collect();
    let lps: Vec<Value> = entries.iter().map(|e| e[0].clone()).collect();
    let mut tokens: Vec<Value> = prompt.iter().map(|&t| json!(t)).collect();
    tokens.extend(ids.iter().cloned());
    json!({"tokens": tokens, "response_length": ids.len(), "loss_mask": vec![1; ids.len()],
           "rollout_log_probs": lps})
}

#[tokio::test]
async fn the_ledger_keeps_its_bound_and_an_audit_says_what_it_evicted() {
    let server = InProcess::new(ServerConfig {
        ledger: true,
        ledger_max_mib: 1,
        ..ServerConfig::default()
    });
    let request = |i: u32| {
        json!({"input_ids": [i, i + 1], "sampling_params": {"max_new_tokens": 2000, "ignore_eos": true},
               "return_logprob": true})
    };
    let mut answers = Vec::new();
    for i in 0..90 {
        answers.push(server.generate(&request(i)).await.json());
    }
    let reply = server.get("/admin/ledger").await.json();
    let (entries, evicted) = (reply["entries"].as_u64(), reply["evicted"].as_u64());
    assert_eq!(entries.zip(evicted).map(|(a, b)| a + b), Some(90));
    assert!(evicted > Some(0), "{reply:#}");
    assert!(reply["bytes"].as_u64() <= Some(1 << 20));
    assert_eq!(reply["items"][0]["seq"].as_u64(), evicted, "oldest first");

    let samples = json!([
        slime_sample(&[0, 1], &answers[0]),
        slime_sample(&[89, 90], &answers[89])
    ]);
    let report = server
        .post("/admin/audit", serde_json::to_vec(&samples).expect("json"))
        .await
        .json();
    let problems = report["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{report:#}");
    assert_eq!(problems[0]["kind"], "evicted");
    assert_eq!(problems[0]["sample"], 0);
    assert!(
        problems[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--ledger-max-mib"))
    );
}

#[tokio::test]
async fn the_audit_endpoint_reads_every_body_form_and_refuses_bad_ones_in_sglangs_shape() {
    let server = InProcess::new(ServerConfig {
        ledger: true,
        // Smaller than the audit batches below, which the endpoint still reads.
        max_body_bytes: 200,
        ..ServerConfig::default()
    });
    let answer = server
        .generate(
            &json!({"input_ids": [4, 5], "sampling_params": {"max_new_tokens": 30},
                          "return_logprob": true}),
        )
        .await
        .json();
    let good = slime_sample(&[4, 5], &answer);
    let mut bad = good.clone();
    bad["rollout_log_probs"] = Value::Null;
    let list = json!([good, bad]);
    let lines = format!("{good}\n{bad}\n");
    let wrapped = json!({"samples": [good, bad], "layout": "slime"});
    for body in [list.to_string(), lines, wrapped.to_string()] {
        assert!(body.len() > 200);
        let report = server.post("/admin/audit", body).await.json();
        assert_eq!(report["ok"], false);
        assert_eq!(report["samples"], 2);
        assert_eq!(report["problems"][0]["kind"], "logprobs-missing");
        assert_eq!(report["problems"][0]["sample"], 1);
        assert!(
            report["text"]
                .as_str()
                .is_some_and(|t| t.contains("FAILED"))
        );
    }
    let text = server
        .post("/admin/audit?format=text", json!([good]).to_string())
        .await;
    assert_eq!(text.content_type(), "text/plain; charset=utf-8");
    assert!(
        text.text().starts_with("audit passed: 1 sample"),
        "{}",
        text.text()
    );

    let refused = |reply: Reply, needle: &str| {
        assert_eq!(reply.status, 400, "{}", reply.text());
        // The mock's admin routes answer in SGLang's HTTPException shape, as `/admin/faults` does.
        let answer = reply.json();
        assert_eq!(answer["object"], "error");
        let message = answer["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_default();
        assert!(message.contains(needle), "{message}");
    };
    refused(
        server.post("/admin/audit?format=yaml", "[]").await,
        "format=\"yaml\"",
    );
    refused(server.post("/admin/audit?layout=trl", "[]").await, "layout");
    refused(
        server
            .post(
                "/admin/audit",
                r#"[{"tokens":[1],"response_length":1,"loss_mask":[3]}]"#,
            )
            .await,
        "samples[0].loss_mask[0]: expected 0 or 1 (a loss mask holds 0 and 1), got 3",
    );
    // A string where a number belongs names the sample, the field and the element, not the body.
    let mut stringly = good.clone();
    stringly["rollout_log_probs"][7] = json!("abc");
    refused(
        server
            .post("/admin/audit", json!([good, stringly]).to_string())
            .await,
        r#"samples[1].rollout_log_probs[7]: expected a number, got the string "abc""#,
    );
    refused(
        server.post("/admin/audit", "[{").await,
        "the body: not JSON",
    );
}

// The command blocks its thread while the server answers it: the server needs another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_command_reads_a_live_ledger_or_a_saved_one() {
    let live = Live::start(ServerConfig {
        ledger: true,
        ..ServerConfig::default()
    })
    .await;
    let answer = live
        .post_json(
            "/generate",
            &json!({"input_ids": [6, 7], "sampling_params": {"max_new_tokens": 12}, "return_logprob": true}),
        )
        .await
        .json();
    let good = slime_sample(&[6, 7], &answer);
    let mut zeroed = good.clone();
    zeroed["rollout_log_probs"] = json!(vec![0.0; 12]);
    let dir = std::env::temp_dir().join(format!("sglang-mock-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (good_file, bad_file) = (dir.join("good.jsonl"), dir.join("bad.jsonl"));
    std::fs::write(&good_file, format!("{good}\n")).expect("write");
    std::fs::write(&bad_file, format!("{good}\n{zeroed}\n")).expect("write");
    let saved = dir.join("ledger.json");
    let dump = live
        .client
        .get(live.url("/admin/ledger"))
        .send()
        .await
        .expect("ledger")
        .bytes()
        .await
        .expect("body");
    std::fs::write(&saved, &dump).expect("write");
    let url = live.url("");
    let run = |source: [&str; 2], file: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
            .arg("audit")
            .args(source)
            .arg(file)
            .output()
            .expect("the binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let saved = saved.to_string_lossy().into_owned();
    for source in [["--url", url.as_str()], ["--ledger", saved.as_str()]] {
        let (code, out) = run(source, &good_file);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.starts_with("audit passed"), "{out}");
        let (code, out) = run(source, &bad_file);
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("[logprob-zero] rollout_log_probs[0:12]"),
            "{out}"
        );
        // An empty file is no rollout: a wrong dump path must not pass.
        let (code, out) = run(source, std::path::Path::new("/dev/null"));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("- the batch [nothing-audited]: the audit read no samples"),
            "{out}"
        );
    }
    let (code, _) = run(["--url", "http://127.0.0.1:9"], &good_file);
    assert_eq!(code, Some(2), "an audit that cannot run");
    std::fs::remove_dir_all(&dir).ok();
    live.stop().await.expect("stops");
}

/// `WITNESS.md` section 4 documents every problem kind the audit reports, by its name, and no other.
#[test]
fn the_witness_document_names_every_problem_kind() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("WITNESS.md");
    let text = std::fs::read_to_string(&path).expect("WITNESS.md");
    let section = text
        .split("## 4. The problems")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("section 4");
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    let kinds: Vec<&str> = mock_server::witness::ProblemKind::ALL
        .iter()
        .map(|k| k.name())
        .collect();
    assert_eq!(
        documented, kinds,
        "the table lists the kinds in their order"
    );
}

/// The body faults at their edges: an answer without tokens, and the non-finite values other than NaN.
#[tokio::test]
async fn a_body_fault_at_its_edges_is_recorded_as_what_was_sent() {
    let server = InProcess::new(witness());
    for (header, tokens) in [
        ("null-logprob", 0),
        ("nan-logprob", 0),
        ("long-logprobs;by=2", 0),
        ("nan-logprob;value=Infinity;at=1", 4),
        ("nan-logprob;value=-Infinity;at=9", 4),
        ("short-logprobs;by=9", 4),
    ] {
        let before = ledger(&server).await.len();
        let reply = server
            .request(
                Method::POST,
                "/generate",
                serde_json::to_vec(&body(json!([3, 1]), tokens)).expect("json"),
                &[("x-mock-fault", header)],
            )
            .await;
        assert_eq!(reply.status, 200, "{header}: {}", reply.text());
        let recorded = new_items(&server, before).await;
        assert_eq!(
            entry_view(&recorded[0]),
            native_view(&lenient(&reply.body)),
            "{header}"
        );
    }
}
