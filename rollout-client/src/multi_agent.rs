//! slime's multi-agent example (rl-reference section 3): solvers, rewriters, a selector, and reward shaping.
//!
//! The structure follows `examples/multi_agent/agent_system.py` as the reference describes it:
//!
//! - `num_parallel` (5) solver calls, each retried up to 3 times; RM rewards. No valid solution:
//!   solver rewards × `incorrect_reward_weight` (0.8), emit the solvers only.
//! - `num_parallel` rewriter calls, each seeing every valid solution, 1 try; RM rewards. No valid
//!   rewrite: solvers and rewriters × 0.8, emit both.
//! - one selector call over the valid rewrites, up to 10 tries, parsed with `Judgment:\s*(\d+)`
//!   (1-based, range-checked). No selector sample: solvers and rewriters × 0.8, emit both.
//!   Its reward is that of the first rewriter sample whose `response_content` contains the selected
//!   rewrite, or 0 when the answer is missing or unparsable.
//! - Final shaping: all × `correct_reward_weight` (1.2) when the selector's reward is 1, else × 0.8.
//! - Every emitted sample gets `rollout_id` = the input sample's `index`, and the list is shuffled.
//!
//! Unlike slime v0.3.0 (issue #1976), every emitted sample carries its rollout logprobs: the
//! samples are built through [`Sample::apply_turn`], which cannot store tokens without them, nor without the
//! routes or sampling masks the config asks for.

use futures_util::future::join_all;
use serde_json::Value;

use crate::client::Client;
use crate::error::RolloutError;
use crate::request::{GenerateRequest, SamplingParams};
use crate::sample::{Prompt, Reward, Sample};
use crate::splitmix::SplitMix64;
use crate::tokenize::PromptTokenizer;

/// The example's `MULTI_AGENT_CONFIGS` plus what `generate_with_multi_agents` copies onto `args`.
#[derive(Debug, Clone)]
pub struct MultiAgentConfig {
    /// Solvers and rewriters per prompt (`num_parallel`, 5).
    pub num_parallel: usize,
    pub incorrect_reward_weight: f64,
    pub correct_reward_weight: f64,
    /// `--rollout-max-context-len`: prompt plus response must fit.
    pub rollout_max_context_len: usize,
    /// `max_new_tokens` must be set; it is capped per call by the context left.
    pub sampling_params: SamplingParams,
    pub stream: bool,
    /// Ask every call for `meta_info.routed_experts`; each emitted sample then carries its routes.
    pub return_routed_experts: bool,
    /// Ask every call for the sampling masks (greedy sampling or a bounded `top_k`); each emitted sample then
    /// carries its supports and renormalised logprobs.
    pub return_sampling_mask: bool,
    pub tokenizer: PromptTokenizer,
    /// Seed of the final `random.shuffle`; `None` keeps the emission order.
    pub shuffle_seed: Option<u64>,
}

impl Default for MultiAgentConfig {
    fn default() -> Self {
        MultiAgentConfig {
            num_parallel: 5,
            incorrect_reward_weight: 0.8,
            correct_reward_weight: 1.2,
            rollout_max_context_len: 16384,
            sampling_params: SamplingParams {
                max_new_tokens: Some(8192),
                temperature: Some(1.0),
                ..SamplingParams::default()
            },
            stream: false,
            return_routed_experts: false,
            return_sampling_mask: false,
            tokenizer: PromptTokenizer::Server,
            shuffle_seed: None,
        }
    }
}

/// Which agent a call belongs to (the example's `results_dict` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Solver,
    Rewriter,
    Selector,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Solver => "solver",
            Role::Rewriter => "rewriter",
            Role::Selector => "selector",
        }
    }

    /// The example's `max_retries` per call.
    pub fn max_retries(self) -> usize {
        match self {
            Role::Solver => 3,
            Role::Rewriter => 1,
            Role::Selector => 10,
        }
    }
}

/// The reward model: a sample (with `response` and `label`) to a scalar reward.
pub type RewardFn = dyn Fn(&Sample) -> f64 + Send + Sync;

