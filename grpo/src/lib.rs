//! GRPO-family advantage estimators and policy losses over validated batches: pure, no IO, no async.
//!
//! The math follows slime, verl and TRL (see `spec/rl-reference.md`, sections 4 to 7). The only way to
//! reach it is through a [`Batch`], whose constructor checks every per-sample invariant and names the
//! offending sample, so a missing logprob (issue #1976's `NoneType` crash) becomes a [`BatchError`] at the
//! boundary instead of a crash far from the cause.
//!
//! # The rollout engine's path
//!
//! Build a batch, compute GRPO advantages (slime conventions by default), read them per sample and per
//! token, then compute the PPO loss and its metrics from the trainer's current logprobs:
//!
//! ```
//! use grpo::{AdvantageConfig, Batch, BatchOptions, LogProbs, PolicyLossConfig, SampleParts};
//!
//! // Two prompts, two samples each, in consecutive groups of n = 2.
//! let samples: Vec<SampleParts> = [1.0, 0.0, 1.0, 1.0]
//!     .iter()
//!     .map(|&reward| SampleParts {
//!         reward: Some(reward),
//!         response_length: 3,
//!         loss_mask: None, // all tokens trained
//!         rollout_log_probs: Some(vec![-0.5, -1.0, -0.25]),
//!         ..SampleParts::default()
//!     })
//!     .collect();
//! let batch = Batch::new(&samples, &BatchOptions::grpo(2))?;
//!
//! let advantages = batch.advantages(&AdvantageConfig::default());
//! assert!((advantages.sample(0) - 0.707106).abs() < 1e-6);
//! assert!(advantages.sample(2).abs() < 1e-12); // equal rewards in the second group
//! assert_eq!(advantages.tokens(1).len(), 3);
//!
//! // The trainer's current logprobs, flat in the batch layout; old = rollout logprobs, as slime's
//! // `--use-rollout-logprobs`.
//! let current = vec![-0.5f32; batch.num_tokens()];
//! let config = PolicyLossConfig { use_rollout_log_probs: true, eps_clip_high: 0.28, ..Default::default() };
//! let out = batch.policy_loss(&advantages, &LogProbs::new(&current), &config)?;
//! assert!(out.loss.is_finite() && (0.0..=1.0).contains(&out.pg_clipfrac));
//!
//! // A sample without logprobs is rejected at the boundary, naming it.
//! let mut bad = samples.clone();
//! bad[3].rollout_log_probs = None;
//! let err = Batch::new(&bad, &BatchOptions::grpo(2)).unwrap_err();
//! assert_eq!(err.to_string(), "sample 3: rollout_log_probs is missing but the batch requires rollout logprobs");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Precision
//!
//! Per-token data is `f32` (SGLang's logprobs are float32 and the trainers compute per-token losses in
//! float32; it halves the bytes streamed per token). Per-sample scalars are `f64`.
//! Reductions over tokens accumulate in `f64` across blocks of 256 tokens, with 16 `f32` partial sums of at
//! most 16 terms inside a block (relative error below 5e-7).
//!
//! # Where things are
//!
//! - `error`: [`BatchError`] and [`LossError`], at the bottom so that every module can return them.
//! - `batch`: [`SampleParts`], [`BatchOptions`], [`Batch::new`], the [`Ragged`] layout and the [`Groups`].
//! - `advantage`: [`AdvantageConfig`], [`Batch::advantages`], [`Advantages`], and the pure estimators.
//! - `input`: [`LogProbs`] (the trainer's per-token inputs), with the checks both advantages and losses
//!   run on them.
//! - `token`: the per-token functions ([`ppo_clip_loss`], [`cispo_loss`], [`kl`], [`tis_weight`],
//!   [`sequence_ratio`]); `config`: [`PolicyLossConfig`] and its parts.
//! - `kernel`: the fused pass over the tokens; `loss`: [`Batch::policy_loss`] and [`PolicyLossOutput`],
//!   [`Batch::ratios`], [`Batch::kl`], [`Batch::off_policy_mask`].
//! - `aggregate`: [`Aggregation`] and [`Batch::aggregate`].
//! - `stats`: [`nanmean`], [`nanstd`] and the vectorisable [`exp_f32`].

mod advantage;
mod aggregate;
mod batch;
mod config;
mod error;
mod input;
mod kernel;
mod loss;
mod stats;
mod token;

pub use advantage::{
    AdvantageConfig, Advantages, Convention, Estimator, StdScale, discounted_returns,
    masked_whiten, normalize_rewards, rloo,
};
pub use aggregate::Aggregation;
pub use batch::{Batch, BatchOptions, BehaviourLogProbs, Grouping, Groups, Ragged, SampleParts};
pub use config::{Dispatch, KlLoss, PolicyLossConfig, PolicyLossKind, RatioLevel};
pub use error::{BatchError, LossError};
pub use input::LogProbs;
pub use loss::{PolicyLossOutput, TisMetrics};
pub use stats::{exp_f32, nanmean, nanstd};
pub use token::{
    KlEstimator, Tis, TisMode, cispo_loss, kl, ppo_clip_loss, sequence_ratio, tis_weight,
};
