//! The radix prefix cache against the running releases: the request sequences of `scripts/cache_probe.py`,
//! whose `cached_tokens` each release reported (`mock-server/conform/cache/<release>.json`), replayed on the
//! mock; and what follows from them: the oracle's history, `/flush_cache`, `--disable-radix-cache`, pages,
//! concurrency, the OpenAI report and the tokens themselves.

use axum::http::StatusCode;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::InProcess;

/// The tokens a step generated: the last `completion_tokens` of its `output_ids` (0.5.3 writes the prompt's
/// last five ids before them), as the probe reads them.
fn generated(item: &Value) -> Vec<u64> {
    let ids = item["output_ids"].as_array().expect("output_ids");
    let n = item["meta_info"]["completion_tokens"]
        .as_u64()
        .expect("completion_tokens") as usize;
    ids[ids.len() - n..]
        .iter()
        .map(|v| v.as_u64().expect("an id"))
        .collect()
}

/// The `/generate` body of a probe step, as `cache_probe.py`'s `body_of` writes it.
fn body_of(step: &Value, prompts: &[Option<Value>], answers: &[Option<Value>]) -> Value {
    let input_ids = match step.get("extend") {
        Some(k) => {
            let k = k.as_u64().expect("a step index") as usize;
            let mut ids: Vec<Value> = prompts[k]
                .clone()
                .expect("a prompt")
                .as_array()
                .expect("ids")
                .clone();
            ids.extend(
                generated(answers[k].as_ref().expect("an answer"))
                    .into_iter()
                    .map(Value::from),
            );
            ids.extend(step["append"].as_array().expect("append").iter().cloned());
            Value::Array(ids)
        }
        None => step["input_ids"].clone(),
    };
    let mut sampling = json!({
        "max_new_tokens": step.get("max_new_tokens").cloned().unwrap_or(json!(4)),
        "temperature": step.get("temperature").cloned().unwrap_or(json!(0.0)),
    });
    if let Some(n) = step.get("n") {
        sampling["n"] = n.clone();
    }
    let mut body = json!({"input_ids": input_ids, "sampling_params": sampling});
    for key in ["return_logprob", "logprob_start_len"] {
        if let Some(value) = step.get(key) {
            body[key] = value.clone();
        }
    }
    body
}

/// What a step observed: `cached_tokens`, a list of them for a batch, or "flushed".
fn cached_of(answer: &Value) -> Value {
    match answer {
        Value::Array(items) => items
            .iter()
            .map(|i| i["meta_info"]["cached_tokens"].clone())
            .collect(),
        item => item["meta_info"]["cached_tokens"].clone(),
    }
}

async fn flush(server: &InProcess) {
    let reply = server.post("/flush_cache", "{}").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
}

/// Replays one recording's scenarios on a mock answering as its release; returns the differences.
async fn replay(recording: &Value, config: ServerConfig) -> Vec<String> {
    let server = InProcess::new(config);
    let mut differences = Vec::new();
    for scenario in recording["scenarios"].as_array().expect("scenarios") {
        flush(&server).await;
        let (mut prompts, mut answers, mut observed) = (Vec::new(), Vec::new(), Vec::new());
        for step in scenario["steps"].as_array().expect("steps") {
            if step.get("op").is_some_and(|op| op == "flush") {
                flush(&server).await;
                prompts.push(None);
                answers.push(None);
                observed.push(json!("flushed"));
                continue;
            }
            let body = body_of(step, &prompts, &answers);
            let reply = server.generate(&body).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
            let answer = reply.json();
            observed.push(cached_of(&answer));
            prompts.push(Some(body["input_ids"].clone()));
            answers.push(Some(answer));
        }
        let want = &scenario["observed"];
        if Value::Array(observed.clone()) != *want {
            differences.push(format!(
                "{} ({}): the release reported {want}, the mock {}",
                scenario["name"],
                scenario["shows"].as_str().unwrap_or(""),
                Value::Array(observed)
            ));
        }
    }
    differences
}

