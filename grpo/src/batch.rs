//! The validated batch: raw per-sample parts go in, a ragged flat layout with no missing values comes out.
//!
//! [`Batch::new`] is the only way to reach the math in this crate. It checks every invariant of section R1
//! of the reference (rewards present and finite, rollout logprobs present on all samples or none, aligned
//! with `response_length` and finite and non-positive, loss masks aligned and binary, grouping consistent)
//! and returns a [`BatchError`] naming the first offending sample. Past that point `None` does not exist.
//!
//! # Precision
//!
//! Per-token data is stored as `f32`: SGLang reports logprobs as float32, slime, verl and TRL compute their
//! per-token losses in float32, and halving the bytes per token halves what a million-token batch streams
//! through memory. Per-sample scalars (rewards, advantages before broadcast) are
//! `f64`, and reductions over tokens accumulate in `f64` (see the crate documentation), so that a sum over a
//! million tokens is as precise as its `f32` terms.

use std::collections::HashMap;

use thiserror::Error;

/// Raw per-sample data as a rollout engine holds it, before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleParts {
    /// Scalar reward; `None` is rejected with [`BatchError::MissingReward`].
    pub reward: Option<f64>,
    /// Number of response tokens (the tail of the full token sequence).
    pub response_length: usize,
    /// Per response token, 1 to train and 0 to skip (tool or environment tokens). `None` means all ones,
    /// as slime materialises a missing mask.
    pub loss_mask: Option<Vec<u8>>,
    /// Per response token logprob reported by the rollout engine (SGLang's `output_token_logprobs[i][0]`).
    pub rollout_log_probs: Option<Vec<f32>>,
    /// Index of the prompt group, used by [`Grouping::ByGroupIndex`].
    pub group_index: Option<usize>,
    /// Id of the rollout execution; samples that share it are pooled by
    /// `Aggregation::SeqMeanTokenMean`. `None` means a fresh id.
    pub rollout_id: Option<u64>,
}

/// How samples form the groups over which rewards are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Consecutive blocks of `n` samples; the sample count must be a multiple of `n`.
    Blocks(usize),
    /// slime's `_post_process_rewards`: consecutive blocks of `n_samples_per_prompt` when the sample count
    /// equals `n_samples_per_prompt * rollout_batch_size`, otherwise one group holding the whole batch
    /// (what the multi-agent example of issue #1976 silently gets).
    SlimeBlocks {
        /// `--n-samples-per-prompt`.
        n_samples_per_prompt: usize,
        /// `--rollout-batch-size`.
        rollout_batch_size: usize,
    },
    /// Groups keyed by [`SampleParts::group_index`] (verl's `uid`); groups may have any sizes and need not be
    /// contiguous. Every sample must carry a group index.
    ByGroupIndex,
    /// One group holding the whole batch.
    Single,
}

/// Options checked by [`Batch::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Reject samples without rollout logprobs (slime's `--use-rollout-logprobs`, and TIS, need them).
    pub require_rollout_log_probs: bool,
    /// How samples are grouped for reward normalisation.
    pub grouping: Grouping,
}

impl BatchOptions {
    /// GRPO with `n` samples per prompt in consecutive blocks, rollout logprobs required.
    pub fn grpo(n: usize) -> Self {
        Self {
            require_rollout_log_probs: true,
            grouping: Grouping::Blocks(n),
        }
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            require_rollout_log_probs: false,
            grouping: Grouping::Single,
        }
    }
}

/// Why [`Batch::new`] rejected its input. Each variant names the offending sample and value.
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
    /// [`Grouping::ByGroupIndex`] was asked for but this sample has no group index.
    #[error("sample {sample}: group_index is missing but grouping is by group index")]
    MissingGroupIndex {
        /// Index of the sample in the input.
        sample: usize,
    },
    /// A group size of zero.
    #[error("group size is 0, expected at least 1")]
    ZeroGroupSize,
    /// [`Grouping::Blocks`] with a sample count that is not a multiple of the group size.
    #[error("{samples} samples cannot be split into groups of {group_size}")]
    IndivisibleGroups {
        /// Number of samples in the batch.
        samples: usize,
        /// The requested group size.
        group_size: usize,
    },
}

/// Per-token values for every sample of a batch in one contiguous buffer: sample `i` owns
/// `values[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ragged<T> {
    offsets: Vec<usize>,
    values: Vec<T>,
}

impl<T> Ragged<T> {
    /// Builds a ragged array; `offsets` must start at 0, be non-decreasing and end at `values.len()`.
    ///
    /// # Panics
    /// If the offsets do not describe `values`; this is a programming error, not a data error.
    pub fn from_parts(offsets: Vec<usize>, values: Vec<T>) -> Self {
        assert!(
            offsets.first() == Some(&0)
                && offsets.last() == Some(&values.len())
                && offsets.windows(2).all(|w| w[0] <= w[1]),
            "offsets {offsets:?} do not describe {} values",
            values.len()
        );
        Self { offsets, values }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values of sample `i`.
    pub fn sample(&self, i: usize) -> &[T] {
        &self.values[self.offsets[i]..self.offsets[i + 1]]
    }

    /// All values, sample after sample.
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// Mutable access to all values; the layout cannot change.
    pub fn values_mut(&mut self) -> &mut [T] {
        &mut self.values
    }

    /// The `len() + 1` offsets.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Iterates over the samples.
    pub fn iter(&self) -> impl Iterator<Item = &[T]> + '_ {
        self.offsets.windows(2).map(|w| &self.values[w[0]..w[1]])
    }

