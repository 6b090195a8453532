//! Loss aggregation: token-mean, seq-mean-token-mean with slime's rollout pooling, seq-mean-token-sum, and
//! the constant normalisers of Dr. GRPO.

use crate::batch::Batch;
use crate::stats::masked_sum;

/// How per-token values become one scalar (`--loss-agg-mode` / `loss_type`), reference section R8.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Aggregation {
    /// `sum(x m) / max(1, sum(m))` over the whole batch (DAPO, slime `--calculate-per-token-loss`).
    TokenMean,
    /// slime's default: per rollout, `sum(x m) / max(1, sum(m))` with numerator and denominator pooled over
    /// the samples that share a rollout id, then the mean over rollouts. With one sample per rollout this
    /// is the GRPO paper's per-sequence token mean.
    #[default]
    SeqMeanTokenMean,
    /// `(1 / B) * sum_i sum_t x m`, with `B` the number of samples.
    SeqMeanTokenSum,
    /// verl's `seq-mean-token-sum-norm`: `sum(x m) / L`, with `L` the given constant or, if `None`, the
    /// longest response in the batch (the padded length).
    SeqMeanTokenSumNorm {
        /// The constant `L` (`loss_scale_factor`).
        length: Option<f64>,
    },
    /// Dr. GRPO as TRL implements it: `sum(x m) / (B * L)`, with `L` the given `max_completion_length` or,
    /// if `None`, the longest response in the batch.
    DrGrpo {
        /// The constant `L` (`max_completion_length`).
        max_len: Option<f64>,
    },
}

impl Aggregation {
    /// Reduces per-sample masked sums `sum_t x_{i,t} m_{i,t}` (one per sample of `batch`) to the scalar.
    ///
    /// # Panics
    /// If `sums.len() != batch.len()`.
    pub fn reduce(self, batch: &Batch, sums: &[f64]) -> f64 {
        assert_eq!(sums.len(), batch.len(), "one masked sum per sample");
        let b = batch.len() as f64;
        let total: f64 = sums.iter().sum();
        let padded = batch.max_response_length().max(1) as f64;
        match self {
            Self::TokenMean => {
                let tokens: f64 = batch.mask_counts().iter().map(|&c| f64::from(c)).sum();
                total / tokens.max(1.0)
            }
            Self::SeqMeanTokenMean => {
                let pools = batch.pools();
                let mut num = vec![0.0f64; pools.count()];
                let mut den = vec![0.0f64; pools.count()];
                for ((&s, &c), &p) in sums.iter().zip(batch.mask_counts()).zip(pools.of_sample()) {
                    num[p as usize] += s;
                    den[p as usize] += f64::from(c);
                }
                let per_pool: f64 = num.iter().zip(&den).map(|(&n, &d)| n / d.max(1.0)).sum();
                per_pool / pools.count() as f64
            }
            Self::SeqMeanTokenSum => total / b,
            Self::SeqMeanTokenSumNorm { length } => total / length.unwrap_or(padded),
            Self::DrGrpo { max_len } => total / (b * max_len.unwrap_or(padded)),
        }
    }
}

impl Aggregation {
    /// The coefficient of each sample's masked sum in [`Aggregation::reduce`], which is linear in them:
    /// `reduce(batch, sums) = sum_i weights[i] * sums[i]`. What the gradient of an aggregated loss needs.
    pub fn sample_weights(self, batch: &Batch) -> Vec<f64> {
        let b = batch.len() as f64;
        let padded = batch.max_response_length().max(1) as f64;
        match self {
            Self::TokenMean => {
                let tokens: f64 = batch.mask_counts().iter().map(|&c| f64::from(c)).sum();
                vec![1.0 / tokens.max(1.0); batch.len()]
            }
            Self::SeqMeanTokenMean => {
                let pools = batch.pools();
                let mut den = vec![0.0f64; pools.count()];
                for (&c, &p) in batch.mask_counts().iter().zip(pools.of_sample()) {
                    den[p as usize] += f64::from(c);
                }
                let n = pools.count() as f64;
                pools
                    .of_sample()
                    .iter()
                    .map(|&p| 1.0 / (den[p as usize].max(1.0) * n))
                    .collect()
            }
            Self::SeqMeanTokenSum => vec![1.0 / b; batch.len()],
            Self::SeqMeanTokenSumNorm { length } => {
                vec![1.0 / length.unwrap_or(padded); batch.len()]
            }
            Self::DrGrpo { max_len } => vec![1.0 / (b * max_len.unwrap_or(padded)); batch.len()],
        }
    }
}

impl Batch {
    /// Per-sample masked sums `sum_t x_{i,t} m_{i,t}` of flat per-token `values`, accumulated in `f64`.
    ///
    /// # Panics
    /// If `values.len() != self.num_tokens()`.
    pub fn masked_sums(&self, values: &[f32]) -> Vec<f64> {
        assert_eq!(values.len(), self.num_tokens(), "one value per token");
        let mut mask = Vec::new();
        (0..self.len())
            .map(|i| {
                let range = self.range(i);
                mask.clear();
                mask.extend(
                    self.loss_mask()[range.clone()]
                        .iter()
                        .map(|&m| f32::from(m)),
                );
                masked_sum(&values[range], &mask)
            })
            .collect()
    }

    /// Aggregates flat per-token `values` with `mode`.
    ///
    /// # Panics
    /// If `values.len() != self.num_tokens()`.
    pub fn aggregate(&self, values: &[f32], mode: Aggregation) -> f64 {
        mode.reduce(self, &self.masked_sums(values))
    }
}
