//! Property tests against a live server (one runtime and one server per test function, bounded cases;
//! `PROPTEST_CASES` raises them): for random valid requests, streamed or not, every logprob list lines up
//! with `output_ids`, every value is a finite log-probability of the model's own distribution, top lists are
//! descending and complete, and streams reassemble to exactly what the oracle computes.

use std::sync::{Arc, OnceLock};

use mock_server::ServerConfig;
use mock_server::model::Model;
use mock_server::oracle::normalize_body;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use serde_json::{Value, json};

use crate::common::{Live, Mode, reassemble, sse_json};

const VOCAB: u32 = 151_936;

/// Bounded by default; `PROPTEST_CASES` raises the count. Failures are kept in `proptest-regressions/`.
fn runner(name: &'static str) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(name))),
        ..Config::default()
    })
}

/// One runtime and one live server for a whole test function.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    live: Live,
}

fn fixture(cell: &'static OnceLock<Fixture>, config: ServerConfig) -> &'static Fixture {
    cell.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let live = runtime.block_on(Live::start(config));
        Fixture { runtime, live }
    })
}

prop_compose! {
    fn request()(
        prompt in prop::collection::vec(0..VOCAB, 1..12),
        text in prop::option::of("[a-z ,.?!]{1,24}"),
        max_new_tokens in 0u32..20,
        temperature in prop::sample::select(vec![0.0, 0.3, 0.7, 1.0, 1.6]),
        top_k in prop::option::of(1u32..50),
        top_p in prop::sample::select(vec![1.0, 0.95, 0.5]),
        min_p in prop::sample::select(vec![0.0, 0.05]),
        top_logprobs_num in 0usize..5,
        token_ids in prop::collection::vec(0..VOCAB, 0..3),
        start_at_zero in any::<bool>(),
        n in 1usize..3,
        seed in prop::option::of(any::<u32>()),
        stop in prop::sample::select(vec![vec![], vec![","], vec![".", "?"], vec!["ba"]]),
        ignore_eos in any::<bool>(),
        stream in any::<bool>(),
        batch in any::<bool>(),
    ) -> Value {
        let mut sampling = json!({"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
                                  "min_p": min_p, "ignore_eos": ignore_eos, "stop": stop, "n": n});
        if let Some(k) = top_k { sampling["top_k"] = json!(k); }
        if let Some(s) = seed { sampling["sampling_seed"] = json!(s); }
        let mut body = json!({"sampling_params": sampling, "return_logprob": true, "top_logprobs_num": top_logprobs_num,
                              "token_ids_logprob": token_ids, "stream": stream});
        match (text, batch) {
            (Some(t), true) => body["text"] = json!([t, "second prompt"]),
            (Some(t), false) => body["text"] = json!(t),
            (None, true) => body["input_ids"] = json!([prompt.clone(), [7, 8, 9]]),
            (None, false) => body["input_ids"] = json!(prompt.clone()),
        }
        if start_at_zero {
            // Position 0 is inside every prompt; a start past the prompt is the error path of the validation tests.
            body["logprob_start_len"] = json!(0);
        }
        body
    }
}

fn fail(msg: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(msg.into())
}

/// Check one finished item (a non-stream object or a reassembled final state) against the invariants.
fn check_item(
    request: &Value,
    item: &Value,
    ids: &[Value],
    lps: &[Value],
    tops: &[Value],
) -> Result<(), TestCaseError> {
    let meta = &item["meta_info"];
    let completion = meta["completion_tokens"]
        .as_u64()
        .ok_or_else(|| fail("completion_tokens"))? as usize;
    prop_assert_eq!(ids.len(), completion);
    prop_assert_eq!(lps.len(), completion);
    prop_assert_eq!(
        meta["output_token_logprobs_length"].as_u64(),
        Some(completion as u64)
    );
    let k = request["top_logprobs_num"].as_u64().unwrap_or(0) as usize;
    if k > 0 {
        prop_assert_eq!(tops.len(), completion);
    }
    for (i, (id, entry)) in ids.iter().zip(lps).enumerate() {
        prop_assert_eq!(&entry[1], id, "entry {} id", i);
        let lp = entry[0]
            .as_f64()
            .ok_or_else(|| fail(format!("logprob {i} is {}", entry[0])))?;
        prop_assert!(lp.is_finite() && lp <= 0.0, "logprob {} = {}", i, lp);
        prop_assert!(entry[2].is_null());
        if k > 0 {
            let list = tops[i].as_array().ok_or_else(|| fail("top list"))?;
            prop_assert_eq!(list.len(), k);
            let values: Vec<f64> = list.iter().filter_map(|t| t[0].as_f64()).collect();
            prop_assert_eq!(values.len(), k, "top values are finite");
            prop_assert!(
                values.windows(2).all(|w| w[0] >= w[1]),
                "top list descending: {:?}",
                values
            );
            prop_assert!(values.iter().all(|v| *v <= 0.0));
        }
    }
    Ok(())
}

/// The reported output logprobs are the model's log-probabilities at each context (that each distribution
/// sums to one is checked id by id in `model::dist`).
fn check_against_model(
    model: &Model,
    prompt: &[u32],
    request: &Value,
    ids: &[u32],
    lps: &[f64],
) -> Result<(), TestCaseError> {
    let temperature = request["sampling_params"]["temperature"]
        .as_f64()
        .unwrap_or(1.0);
    let report_t = if temperature < 1e-6 { 1.0 } else { temperature };
    let mut context = prompt.to_vec();
    for (i, (&id, &lp)) in ids.iter().zip(lps).enumerate() {
        let dist = model.distribution(&context, report_t, &[]);
        let want = dist.logprob(id) as f32;
        prop_assert_eq!(lp as f32, want, "position {} token {}", i, id);
        context.push(id);
    }
    Ok(())
}

