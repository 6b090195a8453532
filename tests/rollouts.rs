//! Random valid rollouts against the mock, end to end: every sample that reaches grpo is aligned, finite,
//! non-positive and equal to the oracle token for token, and GRPO accepts the batch.

use futures_util::future::join_all;
use grpo::{
    AdvantageConfig, Aggregation, BatchOptions, BehaviourLogProbs, LogProbs, PolicyLossConfig,
    RatioLevel,
};
use mock_server::ServerConfig;
use mock_server::{ScriptFinish, ScriptRule};
use proptest::prelude::*;
use rollout_client::multi_agent::{self, MultiAgentConfig};
use rollout_client::request::IdsInput;
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::train::{self, sample_parts};
use rollout_client::{GenerateRequest, Reward, Sample, SamplingParams};

use crate::common::{
    Mock, Provenance, Tool, assert_aligned, assert_oracle_replay, block_on, runner, runtime,
    with_channels,
};

/// A random valid rollout configuration.
#[derive(Debug, Clone)]
struct Case {
    prompts: Vec<Vec<u32>>,
    n: usize,
    max_new_tokens: u32,
    temperature: f32,
    top_p: f32,
    top_k: i32,
    stop: Option<Vec<String>>,
    env_turns: usize,
    env_tokens: Vec<u32>,
    multi_agent: bool,
    max_context_len: usize,
    stream: bool,
    seed: u64,
    rewards: Vec<bool>,
    /// Ask for the routed experts (on a server that has them).
    routes: bool,
    /// Ask for the sampling masks (on a server that has them, when the sampling has a bounded support).
    masks: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let prompt = prop::collection::vec(
        prop_oneof![0u32..256, 256u32..151_000, Just(151_934u32)],
        1..10,
    );
    (
        prop::collection::vec(prompt, 1..4),
        1usize..5,
        0u32..24,
        prop::sample::select(vec![0.0f32, 0.5, 1.0, 1.7]),
        prop::sample::select(vec![0.3f32, 0.9, 1.0]),
        prop::sample::select(vec![-1i32, 1, 8, 200]),
        prop::option::of(prop::sample::select(vec![
            vec!["a".to_owned()],
            vec!["ka".to_owned(), ".".to_owned()],
        ])),
        0usize..4,
        prop::collection::vec(256u32..151_000, 1..5),
        (
            any::<bool>(),
            prop::sample::select(vec![16usize, 160, 4096]),
            any::<bool>(),
            0u64..1_000_000,
            prop::collection::vec(any::<bool>(), 64),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                prompts,
                n,
                max_new_tokens,
                temperature,
                top_p,
                top_k,
                stop,
                env_turns,
                env_tokens,
                (multi_agent, max_context_len, stream, seed, rewards, routes, masks),
            )| Case {
                prompts,
                n,
                max_new_tokens,
                temperature,
                top_p,
                top_k,
                stop,
                env_turns,
                env_tokens,
                multi_agent,
                max_context_len,
                stream,
                seed,
                rewards,
                routes,
                // SGLang returns a support only for greedy sampling or a bounded top-k.
                masks: masks && (temperature == 0.0 || top_k > 0),
            },
        )
}

fn params(c: &Case) -> SamplingParams {
    SamplingParams {
        max_new_tokens: Some(c.max_new_tokens),
        temperature: Some(c.temperature),
        top_p: Some(c.top_p),
        top_k: Some(c.top_k),
        stop: c.stop.clone(),
        ..SamplingParams::default()
    }
}

