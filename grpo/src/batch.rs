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

use crate::error::BatchError;

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
    /// Per response token, the sampled token's logprob renormalised over the sampler's support (SGLang's
    /// `output_token_sampling_logprobs`; 0 for untrained tokens): the behaviour policy's own probability under
    /// top-k / top-p / min-p, which [`BehaviourLogProbs::SamplingMask`] puts in the ratio.
    pub sampling_log_probs: Option<Vec<f32>>,
    /// Response tokens whose forward pass has its routed experts, when the sample carries routes: token `j` is
    /// predicted at sequence position `prompt + j - 1`, so routes of `rows` positions cover
    /// `rows + 1 - prompt` response tokens (all of them when `rows == len(tokens) - 1`, slime's shape).
    pub routed_response_tokens: Option<usize>,
    /// Response tokens whose weight version the sample knows (from `weight_versions` spans), when it knows any.
    pub weight_versioned_tokens: Option<usize>,
}

/// Which logprob of the rollout engine is the behaviour policy's in the ratio (with `use_rollout_log_probs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BehaviourLogProbs {
    /// `output_token_logprobs`: the logprob under the whole distribution at the sampling temperature.
    #[default]
    Rollout,
    /// `output_token_sampling_logprobs`: renormalised over the sampler's support, the probability the token
    /// was actually drawn with. Under top-p or top-k the whole-distribution logprob is lower by the log of the
    /// kept mass, which the ratio would carry (TRL #7269); the trainer's current logprobs must then be computed
    /// under the same support.
    SamplingMask,
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
    /// Which behaviour logprobs the batch's rollout column holds.
    pub behaviour: BehaviourLogProbs,
    /// Reject samples without routed experts covering their response (routing replay needs them).
    pub require_routed_experts: bool,
    /// Reject samples that do not know the weight version of every trained token.
    pub require_weight_versions: bool,
}

