//! Advantage estimators: group reward normalisation (slime, verl, TRL conventions), GRPO, Dr. GRPO, RLOO,
//! REINFORCE++ and its baseline variant, and masked whitening.

use std::borrow::Cow;

use crate::batch::{Batch, Groups, Ragged};
use crate::error::LossError;
use crate::input::check_finite;
use crate::stats::nanstd;

/// Whose epsilon and edge-case conventions reward normalisation follows (reference section 5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Convention {
    /// slime: `(r - mean) / (std + 1e-6)`; a group of one gets advantage 0 (std normalisation is forced
    /// off for `n = 1` and `r - mean` is then 0).
    #[default]
    Slime,
    /// verl: `(r - mean) / (std + 1e-6)`; a group of one uses mean 0 and std 1.
    Verl,
    /// TRL: NaN-aware mean and std, `(r - mean) / (std + 1e-4)`, and NaN advantages become 0 (so a group of
    /// one, whose std is NaN, gets 0).
    Trl,
}

impl Convention {
    /// The epsilon added to the standard deviation.
    pub fn epsilon(self) -> f64 {
        match self {
            Self::Slime | Self::Verl => 1e-6,
            Self::Trl => 1e-4,
        }
    }
}

/// Which standard deviation divides the centred rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdScale {
    /// The group's unbiased std (GRPO).
    #[default]
    Group,
    /// The whole batch's unbiased std with the group mean (TRL `scale_rewards="batch"`, "Lite PPO").
    Batch,
    /// No division (Dr. GRPO, `--disable-grpo-std-normalization`).
    None,
}

/// The advantage estimator (`--advantage-estimator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Estimator {
    /// Group-normalised outcome reward broadcast to every response token.
    #[default]
    Grpo,
    /// GRPO without the std division.
    DrGrpo,
    /// GRPO advantages; the sequence-level ratio is chosen in the loss with
    /// [`RatioLevel::Sequence`](crate::config::RatioLevel::Sequence).
    Gspo,
    /// GRPO advantages, for the CISPO loss.
    Cispo,
    /// Leave-one-out baseline: `n / (n - 1) * (r - mean)`, or `r` for a group of one.
    Rloo,
    /// Discounted returns of the mask-aware token rewards `-kl_coef * kl * m`, plus the reward at the last
    /// mask-1 token. slime requires `--normalize-advantages` with it: set [`AdvantageConfig::whiten`].
    ReinforcePlusPlus,
    /// Group-mean-centred reward (no std) minus `kl_coef * kl` per token. slime requires
    /// `--normalize-advantages` with it: set [`AdvantageConfig::whiten`].
    ReinforcePlusPlusBaseline,
}

impl Estimator {
    /// Every estimator, in declaration order: what the property tests range over.
    pub const ALL: [Estimator; 7] = [
        Estimator::Grpo,
        Estimator::DrGrpo,
        Estimator::Gspo,
        Estimator::Cispo,
        Estimator::Rloo,
        Estimator::ReinforcePlusPlus,
        Estimator::ReinforcePlusPlusBaseline,
    ];
}

/// Settings for [`Batch::advantages`]. The default is slime's GRPO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdvantageConfig {
    /// The estimator.
    pub estimator: Estimator,
    /// Epsilon and edge-case conventions.
    pub convention: Convention,
    /// Std used by GRPO, GSPO and CISPO (ignored by the others).
    pub std_scale: StdScale,
    /// slime's rewards normalisation; off (`--disable-rewards-normalization`) leaves rewards raw for
    /// GRPO-family and REINFORCE++-baseline estimators.
    pub normalize_rewards: bool,
    /// Discount `--gamma` for REINFORCE++.
    pub gamma: f64,
    /// `--kl-coef` for REINFORCE++ reward shaping (needs [`Batch::advantages_with_kl`]).
    pub kl_coef: f64,
    /// `--normalize-advantages`: masked whitening over the whole batch after the estimator.
    pub whiten: bool,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            estimator: Estimator::Grpo,
            convention: Convention::Slime,
            std_scale: StdScale::Group,
            normalize_rewards: true,
            gamma: 1.0,
            kl_coef: 0.0,
            whiten: false,
        }
    }
}

/// Advantages of a batch: one scalar per sample and one value per token.
///
/// GRPO-family advantages are the sample's scalar on every token; they are then kept as that scalar
/// ("broadcast") instead of a million copies, which saves writing and re-reading 4 bytes per token. Use
/// [`Advantages::tokens`] or [`Advantages::per_token`] to see them per token either way.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    per_sample: Vec<f64>,
    per_token: PerToken,
}