/// The solver's task; the problem follows the marker directly, so a scripted mock can match
/// `"{SOLVER_MARKER}{problem}"`.
pub const SOLVER_MARKER: &str = "Solve this problem step by step. Reason inside <think> </think>, then state the final answer.\n\nProblem: ";
/// The rewriter's task marker, followed directly by the problem.
pub const REWRITER_MARKER: &str = "Rewrite the candidate solutions below into one better solution. Reason inside <think> </think>, then state the final answer.\n\nProblem: ";
/// The selector's task marker, followed directly by the problem.
pub const SELECTOR_MARKER: &str = "Judge the candidate solutions below and pick the best one. Reason inside <think> </think>, then end with `Judgment: IDX`, where IDX is the number of the best solution.\n\nProblem: ";

/// Wraps one user turn in ChatML, as `_wrap_user_turn` does without a chat template.
pub fn wrap_user_turn(content: &str) -> String {
    format!("<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n")
}

/// Removes `<|im_start|>`/`<|im_end|>` (with an optional role name and the whitespace after it) and
/// trims, so chat-formatted text can be embedded in another prompt (`_strip_chat_tokens`).
pub fn strip_chat_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("<|im_") {
        out.push_str(&rest[..pos]);
        let after = &rest[pos..];
        let Some(tag_len) = ["<|im_start|>", "<|im_end|>"]
            .iter()
            .find(|t| after.starts_with(**t))
            .map(|t| t.len())
        else {
            out.push_str("<|im_");
            rest = &after["<|im_".len()..];
            continue;
        };
        let mut tail = &after[tag_len..];
        for role in ["user", "assistant", "system"] {
            if let Some(t) = tail.strip_prefix(role) {
                tail = t;
                break;
            }
        }
        rest = tail.trim_start();
    }
    out.push_str(rest);
    out.trim().to_owned()
}

fn candidates(solutions: &[String]) -> String {
    solutions
        .iter()
        .enumerate()
        .map(|(i, s)| format!("\n\nSolution {}:\n{}", i + 1, strip_chat_tokens(s)))
        .collect()
}

pub fn solver_prompt(problem: &str) -> String {
    wrap_user_turn(&format!("{SOLVER_MARKER}{problem}"))
}

pub fn rewriter_prompt(problem: &str, solutions: &[String]) -> String {
    wrap_user_turn(&format!(
        "{REWRITER_MARKER}{problem}{}",
        candidates(solutions)
    ))
}

pub fn selector_prompt(problem: &str, solutions: &[String]) -> String {
    wrap_user_turn(&format!(
        "{SELECTOR_MARKER}{problem}{}",
        candidates(solutions)
    ))
}

/// `extract_selected_solution_idx`: the first `Judgment:\s*(\d+)` match, 1-based, as a 0-based
/// index if it names one of `n` candidates.
pub fn extract_selected_solution_idx(response: &str, n: usize) -> Option<usize> {
    let mut rest = response;
    while let Some(pos) = rest.find("Judgment:") {
        let after = rest[pos + "Judgment:".len()..].trim_start();
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            // Like Python's int(), a huge number parses; it is then simply out of range.
            let idx = after[..digits].parse::<u128>().unwrap_or(u128::MAX);
            return match usize::try_from(idx) {
                Ok(k) if (1..=n).contains(&k) => Some(k - 1),
                _ => None,
            };
        }
        rest = &rest[pos + "Judgment:".len()..];
    }
    None
}

/// What the post-`</think>` content extraction of `generate_response` finds: `(reason, response)`
/// when the text (with `<|user|>` removed) has exactly one `</think>` followed by non-empty text.
pub fn split_think(text: &str) -> Option<(String, String)> {
    let text = text.replace("<|user|>", "");
    let mut parts = text.split("</think>");
    let (Some(reason), Some(response), None) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    if response.is_empty() {
        return None;
    }
    Some((reason.trim().to_owned(), response.trim().to_owned()))
}

/// One agent call's outcome: the recorded sample (absent only when the budget was used up before
/// the call) and the post-think content, if any.
#[derive(Debug, Clone)]
pub struct Response {
    pub sample: Option<Sample>,
    pub content: Option<String>,
}

