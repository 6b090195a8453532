//! Helpers: one runtime and one mock server per test function, oracle replay of samples, proptest config.

use std::future::Future;

use mock_server::{Oracle, ServerConfig};
use proptest::test_runner::{Config, TestRunner};
use rollout_client::request::{GenerateRequest, IdsInput, SamplingParams};
use rollout_client::{Client, RetryPolicy, Sample, StreamMode};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

/// Cases per property test: `PROPTEST_CASES` when set, else a number small enough for a
/// two-core machine.
pub(crate) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A runner with bounded cases; shrinking is bounded too so a failure is reported quickly.
pub(crate) fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: cases(default_cases),
        max_shrink_iters: 64,
        // Cases are driven by hand (one runtime per test), so there is no source file to persist
        // failures next to; a failure prints its minimal input instead.
        failure_persistence: None,
        ..Config::default()
    })
}

/// One multi-threaded runtime for one test function.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A mock server on 127.0.0.1:0 inside `rt`, with its oracle; it stops with the runtime.
pub(crate) struct Mock {
    pub(crate) url: String,
    pub(crate) oracle: Oracle,
}

impl Mock {
    pub(crate) fn start(rt: &Runtime, config: ServerConfig) -> Mock {
        let oracle = Oracle::new(config.clone()).expect("mock config");
        let url = rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let url = format!("http://{}", listener.local_addr().expect("addr"));
            tokio::spawn(mock_server::run(listener, config, std::future::pending()));
            url
        });
        Mock { url, oracle }
    }

    /// A client without retries, so a fault surfaces as the first error.
    pub(crate) fn client(&self) -> Client {
        Client::builder(&self.url)
            .stream_mode(StreamMode::Auto)
            .retry(RetryPolicy {
                max_retries: 0,
                ..RetryPolicy::default()
            })
            .build()
            .expect("client")
    }
}

/// Runs one async case on the test's runtime.
pub(crate) fn block_on<F: Future>(rt: &Runtime, f: F) -> F::Output {
    rt.block_on(f)
}

/// The invariants every sample that reaches grpo must satisfy (the #1976 contract).
pub(crate) fn assert_aligned(s: &Sample) {
    let n = s.response_length();
    assert_eq!(
        s.rollout_log_probs().len(),
        n,
        "rollout_log_probs vs response_length"
    );
    assert_eq!(s.loss_mask().len(), n, "loss_mask vs response_length");
    assert_eq!(
        s.tokens().len(),
        s.prompt_len() + n,
        "tokens vs prompt + response"
    );
    for (i, &lp) in s.rollout_log_probs().iter().enumerate() {
        assert!(lp.is_finite() && lp <= 0.0, "logprob {i} is {lp}");
    }
}

/// Replays every generated run of `s` (maximal runs of loss mask 1, each one generation that
/// started at that response offset) through the oracle and asserts the tokens and logprobs are
/// the oracle's, token for token, and that environment tokens have logprob 0.
///
/// `params` are the rollout's sampling parameters with `max_new_tokens` the whole budget;
/// `budget_at(offset)` gives the `max_new_tokens` of the request made at that response offset.
pub(crate) fn assert_oracle_replay(
    oracle: &Oracle,
    s: &Sample,
    params: &SamplingParams,
    budget_at: impl Fn(usize) -> u32,
) {
    let prompt_len = s.prompt_len();
    let mask = s.loss_mask();
    let lps = s.rollout_log_probs();
    let resp = s.response_tokens();
    let mut p = 0;
    while p < mask.len() {
        if mask[p] == 0 {
            assert_eq!(lps[p], 0.0, "environment token {p} has a logprob");
            p += 1;
            continue;
        }
        let mut req_params = params.clone();
        req_params.max_new_tokens = Some(budget_at(p));
        let req = GenerateRequest {
            input_ids: Some(IdsInput::One(s.tokens()[..prompt_len + p].to_vec())),
            sampling_params: req_params,
            return_logprob: true,
            ..GenerateRequest::default()
        };
        let body = serde_json::to_vec(&req).expect("encode");
        let expected = oracle
            .expect(&body)
            .expect("the oracle accepts the request");
        let item = &expected.items[0];
        let end = p + item.output_ids.len();
        assert!(
            end <= mask.len(),
            "oracle output runs past the sample at {p}"
        );
        assert_eq!(
            &resp[p..end],
            item.output_ids.as_slice(),
            "ids at offset {p}"
        );
        assert_eq!(
            &lps[p..end],
            item.output_logprobs.as_slice(),
            "logprobs at offset {p}, token for token"
        );
        assert!(mask[p..end].iter().all(|&m| m == 1));
        p = end;
        // A zero-length generation cannot occur with a positive budget; guard against looping.
        if item.output_ids.is_empty() {
            break;
        }
    }
}