#[derive(Debug, Clone, PartialEq)]
enum PerToken {
    /// Every token of sample `i` has `per_sample[i] as f32`; the batch offsets are kept for layout checks.
    Broadcast(Vec<usize>),
    Values(Ragged<f32>),
}

/// Where the loss kernel reads per-token advantages from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TokenSource<'a> {
    Broadcast(&'a [f64]),
    Values(&'a [f32]),
}

impl Advantages {
    /// The scalar the estimator assigned to sample `i` before per-token shaping and whitening: the
    /// normalised reward for GRPO-family estimators, the leave-one-out advantage for RLOO, the centred reward
    /// for REINFORCE++-baseline and the raw reward for REINFORCE++.
    pub fn sample(&self, i: usize) -> f64 {
        self.per_sample[i]
    }

    /// All per-sample scalars.
    pub fn per_sample(&self) -> &[f64] {
        &self.per_sample
    }

    /// The per-token advantages of sample `i` (built on the fly when they are a broadcast scalar).
    pub fn tokens(&self, i: usize) -> Cow<'_, [f32]> {
        match &self.per_token {
            PerToken::Broadcast(offsets) => {
                Cow::Owned(vec![self.per_sample[i] as f32; offsets[i + 1] - offsets[i]])
            }
            PerToken::Values(values) => Cow::Borrowed(values.sample(i)),
        }
    }

    /// All per-token advantages in the batch layout (built on the fly when they are a broadcast scalar).
    pub fn per_token(&self) -> Cow<'_, Ragged<f32>> {
        match &self.per_token {
            PerToken::Broadcast(offsets) => {
                let values = (0..self.per_sample.len())
                    .flat_map(|i| {
                        std::iter::repeat_n(self.per_sample[i] as f32, offsets[i + 1] - offsets[i])
                    })
                    .collect();
                Cow::Owned(Ragged::from_parts(offsets.clone(), values))
            }
            PerToken::Values(values) => Cow::Borrowed(values),
        }
    }

    /// True when every token of a sample carries the sample's scalar.
    pub fn is_broadcast(&self) -> bool {
        matches!(self.per_token, PerToken::Broadcast(_))
    }

    /// The token offsets of the batch these advantages were computed for.
    pub fn offsets(&self) -> &[usize] {
        match &self.per_token {
            PerToken::Broadcast(offsets) => offsets,
            PerToken::Values(values) => values.offsets(),
        }
    }

    pub(crate) fn source(&self) -> TokenSource<'_> {
        match &self.per_token {
            PerToken::Broadcast(_) => TokenSource::Broadcast(&self.per_sample),
            PerToken::Values(values) => TokenSource::Values(values.values()),
        }
    }
}

/// Normalises rewards within groups: `(r - mean_g) / (std + eps)` with the given convention and std scale.
///
/// NaN rewards are only possible through this function (a [`Batch`] rejects them): with
/// [`Convention::Trl`] they are ignored by the statistics and their advantage is 0; with the others they
/// propagate through their group, as in slime and verl.
///
/// # Panics
/// If `groups` does not describe `rewards.len()` samples.
pub fn normalize_rewards(
    rewards: &[f64],
    groups: &Groups,
    convention: Convention,
    scale: StdScale,
) -> Vec<f64> {
    assert_eq!(
        rewards.len(),
        groups.of_sample().len(),
        "one group number per reward"
    );
    // TRL's statistics ignore NaN rewards; slime's and verl's let them propagate.
    let skip_nan = convention == Convention::Trl;
    let (mean, count) = group_means(rewards, groups, skip_nan);
    let group_std = group_stds(rewards, groups, skip_nan, &mean, &count);
    let batch_std = match scale {
        StdScale::Batch => nanstd(rewards),
        StdScale::Group | StdScale::None => f64::NAN,
    };
    rewards
        .iter()
        .zip(groups.of_sample())
        .map(|(&r, &gi)| {
            let gi = gi as usize;
            let std = match scale {
                StdScale::Group => group_std[gi],
                StdScale::Batch => batch_std,
                StdScale::None => f64::NAN,
            };
            let singleton = groups.sizes()[gi] == 1;
            normalized(r, mean[gi], std, singleton, convention, scale)
        })
        .collect()
}