    /// Consumes the array and returns its flat values.
    pub fn into_values(self) -> Vec<T> {
        self.values
    }
}

/// Dense group assignment of the samples of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    of_sample: Vec<u32>,
    sizes: Vec<usize>,
}

impl Groups {
    /// Number of groups.
    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// Dense group number (`0..count()`) of each sample.
    pub fn of_sample(&self) -> &[u32] {
        &self.of_sample
    }

    /// Size of each group.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Consecutive blocks of `n` samples; `n` must be non-zero and divide `samples`.
    pub fn consecutive(samples: usize, n: usize) -> Result<Self, BatchError> {
        match n {
            0 => Err(BatchError::ZeroGroupSize),
            n if !samples.is_multiple_of(n) => Err(BatchError::IndivisibleGroups {
                samples,
                group_size: n,
            }),
            n => Ok(Self::blocks(samples, n)),
        }
    }

    /// Groups of consecutive blocks of `n`; `n` must divide `samples` (checked by the caller).
    fn blocks(samples: usize, n: usize) -> Self {
        let of_sample = (0..samples)
            .map(|i| u32::try_from(i / n).unwrap_or(u32::MAX))
            .collect();
        Self {
            of_sample,
            sizes: vec![n; samples / n],
        }
    }

    /// Groups keyed by arbitrary labels, numbered by first appearance.
    pub fn from_labels<K: std::hash::Hash + Eq>(labels: impl IntoIterator<Item = K>) -> Self {
        let mut dense: HashMap<K, u32> = HashMap::new();
        let mut sizes = Vec::new();
        let of_sample = labels
            .into_iter()
            .map(|label| {
                let next = u32::try_from(dense.len()).unwrap_or(u32::MAX);
                let g = *dense.entry(label).or_insert(next);
                if g as usize == sizes.len() {
                    sizes.push(0);
                }
                sizes[g as usize] += 1;
                g
            })
            .collect();
        Self { of_sample, sizes }
    }
}

/// A validated batch of samples in a ragged, flat layout. Build it with [`Batch::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    offsets: Vec<usize>,
    rewards: Vec<f64>,
    loss_mask: Vec<u8>,
    mask_counts: Vec<u32>,
    rollout_log_probs: Option<Vec<f32>>,
    groups: Groups,
    pools: Groups,
    max_response_length: usize,
}

