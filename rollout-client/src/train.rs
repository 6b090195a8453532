//! From samples to GRPO: validated `grpo::Batch`es with rollout logprobs required, and advantages written back.
//!
//! This is the hand-off that issue #1976 broke: the samples go to the advantage computation with
//! their rollout logprobs, and the batch constructor refuses any sample without them, naming it.
//! Grouping follows slime's `_post_process_rewards`: consecutive blocks of `n_samples_per_prompt`
//! when the sample count is `n_samples_per_prompt * rollout_batch_size`, otherwise one group holding
//! the whole batch (what the multi-agent example gets, since one prompt yields 1 to 11 samples).

use grpo::{
    AdvantageConfig, Advantages, Batch, BatchError, BatchOptions, Grouping, LogProbs, LossError,
    PolicyLossConfig, SampleParts,
};
use serde_json::Value;

use crate::sample::{Reward, Sample};

/// The scalar reward of a sample: a scalar, or `reward[key]` of a keyed reward (slime's
/// `--reward-key`). `None` when absent or not a number.
pub fn reward_value(reward: Option<&Reward>, key: Option<&str>) -> Option<f64> {
    match (reward?, key) {
        (Reward::Scalar(x), _) => Some(*x),
        (Reward::Keyed(map), Some(key)) => map.get(key).and_then(Value::as_f64),
        (Reward::Keyed(_), None) => None,
    }
}

/// The grpo view of one sample: reward, lengths, mask (zeros if `remove_sample`), rollout
/// logprobs (always present: a `Sample` cannot lack them), group index and rollout id, and what the sample
/// carries of the channels (sampling logprobs, routes rows, versioned tokens) for a batch that requires them.
pub fn sample_parts(sample: &Sample, reward_key: Option<&str>) -> SampleParts {
    let loss_mask = if sample.remove_sample {
        vec![0; sample.response_length()]
    } else {
        sample.loss_mask().to_vec()
    };
    SampleParts {
        reward: reward_value(sample.reward.as_ref(), reward_key),
        response_length: sample.response_length(),
        loss_mask: Some(loss_mask),
        rollout_log_probs: Some(sample.rollout_log_probs().to_vec()),
        group_index: sample.group_index,
        rollout_id: sample.rollout_id,
        sampling_log_probs: sample.rollout_sampling_log_probs().map(<[f32]>::to_vec),
        routed_response_tokens: sample
            .rollout_routed_experts()
            .map(|r| (r.rows() + 1).saturating_sub(sample.prompt_len())),
        weight_versioned_tokens: Some(sample.weight_versioned_tokens()),
    }
}

/// slime's grouping for a rollout of `rollout_batch_size` prompts with `n_samples_per_prompt` each.
pub fn slime_options(n_samples_per_prompt: usize, rollout_batch_size: usize) -> BatchOptions {
    BatchOptions {
        require_rollout_log_probs: true,
        grouping: Grouping::SlimeBlocks {
            n_samples_per_prompt,
            rollout_batch_size,
        },
        ..BatchOptions::default()
    }
}

/// What GRPO made of a rollout.
#[derive(Debug, Clone)]
pub struct GrpoOutcome {
    pub batch: Batch,
    pub advantages: Advantages,
    /// The PPO loss at the rollout policy itself (current = old = rollout logprobs, slime's
    /// `--use-rollout-logprobs`, `eps_clip_high` 0.28 as in the multi-agent script): every ratio is
    /// 1, so this is minus the token-weighted mean advantage. It proves the loss path runs end to end
    /// on these samples; a trainer would pass its own current logprobs.
    pub loss: f64,
}

/// Why GRPO could not be computed for a rollout.
#[derive(Debug, thiserror::Error)]
pub enum GrpoError {
    #[error("the samples do not form a valid GRPO batch")]
    Batch(#[from] BatchError),
    #[error("the policy loss could not be computed")]
    Loss(#[from] LossError),
}

/// Builds the batch (rollout logprobs required), computes slime's GRPO advantages, writes each
/// sample's advantage into `extra["advantage"]`, and evaluates the loss at the rollout policy.
pub fn grpo_advantages(
    samples: &mut [Sample],
    options: &BatchOptions,
    config: &AdvantageConfig,
    reward_key: Option<&str>,
) -> Result<GrpoOutcome, GrpoError> {
    let parts: Vec<SampleParts> = samples
        .iter()
        .map(|s| sample_parts(s, reward_key))
        .collect();
    let batch = Batch::new(&parts, options)?;
    let advantages = batch.advantages(config);
    for (i, s) in samples.iter_mut().enumerate() {
        s.extra.insert(
            "advantage".to_owned(),
            serde_json::json!(advantages.sample(i)),
        );
    }
    let current: Vec<f32> = parts
        .iter()
        .flat_map(|p| p.rollout_log_probs.iter().flatten().copied())
        .collect();
    let loss_config = PolicyLossConfig {
        use_rollout_log_probs: true,
        eps_clip_high: 0.28,
        ..PolicyLossConfig::default()
    };
    let loss = batch
        .policy_loss(&advantages, &LogProbs::new(&current), &loss_config)?
        .loss;
    Ok(GrpoOutcome {
        batch,
        advantages,
        loss,
    })
}
