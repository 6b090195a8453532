//! Policy losses over a batch: importance ratios, KL estimates, the OPSM mask, and the fused batch loss with its metrics.
//!
//! The per-token formulas are in `token.rs`, the settings in `config.rs`, the checks of the trainer's inputs in
//! `input.rs` and the fused pass over the tokens in `kernel.rs`; this module validates a call, runs the pass
//! and aggregates its per-sample sums.

use crate::advantage::Advantages;
use crate::batch::{Batch, Ragged};
use crate::config::{PolicyLossConfig, PolicyLossKind, RatioLevel};
use crate::error::LossError;
use crate::input::{LogProbs, check_finite};
use crate::kernel::{KernelInputs, KernelParams, Sums};
use crate::stats::exp_f32;
use crate::token::{
    KlEstimator, cispo_loss, kl, ppo_clip_loss, sequence_log_ratio, sequence_ratio,
};

/// TIS metrics, aggregated like the loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TisMetrics {
    /// Mean weight (`tis`).
    pub weight: f64,
    /// Fraction of tokens whose weight was clipped (`tis_clipfrac`).
    pub clipfrac: f64,
    /// Mean `|e^d - 1|` (`tis_abs`).
    pub abs: f64,
}

/// The total loss and its metrics, each aggregated with the configured
/// [`Aggregation`](crate::aggregate::Aggregation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyLossOutput {
    /// `pg_loss - entropy_coef * entropy_loss + kl_coef * kl_loss`.
    pub loss: f64,
    /// The aggregated policy-gradient loss.
    pub pg_loss: f64,
    /// Fraction of tokens where the clip was active (`pg_clipfrac`).
    pub pg_clipfrac: f64,
    /// Aggregated `log_pi_old - log_pi` (`ppo_kl`).
    pub ppo_kl: f64,
    /// Aggregated entropy, if an entropy input was given.
    pub entropy_loss: Option<f64>,
    /// Aggregated KL to the reference, if a KL loss is configured.
    pub kl_loss: Option<f64>,
    /// TIS metrics, if TIS is on.
    pub tis: Option<TisMetrics>,
}

impl Batch {
    /// Importance ratios in the batch layout: per token, or GSPO's per-sequence ratio broadcast to the tokens.
    pub fn ratios(
        &self,
        lp: &LogProbs<'_>,
        use_rollout_log_probs: bool,
        level: RatioLevel,
    ) -> Result<Ragged<f32>, LossError> {
        let old = self.old_log_probs(lp, use_rollout_log_probs)?;
        check_finite(self, "current", lp.current)?;
        check_finite(self, "old", old)?;
        let mut out = vec![0.0f32; self.num_tokens()];
        for i in 0..self.len() {
            let r = self.range(i);
            match level {
                RatioLevel::Token => {
                    for ((o, &c), &p) in out[r.clone()]
                        .iter_mut()
                        .zip(&lp.current[r.clone()])
                        .zip(&old[r])
                    {
                        *o = exp_f32(c - p);
                    }
                }
                RatioLevel::Sequence => {
                    let s = sequence_ratio(
                        &lp.current[r.clone()],
                        &old[r.clone()],
                        &self.loss_mask()[r.clone()],
                    );
                    out[r].fill(s as f32);
                }
            }
        }
        Ok(self.ragged(out))
    }

    /// Per-token KL estimates of `log_probs` against `reference` in the batch layout. The inputs are not
    /// modified.
    pub fn kl(
        &self,
        log_probs: &[f32],
        reference: &[f32],
        estimator: KlEstimator,
    ) -> Result<Ragged<f32>, LossError> {
        self.check_len("log_probs", log_probs)?;
        self.check_len("reference", reference)?;
        check_finite(self, "log_probs", log_probs)?;
        check_finite(self, "reference", reference)?;
        let values = log_probs
            .iter()
            .zip(reference)
            .map(|(&a, &b)| kl(estimator, a - b))
            .collect();
        Ok(self.ragged(values))
    }