impl Batch {
    /// Validates `parts` and lays them out contiguously. The first problem found, in sample order, is
    /// returned as a [`BatchError`] naming the sample.
    pub fn new(parts: &[SampleParts], options: &BatchOptions) -> Result<Self, BatchError> {
        let first = parts.first().ok_or(BatchError::Empty)?;
        let with_log_probs = first.rollout_log_probs.is_some();
        let total: usize = parts.iter().map(|p| p.response_length).sum();

        let mut offsets = Vec::with_capacity(parts.len() + 1);
        offsets.push(0);
        let mut rewards = Vec::with_capacity(parts.len());
        let mut loss_mask = Vec::with_capacity(total);
        let mut mask_counts = Vec::with_capacity(parts.len());
        let mut log_probs = with_log_probs.then(|| Vec::with_capacity(total));

        for (sample, p) in parts.iter().enumerate() {
            let reward = p.reward.ok_or(BatchError::MissingReward { sample })?;
            if !reward.is_finite() {
                return Err(BatchError::NonFiniteReward { sample, reward });
            }
            rewards.push(reward);

            let response_length = p.response_length;
            match &p.loss_mask {
                None => {
                    loss_mask.resize(loss_mask.len() + response_length, 1);
                    mask_counts.push(u32::try_from(response_length).unwrap_or(u32::MAX));
                }
                Some(mask) => {
                    if mask.len() != response_length {
                        return Err(BatchError::LossMaskLength {
                            sample,
                            len: mask.len(),
                            response_length,
                        });
                    }
                    // Branch-free passes that vectorise; locate the culprit only when something is wrong.
                    if mask.iter().fold(0u8, |acc, &m| acc | m) > 1 {
                        let position = mask.iter().position(|&m| m > 1).unwrap_or(0);
                        return Err(BatchError::InvalidLossMask {
                            sample,
                            position,
                            value: mask[position],
                        });
                    }
                    loss_mask.extend_from_slice(mask);
                    let count: usize = mask
                        .chunks(255)
                        // u8 sums of at most 255 ones cannot overflow, and vectorise.
                        .map(|c| usize::from(c.iter().sum::<u8>()))
                        .sum();
                    mask_counts.push(u32::try_from(count).unwrap_or(u32::MAX));
                }
            }

            match (&p.rollout_log_probs, &mut log_probs) {
                (None, _) if options.require_rollout_log_probs => {
                    return Err(BatchError::MissingRolloutLogProbs { sample });
                }
                (None, None) => {}
                (lp, _) if lp.is_some() != with_log_probs => {
                    return Err(BatchError::InconsistentRolloutLogProbs {
                        sample,
                        present: lp.is_some(),
                        reference: 0,
                    });
                }
                (Some(lp), Some(flat)) => {
                    if lp.len() != response_length {
                        return Err(BatchError::RolloutLogProbsLength {
                            sample,
                            len: lp.len(),
                            response_length,
                        });
                    }
                    // One branch-free pass in the common case (NaN fails both comparisons); locate the culprit
                    // only when something is wrong.
                    let valid = |v: f32| (v <= 0.0) & (v > f32::NEG_INFINITY);
                    if !lp.iter().fold(true, |ok, &v| ok & valid(v)) {
                        let position = lp
                            .iter()
                            .position(|&v| !(v.is_finite() && v <= 0.0))
                            .unwrap_or(0);
                        let value = lp[position];
                        return Err(if value.is_finite() {
                            BatchError::PositiveLogProb {
                                sample,
                                position,
                                value,
                            }
                        } else {
                            BatchError::NonFiniteLogProb {
                                sample,
                                position,
                                value,
                            }
                        });
                    }
                    flat.extend_from_slice(lp);
                }
                // Unreachable: `log_probs` is `Some` exactly when sample 0 had logprobs.
                (_, _) => {
                    return Err(BatchError::InconsistentRolloutLogProbs {
                        sample,
                        present: p.rollout_log_probs.is_some(),
                        reference: 0,
                    });
                }
            }
            offsets.push(offsets[sample] + response_length);
        }

        let n = parts.len();
        let groups = match options.grouping {
            Grouping::Blocks(g) => Groups::consecutive(n, g)?,
            Grouping::SlimeBlocks {
                n_samples_per_prompt: 0,
                ..
            } => return Err(BatchError::ZeroGroupSize),
            Grouping::SlimeBlocks {
                n_samples_per_prompt: g,
                rollout_batch_size: b,
            } => {
                if g.checked_mul(b) == Some(n) {
                    Groups::blocks(n, g)
                } else {
                    Groups::blocks(n, n)
                }
            }
            Grouping::ByGroupIndex => {
                let mut labels = Vec::with_capacity(n);
                for (sample, p) in parts.iter().enumerate() {
                    let g = p
                        .group_index
                        .ok_or(BatchError::MissingGroupIndex { sample })?;
                    labels.push(g as u64);
                }
                Groups::from_labels(labels)
            }
            Grouping::Single => Groups::blocks(n, n),
        };

        // Samples without a rollout id each get a pool of their own, as slime assigns fresh ids.
        let pools = pool_by_rollout_id(parts);

        let max_response_length = parts.iter().map(|p| p.response_length).max().unwrap_or(0);
        Ok(Self {
            offsets,
            rewards,
            loss_mask,
            mask_counts,
            rollout_log_probs: log_probs,
            groups,
            pools,
            max_response_length,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    /// Always false: an empty batch is rejected.
    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// Total number of response tokens over all samples.
    pub fn num_tokens(&self) -> usize {
        self.loss_mask.len()
    }

    /// The `len() + 1` token offsets: sample `i` owns tokens `offsets[i]..offsets[i + 1]`.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Token range of sample `i`.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }

    /// Raw rewards, one per sample.
    pub fn rewards(&self) -> &[f64] {
        &self.rewards
    }

    /// The flat loss mask (0 or 1 per token).
    pub fn loss_mask(&self) -> &[u8] {
        &self.loss_mask
    }

    /// Number of mask-1 tokens of each sample.
    pub fn mask_counts(&self) -> &[u32] {
        &self.mask_counts
    }

    /// The flat rollout logprobs, if the batch has them.
    pub fn rollout_log_probs(&self) -> Option<&[f32]> {
        self.rollout_log_probs.as_deref()
    }

    /// Reward-normalisation groups.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// Rollout pools: samples sharing a rollout id.
    pub fn pools(&self) -> &Groups {
        &self.pools
    }

    /// Longest response in the batch (the padded length of a dense layout).
    pub fn max_response_length(&self) -> usize {
        self.max_response_length
    }

    /// Wraps flat per-token values in this batch's layout.
    ///
    /// # Panics
    /// If `values.len() != self.num_tokens()`.
    pub fn ragged<T>(&self, values: Vec<T>) -> Ragged<T> {
        Ragged::from_parts(self.offsets.clone(), values)
    }
}

/// Pools samples that share a rollout id; a sample without one is a pool of its own.
fn pool_by_rollout_id(parts: &[SampleParts]) -> Groups {
    #[derive(Hash, PartialEq, Eq)]
    enum Key {
        Given(u64),
        Fresh(usize),
    }
    Groups::from_labels(
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| p.rollout_id.map_or(Key::Fresh(i), Key::Given)),
    )
}