/// A finished item: its object (or last stream meta), output ids, output logprobs and top lists.
type Finished = (Value, Vec<Value>, Vec<Value>, Vec<Value>);

static DEFAULT_SERVER: OnceLock<Fixture> = OnceLock::new();

#[test]
fn logprobs_line_up_and_are_the_models_probabilities() {
    let fx = fixture(&DEFAULT_SERVER, ServerConfig::default());
    let model: Arc<Model> = Arc::clone(fx.live.oracle.model());
    let mut runner = runner("proptest-regressions/properties-logprobs.txt");
    let result = runner.run(&request(), |request| {
        let reply = fx
            .runtime
            .block_on(fx.live.post_json("/generate", &request));
        prop_assert_eq!(reply.status.as_u16(), 200, "{}", reply.text());
        let stream = request["stream"] == true;
        let bytes = serde_json::to_vec(&request).map_err(|e| fail(e.to_string()))?;
        let plan = fx
            .live
            .oracle
            .plan(&bytes)
            .map_err(|e| fail(e.to_string()))?;
        let items: Vec<Finished> = if stream {
            reassemble(&sse_json(&reply.body), Mode::Cumulative)
                .into_iter()
                .map(|r| {
                    (
                        json!({"meta_info": r.last_meta}),
                        r.output_ids,
                        r.output_token_logprobs,
                        r.output_top_logprobs,
                    )
                })
                .collect()
        } else {
            let body = reply.json();
            let list = match body {
                Value::Array(items) => items,
                item => vec![item],
            };
            list.into_iter()
                .map(|item| {
                    let ids = item["output_ids"].as_array().cloned().unwrap_or_default();
                    let lps = item["meta_info"]["output_token_logprobs"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let tops = item["meta_info"]["output_top_logprobs"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    (item, ids, lps, tops)
                })
                .collect()
        };
        prop_assert_eq!(items.len(), plan.items.len());
        for ((item, ids, lps, tops), planned) in items.iter().zip(&plan.items) {
            check_item(&request, item, ids, lps, tops)?;
            let ids: Vec<u32> = ids
                .iter()
                .filter_map(Value::as_u64)
                .map(|x| x as u32)
                .collect();
            let values: Vec<f64> = lps.iter().filter_map(|e| e[0].as_f64()).collect();
            check_against_model(&model, &planned.request.input_ids, &request, &ids, &values)?;
            // Input logprobs: the first covered position is null, the rest finite and non-positive.
            let input = item["meta_info"]["input_token_logprobs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let start = planned.request.logprob_start;
            prop_assert_eq!(input.len(), planned.request.input_ids.len() - start);
            for (j, entry) in input.iter().enumerate() {
                prop_assert_eq!(
                    entry[1].as_u64(),
                    Some(u64::from(planned.request.input_ids[start + j]))
                );
                if j == 0 {
                    prop_assert!(entry[0].is_null());
                } else {
                    prop_assert!(entry[0].as_f64().is_some_and(|v| v.is_finite() && v <= 0.0));
                }
            }
            // token_ids_logprob: one list per output position, in the requested order.
            let wanted = &planned.request.token_ids_logprob;
            if !wanted.is_empty() && !stream {
                let per = item["meta_info"]["output_token_ids_logprobs"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                prop_assert_eq!(per.len(), ids.len());
                for list in &per {
                    let got: Vec<u64> = list
                        .as_array()
                        .map(|l| l.iter().filter_map(|t| t[1].as_u64()).collect())
                        .unwrap_or_default();
                    let want: Vec<u64> = wanted.iter().map(|&x| u64::from(x)).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}

static INCREMENTAL_SERVER: OnceLock<Fixture> = OnceLock::new();

#[test]
fn incremental_streams_reassemble_to_the_oracle() {
    let config = ServerConfig {
        incremental_streaming_output: true,
        seed: 11,
        ..ServerConfig::default()
    };
    let fx = fixture(&INCREMENTAL_SERVER, config);
    let mut runner = runner("proptest-regressions/properties-incremental.txt");
    let result = runner.run(&request(), |mut request| {
        request["stream"] = json!(true);
        let reply = fx
            .runtime
            .block_on(fx.live.post_json("/generate", &request));
        prop_assert_eq!(reply.status.as_u16(), 200);
        let bytes = serde_json::to_vec(&request).map_err(|e| fail(e.to_string()))?;
        let expected = fx
            .live
            .oracle
            .expect(&bytes)
            .map_err(|e| fail(e.to_string()))?;
        let plan = fx
            .live
            .oracle
            .plan(&bytes)
            .map_err(|e| fail(e.to_string()))?;
        let rebuilt = reassemble(&sse_json(&reply.body), Mode::Incremental);
        let mut want = expected.body.clone();
        normalize_body(&mut want, &plan);
        let want = match want {
            Value::Array(items) => items,
            item => vec![item],
        };
        prop_assert_eq!(rebuilt.len(), want.len());
        for (got, want) in rebuilt.iter().zip(&want) {
            prop_assert_eq!(&json!(got.text), &want["text"]);
            prop_assert_eq!(&json!(got.output_ids), &want["output_ids"]);
            prop_assert_eq!(
                &json!(got.output_token_logprobs),
                &want["meta_info"]["output_token_logprobs"]
            );
            prop_assert_eq!(
                &got.last_meta["finish_reason"],
                &want["meta_info"]["finish_reason"]
            );
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}