    /// OPSM / TRL's off-policy mask: per sample, false when its advantage is negative and the masked mean of
    /// `old - current` exceeds `delta`.
    pub fn off_policy_mask(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        use_rollout_log_probs: bool,
        delta: f64,
    ) -> Result<Vec<bool>, LossError> {
        let old = self.old_log_probs(lp, use_rollout_log_probs)?;
        check_finite(self, "current", lp.current)?;
        check_finite(self, "old", old)?;
        Ok((0..self.len())
            .map(|i| {
                let r = self.range(i);
                let kl = -sequence_log_ratio(
                    &lp.current[r.clone()],
                    &old[r.clone()],
                    &self.loss_mask()[r],
                );
                !(advantages.sample(i) < 0.0 && kl > delta)
            })
            .collect())
    }

    /// The policy loss and its metrics (reference sections R4 to R8), in one fused pass over the tokens.
    pub fn policy_loss(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
    ) -> Result<PolicyLossOutput, LossError> {
        self.run_policy_loss(advantages, lp, config, None)
    }

    /// [`Batch::policy_loss`] that also returns the per-token losses (after TIS and OPSM, before masking).
    pub fn policy_loss_with_tokens(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
    ) -> Result<(PolicyLossOutput, Ragged<f32>), LossError> {
        let mut tokens = vec![0.0f32; self.num_tokens()];
        let out = self.run_policy_loss(advantages, lp, config, Some(&mut tokens))?;
        Ok((out, self.ragged(tokens)))
    }

    /// The gradient of [`Batch::policy_loss`]'s `loss` with respect to each token's current logprob, in the
    /// batch layout (0 on masked tokens): what a trainer back-propagates into its model. For the token-level
    /// PPO loss, with dual clip and any aggregation:
    ///
    /// `d loss / d log_pi_t = w_i * m_t * dL_t/d rho_t * rho_t`, where `w_i` is the sample's aggregation
    /// weight ([`Aggregation::sample_weights`](crate::Aggregation::sample_weights)), `rho_t = exp(log_pi_t -
    /// log_pi_old_t)` and `dL/d rho = -A` where the unclipped surrogate is the loss, 0 where the clip or the
    /// dual clip sets it (and where the log-ratio clamp holds `rho`), as autograd computes it.
    ///
    /// TIS, OPSM, CISPO, GSPO's sequence ratio, a KL loss and an entropy bonus are refused
    /// ([`LossError::GradientUnsupported`]) rather than differentiated partly.
    pub fn policy_loss_gradient(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
    ) -> Result<Ragged<f64>, LossError> {
        let unsupported = [
            (config.kind != PolicyLossKind::Ppo, "CISPO"),
            (
                config.ratio_level != RatioLevel::Token,
                "a sequence-level ratio",
            ),
            (config.tis.is_some(), "TIS"),
            (config.opsm_delta.is_some(), "OPSM"),
            (config.kl_loss.is_some(), "a KL loss"),
            (config.entropy_coef != 0.0, "an entropy bonus"),
        ];
        if let Some((_, what)) = unsupported.iter().find(|(on, _)| *on) {
            return Err(LossError::GradientUnsupported(what));
        }
        let inputs = self.kernel_inputs(advantages, lp, config)?;
        check_finite(self, "current", lp.current)?;
        check_finite(self, "old", inputs.old)?;
        let params = KernelParams::new(config);
        let weights = config.aggregation.sample_weights(self);
        let mut out = vec![0.0f64; self.num_tokens()];
        for (i, &w) in weights.iter().enumerate() {
            let advantage = advantages.tokens(i);
            let r = self.range(i);
            for (k, t) in r.enumerate() {
                if self.loss_mask()[t] == 0 {
                    continue;
                }
                let delta = lp.current[t] - inputs.old[t];
                if delta.abs() > params.bound {
                    continue;
                }
                let ratio = exp_f32(delta);
                let a = advantage[k];
                let (loss, _) =
                    ppo_clip_loss(ratio, a, params.eps_low, params.eps_high, params.dual);
                // The loss is the unclipped surrogate exactly where it moves with the ratio.
                if loss == -ratio * a {
                    out[t] = w * f64::from(-a) * f64::from(ratio);
                }
            }
        }
        Ok(self.ragged(out))
    }