#[tokio::test]
async fn cached_tokens_are_what_each_running_release_reported() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conform/cache");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the recordings")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    let mut replayed = Vec::new();
    for name in &names {
        let recording: Value =
            serde_json::from_slice(&std::fs::read(dir.join(name)).expect("readable"))
                .expect("JSON");
        let version: SglangVersion = recording["release"]
            .as_str()
            .expect("a release")
            .parse()
            .expect("a known release");
        let config = ServerConfig {
            sglang_version: version,
            page_size: recording["page_size"].as_u64().expect("page_size") as u32,
            ..ServerConfig::default()
        };
        let differences = replay(&recording, config).await;
        assert!(
            differences.is_empty(),
            "{name}:\n{}",
            differences.join("\n")
        );
        replayed.push((recording["release"].clone(), recording["page_size"].clone()));
    }
    // Every release, and a page size above 1.
    assert_eq!(
        replayed,
        [
            json!(["0.5.15", 1]),
            json!(["0.5.23", 16]),
            json!(["0.5.23", 1]),
            json!(["0.5.3", 1])
        ]
        .map(|pair| (pair[0].clone(), pair[1].clone()))
    );
}

fn ids(start: u64, n: u64) -> Vec<u64> {
    (start..start + n).collect()
}

fn greedy(input_ids: &[u64], max_new_tokens: u32) -> Value {
    json!({"input_ids": input_ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
}

async fn cached(server: &InProcess, body: &Value) -> Value {
    let reply = server.generate(body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    cached_of(&reply.json())
}

#[tokio::test]
async fn the_oracle_predicts_cached_tokens_from_the_same_history() {
    let server = InProcess::new(ServerConfig::default());
    let p = ids(1000, 64);
    let mut shared = p[..40].to_vec();
    shared.extend(ids(2000, 30));
    let bodies = [
        greedy(&p, 4),
        greedy(&p, 4),
        greedy(&shared, 4),
        json!({"input_ids": [p.clone(), shared.clone()], "sampling_params": {"max_new_tokens": 3, "n": 2, "temperature": 1.0}}),
        json!({"input_ids": p, "return_logprob": true, "logprob_start_len": 7, "sampling_params": {"max_new_tokens": 2}}),
    ];
    let mut predicted = Vec::new();
    for body in &bodies {
        let served = cached(&server, body).await;
        let expected = server
            .oracle
            .expect(&serde_json::to_vec(body).unwrap())
            .expect("the oracle answers");
        let want = match &expected.body {
            Value::Array(_) => cached_of(&expected.body),
            item => cached_of(item),
        };
        assert_eq!(served, want, "served and predicted for {body}");
        predicted.push(want);
    }
    // By hand: a new prompt, then all but its last token; 40 shared; with n = 2 each prompt is cached whole
    // before its samples run; logprobs from position 7 stop the hit there.
    assert_eq!(
        predicted,
        [
            json!(0),
            json!(63),
            json!(40),
            json!([63, 63, 69, 69]),
            json!(7)
        ]
    );
    server.oracle.flush_cache();
    flush(&server).await;
    let body = greedy(&ids(1000, 64), 1);
    assert_eq!(cached(&server, &body).await, json!(0));
}

#[tokio::test]
async fn without_the_radix_cache_nothing_hits() {
    let server = InProcess::new(ServerConfig {
        disable_radix_cache: true,
        ..ServerConfig::default()
    });
    let body = greedy(&ids(1000, 64), 4);
    for _ in 0..2 {
        assert_eq!(cached(&server, &body).await, json!(0));
    }
    let reply = server.generate(&body).await.json();
    assert_eq!(reply["meta_info"]["cached_tokens_details"], Value::Null);
}

#[tokio::test]
async fn a_hit_is_whole_pages() {
    let server = InProcess::new(ServerConfig {
        page_size: 16,
        ..ServerConfig::default()
    });
    let p = ids(1000, 64);
    assert_eq!(cached(&server, &greedy(&p, 4)).await, json!(0));
    // All but the last token is 63 tokens: three whole pages.
    assert_eq!(cached(&server, &greedy(&p, 4)).await, json!(48));
    let mut q = p[..40].to_vec();
    q.extend(ids(5000, 30));
    assert_eq!(cached(&server, &greedy(&q, 4)).await, json!(32));
}

#[tokio::test]
async fn past_the_pool_the_least_recently_used_prompt_is_evicted() {
    let server = InProcess::new(ServerConfig {
        max_total_tokens: Some(150),
        ..ServerConfig::default()
    });
    let (a, b, c) = (ids(1000, 64), ids(2000, 64), ids(3000, 64));
    // Each leaves its prompt and 3 of its 4 output tokens: 67 tokens.
    cached(&server, &greedy(&a, 4)).await;
    cached(&server, &greedy(&b, 4)).await;
    // a is used again, so b is now the least recently used.
    assert_eq!(cached(&server, &greedy(&a, 1)).await, json!(63));
    // c's prompt does not fit beside both: b goes.
    cached(&server, &greedy(&c, 4)).await;
    assert_eq!(cached(&server, &greedy(&a, 1)).await, json!(63));
    assert_eq!(cached(&server, &greedy(&b, 1)).await, json!(0));
}

/// Tokens and logprobs are the model's whatever the cache holds: the same seeded request with and without
/// hits answers alike but for the hit counts.
#[tokio::test]
async fn a_hit_changes_no_token_and_no_logprob() {
    let server = InProcess::new(ServerConfig::default());
    let body = json!({"input_ids": ids(1000, 64), "return_logprob": true, "top_logprobs_num": 3,
        "logprob_start_len": 0,
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.8, "sampling_seed": 5}});
    let strip = |mut v: Value| {
        for key in [
            "cached_tokens",
            "cached_tokens_details",
            "e2e_latency",
            "response_sent_to_client_ts",
            "id",
        ] {
            v["meta_info"][key] = Value::Null;
        }
        v
    };
    let first = server.generate(&body).await.json();
    let again = server
        .generate(&json!({"input_ids": ids(1000, 64), "sampling_params": {"max_new_tokens": 1}}))
        .await;
    assert_eq!(cached_of(&again.json()), json!(63));
    let second = server.generate(&body).await.json();
    // logprob_start_len 0 caps the hit at 0; the same body without it hits.
    assert_eq!(cached_of(&second), json!(0));
    assert_eq!(strip(first.clone()), strip(second));
    let mut without_start = body.clone();
    without_start
        .as_object_mut()
        .unwrap()
        .remove("logprob_start_len");
    let plain = server.generate(&without_start).await.json();
    assert_eq!(cached_of(&plain), json!(63));
    assert_eq!(plain["output_ids"], first["output_ids"]);
    assert_eq!(
        plain["meta_info"]["output_token_logprobs"],
        first["meta_info"]["output_token_logprobs"]
    );
    assert_eq!(
        plain["meta_info"]["output_top_logprobs"],
        first["meta_info"]["output_top_logprobs"]
    );
}

/// A request still decoding is matched by its prompt (0.5.3, 0.5.23) or its prompt and first token
/// (0.5.15), as the releases answered while a 3,000-token request ran (`scripts/cache_probe.py`'s notes).
#[tokio::test(start_paused = true)]
async fn a_running_request_is_matched_by_what_its_prefill_left() {
    for (version, with_first) in [
        (SglangVersion::V0_5_3, 64),
        (SglangVersion::V0_5_15, 65),
        (SglangVersion::V0_5_23, 64),
    ] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            latency: mock_server::LatencyConfig {
                itl_ms: 10.0,
                ..mock_server::LatencyConfig::default()
            },
            ..ServerConfig::default()
        });
        let p = ids(1000, 64);
        let solo = server.generate(&greedy(&p, 20)).await.json();
        let out = generated(&solo);
        flush(&server).await;
        let long = {
            let server = server.clone();
            let body = json!({"input_ids": p.clone(), "sampling_params": {"max_new_tokens": 20, "temperature": 0, "ignore_eos": true}});
            tokio::spawn(async move { server.generate(&body).await.json() })
        };
        tokio::time::sleep(std::time::Duration::from_millis(55)).await;
        let mut probe = p.clone();
        probe.extend(&out[..10]);
        probe.push(7);
        // The probe itself has no latency to wait out before its match.
        assert_eq!(
            cached(&server, &greedy(&probe, 1)).await,
            json!(with_first),
            "{version}"
        );
        let done = long.await.expect("joins");
        assert_eq!(generated(&done), out, "{version}: the same greedy tokens");
    }
}