/// `generate_response(args, prompt, key)`: a new sample derived from `template` for `prompt`, one
/// generation with logprobs, and the content after `</think>`.
///
/// Returns `Ok` with no sample when `min(max_new_tokens, context - prompt_len) <= 0`, as slime
/// returns `None` without recording one. Transport and response errors are `Err` (slime prints
/// them and returns `None`; here [`run_agent`] retries them), and never produce a sample.
pub async fn generate_response(
    client: &Client,
    config: &MultiAgentConfig,
    template: &Sample,
    prompt: &str,
    role: Role,
    sampling_seed: Option<u64>,
) -> Result<Response, RolloutError> {
    let ids = config.tokenizer.encode(client, prompt).await?;
    let prompt_len = ids.len();
    let mut sample = template.derive(prompt, ids);
    // Which agent wrote it (slime later calls this `policy_name`), and the seed, so a sample can be
    // reproduced on a deterministic server.
    sample
        .metadata
        .insert("agent".into(), Value::String(role.as_str().into()));
    let max_new = config.sampling_params.max_new_tokens.unwrap_or(128) as i64;
    let budget = max_new.min(config.rollout_max_context_len as i64 - prompt_len as i64);
    if budget <= 0 {
        return Ok(Response {
            sample: None,
            content: None,
        });
    }
    let mut params = config.sampling_params.clone();
    params.max_new_tokens = Some(budget as u32);
    if let Some(seed) = sampling_seed {
        params.sampling_seed = Some(seed);
        sample.metadata.insert("sampling_seed".into(), seed.into());
    }
    let req = GenerateRequest {
        stream: config.stream,
        return_routed_experts: config.return_routed_experts,
        return_sampling_mask: config.return_sampling_mask,
        ..GenerateRequest::from_ids(sample.tokens().to_vec(), params)
    };
    let turn = client.generate(&req).await?;
    // Tokens, logprobs, every channel asked for, text and the status (length, stop, and abort as at HEAD) in one
    // checked step.
    sample.apply_turn(&turn)?;
    let content = match split_think(&sample.response) {
        Some((reason, response)) => {
            sample
                .extra
                .insert("reason_content".into(), Value::String(reason));
            sample
                .extra
                .insert("response_content".into(), Value::String(response.clone()));
            Some(response)
        }
        None => {
            sample.extra.insert("reason_content".into(), Value::Null);
            sample.extra.insert("response_content".into(), Value::Null);
            None
        }
    };
    Ok(Response {
        sample: Some(sample),
        content,
    })
}

/// The `sampling_seed` of one agent call when the config has a base seed: distinct per role, worker
/// and attempt, so the parallel solvers of a deterministic server do not all answer alike.
pub fn call_seed(base: Option<u64>, role: Role, worker: usize, attempt: usize) -> Option<u64> {
    let role = match role {
        Role::Solver => 0,
        Role::Rewriter => 1,
        Role::Selector => 2,
    };
    // Kept below 2^63: SGLang stores the seed in an int64 (the mock answers 500 otherwise).
    base.map(|b| {
        b.wrapping_mul(4096)
            .wrapping_add(role * 1024 + worker as u64 * 16 + attempt as u64)
            & (i64::MAX as u64)
    })
}

/// `Agent.run`: up to `max_retries` attempts while the call fails; a failed call records nothing.
pub async fn run_agent(
    client: &Client,
    config: &MultiAgentConfig,
    template: &Sample,
    prompt: &str,
    role: Role,
    worker: usize,
) -> Response {
    for attempt in 1..=role.max_retries() {
        let seed = call_seed(config.sampling_params.sampling_seed, role, worker, attempt);
        match generate_response(client, config, template, prompt, role, seed).await {
            Ok(r) => return r,
            Err(e) => tracing::warn!(
                role = role.as_str(),
                attempt,
                error = &e as &dyn std::error::Error,
                "agent call failed"
            ),
        }
    }
    Response {
        sample: None,
        content: None,
    }
}

/// The samples of one role, in call order, and the valid contents.
fn collect(responses: Vec<Response>) -> (Vec<Sample>, Vec<String>) {
    let mut samples = Vec::new();
    let mut contents = Vec::new();
    for r in responses {
        samples.extend(r.sample);
        contents.extend(r.content);
    }
    (samples, contents)
}