impl BatchOptions {
    /// GRPO with `n` samples per prompt in consecutive blocks, rollout logprobs required.
    pub fn grpo(n: usize) -> Self {
        Self {
            require_rollout_log_probs: true,
            grouping: Grouping::Blocks(n),
            ..Self::default()
        }
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            require_rollout_log_probs: false,
            grouping: Grouping::Single,
            behaviour: BehaviourLogProbs::Rollout,
            require_routed_experts: false,
            require_weight_versions: false,
        }
    }
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
        // The behaviour column: the rollout logprobs, or the ones renormalised over the sampling support,
        // required on every sample.
        let behaviour: Vec<SampleParts>;
        let parts = match options.behaviour {
            BehaviourLogProbs::Rollout => parts,
            BehaviourLogProbs::SamplingMask => {
                behaviour = parts
                    .iter()
                    .enumerate()
                    .map(|(sample, p)| {
                        let lp = p
                            .sampling_log_probs
                            .clone()
                            .ok_or(BatchError::MissingSamplingLogProbs { sample })?;
                        Ok(SampleParts {
                            rollout_log_probs: Some(lp),
                            ..p.clone()
                        })
                    })
                    .collect::<Result<_, BatchError>>()?;
                &behaviour
            }
        };
        let mut columns = Columns::for_parts(
            parts,
            first.rollout_log_probs.is_some()
                || options.behaviour == BehaviourLogProbs::SamplingMask,
        );
        for (sample, p) in parts.iter().enumerate() {
            columns.push(sample, p, options.require_rollout_log_probs)?;
            check_channels(sample, p, options)?;
        }
        let groups = group(parts, options.grouping)?;
        // Samples without a rollout id each get a pool of their own, as slime assigns fresh ids.
        let pools = pool_by_rollout_id(parts);
        let max_response_length = parts.iter().map(|p| p.response_length).max().unwrap_or(0);
        Ok(Self {
            offsets: columns.offsets,
            rewards: columns.rewards,
            loss_mask: columns.loss_mask,
            mask_counts: columns.mask_counts,
            rollout_log_probs: columns.log_probs,
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

/// The flat columns of a batch, filled sample by sample by [`Batch::new`].
struct Columns {
    offsets: Vec<usize>,
    rewards: Vec<f64>,
    loss_mask: Vec<u8>,
    mask_counts: Vec<u32>,
    /// `Some` exactly when sample 0 has rollout logprobs.
    log_probs: Option<Vec<f32>>,
}

impl Columns {
    /// Empty columns with room for `parts`.
    fn for_parts(parts: &[SampleParts], with_log_probs: bool) -> Columns {
        let total: usize = parts.iter().map(|p| p.response_length).sum();
        let mut offsets = Vec::with_capacity(parts.len() + 1);
        offsets.push(0);
        Columns {
            offsets,
            rewards: Vec::with_capacity(parts.len()),
            loss_mask: Vec::with_capacity(total),
            mask_counts: Vec::with_capacity(parts.len()),
            log_probs: with_log_probs.then(|| Vec::with_capacity(total)),
        }
    }

    /// Checks sample `sample` (reward, then loss mask, then rollout logprobs) and appends it.
    fn push(
        &mut self,
        sample: usize,
        p: &SampleParts,
        require_log_probs: bool,
    ) -> Result<(), BatchError> {
        let reward = p.reward.ok_or(BatchError::MissingReward { sample })?;
        if !reward.is_finite() {
            return Err(BatchError::NonFiniteReward { sample, reward });
        }
        self.rewards.push(reward);
        self.push_mask(sample, p)?;
        self.push_log_probs(sample, p, require_log_probs)?;
        self.offsets.push(self.offsets[sample] + p.response_length);
        Ok(())
    }

    /// The loss mask (all ones when absent) and its count of ones.
    fn push_mask(&mut self, sample: usize, p: &SampleParts) -> Result<(), BatchError> {
        let response_length = p.response_length;
        let Some(mask) = &p.loss_mask else {
            self.loss_mask
                .resize(self.loss_mask.len() + response_length, 1);
            self.mask_counts
                .push(u32::try_from(response_length).unwrap_or(u32::MAX));
            return Ok(());
        };
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
        self.loss_mask.extend_from_slice(mask);
        let count: usize = mask
            .chunks(255)
            // u8 sums of at most 255 ones cannot overflow, and vectorise.
            .map(|c| usize::from(c.iter().sum::<u8>()))
            .sum();
        self.mask_counts
            .push(u32::try_from(count).unwrap_or(u32::MAX));
        Ok(())
    }

    /// The rollout logprobs: present on every sample or on none (and on every one when required), one per
    /// response token, finite and `<= 0`.
    fn push_log_probs(
        &mut self,
        sample: usize,
        p: &SampleParts,
        require: bool,
    ) -> Result<(), BatchError> {
        let with_log_probs = self.log_probs.is_some();
        match (&p.rollout_log_probs, &mut self.log_probs) {
            (None, _) if require => Err(BatchError::MissingRolloutLogProbs { sample }),
            (None, None) => Ok(()),
            (lp, _) if lp.is_some() != with_log_probs => {
                Err(BatchError::InconsistentRolloutLogProbs {
                    sample,
                    present: lp.is_some(),
                    reference: 0,
                })
            }
            (Some(lp), Some(flat)) => {
                check_log_probs(sample, lp, p.response_length)?;
                flat.extend_from_slice(lp);
                Ok(())
            }
            // Unreachable: `log_probs` is `Some` exactly when sample 0 had logprobs.
            (_, _) => Err(BatchError::InconsistentRolloutLogProbs {
                sample,
                present: p.rollout_log_probs.is_some(),
                reference: 0,
            }),
        }
    }
}

/// The channels a batch requires: routed experts for the forward pass of every response token up to the last
/// trained one (the positions after it change no trained token's logits, so a tool's output at the end needs
/// none), a weight version for every trained token.
fn check_channels(
    sample: usize,
    p: &SampleParts,
    options: &BatchOptions,
) -> Result<(), BatchError> {
    if options.require_routed_experts {
        let needed = p.loss_mask.as_ref().map_or(p.response_length, |mask| {
            mask.iter()
                .rposition(|&m| m == 1)
                .map_or(0, |last| last + 1)
        });
        match p.routed_response_tokens {
            None => return Err(BatchError::MissingRoutedExperts { sample }),
            Some(routed) if routed < needed => {
                return Err(BatchError::RoutedExpertsShort {
                    sample,
                    routed,
                    needed,
                });
            }
            Some(_) => {}
        }
    }
    if options.require_weight_versions {
        let trained = p.loss_mask.as_ref().map_or(p.response_length, |mask| {
            mask.iter().filter(|&&m| m == 1).count()
        });
        let versioned = p.weight_versioned_tokens.unwrap_or(0);
        if versioned < trained {
            return Err(BatchError::MissingWeightVersions {
                sample,
                versioned,
                trained,
            });
        }
    }
    Ok(())
}

/// One rollout logprob per response token, each finite and `<= 0`.
fn check_log_probs(sample: usize, lp: &[f32], response_length: usize) -> Result<(), BatchError> {
    if lp.len() != response_length {
        return Err(BatchError::RolloutLogProbsLength {
            sample,
            len: lp.len(),
            response_length,
        });
    }
    // One branch-free pass in the common case (NaN fails both comparisons); locate the culprit only when
    // something is wrong.
    let valid = |v: f32| (v <= 0.0) & (v > f32::NEG_INFINITY);
    if lp.iter().fold(true, |ok, &v| ok & valid(v)) {
        return Ok(());
    }
    let position = lp
        .iter()
        .position(|&v| !(v.is_finite() && v <= 0.0))
        .unwrap_or(0);
    let value = lp[position];
    Err(if value.is_finite() {
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
    })
}

/// The reward-normalisation groups `grouping` asks for.
fn group(parts: &[SampleParts], grouping: Grouping) -> Result<Groups, BatchError> {
    let n = parts.len();
    Ok(match grouping {
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
    })
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