#[tokio::test]
async fn openai_answers_report_the_hits_with_enable_cache_report() {
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Say something about caches."}],
        "max_tokens": 3});
    let completion = json!({"model": "m", "prompt": ["first prompt here", "second prompt here"], "n": 2,
        "max_tokens": 2});
    for version in SglangVersion::all() {
        let details = |reply: &Value| reply["usage"]["prompt_tokens_details"].clone();
        let plain = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        for _ in 0..2 {
            let reply = plain
                .post("/v1/chat/completions", chat.to_string())
                .await
                .json();
            assert_eq!(
                details(&reply),
                Value::Null,
                "{version}: no report without the flag"
            );
        }
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            enable_cache_report: true,
            ..ServerConfig::default()
        });
        let first = server
            .post("/v1/chat/completions", chat.to_string())
            .await
            .json();
        let zero = match version.cache_report {
            mock_server::release::CacheReport::FirstChoiceAlways => json!({"cached_tokens": 0}),
            _ => Value::Null,
        };
        assert_eq!(details(&first), zero, "{version}");
        let again = server
            .post("/v1/chat/completions", chat.to_string())
            .await
            .json();
        let prompt = again["usage"]["prompt_tokens"].as_u64().unwrap();
        assert_eq!(
            details(&again),
            json!({"cached_tokens": prompt - 1}),
            "{version}"
        );
        // Two prompts with n = 2: each prompt is cached whole first, so every choice hits all but one token.
        let reply = server
            .post("/v1/completions", completion.to_string())
            .await
            .json();
        let choices = reply["choices"].as_array().unwrap().len();
        assert_eq!(choices, 4);
        let prompt_tokens = reply["usage"]["prompt_tokens"].as_u64().unwrap();
        let summed = match version.cache_report {
            // Every choice: twice the first choices' hits.
            mock_server::release::CacheReport::EveryChoice => 2 * (prompt_tokens - 2),
            _ => prompt_tokens - 2,
        };
        assert_eq!(
            details(&reply),
            json!({"cached_tokens": summed}),
            "{version}"
        );
    }
}