fn set_rewards(samples: &mut [Sample], rm: &RewardFn) {
    for s in samples {
        s.reward = Some(Reward::Scalar(rm(s)));
    }
}

fn scale(samples: &mut [Sample], weight: f64) {
    for s in samples {
        if let Some(Reward::Scalar(r)) = &mut s.reward {
            *r *= weight;
        }
    }
}

fn scalar(s: &Sample) -> f64 {
    match s.reward {
        Some(Reward::Scalar(r)) => r,
        _ => 0.0,
    }
}

/// The problem text of a prompt: chat tokens stripped, messages joined by their contents.
pub fn problem_text(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Text(t) => strip_chat_tokens(t),
        Prompt::Messages(ms) => ms
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// `run_agent_system` followed by the shuffle of `generate_with_multi_agents`: every training
/// sample this prompt yields (0 to 11), with shaped rewards and a shared `rollout_id`.
pub async fn run_agent_system(
    client: &Client,
    sample: &Sample,
    config: &MultiAgentConfig,
    rm: &RewardFn,
) -> Vec<Sample> {
    let problem = problem_text(&sample.prompt);
    let n = config.num_parallel;

    let prompt = solver_prompt(&problem);
    let solvers =
        join_all((0..n).map(|w| run_agent(client, config, sample, &prompt, Role::Solver, w))).await;
    let (mut solver_samples, solutions) = collect(solvers);
    set_rewards(&mut solver_samples, rm);
    if solutions.is_empty() {
        scale(&mut solver_samples, config.incorrect_reward_weight);
        return finish(sample, config, solver_samples);
    }

    let prompt = rewriter_prompt(&problem, &solutions);
    let rewriters =
        join_all((0..n).map(|w| run_agent(client, config, sample, &prompt, Role::Rewriter, w)))
            .await;
    let (mut rewriter_samples, rewrites) = collect(rewriters);
    set_rewards(&mut rewriter_samples, rm);
    if rewrites.is_empty() {
        scale(&mut solver_samples, config.incorrect_reward_weight);
        scale(&mut rewriter_samples, config.incorrect_reward_weight);
        solver_samples.extend(rewriter_samples);
        return finish(sample, config, solver_samples);
    }

    let prompt = selector_prompt(&problem, &rewrites);
    let selector = run_agent(client, config, sample, &prompt, Role::Selector, 0).await;
    let Some(mut selector_sample) = selector.sample else {
        scale(&mut solver_samples, config.incorrect_reward_weight);
        scale(&mut rewriter_samples, config.incorrect_reward_weight);
        solver_samples.extend(rewriter_samples);
        return finish(sample, config, solver_samples);
    };
    let selected = selector
        .content
        .as_deref()
        .and_then(|c| extract_selected_solution_idx(c, rewrites.len()))
        .map(|i| rewrites[i].as_str());
    let selector_reward = selected
        .and_then(|text| {
            rewriter_samples.iter().find(|s| {
                s.extra
                    .get("response_content")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains(text))
            })
        })
        .map(scalar)
        .unwrap_or(0.0);
    selector_sample.reward = Some(Reward::Scalar(selector_reward));

    let weight = if selector_reward == 1.0 {
        config.correct_reward_weight
    } else {
        config.incorrect_reward_weight
    };
    let mut all = solver_samples;
    all.extend(rewriter_samples);
    all.push(selector_sample);
    scale(&mut all, weight);
    finish(sample, config, all)
}

/// Tags every sample with its role and the shared rollout id, then shuffles.
fn finish(input: &Sample, config: &MultiAgentConfig, mut samples: Vec<Sample>) -> Vec<Sample> {
    let rollout_id = input.index.map(|i| i as u64).or(input.rollout_id);
    for s in &mut samples {
        s.rollout_id = rollout_id;
    }
    if let Some(seed) = config.shuffle_seed {
        shuffle(&mut samples, seed);
    }
    samples
}

