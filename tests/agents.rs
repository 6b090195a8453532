//! slime's multi-agent example against a scripted mock: every branch of the reward shaping, the shared rollout
//! id, and every emitted sample's logprobs equal to the oracle's token for token.

use mock_server::{ScriptFinish, ScriptRule};
use rollout_cli::prompts::LabeledPrompt;
use rollout_cli::reward::math_reward;
use rollout_cli::scripted;
use rollout_client::multi_agent::{self, MultiAgentConfig, SELECTOR_MARKER};
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::train;
use rollout_client::{Reward, Sample, SamplingParams};
use serde_json::Value;

use crate::common::{Mock, Provenance, assert_aligned, assert_oracle_replay, block_on, runtime};

fn prompts() -> Vec<LabeledPrompt> {
    [
        ("What is 17 + 25?", "42"),
        ("What is 9 * 8?", "72"),
        ("What is 100 - 37?", "63"),
        ("What is 7 * 13?", "91"),
        ("What is 2 + 2?", "4"),
    ]
    .iter()
    .map(|&(p, l)| LabeledPrompt {
        prompt: p.into(),
        label: l.into(),
    })
    .collect()
}

fn config(ctx: usize) -> MultiAgentConfig {
    MultiAgentConfig {
        rollout_max_context_len: ctx,
        sampling_params: SamplingParams {
            max_new_tokens: Some(96),
            sampling_seed: Some(1),
            ..SamplingParams::default()
        },
        tokenizer: PromptTokenizer::Server,
        shuffle_seed: Some(3),
        ..MultiAgentConfig::default()
    }
}

fn reward(s: &Sample) -> f64 {
    match s.reward {
        Some(Reward::Scalar(r)) => r,
        _ => f64::NAN,
    }
}

fn by_agent<'a>(samples: &'a [Sample], agent: &str) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.metadata["agent"] == Value::String(agent.into()))
        .collect()
}

#[test]
fn every_branch_of_the_reward_shaping_with_oracle_logprobs() {
    let rt = runtime();
    let prompts = prompts();
    let mut server = scripted::mock_config(&prompts);
    // Prompt 4: the selector answers `Judgment: 2`, which names the second (identical) rewrite.
    server.scripted.insert(
        0,
        ScriptRule {
            prompt_contains: format!("{SELECTOR_MARKER}{}", prompts[4].prompt),
            answer: "<think>Both agree.</think>Judgment: 2".into(),
            finish_reason: ScriptFinish::Stop,
        },
    );
    let mock = Mock::start(&rt, server);
    let client = mock.client();
    let cfg = config(4096);
    let outcomes: Vec<Vec<Sample>> = block_on(&rt, async {
        let mut out = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let mut input = Sample::new(multi_agent::wrap_user_turn(&p.prompt), vec![]);
            input.index = Some(100 + i);
            input.label = Some(p.label.clone());
            let label = p.label.clone();
            let rm = move |s: &Sample| math_reward(&s.response, &label);
            out.push(multi_agent::run_agent_system(&client, &input, &cfg, &rm).await);
        }
        out
    });

    // (solvers, rewriters, selectors, solver/rewriter reward, selector reward) per prompt, by the
    // scripted behaviour of `scripted::Script::of(i)`.
    let expected: [(usize, usize, usize, f64, f64); 5] = [
        (5, 5, 1, 1.2, 1.2), // correct, Judgment: 1 -> everything x 1.2
        (5, 5, 1, 0.8, 0.0), // correct, Judgment: 9 is out of range -> selector 0, rest x 0.8
        (5, 5, 1, 0.0, 0.0), // wrong answers -> rewards 0 whatever the shaping
        (5, 0, 0, 0.0, 0.0), // unscripted: no `</think>`, so no solution; solvers x 0.8 only
        (5, 5, 1, 1.2, 1.2), // correct, Judgment: 2
    ];
    for (i, (samples, &(ns, nr, nsel, r, rsel))) in outcomes.iter().zip(&expected).enumerate() {
        let solvers = by_agent(samples, "solver");
        let rewriters = by_agent(samples, "rewriter");
        let selectors = by_agent(samples, "selector");
        assert_eq!(
            (solvers.len(), rewriters.len(), selectors.len()),
            (ns, nr, nsel),
            "prompt {i}"
        );
        for s in solvers.iter().chain(&rewriters) {
            assert!(
                (reward(s) - r).abs() < 1e-12,
                "prompt {i}: {} vs {r}",
                reward(s)
            );
        }
        for s in &selectors {
            assert!(
                (reward(s) - rsel).abs() < 1e-12,
                "prompt {i} selector: {}",
                reward(s)
            );
        }
        for s in samples {
            assert_aligned(s);
            assert_eq!(
                s.rollout_id,
                Some(100 + i as u64),
                "siblings share the rollout id"
            );
            let seed = s.metadata["sampling_seed"].as_u64().expect("seed");
            let sp = SamplingParams {
                sampling_seed: Some(seed),
                ..cfg.sampling_params.clone()
            };
            let budget = 96.min(4096 - s.prompt_len()) as u32;
            assert_oracle_replay(&mock.oracle, s, &sp, Provenance::default(), |_| budget);
        }
    }
    // Scripted solvers expose their reasoning and answer as the example's ad-hoc attributes.
    let first = by_agent(&outcomes[0], "solver")[0];
    assert_eq!(first.extra["response_content"], "The answer is 42.");
    assert_eq!(first.extra["reason_content"], "<think>What is 17 + 25?");

    // All of it is one GRPO batch (slime's batch-wide fallback group) with rollout logprobs.
    let mut all: Vec<Sample> = outcomes.into_iter().flatten().collect();
    let out = train::grpo_advantages(
        &mut all,
        &train::slime_options(1, prompts.len()),
        &grpo::AdvantageConfig::default(),
        None,
    )
    .expect("grpo");
    assert!(out.loss.is_finite());
    assert!(out.advantages.per_sample().iter().any(|a| *a > 0.0));
    assert!(out.advantages.per_sample().iter().any(|a| *a < 0.0));
}

/// `generate_response` records no sample when the context leaves no budget (slime returns `None`).
#[test]
fn no_budget_no_sample() {
    let rt = runtime();
    let mock = Mock::start(&rt, scripted::mock_config(&prompts()));
    let client = mock.client();
    let samples = block_on(&rt, async {
        let mut input = Sample::new("What is 17 + 25?", vec![]);
        input.index = Some(0);
        multi_agent::run_agent_system(&client, &input, &config(8), &|_: &Sample| 1.0).await
    });
    assert!(samples.is_empty(), "{} samples", samples.len());
}
