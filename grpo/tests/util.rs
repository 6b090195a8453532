//! Builders shared by the test modules.

use grpo::{Batch, BatchOptions, Grouping, SampleParts};

/// A sample with `len` trained tokens and no rollout logprobs.
pub(crate) fn sample(reward: f64, len: usize) -> SampleParts {
    SampleParts {
        reward: Some(reward),
        response_length: len,
        ..SampleParts::default()
    }
}

/// One-token samples with the given rewards, grouped as asked.
pub(crate) fn reward_batch(rewards: &[f64], grouping: Grouping) -> Batch {
    let parts: Vec<_> = rewards.iter().map(|&r| sample(r, 1)).collect();
    Batch::new(
        &parts,
        &BatchOptions {
            require_rollout_log_probs: false,
            grouping,
        },
    )
    .expect("valid batch")
}