/// Fisher-Yates with SplitMix64, so a seed reproduces the order.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judgment_parsing() {
        let check = |text: &str, n: usize, want: Option<usize>| {
            assert_eq!(extract_selected_solution_idx(text, n), want, "{text:?}")
        };
        check("Judgment: 2", 3, Some(1));
        check("Judgment:2", 3, Some(1));
        check("blah\nJudgment:   1 because", 1, Some(0));
        check("Judgment: 0", 3, None);
        check("Judgment: 4", 3, None);
        check("Judgment: none. Judgment: 3", 3, Some(2));
        check("judgment: 1", 3, None);
        check("Judgment: 99999999999999999999999999999", 3, None);
        check("no verdict", 3, None);
    }

    #[test]
    fn think_split() {
        assert_eq!(
            split_think("<think> a </think> The answer is 42. "),
            Some(("<think> a".into(), "The answer is 42.".into()))
        );
        assert_eq!(split_think("no think"), None);
        assert_eq!(split_think("a</think>"), None);
        assert_eq!(split_think("a</think>b</think>c"), None);
        assert_eq!(
            split_think("x</think><|user|>y"),
            Some(("x".into(), "y".into()))
        );
    }

    #[test]
    fn chat_tokens_are_stripped() {
        assert_eq!(
            strip_chat_tokens("<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"),
            "What is 1+1?"
        );
        assert_eq!(strip_chat_tokens("plain <|im_x"), "plain <|im_x");
    }

    #[test]
    fn retries_per_role_are_the_examples() {
        // rl-reference.md section 3.3: solver max_retries=3, rewriter 1, selector 10.
        assert_eq!(Role::Solver.max_retries(), 3);
        assert_eq!(Role::Rewriter.max_retries(), 1);
        assert_eq!(Role::Selector.max_retries(), 10);
    }

    #[test]
    fn call_seeds_by_hand() {
        // base * 4096 + role * 1024 + worker * 16 + attempt, wrapped, then kept below 2^63.
        assert_eq!(call_seed(None, Role::Solver, 3, 1), None);
        assert_eq!(call_seed(Some(7), Role::Rewriter, 0, 1), Some(29_697));
        assert_eq!(call_seed(Some(1), Role::Selector, 3, 2), Some(6_194));
        assert_eq!(call_seed(Some(0), Role::Solver, 4, 3), Some(67));
        // 2^51 * 4096 = 2^63, which the int64 mask removes.
        assert_eq!(call_seed(Some(1 << 51), Role::Selector, 3, 2), Some(2_098));
        // 2^52 * 4096 wraps to 0 in 64 bits.
        assert_eq!(call_seed(Some(1 << 52), Role::Rewriter, 1, 1), Some(1_041));
    }

    #[test]
    fn candidate_solutions_are_numbered_from_one_without_chat_tokens() {
        let solutions = [
            "<|im_start|>assistant\nfour<|im_end|>".to_owned(),
            "4".to_owned(),
        ];
        let want = format!(
            "<|im_start|>user\n{REWRITER_MARKER}2+2?\n\nSolution 1:\nfour\n\nSolution 2:\n4<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(rewriter_prompt("2+2?", &solutions), want);
        let want = format!(
            "<|im_start|>user\n{SELECTOR_MARKER}2+2?\n\nSolution 1:\nfour\n\nSolution 2:\n4<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(selector_prompt("2+2?", &solutions), want);
    }

    #[test]
    fn shuffle_matches_an_independent_splitmix64_fisher_yates() {
        // From a few lines of Python written separately (SplitMix64 checked against its published
        // first output for seed 0, 0xe220a8397b1dcdaf), for i from n-1 down to 1: j = next() % (i+1).
        let mut v: Vec<u32> = (0..11).collect();
        shuffle(&mut v, 7);
        assert_eq!(v, [8, 1, 9, 10, 6, 7, 5, 3, 0, 4, 2]);
        let mut v: Vec<u32> = (0..11).collect();
        shuffle(&mut v, 0);
        assert_eq!(v, [8, 7, 6, 5, 3, 9, 2, 4, 10, 0, 1]);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut v: Vec<u32> = (0..11).collect();
        shuffle(&mut v, 7);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, (0..11).collect::<Vec<_>>());
        let mut w: Vec<u32> = (0..11).collect();
        shuffle(&mut w, 7);
        assert_eq!(v, w);
    }
}