/// The mean of each group and how many rewards it was taken over.
///
/// The mean is taken as `pivot + mean(r - pivot)` with the group's first (non-NaN) reward as the pivot: the
/// same value up to rounding, but exact for a constant group, whose advantages are then exactly 0 (slime's
/// plain mean gives about 1e-11 for rewards like 0.1).
fn group_means(rewards: &[f64], groups: &Groups, skip_nan: bool) -> (Vec<f64>, Vec<usize>) {
    let g = groups.count();
    let mut pivot = vec![f64::NAN; g];
    for (&r, &gi) in rewards.iter().zip(groups.of_sample()) {
        if pivot[gi as usize].is_nan() {
            pivot[gi as usize] = r;
        }
    }
    let mut sum = vec![0.0f64; g];
    let mut count = vec![0usize; g];
    for (&r, &gi) in rewards.iter().zip(groups.of_sample()) {
        if !(skip_nan && r.is_nan()) {
            sum[gi as usize] += r - pivot[gi as usize];
            count[gi as usize] += 1;
        }
    }
    let mean = sum
        .iter()
        .zip(&count)
        .zip(&pivot)
        .map(|((&s, &c), &p)| if c == 0 { f64::NAN } else { p + s / c as f64 })
        .collect();
    (mean, count)
}

/// The unbiased std of each group around `mean`; NaN for fewer than two values, as torch.
fn group_stds(
    rewards: &[f64],
    groups: &Groups,
    skip_nan: bool,
    mean: &[f64],
    count: &[usize],
) -> Vec<f64> {
    let mut ss = vec![0.0f64; groups.count()];
    for (&r, &gi) in rewards.iter().zip(groups.of_sample()) {
        if !(skip_nan && r.is_nan()) {
            let d = r - mean[gi as usize];
            ss[gi as usize] += d * d;
        }
    }
    ss.iter()
        .zip(count)
        .map(|(&s, &c)| {
            if c < 2 {
                f64::NAN
            } else {
                (s / (c - 1) as f64).sqrt()
            }
        })
        .collect()
}

/// One reward normalised by its group's `mean` and the chosen `std`, under `convention`'s edge cases.
fn normalized(
    r: f64,
    mean: f64,
    std: f64,
    singleton: bool,
    convention: Convention,
    scale: StdScale,
) -> f64 {
    let eps = convention.epsilon();
    match convention {
        Convention::Slime => {
            // A group of one is its own mean, so its advantage is exactly 0 whatever the scale (slime also
            // turns std normalisation off for n = 1).
            let centred = r - mean;
            // A batch std of a one-sample batch is undefined; leave the centred value undivided.
            if scale == StdScale::None || std.is_nan() {
                centred
            } else {
                centred / (std + eps)
            }
        }
        Convention::Verl if singleton => {
            if scale == StdScale::None {
                r
            } else {
                r / (1.0 + eps)
            }
        }
        Convention::Verl => {
            let centred = r - mean;
            if scale == StdScale::None || std.is_nan() {
                centred
            } else {
                centred / (std + eps)
            }
        }
        Convention::Trl => {
            let centred = r - mean;
            let a = if scale == StdScale::None {
                centred
            } else {
                centred / (std + eps)
            };
            if a.is_nan() { 0.0 } else { a }
        }
    }
}

/// RLOO: `n / (n - 1) * (r - mean)` within each group of `n > 1`, and `r` for a group of one.
///
/// # Panics
/// If `groups` does not describe `rewards.len()` samples.
pub fn rloo(rewards: &[f64], groups: &Groups) -> Vec<f64> {
    assert_eq!(
        rewards.len(),
        groups.of_sample().len(),
        "one group number per reward"
    );
    let mut sum = vec![0.0f64; groups.count()];
    for (&r, &gi) in rewards.iter().zip(groups.of_sample()) {
        sum[gi as usize] += r;
    }
    rewards
        .iter()
        .zip(groups.of_sample())
        .map(|(&r, &gi)| {
            let n = groups.sizes()[gi as usize];
            if n < 2 {
                r
            } else {
                r - (sum[gi as usize] - r) / (n - 1) as f64
            }
        })
        .collect()
}

/// Discounted returns of one sample for REINFORCE++: token rewards `-kl_coef * kl_t * m_t`, plus `reward` at
/// the last token with mask 1, then `G_t = r_t + gamma * G_{t+1}`. A sample with no mask-1 token gets no
/// reward (slime asserts instead; such a sample contributes nothing to any loss either way).
pub fn discounted_returns(
    reward: f64,
    kl: Option<&[f32]>,
    mask: &[u8],
    gamma: f64,
    kl_coef: f64,
    out: &mut [f32],
) {
    let last = mask.iter().rposition(|&m| m == 1);
    let mut running = 0.0f64;
    for t in (0..mask.len()).rev() {
        let mut r = match kl {
            Some(kl) => -kl_coef * f64::from(kl[t]) * f64::from(mask[t]),
            None => 0.0,
        };
        if Some(t) == last {
            r += reward;
        }
        running = r + gamma * running;
        out[t] = running as f32;
    }
}