/// Groups of multi-turn samples, each replayed through the oracle.
async fn grouped(mock: &Mock, c: &Case) -> Vec<Sample> {
    let client = mock.client();
    let mut out = Vec::new();
    for (g, prompt) in c.prompts.iter().enumerate() {
        let members = (0..c.n).map(|i| {
            let client = &client;
            async move {
                let mut s = Sample::new("p", prompt.clone());
                s.group_index = Some(g);
                s.index = Some(g * c.n + i);
                let mut sp = params(c);
                sp.sampling_seed = Some(c.seed + (g * c.n + i) as u64);
                let cfg = RolloutConfig {
                    sampling_params: sp,
                    stream: c.stream,
                    return_routed_experts: c.routes,
                    return_sampling_mask: c.masks,
                    ..RolloutConfig::default()
                };
                let mut tool = Tool {
                    turns: c.env_turns,
                    tokens: c.env_tokens.clone(),
                };
                rollout::multi_turn(client, &mut s, &cfg, &mut tool, c.env_turns + 1)
                    .await
                    .expect("a valid rollout succeeds");
                let provenance = Provenance {
                    environment_tokens: (c.env_turns - tool.turns) * c.env_tokens.len(),
                    policy_masked_tokens: 0,
                    ..Provenance::default()
                };
                (s, cfg.sampling_params, provenance)
            }
        });
        for (s, sp, provenance) in join_all(members).await {
            assert_aligned(&s);
            let budget = c.max_new_tokens as usize;
            assert_oracle_replay(&mock.oracle, &s, &sp, provenance, |p| (budget - p) as u32);
            out.push(s);
        }
    }
    out
}

/// slime's multi-agent system per prompt; each emitted sample is replayed through the oracle.
async fn agents(mock: &Mock, c: &Case) -> Vec<Sample> {
    let client = mock.client();
    let config = MultiAgentConfig {
        num_parallel: 2,
        rollout_max_context_len: c.max_context_len,
        sampling_params: SamplingParams {
            sampling_seed: Some(c.seed),
            ..params(c)
        },
        stream: c.stream,
        return_routed_experts: c.routes,
        return_sampling_mask: c.masks,
        tokenizer: PromptTokenizer::Server,
        shuffle_seed: Some(c.seed),
        ..MultiAgentConfig::default()
    };
    let mut out = Vec::new();
    for (g, prompt) in c.prompts.iter().enumerate() {
        let text: String = prompt
            .iter()
            .map(|&t| char::from(b'a' + (t % 26) as u8))
            .collect();
        let mut input = Sample::new(text, vec![]);
        input.index = Some(g);
        input.label = Some("42".into());
        let rm = |_: &Sample| 1.0;
        let samples = multi_agent::run_agent_system(&client, &input, &config, &rm).await;
        assert!(samples.len() <= 2 * config.num_parallel + 1);
        for s in &samples {
            assert_aligned(s);
            assert_eq!(
                s.rollout_id,
                Some(g as u64),
                "siblings share the rollout id"
            );
            let seed = s.metadata["sampling_seed"].as_u64().expect("seed recorded");
            let sp = SamplingParams {
                sampling_seed: Some(seed),
                ..config.sampling_params.clone()
            };
            let budget =
                (c.max_new_tokens as usize).min(c.max_context_len.saturating_sub(s.prompt_len()));
            assert!(
                budget > 0,
                "a sample is only recorded with a positive budget"
            );
            // Agents have no environment turns: every response token is the model's and trained.
            assert_oracle_replay(&mock.oracle, s, &sp, Provenance::default(), |_| {
                budget as u32
            });
        }
        out.extend(samples);
    }
    out
}

#[test]
fn random_rollouts_reach_grpo_aligned_and_equal_to_the_oracle() {
    // Every agent's prompt gets a scripted answer with a `</think>`, so multi-agent cases reach the
    // rewriters and the selector whenever the budget lets the answer finish.
    let rule = |marker: &str, answer: &str| ScriptRule {
        prompt_contains: marker.to_owned(),
        answer: answer.to_owned(),
        finish_reason: ScriptFinish::Stop,
    };
    let config = ServerConfig {
        scripted: vec![
            rule(multi_agent::SELECTOR_MARKER, "<think>ok</think>Judgment: 1"),
            rule(
                multi_agent::REWRITER_MARKER,
                "<think>ok</think>The answer is 42.",
            ),
            rule(
                multi_agent::SOLVER_MARKER,
                "<think>hm</think>The answer is 42.",
            ),
        ],
        ledger: true,
        ..with_channels()
    };
    check_random_rollouts(config, false, 12);
}

