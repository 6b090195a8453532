//! Rollout steps on top of [`Client`]: single and multi-turn generation, partial-rollout resume and groups.
//!
//! These follow slime's `generate` (rl-reference section 2.2): the request re-sends the whole
//! `tokens` (prompt plus response so far), the token budget shrinks by the response length, and a
//! budget of zero marks the sample TRUNCATED without a request.

use std::future::Future;

use futures_util::future::try_join_all;

use crate::client::Client;
use crate::error::RolloutError;
use crate::request::{GenerateRequest, SamplingParams};
use crate::sample::{Sample, SampleStatus};

/// Settings shared by every generation of a rollout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutConfig {
    /// `max_new_tokens` here is the budget for the whole response, across turns.
    pub sampling_params: SamplingParams,
    /// slime's `--mask-offpolicy-in-partial-rollout`: once an aborted sample is resumed, the tokens an older
    /// weight version made get loss mask 0 ([`Sample::mask_offpolicy`]); without versions, every token it had
    /// before the resume, as in slime.
    pub mask_offpolicy_in_partial_rollout: bool,
    /// Stream each turn; the result is the same turn a non-stream call gives.
    pub stream: bool,
    /// Ask for `meta_info.routed_experts` (0.5.15 and later, a server with `--enable-return-routed-experts`):
    /// every sample then carries `rollout_routed_experts`, or the turn is an error.
    pub return_routed_experts: bool,
    /// Ask for the sampling masks (0.5.23; greedy sampling or a bounded `top_k`): every sample then carries
    /// its supports and `rollout_sampling_log_probs`, or the turn is an error.
    pub return_sampling_mask: bool,
}

/// The next request for `sample`, or `None` when its token budget is used up.
///
/// `input_ids` is the full `tokens`, and `max_new_tokens` is the configured budget minus the
/// response so far. A sample already over budget (possible when environment turns overflowed it)
/// also gets `None`.
pub fn next_request(sample: &Sample, config: &RolloutConfig) -> Option<GenerateRequest> {
    let mut params = config.sampling_params.clone();
    if let Some(budget) = params.max_new_tokens {
        let left = (budget as usize).saturating_sub(sample.response_length());
        if left == 0 {
            return None;
        }
        params.max_new_tokens = Some(left as u32);
    }
    Some(GenerateRequest {
        stream: config.stream,
        return_routed_experts: config.return_routed_experts,
        return_sampling_mask: config.return_sampling_mask,
        ..GenerateRequest::from_ids(sample.tokens().to_vec(), params)
    })
}

/// One generation turn for `sample`, appended with its logprobs.
///
/// Allowed for PENDING and ABORTED samples (resuming a partial rollout) and COMPLETED ones
/// (continuing after an environment turn). TRUNCATED and FAILED samples are refused.
pub async fn generate(
    client: &Client,
    sample: &mut Sample,
    config: &RolloutConfig,
) -> Result<(), RolloutError> {
    match sample.status {
        SampleStatus::Pending | SampleStatus::Aborted | SampleStatus::Completed => {}
        status @ (SampleStatus::Truncated | SampleStatus::Failed) => {
            return Err(RolloutError::NotGeneratable { status });
        }
    }
    let Some(req) = next_request(sample, config) else {
        sample.status = SampleStatus::Truncated;
        return Ok(());
    };
    let turn = client.generate(&req).await?;
    sample.apply_turn(&turn)?;
    Ok(())
}

/// Resumes a sample that a previous rollout aborted, keeping its partial tokens and logprobs.
/// With `mask_offpolicy_in_partial_rollout`, the tokens an older weight version made stop being trained on once
/// the resumed turn is in (the turn's spans say which version made its tokens); a refused turn masks nothing.
pub async fn resume(
    client: &Client,
    sample: &mut Sample,
    config: &RolloutConfig,
) -> Result<(), RolloutError> {
    let resumed_at = sample.response_length();
    generate(client, sample, config).await?;
    if config.mask_offpolicy_in_partial_rollout && resumed_at > 0 {
        sample.mask_offpolicy(resumed_at);
    }
    Ok(())
}

/// Output of an environment (tool call result, user turn) to splice into a multi-turn sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnvTurn {
    pub tokens: Vec<u32>,
    pub text: String,
}

/// Decides what happens after each generated turn of a multi-turn rollout.
pub trait Environment {
    /// `Some` to append non-trainable tokens and generate again, `None` to stop.
    fn step(&mut self, sample: &Sample) -> impl Future<Output = Option<EnvTurn>> + Send;
}

/// Alternates generation and environment turns until the environment stops, the budget runs out,
/// the server aborts, or `max_turns` generations happened.
pub async fn multi_turn<E: Environment>(
    client: &Client,
    sample: &mut Sample,
    config: &RolloutConfig,
    env: &mut E,
    max_turns: usize,
) -> Result<(), RolloutError> {
    for _ in 0..max_turns {
        generate(client, sample, config).await?;
        if matches!(
            sample.status,
            SampleStatus::Truncated | SampleStatus::Aborted | SampleStatus::Failed
        ) {
            return Ok(());
        }
        match env.step(sample).await {
            Some(t) => sample.append_environment(&t.tokens, &t.text)?,
            None => return Ok(()),
        }
    }
    Ok(())
}

/// `n` samples of one prompt, generated concurrently (the client's limit still applies).
///
/// Sample `i` gets `group_index`, `index = group_index * n + i` and, when `base_seed` is given,
/// `sampling_seed = base_seed + i` (slime: `rollout_seed + idx_in_group`), so a deterministic
/// server gives `n` distinct samples. The first failure fails the group and names the member.
pub async fn generate_group(
    client: &Client,
    template: &Sample,
    group_index: usize,
    n: usize,
    config: &RolloutConfig,
    base_seed: Option<u64>,
) -> Result<Vec<Sample>, RolloutError> {
    let members = (0..n).map(|i| {
        let mut sample = template.clone();
        sample.group_index = Some(group_index);
        sample.index = Some(group_index * n + i);
        let mut cfg = config.clone();
        if let Some(seed) = base_seed {
            cfg.sampling_params.sampling_seed = Some(seed.wrapping_add(i as u64));
        }
        async move {
            generate(client, &mut sample, &cfg)
                .await
                .map_err(|e| RolloutError::GroupMember {
                    group_index,
                    index: i,
                    source: Box::new(e),
                })?;
            Ok::<_, RolloutError>(sample)
        }
    });
    try_join_all(members).await
}
