//! The batch scheduler of a server with a bounded KV pool (`--max-total-tokens`), against the running
//! release: the batches of `scripts/sched_probe.py`, which 0.5.23 served with pools of 600 and 2,000 tokens
//! (`mock-server/conform/sched/`), replayed on the mock: each sample is retracted as often as the real server
//! retracted it, and its tokens and logprobs are still exactly the model's. Then what the loop does with the
//! control plane: a `retract` pause, an abort in the waiting queue, a stream, and the load reports.

use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Mode, items, reassemble, spawn_generate, sse_json};

fn pooled(max_total_tokens: u64) -> ServerConfig {
    ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        max_total_tokens: Some(max_total_tokens),
        ..ServerConfig::default()
    }
}

fn pooled_as(release: SglangVersion, max_total_tokens: u64) -> ServerConfig {
    ServerConfig {
        sglang_version: release,
        ..pooled(max_total_tokens)
    }
}

fn recording(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conform/sched")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the recording is in the repository");
    serde_json::from_str(&text).expect("the recording is JSON")
}

/// Each item's `(completion_tokens, num_retractions)`; 0.5.3 reports no retractions (`None`).
fn schedule_of(answer: &Value) -> Vec<(u64, Option<u64>)> {
    items(answer)
        .iter()
        .map(|item| {
            let meta = &item["meta_info"];
            (
                meta["completion_tokens"]
                    .as_u64()
                    .expect("completion_tokens"),
                meta["num_retractions"].as_u64(),
            )
        })
        .collect()
}

/// Each item's output ids and output logprobs.
fn tokens_of(answer: &Value) -> Vec<(Value, Value)> {
    items(answer)
        .iter()
        .map(|item| {
            (
                item["output_ids"].clone(),
                item["meta_info"]["output_token_logprobs"].clone(),
            )
        })
        .collect()
}

async fn replay(name: &str) {
    let recording = recording(name);
    let pool = recording["max_total_tokens"].as_u64().expect("pool");
    let release: SglangVersion = recording["release"]
        .as_str()
        .expect("release")
        .parse()
        .expect("a release the mock answers as");
    let server = InProcess::new(pooled_as(release, pool));
    let free = InProcess::new(ServerConfig {
        sglang_version: release,
        ..ServerConfig::default()
    });
    let scenarios = recording["scenarios"].as_array().expect("scenarios");
    assert!(!scenarios.is_empty());
    let mut retracted = 0;
    for scenario in scenarios {
        let name = &scenario["name"];
        let mut body = scenario["request"].clone();
        body["return_logprob"] = json!(true);
        let reply = server.generate(&body).await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        let answer = reply.json();
        let expected: Vec<(u64, Option<u64>)> = scenario["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                (
                    i["completion_tokens"].as_u64().expect("tokens"),
                    i["num_retractions"].as_u64(),
                )
            })
            .collect();
        assert_eq!(
            schedule_of(&answer),
            expected,
            "{name}: (tokens, retractions) per sample"
        );
        retracted += expected.iter().filter_map(|(_, r)| *r).sum::<u64>();
        // The schedule changes when tokens come, never which: the same batch on a server that runs every
        // sample at once answers the same tokens and logprobs.
        let alone = free.generate(&body).await.json();
        assert_eq!(
            tokens_of(&answer),
            tokens_of(&alone),
            "{name}: tokens and logprobs"
        );
    }
    // Idle again: nothing left running or waiting.
    if release == SglangVersion::V0_5_3 {
        let load = server.get("/get_load").await.json();
        assert_eq!(
            (&load[0]["num_reqs"], &load[0]["num_waiting_reqs"]),
            (&json!(0), &json!(0))
        );
    } else {
        let load = server.get("/v1/loads").await.json()["loads"][0].clone();
        assert_eq!(
            (&load["num_running_reqs"], &load["num_waiting_reqs"]),
            (&json!(0), &json!(0))
        );
    }
    // 0.5.3 reports no retractions; its log's are checked by the scheduler's own tests (`engine::sched`).
    assert!(
        retracted > 0 || release == SglangVersion::V0_5_3,
        "{name} retracts somewhere"
    );
}

#[tokio::test]
async fn as_0_5_15_a_pool_of_600_tokens_retracts_even_ignore_eos_samples_as_the_real_server_did() {
    replay("0.5.15-600.json").await;
}

