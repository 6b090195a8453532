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
            ..BatchOptions::default()
        },
    )
    .expect("valid batch")
}

/// Proptest's settings for a test module: 64 cases unless `PROPTEST_CASES` says otherwise, failures kept in
/// `grpo/proptest-regressions/<file>` (cargo runs tests from the package folder).
pub(crate) fn proptest_config(file: &'static str) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, FileFailurePersistence};
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..Config::default()
    }
}