/// Masked whitening (slime's `distributed_masked_whiten`, verl's `masked_whiten`): with the masked mean `mu`
/// and masked variance `E_m[x^2] - mu^2` (times `M / (M - 1)` when `M >= 2`), every value, masked or not,
/// becomes `(x - mu) / sqrt(var + 1e-8)`. With no mask-1 token (slime raises) the values are left as they are.
///
/// # Panics
/// If `values` and `mask` differ in length.
pub fn masked_whiten(values: &mut [f32], mask: &[u8]) {
    assert_eq!(values.len(), mask.len(), "one mask entry per value");
    let (mut s, mut s2, mut m) = (0.0f64, 0.0f64, 0usize);
    for (&x, &k) in values.iter().zip(mask) {
        if k == 1 {
            let x = f64::from(x);
            s += x;
            s2 += x * x;
            m += 1;
        }
    }
    if m == 0 {
        return;
    }
    let count = m as f64;
    let mean = s / count;
    let mut var = (s2 / count - mean * mean).max(0.0);
    if m >= 2 {
        var *= count / (count - 1.0);
    }
    let inv = 1.0 / (var + 1e-8).sqrt();
    for x in values.iter_mut() {
        *x = ((f64::from(*x) - mean) * inv) as f32;
    }
}

impl Batch {
    /// Advantages with zero per-token KL (GRPO ignores KL; REINFORCE++ then shapes with nothing).
    pub fn advantages(&self, config: &AdvantageConfig) -> Advantages {
        self.compute_advantages(config, None)
    }

    /// Advantages with a per-token KL for REINFORCE++ shaping (`kl` in the batch layout, e.g. from
    /// [`Batch::kl`](crate::Batch::kl) of the old and reference logprobs).
    pub fn advantages_with_kl(
        &self,
        config: &AdvantageConfig,
        kl: &[f32],
    ) -> Result<Advantages, LossError> {
        if kl.len() != self.num_tokens() {
            return Err(LossError::LengthMismatch {
                input: "kl",
                len: kl.len(),
                expected: self.num_tokens(),
            });
        }
        check_finite(self, "kl", kl)?;
        Ok(self.compute_advantages(config, Some(kl)))
    }

    fn compute_advantages(&self, config: &AdvantageConfig, kl: Option<&[f32]>) -> Advantages {
        let rewards = self.rewards();
        let groups = self.groups();
        let normalise = |scale| {
            if config.normalize_rewards {
                normalize_rewards(rewards, groups, config.convention, scale)
            } else {
                rewards.to_vec()
            }
        };
        let per_sample = match config.estimator {
            Estimator::Grpo | Estimator::Gspo | Estimator::Cispo => normalise(config.std_scale),
            Estimator::DrGrpo | Estimator::ReinforcePlusPlusBaseline => normalise(StdScale::None),
            Estimator::Rloo => rloo(rewards, groups),
            Estimator::ReinforcePlusPlus => rewards.to_vec(),
        };

        let shaped = match config.estimator {
            Estimator::ReinforcePlusPlus => true,
            Estimator::ReinforcePlusPlusBaseline => kl.is_some() && config.kl_coef != 0.0,
            Estimator::Grpo
            | Estimator::DrGrpo
            | Estimator::Gspo
            | Estimator::Cispo
            | Estimator::Rloo => false,
        };
        if !shaped && !config.whiten {
            return Advantages {
                per_sample,
                per_token: PerToken::Broadcast(self.offsets().to_vec()),
            };
        }
        // Written once per token (no zero fill first).
        let mut tokens = Vec::with_capacity(self.num_tokens());
        for (i, &a) in per_sample.iter().enumerate() {
            let range = self.range(i);
            match config.estimator {
                Estimator::ReinforcePlusPlus => {
                    let start = tokens.len();
                    tokens.resize(start + range.len(), 0.0);
                    discounted_returns(
                        a,
                        kl.map(|kl| &kl[range.clone()]),
                        &self.loss_mask()[range],
                        config.gamma,
                        config.kl_coef,
                        &mut tokens[start..],
                    );
                }
                Estimator::ReinforcePlusPlusBaseline if shaped => {
                    let kl = &kl.unwrap_or(&[])[range];
                    tokens.extend(
                        kl.iter()
                            .map(|&k| (a - config.kl_coef * f64::from(k)) as f32),
                    );
                }
                Estimator::ReinforcePlusPlusBaseline
                | Estimator::Grpo
                | Estimator::DrGrpo
                | Estimator::Gspo
                | Estimator::Cispo
                | Estimator::Rloo => tokens.extend(std::iter::repeat_n(a as f32, range.len())),
            }
        }
        if config.whiten {
            masked_whiten(&mut tokens, self.loss_mask());
        }
        Advantages {
            per_sample,
            per_token: PerToken::Values(self.ragged(tokens)),
        }
    }
}