#[tokio::test]
async fn as_0_5_3_a_pool_of_600_tokens_queues_as_the_real_server_did() {
    replay("0.5.3-600.json").await;
}

#[tokio::test]
async fn a_pool_of_600_tokens_queues_and_retracts_the_samples_the_real_server_did() {
    replay("0.5.23-600.json").await;
}

#[tokio::test]
async fn a_pool_of_2000_tokens_queues_and_retracts_the_samples_the_real_server_did() {
    replay("0.5.23-2000.json").await;
}

/// Samples of 20 prompt tokens and `max_new` new ones that run to their length.
fn batch(n: usize, max_new: u64, ignore_eos: bool) -> Value {
    let ids: Vec<Vec<u64>> = (0..n as u64)
        .map(|i| (0..20).map(|j| 500 + 100 * i + j).collect())
        .collect();
    json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new,
        "min_new_tokens": max_new, "ignore_eos": ignore_eos, "temperature": 0}})
}

#[tokio::test]
async fn a_stream_under_the_batch_loop_carries_the_tokens_of_the_non_stream_answer() {
    let server = InProcess::new(pooled(600));
    let mut body = batch(4, 150, false);
    body["return_logprob"] = json!(true);
    let whole = server.generate(&body).await.json();
    body["stream"] = json!(true);
    let reply = server.generate(&body).await;
    assert_eq!(reply.status, 200);
    let chunks: Vec<Value> = sse_json(&reply.body);
    let streamed = reassemble(&chunks, Mode::Cumulative);
    let whole = items(&whole);
    assert_eq!(streamed.len(), whole.len());
    for (s, w) in streamed.iter().zip(&whole) {
        assert_eq!(Value::Array(s.output_ids.clone()), w["output_ids"]);
        assert_eq!(
            Value::Array(s.output_token_logprobs.clone()),
            w["meta_info"]["output_token_logprobs"]
        );
        assert_eq!(
            s.last_meta["num_retractions"],
            w["meta_info"]["num_retractions"]
        );
    }
}

/// Polls `/v1/loads` until `ready` holds of its one load, letting the loop run meanwhile.
async fn wait_for(server: &InProcess, ready: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..100_000 {
        let load = server.get("/v1/loads").await.json()["loads"][0].clone();
        if ready(&load) {
            return load;
        }
        tokio::task::yield_now().await;
    }
    panic!("the server never reached the state");
}

#[tokio::test]
async fn the_load_reports_count_the_samples_the_pool_keeps_waiting() {
    // Two samples of 20 + 200 reserve 442 of 600 tokens; the other two wait (ignore_eos: the whole budget).
    let server = InProcess::new(pooled(600));
    let task = spawn_generate(&server, batch(4, 200, true));
    let load = wait_for(&server, |l| l["num_running_reqs"] == 2).await;
    assert_eq!(load["num_waiting_reqs"], 2);
    assert_eq!(load["num_waiting_uncached_tokens"], 40);
    let answer = task.await.expect("the request ends").json();
    assert_eq!(schedule_of(&answer), vec![(200, Some(0)); 4]);
}