    fn run_policy_loss(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
        token_out: Option<&mut [f32]>,
    ) -> Result<PolicyLossOutput, LossError> {
        let inputs = self.kernel_inputs(advantages, lp, config)?;
        let params = KernelParams::new(config);
        let mut sums = Sums::new(self.len());
        let (eps_low, eps_high, dual) = (params.eps_low, params.eps_high, params.dual);
        match config.kind {
            PolicyLossKind::Ppo => self.kernel(
                &inputs,
                &params,
                &mut sums,
                token_out,
                move |ratio, adv, _| ppo_clip_loss(ratio, adv, eps_low, eps_high, dual),
            ),
            PolicyLossKind::Cispo => self.kernel(
                &inputs,
                &params,
                &mut sums,
                token_out,
                move |ratio, adv, lp| cispo_loss(ratio, adv, lp, eps_low, eps_high),
            ),
        }
        if let Some(i) = sums.ppo_kl.iter().position(|s| !s.is_finite()) {
            return Err(self.locate_non_finite(i, lp.current, inputs.old));
        }
        Ok(self.aggregate_sums(config, &sums, inputs.entropy.is_some()))
    }

    /// Checks the call before any token is read, in this order: the current and old logprobs, the
    /// advantages' layout, the dual clip, TIS's rollout logprobs, the reference and the entropy. Returns the
    /// slices the kernel reads.
    fn kernel_inputs<'a>(
        &'a self,
        advantages: &'a Advantages,
        lp: &LogProbs<'a>,
        config: &PolicyLossConfig,
    ) -> Result<KernelInputs<'a>, LossError> {
        let old = self.old_log_probs(lp, config.use_rollout_log_probs)?;
        if advantages.offsets() != self.offsets() {
            return Err(LossError::AdvantageLayout);
        }
        if let Some(c) = config.dual_clip
            && c.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err(LossError::InvalidDualClip(c));
        }
        let rollout = match config.tis {
            Some(_) if config.use_rollout_log_probs => {
                return Err(LossError::TisWithRolloutLogProbs);
            }
            Some(_) => Some(self.rollout_log_probs().ok_or(LossError::MissingInput {
                input: "rollout_log_probs",
                needed_by: "tis",
            })?),
            None => None,
        };
        let reference = match config.kl_loss {
            Some(_) => {
                let r = lp.reference.ok_or(LossError::MissingInput {
                    input: "reference",
                    needed_by: "kl_loss",
                })?;
                self.check_len("reference", r)?;
                check_finite(self, "reference", r)?;
                Some(r)
            }
            None => None,
        };
        let entropy = match lp.entropy {
            None if config.entropy_coef != 0.0 => {
                return Err(LossError::MissingInput {
                    input: "entropy",
                    needed_by: "entropy_coef",
                });
            }
            None => None,
            Some(e) => {
                self.check_len("entropy", e)?;
                check_finite(self, "entropy", e)?;
                Some(e)
            }
        };
        Ok(KernelInputs {
            current: lp.current,
            old,
            advantages: advantages.source(),
            rollout,
            reference,
            entropy,
        })
    }

    /// The loss and its metrics from the kernel's per-sample sums, each aggregated as configured.
    fn aggregate_sums(
        &self,
        config: &PolicyLossConfig,
        sums: &Sums,
        with_entropy: bool,
    ) -> PolicyLossOutput {
        let agg = |s: &[f64]| config.aggregation.reduce(self, s);
        let pg_loss = agg(&sums.pg);
        let entropy_loss = with_entropy.then(|| agg(&sums.entropy));
        let kl_loss = config.kl_loss.map(|_| agg(&sums.kl));
        let loss = pg_loss - config.entropy_coef * entropy_loss.unwrap_or(0.0)
            + config.kl_loss.map_or(0.0, |k| k.coef) * kl_loss.unwrap_or(0.0);
        PolicyLossOutput {
            loss,
            pg_loss,
            pg_clipfrac: agg(&sums.clip),
            ppo_kl: agg(&sums.ppo_kl),
            entropy_loss,
            kl_loss,
            tis: config.tis.map(|_| TisMetrics {
                weight: agg(&sums.tis_w),
                clipfrac: agg(&sums.tis_clip),
                abs: agg(&sums.tis_abs),
            }),
        }
    }
}