#[tokio::test]
async fn metrics_count_the_hits() {
    let server = InProcess::new(ServerConfig {
        enable_metrics: true,
        ..ServerConfig::default()
    });
    let p = ids(1000, 64);
    let metric = |text: &str, name: &str| {
        text.lines()
            .find(|line| line.starts_with(name))
            .map(|line| line.rsplit(' ').next().unwrap().to_owned())
    };
    server.generate(&greedy(&p, 4)).await;
    let text = server.get("/metrics").await.text();
    assert_eq!(
        metric(&text, "sglang:cache_hit_rate"),
        Some("0.0".to_owned())
    );
    assert_eq!(
        metric(&text, "sglang:cached_tokens_total{"),
        None,
        "no sample before a hit"
    );
    server.generate(&greedy(&p, 4)).await;
    let mut q = p[..32].to_vec();
    q.extend(ids(4000, 32));
    server.generate(&greedy(&q, 4)).await;
    let text = server.get("/metrics").await.text();
    // The last prefill: 32 of 64 prompt tokens; in all, 63 + 32.
    assert_eq!(
        metric(&text, "sglang:cache_hit_rate"),
        Some("0.5".to_owned())
    );
    assert!(
        text.contains("sglang:cached_tokens_total{cache_source=\"device\",model_name="),
        "{text}"
    );
    assert_eq!(
        metric(&text, "sglang:cached_tokens_total{"),
        Some("95.0".to_owned())
    );
}