/// The same on a 0.5.3 server (delta `output_ids` in streams) with every generation streamed.
#[test]
fn random_streamed_rollouts_on_a_mid_server() {
    let config = ServerConfig {
        sglang_version: mock_server::SglangVersion::V0_5_3,
        ledger: true,
        ..ServerConfig::default()
    };
    check_random_rollouts(config, true, 6);
}

/// The same on a server with `--incremental-streaming-output` and a stream interval of 3.
#[test]
fn random_streamed_rollouts_on_an_incremental_server() {
    let config = ServerConfig {
        incremental_streaming_output: true,
        stream_interval: 3,
        ledger: true,
        ..with_channels()
    };
    check_random_rollouts(config, true, 6);
}

fn check_random_rollouts(server: ServerConfig, force_stream: bool, default_cases: u32) {
    let rt = runtime();
    let channels = server.enable_return_routed_experts;
    let mock = Mock::start(&rt, server);
    runner(default_cases)
        .run(&case(), |mut c| {
            c.stream |= force_stream;
            c.routes &= channels;
            c.masks &= channels;
            let mut samples = block_on(&rt, async {
                if c.multi_agent {
                    agents(&mock, &c).await
                } else {
                    grouped(&mock, &c).await
                }
            });
            if samples.is_empty() {
                // Only the multi-agent budget check can leave a prompt without samples.
                prop_assert!(c.multi_agent);
                return Ok(());
            }
            // The server's witness agrees with the oracle replay: every sample kept what was served.
            let report = mock.audit_samples(&samples);
            prop_assert!(report.ok, "{}", report.text());
            if !c.multi_agent {
                prop_assert_eq!(samples.len(), c.prompts.len() * c.n);
                for (s, &r) in samples.iter_mut().zip(c.rewards.iter().cycle()) {
                    s.reward = Some(Reward::Scalar(if r { 1.0 } else { 0.0 }));
                }
            }
            let options = BatchOptions {
                // Every generated token was routed and labelled: a batch that requires both takes the samples.
                require_routed_experts: c.routes,
                require_weight_versions: channels,
                behaviour: if c.masks {
                    BehaviourLogProbs::SamplingMask
                } else {
                    BehaviourLogProbs::Rollout
                },
                ..train::slime_options(c.n, c.prompts.len())
            };
            let outcome =
                train::grpo_advantages(&mut samples, &options, &AdvantageConfig::default(), None)
                    .expect("GRPO accepts every sample the client built");
            for (i, s) in samples.iter().enumerate() {
                prop_assert!(outcome.advantages.sample(i).is_finite());
                prop_assert!(s.extra["advantage"].is_f64());
            }
            prop_assert!(outcome.loss.is_finite());
            // An off-policy step: the current policy moved a little away from the rollout policy.
            let current: Vec<f32> = samples
                .iter()
                .flat_map(|s| sample_parts(s, None).rollout_log_probs.unwrap_or_default())
                .enumerate()
                .map(|(i, lp)| (lp - 0.01 * (i % 7) as f32).min(0.0))
                .collect();
            let out = outcome
                .batch
                .policy_loss(
                    &outcome.advantages,
                    &LogProbs::new(&current),
                    &PolicyLossConfig {
                        use_rollout_log_probs: true,
                        eps_clip_high: 0.28,
                        ..PolicyLossConfig::default()
                    },
                )
                .expect("loss");
            prop_assert!(out.loss.is_finite() && out.ppo_kl.is_finite());
            prop_assert!((0.0..=1.0).contains(&out.pg_clipfrac));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// What the policy itself assigns to each response token of `s`, recomputed the way a trainer does it (one
/// forward pass over the whole sequence: the server's input logprobs at `temperature`), independently of the
/// logprobs the client stored. Environment tokens get 0.0, as the rollout stored for them.
fn recomputed_log_probs(mock: &Mock, s: &Sample, temperature: f32) -> Vec<f32> {
    let req = GenerateRequest {
        input_ids: Some(IdsInput::One(s.tokens().to_vec())),
        sampling_params: SamplingParams {
            max_new_tokens: Some(0),
            temperature: Some(temperature),
            ..SamplingParams::default()
        },
        return_logprob: true,
        // The first covered position reports null ([None] + raw[:-1]), so start one before the response.
        logprob_start_len: Some(s.prompt_len() as i64 - 1),
        ..GenerateRequest::default()
    };
    let expected = mock
        .oracle
        .expect(&serde_json::to_vec(&req).expect("encode"))
        .expect("the oracle accepts the request");
    let entries = expected.body["meta_info"]["input_token_logprobs"]
        .as_array()
        .expect("input logprobs")
        .clone();
    assert_eq!(entries.len(), s.response_length() + 1);
    entries[1..]
        .iter()
        .zip(s.loss_mask())
        .zip(s.response_tokens())
        .map(|((e, &m), &id)| {
            assert_eq!(e[1].as_u64(), Some(u64::from(id)), "the entry's token");
            if m == 1 {
                e[0].as_f64().expect("a logprob") as f32
            } else {
                0.0
            }
        })
        .collect()
}

/// `--use-rollout-logprobs` with samples the client built: the old policy is the rollout's stored logprobs and
/// the current policy is the same model recomputed by a forward pass, so every ratio is exactly 1, nothing is
/// clipped, and the loss is minus the aggregated advantage in every aggregation mode. A logprob dropped,
/// zero-filled or shifted by one position on the way makes some ratio differ from 1.
#[test]
fn rollout_logprobs_are_the_policys_own_so_every_ratio_is_one() {
    let rt = runtime();
    let mock = Mock::start(&rt, with_channels());
    runner(8)
        .run(&case(), |c| {
            let mut samples = block_on(&rt, async {
                if c.multi_agent {
                    agents(&mock, &c).await
                } else {
                    grouped(&mock, &c).await
                }
            });
            if samples.is_empty() {
                return Ok(());
            }
            for (s, &r) in samples.iter_mut().zip(c.rewards.iter().cycle()) {
                s.reward = Some(Reward::Scalar(if r { 1.0 } else { 0.0 }));
            }
            let options = train::slime_options(c.n, c.prompts.len());
            let outcome =
                train::grpo_advantages(&mut samples, &options, &AdvantageConfig::default(), None)
                    .expect("GRPO accepts every sample the client built");
            let (batch, advantages) = (&outcome.batch, &outcome.advantages);
            let current: Vec<f32> = samples
                .iter()
                .flat_map(|s| recomputed_log_probs(&mock, s, c.temperature))
                .collect();
            let lp = LogProbs::new(&current);
            let ratios = batch.ratios(&lp, true, RatioLevel::Token).expect("ratios");
            for i in 0..batch.len() {
                let mask = &batch.loss_mask()[batch.range(i)];
                for (t, (&r, &m)) in ratios.sample(i).iter().zip(mask).enumerate() {
                    prop_assert!(m == 0 || r == 1.0, "sample {i} token {t}: ratio {r}");
                }
            }
            let per_token: Vec<f32> = (0..batch.len())
                .flat_map(|i| advantages.tokens(i).into_owned())
                .collect();
            for aggregation in [
                Aggregation::TokenMean,
                Aggregation::SeqMeanTokenMean,
                Aggregation::SeqMeanTokenSum,
                Aggregation::SeqMeanTokenSumNorm { length: None },
                Aggregation::DrGrpo {
                    max_len: Some(64.0),
                },
            ] {
                let out = batch
                    .policy_loss(
                        advantages,
                        &lp,
                        &PolicyLossConfig {
                            use_rollout_log_probs: true,
                            eps_clip_high: 0.28,
                            aggregation,
                            ..PolicyLossConfig::default()
                        },
                    )
                    .expect("loss");
                let want = -batch.aggregate(&per_token, aggregation);
                prop_assert_eq!(out.pg_clipfrac, 0.0, "{:?}", aggregation);
                prop_assert_eq!(out.ppo_kl, 0.0, "{:?}", aggregation);
                prop_assert!(
                    (out.loss - want).abs() <= 1e-6 * want.abs().max(1e-6),
                    "{:?}: loss {} vs -aggregated advantage {}",
                    aggregation,
                    out.loss,
                    want
                );
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
