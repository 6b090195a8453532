//! Helpers: one runtime and one mock server per test function, oracle replay of samples, proptest config.

use std::future::Future;

use base64::Engine;

use mock_server::oracle::Oracle;
use mock_server::witness::{AuditOptions, Report, audit, parse_samples};
use mock_server::{Server, ServerConfig};
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rollout_client::request::{GenerateRequest, IdsInput, SamplingParams};
use rollout_client::rollout::{EnvTurn, Environment};
use rollout_client::{Client, RetryPolicy, Sample, StreamMode};
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
///
/// The cases are the same on every run (a fixed seed), so a run of the suite passes or fails for the code, never
/// for the draw; `PROPTEST_RNG_SEED` picks other cases and `PROPTEST_CASES` more of them (the scale runs in the
/// README do both).
pub(crate) fn runner(default_cases: u32) -> TestRunner {
    let defaults = Config::default();
    let rng_seed = match defaults.rng_seed {
        RngSeed::Random => RngSeed::Fixed(1976),
        chosen => chosen,
    };
    TestRunner::new(Config {
        cases: cases(default_cases),
        max_shrink_iters: 64,
        // Cases are driven by hand (one runtime per test), so there is no source file to persist
        // failures next to; a failure prints its minimal input instead.
        failure_persistence: None,
        rng_seed,
        ..defaults
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

/// A mock server on 127.0.0.1:0 inside `rt`, with its oracle; it stops when dropped.
pub(crate) struct Mock {
    pub(crate) url: String,
    pub(crate) oracle: Oracle,
    server: Server,
}

impl Mock {
    pub(crate) fn start(rt: &Runtime, config: ServerConfig) -> Mock {
        let server = rt
            .block_on(Server::start(ServerConfig { port: 0, ..config }))
            .expect("mock starts");
        Mock {
            url: server.url(),
            oracle: server.oracle(),
            server,
        }
    }

    /// The server's audit of samples written as a trainer writes them (JSON in any layout the witness reads:
    /// a `rollout_client::Sample` serialises in slime's), against its ledger (a server started with `ledger`).
    pub(crate) fn audit(&self, samples: &[serde_json::Value]) -> Report {
        let body = serde_json::to_vec(samples).expect("samples serialise");
        let batch = parse_samples(&body, None).unwrap_or_else(|e| panic!("the samples read: {e}"));
        let ledger = self
            .server
            .state()
            .ledger()
            .expect("a server started with a ledger");
        let model = self.server.state().model();
        audit(
            &ledger.read(),
            &batch.samples,
            &AuditOptions::default(),
            Some(model),
        )
    }

    /// [`Mock::audit`] of the client's own samples.
    pub(crate) fn audit_samples(&self, samples: &[Sample]) -> Report {
        let json: Vec<serde_json::Value> = samples
            .iter()
            .map(|s| serde_json::to_value(s).expect("a sample serialises"))
            .collect();
        self.audit(&json)
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

/// A 0.5.23 server that returns routed experts, for a small MoE (2 layers, 2 of 8 experts per token).
pub(crate) fn with_channels() -> ServerConfig {
    ServerConfig {
        enable_return_routed_experts: true,
        num_hidden_layers: 2,
        num_experts: 8,
        num_experts_per_tok: 2,
        ..ServerConfig::default()
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

/// What a test knows about a sample's response independently of the sample: how many tokens came from the
/// environment, and how many generated tokens a named policy was expected to mask.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Provenance {
    pub(crate) environment_tokens: usize,
    pub(crate) policy_masked_tokens: usize,
    /// The server re-captured the routes after the logprobs were made (a retract, miles #3277; the
    /// `retract-routes` fault): the sample's routes are expected to differ from the model's.
    pub(crate) rerouted: bool,
}

/// Replays every generation of `s` (each generated span, one request made at that response offset) through
/// the oracle, with no gap and no early exit:
///
/// - the response holds exactly `provenance.environment_tokens` tokens outside the spans, each with mask 0 and
///   logprob 0.0 (a generated token filed as environment output fails here);
/// - every span's ids and logprobs are the oracle's, token for token and bit for bit; a span may stop short of
///   the oracle's answer only where the server aborted it (the sample is ABORTED there, or the next span
///   resumes right after it);
/// - every generated token has mask 1, except exactly `provenance.policy_masked_tokens` of them;
/// - a sample that carries sampling masks holds, for every generated token, the support and the renormalised
///   logprob of the oracle's answer (bit for bit), and one that carries routes holds the rows the oracle routes
///   for its last generation, one per position up to its last generated token but that token.
///
/// `params` are the rollout's sampling parameters; `budget_at(offset)` gives the `max_new_tokens` of the
/// request made at that response offset.
pub(crate) fn assert_oracle_replay(
    oracle: &Oracle,
    s: &Sample,
    params: &SamplingParams,
    provenance: Provenance,
    budget_at: impl Fn(usize) -> u32,
) {
    let prompt_len = s.prompt_len();
    let (mask, lps, resp) = (s.loss_mask(), s.rollout_log_probs(), s.response_tokens());
    let spans = s.generated_spans();
    assert_eq!(
        s.response_length() - s.generated_tokens(),
        provenance.environment_tokens,
        "environment tokens: generated tokens filed as environment output, or the reverse"
    );
    let mut environment = vec![true; resp.len()];
    let mut untrained = 0;
    let masks = s.rollout_top_p_tokens().zip(s.rollout_sampling_log_probs());
    // The supports come from slime's top-p replay (patched 0.5.15) when the parameters ask for it, else from
    // 0.5.23's sampling mask.
    let top_p = params
        .custom_params
        .is_some_and(|c| c.return_top_p_token_ids);
    for (k, span) in spans.iter().enumerate() {
        let (p, end) = (span.start, span.end());
        environment[p..end].iter_mut().for_each(|e| *e = false);
        let mut req_params = params.clone();
        req_params.max_new_tokens = Some(budget_at(p));
        let req = GenerateRequest {
            input_ids: Some(IdsInput::One(s.tokens()[..prompt_len + p].to_vec())),
            sampling_params: req_params,
            return_logprob: true,
            return_routed_experts: s.rollout_routed_experts().is_some(),
            return_sampling_mask: masks.is_some() && !top_p,
            ..GenerateRequest::default()
        };
        let body = serde_json::to_vec(&req).expect("encode");
        let expected = oracle
            .expect(&body)
            .expect("the oracle accepts the request");
        let item = &expected.items[0];
        let cut_short = span.len < item.output_ids.len();
        let aborted_here = if k + 1 < spans.len() {
            spans[k + 1].start == end
        } else {
            s.status == rollout_client::SampleStatus::Aborted
        };
        assert!(
            span.len <= item.output_ids.len() && (!cut_short || aborted_here),
            "span {k} at offset {p} has {} tokens, the oracle's answer {}",
            span.len,
            item.output_ids.len()
        );
        assert_eq!(
            &resp[p..end],
            &item.output_ids[..span.len],
            "ids of span {k} at offset {p}"
        );
        assert_eq!(
            lps[p..end]
                .iter()
                .map(|lp| lp.to_bits())
                .collect::<Vec<_>>(),
            item.output_logprobs[..span.len]
                .iter()
                .map(|lp| lp.to_bits())
                .collect::<Vec<_>>(),
            "logprobs of span {k} at offset {p}, bit for bit"
        );
        untrained += mask[p..end].iter().filter(|&&m| m == 0).count();
        let meta = &expected.body["meta_info"];
        if let Some(((ids, offsets), sampling)) = masks {
            let top_p_rows = top_p.then(|| {
                let int32 = |key: &str| -> Vec<u32> {
                    base64::engine::general_purpose::STANDARD
                        .decode(meta[key].as_str().expect("top-p rows asked for"))
                        .expect("base64")
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect()
                };
                (int32("top_p_token_ids"), int32("top_p_token_offsets"))
            });
            for i in p..end {
                let want: Vec<u32> = match &top_p_rows {
                    Some((flat, bounds)) => {
                        flat[bounds[i - p] as usize..bounds[i - p + 1] as usize].to_vec()
                    }
                    None => meta["output_token_sampling_mask"][i - p]
                        .as_array()
                        .expect("a support per output token")
                        .iter()
                        .map(|id| id.as_u64().expect("an id") as u32)
                        .collect(),
                };
                let support = &ids[offsets[i] as usize..offsets[i + 1] as usize];
                assert_eq!(support, want, "the support of response token {i}");
                let want = match top_p {
                    // The patch renormalises the output logprobs themselves.
                    true => item.output_logprobs[i - p],
                    false => meta["output_token_sampling_logprobs"][i - p]
                        .as_f64()
                        .expect("the selected mode's logprob") as f32,
                };
                assert_eq!(
                    sampling[i].to_bits(),
                    want.to_bits(),
                    "the renormalised logprob of response token {i}"
                );
            }
        }
        if let Some(routes) = s.rollout_routed_experts()
            && k + 1 == spans.len()
        {
            let b64 = meta["routed_experts"].as_str().expect("routes asked for");
            let want: Vec<i32> = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64")
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            // The oracle's answer may run past an aborted span; the rows of the positions before are the same.
            assert_eq!(
                routes.rows(),
                prompt_len + end - 1,
                "a row per position up to the last generated token"
            );
            assert_eq!(
                routes.as_flat() == &want[..routes.as_flat().len()],
                !provenance.rerouted,
                "the routes of the last generation are {}the model's",
                if provenance.rerouted { "" } else { "not " }
            );
        }
    }
    assert_eq!(
        untrained, provenance.policy_masked_tokens,
        "generated tokens with loss mask 0"
    );
    for (i, _) in environment.iter().enumerate().filter(|(_, e)| **e) {
        assert_eq!(
            (mask[i], lps[i]),
            (0, 0.0),
            "environment token {i}: mask and logprob"
        );
    }
}

/// A tool that answers `turns` times with the same tokens.
pub(crate) struct Tool {
    pub(crate) turns: usize,
    pub(crate) tokens: Vec<u32>,
}

impl Environment for Tool {
    async fn step(&mut self, _sample: &Sample) -> Option<EnvTurn> {
        (self.turns > 0).then(|| {
            self.turns -= 1;
            EnvTurn {
                tokens: self.tokens.clone(),
                text: " [tool]".into(),
            }
        })
    }
}
