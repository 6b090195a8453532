//! The crate's two error types: why a batch was rejected ([`BatchError`]) and why a loss could not be computed ([`LossError`]).
//!
//! Both name the offending sample, position and value. They import nothing from the crate, so every module
//! can return them.

use thiserror::Error;

/// Why `Batch::new` rejected its input. Each variant names the offending sample and value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BatchError {
    /// No samples at all.
    #[error("batch is empty: at least one sample is required")]
    Empty,
    /// The reward is `None`.
    #[error("sample {sample}: reward is missing")]
    MissingReward {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// The reward is NaN or infinite.
    #[error("sample {sample}: reward is {reward}, expected a finite number")]
    NonFiniteReward {
        /// Index of the sample in the input.
        sample: usize,
        /// The offending reward.
        reward: f64,
    },
    /// Rollout logprobs are required but this sample has none.
    #[error(
        "sample {sample}: rollout_log_probs is missing but the batch requires rollout logprobs"
    )]
    MissingRolloutLogProbs {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// The batch takes its behaviour logprobs from the sampling masks and this sample has none.
    #[error(
        "sample {sample}: sampling_log_probs is missing but the batch takes its behaviour logprobs from the sampling masks"
    )]
    MissingSamplingLogProbs {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// Routed experts are required and this sample has none.
    #[error("sample {sample}: routed experts are missing but the batch requires them")]
    MissingRoutedExperts {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// The sample's routed experts stop before its last trained token.
    #[error(
        "sample {sample}: routed experts cover {routed} response tokens, training needs {needed} (through the last \
         trained token)"
    )]
    RoutedExpertsShort {
        /// Index of the sample in the input.
        sample: usize,
        /// Response tokens whose forward pass has routes.
        routed: usize,
        /// Response tokens up to and including the last one trained on.
        needed: usize,
    },
    /// Weight versions are required and the sample does not know every trained token's.
    #[error(
        "sample {sample}: the weight version of {versioned} tokens is known, {trained} are trained"
    )]
    MissingWeightVersions {
        /// Index of the sample in the input.
        sample: usize,
        versioned: usize,
        trained: usize,
    },
    /// Some samples carry rollout logprobs and others do not.
    #[error(
        "sample {sample}: rollout_log_probs is {} but sample {reference} {}; they must be present on all samples or on none",
        if *present { "present" } else { "missing" },
        if *present { "has none" } else { "has them" }
    )]
    InconsistentRolloutLogProbs {
        /// Index of the first sample that disagrees with `reference`.
        sample: usize,
        /// Whether this sample has rollout logprobs.
        present: bool,
        /// The sample whose presence set the expectation (sample 0).
        reference: usize,
    },
    /// `rollout_log_probs.len() != response_length`.
    #[error(
        "sample {sample}: rollout_log_probs has {len} entries but response_length is {response_length}"
    )]
    RolloutLogProbsLength {
        /// Index of the sample in the input.
        sample: usize,
        /// Number of logprobs given.
        len: usize,
        /// The declared response length.
        response_length: usize,
    },
    /// A rollout logprob is NaN or infinite.
    #[error("sample {sample}: rollout_log_probs[{position}] is {value}, expected a finite number")]
    NonFiniteLogProb {
        /// Index of the sample in the input.
        sample: usize,
        /// Token position within the response.
        position: usize,
        /// The offending value.
        value: f32,
    },
    /// A rollout logprob is greater than zero, which no probability can have.
    #[error("sample {sample}: rollout_log_probs[{position}] is {value}, a logprob must be <= 0")]
    PositiveLogProb {
        /// Index of the sample in the input.
        sample: usize,
        /// Token position within the response.
        position: usize,
        /// The offending value.
        value: f32,
    },
    /// `loss_mask.len() != response_length`.
    #[error(
        "sample {sample}: loss_mask has {len} entries but response_length is {response_length}"
    )]
    LossMaskLength {
        /// Index of the sample in the input.
        sample: usize,
        /// Number of mask entries given.
        len: usize,
        /// The declared response length.
        response_length: usize,
    },
    /// A loss mask entry is neither 0 nor 1.
    #[error("sample {sample}: loss_mask[{position}] is {value}, expected 0 or 1")]
    InvalidLossMask {
        /// Index of the sample in the input.
        sample: usize,
        /// Token position within the response.
        position: usize,
        /// The offending value.
        value: u8,
    },
    /// `Grouping::ByGroupIndex` was asked for but this sample has no group index.
    #[error("sample {sample}: group_index is missing but grouping is by group index")]
    MissingGroupIndex {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// A group size of zero.
    #[error("group size is 0, expected at least 1")]
    ZeroGroupSize,
    /// `Grouping::Blocks` with a sample count that is not a multiple of the group size.
    #[error("{samples} samples cannot be split into groups of {group_size}")]
    IndivisibleGroups {
        /// Number of samples in the batch.
        samples: usize,
        /// The requested group size.
        group_size: usize,
    },
}

/// Why a loss could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LossError {
    /// A per-token input does not have one entry per token of the batch.
    #[error("{input} has {len} entries but the batch has {expected} tokens")]
    LengthMismatch {
        /// Which input.
        input: &'static str,
        /// Its length.
        len: usize,
        /// The batch's token count.
        expected: usize,
    },
    /// Advantages computed for a batch with a different layout.
    #[error("advantages have a different per-sample layout from the batch")]
    AdvantageLayout,
    /// A per-token input is NaN or infinite.
    #[error("sample {sample}: {input}[{position}] is {value}, expected a finite number")]
    NonFinite {
        /// Which input.
        input: &'static str,
        /// The sample holding the token.
        sample: usize,
        /// Token position within the response.
        position: usize,
        /// The offending value.
        value: f32,
    },
    /// An input that an option needs was not given (the typed form of issue #1976's `NoneType` crash).
    #[error("{input} is required by {needed_by} but was not provided")]
    MissingInput {
        /// The absent input.
        input: &'static str,
        /// The option that needs it.
        needed_by: &'static str,
    },
    /// slime asserts that TIS and `--use-rollout-logprobs` are not combined: the weight would always be 1.
    #[error("tis cannot be combined with use_rollout_log_probs")]
    TisWithRolloutLogProbs,
    /// Dual clip needs `c > 1`.
    #[error("dual_clip is {0}, it must be greater than 1")]
    InvalidDualClip(f64),
    /// [`Batch::policy_loss_gradient`](crate::Batch::policy_loss_gradient) covers the token-level PPO loss;
    /// this option is outside it.
    #[error("the loss gradient is not available with {0}")]
    GradientUnsupported(&'static str),
}
