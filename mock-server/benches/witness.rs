//! Criterion benchmarks of the witness: auditing 1,000 samples of 4,096 response tokens against the ledger the
//! server recorded while answering them, and reading such a batch from the body the Python package sends.
//!
//! Groups: `audit_1000x4096` with `single_turn` (one answer of 4,096 tokens per sample), `four_turns` (four
//! answers of 1,020 tokens with 5 environment tokens between them, each turn's prompt the whole context before
//! it), `parse_typed_arrays` (the batch as typed arrays, as `sglang_mock.audit` sends it) and `parse_lists` (the
//! same batch as JSON lists, as a dumped JSONL file holds it).

use std::hint::black_box;

use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::BodyExt;
use mock_server::witness::{AuditOptions, AuditSample, Layout, audit, parse_samples};
use mock_server::{AppState, ServerConfig, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const SAMPLES: usize = 1000;
const TOKENS: usize = 4096;

/// The output ids and logprobs of one `/generate` answer of `tokens` tokens to `prompt`.
async fn generate(state: &AppState, prompt: &[u32], tokens: usize) -> (Vec<u32>, Vec<f32>) {
    let body = json!({"input_ids": prompt, "return_logprob": true,
                      "sampling_params": {"max_new_tokens": tokens, "ignore_eos": true}});
    let request = Request::post("/generate")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("valid request");
    let response = app(state.clone())
        .oneshot(request)
        .await
        .expect("infallible router");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("in-memory body")
        .to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).expect("JSON answer");
    let entries = answer["meta_info"]["output_token_logprobs"]
        .as_array()
        .expect("logprobs")
        .clone();
    let ids = entries.iter().map(|e| e[1].as_u64().unwrap_or(0) as u32);
    let lps = entries.iter().map(|e| e[0].as_f64().unwrap_or(0.0) as f32);
    (ids.collect(), lps.collect())
}

/// A server with a ledger, and `SAMPLES` faithful samples of `turns` generations each.
fn served(turns: usize) -> (AppState, Vec<AuditSample>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let state = AppState::new(ServerConfig {
        ledger: true,
        ledger_max_mib: 1 << 14,
        ..ServerConfig::default()
    })
    .expect("valid config");
    let env = [300u32, 301, 302, 303, 304];
    let per_turn = (TOKENS - env.len() * (turns - 1)) / turns;
    let samples = runtime.block_on(async {
        let mut samples = Vec::with_capacity(SAMPLES);
        for k in 0..SAMPLES as u32 {
            let prompt: Vec<u32> = (0..64).map(|i| 1000 + k * 64 + i).collect();
            let mut sample = AuditSample {
                id: k.to_string(),
                layout: Some(Layout::Generic),
                prompt: prompt.clone(),
                logprobs: Some(Vec::new()),
                ..AuditSample::default()
            };
            for turn in 0..turns {
                if turn > 0 {
                    sample.response.extend_from_slice(&env);
                    sample.loss_mask.extend([0; 5]);
                    if let Some(l) = sample.logprobs.as_mut() {
                        l.extend([Some(0.0); 5]);
                    }
                }
                let context: Vec<u32> = prompt.iter().chain(&sample.response).copied().collect();
                let last = turn + 1 == turns;
                let n = if last {
                    TOKENS - sample.response.len()
                } else {
                    per_turn
                };
                let (ids, lps) = generate(&state, &context, n).await;
                sample.loss_mask.extend(std::iter::repeat_n(1, ids.len()));
                sample.response.extend(ids);
                if let Some(l) = sample.logprobs.as_mut() {
                    l.extend(lps.into_iter().map(Some));
                }
            }
            assert_eq!(sample.response.len(), TOKENS);
            samples.push(sample);
        }
        samples
    });
    (state, samples)
}

/// The batch as `sglang_mock.audit` sends it: numeric columns as typed arrays.
fn typed_body(samples: &[AuditSample]) -> Vec<u8> {
    let b64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let typed = |dtype: &str, n: usize, bytes: Vec<u8>| json!({"dtype": dtype, "shape": [n], "b64": b64(bytes)});
    let out: Vec<Value> = samples
        .iter()
        .map(|s| {
            let ints = |ids: &[u32]| {
                ids.iter()
                    .flat_map(|&i| i64::from(i).to_le_bytes())
                    .collect()
            };
            let lps: Vec<u8> = s
                .logprobs
                .iter()
                .flatten()
                .flat_map(|l| f64::from(l.unwrap_or(f32::NAN)).to_le_bytes())
                .collect();
            json!({
                "prompt_ids": typed("int64", s.prompt.len(), ints(&s.prompt)),
                "response_ids": typed("int64", s.response.len(), ints(&s.response)),
                "loss_mask": typed("uint8", s.loss_mask.len(), s.loss_mask.clone()),
                "logprobs": typed("float64", s.response.len(), lps),
            })
        })
        .collect();
    serde_json::to_vec(&json!({"samples": out})).expect("serialisable")
}

/// The same batch as JSON lines of lists.
fn list_body(samples: &[AuditSample]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in samples {
        let lps: Vec<f32> = s
            .logprobs
            .iter()
            .flatten()
            .map(|l| l.unwrap_or(0.0))
            .collect();
        serde_json::to_writer(
            &mut out,
            &json!({"prompt_ids": s.prompt, "response_ids": s.response, "loss_mask": s.loss_mask,
                    "logprobs": lps}),
        )
        .expect("serialisable");
        out.push(b'\n');
    }
    out
}

fn audits(c: &mut Criterion) {
    let mut group = c.benchmark_group("audit_1000x4096");
    group.sample_size(10);
    group.throughput(Throughput::Elements((SAMPLES * TOKENS) as u64));
    for (name, turns) in [("single_turn", 1), ("four_turns", 4)] {
        let (state, samples) = served(turns);
        let ledger = state.ledger().expect("a ledger");
        let records = ledger.read();
        let report = audit(&records, &samples, &AuditOptions::default(), None);
        assert!(report.ok, "{}", report.text());
        assert_eq!(report.matched_items, SAMPLES * turns);
        group.bench_function(name, |b| {
            b.iter(|| {
                audit(
                    &records,
                    black_box(&samples),
                    &AuditOptions::default(),
                    None,
                )
            });
        });
        if turns == 1 {
            let typed = typed_body(&samples);
            let lists = list_body(&samples);
            assert_eq!(parse_samples(&typed, None).expect("typed").samples, samples);
            assert_eq!(
                parse_samples(&lists, None).expect("lists").samples.len(),
                SAMPLES
            );
            group.bench_function("parse_typed_arrays", |b| {
                b.iter(|| parse_samples(black_box(&typed), None).expect("typed"));
            });
            group.bench_function("parse_lists", |b| {
                b.iter(|| parse_samples(black_box(&lists), None).expect("lists"));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, audits);
criterion_main!(benches);
