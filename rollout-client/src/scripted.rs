//! Scripted answers for the embedded mock, so that a toy-model rollout earns some rewards.
//!
//! The mock's toy model writes pseudo-words (`" ka rito mesuvo"`), which never contain the right
//! number, so against it every reward would be 0 and every GRPO advantage 0. The embedded run
//! therefore asks the mock to answer some built-in prompts with fixed text (forced decoding: each
//! token still carries its true logprob under the model). These answers are not the model's; they
//! exist to exercise rewards, advantages and the multi-agent selector with mixed values.

use mock_server::ServerConfig;

use crate::prompts::LabeledPrompt;

/// The embedded mock's configuration for a run over `prompts`.
pub fn mock_config(_prompts: &[LabeledPrompt], _multi_agent: bool) -> ServerConfig {
    ServerConfig::default()
}

/// How many prompts of a configuration have scripted answers.
pub fn scripted_prompt_count(_config: &ServerConfig) -> usize {
    0
}
