//! Scripted answers for the embedded mock, so that a toy-model rollout earns some rewards.
//!
//! The mock's toy model writes pseudo-words (`" ka rito mesuvo"`), which never contain the right
//! number, so against it every reward would be 0 and every GRPO advantage 0. The embedded run
//! therefore asks the mock to answer some prompts with fixed text (its `ScriptRule`s: forced
//! decoding, where every token still carries its true logprob under the model). These answers are
//! not the model's; they exist to exercise rewards, advantages and the multi-agent selector.
//!
//! Prompt `i` is scripted by `i % 4`: 0 and 1 answer correctly, 2 answers wrongly, 3 is left to the
//! model. In multi-agent mode the solver and rewriter of prompts 0 to 2 answer the same way, and
//! the selector says `Judgment: 1` (prompts 0 and 2) or the out-of-range `Judgment: 9` (prompt 1),
//! so every branch of the reward shaping occurs.
//!
//! A rule matches on the prompt, and the members of a GRPO group share their prompt, so a
//! scripted group answers alike: its rewards are equal and, as for any such group, its GRPO
//! advantages are 0. Mixed rewards inside a group need the model itself (or a real server).

use mock_server::ServerConfig;
use mock_server::{ScriptFinish, ScriptRule};

use rollout_client::multi_agent::{REWRITER_MARKER, SELECTOR_MARKER, SOLVER_MARKER};

use crate::prompts::LabeledPrompt;
use crate::reward::last_number;

/// How prompt `i` is scripted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    Correct,
    /// Correct answers, but the multi-agent selector names no valid candidate.
    CorrectBadJudgment,
    Wrong,
    Unscripted,
}

impl Script {
    pub fn of(i: usize) -> Script {
        match i % 4 {
            0 => Script::Correct,
            1 => Script::CorrectBadJudgment,
            2 => Script::Wrong,
            _ => Script::Unscripted,
        }
    }
}

/// A wrong answer for `label`: its number plus one, or a fixed word.
fn wrong(label: &str) -> String {
    match last_number(label).and_then(|n| n.parse::<i64>().ok()) {
        Some(n) => (n + 1).to_string(),
        None => "unknown".to_owned(),
    }
}

/// The rules for `prompts`: agent rules first (their patterns include the agent's marker), then a
/// rule on the question itself for plain rollouts.
pub fn rules(prompts: &[LabeledPrompt]) -> Vec<ScriptRule> {
    let mut agent = Vec::new();
    let mut plain = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let script = Script::of(i);
        let answer = match script {
            Script::Correct | Script::CorrectBadJudgment => p.label.clone(),
            Script::Wrong => wrong(&p.label),
            Script::Unscripted => continue,
        };
        let q = p.prompt.trim();
        let text = format!("<think>{q}</think>The answer is {answer}.");
        let judgment = match script {
            Script::CorrectBadJudgment => 9,
            Script::Correct | Script::Wrong | Script::Unscripted => 1,
        };
        let rule = |prompt_contains: String, answer: String| ScriptRule {
            prompt_contains,
            answer,
            finish_reason: ScriptFinish::Stop,
        };
        agent.push(rule(
            format!("{SELECTOR_MARKER}{q}"),
            format!("<think>Solution 1 is checked.</think>Judgment: {judgment}"),
        ));
        agent.push(rule(format!("{REWRITER_MARKER}{q}"), text.clone()));
        agent.push(rule(format!("{SOLVER_MARKER}{q}"), text.clone()));
        plain.push(rule(q.to_owned(), text));
    }
    agent.extend(plain);
    agent
}

/// The embedded mock's configuration for a run over `prompts`.
pub fn mock_config(prompts: &[LabeledPrompt]) -> ServerConfig {
    ServerConfig {
        scripted: rules(prompts),
        ..ServerConfig::default()
    }
}

/// How many prompts get scripted answers.
pub fn scripted_prompt_count(prompts: &[LabeledPrompt]) -> usize {
    (0..prompts.len())
        .filter(|&i| Script::of(i) != Script::Unscripted)
        .count()
}