#[tokio::test]
async fn a_retract_pause_sends_the_batch_back_to_the_queue_and_it_resumes_with_the_same_tokens() {
    let server = InProcess::new(pooled(10_000));
    let body = batch(2, 300, true);
    let expected = server.generate(&body).await.json();
    let task = spawn_generate(&server, body);
    wait_for(&server, |l| l["num_running_reqs"] == 2).await;
    let paused = server
        .post("/pause_generation", r#"{"mode": "retract"}"#)
        .await;
    assert_eq!(paused.status, 200, "{}", paused.text());
    let load = wait_for(&server, |l| l["num_waiting_reqs"] == 2).await;
    assert_eq!(load["num_running_reqs"], 0);
    assert_eq!(server.post("/continue_generation", "{}").await.status, 200);
    let answer = task.await.expect("the request ends").json();
    assert_eq!(schedule_of(&answer), vec![(300, Some(1)); 2]);
    assert_eq!(tokens_of(&answer), tokens_of(&expected));
}

#[tokio::test]
async fn a_sample_aborted_in_the_waiting_queue_ends_there_without_a_token() {
    // The first request fills the pool; the second waits behind it and is aborted there.
    let server = InProcess::new(pooled(300));
    let single = |rid: &str| {
        let mut body = batch(1, 250, true);
        body["input_ids"] = body["input_ids"][0].clone();
        body["rid"] = json!(rid);
        body
    };
    let (first, second) = (single("first"), single("second"));
    let running = spawn_generate(&server, first);
    wait_for(&server, |l| l["num_running_reqs"] == 1).await;
    let waiting = spawn_generate(&server, second);
    wait_for(&server, |l| l["num_waiting_reqs"] == 1).await;
    let aborted = server.post("/abort_request", r#"{"rid": "second"}"#).await;
    assert_eq!(aborted.status, 200);
    let answer = waiting.await.expect("the request ends").json();
    // SGLang's waiting-queue abort object (`wire::aborts`): no prompt_tokens, no output.
    let meta = &answer["meta_info"];
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "abort", "message": "Abort in waiting queue"})
    );
    assert_eq!(meta["completion_tokens"], 0);
    assert!(meta.get("prompt_tokens").is_none(), "{meta}");
    let answer = running.await.expect("the request ends").json();
    assert_eq!(answer["meta_info"]["completion_tokens"], 250);
}

#[tokio::test]
async fn an_abort_reaches_a_running_sample_through_the_loop_and_a_pause_in_abort_mode_ends_the_batch()
 {
    let server = InProcess::new(pooled(10_000));
    let mut body = batch(1, 5000, true);
    body["input_ids"] = body["input_ids"][0].clone();
    body["rid"] = json!("long");
    let task = spawn_generate(&server, body);
    wait_for(&server, |l| l["num_running_reqs"] == 1).await;
    assert_eq!(
        server
            .post("/abort_request", r#"{"rid": "long"}"#)
            .await
            .status,
        200
    );
    let answer = task.await.expect("the request ends").json();
    let meta = &answer["meta_info"];
    assert_eq!(meta["finish_reason"]["type"], "abort");
    assert_eq!(meta["finish_reason"]["message"], "Aborted");
    let made = meta["completion_tokens"].as_u64().expect("tokens");
    assert!((1..5000).contains(&made), "{made}");

    // A pause in abort mode: the batch ends aborted while generation stays paused.
    let task = spawn_generate(&server, batch(2, 5000, true));
    wait_for(&server, |l| l["num_running_reqs"] == 2).await;
    assert_eq!(server.post("/pause_generation", "{}").await.status, 200);
    let answer = task.await.expect("the request ends").json();
    for item in items(&answer) {
        assert_eq!(
            item["meta_info"]["finish_reason"]["type"], "abort",
            "{item}"
        );
    }
    assert_eq!(server.post("/continue_generation", "{}").await.status, 200);
}

/// A server on the logical clock that waits for nothing: its times are the sums of its steps' times.
fn logical(max_total_tokens: Option<u64>) -> InProcess {
    InProcess::new(logical_config(max_total_tokens))
}

fn logical_config(max_total_tokens: Option<u64>) -> ServerConfig {
    ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        max_total_tokens,
        latency: mock_server::LatencyConfig {
            ttft_ms: 100.0,
            ttft_per_token_ms: 1.0,
            itl_ms: 10.0,
            itl_per_sample_ms: 2.0,
            clock: mock_server::Clock::Logical,
            clock_speed: f64::INFINITY,
            ..mock_server::LatencyConfig::default()
        },
        ..ServerConfig::default()
    }
}

fn e2e_of(answer: &Value) -> Vec<f64> {
    items(answer)
        .iter()
        .map(|item| {
            item["meta_info"]["e2e_latency"]
                .as_f64()
                .expect("e2e_latency")
        })
        .collect()
}

#[tokio::test]
async fn on_the_logical_clock_a_request_takes_the_sum_of_its_steps_times() {
    // A prefill step of 20 prompt tokens (100 + 20 ms), then four decode steps of one sample (10 + 2 ms each).
    let server = logical(None);
    let mut body = batch(1, 5, true);
    body["input_ids"] = body["input_ids"][0].clone();
    let answer = server.generate(&body).await.json();
    assert_eq!(e2e_of(&answer), [0.168]);
    // Two samples, the first with the prompt just sent, whose first 19 tokens the prefix cache holds: one
    // prefill step of 1 + 20 tokens (121 ms), then four decode steps of two samples (14 ms each).
    let answer = server.generate(&batch(2, 5, true)).await.json();
    assert_eq!(e2e_of(&answer), [0.177, 0.177]);
}

#[tokio::test]
async fn the_logical_clock_reproduces_a_loaded_run_exactly() {
    // Eight samples through a pool of 600 tokens: queued, three at a time, two retracted. Every run of the
    // same batch gives the same times, retractions and tokens.
    let body = batch(8, 200, false);
    let first = logical(Some(600)).generate(&body).await.json();
    let second = logical(Some(600)).generate(&body).await.json();
    assert_eq!(schedule_of(&first), schedule_of(&second));
    let retracted: u64 = schedule_of(&first).iter().filter_map(|(_, r)| *r).sum();
    assert!(retracted > 0, "the pool retracts");
    let (e2e, again) = (e2e_of(&first), e2e_of(&second));
    assert_eq!(e2e, again);
    // The first sample: a prefill step of two prompts (140 ms), one of the third's (120 ms), 179 decode steps
    // of three samples (16 ms each) up to the retraction of the third at 180 tokens, 20 of two (14 ms).
    let alone = (140.0 + 120.0 + 179.0 * 16.0 + 20.0 * 14.0) / 1000.0;
    assert!((e2e[0] - alone).abs() < 1e-9, "{} vs {alone}", e2e[0]);
    // A retracted sample waits for others and is prefilled again: it finishes last.
    let last = e2e.iter().copied().fold(0.0, f64::max);
    assert_eq!(e2e[7], last);
}

#[tokio::test]
async fn a_request_longer_than_the_pool_is_cut_to_fit_or_refused_and_never_waits_for_ever() {
    // `max_req_len = min(context_len - 1, max_total_tokens - 1)` = 299: a completion is cut to
    // 299 - 20 - 1 = 278 tokens, which an empty pool admits (20 + 278 + 1 < 300).
    let server = InProcess::new(pooled(300));
    let mut body = batch(1, 1000, true);
    body["input_ids"] = body["input_ids"][0].clone();
    body["sampling_params"]["min_new_tokens"] = json!(0);
    let answer = server.generate(&body).await.json();
    assert_eq!(answer["meta_info"]["completion_tokens"], 278);
    assert_eq!(answer["meta_info"]["finish_reason"]["type"], "length");
    // One token shorter than `max_req_len - 5`: the completion is cut to 299 - 293 - 1.
    body["input_ids"] = json!(vec![7; 293]);
    let answer = server.generate(&body).await.json();
    assert_eq!(answer["meta_info"]["completion_tokens"], 5);
    // A prompt of `max_req_len - 5` tokens or more is the scheduler's 400. All three answers are what the running
    // 0.5.23 answered with `--max-total-tokens 300`.
    body["input_ids"] = json!(vec![7; 294]);
    let reply = server.generate(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        reply.json(),
        json!({"error": {"message": "Input length (294 tokens) exceeds the maximum allowed length (294 tokens). \
            Use a shorter input or enable --allow-auto-truncate."}})
    );
}

// On the paused clock, which moves only when every task waits: a loop that stopped stepping would let the
// timeout fire at once instead of hanging the test.
#[tokio::test(start_paused = true)]
async fn a_prompt_prefilled_in_chunks_takes_a_step_per_chunk_and_then_runs() {
    // `--chunked-prefill-size 8`: a 20-token prompt takes prefill steps of 8 (108 ms), 8 (108 ms) and 4 with
    // its first token (104 ms), then four decode steps of one sample (12 ms each).
    let server = InProcess::new(ServerConfig {
        chunked_prefill_size: 8,
        ..logical_config(None)
    });
    let mut body = batch(1, 5, true);
    body["input_ids"] = body["input_ids"][0].clone();
    let hour = std::time::Duration::from_secs(3600);
    let reply = tokio::time::timeout(hour, server.generate(&body))
        .await
        .expect("the loop steps through every chunk");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    assert_eq!(answer["meta_info"]["completion_tokens"], 5);
    assert_eq!(e2e_of(&answer), [0.368]);
}
